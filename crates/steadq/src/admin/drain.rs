//! Waiting for a queue to drain: no job ready, leased, delayed or waiting for others
//! (`steadq wait --empty`).
//!
//! The waiter watches every ready slot (or the directories on the way to a level's slot not
//! made yet), `delayed/` and each of its buckets on inotify for names coming and going, and
//! counts the queue again ([`Queue::status_with`], without bytes) only after an event: an
//! idle wait costs one `poll(2)` and two `stat(2)` calls a second (is the queue's directory
//! still the one it holds?), never a listing.

use crate::disk::layout::DELAYED_DIR;
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Outcome};
use crate::ops::capacity::WATCH;
use crate::ops::wait::LOOK_EVERY_NS;
use crate::queue::Queue;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::inotify::{self, CreateFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// The most delayed buckets `wait_empty` watches (1024); past it, none (it looks every
/// `LOOK_EVERY_NS` all the same).
const BUCKET_WATCH_MAX: usize = 1024;

impl Queue {
    /// Wait until the queue holds no ready, leased, delayed or waiting job (dead jobs and
    /// receipts do not count; a waiting job is pending work, moved to ready by the ack
    /// that finishes its dependencies, after that ack's receipt), up to `timeout` (`None`: no limit). `Ok(true)` once it is empty (at
    /// once if it is now), `Ok(false)` at the timeout. Changes nothing. Waits on inotify, not
    /// by polling (see the module docs); a leased job counts until it is settled or
    /// recovered, a delayed one until it is claimed.
    ///
    /// # Errors
    /// Not done (nothing changes either way): [`crate::ErrorKind::Io`] when inotify cannot
    /// be set up or a directory cannot be listed; [`crate::ErrorKind::Replaced`] when the
    /// queue's directory was removed or replaced while it waited.
    pub fn wait_empty(&self, timeout: Option<Duration>) -> crate::Result<bool> {
        let io = |e| Cause::io(Call::Open, e, Outcome::NotDone, Some(self.root.clone()));
        let init = || inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).map_err(io);
        let mut ino = init()?;
        let nanos = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        let deadline = timeout.map(|t| self.clock.boot_ns().saturating_add(nanos(t)));
        loop {
            // Watched before counting: a job that moves after the count is an event.
            if !self.watch_live_dirs(&ino, true).map_err(io)? {
                // Too many buckets to watch: a fresh instance (the old one's watches
                // freed) without them; the wait looks every `LOOK_EVERY_NS` anyway.
                ino = init()?;
                self.watch_live_dirs(&ino, false).map_err(io)?;
            }
            let s = self.status_with(&crate::StatusOptions { bytes: false })?;
            if s.ready + s.leased + s.delayed + s.waiting == 0 {
                return Ok(true);
            }
            loop {
                let now = self.clock.boot_ns();
                let left = match deadline {
                    Some(d) if now >= d => return Ok(false),
                    Some(d) => d - now,
                    None => u64::MAX,
                };
                let ns = left.min(LOOK_EVERY_NS);
                let ts = rustix::time::Timespec {
                    tv_sec: (ns / 1_000_000_000) as _,
                    tv_nsec: (ns % 1_000_000_000) as _,
                };
                let mut fds = [PollFd::new(&ino, PollFlags::IN)];
                let woke = matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0);
                if let Some(e) = self.root_replaced() {
                    return Err(e.into());
                }
                if woke {
                    crate::ops::capacity::drain(&ino);
                    break;
                }
            }
        }
    }

    /// Watch every ready slot (see [`Queue::watch_slot`]), `delayed/` and its buckets on
    /// `ino`; a watch that exists already is kept (same watch descriptor).
    ///
    /// With `buckets`, the buckets too, unless there are more than [`BUCKET_WATCH_MAX`]:
    /// then none is added and it returns `false`. A watch is taken from this user's
    /// `fs.inotify.max_user_watches`, shared with every other process of the user (root's:
    /// systemd's path units): a member who makes 100 000 bucket directories must not spend
    /// them.
    fn watch_live_dirs(
        &self,
        ino: &OwnedFd,
        buckets_too: bool,
    ) -> core::result::Result<bool, Errno> {
        for s in 0..self.ident.slots() {
            match self.watch_slot(ino.as_fd(), s, WATCH) {
                // A slot this user may not read is counted as unreadable by `status`.
                Ok(_) | Err(Errno::ACCESS | Errno::PERM) => {}
                Err(e) => return Err(e),
            }
        }
        let delayed = self.root.join(DELAYED_DIR);
        inotify::add_watch(ino, &delayed, WATCH)?;
        // `waiting/`, once made: a waiting job that dies with its dependency leaves it.
        match inotify::add_watch(ino, self.root.join(crate::disk::layout::WAITING_DIR), WATCH) {
            Ok(_) | Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS | Errno::PERM) => {}
            Err(e) => return Err(e),
        }
        if !buckets_too {
            return Ok(true);
        }
        let mut buckets = Vec::new();
        self.sys.read_dir(self.dirs.delayed.as_fd(), |name, _, _| {
            if let Some(b) = name.filter(|n| crate::disk::layout::parse_bucket(n).is_some()) {
                buckets.push(delayed.join(b));
            }
        })?;
        if buckets.len() > BUCKET_WATCH_MAX {
            return Ok(false);
        }
        for b in buckets {
            match inotify::add_watch(ino, &b, WATCH) {
                // Removed since the listing (emptied): an event on `delayed/` already.
                Ok(_) | Err(Errno::NOENT | Errno::NOTDIR) => {}
                // One this user may not read (a member's, made first at mode 700): `status`
                // reports it unread, its jobs uncounted; the wait still looks every
                // `LOOK_EVERY_NS`. It failed the whole wait at once.
                Err(Errno::ACCESS | Errno::PERM) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}
