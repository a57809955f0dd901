//! fsck's check of the queue's layout: the root's entries, the shard parents and the levels,
//! `tmp/`, directories not shared like their siblings, and stray entries (a directory holding
//! jobs of this queue is reported, not moved).

use super::{not_utf8, push_odd, Bad, FsckReport, Problem, ProblemKind};
use crate::admin::receipts::is_rotated_evidence;
use crate::disk::layout::{
    PRIO_DIR, QUARANTINE_DIR, READY_DIR, RECEIPTS_DIR, ROOT_ENTRIES, TMP_DIR,
};
use crate::disk::name::JobName;
use crate::disk::name::NameError;
use crate::disk::scan::Foreign;
use crate::disk::sys::{Call, EntryType, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::queue::{Queue, IDENTITY_FILE};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

impl Queue {
    /// Temp files: only `<boot32>.<pid8>.<rand32>.tmp|probe` regular files belong in tmp/.
    /// A job file of this queue there is misplaced (see [`Queue::stray`]).
    pub(super) fn check_tmp(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        let (mut odd, mut wild) = (Vec::new(), Vec::new());
        let listed = self
            .list_held(self.dirs.tmp.as_fd(), TMP_DIR, |fd| {
                odd.clear();
                wild.clear();
                self.sys.read_dir(fd, |name, raw, t| {
                    rep.checked += 1;
                    let named = name.and_then(crate::disk::name::TempName::parse).is_some();
                    let file = matches!(
                        t,
                        crate::disk::sys::EntryType::File | crate::disk::sys::EntryType::Unknown
                    );
                    if !named || !file {
                        push_odd(&mut odd, &mut wild, name, raw);
                    }
                })
            })
            .map_err(|e| self.read_dir_error(e, TMP_DIR))?;
        if listed.is_none() {
            if self.not_a_directory_on(TMP_DIR).is_some() {
                return Ok(()); // a file or a symlink: reported in the root
            }
            // This user cannot read tmp/: a problem to report, not a reason to check nothing.
            rep.problems.push(Problem {
                path: TMP_DIR.into(),
                kind: ProblemKind::Unreadable(Errno::ACCESS.into()),
                quarantined: false,
            });
            return Ok(());
        }
        for name in odd {
            if let Some(kind) = self.stray(rep, self.dirs.tmp.as_fd(), &name) {
                bad.push((TMP_DIR.into(), name, kind));
            }
        }
        not_utf8(bad, TMP_DIR, wild);
        Ok(())
    }

    /// Root level: only the known names belong (`prio/` from version 3 on).
    pub(super) fn check_root(&self, v3: bool, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        let known = ROOT_ENTRIES;
        let (mut odd, mut blocked, mut wild) = (Vec::new(), Vec::new(), Vec::new());
        let fs_root = crate::queue::is_fs_root(&self.sys, self.dirs.root.as_fd(), &self.root);
        self.sys
            .read_dir(self.dirs.root.as_fd(), |name, raw, t| {
                rep.checked += 1;
                match name {
                    // A queue at a filesystem's root (`init` takes one with only this).
                    Some(crate::queue::LOST_FOUND)
                        if fs_root
                            && self.is_dir_entry(
                                self.dirs.root.as_fd(),
                                crate::queue::LOST_FOUND,
                                t,
                            ) => {}
                    // Only a directory: a file named `prio` (a script's `echo 5 > $Q/prio`)
                    // is foreign, and every level behind it waits until it is moved away.
                    // `tmp`, `ready`, `delayed`, `dead` or `receipts` as a file or a
                    // symlink (never followed): what belongs there waits until it is
                    // moved away (every command stopped on it, fsck too).
                    Some(n)
                        if (crate::disk::layout::CREATED_DIRS.contains(&n)
                            || n == crate::disk::layout::KEYS_DIR
                            || n == crate::disk::layout::WAITING_DIR
                            || n == crate::disk::layout::NEEDS_DIR
                            || n == crate::disk::layout::AFTER_DIR
                            || n == crate::disk::layout::GROUPS_DIR
                            || n == QUARANTINE_DIR)
                            && !self.is_dir_entry(self.dirs.root.as_fd(), n, t) =>
                    {
                        blocked.push(n.to_string())
                    }
                    Some(PRIO_DIR) if v3 => {
                        if !self.is_dir_entry(self.dirs.root.as_fd(), PRIO_DIR, t) {
                            blocked.push(PRIO_DIR.to_string());
                        }
                    }
                    Some(n)
                        if known.contains(&n)
                            || n.starts_with(&format!(".{IDENTITY_FILE}."))
                            || is_rotated_evidence(n) => {}
                    _ => push_odd(&mut odd, &mut wild, name, raw),
                }
            })
            .map_err(|e| Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.root.clone())))?;
        // Named by type (a `prio/` holding jobs on a version-2 queue says how many); root
        // entries are never moved.
        for name in odd {
            let kind = ProblemKind::Foreign(Foreign::Name(NameError::Syntax));
            let kind = self.typed(self.dirs.root.as_fd(), &name, kind);
            bad.push((String::new(), name, kind));
        }
        for name in blocked {
            bad.push((String::new(), name, ProblemKind::NotADirectory));
        }
        not_utf8(bad, "", wild);
        Ok(())
    }

    /// `ready/`, `receipts/` and (version 3) `prio/` and each `prio/<l>/` hold only their
    /// shard directories (and `prio/` only its levels).
    pub(super) fn check_shard_parents(
        &self,
        v3: bool,
        rep: &mut FsckReport,
        bad: &mut Bad,
    ) -> Result<()> {
        let mut rels = vec![READY_DIR.to_string(), RECEIPTS_DIR.to_string()];
        if v3 && self.check_levels(rep, bad)? {
            for l in (0..self.ident.levels()).filter(|&l| l != crate::disk::name::DEFAULT_PRIORITY)
            {
                rels.push(format!("prio/{l}"));
            }
        }
        let mut parents = Vec::new();
        for rel in rels {
            if let Some(fd) = self.dirs_parent(&rel, rep)? {
                parents.push((rel, fd));
            }
        }
        for (parent, fd) in parents {
            let parent = parent.as_str();
            let shards = self.ident.shards;
            let (mut odd, mut blocked, mut wild) = (Vec::new(), Vec::new(), Vec::new());
            self.sys
                .read_dir(fd.as_fd(), |name, raw, t| {
                    let ok = name
                        .and_then(|n| crate::disk::name::parse_hex(n.as_bytes(), 2))
                        .is_some_and(|s| s < shards as u128);
                    match name {
                        // A shard's name on a file or a symlink (never followed): the slot
                        // holds no job until it is moved away.
                        Some(n) if ok && !self.is_dir_entry(fd.as_fd(), n, t) => {
                            blocked.push(n.to_string())
                        }
                        _ if ok => {}
                        _ => push_odd(&mut odd, &mut wild, name, raw),
                    }
                })
                .map_err(|e| {
                    Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.path(parent)))
                })?;
            self.strays(rep, fd.as_fd(), parent, odd, bad);
            not_utf8(bad, parent, wild);
            for name in blocked {
                bad.push((parent.to_string(), name, ProblemKind::NotADirectory));
            }
        }
        for s in 0..self.ident.slots() {
            if let Some((owner, expected)) = self.foreign_slot(s) {
                rep.problems.push(Problem {
                    path: self.ident.slot_rel(s),
                    kind: ProblemKind::ForeignOwner { owner, expected },
                    quarantined: false,
                });
            }
        }
        Ok(())
    }

    /// Push a problem for each entry `odd` of `dir` (`rel` from the root), by
    /// [`Queue::stray`].
    fn strays(
        &self,
        rep: &mut FsckReport,
        dir: BorrowedFd<'_>,
        rel: &str,
        odd: Vec<String>,
        bad: &mut Bad,
    ) {
        for name in odd {
            if let Some(kind) = self.stray(rep, dir, &name) {
                bad.push((rel.to_string(), name, kind));
            }
        }
    }

    /// `prio/` (version 3) holds one directory per level other than the default, `0`..=`7`.
    /// False when `prio/` cannot be read (then it is a problem, and its levels are not
    /// looked at: the walk names each of their shards) or does not exist yet.
    fn check_levels(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<bool> {
        let levels = self.ident.levels();
        let Some(fd) = self.dirs_parent(PRIO_DIR, rep)? else {
            return Ok(false);
        };
        let (mut odd, mut blocked, mut wild) = (Vec::new(), Vec::new(), Vec::new());
        self.sys
            .read_dir(fd.as_fd(), |name, raw, t| {
                let level = matches!(name.map(str::as_bytes), Some([d])
                    if (b'0'..b'0' + levels).contains(d)
                        && *d != b'0' + crate::disk::name::DEFAULT_PRIORITY);
                match name {
                    Some(n) if level && !self.is_dir_entry(fd.as_fd(), n, t) => {
                        blocked.push(n.to_string())
                    }
                    _ if level => {}
                    _ => push_odd(&mut odd, &mut wild, name, raw),
                }
            })
            .map_err(|e| self.read_dir_error(e, "prio"))?;
        self.strays(rep, fd.as_fd(), "prio", odd, bad);
        not_utf8(bad, PRIO_DIR, wild);
        for name in blocked {
            bad.push((PRIO_DIR.to_string(), name, ProblemKind::NotADirectory));
        }
        Ok(true)
    }

    /// Whether entry `name` of `dir`, of type `t` as listed, is a directory (`fstatat`
    /// without following a symlink when the listing did not say).
    pub(super) fn is_dir_entry(&self, dir: BorrowedFd<'_>, name: &str, t: EntryType) -> bool {
        match t {
            EntryType::Dir => true,
            EntryType::Unknown => self
                .sys
                .stat_nofollow(dir, name)
                .is_ok_and(|m| m.file_type == rustix::fs::FileType::Directory),
            _ => false,
        }
    }

    /// Shard parent `name` (`ready`, `receipts`, `prio`, `prio/<l>`), opened and listable;
    /// `None` when this user cannot read it (`EACCES`, `EPERM`), which is a problem, or when
    /// a `prio` one does not exist (not made yet), which is not.
    fn dirs_parent(&self, name: &str, rep: &mut FsckReport) -> Result<Option<OwnedFd>> {
        let opened = self.sys.open_dir_beneath(self.dirs.root.as_fd(), name);
        let listed = opened.and_then(|fd| self.sys.read_dir(fd.as_fd(), |_, _, _| {}).map(|_| fd));
        match listed {
            Ok(fd) => Ok(Some(fd)),
            // `prio/` and `prio/<l>/` are made by the first job placed at a level
            // (`ops/levels.rs`): missing, they hold nothing. Not a directory (`ENOTDIR`), the
            // entry in the way is reported where it stands (the root, or `prio/`).
            Err(Errno::NOENT | Errno::NOTDIR) if name.split('/').next() == Some(PRIO_DIR) => {
                Ok(None)
            }
            // `ready` or `receipts` itself a file or a symlink: reported in the root.
            Err(Errno::NOTDIR | Errno::LOOP) => Ok(None),
            Err(e @ (Errno::ACCESS | Errno::PERM)) => {
                rep.problems.push(Problem {
                    path: name.to_string(),
                    kind: ProblemKind::Unreadable(e.into()),
                    quarantined: false,
                });
                Ok(None)
            }
            Err(e) => Err(Cause::io(
                Call::Open,
                e,
                Outcome::NotDone,
                Some(self.path(name)),
            )),
        }
    }

    /// Each directory made on demand ([`Queue::made_on_demand`]) that lacks a right its
    /// template grants: [`ProblemKind::NotShared`]. It replaces the
    /// `Unreadable` problems at its path and behind it (its mode is why).
    pub(super) fn check_shared(&self, rep: &mut FsckReport, bad: &mut Bad) {
        let root = self.dirs.root.as_fd();
        for (rel, like) in self.made_on_demand() {
            let (Ok(want), Ok(got)) = (
                self.sys.owner_nofollow(root, like),
                self.sys.owner_nofollow(root, &rel),
            ) else {
                continue;
            };
            // A template that is not a directory (a file or a symlink at `ready`, reported
            // as such) sets no mode to share.
            if want.2 & 0o170000 != 0o040000 {
                continue;
            }
            // The sticky bit of `ready/` is its own: never shared (`Sys::copy_owner_and_mode`).
            let (want_mode, mode) = (want.2 & 0o6777, got.2 & 0o7777);
            // A right the template grants that this directory lacks (read, write, search
            // for owner, group or others; setgid), or, under another group, one the
            // template's group had that others do not get here. More rights refuse nobody.
            let lacks = want_mode & !mode & 0o2777 != 0;
            let group_lacks = got.1 != want.1 && (want_mode >> 3) & 7 & !mode != 0;
            if !lacks && !group_lacks {
                continue;
            }
            let behind =
                |p: &str| p == rel || p.strip_prefix(&rel).is_some_and(|r| r.starts_with('/'));
            rep.problems
                .retain(|p| !(behind(&p.path) && matches!(p.kind, ProblemKind::Unreadable(_))));
            let (dir, name) = rel.rsplit_once('/').unwrap_or(("", &rel));
            bad.push((
                dir.to_string(),
                name.to_string(),
                ProblemKind::NotShared {
                    like,
                    mode,
                    gid: got.1,
                    want_mode,
                    want_gid: want.1,
                },
            ));
        }
    }

    /// What is wrong with `name`, an entry of `dir` where it does not belong: a verified job
    /// file of this queue is misplaced (quarantined by `--quarantine` unless its id is also
    /// elsewhere); anything else is foreign, by its file type ([`Queue::typed`]). `None`: it
    /// vanished meanwhile.
    pub(super) fn stray(
        &self,
        rep: &mut FsckReport,
        dir: BorrowedFd<'_>,
        name: &str,
    ) -> Option<ProblemKind> {
        let kind = match (self.home_of(name), JobName::parse(name, self.ident.id)) {
            (Some(home), Ok(n)) => match self.check_file(dir, name, &n) {
                Ok(true) => {
                    rep.verified += 1;
                    ProblemKind::Misplaced(home)
                }
                Ok(false) => return None,
                Err(k) => k,
            },
            // Not a job name at all: say so, not "of the wrong kind" (a stray `notes.txt` in
            // `tmp/` was called a job name of the wrong kind).
            (_, Err(e)) => ProblemKind::Foreign(Foreign::Name(e)),
            (None, Ok(_)) => ProblemKind::Foreign(Foreign::WrongPlace),
        };
        Some(self.typed(dir, name, kind))
    }

    /// A foreign entry `name` of `dir` that is not a regular file, by its type (one
    /// `fstatat`, never followed): [`ProblemKind::NotRegular`], or
    /// [`ProblemKind::JobsInside`] for a directory holding job files. Any other `kind` is
    /// returned as it is.
    pub(super) fn typed(&self, dir: BorrowedFd<'_>, name: &str, kind: ProblemKind) -> ProblemKind {
        use rustix::fs::FileType as T;
        if !matches!(kind, ProblemKind::Foreign(_)) {
            return kind;
        }
        let Ok(m) = self.sys.stat_nofollow(dir, name) else {
            return kind;
        };
        ProblemKind::NotRegular(match m.file_type {
            T::RegularFile => return kind,
            T::Directory => match self.jobs_inside(dir, name, 3) {
                0 => "directory",
                n => return ProblemKind::JobsInside(n),
            },
            T::Symlink => "symlink",
            T::Fifo => "fifo",
            T::Socket => "socket",
            _ => "device",
        })
    }

    /// Job files of this queue (regular files whose names verify) in directory `name` of
    /// `dir` and its subdirectories, `depth` levels down; never following a symlink. A
    /// directory that cannot be read counts as holding one (it may), so it is never moved.
    fn jobs_inside(&self, dir: BorrowedFd<'_>, name: &str, depth: u32) -> u64 {
        let Ok(fd) = self.sys.open_dir_beneath(dir, name) else {
            return 1;
        };
        let (mut n, mut subdirs) = (0, Vec::new());
        let listed = self.sys.read_dir(fd.as_fd(), |e, _, t| {
            let Some(e) = e else { return };
            let t = match t {
                crate::disk::sys::EntryType::Unknown => match self.sys.stat_nofollow(fd.as_fd(), e)
                {
                    Ok(m) if m.file_type == rustix::fs::FileType::Directory => {
                        crate::disk::sys::EntryType::Dir
                    }
                    Ok(m) if m.file_type == rustix::fs::FileType::RegularFile => {
                        crate::disk::sys::EntryType::File
                    }
                    _ => crate::disk::sys::EntryType::Other,
                },
                t => t,
            };
            match t {
                crate::disk::sys::EntryType::Dir => subdirs.push(e.to_string()),
                crate::disk::sys::EntryType::File => {
                    n += JobName::parse(e, self.ident.id).is_ok() as u64
                }
                _ => {}
            }
        });
        if listed.is_err() {
            return 1;
        }
        if depth > 0 {
            for d in subdirs {
                n += self.jobs_inside(fd.as_fd(), &d, depth - 1);
            }
        }
        n
    }
}
