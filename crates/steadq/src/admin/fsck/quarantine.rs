//! fsck's report and `--quarantine`: each bad entry reported, and moved to
//! `quarantine/<same path>` (or, a directory not shared, shared in place) when that is safe;
//! the batch rule for a move that fails.

use super::{is_tag_mismatch, Bad, FsckReport, Problem, ProblemKind};
use crate::disk::barrier::Barrier;
use crate::disk::layout::QUARANTINE_DIR;
use crate::disk::scan::Foreign;
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::queue::{Queue, IDENTITY_FILE};
use std::os::fd::{AsFd, OwnedFd};

impl Queue {
    /// Add the bad entries to `rep`, quarantining them if asked; one problem on the identity
    /// file instead when it is the identity that is wrong (then nothing is moved).
    pub(super) fn report_bad(
        &self,
        rep: &mut FsckReport,
        mut bad: Vec<(String, String, ProblemKind)>,
        jobs_seen: u64,
        quarantine: bool,
    ) -> Result<()> {
        let mismatch = self.identity_mismatch(&bad, jobs_seen);
        if let Some(kind) = mismatch.clone() {
            bad.retain(|b| !is_tag_mismatch(&b.2));
            rep.problems.push(Problem {
                path: IDENTITY_FILE.to_string(),
                kind,
                quarantined: false,
            });
        }
        let quarantine = quarantine && self.may_move_any(&bad, mismatch.is_some());
        // Whether an entry was moved already: kept as the loop goes (looking it up in
        // `rep.problems` for every entry made a run over n bad entries cost n² steps).
        let mut moved = rep.problems.iter().any(|p| p.quarantined);
        for (dir, name, kind) in bad {
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            // The batch rule: once an entry was moved, a failure is indeterminate.
            let quarantined = quarantine
                && movable(&dir, &kind)
                && match self.deal_with(&dir, &name, &path, &kind) {
                    Ok(q) => q,
                    // Its quarantine name is taken (renamed without replacing): nothing
                    // moved, nothing else affected; reported with both paths, and the run
                    // goes on with the other entries.
                    Err(e)
                        if e.outcome() == crate::Outcome::NotDone
                            && e.errno() == Some(Errno::EXIST.into()) =>
                    {
                        let at = format!("{QUARANTINE_DIR}/{path}");
                        rep.problems.push(Problem {
                            path,
                            kind: ProblemKind::QuarantineTaken {
                                kind: Box::new(kind),
                                at,
                            },
                            quarantined: false,
                        });
                        continue;
                    }
                    // A move this user may not make did not happen: the entry is left, and
                    // reported (it failed the whole run as indeterminate, printing nothing).
                    Err(e) if crate::ops::lease::only_refused(&e) => {
                        log::warn!("{e}; left in place");
                        false
                    }
                    Err(e) if moved => return Err(e.with_outcome(crate::Outcome::Indeterminate)),
                    Err(e) => return Err(e),
                };
            rep.problems.push(Problem {
                path,
                kind,
                quarantined,
            });
            moved |= quarantined;
        }
        Ok(())
    }

    /// Whether `--quarantine` may move anything of `bad`: not with a wrong identity
    /// (`mismatch`: every check is suspect), nor with a file or a symlink at `quarantine`
    /// (never followed: every move would fail, and the first failure stopped the run with
    /// "Not a directory", listing nothing), which is warned about.
    fn may_move_any(&self, bad: &Bad, mismatch: bool) -> bool {
        let blocked = bad
            .iter()
            .any(|b| b.0.is_empty() && b.1 == QUARANTINE_DIR && b.2 == ProblemKind::NotADirectory);
        if blocked {
            log::warn!(
                "{}: not a directory (a file or a symlink, never followed): nothing was moved; \
                 move it away to quarantine",
                self.path(QUARANTINE_DIR).display()
            );
        }
        !mismatch && !blocked
    }

    /// What `--quarantine` does with bad entry `name` in `dir` (at `path`) of `kind`: a
    /// directory not shared like its siblings is shared in place, anything else is moved to
    /// `quarantine/`. `Ok(true)`: done.
    fn deal_with(&self, dir: &str, name: &str, path: &str, kind: &ProblemKind) -> Result<bool> {
        match kind {
            ProblemKind::NotShared { like, .. } => self.share_made(path, like),
            ProblemKind::Foreign(Foreign::NotUtf8) => self.quarantine(dir, name, true),
            _ => self.quarantine(dir, name, false),
        }
    }

