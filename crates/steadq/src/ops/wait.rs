//! Blocking claim: sleep on inotify (`inotify(7)`) and on a timer for the next known deadline,
//! instead of polling.
//!
//! A waiting claim lists the queue once (that listing also makes due and expired jobs ready,
//! see [`Queue::claim`]) and remembers two deadlines: when the next delayed job falls due
//! (wall clock) and when the next lease of this boot expires (`CLOCK_BOOTTIME`). It then sleeps
//! until one of them, the timeout, or an inotify event. Events carry names, so it learns
//! without listing: a ready name in `ready/<ss>/` means "try to claim", a leased name moves
//! the next expiry earlier, a delayed name in a watched bucket moves the next due time earlier,
//! and a new bucket in `delayed/` gets a watch and bounds the next due time by its start.
//! Deadlines survive wake-ups that yield no job. An idle wait with any number of leased,
//! delayed, dead or receipt entries costs one `poll(2)` per stop check (every 250 ms) and
//! two `stat(2)` calls a second (is the queue's directory still the one it holds?). Where inotify is unavailable (no `CONFIG_INOTIFY_USER`, or the watch limit is
//! reached) it polls, backing off from 50 ms to 1 s.

use crate::disk::layout::{bucket_dir, bucket_start, parse_bucket, DELAYED_DIR};
use crate::disk::name::{due_wall_ns, JobName, Kind};
use crate::disk::scan::{lease_expired, leased_len, ready_len};
use crate::disk::sys::Errno;
use crate::error::Result;
use crate::ops::lease::Lease;
use crate::ops::recover::RecoverReport;
use crate::queue::Queue;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a waiting claim looks at its stop flag, ns.
const STOP_CHECK_NS: u64 = 250_000_000;
/// How often a waiting claim looks whether its queue's directory was removed or replaced
/// ([`Queue::root_replaced`]: two `stat` calls), ns.
pub(crate) const LOOK_EVERY_NS: u64 = 1_000_000_000;
/// At most this many delayed buckets are watched; later ones are bounded by their start.
const MAX_BUCKET_WATCHES: usize = 64;
/// A wall clock that went back by more than this (ns, against `CLOCK_BOOTTIME`) since a
/// waiting claim's last listing was stepped back, not slewed: its due times, kept on the
/// wall clock, are listed again, with every delayed bucket.
const WALL_STEP_NS: i128 = 1_000_000_000;

/// What a watch descriptor watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Watched {
    ReadyShard,
    /// A directory on the way to a level's slot not made yet (`ops/levels.rs`).
    SlotParent,
    DelayedRoot,
    Bucket,
}

/// The inotify watches of one waiting claim.
struct Watch {
    fd: OwnedFd,
    wds: Vec<(i32, Watched)>,
    /// Per ready slot: watched (itself, or the directories leading to it). A slot that
    /// could not be watched because this user could not read it is watched once a listing
    /// reads it ([`Queue::watch_readable_slots`]).
    slots: Vec<bool>,
}

/// What the waiter knows: the next deadlines, and whether a listing is due.
#[derive(Debug, Default)]
struct Known {
    next_due_wall_ns: Option<u64>,
    next_expiry_boot_ns: Option<u64>,
    claimable: bool,
}

