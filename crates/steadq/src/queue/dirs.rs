//! The directories a handle holds: opening the layout's directories once, and reaching
//! them (a shard, a bucket, the barrier after a move) for the operations.

use super::*;
use crate::disk::identity::Identity;
use crate::disk::layout::{receipts_shard, DEAD_DIR, DELAYED_DIR, READY_DIR, TMP_DIR};
use crate::disk::name::JobName;
use crate::disk::sys::{Call, Errno, Sys};
use crate::error::{Cause, ErrorKind, Result};
use crate::ops::levels::SlotDir;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::disk::layout::IDENTITY_FILE;

/// Directory fds held open for the queue's lifetime.
#[derive(Debug)]
pub(crate) struct Dirs {
    pub root: OwnedFd,
    pub tmp: OwnedFd,
    /// Per ready slot: its directory, once this handle has opened it. Every `ready/<ss>` is
    /// opened with the queue; a `prio/<l>/<ss>` that does not exist yet is opened when it
    /// is first used (made by the first placement at its level: `ops/levels.rs`).
    pub ready: Vec<std::sync::OnceLock<OwnedFd>>,
    /// Stands for a ready slot not made yet (an `O_PATH` handle on the identity file, like a
    /// stand-in: every listing and `*at` call on it fails).
    pub absent: OwnedFd,
    /// Per ready slot: this handle has made the slot's entry and its parents' entries
    /// durable (`ops/levels.rs`, `Queue::ensure_slot`).
    pub placed: Vec<std::sync::atomic::AtomicBool>,
    /// Per ready slot, whether this user may make job files in it, as last found
    /// (`ops/levels.rs`, `Queue::slot_writable`): 0 not probed yet, 1 it may, else the
    /// monotonic ns (boot clock) until which enqueues avoid it.
    pub writable: Vec<std::sync::atomic::AtomicU64>,
    pub receipts: Vec<OwnedFd>,
    pub delayed: OwnedFd,
    pub dead: OwnedFd,
    /// The raw fds of `ready` and `receipts` that are stand-ins (see `open_dirs`), and
    /// `absent`'s.
    pub standins: Vec<std::os::fd::RawFd>,
    /// Per ready slot: `Some((owner uid, owner uid of ready/))` for a default-level shard
    /// owned by another user than `ready/` when the queue was opened (see `open_dirs`). It
    /// is held by the stand-in, and [`Queue::slot_dir`] calls it blocked: never listed by
    /// path, never placed into.
    pub foreign: Vec<Option<(u32, u32)>>,
    /// The entries `open_dirs` warned about (from the root), so that uses do not warn again.
    pub warned: Vec<String>,
}

impl Dirs {
    /// Whether held handle `fd` is a stand-in: it names no directory (see `open_dirs`).
    pub(crate) fn is_standin(&self, fd: BorrowedFd<'_>) -> bool {
        self.standins.contains(&fd.as_raw_fd())
    }
}

/// The claim cursor: per ready slot, the candidates its last listing kept, oldest last.
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    pub held: Vec<Vec<JobName>>,
}

impl Queue {
    /// `root/rel`, for error messages.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The error (not done) for directory `rel` that a pass could not read, with the real
    /// reason: a file (or a symlink, never followed) standing where the directory or one of
    /// its parents belongs is `ENOTDIR` naming that entry, anything else `EACCES` naming the
    /// directory. (`EACCES` was hard-coded and sent users to chmod a file.)
    pub(crate) fn unreadable_dir_error(&self, rel: &str) -> crate::Cause {
        let (errno, at) = match self.not_a_directory_on(rel) {
            Some(entry) => (Errno::NOTDIR, entry),
            None => (Errno::ACCESS, rel.to_string()),
        };
        crate::Cause::io(
            crate::disk::sys::Call::Open,
            errno,
            crate::Outcome::NotDone,
            Some(self.path(&at)),
        )
    }

