//! A move between directories that a crash split in two: both names survived, as two links
//! of one file.
//!
//! SteadQ never gives a job file a second name: every transition is a `renameat2`, which the
//! running kernel makes atomic. A crash can still leave both names of a move between two
//! directories: the block rig (crashlab, btrfs on the Debian 6.1 kernel, three threads of one
//! handle) found, in 1 of 1,825 crash states, a lease in `ready/01` and its receipt in
//! `receipts/01`, one file with link count 2, after an ack that had not returned (log replay
//! kept the receipt's new entry and the lease's old one; DESIGN.md, "Moves split by a
//! crash"). Left alone, the lease would be recovered and its job run again beside a receipt
//! that says it was acked, and the two names would stay.
//!
//! So recovery (a lease's expiry, a delayed job's promotion: the moves made on behalf of a
//! caller that is gone) looks at the link count of the name it is about to move. Above 1, it
//! looks for the job's other names, same device and inode, in the directories a move could
//! have reached (the job's ready slot, its receipt shard, every delayed and dead bucket). The
//! newest generation is the state the split move reached: it is kept, and every older name
//! is unlinked. The split move had not returned to its caller (its outcome was
//! indeterminate); it is taken as done. A second link found nowhere there (a hard link
//! someone made) changes nothing: the move goes on, with a warning.

use crate::disk::layout::{receipts_shard, DEAD_DIR, DELAYED_DIR};
use crate::disk::name::JobName;
use crate::disk::sys::{Call, Errno};
use crate::error::{Error, Outcome, Result};
use crate::ops::enqueue::DirRef;
use crate::ops::state::State;
use crate::ops::transition::Place;
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Whether a name of this kind belongs in a directory a move could have reached.
/// The states whose names belong in a candidate directory (one or two).
type Fits = (State, State);

/// The directories a move could have reached, opened (relative path, fd), and the job's
/// names found in them: `(index into dirs, entry name, generation)`.
struct Found {
    dirs: Vec<(String, OwnedFd)>,
    names: Vec<(usize, String, u64)>,
}

impl Queue {
    /// Settle a split move before recovery moves `n` out of `from`. `Ok(true)`: `n` was the
    /// older half of a split and is gone (nothing more to move); `Ok(false)`: move it as
    /// usual (any older halves found elsewhere were removed).
    ///
    /// # Errors
    /// [`crate::ErrorKind::Io`], not done, when a listing or unlink fails; the split stays
    /// for the next recovery.
    pub(crate) fn settle_split(&self, from: &Place<'_>, n: &JobName) -> Result<bool> {
        let name = n.format(self.ident.id);
        let Ok(m) = self.sys.stat_nofollow(from.dir.fd(), &name) else {
            return Ok(false); // gone meanwhile: the move says so
        };
        let (links, file) = (m.links, m.file);
        if links < 2 {
            return Ok(false);
        }
        let found = self.other_names(n, &name, file)?;
        let Some((i, newest, generation)) = found.names.iter().max_by_key(|o| o.2) else {
            return Ok(false); // a link someone made elsewhere: recovered as usual
        };
        let (rel, dir) = &found.dirs[*i];
        if *generation > n.generation {
            // The newer name was there when the filesystem was mounted: make sure it stays
            // before the older one goes.
            self.dir_barrier(&DirRef::Held(dir.as_fd())).map_err(|e| {
                Error::io(Call::FsyncDir, e, Outcome::NotDone, Some(self.path(rel)))
            })?;
            self.unlink_split(from.dir.fd(), &from.rel, &name, rel, newest)?;
            return Ok(true);
        }
        for (i, other, _) in &found.names {
            let (rel, dir) = &found.dirs[*i];
            self.unlink_split(dir.as_fd(), rel, other, &from.rel, &name)?;
        }
        Ok(false)
    }

    /// Unlink `name` in `dir` (at `rel`), the older half of a split whose newer half is
    /// `kept` at `kept_rel`, and say so.
    fn unlink_split(
        &self,
        dir: BorrowedFd<'_>,
        rel: &str,
        name: &str,
        kept_rel: &str,
        kept: &str,
    ) -> Result<()> {
        let path = format!("{rel}/{name}");
        // Not done if the unlink fails; indeterminate if only its barrier does.
        let r = match self.sys.unlink(dir, name) {
            Ok(()) | Err(Errno::NOENT) => self
                .dir_barrier(&DirRef::Held(dir))
                .map_err(|e| (Call::FsyncDir, e, Outcome::Indeterminate)),
            Err(e) => Err((Call::Unlink, e, Outcome::NotDone)),
        };
        r.map_err(|(c, e, o)| Error::io(c, e, o, Some(self.path(&path))))?;
        log::warn!("{path}: split move; kept {kept_rel}/{kept}");
        Ok(())
    }