    /// Give directory `rel` the owner (when this user may), group and mode of `like`, and
    /// make that durable (fsync of the directory). `Ok(false)`: it vanished meanwhile.
    ///
    /// `Ok(false)` too when this user may not change it (`EPERM`: neither its owner nor
    /// root), with a warning.
    ///
    /// # Errors
    /// Not done when it cannot be opened or changed; indeterminate when the fsync fails.
    fn share_made(&self, rel: &str, like: &str) -> Result<bool> {
        let root = self.dirs.root.as_fd();
        let at = |c, e, o| Cause::io(c, e, o, Some(self.path(rel)));
        // A directory this user may not even open (700, another user's) it may not change.
        let changed = match self.sys.open_dir_beneath(root, rel) {
            Ok(fd) => self
                .sys
                .copy_owner_and_mode(fd.as_fd(), root, like)
                .map(|()| fd),
            Err(Errno::NOENT) => return Ok(false),
            Err(e @ (Errno::PERM | Errno::ACCESS)) => Err(e),
            Err(e) => return Err(at(Call::Open, e, Outcome::NotDone)),
        };
        let fd = match changed {
            Ok(fd) => fd,
            Err(e @ (Errno::PERM | Errno::ACCESS)) => {
                log::warn!(
                    "{}: this user may not change its mode ({}); left as it is (run `steadq \
                     fsck --quarantine` as its owner or root)",
                    self.path(rel).display(),
                    std::io::Error::from(e)
                );
                return Ok(false);
            }
            // Counted and faulted as the `mkdirat` whose making it completes.
            Err(e) => return Err(at(Call::Mkdir, e, Outcome::NotDone)),
        };
        self.sys
            .fsync(Barrier::Quarantine, fd.as_fd())
            .map_err(|e| at(Call::Fsync, e, Outcome::Indeterminate))?;
        Ok(true)
    }

    /// Move `dir/name` to `quarantine/dir/name`; with `escaped`, `name` is a name that is
    /// not UTF-8 as `disk::name::escape_name` wrote it, moved by its bytes. False if it
    /// vanished meanwhile.
    pub(super) fn quarantine(&self, dir: &str, name: &str, escaped: bool) -> Result<bool> {
        let root = self.dirs.root.as_fd();
        let nd = |c, e, p: &str| Cause::io(c, e, Outcome::NotDone, Some(self.path(p)));
        let to = self.quarantine_dir(dir)?;
        let qdir = format!("{QUARANTINE_DIR}/{dir}");
        // `dir` empty: an entry of the root (the damaged limits file).
        let dir = if dir.is_empty() { "." } else { dir };
        let from = self
            .sys
            .open_dir_beneath(root, dir)
            .map_err(|e| nd(Call::Open, e, dir))?;
        let bytes = match escaped {
            true => crate::disk::name::unescape_name(name).unwrap_or_default(),
            false => name.as_bytes().to_vec(),
        };
        match self
            .sys
            .rename_bytes(from.as_fd(), &bytes, to.as_fd(), &bytes)
        {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(nd(Call::Rename, e, &format!("{dir}/{name}"))),
        }
        let ind = |e, p: &str| {
            Cause::io(
                Call::FsyncDir,
                e,
                Outcome::Indeterminate,
                Some(self.path(p)),
            )
        };
        self.barrier(Barrier::Quarantine, to.as_fd())
            .map_err(|e| ind(e, &qdir))?;
        self.barrier(Barrier::Quarantine, from.as_fd())
            .map_err(|e| ind(e, dir))?;
        Ok(true)
    }

    /// `quarantine/<dir>`, made one level at a time beneath the root: each level is opened
    /// without following a symlink (a planted `quarantine/ready -> /etc` is refused, not
    /// followed), and each directory this makes is made durable by an fsync of its parent
    /// before anything is moved into it.
    fn quarantine_dir(&self, dir: &str) -> Result<OwnedFd> {
        let mut rel = String::new();
        let mut parent = self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), ".")
            .map_err(|e| Cause::io(Call::Open, e, Outcome::NotDone, Some(self.path("."))))?;
        for part in std::iter::once(QUARANTINE_DIR).chain(dir.split('/').filter(|p| !p.is_empty()))
        {
            if !rel.is_empty() {
                rel.push('/');
            }
            rel.push_str(part);
            let at = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel)));
            let made = match self.sys.mkdir(parent.as_fd(), part) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(e) => return Err(at(Call::Mkdir, e)),
            };
            let child = self
                .sys
                .open_dir_beneath(parent.as_fd(), part)
                .map_err(|e| at(Call::Open, e))?;
            if made {
                // Shared like dead/ (owner, group, mode, setgid), not left at the umask of
                // whoever ran fsck first: the next user's `fsck --quarantine` moves into it.
                self.share_like(child.as_fd(), crate::disk::layout::DEAD_DIR, &rel);
                self.barrier(Barrier::Quarantine, parent.as_fd())
                    .map_err(|e| {
                        Cause::io(
                            Call::FsyncDir,
                            e,
                            Outcome::Indeterminate,
                            Some(self.path(&rel)),
                        )
                    })?;
            }
            parent = child;
        }
        Ok(parent)
    }
}

/// Whether `--quarantine` may deal with a bad entry in `dir` of `kind`. Not a root entry
/// (but a root directory not shared is shared in place); not a directory holding jobs; not
/// a default-level or receipt shard that is not a directory (moved away, the queue would be
/// incomplete: the operator replaces it, `steadq init` remakes it); nor an entry this user
/// cannot read: it is not known to be bad (a valid job of another user at mode 600 was
/// moved out of the queue, and nothing ran it).
fn movable(dir: &str, kind: &ProblemKind) -> bool {
    let shard_entry = *kind == ProblemKind::NotADirectory
        && (dir == crate::disk::layout::READY_DIR || dir == crate::disk::layout::RECEIPTS_DIR);
    (!dir.is_empty() || matches!(kind, ProblemKind::NotShared { .. }))
        && !shard_entry
        && !matches!(
            kind,
            ProblemKind::JobsInside(_) | ProblemKind::Unreadable(_) | ProblemKind::UnreadableDir(_)
        )
}
