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

use crate::disk::barrier::Barrier;
use crate::disk::layout::{shard_name, PRIO_DIR, READY_DIR};
use crate::disk::name::JobId;
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::ops::making::{Origin, MAKING_POLL, MAKING_WINDOW};
use crate::queue::Queue;
use rustix::fs::inotify::{self, WatchFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering::{Acquire, Release};

/// How long an enqueue avoids a ready slot this user may not write before it probes it
/// again ([`Queue::slot_writable`]): 10 s.
pub(crate) const UNWRITABLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// The flags of the watches on the directories leading to a slot not made yet.
pub(crate) const PARENT_WATCH: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DONT_FOLLOW)
    .union(WatchFlags::ONLYDIR);

/// The inotify watches covering one ready slot (see [`Queue::watch_slot`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct SlotWatch {
    /// The slot's own watch, when the slot exists.
    pub slot: Option<i32>,
    /// Watches on the directories leading to a slot that could not be watched (the root,
    /// `prio/`, `prio/<l>/`, as far as they were directories): an event there naming the
    /// next component down may mean the slot was made.
    pub parents: Vec<i32>,
}

impl SlotWatch {
    /// Whether an event of watch `wd` naming `name` may mean slot `s` (not watched itself)
    /// of `q` was made: `name` is the next component of the slot's path below the watched
    /// directory (`parents[i]` watches the first `i` components: the root, then `prio/`,
    /// then `prio/<l>/`; or the root, then `ready/`).
    pub(crate) fn made_by(&self, q: &Queue, s: u16, wd: i32, name: &str) -> bool {
        if self.slot.is_some() {
            return false;
        }
        let Some(i) = self.parents.iter().position(|&p| p == wd) else {
            return false;
        };
        q.ident.slot_rel(s).split('/').nth(i) == Some(name)
    }
}

/// What stands at a ready slot's path (see [`Queue::slot_dir`]).
pub(crate) enum SlotDir<'a> {
    /// The slot's directory, held; or the stand-in `absent` when it exists but this user
    /// cannot open it (its users open it by path).
    Held(BorrowedFd<'a>),
    /// A level's slot not made yet: it holds no job.
    Missing,
    /// Something that is not a directory (a file, or a symlink, never followed) stands on
    /// the slot's path at this entry (relative to the root, e.g. `prio`): no job can be in
    /// the slot, and none can be placed there until it is moved away.
    Blocked(String),
}

