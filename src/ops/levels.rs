//! Priority level directories made on first use. A version-3 queue keeps the ready and
//! leased jobs of each level other than the default in `prio/<l>/<ss>/`; `Queue::create`
//! makes none of them (on a default 8-shard queue that was 64 of its 87 inodes), and the
//! first placement of a job into a slot of a level (an enqueue, a due delayed job, a requeued
//! dead job: any move into a slot) makes `prio/`, `prio/<l>/` and the slot as needed.
//!
//! Durability: before a handle places its first job into a slot it fsyncs the slot's parents
//! (`prio/<l>/`, `prio/` and the root), whether it made those directories or found them
//! (another process may have made them and crashed before its own fsyncs), and remembers
//! that; the job's own barriers then follow as in any slot. A failure of a mkdir, an open or
//! one of those fsyncs comes before the job's link or rename: not done, naming the directory.
//! `EEXIST` from a mkdir (a racing process made it) is success.
//!
//! Readers treat a slot that does not exist as empty. Watchers (claim knowledge, waiting
//! claims, the capacity tally) watch the directories on the way to it instead, top-down, so
//! that its making is an event ([`Queue::watch_slot`]).

use crate::disk::layout::{shard_name, PRIO_DIR, READY_DIR};
use crate::disk::sys::{Call, Errno};
use crate::error::{Error, Outcome, Result};
use crate::queue::Queue;
use rustix::fs::inotify::{self, WatchFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering::{Acquire, Release};

/// The flags of the watches on the directories leading to a slot not made yet.
pub(crate) const PARENT_WATCH: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::ONLYDIR);

/// The inotify watches covering one ready slot (see [`Queue::watch_slot`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct SlotWatch {
    /// The slot's own watch, when the slot exists.
    pub slot: Option<i32>,
    /// Watches on the root, `prio/` and `prio/<l>/` (as far as they existed) for a slot that
    /// did not exist: an event there naming the next directory down may mean it was made.
    pub parents: Vec<i32>,
}

impl SlotWatch {
    /// Whether an event of watch `wd` naming `name` may mean slot `s` (not watched itself)
    /// of `q` was made: `name` is the next directory down from the watched one.
    pub(crate) fn made_by(&self, q: &Queue, s: u16, wd: i32, name: &str) -> bool {
        if self.slot.is_some() {
            return false;
        }
        let (level, shard) = q.ident.slot_parts(s);
        match self.parents.iter().position(|&p| p == wd) {
            Some(0) => name == PRIO_DIR,
            Some(1) => name.as_bytes() == [b'0' + level],
            Some(_) => name == shard_name(shard).as_str(),
            None => false,
        }
    }
}