    /// The other names of job `n` (entry `name`, file `file` = `(st_dev, st_ino)`) in the
    /// directories a move could reach: its ready slot, its receipt shard, every delayed and
    /// dead bucket. Entries that are not names of this job, or another file, are left out.
    fn other_names(&self, n: &JobName, name: &str, file: (u64, u64)) -> Result<Found> {
        let nd = |c, e, rel: &str| Error::io(c, e, Outcome::NotDone, Some(self.path(rel)));
        let slot = self.ident.slot_of(n);
        let shard = n.id.shard(self.ident.shards);
        // Candidate directories as (relative path, parent, entry): opened one at a time and
        // kept open only when they hold a name of this job, so a queue with more delayed or
        // dead buckets than the open-file limit still settles (one fd per bucket would not).
        // Each with the kinds of name a move can leave there: a name of another kind is
        // misplaced (fsck reports it), never the state a split move reached.
        let mut cands: Vec<(String, BorrowedFd<'_>, String, Fits)> = Vec::new();
        if let Some(fd) = self.slot_fd(slot) {
            let rel = self.ident.slot_dir_rel(slot).to_string();
            cands.push((rel, fd, ".".into(), (State::Ready, State::Leased)));
        }
        let receipts = self.dirs.receipts[shard as usize].as_fd();
        cands.push((
            receipts_shard(shard).to_string(),
            receipts,
            ".".into(),
            (State::Acked, State::Acked),
        ));
        for (top, fd, fits) in [
            (
                DELAYED_DIR,
                &self.dirs.delayed,
                (State::Delayed, State::Delayed),
            ),
            (DEAD_DIR, &self.dirs.dead, (State::Dead, State::Dead)),
        ] {
            let buckets = self
                .names_in(fd.as_fd(), "", "")
                .map_err(|e| nd(Call::ReadDir, e, top))?;
            for b in buckets {
                cands.push((format!("{top}/{b}"), fd.as_fd(), b, fits));
            }
        }
        let id = n.id.to_string();
        let mut dirs: Vec<(String, OwnedFd)> = Vec::new();
        let mut names = Vec::new();
        for (rel, parent, entry, fits) in cands {
            let dir = match self.sys.open_dir_beneath(parent, &entry) {
                Ok(d) => d,
                // Not a directory (or a symlink), or gone: no job of ours there.
                Err(Errno::NOTDIR | Errno::LOOP | Errno::NOENT) if entry != "." => continue,
                // Any other failure (no descriptor left, no permission) may hide the newer
                // name: not done, the split stays for the next recovery.
                Err(e) => return Err(nd(Call::Open, e, &rel)),
            };
            let seen = self
                .names_in(dir.as_fd(), &id, name)
                .map_err(|e| nd(Call::ReadDir, e, &rel))?;
            let before = names.len();
            for e in seen {
                let Ok(other) = JobName::parse(&e, self.ident.id) else {
                    continue; // not a name of this queue: fsck reports it
                };
                let same = self
                    .sys
                    .stat_nofollow(dir.as_fd(), &e)
                    .is_ok_and(|m| m.file == file);
                let state = crate::disk::scan::state_of(&other.kind);
                if other.id == n.id && (state == fits.0 || state == fits.1) && same {
                    names.push((dirs.len(), e, other.generation));
                }
            }
            if names.len() > before {
                dirs.push((rel, dir));
            }
        }
        Ok(Found { dirs, names })
    }

    /// The UTF-8 names in `dir` that start with `prefix`, except `skip` (one listing helper for
    /// both uses: every instance of the generic `Sys::read_dir` costs appliance bytes).
    fn names_in(
        &self,
        dir: BorrowedFd<'_>,
        prefix: &str,
        skip: &str,
    ) -> core::result::Result<Vec<String>, Errno> {
        let mut out = Vec::new();
        self.sys.read_dir(dir, |e, _, _| {
            out.extend(
                e.filter(|e| e.starts_with(prefix) && *e != skip)
                    .map(str::to_string),
            )
        })?;
        Ok(out)
    }
}