impl Queue {
    /// Ready slot `s`'s directory, opened now when this handle has not opened it yet (a
    /// level's slot made since the queue was opened); `None` when it does not exist or
    /// something that is not a directory stands in its way ([`Queue::slot_dir`]). One that
    /// exists but cannot be opened is the stand-in `absent` (its users open it by path).
    pub(crate) fn slot_fd(&self, s: u16) -> Option<BorrowedFd<'_>> {
        match self.slot_dir(s) {
            SlotDir::Held(fd) => Some(fd),
            SlotDir::Missing | SlotDir::Blocked(_) => None,
        }
    }

    /// What stands at ready slot `s`'s path: its directory (opened now when this handle has
    /// not opened it yet), nothing (a level's slot not made yet), or an entry that is not a
    /// directory on the way, or the slot itself when it is a shard of another owner
    /// ([`Queue::foreign_slot`]) (`ENOTDIR`, or `ELOOP` for a symlink: looked at with `fstatat`,
    /// never followed), which costs a `fstatat` per path component at each call.
    pub(crate) fn slot_dir(&self, s: u16) -> SlotDir<'_> {
        let cell = &self.dirs.ready[s as usize];
        if self.dirs.foreign[s as usize].is_some() {
            return SlotDir::Blocked(self.ident.slot_rel(s));
        }
        if let Some(fd) = cell.get() {
            return SlotDir::Held(fd.as_fd());
        }
        let rel = self.ident.slot_rel(s);
        match self.sys.open_dir_beneath(self.dirs.root.as_fd(), &rel) {
            Ok(fd) => SlotDir::Held(cell.get_or_init(|| fd).as_fd()),
            Err(Errno::NOENT) => SlotDir::Missing,
            Err(Errno::NOTDIR | Errno::LOOP) => match self.not_a_directory_on(&rel) {
                Some(block) => SlotDir::Blocked(block),
                None => SlotDir::Held(self.dirs.absent.as_fd()),
            },
            Err(_) => SlotDir::Held(self.dirs.absent.as_fd()),
        }
    }

    /// The owner of default-level shard `s` and the owner of `ready/`, when they differed
    /// as the queue was opened: a directory someone else put in the shard's place, never
    /// listed nor placed into (see `open_dirs`).
    pub(crate) fn foreign_slot(&self, s: u16) -> Option<(u32, u32)> {
        self.dirs.foreign[s as usize]
    }

    /// The error (not done) for a job operation on foreign shard `s` ([`Queue::foreign_slot`]),
    /// naming it.
    pub(crate) fn foreign_slot_error(&self, s: u16) -> Option<Cause> {
        let (owner, expected) = self.foreign_slot(s)?;
        let kind = crate::ErrorKind::ForeignDir { owner, expected };
        Some(Cause::not_done(
            kind,
            Some(self.path(&self.ident.slot_rel(s))),
        ))
    }

    /// The entry (from the root) that is not a directory and stands on ready slot `s`'s path
    /// (see [`SlotDir::Blocked`]), if any: a level's slot behind it, or a default-level
    /// shard held by the stand-in since the queue was opened.
    pub(crate) fn slot_blocked(&self, s: u16) -> Option<String> {
        match self.slot_dir(s) {
            SlotDir::Blocked(b) => Some(b),
            SlotDir::Held(fd) if self.dirs.is_standin(fd) => {
                self.not_a_directory_on(&self.ident.slot_rel(s))
            }
            _ => None,
        }
    }

    /// A new job id (made at `now_ms`) for a job of level `priority` whose slot (the shard
    /// its id picks) can receive it: an id whose shard is blocked by an entry that is not a
    /// directory (a file at `prio/5/03`), or is a directory this user may not write
    /// ([`Queue::slot_writable`]: a shard left at root's mode 755 in a queue shared by
    /// mode 777 or a group), is drawn again, so an enqueue is not refused at random one
    /// time in `shards`. One `openat` per call while the slot is not made yet. Draws go on
    /// until every shard of the level was found unusable (each is looked at once per call),
    /// so one usable shard of 64 is found, not missed one time in 60.
    ///
    /// # Errors
    /// [`crate::ErrorKind::Io`] (not done) naming the entry, when no shard of the level can
    /// take the job: blocked (`ENOTDIR`: the whole level is behind it, a file named `prio`,
    /// or each shard is) or not writable by this user (`EACCES`, `EPERM`).
    pub(crate) fn fresh_id(&self, priority: u8, now_ms: u64) -> Result<JobId> {
        let started = self.clock.boot_ns();
        loop {
            let mut refused = Vec::new();
            match self.fresh_id_once(priority, now_ms, &mut refused) {
                // Only a level in its making stood in the way: wait for it, up to
                // MAKING_WINDOW (polled every 20 ms), then say what refuses.
                Err((_, Errno::AGAIN))
                    if self.clock.boot_ns().saturating_sub(started)
                        < MAKING_WINDOW.as_nanos() as u64 =>
                {
                    std::thread::sleep(MAKING_POLL);
                }
                Ok(id) => {
                    // The job goes to another shard: say once which directories it avoids.
                    for (s, rel, e) in &refused {
                        self.warn_unwritable(*s, *e, rel);
                    }
                    return Ok(id);
                }
                Err((rel, e)) => {
                    let e = if e == Errno::AGAIN { Errno::ACCESS } else { e };
                    // Every shard refused on its own: one error naming the level's
                    // directory, not the shard drawn last (nor a warning per shard).
                    let own = |(s, rel, _): &(u16, String, Errno)| *rel == self.ident.slot_rel(*s);
                    if refused.len() == self.ident.shards as usize && refused.iter().all(own) {
                        let slot = self.ident.slot_rel(refused[0].0);
                        let level = slot.rsplit_once('/').map_or(slot.as_str(), |(l, _)| l);
                        let kind = crate::ErrorKind::NoWritableShard {
                            shards: self.ident.shards,
                            errno: e.into(),
                        };
                        return Err(Cause::not_done(kind, Some(self.path(level))));
                    }
                    // A directory shards of the level (or the level) would be made in
                    // refuses more than one shard: named first, and the call it refuses
                    // is that mkdir, not an open.
                    let (call, rel) = match refused.iter().find(|r| !own(r)) {
                        Some(r) => (Call::Mkdir, r.1.clone()),
                        None => (Call::Open, rel),
                    };
                    return Err(Cause::io(call, e, Outcome::NotDone, Some(self.path(&rel))));
                }
            }
        }
    }

    /// One round of [`Queue::fresh_id`]: every shard of the level looked at once at most.
    /// `Err((directory, errno))` names what made the last shard unusable (`EAGAIN`: only
    /// levels in their making refused). Each slot this user may not write (or make) is
    /// added to `refused`: `(slot, the directory that refuses, errno)`.
    fn fresh_id_once(
        &self,
        priority: u8,
        now_ms: u64,
        refused: &mut Vec<(u16, String, Errno)>,
    ) -> core::result::Result<JobId, (String, Errno)> {
        let shards = self.ident.shards;
        let (mut block, mut making): (Option<(String, Errno)>, _) = (None, None);
        // The shards found unusable by this call (at most 256 shards: `Identity`).
        let mut bad = [false; 256];
        let mut left = shards as usize;
        while left > 0 {
            let id = JobId::new(now_ms, crate::queue::random());
            let shard = id.shard(shards);
            if std::mem::replace(&mut bad[shard as usize % 256], true) {
                continue;
            }
            left -= 1;
            let slot = self.ident.slot(priority, shard);
            match self.slot_blocked(slot) {
                None => match self.slot_writable(slot) {
                    Ok(()) => return Ok(id),
                    Err(e) if e.1 == Errno::AGAIN => making = Some(e),
                    Err(e) => {
                        if matches!(e.1, Errno::ACCESS | Errno::PERM) {
                            refused.push((slot, e.0.clone(), e.1));
                        }
                        block = Some(e)
                    }
                },
                // Above the slot (`prio`, `prio/<l>`): every shard of the level is behind it.
                Some(b) if b != self.ident.slot_rel(slot) => {
                    block = Some((b, Errno::NOTDIR));
                    break;
                }
                Some(b) => block = Some((b, Errno::NOTDIR)),
            }
        }
        // A shard in its making may take the job in a moment: that outranks a refusal.
        Err(making.or(block).unwrap_or((String::new(), Errno::NOTDIR)))
    }

    /// Whether level `level`'s directory (`prio/<l>`, or `prio` itself) does not exist: a
    /// level not made yet, whose slots hold no job. One `openat2(2)`.
    pub(crate) fn level_missing(&self, level: u8) -> bool {
        let rel = format!("{PRIO_DIR}/{level}");
        matches!(
            self.sys.open_dir_beneath(self.dirs.root.as_fd(), &rel),
            Err(Errno::NOENT)
        )
    }

    /// Whether this user may make job files in ready slot `s`, found once per slot per
    /// handle (one `faccessat2(2)`) and remembered: a slot it may not write is avoided by
    /// [`Queue::fresh_id`] for [`UNWRITABLE_RECHECK`], then probed again (a mended mode is
    /// seen), and named in one warning per handle. A level's slot not made yet is probed
    /// through the directory it would be made in (`prio/<l>`, or `prio`, or the root, the
    /// first that exists): one this user may not make is avoided the same way. A probe that
    /// fails otherwise counts as writable: the enqueue's own calls report what is wrong.
    ///
    /// # Errors
    /// `(the directory probed, from the root; EACCES or EPERM)`: this user may not;
    /// `EAGAIN`: not yet, the directory is in its making ([`Queue::in_making`]).
    pub(crate) fn slot_writable(&self, s: u16) -> core::result::Result<(), (String, Errno)> {
        let w = &self.dirs.writable[s as usize];
        let known = w.load(Acquire);
        if known == 1 {
            return Ok(());
        }
        if known > 1 && self.clock.boot_ns() < known {
            return Err((self.unwritable_rel(s), Errno::ACCESS));
        }
        let slot = self.ident.slot_rel(s);
        let probed = match self.slot_dir(s) {
            SlotDir::Held(fd) if !self.dirs.is_standin(fd) => {
                self.sys.may_create_in(fd).map_err(|e| (slot, e))
            }
            // Not made yet: probed through the directory it would be made in.
            SlotDir::Missing => match slot.rfind('/') {
                Some(i) => self.probe_path(&slot[..i]),
                None => Ok(()),
            },
            // Held by name only (this user could not open it: a level in its making, an
            // unsearchable parent): probed by its path.
            _ => self.probe_path(&slot),
        };
        // When it was refused: a level's making is judged at that moment.
        let at = self.clock.wall_ns();
        match probed {
            // A level (or shard) another user is making right now: not avoided, not warned;
            // the caller draws again and, with no other shard, waits ([`Queue::fresh_id`]).
            Err((rel, Errno::ACCESS | Errno::PERM)) if self.in_making(&rel, at) => {
                Err((rel, Errno::AGAIN))
            }
            Err((rel, e @ (Errno::ACCESS | Errno::PERM))) => {
                self.avoid_slot(s, &rel);
                Err((rel, e))
            }
            Ok(()) => {
                w.store(1, Release);
                Ok(())
            }
            Err(_) => Ok(()),
        }
    }

    /// Directory `dir` (from the root), by its path, or the first of its parents that
    /// exists, probed as [`Sys::may_create_in`](crate::disk::sys::Sys::may_create_in);
    /// `Err` names it (or the directory whose opening was refused).
    fn probe_path(&self, dir: &str) -> core::result::Result<(), (String, Errno)> {
        let mut rel = dir;
        // A directory this user may not open: named, unless a parent refuses too (then the
        // parent is what to mend: `prio/7` at mode 000 refuses `prio/7/00` as well).
        let mut refused: Option<(String, Errno)> = None;
        loop {
            match self.sys.open_dir_beneath(self.dirs.root.as_fd(), rel) {
                Ok(fd) => match refused {
                    Some(r) => return Err(r),
                    None => {
                        return (self.sys.may_create_in(fd.as_fd()))
                            .map_err(|e| (rel.to_string(), e))
                    }
                },
                Err(Errno::NOENT) if refused.is_none() => {}
                Err(e @ (Errno::ACCESS | Errno::PERM)) => refused = Some((rel.to_string(), e)),
                Err(e) => return Err(refused.unwrap_or((rel.to_string(), e))),
            }
            match rel.rfind('/') {
                Some(i) => rel = &rel[..i],
                None => break,
            }
        }
        if let Some(r) = refused {
            return Err(r);
        }
        (self.sys.may_create_in(self.dirs.root.as_fd())).map_err(|e| (String::new(), e))
    }

    /// The directory that made slot `s` unwritable, as found by [`Queue::avoid_slot`]: the
    /// slot itself, or the parent it could not be made in.
    fn unwritable_rel(&self, s: u16) -> String {
        let slot = self.ident.slot_rel(s);
        let found = self.unwritable.lock().unwrap_or_else(|p| p.into_inner());
        let under = |w: &&String| {
            slot == **w || (slot.starts_with(w.as_str()) && slot[w.len()..].starts_with('/'))
        };
        let found = found.iter().filter(under).max_by_key(|w| w.len()).cloned();
        found.unwrap_or(slot)
    }

    /// Avoid ready slot `s` for new jobs for [`UNWRITABLE_RECHECK`]: this user may not make
    /// files in it, or may not make it in `rel` (found by a probe or by an enqueue's
    /// `open(2)`). Not logged: [`Queue::warn_unwritable`] does, once the caller knows
    /// whether the job went elsewhere.
    pub(crate) fn avoid_slot(&self, s: u16, rel: &str) {
        let until = self.clock.boot_ns() + UNWRITABLE_RECHECK.as_nanos() as u64;
        self.dirs.writable[s as usize].store(until.max(2), Release);
        let mut found = self.unwritable.lock().unwrap_or_else(|p| p.into_inner());
        if !found.iter().any(|f| f == rel) && found.len() < 256 {
            found.push(rel.to_string());
        }
    }

    /// Warn, once per directory per handle, that `rel` refuses this user (`e`) the files of
    /// slot `s` (or the slot itself) and that new jobs go to other shards.
    pub(crate) fn warn_unwritable(&self, s: u16, e: Errno, rel: &str) {
        let what = match rel == self.ident.slot_rel(s) {
            true => "files",
            false => "shard directories",
        };
        let mut warned = self.warned_blocks.lock().unwrap_or_else(|p| p.into_inner());
        if !warned.iter().any(|w| w == rel) && warned.len() < 256 {
            log::warn!(
                "{}: this user may not make {what} here ({}); new jobs go to the shards it \
                 may write, until it is mended",
                self.path(rel).display(),
                std::io::Error::from(e)
            );
            warned.push(rel.to_string());
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
            self.barrier(Barrier::LevelDir, fd).map_err(|e| {
                Cause::io(Call::FsyncDir, e, Outcome::NotDone, Some(self.path(rel)))
            })?;
        }
        let _ = self.dirs.ready[s as usize].get_or_init(|| sfd);
        placed.store(true, Release);
        Ok(())
    }

    /// Directory `name` of `parent` (`rel` from the root), made if missing
    /// ([`Queue::made_dir`]) and then owned and shared like `ready/`.
    fn make_dir(&self, parent: BorrowedFd<'_>, name: &str, rel: &str) -> Result<OwnedFd> {
        let nd = |call, e| Cause::io(call, e, Outcome::NotDone, Some(self.path(rel)));
        let (fd, origin) = self
            .made_dir(parent, name, rel)
            .map_err(|(c, e)| nd(c, e))?;
        if origin == Origin::MadeHere {
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

    /// Watch ready slot `s` on inotify instance `ino` with `flags`. A slot that cannot be
    /// watched itself, because it is a level's slot not made yet (`ENOENT`) or because an
    /// entry that is not a directory stands on its path (`ENOTDIR`: a file named `prio`, a
    /// symlink, never followed), is covered instead by watches ([`PARENT_WATCH`]) on the
    /// directories leading to it, top-down from the root as far as they are directories: a
    /// directory made (or moved in) after its parent was watched is an event there
    /// ([`SlotWatch::made_by`]), and one made before is found by the next step down. Watch
    /// again after such an event, then list the slot.
    ///
    /// # Errors
    /// The errno of `inotify_add_watch(2)` other than those two.
    pub(crate) fn watch_slot(
        &self,
        ino: BorrowedFd<'_>,
        s: u16,
        flags: WatchFlags,
    ) -> core::result::Result<SlotWatch, Errno> {
        let rel = self.ident.slot_rel(s);
        let slot = self.root.join(&rel);
        let mut w = SlotWatch::default();
        match inotify::add_watch(ino, &slot, flags) {
            Ok(wd) => {
                w.slot = Some(wd);
                return Ok(w);
            }
            Err(Errno::NOENT | Errno::NOTDIR) => {}
            Err(e) => return Err(e),
        }
        let mut dir = self.root.clone();
        let parts: Vec<&str> = rel.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            match inotify::add_watch(ino, &dir, PARENT_WATCH) {
                Ok(wd) => w.parents.push(wd),
                Err(Errno::NOENT | Errno::NOTDIR) => return Ok(w),
                Err(e) => return Err(e),
            }
            if i + 1 == parts.len() {
                break;
            }
            dir.push(part);
        }
        match inotify::add_watch(ino, &slot, flags) {
            Ok(wd) => w.slot = Some(wd),
            Err(Errno::NOENT | Errno::NOTDIR) => {}
            Err(e) => return Err(e),
        }
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::inotify::{CreateFlags, Reader};

    /// A file named `prio` in the root does not make watching a level's slot fail
    /// (`ENOTDIR`, which would leave every watcher of the handle blind): the watch stops at
    /// the file and covers the root, and the directory made in its place is an event that
    /// names the slot.
    #[test]
    fn a_file_in_the_way_of_a_slot_is_watched_around() {
        let dir = std::env::temp_dir().join(format!("steadq-levels-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let q = Queue::create(&dir, crate::Options::default()).unwrap();
        std::fs::write(dir.join(PRIO_DIR), b"5\n").unwrap();
        let s = q.ident.slot(5, 1);
        let ino = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).unwrap();
        let w = q
            .watch_slot(ino.as_fd(), s, PARENT_WATCH)
            .expect("watched around the file");
        assert_eq!((w.slot, w.parents.len()), (None, 1), "{w:?}");
        std::fs::remove_file(dir.join(PRIO_DIR)).unwrap();
        std::fs::create_dir(dir.join(PRIO_DIR)).unwrap();
        let mut buf = [core::mem::MaybeUninit::<u8>::uninit(); 1024];
        let mut r = Reader::new(ino.as_fd(), &mut buf);
        let ev = r.next().expect("an event for prio/");
        let name = ev.file_name().and_then(|n| n.to_str().ok()).unwrap();
        assert!(w.made_by(&q, s, ev.wd(), name), "{name}");
        assert!(!w.made_by(&q, s, ev.wd(), "ready"), "another name");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
