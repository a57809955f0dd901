//! Async enqueue and claim for tokio (feature `tokio`).
//!
//! Waiting is done on an inotify fd (from rustix) registered with tokio's reactor through
//! [`tokio::io::unix::AsyncFd`], plus a tokio timer for the next known deadline (a delayed job
//! falling due, a lease expiring) and the caller's timeout: no thread per waiter, no polling.
//! Any number of waiting claims share the runtime's threads.
//!
//! The filesystem calls themselves (a link or a rename and its fsyncs, usually well under a
//! few milliseconds on a local disk) run inline on the calling task, the way a blocking
//! `std::fs` call would; this keeps [`crate::Lease`] borrowing the queue as in the sync API.
//! On a slow medium, call from `tokio::task::spawn_blocking` or `block_in_place` instead.

use crate::disk::layout::{bucket_dir, DELAYED_DIR};
use crate::ops::capacity::drain;
use crate::ops::recover::RecoverReport;
use crate::ops::wait::LOOK_EVERY_NS;
use crate::{ClaimOptions, EnqueueError, EnqueueOptions, Enqueued, Error, ErrorKind, JobId};
use crate::{Lease, Queue, Result};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// How often a waiting claim with a stop flag looks at it (ns): between sleeps of at most
/// this long.
const STOP_LOOK_NS: u64 = 250_000_000;
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use std::os::fd::{AsFd, OwnedFd};

/// The watch flags of a ready slot.
const SLOT_FLAGS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::ONLYDIR);
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

/// A queue with async enqueue and claim (feature `tokio`). Must be used inside a tokio
/// runtime with I/O and time enabled (`#[tokio::main]`, `Builder::enable_all`). Clones share
/// one handle, as [`Queue`]'s do: clone it into each task that enqueues or claims.
#[derive(Clone, Debug)]
pub struct AsyncQueue {
    q: Queue,
}

/// An inotify fd on tokio's reactor; `None` when inotify is unavailable (then the waits
/// below sleep on timers only, at most 1 s at a time).
///
/// `AsyncFd::new` is deprecated in tokio 1.5x in favour of the `unsafe` `AsyncFd::register`
/// (this crate forbids `unsafe`). Its safety condition, that the fd stays open and the same
/// for the `AsyncFd`'s whole life, holds by construction: the `AsyncFd` owns the `OwnedFd`,
/// which nothing else can close.
#[allow(deprecated)]
fn reactor_fd(fd: Option<OwnedFd>) -> Option<AsyncFd<OwnedFd>> {
    fd.and_then(|fd| AsyncFd::new(fd).ok())
}

/// Wait until `fd` is readable or `max` passes; drain it. True when woken by an event, and
/// always without inotify (the caller looks again after each sleep then).
async fn wait_on(fd: &Option<AsyncFd<OwnedFd>>, max: Duration) -> bool {
    match fd {
        Some(afd) => {
            if let Ok(Ok(mut g)) = tokio::time::timeout(max, afd.readable()).await {
                drain(afd.get_ref());
                g.clear_ready();
                return true;
            }
            false
        }
        None => {
            tokio::time::sleep(max.min(Duration::from_secs(1))).await;
            true
        }
    }
}

impl AsyncQueue {
    /// Wrap an open queue.
    pub fn new(q: Queue) -> AsyncQueue {
        AsyncQueue { q }
    }

    /// The queue (its sync API: status, recovery, limits).
    pub fn queue(&self) -> &Queue {
        &self.q
    }

    /// Unwrap.
    pub fn into_inner(self) -> Queue {
        self.q
    }

    /// Enqueue `payload` with default options, as [`Queue::enqueue`].
    ///
    /// # Errors
    /// As [`Queue::enqueue`].
    pub async fn enqueue(&self, payload: &[u8]) -> Result<JobId, EnqueueError> {
        self.enqueue_with(payload, &EnqueueOptions::default())
            .await
            .map(Enqueued::id)
    }