    /// Count the calling thread as inside an operation that will ask for a barrier, until
    /// the guard drops (`ops/group.rs`, [`crate::ops::group::Gather`]): a barrier's leader
    /// waits briefly for such threads so one fsync covers them all. `None` when the handle
    /// issues no barriers.
    pub(crate) fn op(&self) -> Option<crate::ops::group::Op<'_>> {
        self.barriers.then(|| self.group.gather.op())
    }

    /// fsync directory `dir` unless the policy is `None` (or see [`Queue::barriers`]), after a rename or link in it that
    /// has returned. A directory the handle holds shares the fsync with other threads of
    /// this process (group commit, `ops/group.rs`): it returns once an fsync that started
    /// after this call began has completed.
    pub(crate) fn dir_barrier(
        &self,
        dir: &crate::ops::enqueue::DirRef<'_>,
    ) -> core::result::Result<(), Errno> {
        if !self.barriers {
            return Ok(());
        }
        let fd = dir.fd();
        match dir {
            crate::ops::enqueue::DirRef::Held(h) => match self.group.get(&self.sys, *h) {
                Some(g) => g.barrier(&self.group.gather, || self.sys.fsync_dir(fd)),
                None => self.sys.fsync_dir(fd),
            },
            crate::ops::enqueue::DirRef::Opened(_) => self.sys.fsync_dir(fd),
        }
    }

    /// Run `list` on the directory of ready shard `s`: `Ok(None)` when this user cannot read
    /// it (`EACCES`, `EPERM`; a shard made unreadable by `chmod 000`); `Err(ENOENT)` when it
    /// is a priority level's slot not made yet, which holds no job; `Err(ENOTDIR)` when an
    /// entry that is not a directory stands on its path (a file named `prio`, a symlink),
    /// so that it holds no job either (warned once per entry, [`Queue::not_a_directory_on`]
    /// names it). A shard whose held
    /// handle cannot list it (`O_PATH`, see `assemble`) is opened again each time, so a
    /// repaired permission is seen at once. The first unreadable listing of each shard is
    /// logged as a warning (once per handle), unless the refusal is a directory in its
    /// making ([`Queue::in_making`]); [`Queue::status`] counts the shards that were
    /// unreadable at their last listing.
    ///
    /// # Errors
    /// Any other errno of the listing or of the second open.
    pub(crate) fn list_ready_shard<T>(
        &self,
        s: u16,
        list: impl FnMut(BorrowedFd<'_>) -> core::result::Result<T, Errno>,
    ) -> core::result::Result<Option<T>, Errno> {
        use std::sync::atomic::Ordering::Relaxed;
        let i = s as usize;
        let rel = self.ident.slot_rel(s);
        let fd = match self.slot_dir(s) {
            SlotDir::Held(fd) => fd,
            SlotDir::Missing => {
                self.unreadable[i].store(false, Relaxed);
                return Err(Errno::NOENT);
            }
            SlotDir::Blocked(block) => {
                self.unreadable[i].store(false, Relaxed);
                self.warn_block(&block);
                return Err(Errno::NOTDIR);
            }
        };
        let r = self.list_held(fd, &rel, list)?;
        if r.is_none() {
            // A slot held by the stand-in because a file stood in its way at open.
            if let Some(block) = self.not_a_directory_on(&rel) {
                self.unreadable[i].store(false, Relaxed);
                self.warn_block(&block);
                return Err(Errno::NOTDIR);
            }
        }
        self.unreadable[i].store(r.is_none(), Relaxed);
        // Refused by a level (or shard) another user is making right now, before it gets
        // the owner and mode of `ready/` (`ops/levels.rs`): not warned; looked at again soon.
        let making = r.is_none() && self.in_making(&rel);
        self.in_making[i].store(making, Relaxed);
        if r.is_none() && !making && !self.warned_unreadable[i].swap(true, Relaxed) {
            log::warn!(
                "{}: cannot read this shard (Permission denied); its jobs are skipped until it \
                 is readable again (status counts it)",
                self.path(&rel).display()
            );
        }
        Ok(r)
    }

    /// Warn once per handle about `block` (from the root), an entry that is not a directory
    /// where the layout has one: it stands before every slot of a level, or of every level,
    /// so it is named once, not once per slot behind it.
    pub(crate) fn warn_block(&self, block: &str) {
        let mut warned = self.warned_blocks.lock().unwrap_or_else(|p| p.into_inner());
        if warned.iter().any(|w| w == block) {
            return;
        }
        let slot = (0..self.ident.slots()).find(|&s| self.ident.slot_rel(s) == block);
        if let Some((owner, expected)) = slot.and_then(|s| self.foreign_slot(s)) {
            log::warn!(
                "{}: owned by uid {owner}, not by the owner of ready/ (uid {expected}): its \
                 jobs are not taken and no job is placed there (fsck names it)",
                self.path(block).display()
            );
        } else {
            log::warn!(
                "{}: not a directory where the queue keeps ready jobs (a file, or a symlink, \
                 never followed); no job can be in the slots behind it and none can be placed \
                 there until it is moved away (fsck names it)",
                self.path(block).display()
            );
        }
        warned.push(block.to_string());
    }

    /// The first component of path `rel` (from the root) that exists and is not a directory
    /// (`fstatat`, symlinks not followed), e.g. `prio` for `prio/5/03` when `prio` is a file.
    pub(crate) fn not_a_directory_on(&self, rel: &str) -> Option<String> {
        let (end, _) = first_non_directory(&self.sys, self.dirs.root.as_fd(), rel)?;
        Some(rel[..end].to_string())
    }

    /// Run `list` on held directory `fd` (`rel` from the root): `Ok(None)` when this user
    /// cannot read it (`EACCES`, `EPERM`). A handle that cannot list (held by name only,
    /// `O_PATH`: the directory was unreadable when the queue was opened) is opened again by
    /// its path each time, so a repaired permission is seen at once.
    ///
    /// # Errors
    /// Any other errno of the listing or of the second open.
    pub(crate) fn list_held<T>(
        &self,
        fd: BorrowedFd<'_>,
        rel: &str,
        mut list: impl FnMut(BorrowedFd<'_>) -> core::result::Result<T, Errno>,
    ) -> core::result::Result<Option<T>, Errno> {
        match list(fd) {
            // EBADF: an `O_PATH` handle; ENOTDIR: the stand-in of `open_dirs`.
            Err(Errno::BADF | Errno::ACCESS | Errno::NOTDIR) => {}
            r => return r.map(Some),
        }
        match self.sys.open_dir_beneath(self.dirs.root.as_fd(), rel) {
            Ok(fd) => list(fd.as_fd()).map(Some),
            // ENOTDIR: something that is not a directory stands on the path (a file named
            // `prio` in the root): the slot cannot be read, as with a permission, and fsck
            // names the entry. Only this slot's jobs wait; every other slot goes on.
            // ELOOP: a symlink on the path, never followed; the same.
            Err(Errno::ACCESS | Errno::PERM | Errno::NOTDIR | Errno::LOOP) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Held directory `fd` (`rel` from the root) for a job operation: a stand-in (see
    /// `open_dirs`) is replaced by the directory opened by path when this user can open it
    /// now (permissions given back since the queue was opened); otherwise `fd` itself.
    pub(crate) fn held_dir<'a>(
        &self,
        fd: BorrowedFd<'a>,
        rel: &str,
    ) -> crate::ops::enqueue::DirRef<'a> {
        use crate::ops::enqueue::DirRef;
        if !self.dirs.is_standin(fd) {
            return DirRef::Held(fd);
        }
        match self.sys.open_dir_beneath(self.dirs.root.as_fd(), rel) {
            Ok(o) => DirRef::Opened(o),
            Err(_) => DirRef::Held(fd),
        }
    }

    /// The errno to report for `e` from a call on held directory `fd`: a stand-in (see
    /// `open_dirs`) refuses with `ENOTDIR`, which is `EACCES` to the user (the directory's
    /// parent is not searchable).
    pub(crate) fn dir_errno(&self, fd: BorrowedFd<'_>, e: Errno) -> Errno {
        if e == Errno::NOTDIR && self.dirs.is_standin(fd) {
            Errno::ACCESS
        } else {
            e
        }
    }

    /// Ready shards that could not be read at their last listing by this handle.
    pub(crate) fn unreadable_shards(&self) -> u64 {
        let n = self.unreadable.iter();
        n.filter(|f| f.load(std::sync::atomic::Ordering::Relaxed))
            .count() as u64
    }

    /// fsync directory `fd` unless the policy is `None` (or see [`Queue::barriers`]).
    pub(crate) fn barrier(&self, fd: BorrowedFd<'_>) -> core::result::Result<(), Errno> {
        if !self.barriers {
            return Ok(());
        }
        self.sys.fsync_dir(fd)
    }

    /// fsync file `fd` unless the policy is `None` (or see [`Queue::barriers`]).
    pub(crate) fn barrier_file(&self, fd: BorrowedFd<'_>) -> core::result::Result<(), Errno> {
        if !self.barriers {
            return Ok(());
        }
        self.sys.fsync(fd)
    }

    /// Open (creating if needed) bucket directory `name` under `parent` (`delayed` or `dead`).
    /// A new bucket is made durable in its parent before use. One made by another user
    /// this moment, which refuses this user until it is shared ([`Queue::in_making`]), is
    /// waited for, up to 1 s.
    pub(crate) fn bucket_dir(
        &self,
        parent_is_dead: bool,
        name: &str,
    ) -> core::result::Result<OwnedFd, (Call, Errno)> {
        let (parent, template) = if parent_is_dead {
            (&self.dirs.dead, DEAD_DIR)
        } else {
            (&self.dirs.delayed, DELAYED_DIR)
        };
        let rel = format!("{template}/{name}");
        let (fd, origin) = self.made_dir(parent.as_fd(), name, &rel)?;
        if origin == crate::ops::making::Origin::MadeHere {
            self.share_like(fd.as_fd(), template, &rel);
            self.barrier(parent.as_fd())
                .map_err(|e| (Call::FsyncDir, e))?;
        }
        Ok(fd)
    }
}

/// The first component of path `rel` beneath `root` that exists and is not a directory
/// (`fstatat`, symlinks not followed): the length of the path up to it, and its type.
pub(super) fn first_non_directory(
    sys: &Sys,
    root: BorrowedFd<'_>,
    rel: &str,
) -> Option<(usize, rustix::fs::FileType)> {
    let mut end = 0;
    for part in rel.split('/') {
        end += part.len();
        match sys.stat_nofollow(root, &rel[..end]) {
            Ok(m) if m.file_type != rustix::fs::FileType::Directory => {
                return Some((end, m.file_type))
            }
            Ok(_) => end += 1,
            Err(_) => return None,
        }
    }
    None
}

/// Open every directory of the layout beneath `rootfd` (which the result holds as `root`).
///
/// # Errors
/// Not done: [`ErrorKind::Incomplete`] for a missing directory (an interrupted create), or
/// [`ErrorKind::Io`] naming it.
pub(super) fn open_dirs(sys: &Sys, rootfd: OwnedFd, root: &Path, ident: &Identity) -> Result<Dirs> {
    let shards = ident.shards;
    let open_failed = |rel: &str, e: Errno| {
        let kind = if e == Errno::NOENT {
            ErrorKind::Incomplete
        } else {
            ErrorKind::Io {
                call: Call::Open,
                errno: e.into(),
            }
        };
        Cause::not_done(kind, Some(root.join(rel)))
    };
    let open = |rel: &str| {
        sys.open_dir_beneath(rootfd.as_fd(), rel)
            .map_err(|e| open_failed(rel, e))
    };
    // A job directory this user cannot read (a ready or receipt shard, `delayed/`, `dead/`)
    // is held by name only (`O_PATH`): claims skip it, status and fsck report it
    // (`Queue::list_held`) instead of refusing the whole queue. One whose parent this user
    // cannot search (`prio/6`, `ready/` or `receipts/` at mode 700 of another user) cannot
    // be named at all: it is held by a stand-in, an `O_PATH` handle on the identity file,
    // which every listing and `*at` call refuses (`EBADF`, `ENOTDIR`).
    let held = |rel: &str| match sys.open_dir_beneath(rootfd.as_fd(), rel) {
        Err(Errno::ACCESS) => match sys.open_dir_path_only(rootfd.as_fd(), rel) {
            Err(Errno::ACCESS | Errno::PERM) => sys
                .open_file_path_only(rootfd.as_fd(), IDENTITY_FILE)
                .or_else(|_| open(rel)),
            r => r.or_else(|_| open(rel)),
        },
        // Opened once: each directory was opened, closed and opened again (1,400 `openat2`
        // calls to open a queue of 64 shards at 8 levels).
        r => r.map_err(|e| open_failed(rel, e)),
    };
    // A level whose directory (`prio/<l>`) does not exist holds no slot yet: its slots are
    // not opened one by one (448 failed opens of a 64-shard queue with no level made).
    let lazy_levels = (0..ident.slots()).any(|s| ident.slot_is_lazy(s));
    let level_missing: Vec<bool> = (0..crate::disk::name::PRIORITY_LEVELS)
        .map(|l| {
            let rel = format!("{}/{l}", crate::disk::layout::PRIO_DIR);
            lazy_levels
                && l != crate::disk::name::DEFAULT_PRIORITY
                && matches!(
                    sys.open_dir_beneath(rootfd.as_fd(), &rel),
                    Err(Errno::NOENT)
                )
        })
        .collect();
    // A priority level's slot that does not exist yet is opened on first use.
    // A slot behind something that is not a directory (a file named `prio` in the root, a
    // file or a symlink in place of `ready/03`) holds no job: its level's slot is left
    // unopened like one not made yet (`Queue::slot_dir` names the entry at each use), a
    // default-level shard is held by the stand-in. Every other slot goes on, and fsck
    // names the entry. A symlink is never followed (`ready/03 -> /elsewhere`: an attempt
    // to keep jobs outside the queue, or to stop it): it refused the whole queue, so one
    // member of the queue's group stopped every worker, enqueue and `init`.
    let blocked = |e: &Cause, rel: &str| {
        let errno = |n: Errno| {
            e.errno()
                .is_some_and(|x| x.raw_os_error() == n.raw_os_error())
        };
        if !errno(Errno::NOTDIR) && !errno(Errno::LOOP) {
            return None;
        }
        let (end, _) = first_non_directory(sys, rootfd.as_fd(), rel)?;
        Some(rel[..end].to_string())
    };
    // A default-level shard is made by `init`, as the owner of `ready/`: one owned by
    // another user (root excepted) was put there by someone else (a member of the queue's group who moved
    // the owner's shard away, its jobs with it, and made her own). Its jobs are not the
    // queue's to run, and new jobs must not go there: it is held by the stand-in like a
    // blocked shard, named in a warning, and fsck reports it.
    let ready_owner = sys
        .owner_nofollow(rootfd.as_fd(), READY_DIR)
        .ok()
        .filter(|(_, _, mode)| {
            rustix::fs::FileType::from_raw_mode(*mode) == rustix::fs::FileType::Directory
        })
        .map(|(uid, _, _)| uid);
    let mut foreign = vec![None; ident.slots() as usize];
    let mut warned: Vec<String> = Vec::new();
    let mut slot = |s: u16| {
        let rel = ident.slot_rel(s);
        let lazy = ident.slot_is_lazy(s);
        if lazy && level_missing[ident.slot_parts(s).0 as usize] {
            return Ok(None);
        }
        let standin = || sys.open_file_path_only(rootfd.as_fd(), IDENTITY_FILE);
        match held(&rel) {
            Err(e) if *e.kind() == ErrorKind::Incomplete && lazy => Ok(None),
            Err(e) => match blocked(&e, &rel) {
                Some(_) if lazy => Ok(None),
                Some(block) => {
                    if !warned.contains(&block) {
                        log::warn!(
                            "{}: not a directory where the queue keeps ready jobs (a file, or \
                             a symlink, never followed); no job can be in the shards behind it \
                             and none is placed there until it is moved away (fsck names it)",
                            root.join(&block).display()
                        );
                        warned.push(block);
                    }
                    standin().map(Some).map_err(|_| e)
                }
                None => Err(e),
            },
            Ok(fd) if !lazy => {
                // Not the stand-in of a shard this user cannot name: the identity file's
                // owner says nothing about the shard.
                let dir = sys
                    .fstat(fd.as_fd())
                    .is_ok_and(|(t, _)| t == rustix::fs::FileType::Directory);
                let owner = sys.owner_of(fd.as_fd()).ok().filter(|_| dir);
                match (owner, ready_owner) {
                    // A shard of root's is not a member's plant: only root could make it.
                    (Some(o), Some(r)) if o != r && o != 0 => {
                        foreign[s as usize] = Some((o, r));
                        log::warn!(
                            "{}: owned by uid {o}, not by the owner of {READY_DIR}/ (uid {r}): \
                             not the shard `init` made; its jobs are not taken and no job is \
                             placed there (fsck names it; move it away and run `steadq init` \
                             as uid {r})",
                            root.join(&rel).display()
                        );
                        warned.push(rel.clone());
                        standin().map(Some).map_err(|e| open_failed(&rel, e))
                    }
                    _ => Ok(Some(fd)),
                }
            }
            r => r.map(Some),
        }
    };
    let ready = (0..ident.slots())
        .map(|s| slot(s).map(|fd| fd.map(std::sync::OnceLock::from).unwrap_or_default()))
        .collect::<Result<Vec<_>>>()?;
    let absent = sys
        .open_file_path_only(rootfd.as_fd(), IDENTITY_FILE)
        .or_else(|_| open(IDENTITY_FILE))?;
    // `tmp/`, `delayed/`, `dead/` or a receipt shard that is not a directory (a file, or a
    // symlink, never followed) stopped every command with "Not a directory", `fsck`
    // included. It is held by the stand-in now: the commands that need it fail naming it,
    // the others go on, and fsck names it.
    let other = |rel: &str| match held(rel) {
        Err(e) => match blocked(&e, rel) {
            Some(block) => {
                log::warn!(
                    "{}: not a directory where the queue has one (a file, or a symlink, never \
                     followed); what belongs there can be neither placed nor taken until it \
                     is moved away (fsck names it)",
                    root.join(block).display()
                );
                sys.open_file_path_only(rootfd.as_fd(), IDENTITY_FILE)
                    .map_err(|_| e)
            }
            None => Err(e),
        },
        r => r,
    };
    let dirs = Dirs {
        // Unreadable, it is held by name only too: the commands that look (status, list,
        // show) work; those that need it fail naming it, and recover reports it unreadable.
        tmp: other(TMP_DIR)?,
        placed: (0..ident.slots()).map(|_| Default::default()).collect(),
        writable: (0..ident.slots()).map(|_| Default::default()).collect(),
        ready,
        absent,
        receipts: (0..shards)
            .map(|s| other(&receipts_shard(s)))
            .collect::<Result<_>>()?,
        delayed: other(DELAYED_DIR)?,
        dead: other(DEAD_DIR)?,
        root: rootfd,
        standins: Vec::new(),
        foreign,
        warned,
    };
    let standins = dirs.ready.iter().filter_map(|c| c.get());
    let standins = standins.chain(&dirs.receipts).chain([&dirs.absent]);
    let standins = standins.chain([&dirs.tmp, &dirs.delayed, &dirs.dead]);
    let standins = standins.filter(|fd| {
        rustix::fs::fstat(fd).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
        })
    });
    let dirs = Dirs {
        standins: standins.map(|fd| fd.as_raw_fd()).collect(),
        ..dirs
    };
    Ok(dirs)
}
