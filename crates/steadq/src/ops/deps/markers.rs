//! Dependencies, the markers: `waiting/`, `needs/<D>/<X>` and `after/<X>/<D>` made on first
//! use, made durable, listed and removed.

use super::marker_id;
use crate::disk::barrier::Barrier;
use crate::disk::layout::{AFTER_DIR, NEEDS_DIR, READY_DIR, WAITING_DIR};
use crate::disk::name::JobId;
use crate::disk::state::State;
use crate::disk::sys::{Call, EntryType, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::ops::enqueue::DirRef;
use crate::ops::transition::Place;
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

impl Queue {
    /// `<root>/<name>` (`waiting`, `needs`, `after`), made (and the root fsynced) with
    /// `make` when missing; `None` when missing and not `make`.
    pub(crate) fn deps_dir(&self, name: &str, make: bool) -> Result<Option<OwnedFd>> {
        let root = self.dirs.root.as_fd();
        self.deps_sub(root, name, name, make)
    }

    /// Directory `name` of `parent` (`rel` from the root), made and `parent` fsynced with
    /// `make` when missing; `None` when missing and not `make`. Not done on failure.
    pub(super) fn deps_sub(
        &self,
        parent: BorrowedFd<'_>,
        name: &str,
        rel: &str,
        make: bool,
    ) -> Result<Option<OwnedFd>> {
        let err = |(c, e)| Cause::io(c, e, Outcome::NotDone, Some(self.path(rel)));
        if !make {
            return match self.sys.open_dir_beneath(parent, name) {
                Ok(fd) => Ok(Some(fd)),
                Err(Errno::NOENT) => Ok(None),
                Err(e) => Err(err((Call::Open, e))),
            };
        }
        let (fd, origin) = self.made_dir(parent, name, rel).map_err(err)?;
        if origin == crate::ops::making::Origin::MadeHere {
            self.share_like(fd.as_fd(), READY_DIR, rel);
            self.barrier(Barrier::DepsMarker, parent)
                .map_err(|e| err((Call::FsyncDir, e)))?;
        }
        Ok(Some(fd))
    }

    /// `waiting/` as a place (made when `make`).
    pub(crate) fn place_waiting(&self, make: bool) -> Result<Option<Place<'_>>> {
        Ok(self.deps_dir(WAITING_DIR, make)?.map(|fd| Place {
            dir: DirRef::Opened(fd),
            rel: crate::disk::layout::dir_rel(format_args!("{WAITING_DIR}")),
            state: State::Waiting,
        }))
    }

    /// Step (1) of an enqueue after `open`: `needs/<d>/<x>` and `after/<x>/<d>` for each,
    /// made durable. Not done on failure (the markers made are removed, best effort).
    pub(crate) fn make_markers(&self, d: JobId, open: &[JobId]) -> Result<()> {
        let r = self.make_markers_inner(d, open);
        if r.is_err() {
            self.forget_markers(d, open);
        }
        r
    }

    pub(super) fn make_markers_inner(&self, d: JobId, open: &[JobId]) -> Result<()> {
        let needs = self.deps_dir(NEEDS_DIR, true)?.expect("made");
        let after = self.deps_dir(AFTER_DIR, true)?.expect("made");
        let dh = d.to_string();
        let rel_d = format!("{NEEDS_DIR}/{dh}");
        let nd = self
            .deps_sub(needs.as_fd(), &dh, &rel_d, true)?
            .expect("made");
        for x in open {
            let xh = x.to_string();
            self.marker(nd.as_fd(), &xh, &format!("{rel_d}/{xh}"))?;
            let rel_x = format!("{AFTER_DIR}/{xh}");
            // X's ack removes an empty `after/<x>/` (its follow-up, or recovery's): between
            // this open and the marker's creation that gives `ENOENT`, so both are tried
            // again (a few times; once the marker is in, the directory is not empty and
            // stays).
            let mut tries = 0;
            let ax = loop {
                let r = self
                    .deps_sub(after.as_fd(), &xh, &rel_x, true)
                    .and_then(|ax| {
                        let ax = ax.expect("made");
                        self.marker(ax.as_fd(), &dh, &format!("{rel_x}/{dh}"))?;
                        Ok(ax)
                    });
                match r {
                    Err(e) if e.errno() == Some(Errno::NOENT.into()) && tries < 8 => tries += 1,
                    r => break r?,
                }
            };
            self.barrier(Barrier::DepsMarker, ax.as_fd()).map_err(|e| {
                Cause::io(Call::FsyncDir, e, Outcome::NotDone, Some(self.path(&rel_x)))
            })?;
        }
        self.barrier(Barrier::DepsMarker, nd.as_fd())
            .map_err(|e| Cause::io(Call::FsyncDir, e, Outcome::NotDone, Some(self.path(&rel_d))))
    }

    /// An empty marker file `name` in `dir` (one already there is fine).
    pub(super) fn marker(&self, dir: BorrowedFd<'_>, name: &str, rel: &str) -> Result<()> {
        match self.sys.create_file(dir, name) {
            Ok(_) | Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(Cause::io(
                Call::Open,
                e,
                Outcome::NotDone,
                Some(self.path(rel)),
            )),
        }
    }

    /// Remove `needs/<d>/<x>` and `after/<x>/<d>` for each `x` of `xs`, then `needs/<d>/`
    /// when empty; best effort (what stays is harmless: `fsck` lists it).
    pub(crate) fn forget_markers(&self, d: JobId, xs: &[JobId]) {
        let dh = d.to_string();
        if let Ok(Some(needs)) = self.deps_dir(NEEDS_DIR, false) {
            if let Ok(Some(nd)) = self.deps_sub(needs.as_fd(), &dh, NEEDS_DIR, false) {
                for x in xs {
                    let _ = self.sys.unlink(nd.as_fd(), &x.to_string());
                }
            }
            let _ = self.sys.rmdir(needs.as_fd(), &dh);
        }
        if let Ok(Some(after)) = self.deps_dir(AFTER_DIR, false) {
            for x in xs {
                let xh = x.to_string();
                if let Ok(Some(ax)) = self.deps_sub(after.as_fd(), &xh, AFTER_DIR, false) {
                    let _ = self.sys.unlink(ax.as_fd(), &dh);
                }
                let _ = self.sys.rmdir(after.as_fd(), &xh);
            }
        }
    }

    /// The ids listed as markers in `<root>/<top>/<id>/` (`needs/<d>` or `after/<x>`);
    /// empty when the directory is missing. Hostile entries are skipped.
    pub(crate) fn markers(&self, top: &str, id: JobId) -> Result<Vec<JobId>> {
        let Some(t) = self.deps_dir(top, false)? else {
            return Ok(Vec::new());
        };
        let rel = format!("{top}/{id}");
        let Some(dir) = self.deps_sub(t.as_fd(), &id.to_string(), &rel, false)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let listed = self
            .sys
            .read_dir(dir.as_fd(), |n, _, t| match marker_id(n, t) {
                Some(x) if t != EntryType::Dir => out.push(x),
                _ => log::warn!(
                    "{rel}/{}: not a dependency marker; skipped",
                    n.unwrap_or("?")
                ),
            });
        match listed {
            Ok(()) => Ok(out),
            // Removed between its opening and its listing (`ENOENT` from getdents64 or from
            // opening "." of a removed directory): another process promoted the job
            // (`needs/<d>` goes) or finished an ack's follow-up (`after/<x>` goes). As missing.
            Err(Errno::NOENT) => Ok(Vec::new()),
            Err(e) => Err(self.read_dir_error(e, &rel)),
        }
    }

    /// Unlink marker `<top>/<a>/<b>`; a marker already gone is fine.
    pub(super) fn unmark(&self, top: &str, a: JobId, b: JobId) -> Result<()> {
        let rel = format!("{top}/{a}/{b}");
        let Some(t) = self.deps_dir(top, false)? else {
            return Ok(());
        };
        let Some(dir) = self.deps_sub(t.as_fd(), &a.to_string(), &rel, false)? else {
            return Ok(());
        };
        match self.sys.unlink(dir.as_fd(), &b.to_string()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(Cause::io(
                Call::Unlink,
                e,
                Outcome::NotDone,
                Some(self.path(&rel)),
            )),
        }
    }
}