    /// Enqueue with options, as [`Queue::enqueue_with`]. With [`EnqueueOptions::wait`] and
    /// the queue at its capacity limit, the task sleeps on inotify (a job leaving a ready
    /// shard, the limits file replaced) through tokio's reactor, up to the wait.
    ///
    /// # Errors
    /// As [`Queue::enqueue_with`].
    pub async fn enqueue_with(
        &self,
        payload: &[u8],
        o: &EnqueueOptions,
    ) -> Result<Enqueued, EnqueueError> {
        let Some(timeout) = o.wait else {
            return self.q.enqueue_unique(payload, o);
        };
        let start = Instant::now();
        loop {
            // Watched again each time: a level's slot made meanwhile is watched too.
            let fd = reactor_fd(self.q.room_watch());
            match self.q.enqueue_unique(payload, o) {
                Err(e) if matches!(e.kind(), ErrorKind::QueueFull { .. }) => {
                    let left = timeout.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Err(e);
                    }
                    let _ = wait_on(&fd, left).await;
                }
                r => return r,
            }
        }
    }

    /// Claim a job with the handle's lease, without waiting (`Ok(None)`: no job ready), as
    /// [`Queue::claim`].
    ///
    /// # Errors
    /// As [`Queue::claim`].
    pub async fn claim(&self) -> Result<Option<Lease>, Error> {
        self.claim_with(&ClaimOptions::default()).await
    }

    /// Claim as [`ClaimOptions`] say, as [`Queue::claim_with`]. A waiting claim sleeps on
    /// tokio's reactor: it wakes on inotify events in the ready shards, `delayed/` and the
    /// current delayed buckets, and on a timer for the next known deadline, and makes due
    /// delayed jobs and expired leases ready as it goes. A `stop` flag is looked at between
    /// sleeps of at most 250 ms.
    ///
    /// # Errors
    /// As [`Queue::claim_with`]; [`ErrorKind::Replaced`] (not done) within about a second
    /// once the queue's directory is removed or replaced.
    pub async fn claim_with(&self, o: &ClaimOptions<'_>) -> Result<Option<Lease>, Error> {
        let lease = o.lease.unwrap_or(self.q.opts.lease);
        if o.stop.is_some_and(|s| s.load(Relaxed)) {
            return Ok(None);
        }
        match o.wait {
            None => self.q.claim_for(lease),
            Some(timeout) => self.claim_wait(lease, timeout, o.stop).await,
        }
    }

    /// The waiting claim of [`AsyncQueue::claim_with`]: `Ok(None)` at `timeout`, or once
    /// `stop` is set.
    async fn claim_wait(
        &self,
        lease: Duration,
        timeout: Duration,
        stop: Option<&AtomicBool>,
    ) -> Result<Option<Lease>, Error> {
        let stopped = || stop.is_some_and(|s| s.load(Relaxed));
        let most = if stop.is_some() {
            STOP_LOOK_NS
        } else {
            LOOK_EVERY_NS
        };
        let start = Instant::now();
        let fd = reactor_fd(self.claim_watch());
        let mut absent: Vec<u16> = (0..self.q.ident.slots())
            .filter(|&s| self.q.ident.slot_is_lazy(s) && self.q.slot_fd(s).is_none())
            .collect();
        loop {
            if let Some(afd) = &fd {
                self.watch_new_slots(afd.get_ref(), &mut absent);
            }
            let mut seen = RecoverReport::default();
            if let Some(l) = self.q.claim_sweep(lease, &mut seen)? {
                return Ok(Some(l));
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() || stopped() {
                return Ok(None);
            }
            if let Some(afd) = &fd {
                self.watch_buckets(afd.get_ref());
            }
            let c = self.q.clock();
            let due = seen
                .next_due_wall_ns
                .map_or(u64::MAX, |d| d.saturating_sub(c.wall_ns()));
            let exp = seen
                .next_expiry_boot_ns
                .map_or(u64::MAX, |d| d.saturating_sub(c.boot_ns()));
            let until = left.min(Duration::from_nanos(due.min(exp)));
            // Slept in slices of at most a second, between which the queue's directory is
            // looked at (two `stat` calls, no listing): removed or replaced under this
            // handle, no job reaches the directories it holds any more.
            let slept = Instant::now();
            loop {
                let slice = until
                    .saturating_sub(slept.elapsed())
                    .min(Duration::from_nanos(most));
                let woken = wait_on(&fd, slice).await;
                if let Some(e) = self.q.root_replaced() {
                    return Err(e.into());
                }
                if stopped() {
                    return Ok(None);
                }
                if woken || slept.elapsed() >= until {
                    break;
                }
            }
        }
    }

    /// Watch the levels' slots made since `fd` was set up (a parent's event woke the
    /// caller), before it lists the queue again: a job placed in one later is an event.
    /// Slots whose level directory (or `prio/`) is missing are tried once per level (or once
    /// in all); where the level directory exists every missing slot of it is tried.
    fn watch_new_slots(&self, fd: &OwnedFd, absent: &mut Vec<u16>) {
        let (mut no_prio, mut no_level) = (false, None);
        absent.retain(|&s| {
            let level = self.q.ident.slot_parts(s).0;
            if no_prio || no_level == Some(level) {
                return true;
            }
            match self.q.watch_slot(fd.as_fd(), s, SLOT_FLAGS) {
                Ok(w) if w.slot.is_some() => false,
                Ok(w) => {
                    // parents: the root, `prio/`, `prio/<l>/`, as far as they exist. Only a
                    // missing level directory says the level's other slots are missing too:
                    // with `prio/<l>/` there, another shard's slot may exist (a waiter that
                    // skipped it slept through the job linked there).
                    no_prio = w.parents.len() < 2;
                    if w.parents.len() < 3 {
                        no_level = Some(level);
                    }
                    true
                }
                Err(_) => true,
            }
        });
    }

    /// An inotify fd watching the ready shards (for a level's slot not made yet, the
    /// directories on the way to it: `ops/levels.rs`) and `delayed/` for new names.
    fn claim_watch(&self) -> Option<OwnedFd> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        for s in 0..self.q.ident.slots() {
            self.q.watch_slot(fd.as_fd(), s, SLOT_FLAGS).ok()?;
        }
        inotify::add_watch(&fd, self.q.root.join(DELAYED_DIR), SLOT_FLAGS).ok()?;
        Some(fd)
    }

    /// Watch the delayed buckets around now (where short delays and nacks land).
    fn watch_buckets(&self, fd: &OwnedFd) {
        let width = self.q.ident.delayed_bucket_ns;
        let current = self.q.clock().wall_ns() / width;
        let flags = WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR;
        for b in current.saturating_sub(1)..=current.saturating_add(1) {
            let _ = inotify::add_watch(
                fd,
                self.q.root.join(format!("{DELAYED_DIR}/{}", bucket_dir(b))),
                flags,
            );
        }
    }
}
