//! The directories a handle holds (`Dirs`, opened once by `open_dirs.rs`), and reaching them
//! for the operations: a shard, a bucket, the barrier after a move.

use super::*;
use crate::disk::layout::{DEAD_DIR, DELAYED_DIR};
use crate::disk::name::JobName;
use crate::disk::sys::{Barrier, Call, Errno};
use crate::ops::levels::SlotDir;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

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
    /// after this call began has completed. `b` names the barrier (a fault plan may remove
    /// it: then this thread neither makes nor waits for an fsync).
    pub(crate) fn dir_barrier(
        &self,
        b: Barrier,
        dir: &crate::ops::enqueue::DirRef<'_>,
    ) -> core::result::Result<(), Errno> {
        if !self.barriers || self.sys.skips_barrier(b) {
            return Ok(());
        }
        let fd = dir.fd();
        match dir {
            crate::ops::enqueue::DirRef::Held(h) => match self.group.get(&self.sys, *h) {
                Some(g) => g.barrier(&self.group.gather, || self.sys.fsync_dir(b, fd)),
                None => self.sys.fsync_dir(b, fd),
            },
            crate::ops::enqueue::DirRef::Opened(_) => self.sys.fsync_dir(b, fd),
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
        // When it was refused: a level's making is judged at that moment.
        let refused = r.is_none().then(|| self.clock.wall_ns());
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
        let making = refused.is_some_and(|at| self.in_making(&rel, at));
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

    /// fsync directory `fd` unless the policy is `None` (or see [`Queue::barriers`]). `b`
    /// names the barrier.
    pub(crate) fn barrier(
        &self,
        b: Barrier,
        fd: BorrowedFd<'_>,
    ) -> core::result::Result<(), Errno> {
        if !self.barriers {
            return Ok(());
        }
        self.sys.fsync_dir(b, fd)
    }

    /// fsync file `fd` unless the policy is `None` (or see [`Queue::barriers`]). `b` names
    /// the barrier.
    pub(crate) fn barrier_file(
        &self,
        b: Barrier,
        fd: BorrowedFd<'_>,
    ) -> core::result::Result<(), Errno> {
        if !self.barriers {
            return Ok(());
        }
        self.sys.fsync(b, fd)
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
            self.barrier(Barrier::BucketDir, parent.as_fd())
                .map_err(|e| (Call::FsyncDir, e))?;
        }
        Ok(fd)
    }
}