fn min_opt(a: Option<u64>, b: u64) -> Option<u64> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Queue {
    /// The waiting claim of [`Queue::claim_with`] (`ClaimOptions::wait`): claim a job with
    /// a lease of `lease`, waiting up to `timeout` for one; `Ok(None)` on timeout, and within
    /// 250 ms of `stop` becoming true, at once when it is true already (no job taken). While
    /// waiting it makes delayed jobs ready when they fall due and expired leases ready when
    /// they expire. See the module docs for what an idle wait costs.
    pub(crate) fn claim_wait_until(
        &self,
        lease: Duration,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<Option<Lease>, crate::Error> {
        let deadline = self
            .clock
            .boot_ns()
            .saturating_add(timeout.as_nanos().min(u64::MAX as u128) as u64);
        let mut watch = self.watch_ready();
        let mut known = Known {
            claimable: true,
            ..Known::default()
        };
        let mut backoff_ms = 50u64;
        let mut looked = self.clock.boot_ns();
        // The wall clock less the boot clock at the last listing (ns): it only changes when
        // the wall clock is set or slewed.
        let mut offset = self.wall_offset();
        // Jobs this user may not move (`EPERM`: another user's job in a sticky shard) are
        // all a sweep found: wait on as for no job (a job of its own may come), and at the
        // timeout fail as `claim_for` does, with that error (not done), never "no job".
        let mut refused: Option<crate::error::Cause> = None;
        loop {
            // Before any sweep: a set flag takes no job, also when jobs are ready (a
            // worker's loop on this call would otherwise never stop on a busy queue).
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if known.claimable || self.deadline_passed(&known) {
                let mut seen = RecoverReport::default();
                match self.claim_sweep(lease, &mut seen) {
                    Ok(Some(l)) => return Ok(Some(l)),
                    Ok(None) => refused = None,
                    Err(e) if crate::ops::lease::only_refused(&e) => refused = Some(e),
                    Err(e) => return Err(e.into()),
                }
                offset = self.wall_offset();
                known = self.known_after_sweep(&seen, watch.as_mut());
            }
            let now = self.clock.boot_ns();
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if now >= deadline {
                return match refused {
                    Some(e) => Err(e.into()),
                    None => Ok(None),
                };
            }
            let sleep_ns = self.sleep_ns(&known).min(deadline - now).min(STOP_CHECK_NS);
            match watch.as_mut() {
                Some(w) => self.wait_events(w, sleep_ns, &mut known),
                None => {
                    let ms = backoff_ms.min(sleep_ns / 1_000_000).max(1);
                    std::thread::sleep(Duration::from_millis(ms));
                    backoff_ms = (backoff_ms * 2).min(1000);
                    known.claimable = true;
                }
            }
            // The wall clock went back (NTP corrected a clock set ahead): a due time kept on
            // it is now late by the step, and a job placed in a later bucket while it was
            // ahead may be due by the boot clock (`Queue::read_later_buckets`).
            if self.wall_offset() < offset - WALL_STEP_NS {
                self.reread_later_buckets();
                known.claimable = true;
            }
            if let Some(e) = self.replaced_since(&mut looked) {
                return Err(e.into());
            }
        }
    }

    /// What a waiting claim knows after a sweep that saw `seen` (next due time, next lease
    /// expiry), its watch `watch` (if any) brought up to date.
    fn known_after_sweep(&self, seen: &RecoverReport, watch: Option<&mut Watch>) -> Known {
        let mut known = Known {
            next_due_wall_ns: seen.next_due_wall_ns,
            next_expiry_boot_ns: seen.next_expiry_boot_ns,
            claimable: false,
        };
        if seen.failed != 0 {
            // A due job or an expired lease it could not move (a permission, a full
            // disk): no event says when that is mended, so look again in a while.
            // It waited for the next enqueue, for good on an idle queue.
            // As long as for a job it may not move, or a shard it cannot read.
            let retry = crate::ops::lease::UNREADABLE_RECHECK.as_nanos() as u64;
            let at = self.clock.boot_ns().saturating_add(retry);
            known.next_expiry_boot_ns = min_opt(known.next_expiry_boot_ns, at);
        }
        if let Some(w) = watch {
            self.watch_buckets(w);
            // A slot that was unreadable (a level seen in its making, a mended
            // mode) and was read now: watched from now on, then listed again, so a
            // job placed there between this listing and the watch is not missed.
            if self.watch_readable_slots(w) {
                known.claimable = true;
            }
        }
        known
    }

    /// The queue removed (or replaced) under this handle, looked at when [`LOOK_EVERY_NS`]
    /// passed since `looked` (then set to now): no job reaches the directories it holds,
    /// and a wait would end in "no job" at its timeout, and so on for good.
    fn replaced_since(&self, looked: &mut u64) -> Option<crate::error::Cause> {
        let now = self.clock.boot_ns();
        if now.saturating_sub(*looked) < LOOK_EVERY_NS {
            return None;
        }
        *looked = now;
        self.root_replaced()
    }

    /// The wall clock less the boot clock now, ns.
    fn wall_offset(&self) -> i128 {
        self.clock.wall_ns() as i128 - self.clock.boot_ns() as i128
    }

    /// Nanoseconds until the earlier known deadline (`u64::MAX` if none).
    fn sleep_ns(&self, k: &Known) -> u64 {
        let due = k
            .next_due_wall_ns
            .map_or(u64::MAX, |d| d.saturating_sub(self.clock.wall_ns()));
        let exp = k
            .next_expiry_boot_ns
            .map_or(u64::MAX, |d| d.saturating_sub(self.clock.boot_ns()));
        due.min(exp)
    }

    fn deadline_passed(&self, k: &Known) -> bool {
        k.next_due_wall_ns
            .is_some_and(|d| self.clock.wall_ns() >= d)
            || k.next_expiry_boot_ns
                .is_some_and(|d| self.clock.boot_ns() >= d)
    }

    /// An inotify fd watching every ready shard and `delayed/`, or `None`.
    fn watch_ready(&self) -> Option<Watch> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        let mut w = Watch {
            fd,
            wds: Vec::new(),
            slots: vec![false; self.ident.slots() as usize],
        };
        for s in 0..self.ident.slots() {
            // A shard this user cannot read cannot be watched either; claims recheck it on
            // a timer (`UNREADABLE_RECHECK`), so the others keep their watches.
            if self.unreadable[s as usize].load(Ordering::Relaxed) {
                continue;
            }
            match self.watch_ready_slot(&mut w, s) {
                // One this user may not search (a level in its making, a shard at 700): left
                // unwatched and listed on a timer like an unreadable one, and watched once a
                // listing reads it (`watch_readable_slots`). Dropping every watch for it put
                // the waiter into polling: a full listing of every slot each second (a worker
                // beside a producer at umask 077 and 256 shards used 1.5 cores).
                Err(Errno::ACCESS | Errno::PERM) => {}
                Err(_) => return None,
                Ok(()) => {}
            }
        }
        if !self.add_watch(&mut w, DELAYED_DIR, Watched::DelayedRoot) {
            return None;
        }
        Some(w)
    }

    /// Watch ready slot `s`, or the directories on the way to it when it is a level's slot
    /// not made yet (see [`Queue::watch_slot`]).
    fn watch_ready_slot(&self, w: &mut Watch, s: u16) -> core::result::Result<(), Errno> {
        let flags = WatchFlags::CREATE
            | WatchFlags::MOVED_TO
            | WatchFlags::DONT_FOLLOW
            | WatchFlags::ONLYDIR;
        match self.watch_slot(w.fd.as_fd(), s, flags) {
            Ok(sw) => {
                let new = sw.slot.map(|d| (d, Watched::ReadyShard));
                let parents = sw.parents.into_iter().map(|d| (d, Watched::SlotParent));
                for (wd, what) in new.into_iter().chain(parents) {
                    if !w.wds.iter().any(|(d, _)| *d == wd) {
                        w.wds.push((wd, what));
                    }
                }
                w.slots[s as usize] = true;
                Ok(())
            }
            Err(e) => {
                // Watched again once a listing reads it (`watch_readable_slots`).
                w.slots[s as usize] = false;
                log::info!(
                    "inotify watch for {} failed ({e})",
                    self.root.join(self.ident.slot_rel(s)).display()
                );
                Err(e)
            }
        }
    }

    /// Watch the ready slots not watched yet that the last listing could read; whether
    /// any watch was added. One `inotify_add_watch` per such slot (and per directory
    /// leading to it); none when every slot is watched or still unreadable.
    fn watch_readable_slots(&self, w: &mut Watch) -> bool {
        let mut added = false;
        for s in 0..self.ident.slots() {
            if !w.slots[s as usize] && !self.unreadable[s as usize].load(Ordering::Relaxed) {
                added |= self.watch_ready_slot(w, s).is_ok();
            }
        }
        added
    }

    fn add_watch(&self, w: &mut Watch, rel: &str, what: Watched) -> bool {
        let flags = WatchFlags::CREATE
            | WatchFlags::MOVED_TO
            | WatchFlags::DONT_FOLLOW
            | WatchFlags::ONLYDIR;
        match inotify::add_watch(&w.fd, self.root.join(rel), flags) {
            Ok(wd) => {
                if !w.wds.iter().any(|(d, _)| *d == wd) {
                    w.wds.push((wd, what));
                }
                true
            }
            Err(e) => {
                log::info!(
                    "inotify watch on {} failed ({e}); polling instead",
                    self.root.join(rel).display()
                );
                false
            }
        }
    }

    /// Watch the delayed buckets up to the next known due one (the current bucket is where
    /// short delays and nacks land).
    fn watch_buckets(&self, w: &mut Watch) {
        let width = self.ident.delayed_bucket_ns;
        let current = self.clock.wall_ns() / width;
        let mut n = w.wds.iter().filter(|(_, k)| *k == Watched::Bucket).count();
        for b in current.saturating_sub(1)..=current.saturating_add(1) {
            if n >= MAX_BUCKET_WATCHES {
                break;
            }
            let rel = format!("{DELAYED_DIR}/{}", bucket_dir(b));
            if self.root.join(&rel).is_dir() && self.add_watch(w, &rel, Watched::Bucket) {
                n += 1;
            }
        }
    }

    /// Wait up to `ns` for events and learn from their names.
    fn wait_events(&self, w: &mut Watch, ns: u64, k: &mut Known) {
        let ts = rustix::time::Timespec {
            tv_sec: (ns / 1_000_000_000) as _,
            tv_nsec: (ns % 1_000_000_000) as _,
        };
        let mut fds = [PollFd::new(&w.fd, PollFlags::IN)];
        if !matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0) {
            return;
        }
        let mut buf = [core::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(w.fd.as_fd(), &mut buf);
        let mut new_buckets: Vec<String> = Vec::new();
        let mut new_dirs = false;
        while let Ok(ev) = reader.next() {
            if ev.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                k.claimable = true;
                continue;
            }
            let what = w
                .wds
                .iter()
                .find(|(d, _)| *d == ev.wd())
                .map(|(_, what)| *what);
            let Some(name) = ev.file_name().and_then(|n| n.to_str().ok()) else {
                continue;
            };
            match what {
                Some(Watched::ReadyShard) => self.learn_ready(name, k),
                // A level's directories were made: watch them, then list (below).
                Some(Watched::SlotParent) => new_dirs |= ev.events().contains(ReadFlags::ISDIR),
                Some(Watched::Bucket) => {
                    if let Ok((n, _)) = JobName::parse_untagged(name) {
                        if let Kind::Delayed { .. } = n.kind {
                            let c = &self.clock;
                            let due = due_wall_ns(&n.kind, c.boot_id(), c.boot_ns(), c.wall_ns());
                            k.next_due_wall_ns = min_opt(k.next_due_wall_ns, due);
                        }
                    }
                }
                Some(Watched::DelayedRoot) => {
                    if let Some(b) = parse_bucket(name) {
                        let start = bucket_start(b, self.ident.delayed_bucket_ns);
                        k.next_due_wall_ns = min_opt(k.next_due_wall_ns, start);
                        new_buckets.push(format!("{DELAYED_DIR}/{name}"));
                    }
                }
                None => {}
            }
        }
        if new_dirs {
            // Watched before the listing the claim makes next: a job placed in a slot made
            // meanwhile is found by that listing or is an event.
            for s in 0..self.ident.slots() {
                if !self.unreadable[s as usize].load(Ordering::Relaxed) {
                    let _ = self.watch_ready_slot(w, s);
                }
            }
            k.claimable = true;
        }
        for rel in new_buckets {
            // A job may have landed before the watch existed: list again.
            if w.wds.len() < MAX_BUCKET_WATCHES + self.ident.slots() as usize + 1
                && self.add_watch(w, &rel, Watched::Bucket)
            {
                k.claimable = true;
            }
        }
    }

    /// A name appeared in a ready shard: a ready job (claim), or a lease (its deadline).
    fn learn_ready(&self, name: &str, k: &mut Known) {
        match name.len() {
            n if ready_len(n) => k.claimable = true,
            n if leased_len(n) => {
                if let Ok((n, _)) = JobName::parse_untagged(name) {
                    if let Kind::Leased(l) = n.kind {
                        if lease_expired(&l, self.clock.boot_id(), self.clock.boot_ns()) {
                            k.claimable = true;
                        } else {
                            k.next_expiry_boot_ns =
                                min_opt(k.next_expiry_boot_ns, l.boot_deadline_ns);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}
