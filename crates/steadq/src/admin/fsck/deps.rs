//! fsck's check of the dependency directories (`ops/deps.rs`): `waiting/` holds regular job
//! files under this queue's ready names (verified like any job); `needs/` and `after/` hold
//! directories named by a job id, each holding empty regular files named by a job id.
//! Anything else (a symlink, a fifo, a forged name) is reported and skipped, never followed.

use super::{not_utf8, push_odd, Bad, FsckReport};
use super::{Problem, ProblemKind};
use crate::admin::view::Load;
use crate::disk::layout::{AFTER_DIR, NEEDS_DIR, WAITING_DIR};
use crate::disk::name::{JobId, JobName, Kind, NameError};
use crate::disk::scan::Foreign;
use crate::disk::sys::{EntryType, Errno};
use crate::error::Result;
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd};

/// Whether `n` is a 32-hex job id as SteadQ writes it (lowercase).
fn is_id(n: &str) -> bool {
    JobId::parse(n).is_some_and(|id| id.to_string() == n)
}

impl Queue {
    /// Check `waiting/`, `needs/` and `after/` (each absent until first use).
    pub(super) fn check_deps(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        let root = self.dirs.root.as_fd();
        if let Ok(w) = self.sys.open_dir_beneath(root, WAITING_DIR) {
            self.check_waiting(w.as_fd(), rep, bad)?;
        }
        for top in [NEEDS_DIR, AFTER_DIR] {
            let Ok(t) = self.sys.open_dir_beneath(root, top) else {
                continue; // absent; a file or symlink there is the root check's
            };
            let subs = self.check_marker_dir(t.as_fd(), top, true, rep, bad)?;
            for sub in subs {
                let rel = format!("{top}/{sub}");
                match self.sys.open_dir_beneath(t.as_fd(), &sub) {
                    Ok(fd) => {
                        self.check_marker_dir(fd.as_fd(), &rel, false, rep, bad)?;
                    }
                    Err(Errno::NOENT) => {}
                    // A directory this user may not open is named as one, not as a symlink.
                    Err(e @ (Errno::ACCESS | Errno::PERM)) => {
                        bad.push((top.to_string(), sub, ProblemKind::UnreadableDir(e.into())))
                    }
                    Err(_) => bad.push((top.to_string(), sub, ProblemKind::NotRegular("symlink"))),
                }
            }
        }
        Ok(())
    }

    /// The waiting jobs: this queue's ready names, regular files that verify.
    fn check_waiting(&self, w: BorrowedFd<'_>, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        let (mut odd, mut wild, mut jobs) = (Vec::new(), Vec::new(), Vec::new());
        self.sys
            .read_dir(w, |name, raw, t| {
                rep.checked += 1;
                match name.map(|n| (n, JobName::parse(n, self.ident.id))) {
                    Some((n, Ok(j))) if j.kind == Kind::Ready && t != EntryType::Dir => {
                        jobs.push((n.to_string(), j))
                    }
                    _ => push_odd(&mut odd, &mut wild, name, raw),
                }
            })
            .map_err(|e| self.read_dir_error(e, WAITING_DIR))?;
        not_utf8(bad, WAITING_DIR, wild);
        for name in odd {
            let kind = ProblemKind::Foreign(Foreign::Name(NameError::Syntax));
            bad.push((
                WAITING_DIR.to_string(),
                name.clone(),
                self.typed(w, &name, kind),
            ));
        }
        for (name, j) in jobs {
            let kind = match self.load_job(w, &name, j.id.0) {
                Ok(_) => {
                    rep.verified += 1;
                    continue;
                }
                Err(Load::Missing) => continue,
                Err(Load::Corrupt(c)) => ProblemKind::Corrupt(c),
                Err(Load::Io(_, e)) if e == Errno::LOOP || e == Errno::NXIO => {
                    self.typed(w, &name, ProblemKind::Foreign(Foreign::NotRegular))
                }
                Err(Load::Io(_, e)) => ProblemKind::Unreadable(e.into()),
            };
            bad.push((WAITING_DIR.to_string(), name, kind));
        }
        Ok(())
    }

    /// One marker directory (`dir`, `rel` from the root): with `dirs`, its entries must be
    /// directories named by an id (returned, to be checked in turn); without, empty regular
    /// files named by an id. The rest is reported.
    fn check_marker_dir(
        &self,
        dir: BorrowedFd<'_>,
        rel: &str,
        dirs: bool,
        rep: &mut FsckReport,
        bad: &mut Bad,
    ) -> Result<Vec<String>> {
        let (mut odd, mut wild, mut good) = (Vec::new(), Vec::new(), Vec::new());
        self.sys
            .read_dir(dir, |name, raw, t| {
                rep.checked += 1;
                let typed = match t {
                    EntryType::Dir => dirs,
                    EntryType::File => !dirs,
                    EntryType::Unknown => true, // looked at below
                    EntryType::Other => false,
                };
                match name.filter(|n| is_id(n) && typed) {
                    Some(n) => good.push(n.to_string()),
                    None => push_odd(&mut odd, &mut wild, name, raw),
                }
            })
            .map_err(|e| self.read_dir_error(e, rel))?;
        not_utf8(bad, rel, wild);
        for name in odd {
            let kind = ProblemKind::Foreign(Foreign::Name(NameError::Syntax));
            bad.push((rel.to_string(), name.clone(), self.typed(dir, &name, kind)));
        }
        let want = if dirs {
            rustix::fs::FileType::Directory
        } else {
            rustix::fs::FileType::RegularFile
        };
        good.retain(|n| match self.sys.stat_nofollow(dir, n) {
            Ok(m) if m.file_type == want && (dirs || m.size == 0) => true,
            Ok(m) if m.file_type == want => {
                // Still a marker (its name is what counts): reported, left in place.
                rep.problems.push(Problem {
                    path: format!("{rel}/{n}"),
                    kind: ProblemKind::Damaged(
                        "a dependency marker holds bytes (markers are empty files); it still \
                         counts as a marker, left in place",
                    ),
                    quarantined: false,
                });
                true
            }
            Ok(_) => {
                let kind = ProblemKind::Foreign(Foreign::NotRegular);
                bad.push((rel.to_string(), n.clone(), self.typed(dir, n, kind)));
                false
            }
            Err(_) => false,
        });
        Ok(good)
    }
}