impl Queue {
    /// Ready slot `s`'s directory, opened now when this handle has not opened it yet (a
    /// level's slot made since the queue was opened); `None` when it does not exist. One that
    /// exists but cannot be opened is the stand-in `absent` (its users open it by path).
    pub(crate) fn slot_fd(&self, s: u16) -> Option<BorrowedFd<'_>> {
        let cell = &self.dirs.ready[s as usize];
        if let Some(fd) = cell.get() {
            return Some(fd.as_fd());
        }
        let rel = self.ident.slot_rel(s);
        match self.sys.open_dir_beneath(self.dirs.root.as_fd(), &rel) {
            Ok(fd) => Some(cell.get_or_init(|| fd).as_fd()),
            Err(Errno::NOENT) => None,
            Err(_) => Some(self.dirs.absent.as_fd()),
        }
    }

    /// [`Queue::slot_fd`], with the stand-in for a slot not made yet (every call on it fails).
    pub(crate) fn ready_fd(&self, s: u16) -> BorrowedFd<'_> {
        self.slot_fd(s).unwrap_or(self.dirs.absent.as_fd())
    }

    /// Make ready slot `s` able to receive a job: for a level's slot, make `prio/`,
    /// `prio/<l>/` and the slot as needed and, the first time this handle places a job
    /// there, fsync the slot's parents (see the module docs).
    ///
    /// # Errors
    /// [`crate::ErrorKind::Io`] (not done) naming the directory a mkdir, open or fsync
    /// failed on.
    pub(crate) fn ensure_slot(&self, s: u16) -> Result<()> {
        let placed = &self.dirs.placed[s as usize];
        if !self.ident.slot_is_lazy(s) || placed.load(Acquire) {
            return Ok(());
        }
        let (level, shard) = self.ident.slot_parts(s);
        let lrel = format!("{PRIO_DIR}/{level}");
        let srel = self.ident.slot_rel(s);
        let root = self.dirs.root.as_fd();
        let prio = self.make_dir(root, PRIO_DIR, PRIO_DIR)?;
        let lfd = self.make_dir(prio.as_fd(), &level.to_string(), &lrel)?;
        let sfd = self.make_dir(lfd.as_fd(), shard_name(shard).as_str(), &srel)?;
        for (fd, rel) in [
            (lfd.as_fd(), lrel.as_str()),
            (prio.as_fd(), PRIO_DIR),
            (root, "."),
        ] {
            self.barrier(fd).map_err(|e| {
                Error::io(Call::FsyncDir, e, Outcome::NotDone, Some(self.path(rel)))
            })?;
        }
        let _ = self.dirs.ready[s as usize].get_or_init(|| sfd);
        placed.store(true, Release);
        Ok(())
    }

    /// Directory `name` of `parent` (`rel` from the root), made if missing.
    fn make_dir(&self, parent: BorrowedFd<'_>, name: &str, rel: &str) -> Result<OwnedFd> {
        let nd = |call, e| Error::io(call, e, Outcome::NotDone, Some(self.path(rel)));
        match self.sys.open_dir_beneath(parent, name) {
            Err(Errno::NOENT) => {}
            r => return r.map_err(|e| nd(Call::Open, e)),
        }
        let made = match self.sys.mkdir(parent, name) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => return Err(nd(Call::Mkdir, e)),
        };
        let fd = self
            .sys
            .open_dir_beneath(parent, name)
            .map_err(|e| nd(Call::Open, e))?;
        if made {
            // Owned and shared like `ready/`, whatever this process's user and umask: a
            // level made 2755 by a producer would lock the worker's group out of it.
            if let Err(e) =
                self.sys
                    .copy_owner_and_mode(fd.as_fd(), self.dirs.root.as_fd(), READY_DIR)
            {
                // Not left half made: the next placement makes it again (still empty).
                let _ = self.sys.rmdir(parent, name);
                return Err(nd(Call::Mkdir, e));
            }
        }
        Ok(fd)
    }

    /// Watch ready slot `s` on inotify instance `ino` with `flags`. A level's slot that does
    /// not exist is covered instead by watches ([`PARENT_WATCH`]) on the root, `prio/` and
    /// `prio/<l>/`, top-down as far as they exist: a directory made after its parent was
    /// watched is an event there ([`SlotWatch::made_by`]), and one made before is found by
    /// the next step down. Watch again after such an event, then list the slot.
    ///
    /// # Errors
    /// The errno of `inotify_add_watch(2)`, except `ENOENT` on the way to a level's slot.
    pub(crate) fn watch_slot(
        &self,
        ino: BorrowedFd<'_>,
        s: u16,
        flags: WatchFlags,
    ) -> core::result::Result<SlotWatch, Errno> {
        let slot = self.root.join(self.ident.slot_rel(s));
        let mut w = SlotWatch::default();
        match inotify::add_watch(ino, &slot, flags) {
            Ok(wd) => {
                w.slot = Some(wd);
                return Ok(w);
            }
            Err(Errno::NOENT) if self.ident.slot_is_lazy(s) => {}
            Err(e) => return Err(e),
        }
        let (level, _) = self.ident.slot_parts(s);
        let prio = self.root.join(PRIO_DIR);
        for p in [
            self.root.clone(),
            prio.clone(),
            prio.join(level.to_string()),
        ] {
            match inotify::add_watch(ino, &p, PARENT_WATCH) {
                Ok(wd) => w.parents.push(wd),
                Err(Errno::NOENT) => return Ok(w),
                Err(e) => return Err(e),
            }
        }
        match inotify::add_watch(ino, &slot, flags) {
            Ok(wd) => w.slot = Some(wd),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(e),
        }
        Ok(w)
    }
}
