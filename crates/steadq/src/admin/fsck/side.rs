//! fsck's check of the files beside the jobs: the limits file, the evidence log, and
//! `keys/`.

use super::{not_utf8, push_odd, Bad, FsckReport, Problem, ProblemKind};
use crate::disk::name::NameError;
use crate::disk::scan::Foreign;
use crate::disk::sys::{Call, EntryType, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::queue::Queue;
use std::os::fd::AsFd;

impl Queue {
    /// `steadq.limits`, when present, must decode: a damaged one fails every enqueue. With
    /// `quarantine` a damaged one is moved to `quarantine/steadq.limits` (the queue then has
    /// no limits, which is warned about).
    ///
    /// # Errors
    /// Indeterminate when its move may have happened but could not be made durable; a move
    /// not done leaves it in place, with a warning.
    pub(super) fn check_limits(&self, rep: &mut FsckReport, quarantine: bool) -> Result<()> {
        let kind = match self.limits() {
            Ok(_) => return Ok(()),
            Err(e) if *e.kind() == crate::ErrorKind::BadLimits => {
                let kind = ProblemKind::Damaged(
                    "the capacity limits file does not decode (checksum, syntax, or a group \
                     line), and every enqueue fails until it is fixed, and jobs of groups \
                     wait: set the limits again (`steadq init DIR --max-jobs N|none \
                     --max-bytes N|none`, then `steadq limit DIR --group G --max-leased N`; \
                     each replaces the damaged file), or move it aside with `steadq fsck \
                     --quarantine`",
                );
                if quarantine {
                    return self.quarantine_limits(rep, kind);
                }
                kind
            }
            Err(e) => match (e.kind(), e.errno()) {
                // Opened without following: a symlink (or a fifo) in its place is named by
                // its type, not "unreadable: Too many levels of symbolic links".
                (_, Some(x))
                    if x == Errno::LOOP.into()
                        || x == Errno::NXIO.into()
                        || x == Errno::ISDIR.into() =>
                {
                    self.typed(
                        self.dirs.root.as_fd(),
                        crate::disk::layout::LIMITS_FILE,
                        ProblemKind::Foreign(Foreign::NotRegular),
                    )
                }
                (crate::ErrorKind::Io { errno, .. }, _) => ProblemKind::Unreadable(*errno),
                _ => return Ok(()),
            },
        };
        rep.problems.push(Problem {
            path: crate::disk::layout::LIMITS_FILE.to_string(),
            kind,
            quarantined: false,
        });
        Ok(())
    }

    /// Move the damaged limits file (problem `kind`) to `quarantine/`, reporting it.
    fn quarantine_limits(&self, rep: &mut FsckReport, kind: ProblemKind) -> Result<()> {
        use crate::disk::layout::{LIMITS_FILE, QUARANTINE_DIR};
        let quarantined = match self.quarantine("", LIMITS_FILE, false) {
            Ok(moved) => moved,
            Err(e) if e.outcome() == Outcome::NotDone && e.errno() == Some(Errno::EXIST.into()) => {
                rep.problems.push(Problem {
                    path: LIMITS_FILE.to_string(),
                    kind: ProblemKind::QuarantineTaken {
                        kind: Box::new(kind),
                        at: format!("{QUARANTINE_DIR}/{LIMITS_FILE}"),
                    },
                    quarantined: false,
                });
                return Ok(());
            }
            Err(e) if e.outcome() == Outcome::NotDone => {
                log::warn!("{e}; left in place");
                false
            }
            Err(e) => return Err(e),
        };
        if quarantined {
            log::warn!(
                "{}: moved to {QUARANTINE_DIR}/{LIMITS_FILE}; the queue has no capacity \
                 limits and no group limits now: set them again (`steadq init {dir} \
                 --max-jobs N|none --max-bytes N|none`, `steadq limit {dir} --group G \
                 --max-leased N`)",
                self.path(LIMITS_FILE).display(),
                dir = self.root.display()
            );
        }
        rep.problems.push(Problem {
            path: LIMITS_FILE.to_string(),
            kind,
            quarantined,
        });
        Ok(())
    }

    /// Evidence files hold whole `v1` lines only: torn appends are reported (see
    /// [`ProblemKind::TornEvidence`]); one that cannot be opened as a regular file is named.
    pub(super) fn check_evidence(&self, rep: &mut FsckReport) {
        let mut names = self.rotated_evidence().unwrap_or_default();
        names.sort_unstable();
        names.push(crate::disk::layout::EVIDENCE_FILE.to_string());
        for name in names {
            let root = self.dirs.root.as_fd();
            let kind = match self.sys.open_regular_ro(root, &name) {
                Err(Errno::NOENT) => continue,
                Err(Errno::LOOP | Errno::NXIO | Errno::ISDIR) => {
                    self.typed(root, &name, ProblemKind::Foreign(Foreign::NotRegular))
                }
                Err(e) => ProblemKind::Unreadable(e.into()),
                Ok(fd) => {
                    let mut lines = 0u64;
                    let tail = self.evidence_lines(fd.as_fd(), &mut |l| {
                        let ok = core::str::from_utf8(l)
                            .ok()
                            .and_then(crate::admin::receipts::EvidenceLine::parse);
                        lines += u64::from(ok.is_none());
                        true
                    });
                    match tail {
                        Ok(0) if lines == 0 => continue,
                        Ok(tail) => ProblemKind::TornEvidence { lines, tail },
                        Err(e) => ProblemKind::Unreadable(e.into()),
                    }
                }
            };
            rep.problems.push(Problem {
                path: name,
                kind,
                quarantined: false,
            });
        }
    }

    /// `keys/` holds only key entries (`<64 hex>`) and tombstones
    /// (`<64 hex>.<32 hex>.gone`), regular files; anything else is foreign (quarantined on
    /// request: it cannot be a key entry).
    pub(super) fn check_keys(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        use crate::disk::layout::KEYS_DIR;
        let keys = match self.sys.open_dir_beneath(self.dirs.root.as_fd(), KEYS_DIR) {
            Ok(fd) => fd,
            // A file or a symlink (never followed): reported in the root.
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(()),
            Err(e @ (Errno::ACCESS | Errno::PERM)) => {
                rep.problems.push(Problem {
                    path: KEYS_DIR.to_string(),
                    kind: ProblemKind::Unreadable(e.into()),
                    quarantined: false,
                });
                return Ok(());
            }
            Err(e) => {
                return Err(Cause::io(
                    Call::Open,
                    e,
                    Outcome::NotDone,
                    Some(self.path(KEYS_DIR)),
                ))
            }
        };
        let (mut odd, mut live, mut wild) = (Vec::new(), Vec::new(), Vec::new());
        self.sys
            .read_dir(keys.as_fd(), |name, raw, t| {
                rep.checked += 1;
                let named = name.is_some_and(crate::ops::keys::is_key_name);
                if !named || !matches!(t, EntryType::File | EntryType::Unknown) {
                    push_odd(&mut odd, &mut wild, name, raw);
                } else if let Some(n) = name.filter(|n| crate::ops::keys::is_entry_name(n)) {
                    live.push(n.to_string());
                }
            })
            .map_err(|e| self.read_dir_error(e, KEYS_DIR))?;
        // A live entry that does not decode fails every enqueue with its key. Reported and
        // left in place: removing it would let the key's job be enqueued twice.
        for name in live {
            if self.key_entry_damaged(keys.as_fd(), &name) {
                rep.problems.push(Problem {
                    path: format!("{KEYS_DIR}/{name}"),
                    kind: ProblemKind::Damaged(
                        "the idempotency key entry does not decode (or names another key), \
                         and every enqueue with its key fails; left in place: removing it \
                         lets that key's job be enqueued again",
                    ),
                    quarantined: false,
                });
            }
        }
        not_utf8(bad, KEYS_DIR, wild);
        for name in odd {
            let kind = ProblemKind::Foreign(Foreign::Name(NameError::Syntax));
            let kind = match self.typed(keys.as_fd(), &name, kind) {
                ProblemKind::Foreign(_) => ProblemKind::NotKeyName,
                k => k,
            };
            bad.push((KEYS_DIR.to_string(), name, kind));
        }
        Ok(())
    }
}
