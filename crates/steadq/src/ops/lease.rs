//! Claim, and the lease guard: renew, ack, nack, fail, release.
//!
//! A claim renames a ready job, in its shard directory, to a leased name carrying this boot's
//! id, both deadlines and a fresh 128-bit lease token (attempt + 1), makes that durable, then
//! opens the file without following symlinks and verifies both digests before the payload is
//! handed out. Every later operation starts from the lease's exact name, so a lease that was
//! recovered, renewed elsewhere or settled gets [`ErrorKind::LeaseLost`] and changes nothing.

use crate::disk::format::{Corruption, Header, HEADER_LEN};
use crate::disk::name::{BootDue, JobId, JobName, Kind, LeaseFields, NameError, Reason};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Error, ErrorKind, Outcome, RenewError, Result, SettleError};
use crate::ops::payload::{
    check_file, check_whole, Checked, LoadFailed, PayloadReader, StreamFailed, CHUNK, PROBE,
};
use crate::ops::recover::RecoverReport;
use crate::ops::transition::MoveFailed;
use crate::queue::{random, Queue};
use rustix::fs::FileType;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A claimed job. Settle it with [`Lease::ack`], [`Lease::nack`] or [`Lease::fail`];
/// dropping it unsettled releases the job back to ready at once (the attempt stays counted).
/// A settling call that fails never releases the job itself: not done, it hands this lease
/// back in [`SettleError::NotDone`] (settle it again, or drop it to release the job);
/// otherwise the job is gone from this lease (lost, or indeterminate: never released or
/// settled again by it, and a lease left in place expires and is recovered).
///
/// Memory: the claim verified the job file reading it in 64 KiB chunks, so a lease costs
/// O(64 KiB) whatever the payload's size, and holds no descriptor. A job file of up to
/// 64 KiB (header included) is kept from that one read; a larger payload is read again when
/// asked for: [`Lease::reader`] streams it (O(1) beyond the caller's buffer),
/// [`Lease::payload`] loads it once (its size) and keeps it.
#[derive(Debug)]
pub struct Lease {
    q: Queue,
    /// The ready slot (a level's shard directory) the job is leased in.
    shard: u16,
    name: JobName,
    /// The job file's header, verified at claim.
    raw: [u8; HEADER_LEN],
    header: Header,
    /// The whole job file, once in memory: from the claim's read when it fit one chunk, else
    /// from the first [`Lease::payload`].
    file: OnceLock<Arc<Vec<u8>>>,
    settled: bool,
}

/// What [`Lease::ack_and_claim`] did when its ack was done.
#[derive(Debug)]
pub struct AckedNext {
    /// The ack's receipt: the ack is done (its rename durable).
    pub receipt: Receipt,
    /// The next job, claimed under the same barrier as the ack (`Ok(None)`: none ready), or
    /// the claim's own error with its outcome (not done, or indeterminate: then the job is
    /// leased in this process's name and comes back when the lease expires).
    pub next: std::result::Result<Option<Lease>, Error>,
}

/// Where a nacked job went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nacked {
    /// Back to ready at once (delay zero).
    Ready,
    /// To `delayed/`, due at this wall-clock time (its bucket and name carry it in ns).
    Delayed(std::time::SystemTime),
    /// To `dead/` with reason `exhausted`: no attempt left.
    Dead,
}

/// Proof of an ack: the receipt's name (in `receipts/<shard>/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The job.
    pub id: JobId,
    /// The receipt file name (under [`crate::ReceiptPolicy::None`] the file is removed once
    /// its evidence line is durable; the name is in that line).
    pub name: String,
}

/// Exponential backoff for retry `attempt` (1-based): `base * 2^(attempt-1)`, capped at
/// `max`. Attempt 1 gives `base`.
pub fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1).min(31))
        .unwrap_or(u32::MAX);
    base.checked_mul(factor).unwrap_or(max).min(max)
}

std::thread_local! {
    /// [`Queue::load_levels`]'s per-slot snapshot, kept between claims of this thread.
    static SKIP_SCRATCH: core::cell::Cell<Vec<Option<u64>>> = const { core::cell::Cell::new(Vec::new()) };
}

/// Ready jobs a claim's listing of one slot keeps: the oldest 256 of the whole directory (it
/// reads every name, parsing them without their tags, and tag-checks only those kept).
const CLAIM_CANDIDATES: usize = 256;

/// How often a claiming handle makes due delayed jobs ready before it claims (see
/// `promote_due_first`): a due job waits at most this long behind ready jobs of a lower level.
const PROMOTE_EVERY: Duration = Duration::from_millis(100);

/// How long claims skip a ready shard this user cannot read, or a job it may not move,
/// before trying it again; a waiting claim whose pass failed a move tries again after it too.
pub(crate) const UNREADABLE_RECHECK: Duration = Duration::from_secs(10);

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// How [`Queue::claim_with`] claims: the lease's length, and whether and how long to wait
/// for a job. `ClaimOptions::default()` is [`Queue::claim`]: the handle's lease, no wait.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClaimOptions<'a> {
    /// The lease (visibility timeout): a job not settled or renewed within it goes back to
    /// ready. `None`: the handle's [`Options::lease`](crate::Options::lease) (30 s unless
    /// opened with another). Zero, or longer than [`crate::MAX_LEASE`]:
    /// [`ErrorKind::InvalidArgument`], not done.
    pub lease: Option<Duration>,
    /// When no job is ready, wait up to this long for one (on inotify, no polling), making
    /// delayed jobs ready as they fall due and expired leases ready as they expire, so one
    /// waiting worker keeps a queue moving. `Ok(None)` at the end. `None`: answer at once.
    pub wait: Option<Duration>,
    /// A shutdown flag (set from a signal handler or another thread): the claim returns
    /// `Ok(None)` within 250 ms of it becoming true, and at once, claiming nothing, when it
    /// is true already, whatever is ready.
    pub stop: Option<&'a std::sync::atomic::AtomicBool>,
}

impl Queue {
    /// Claim a job with this handle's lease, [`Options::lease`](crate::Options::lease)
    /// (30 s unless opened with another). `Ok(None)` when no job is ready.
    ///
    /// A job this user may not move (the rename fails with `EPERM` or `EACCES`: a sticky
    /// shard directory and another user's file) is passed over, at its level and any other,
    /// with one warning; this handle's listings pass it over for the next 10 s, then try it
    /// again.
    ///
    /// A queue whose directory was removed under this handle looks empty to it: `Ok(None)`.
    /// [`Queue::is_current`] tells (a waiting claim, [`Queue::claim_with`], fails with
    /// [`ErrorKind::Replaced`] then).
    ///
    /// # Errors
    /// [`ErrorKind::Io`]: not done before the claim's rename; indeterminate after it (the job
    /// is then leased in this process's name and comes back when the lease expires). Not
    /// done, with that `EPERM`/`EACCES` and the job's path, when such jobs are all it found
    /// (never `Ok(None)`, "no job", then).
    pub fn claim(&self) -> Result<Option<Lease>, Error> {
        self.claim_for(self.opts.lease)
    }

    /// Claim as [`ClaimOptions`] say: with a lease of their length, waiting up to their
    /// `wait` for a job, stopping when their `stop` flag is set. As [`Queue::claim`]
    /// otherwise: when no job is ready it first makes due delayed jobs and expired leases
    /// ready and tries again; a job it cannot hand out is dead-lettered, not returned.
    ///
    /// # Errors
    /// As [`Queue::claim`], plus [`ErrorKind::InvalidArgument`] (not done) for a lease that
    /// is zero or longer than [`crate::MAX_LEASE`]. A waiting claim: a job this user may not
    /// move (`EPERM`, `EACCES`) does not end the wait; only at its end, if such jobs were
    /// all its last look found, it fails with that error (not done).
    /// [`ErrorKind::Replaced`] (not done) within about a second once the queue's directory
    /// is removed, or removed and made again, also before the wait began. (One shard
    /// removed alone is not looked for: [`Queue::replaced_dir`] tells.)
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use steadq::ClaimOptions;
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-claim-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, steadq::Options::default())?;
    /// let five_minutes = ClaimOptions { lease: Some(Duration::from_secs(300)), ..Default::default() };
    /// // Nothing ready: returns None after about 50 ms, without polling (inotify).
    /// let briefly = ClaimOptions { wait: Some(Duration::from_millis(50)), ..five_minutes };
    /// assert!(q.claim_with(&briefly)?.is_none());
    /// q.enqueue(b"thumbnail a.jpg")?;
    /// let mut lease = q.claim_with(&five_minutes)?.expect("a job is ready");
    /// lease.renew(Duration::from_secs(300))?; // still working: push the deadline out
    /// let receipt = lease.ack()?;
    /// assert!(receipt.name.ends_with(".rct"));
    /// assert_eq!(q.status()?.acked, 1);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), steadq::Error>(())
    /// ```
    pub fn claim_with(&self, o: &ClaimOptions<'_>) -> Result<Option<Lease>, Error> {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        let lease = o.lease.unwrap_or(self.opts.lease);
        match (o.wait, o.stop) {
            (Some(t), stop) => {
                self.claim_wait_until(lease, t, stop.unwrap_or(&AtomicBool::new(false)))
            }
            (None, Some(stop)) if stop.load(Relaxed) => Ok(None),
            (None, _) => self.claim_for(lease),
        }
    }

    /// Claim with a lease (visibility timeout) of `lease`. When no job is ready it first makes
    /// due delayed jobs and expired leases ready (the listing it already did shows the leases;
    /// delayed buckets are read only up to the current one) and tries again, so a plain
    /// `claim` from cron never strands a job.
    ///
    /// A job it cannot hand out is dead-lettered, not returned, and the claim goes on to the
    /// next one: a job file that fails verification (reason `corrupt`), a payload larger than
    /// this handle's [`Options::max_payload`](crate::Options::max_payload) (reason
    /// `toolarge`), a job with no attempt left (reason `exhausted`). Each is logged at warn
    /// level; [`Queue::claims_dead_lettered`] counts them. When it found none and a slot was refused by
    /// a level another user is making (`ops/making.rs`), it looks again every 100 ms for up
    /// to 1 s before it answers.
    ///
    /// # Errors
    /// As [`Queue::claim`], plus [`ErrorKind::InvalidArgument`] (not done) for a lease that is
    /// zero or longer than [`crate::MAX_LEASE`].
    pub(crate) fn claim_for(&self, lease: Duration) -> Result<Option<Lease>, Error> {
        use crate::ops::making::{MAKING_RECHECK, MAKING_WINDOW};
        let started = self.clock.boot_ns();
        loop {
            let got = self.claim_sweep(lease, &mut RecoverReport::default())?;
            // A slot refused by a level another user is making (`ops/making.rs`) may hold a
            // job: "no job" is not known until it can be read, so look again, every
            // MAKING_RECHECK for up to MAKING_WINDOW (only when nothing else was found).
            let making =
                || (self.in_making.iter()).any(|f| f.load(std::sync::atomic::Ordering::Relaxed));
            if got.is_some()
                || self.clock.boot_ns().saturating_sub(started) >= MAKING_WINDOW.as_nanos() as u64
                || !making()
            {
                return Ok(got);
            }
            std::thread::sleep(MAKING_RECHECK);
        }
    }

    /// [`Queue::claim_for`], collecting what the listings saw (next due time, next lease
    /// expiry, recovered jobs) in `seen`, for a waiting claim to sleep on.
    pub(crate) fn claim_sweep(
        &self,
        lease: Duration,
        seen: &mut RecoverReport,
    ) -> Result<Option<Lease>> {
        self.claim_sweep_with(lease, seen, true)
    }

    /// [`Queue::claim_sweep`]; without `sync` the claim's rename is left without its barrier
    /// (the caller shares one: [`Queue::claim_batch`]).
    fn claim_sweep_with(
        &self,
        lease: Duration,
        seen: &mut RecoverReport,
        sync: bool,
    ) -> Result<Option<Lease>> {
        crate::queue::check_lease(lease)?;
        let _op = self.op();
        self.promote_due_first(seen);
        for round in 0..2 {
            if let Some(l) = self.claim_round(lease, seen, sync, true)? {
                return Ok(Some(l));
            }
            if round == 1 {
                break;
            }
            let before = seen.moved();
            if let Err(e) = self.recover_delayed(seen) {
                log::warn!("making due delayed jobs ready: {e}");
            }
            if seen.moved() == before {
                break;
            }
        }
        // A due delayed job or an expired lease this user may not move (another user's
        // file in a sticky directory) is a job waiting, not "no job": not done, naming it.
        match seen.first_error.as_ref().map(|f| f.cause()) {
            Some(e) if only_refused(e) => Err(e.clone()),
            _ => Ok(None),
        }
    }

    /// Make due delayed jobs ready before a claim looks at the ready ones, at most once per
    /// [`PROMOTE_EVERY`] per handle: a due retry or delayed job of a high level must not wait
    /// behind ready jobs of a lower one (a one-shot `steadq claim` is a new handle: it always
    /// does). A failure is logged; the claim goes on.
    fn promote_due_first(&self, seen: &mut RecoverReport) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.clock.boot_ns().max(1);
        let last = self.promoted_at.load(Relaxed);
        if last != 0 && now.saturating_sub(last) < PROMOTE_EVERY.as_nanos() as u64 {
            return;
        }
        self.promoted_at.store(now, Relaxed);
        if let Err(e) = self.recover_delayed(seen) {
            log::warn!("making due delayed jobs ready: {e}");
        }
    }

    /// One claim: take the best candidate held (highest effective priority, then oldest id;
    /// see [`Queue::pick`]), listing first every slot that matters and holds none. A lost
    /// race moves on to the next candidate; at most two listings per slot per round. The
    /// cursor's lock is not held while a directory is listed. With `drain`, the events
    /// queued since the last claim are read first; a batch reads them once, at its first
    /// claim (see [`Queue::claim_batch`]).
    fn claim_round(
        &self,
        lease: Duration,
        seen: &mut RecoverReport,
        sync: bool,
        drain: bool,
    ) -> Result<Option<Lease>> {
        if drain {
            self.shards.drain(self);
        }
        let mut budget = 2 * self.ident.slots() as u32;
        // A job this user may not move (EPERM, EACCES: a sticky shard directory and another
        // user's file) is passed over for the next candidate: it stopped every claim, the
        // oldest job being tried first each time. If nothing else can be claimed, the claim
        // fails with its error (not done) instead of saying "no job".
        let mut refused: Option<Cause> = None;
        // Whether this claim made its one deep listing: a candidate dead-lettered (its attempts
        // used up) or lost to a race is followed by the next one held, not by a deep listing
        // of another slot (a new handle at 1,000,000 jobs whose oldest job was exhausted
        // listed two slots: 29 ms, not 14).
        let mut deep_done = false;
        loop {
            self.load_levels(seen, &mut budget, &mut deep_done)?;
            let Some((slot, name)) = self.pick() else {
                // Jobs passed over as refused by an earlier claim are still "a job this user
                // may not move", never "no job".
                return match refused.or_else(|| self.live_refusal()) {
                    Some(e) => Err(e),
                    None => Ok(None),
                };
            };
            let id = name.id;
            if self.is_refused(id) {
                // Listed by a listing whose refusal snapshot predates another thread's
                // give-back (`give_back` remembers the job, then moves it back): trying it
                // claimed and gave it back a second time (receipt generation 6, not 4, in a
                // CI run of `work --concurrency 3`). Its slot is listed again, and that
                // listing passes it over and wakes at the refusal's lapse.
                self.shards.unknown(slot);
                continue;
            }
            let tried = match self.try_claim(slot, name, lease, sync) {
                Err(Skip(e)) => {
                    self.warn_refused(id, &e);
                    // Listings pass it over from now on (for a while), so other slots and
                    // lower levels are listed and claimed: stopping the walk here left a
                    // job of a lower level unclaimed behind it.
                    self.remember_refused(id, &e);
                    refused.get_or_insert(e);
                    continue;
                }
                Err(Fail(e)) => return Err(e),
                Ok(l) => l,
            };
            if let Some(lease) = tried {
                let last = {
                    let c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
                    c.held[slot as usize].is_empty()
                };
                if let Kind::Leased(f) = lease.name.kind {
                    self.shards.claimed(slot, f.boot_deadline_ns, last);
                }
                return Ok(Some(lease));
            }
        }
    }

    /// Make sure the slots a pick must see hold their candidates: levels from the highest
    /// down, each shard of a level not known empty and not holding candidates (or holding
    /// ones an older arrival would pass) is listed, but at most one *deep* listing per claim
    /// (one that found a full set of [`CLAIM_CANDIDATES`] ready jobs): a listing reads its
    /// whole slot (the oldest-first rule), so a new handle at depth pays for one slot per
    /// claim, not for the whole level at once (1M jobs in 8 shards: one listing of 125,000
    /// names instead of eight). The slots not yet listed are listed by the next claims; until
    /// then a claim may pass over an older job in one of them, so with slots deeper than
    /// [`CLAIM_CANDIDATES`] the cross-shard bound is fewer than `shards` claims; with
    /// shallower slots every slot is listed and the order is exact. Without aging it stops at
    /// the first level that has candidates: a lower level cannot win. With aging every level
    /// is loaded, since an old low job may outrank the top level. Each listing costs one of
    /// `budget`.
    fn load_levels(
        &self,
        seen: &mut RecoverReport,
        budget: &mut u32,
        deep_done: &mut bool,
    ) -> Result<()> {
        // One clock read and one look at each lock for the whole walk: on a mostly empty
        // version-3 queue nearly every one of its 64 slots is known empty and holds nothing,
        // and per slot that was two clock reads and two locks (about 6% of a lifecycle's CPU
        // on tmpfs, perf).
        let now = self.clock.boot_ns();
        // Per slot: `Some(until)` where it is skipped without a look (known empty, nothing
        // pending, nothing held). In this thread's scratch vector: two vectors of the
        // slot count per claim were a quarter of a lifecycle's heap allocations.
        let mut skip = SKIP_SCRATCH.take();
        self.shards.known_empty(now, &mut skip);
        let any_held = {
            let c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
            for (k, h) in skip.iter_mut().zip(&c.held) {
                if !h.is_empty() {
                    *k = None;
                }
            }
            c.held.iter().any(|h| !h.is_empty())
        };
        let walked = self.walk_levels(seen, budget, deep_done, now, &skip, any_held);
        SKIP_SCRATCH.set(skip);
        walked
    }

    /// [`Queue::load_levels`]'s walk, given its snapshot: `skip` per slot (see there) and
    /// whether any slot held candidates.
    fn walk_levels(
        &self,
        seen: &mut RecoverReport,
        budget: &mut u32,
        deep_done: &mut bool,
        now: u64,
        skip: &[Option<u64>],
        any_held: bool,
    ) -> Result<()> {
        // A deep listing earlier in this claim ends its listings while candidates are held;
        // with none held (every one dead-lettered or lost), a claim lists on rather than say
        // "no job" beside unlisted slots.
        let mut found_some = *deep_done && any_held;
        for level in (0..self.ident.levels()).rev() {
            let level = if self.ident.version >= 3 {
                level
            } else {
                crate::disk::name::DEFAULT_PRIORITY
            };
            let mut any = false;
            // Whether this level's directory (`prio/<l>`) is missing, looked at (one
            // `openat2`) by the first of its slots that would be listed: its slots then hold
            // nothing and are known empty without a listing each (a new worker tried to open
            // all 64 of each missing level).
            let mut level_missing: Option<bool> = None;
            for shard in 0..self.ident.shards {
                let slot = self.ident.slot(level, shard);
                // Nothing held and no pending names: the slot is skipped exactly when
                // `Shards::skip` would skip it (known empty at `now`). Per slot, not "no
                // pending names anywhere": with one job pending (a handle that enqueues and
                // claims) the walk took three locks in each of the 40 slots above the
                // default level.
                if let Some(&Some(until)) = skip.get(slot as usize) {
                    if *budget != 0 && !found_some && until != u64::MAX {
                        seen.next_expiry_boot_ns =
                            Some(seen.next_expiry_boot_ns.map_or(until, |y| y.min(until)));
                    }
                    continue;
                }
                self.take_arrivals(slot, now);
                if self.holds(slot) {
                    any = true;
                    continue;
                }
                if *budget == 0 || found_some {
                    continue;
                }
                let generation = match self.shards.skip(slot, now) {
                    Ok(until) => {
                        // Known empty: no listing; a waiting claim wakes at `until`.
                        if until != u64::MAX {
                            seen.next_expiry_boot_ns =
                                Some(seen.next_expiry_boot_ns.map_or(until, |y| y.min(until)));
                        }
                        continue;
                    }
                    Err(generation) => generation,
                };
                if self.ident.slot_is_lazy(slot)
                    && *level_missing.get_or_insert_with(|| self.level_missing(level))
                {
                    self.shards.listed(slot, generation, true, None);
                    continue;
                }
                *budget -= 1;
                let failed = seen.failed;
                let (mut found, expiry) = self.sweep_shard(slot, seen)?;
                let empty = found.is_empty() && seen.failed == failed;
                self.shards.listed(slot, generation, empty, expiry);
                // Oldest last, so pop() gives the oldest.
                found.sort_unstable_by_key(|n| core::cmp::Reverse(n.id));
                any |= !found.is_empty();
                // A deep slot (a full set of candidates: it may hold many more) ends this
                // claim's listings; shallow ones are cheap and keep the order exact.
                found_some |= found.len() >= CLAIM_CANDIDATES;
                *deep_done |= found.len() >= CLAIM_CANDIDATES;
                self.hold_listed(slot, found);
            }
            if any && self.opts.aging.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// Hold `found`, a listing's ready jobs of `slot` (oldest last), as its candidates,
    /// keeping any the slot was given while this thread listed: another thread may have
    /// taken arrivals into it meanwhile ([`Queue::take_arrivals`]: the slot was found empty
    /// by a listing that ended first, then a job arrived), and a name this listing missed
    /// (made after its `getdents64` passed) would otherwise be dropped with the slot still
    /// known empty, so that this handle never claimed it (a job of 8-16 threads on one
    /// handle stayed ready until the handle was opened again). A name held twice is kept
    /// once; a stale one costs its claim a failed rename.
    fn hold_listed(&self, slot: u16, found: Vec<JobName>) {
        let mut c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let held = &mut c.held[slot as usize];
        if held.is_empty() {
            *held = found;
            return;
        }
        held.extend(found);
        held.sort_unstable_by_key(|n| (core::cmp::Reverse(n.id), n.generation));
        held.dedup();
    }

    /// Add the ready jobs that arrived in `slot` while it was known empty (ops/shards.rs,
    /// pending names) to its candidates, oldest last, each checked to be a regular file
    /// (`fstatat`, symlinks not followed): anything else makes the slot unknown, for a
    /// listing to report.
    fn take_arrivals(&self, slot: u16, now: u64) {
        let arrived = self.shards.take_pending(slot, now);
        if arrived.is_empty() {
            return;
        }
        let dir = self.place_ready(slot, State::Ready);
        // A job passed over as refused arrives again when a claim gives it back
        // (`give_back`): taking that arrival made an idle worker claim and give it back
        // about a thousand times a second, where listings wait out the refusal.
        let refused = self.refused_ids();
        // Filtered in place: the names kept are the fresh candidates (no second vector).
        let mut fresh = arrived;
        fresh.retain(|(n, linked)| {
            if refused.binary_search_by_key(&n.id.0, |r| r.0).is_ok() {
                // Not taken, but not forgotten: the slot is listed again, and that listing
                // passes the job over until its refusal lapses and then lists it again. The
                // slot was left known empty, and the job was tried only when a lease
                // deadline woke the claim (`work --concurrency 3`: 16-30 s, not 10 s).
                self.shards.unknown(slot);
                return false;
            }
            if *linked {
                // An O_TMPFILE this handle wrote and linked: a regular file (`linking`).
                return true;
            }
            match self
                .sys
                .stat_nofollow(dir.dir.fd(), &n.format(self.ident.id))
            {
                Ok(m) => {
                    m.file_type == rustix::fs::FileType::RegularFile || {
                        self.shards.unknown(slot);
                        false
                    }
                }
                Err(Errno::NOENT) => false, // claimed or moved meanwhile
                Err(_) => {
                    self.shards.unknown(slot);
                    false
                }
            }
        });
        let mut c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let held = &mut c.held[slot as usize];
        held.extend(fresh.into_iter().map(|(n, _)| n));
        // A stale name (the job moved on since) costs its claim one failed rename.
        held.sort_unstable_by_key(|n| core::cmp::Reverse(n.id));
    }

    /// Whether `slot` holds candidates that no older arrival would pass (else they are
    /// dropped, for a fresh listing).
    fn holds(&self, slot: u16) -> bool {
        let mut c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let held = &mut c.held[slot as usize];
        match held.first() {
            None => false,
            Some(newest) if self.shards.arrived_before(slot, newest.id.0) => {
                held.clear();
                false
            }
            Some(_) => true,
        }
    }

    /// Take the best candidate held: the highest effective priority, then the oldest id.
    /// The effective priority is the job's own, or with aging `a` (see
    /// [`crate::Options::aging`]) its own plus one per `a` of age, at most the top level.
    fn pick(&self) -> Option<(u16, JobName)> {
        let top = self.ident.levels().saturating_sub(1);
        let aging_ms = self.opts.aging.map(|a| (a.as_millis() as u64).max(1));
        // The wall clock matters only with aging (a clock read per claim otherwise).
        let now_ms = aging_ms.map_or(0, |_| self.clock.wall_ns() / 1_000_000);
        let mut c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        // A plain loop over the slots (64 in a version-3 queue) keeping the best level, id
        // and slot apart: `max_by_key` with a `(u8, Reverse<u128>)` key moved the key through
        // the stack at odd offsets, a store-forwarding stall per slot (perf: 1% of a tmpfs
        // lifecycle). Ties go to the later slot, as `max_by_key` gave them.
        let mut best: Option<(u8, JobId, usize)> = None;
        for (slot, h) in c.held.iter().enumerate() {
            let Some(n) = h.last() else { continue };
            let level = match aging_ms {
                None => n.priority,
                Some(a) => {
                    let up = now_ms.saturating_sub(n.id.unix_ms()) / a;
                    (n.priority as u64 + up).min(top.max(n.priority) as u64) as u8
                }
            };
            let better = best.is_none_or(|(l, id, _)| level > l || (level == l && n.id <= id));
            if better {
                best = Some((level, n.id, slot));
            }
        }
        let best = best?.2;
        c.held[best].pop().map(|n| (best as u16, n))
    }

    /// List ready slot `s` (`ready/<ss>` or `prio/<l>/<ss>`): its oldest ready jobs, after
    /// moving its expired leases back to ready (or to dead when no attempt is left). A move
    /// that fails is logged and counted in `seen.failed`; the listing goes on.
    /// Also returns the earliest deadline (boot ns) of a live lease left in the slot.
    pub(crate) fn sweep_shard(
        &self,
        s: u16,
        seen: &mut RecoverReport,
    ) -> Result<(Vec<JobName>, Option<u64>)> {
        let (priority, shard) = self.ident.slot_parts(s);
        let at = crate::disk::scan::SlotScan {
            queue_id: self.ident.id,
            priority,
            shard,
            shards: self.ident.shards,
            boot: self.clock.boot_id(),
            now_ns: self.clock.boot_ns(),
            max_ready: CLAIM_CANDIDATES,
            refused: self.refused_ids(),
        };
        let listed = self.list_ready_shard(s, |dir| {
            crate::disk::scan::scan_ready_shard(&self.sys, dir, &at, |raw, f| {
                self.warn_foreign(s, raw, f)
            })
        });
        let scan = match listed {
            Ok(Some(scan)) => scan,
            // A level's slot not made yet: empty (its making is an event, `ops/levels.rs`).
            // Not a directory on its path (a file named `prio`): empty too, warned once.
            Err(Errno::NOENT | Errno::NOTDIR) => return Ok((Vec::new(), None)),
            Ok(None) => {
                seen.unreadable_dir(self.ident.slot_rel(s));
                return Ok(self.unreadable_shard(s, seen));
            }
            Err(e) => {
                let rel = self.ident.slot_rel(s);
                return Err(Cause::io(
                    Call::ReadDir,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&rel)),
                ));
            }
        };
        seen.live_leases += scan.live;
        seen.foreign += scan.foreign;
        if let Some(x) = scan.next_expiry_boot_ns {
            seen.next_expiry_boot_ns = Some(seen.next_expiry_boot_ns.map_or(x, |y| y.min(x)));
        }
        let mut ready = scan.ready;
        for n in scan.expired {
            // A lease whose ack, nack or fail a crash split in two (`ops/split.rs`): the
            // newer name stands, the lease is gone.
            match self.settle_split(&self.place_ready(s, State::Leased), &n) {
                Ok(true) => {
                    seen.split += 1;
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    seen.fail(e);
                    continue;
                }
            }
            match self.expire_lease(s, &n) {
                Ok(Some(r)) => {
                    seen.expired += 1;
                    ready.push(r);
                }
                Ok(None) => seen.expired_dead += 1,
                Err(e) if e.is_lease_lost() => {}
                Err(e) => seen.fail(e),
            }
        }
        // A listing that kept only the oldest knows the slot is not emptied by claiming them:
        // never "known empty" after its last candidate (recheck time 0).
        let mut expiry = if scan.truncated {
            Some(0)
        } else {
            scan.next_expiry_boot_ns
        };
        if scan.refused != 0 {
            // Jobs passed over as refused: listed again when the first of their refusals
            // lapses, when a waiting claim wakes to try them again. At that lapse, not a
            // full UNREADABLE_RECHECK from this listing (one of `work --concurrency 3`'s
            // threads listing just before another's refusal lapsed waited 10 s more), and
            // at the lapse of this slot's jobs, not of any (a worker beside 400 refused
            // jobs then relisted every slot at each lapse: 1.5 cores).
            let recheck = self.clock.boot_ns() + UNREADABLE_RECHECK.as_nanos() as u64;
            let at = scan.refused_until.unwrap_or(recheck).min(recheck);
            expiry = Some(expiry.map_or(at, |x| x.min(at)));
            seen.next_expiry_boot_ns = Some(seen.next_expiry_boot_ns.map_or(at, |y| y.min(at)));
        }
        Ok((ready, expiry))
    }

    /// Shard `s`, which this user cannot read (logged by `list_ready_shard`): no
    /// candidates, and known empty until a recheck [`UNREADABLE_RECHECK`] from now, or
    /// [`MAKING_RECHECK`](crate::ops::making::MAKING_RECHECK) when the refusal is a
    /// directory in its making ([`Queue::in_making`]), when a waiting claim wakes to try it
    /// again.
    fn unreadable_shard(&self, s: u16, seen: &mut RecoverReport) -> (Vec<JobName>, Option<u64>) {
        let wait = match self.in_making[s as usize].load(std::sync::atomic::Ordering::Relaxed) {
            true => crate::ops::making::MAKING_RECHECK,
            false => UNREADABLE_RECHECK,
        };
        let at = self.clock.boot_ns() + wait.as_nanos() as u64;
        seen.next_expiry_boot_ns = Some(seen.next_expiry_boot_ns.map_or(at, |y| y.min(at)));
        (Vec::new(), Some(at))
    }

    /// Move expired lease `n` of shard `s` back to ready (`Some(new name)`) or, with no
    /// attempt left, to dead (`None`).
    fn expire_lease(&self, s: u16, n: &JobName) -> Result<Option<JobName>> {
        let from = self.place_ready(s, State::Leased);
        let r = if n.exhausted() {
            let dead = self.place_dead()?;
            let to = n.next(
                Kind::Dead {
                    reason: Reason::EXHAUSTED,
                },
                false,
            );
            self.move_job(&from, n, &dead, &to, Op::ExpireExhausted)?;
            // Named, and counted as a claim's dead-lettering: `work --once` whose sweep did
            // this said nothing and exited 3 "no job ready".
            log::warn!(
                "job {}: lease expired with no attempt left (attempt {}/{}); dead-lettered (reason exhausted)",
                n.id,
                n.attempt,
                n.max_attempts
            );
            self.claim_dead
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            None
        } else {
            let to = n.next(Kind::Ready, false);
            self.move_job(
                &from,
                n,
                &self.place_ready(s, State::Ready),
                &to,
                Op::Expire,
            )?;
            Some(to)
        };
        log::info!(
            "recovered expired lease of job {} (attempt {}/{})",
            n.id,
            n.attempt,
            n.max_attempts
        );
        Ok(r)
    }

    /// Warn about a foreign entry in `ready/<s>/` once per handle, then at debug level
    /// (`status` counts them and `fsck` lists them).
    fn warn_foreign(&self, s: u16, raw: &str, f: crate::disk::scan::Foreign) {
        let p = self.path(&format!("{}/{raw}", self.ident.slot_rel(s)));
        if !self
            .warned_foreign
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            log::warn!(
                "{}: {f}; skipped (more are logged at debug level; run `steadq fsck`)",
                p.display()
            );
        } else {
            log::debug!("{}: {f}; skipped", p.display());
        }
    }

    /// Try to claim one candidate. `Ok(None)`: lost the race, or it was dead-lettered.
    fn try_claim(
        &self,
        shard: u16,
        name: JobName,
        lease: Duration,
        sync: bool,
    ) -> core::result::Result<Option<Lease>, TryFailed> {
        let here = self.place_ready(shard, State::Ready);
        if name.exhausted() {
            // A job with no attempt left that cannot go to `dead/` (this user may not write
            // there, no inode left for the bucket, a full disk) stays ready and is passed
            // over like a job this user may not move: it stopped every claim of its level,
            // the oldest job being tried first each time, while the jobs behind it waited
            // (breaker finding). Only a move that may have happened fails the claim.
            // The older half of a move a crash split (`ops/split.rs`): a dead-lettering
            // whose dead name survived beside this one, or a newer state. That one stands;
            // dead-lettering this name again made a second dead name for the job.
            match self.settle_split(&here, &name) {
                Ok(true) => return Ok(None),
                Ok(false) => {}
                Err(e) if e.outcome() == Outcome::NotDone => return Err(Skip(e)),
                Err(e) => return Err(Fail(e)),
            }
            let dead = match self.place_dead() {
                Ok(d) => d,
                Err(e) if e.outcome() == Outcome::NotDone => return Err(Skip(e)),
                Err(e) => return Err(Fail(e)),
            };
            let to = name.next(
                Kind::Dead {
                    reason: Reason::EXHAUSTED,
                },
                false,
            );
            return match self.move_job(&here, &name, &dead, &to, Op::ClaimExhausted) {
                Ok(()) => {
                    log::warn!(
                        "job {}: no attempt left (attempt {}/{}); dead-lettered (reason exhausted)",
                        name.id,
                        name.attempt,
                        name.max_attempts
                    );
                    self.claim_dead
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok(None)
                }
                Err(e) if e.is_lease_lost() => Ok(None),
                Err(MoveFailed::NotDone(e)) => Err(Skip(e)),
                Err(e) => Err(Cause::from(e).into()),
            };
        }
        let fields = LeaseFields {
            boot_id: self.clock.boot_id(),
            boot_deadline_ns: self.clock.boot_ns().saturating_add(ns(lease)),
            wall_deadline_ns: self.clock.wall_ns().saturating_add(ns(lease)),
            token: random(),
        };
        let leased = name.next(Kind::Leased(fields), true);
        let to = self.place_ready(shard, State::Leased);
        let moved = if sync {
            self.move_job(&here, &name, &to, &leased, Op::Claim)
        } else {
            self.rename_job(&here, &name, &to, &leased, Op::Claim)
        };
        match moved {
            Ok(()) => self.take_leased(shard, leased, &to),
            Err(e) if e.is_lease_lost() => Ok(None),
            Err(MoveFailed::NotDone(e)) if refused(&e) => Err(Skip(e)),
            Err(e) => Err(Cause::from(e).into()),
        }
    }

    /// Remember job `id`, which a claim could not move (`e`), for [`UNREADABLE_RECHECK`]:
    /// listings pass it over until then.
    fn remember_refused(&self, id: crate::disk::name::JobId, e: &Cause) {
        let until = self.clock.boot_ns() + UNREADABLE_RECHECK.as_nanos() as u64;
        let mut r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        r.retain(|x| x.0 != id.0);
        if r.len() >= 4096 {
            r.remove(0);
        }
        r.push((id.0, until, e.clone()));
    }

    /// The jobs remembered as refused and not lapsed, `(id, until boot ns)` sorted by id
    /// (lapsed ones are dropped).
    fn refused_ids(&self) -> Vec<(u128, u64)> {
        let mut r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_empty() {
            return Vec::new();
        }
        let now = self.clock.boot_ns();
        r.retain(|x| x.1 > now);
        let mut ids: Vec<(u128, u64)> = r.iter().map(|x| (x.0, x.1)).collect();
        ids.sort_unstable();
        ids
    }

    /// Whether job `id` is remembered as refused and its refusal has not lapsed.
    fn is_refused(&self, id: crate::disk::name::JobId) -> bool {
        let r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_empty() {
            return false;
        }
        let now = self.clock.boot_ns();
        r.iter().any(|x| x.0 == id.0 && x.1 > now)
    }

    /// The error of a job remembered as refused and not lapsed, if any.
    fn live_refusal(&self) -> Option<Cause> {
        let r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.boot_ns();
        // A job passed over for its second name (`EMLINK`, see `take_leased`) is not a job
        // this user may not move: it makes no claim fail.
        let mlink = |e: &Cause| {
            e.errno()
                .is_some_and(|x| x.raw_os_error() == Errno::MLINK.raw_os_error())
        };
        r.iter()
            .find(|x| x.1 > now && !mlink(&x.2))
            .map(|x| x.2.clone())
    }

    /// Log job `id`, which a claim could not move or open for lack of permission (`e`), once
    /// per job per handle, and by name for the first [`REFUSED_WARNINGS`] jobs only: one `claim` beside
    /// 200 such jobs printed 200 warnings. Past that, one line says so and the rest go to
    /// the debug level.
    fn warn_refused(&self, id: crate::disk::name::JobId, e: &Cause) {
        use std::sync::atomic::Ordering::Relaxed;
        // By job id: the path changes each time a claim gives the job back.
        let key = format!("job {id}");
        let mut warned = self.warned_blocks.lock().unwrap_or_else(|p| p.into_inner());
        if warned.contains(&key) || warned.len() >= 256 {
            return;
        }
        warned.push(key);
        match self.warned_refused.fetch_add(1, Relaxed) {
            n if n < REFUSED_WARNINGS => {
                log::warn!("{e}; this worker passes it over (fsck and status still count it)")
            }
            REFUSED_WARNINGS => log::warn!(
                "more jobs this user may not move or open are passed over (named at debug \
                 level: RUST_LOG=debug)"
            ),
            _ => log::debug!("{e}; this worker passes it over"),
        }
    }

    /// After the claim's rename: open the leased file, read and verify it once, and hand it
    /// out, or dead-letter it (corrupt, too large). `Ok(None)`: dead-lettered. A file this
    /// user may not open goes back to ready with its attempt (`Skip`, not done; see
    /// [`Queue::give_back`]).
    fn take_leased(
        &self,
        shard: u16,
        leased: JobName,
        to: &crate::ops::transition::Place<'_>,
    ) -> core::result::Result<Option<Lease>, TryFailed> {
        let raw = leased.format(self.ident.id);
        // The job's path, for messages only: made when one is (not a heap string per claim).
        let rel = || format!("{}/{raw}", to.rel);
        let ind = |c, e| Cause::io(c, e, Outcome::Indeterminate, Some(self.path(&rel())));
        let file = match self.sys.open_file_ro(to.dir.fd(), &raw) {
            Ok(f) => f,
            Err(Errno::LOOP | Errno::NXIO | Errno::ISDIR) => {
                log::warn!(
                    "{}: not a regular file; dead-lettered (reason corrupt)",
                    self.path(&rel()).display()
                );
                self.dead_letter(shard, leased, Reason::CORRUPT, Op::ClaimCorrupt)?;
                return Ok(None);
            }
            Err(e @ (Errno::ACCESS | Errno::PERM)) => {
                return Err(self.give_back(shard, leased, e, true))
            }
            // This process is out of descriptors or memory: nothing about the job. It goes
            // back with its attempt and the claim is not done. Before, the claim was
            // indeterminate with the attempt used and the job leased until expiry, so a
            // worker at its fd limit dead-lettered whole queues `exhausted` without running
            // a job (breaker finding: `ulimit -n 32`, `work --concurrency 1024`).
            Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOMEM)) => {
                return Err(self.give_back(shard, leased, e, false))
            }
            Err(e) => return Err(ind(Call::Open, e).into()),
        };
        // A job file with a second name in the queue that is a lease or a receipt (a hard
        // link into `ready/` of a leased or acked job, made by a user who may write the
        // shards) is not run again: each name was claimed, run and acked in turn. It goes
        // back to ready with its attempt and is passed over like a job this user may not
        // move (named once per handle), without failing the claim; fsck names both names.
        // One `fstat` per claim; a walk of the queue only for a file with more than one name.
        if let Ok(2..) = self.sys.nlink(file.as_fd()) {
            if let Some(other) = self.live_twin(file.as_fd(), &leased, &to.rel)? {
                drop(file);
                self.warn_twin(&leased, &to.rel, &other);
                return match self.give_back(shard, leased, Errno::MLINK, true) {
                    Skip(_) => Ok(None),
                    f => Err(f),
                };
            }
        }
        // The descriptor is closed here: a lease holds none.
        let checked = self.load_verified(file, &leased);
        // Until `Ok`, dropping `lease` releases the job back to ready.
        let mut lease = Lease::new(self.clone(), shard, leased, checked.as_ref().ok());
        match checked {
            Ok(_) => Ok(Some(lease)),
            Err(Ok(c)) => {
                lease.settled = true;
                log::warn!(
                    "{}: corrupt ({c}); dead-lettered",
                    self.path(&rel()).display()
                );
                self.dead_letter(shard, leased, Reason::CORRUPT, Op::ClaimCorrupt)?;
                Ok(None)
            }
            Err(Err((Call::Read, Errno::FBIG))) => {
                // Not corrupt, but larger than this worker accepts (Options::max_payload):
                // dead-lettered as `toolarge`, for a worker with a higher limit to requeue.
                lease.settled = true;
                log::warn!(
                    "{}: payload larger than this worker's limit of {} bytes; dead-lettered (reason toolarge)",
                    self.path(&rel()).display(),
                    self.opts.max_payload
                );
                self.dead_letter(shard, leased, Reason::TOO_LARGE, Op::ClaimCorrupt)?;
                Ok(None)
            }
            // Dropping `lease` releases the job back to ready.
            Err(Err((c, e))) => Err(ind(c, e).into()),
        }
    }

    /// Another name of open job file `file` (just claimed as `leased` in `rel`) that says the
    /// job is leased or acked: a lease or a receipt of the same id and the same file
    /// (device, inode) where such names belong, found by one walk of the queue
    /// ([`Queue::names_of`]); its path from the root. `None` for a second name that is a
    /// ready, delayed or dead name (a move split by a crash, `ops/split.rs`, or a planted
    /// ready twin: the lease now shares the file with it, so the twin is refused in turn),
    /// or one outside the queue's places (a hard-link snapshot of the queue).
    ///
    /// A walk that fails is `Some` (its error): the job is not known not to have a twin.
    ///
    /// # Errors
    /// Indeterminate (the claim's rename is done): the `fstat` failed.
    fn live_twin(
        &self,
        file: std::os::fd::BorrowedFd<'_>,
        leased: &JobName,
        rel: &str,
    ) -> core::result::Result<Option<String>, TryFailed> {
        let ind = |c, e| Cause::io(c, e, Outcome::Indeterminate, Some(self.path(rel)));
        let me = self.sys.file_id(file).map_err(|e| ind(Call::Stat, e))?;
        let mine = leased.format(self.ident.id);
        // A walk that fails cannot tell: the job is passed over, as if a twin were found.
        let names = match self.names_of(leased.id) {
            Ok((names, _)) => names,
            Err(e) => return Ok(Some(format!("(not known: the walk failed: {e})"))),
        };
        for l in names {
            if !matches!(l.state, State::Leased | State::Acked) {
                continue;
            }
            let raw = l.name.format(self.ident.id);
            if l.dir == rel && raw.as_str() == mine.as_str() {
                continue;
            }
            let path = format!("{}/{raw}", l.dir);
            let same = self
                .sys
                .stat_nofollow(self.dirs.root.as_fd(), &path)
                .is_ok_and(|m| m.file == me);
            if same {
                return Ok(Some(path));
            }
        }
        Ok(None)
    }

    /// Warn once per handle that job `leased` (claimed in `rel`) shares its file with `other`.
    fn warn_twin(&self, leased: &JobName, rel: &str, other: &str) {
        let key = format!("twin {}", leased.id);
        let mut w = self.warned_blocks.lock().unwrap_or_else(|p| p.into_inner());
        if w.contains(&key) || w.len() >= 256 {
            return;
        }
        w.push(key);
        log::warn!(
            "job {} ({}): its file is also {} (a hard link: a second name of a job that is \
             leased or acked); not claimed, passed over (fsck names both)",
            leased.id,
            self.path(rel).display(),
            match other.starts_with('(') {
                true => other.to_string(),
                false => self.path(other).display().to_string(),
            }
        );
    }

    /// Leased job `leased` in `shard`, which this user may not open (`errno`: `EACCES`,
    /// `EPERM`: another user's file at mode 600 in a shard both may write), goes back to
    /// ready with the attempt the claim added given back ([`Op::ClaimUnreadable`]), so a
    /// worker that may read it gets every attempt; before, each such claim used one and
    /// left the job leased until its lease expired, and the job was dead-lettered
    /// `exhausted` without ever running. `Skip` (not done, naming the job's ready path): the
    /// claim passes it over as it does a job it may not move. When the move back fails the
    /// claim is indeterminate (the job stays leased; `recover` gives it back at expiry).
    ///
    /// With `pass_over` false (the claimer is out of descriptors or memory, nothing about the
    /// job) the job is not remembered and the claim fails, not done, instead of trying the
    /// next candidate the same way.
    fn give_back(&self, shard: u16, leased: JobName, errno: Errno, pass_over: bool) -> TryFailed {
        let from = self.place_ready(shard, State::Leased);
        let to = self.place_ready(shard, State::Ready);
        let mut back = leased.next(Kind::Ready, false);
        back.attempt = crate::disk::state::attempt_after(Op::ClaimUnreadable, leased.attempt);
        let at = |n: &JobName, rel: &str| self.path(&format!("{rel}/{}", n.format(self.ident.id)));
        let skip = Cause::io(
            Call::Open,
            errno,
            Outcome::NotDone,
            Some(at(&back, &to.rel)),
        );
        // Remembered before the job is back: the move is an event, and another thread of
        // this handle that took it before the memory existed claimed it and gave it back
        // again at once.
        if pass_over {
            self.remember_refused(leased.id, &skip);
        }
        match self.move_job(&from, &leased, &to, &back, Op::ClaimUnreadable) {
            Ok(()) if pass_over => Skip(skip),
            Ok(()) => Fail(skip),
            Err(e) => {
                log::warn!("giving back a job this user may not open: {e}");
                Fail(Cause::io(
                    Call::Open,
                    errno,
                    Outcome::Indeterminate,
                    Some(at(&leased, &from.rel)),
                ))
            }
        }
    }

    /// Read job file `file` (named `name`) once, in chunks of 64 KiB, and verify both
    /// digests: a claim costs O(64 KiB) of memory whatever the payload's size. A file of up
    /// to one chunk is read with one `pread(2)` and kept. `Err(Ok(_))`: corrupt;
    /// `Err(Err((Read, EFBIG)))`: a consistent file larger than `Options::max_payload` allows.
    fn load_verified(
        &self,
        file: OwnedFd,
        name: &JobName,
    ) -> core::result::Result<Checked, LoadFailed> {
        self.load_verified_up_to(file, name, self.opts.max_payload)
    }

    /// [`Queue::load_verified`] with payload limit `max_payload` (`u64::MAX`: none).
    fn load_verified_up_to(
        &self,
        file: OwnedFd,
        name: &JobName,
        max_payload: u64,
    ) -> core::result::Result<Checked, LoadFailed> {
        let fd = file.as_fd();
        // One `pread(2)` of up to PROBE bytes first. It comes back short only at the end of
        // a regular file, so a job file shorter than that is then read whole, and needs no
        // `fstat(2)` (a claim of a small job: one syscall fewer). A full probe, or the error
        // of a file that is not a regular file (a fifo's `ESPIPE`, `EISDIR`, a device's
        // `EINVAL`), takes the `fstat` path below; any other error is the read's.
        let mut probe = [0u8; PROBE];
        // The bytes of the probe that the fstat path may use: all of a full probe.
        let prefix = match self.sys.read_at(fd, &mut probe, 0) {
            Ok(n) if n < PROBE => {
                if n as u64 <= max_payload.saturating_add(HEADER_LEN as u64) {
                    return check_whole(probe[..n].to_vec(), name.id.0, self.ident.id);
                }
                0
            }
            Ok(n) => {
                // Full: the header says how long the file should be. Up to one chunk, one
                // more `pread(2)` with a byte of room past that end reads the rest and shows
                // the end (short by exactly that byte), so the file is whole without `fstat`.
                let declared = crate::disk::format::declared_len(&probe);
                let limit = max_payload.saturating_add(HEADER_LEN as u64);
                // Not shorter than the probe: a file longer than its header says (bytes
                // appended, a forged size) takes the `fstat` path, which finds it corrupt
                // (it indexed past the end of `buf` here and panicked the claim).
                let fits = |t: &u64| *t >= n as u64 && *t <= CHUNK as u64 && *t <= limit;
                if let Some(total) = declared.filter(fits) {
                    let total = total as usize;
                    let mut buf = vec![0u8; total + 1];
                    buf[..n].copy_from_slice(&probe);
                    let got = self
                        .sys
                        .read_at(fd, &mut buf[n..], n as u64)
                        .map_err(|e| Err((Call::Read, e)))?;
                    if n + got == total {
                        buf.truncate(total);
                        return check_whole(buf, name.id.0, self.ident.id);
                    }
                }
                n
            }
            Err(
                Errno::SPIPE
                | Errno::ISDIR
                | Errno::INVAL
                | Errno::NXIO
                | Errno::NODEV
                | Errno::AGAIN,
            ) => 0,
            Err(e) => return Err(Err((Call::Read, e))),
        };
        let size = match self.sys.fstat_allocated(fd) {
            Ok((FileType::RegularFile, size, allocated))
                if crate::disk::sys::sparse(size, allocated) =>
            {
                return Err(Ok(Corruption::Sparse {
                    declared: size,
                    allocated,
                }))
            }
            Ok((FileType::RegularFile, size, _)) => size,
            Ok(_) => return Err(Ok(Corruption::NotRegular)),
            Err(e) => return Err(Err((Call::Stat, e))),
        };
        let limit = max_payload.saturating_add(HEADER_LEN as u64);
        if size > limit {
            // Too large for this worker (EFBIG) if the header agrees with the file's size,
            // corrupt otherwise.
            let mut h = [0u8; HEADER_LEN];
            self.sys
                .read_exact_at0(fd, &mut h)
                .map_err(|e| Err((Call::Read, e)))?;
            let consistent = h[..8] == crate::disk::format::MAGIC
                && u64::from_le_bytes(h[56..64].try_into().unwrap_or_default())
                    .checked_add(HEADER_LEN as u64)
                    == Some(size);
            return Err(if consistent {
                Err((Call::Read, Errno::FBIG))
            } else {
                Ok(Corruption::Length)
            });
        }
        check_file(
            &self.sys,
            fd,
            size,
            &probe[..prefix],
            name.id.0,
            self.ident.id,
        )
    }

    /// Move leased job `name` in `shard` to `dead/` with `reason`.
    fn dead_letter(&self, shard: u16, name: JobName, reason: Reason, op: Op) -> Result<()> {
        let from = self.place_ready(shard, State::Leased);
        let dead = self.place_dead()?;
        self.move_job(
            &from,
            &name,
            &dead,
            &name.next(Kind::Dead { reason }, false),
            op,
        )?;
        self.claim_dead
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Take over a lease by its handle (the leased file name, as [`Lease::handle`] gives),
    /// for tools that claim in one process and settle in another.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] (naming the queue's directory) if `handle` is not a
    /// leased name of this queue ("a lease handle of another queue (or an altered one)"
    /// when its tag does not match this queue's);
    /// [`ErrorKind::LeaseLost`] if that exact lease no longer exists; [`ErrorKind::Corrupt`]
    /// if its file fails verification (it is then dead-lettered). Not done in every case.
    ///
    /// The file is read and verified in 64 KiB chunks, whatever its size:
    /// [`Options::max_payload`](crate::Options::max_payload) limits what is claimed, not
    /// the settling of a lease already held.
    pub fn lease_from_handle(&self, handle: &str) -> Result<Lease, Error> {
        // Named in the message: the queue the handle was given to (a handle of another queue
        // is the common mistake: two queues, one script).
        let refuse =
            |why| Cause::not_done(ErrorKind::InvalidArgument(why), Some(self.root.clone()));
        let name = match JobName::parse(handle, self.ident.id) {
            Ok(n) if matches!(n.kind, Kind::Leased(_)) && self.ident.has_priority(n.priority) => n,
            Err(NameError::Tag) => {
                return Err(refuse("a lease handle of another queue (or an altered one)").into())
            }
            _ => return Err(refuse("not a lease handle of this queue").into()),
        };
        let shard = self.ident.slot_of(&name);
        let rel = format!("{}/{handle}", self.ident.slot_rel(shard));
        // The lease's slot as it is now: one not made (a level's directory removed since
        // the claim) cannot hold the lease; one behind a file or a symlink is named. Both
        // were "open failed: Permission denied", from the stand-in that held the slot.
        let fd = match self.slot_dir(shard) {
            crate::ops::levels::SlotDir::Held(fd) => fd,
            crate::ops::levels::SlotDir::Missing => {
                return Err(Cause::not_done(ErrorKind::LeaseLost, Some(self.path(&rel))).into())
            }
            crate::ops::levels::SlotDir::Blocked(_) if self.foreign_slot(shard).is_some() => {
                let e = self.foreign_slot_error(shard);
                return Err(e.expect("a foreign slot").into());
            }
            crate::ops::levels::SlotDir::Blocked(b) => {
                let e = match self.sys.stat_nofollow(self.dirs.root.as_fd(), &b) {
                    Ok(m) if m.file_type == rustix::fs::FileType::Symlink => Errno::LOOP,
                    _ => Errno::NOTDIR,
                };
                let path = Some(self.path(&b));
                return Err(Cause::io(Call::Open, e, Outcome::NotDone, path).into());
            }
        };
        let dir = self.held_dir(fd, &self.ident.slot_rel(shard));
        let file = match self.sys.open_file_ro(dir.fd(), handle) {
            Ok(f) => f,
            Err(Errno::NOENT) => {
                return Err(Cause::not_done(ErrorKind::LeaseLost, Some(self.path(&rel))).into())
            }
            Err(e) => {
                let e = self.dir_errno(dir.fd(), e);
                return Err(
                    Cause::io(Call::Open, e, Outcome::NotDone, Some(self.path(&rel))).into(),
                );
            }
        };
        // Verified (in 64 KiB chunks) for the header the lease keeps (the payload's length
        // and digest for `reader`, the raw header for the ack's receipt policy), but with no
        // payload limit: `Options::max_payload` decides what a worker claims, and this job
        // was claimed already. Its handle must settle it whatever its size.
        match self.load_verified_up_to(file, &name, u64::MAX) {
            Ok(c) => Ok(Lease::new(self.clone(), shard, name, Some(&c))),
            Err(Ok(c)) => {
                self.dead_letter(shard, name, Reason::CORRUPT, Op::ClaimCorrupt)?;
                let dead = self.path(crate::disk::layout::DEAD_DIR);
                Err(
                    Cause::not_done(ErrorKind::Corrupt(c), Some(self.path(&rel)))
                        .moving_into(dead)
                        .into(),
                )
            }
            Err(Err((c, e))) => {
                Err(Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel))).into())
            }
        }
    }
}

impl Queue {
    /// The receipt kind an ack writes now: with the ack time (unix ns) in a version-2 queue.
    pub(crate) fn receipt_kind(&self, token: u128) -> Kind {
        Kind::Receipt {
            token,
            acked_ns: (self.ident.version >= 2).then(|| self.clock.wall_ns()),
        }
    }

    /// The delayed kind for a delay of `delay` whose wall-clock not-before is `not_before_ns`
    /// (checked by `due_after`): in a version-2 queue it also carries this boot's id and
    /// boot-clock not-before (unless the boot id is unknown), so within this boot a wall-clock
    /// jump changes nothing ([`crate::delay_due`]).
    pub(crate) fn delayed_kind(&self, not_before_ns: u64, delay: Duration) -> Kind {
        let boot_id = self.clock.boot_id();
        let delay_ns = delay.as_nanos().min(u64::MAX as u128) as u64;
        Kind::Delayed {
            not_before_ns,
            boot: (self.ident.version >= 2 && boot_id != 0).then(|| BootDue {
                boot_id,
                not_before_boot_ns: self.clock.boot_ns().saturating_add(delay_ns),
            }),
        }
    }

    /// Claim up to `max` jobs with a lease of `lease` each, sharing barriers: all the claims'
    /// renames first, then one fsync per ready directory touched (grouped with other threads'
    /// fsyncs), so every claim is durable when this returns, under `Strict` as under
    /// `Batched`. An empty `Vec` when no job is ready. Recovery runs as in
    /// [`Queue::claim`] when nothing is ready at first. The batch sees every job
    /// published before it began (the queue's inotify events are read when the candidates
    /// it knows of run out, not before each job).
    ///
    /// # Errors
    /// As [`Queue::claim_with`]. When a barrier fails, the outcome is indeterminate for the
    /// whole batch, and the leases already taken are released as they drop (each comes back
    /// by itself at its lease's end if the release fails too).
    pub fn claim_batch(&self, max: usize, lease: Duration) -> Result<Vec<Lease>, Error> {
        let _op = self.op();
        let mut out: Vec<Lease> = Vec::with_capacity(max.min(1024));
        let mut seen = RecoverReport::default();
        let mut shards: Vec<u16> = Vec::new();
        let mut last = None;
        while out.len() < max {
            let next = if out.is_empty() {
                self.claim_sweep_with(lease, &mut seen, false)
            } else {
                // The events are read again only when the candidates known run out: one
                // `read(2)` of the inotify fd per buffer of events (about 36 arrivals), not
                // per job. (Reading them once per batch left arrivals past the first buffer
                // unseen: a batch of 64 took 36.)
                match self.claim_round(lease, &mut seen, false, false) {
                    Ok(None) => self.claim_round(lease, &mut seen, false, true),
                    r => r,
                }
            };
            match next {
                Ok(Some(l)) => {
                    last = Some(l.shard);
                    if !shards.contains(&l.shard) {
                        shards.push(l.shard);
                    }
                    out.push(l);
                }
                Ok(None) => break,
                Err(e) if out.is_empty() => return Err(e.into()),
                // Only jobs this user may not move are left (passed over, warned): the batch
                // ends with what it took.
                Err(e) if refused(&e) && e.outcome() == Outcome::NotDone => break,
                Err(e) => return Err(e.with_outcome(Outcome::Indeterminate).into()),
            }
        }
        // On xfs and journaled ext4 the fsync of the last claim's directory commits every
        // earlier claim of the batch too (`sync_batch`).
        if let Some(last) = last {
            let last = self.place_ready(last, State::Leased);
            if self.group.one_barrier_per_rename(&self.sys, last.dir.fd()) {
                self.sync_place(&last)?;
            } else {
                for s in shards {
                    self.sync_place(&self.place_ready(s, State::Leased))?;
                }
            }
        }
        Ok(out)
    }

    /// Ack several leases, sharing barriers: all renames first, then one fsync per receipts
    /// directory and per ready directory touched (grouped with other threads' fsyncs), so
    /// every ack is durable when this returns, under `Strict` as under `Batched`. Returns the
    /// receipts in order.
    ///
    /// # Errors
    /// As [`Lease::ack`]; once any ack of the batch was renamed the outcome is indeterminate
    /// for the batch. Leases not yet renamed when one fails are released as they drop.
    /// [`ErrorKind::InvalidArgument`] (not done, nothing renamed, every lease released as it
    /// drops) when a lease belongs to another queue (another queue id): the barriers are this
    /// queue's, so ack each queue's leases through its own handle.
    pub fn ack_batch(&self, leases: Vec<Lease>) -> Result<Vec<Receipt>, Error> {
        if let Some(l) = leases.iter().find(|l| l.q.ident.id != self.ident.id) {
            return Err(Cause::not_done(
                ErrorKind::InvalidArgument("a lease of another queue in ack_batch"),
                Some(l.q.root.clone()),
            )
            .into());
        }
        let _op = self.op();
        let mut out = Vec::with_capacity(leases.len());
        let mut shards: Vec<(u16, u16)> = Vec::new();
        let mut last = None;
        let mut leases = leases.into_iter();
        // Receipts the policy still has to cut or remove once the batch is durable.
        let mut after: Vec<(u16, JobName, Vec<u8>)> = Vec::new();
        while let Some(mut l) = leases.next() {
            let r = l.ack_rename().map(|(r, new)| {
                if self.ident.receipts != crate::ReceiptPolicy::Job {
                    after.push((l.receipt_shard(), new, l.raw.to_vec()));
                }
                r
            });
            match r {
                Ok(r) => {
                    out.push(r);
                    last = Some(l.receipt_shard());
                    if !shards.contains(&(l.receipt_shard(), l.shard)) {
                        shards.push((l.receipt_shard(), l.shard));
                    }
                }
                Err(e) => {
                    // The rest stay leased and are released by drop.
                    drop(leases);
                    return Err(if out.is_empty() {
                        e.into()
                    } else {
                        e.with_outcome(Outcome::Indeterminate).into()
                    });
                }
            }
        }
        // On xfs and journaled ext4 the fsync of the last ack's receipts directory commits
        // every earlier ack of the batch too, in both of its directories.
        match last {
            Some(r)
                if self
                    .group
                    .one_barrier_per_rename(&self.sys, self.dirs.root.as_fd()) =>
            {
                self.sync_place(&self.place_receipts(r))?
            }
            _ => {
                for (r, s) in shards {
                    self.sync_moved(&self.place_ready(s, State::Leased), &self.place_receipts(r))?;
                }
            }
        }
        for (s, new, h) in after {
            self.after_ack(s, &new, &h);
        }
        Ok(out)
    }
}

impl Lease {
    /// The guard for leased job `name` in `shard`, whose file the claim checked (`None`: the
    /// check failed; the guard only releases or dead-letters it then).
    fn new(q: Queue, shard: u16, name: JobName, checked: Option<&Checked>) -> Lease {
        let (raw, header, file) = match checked {
            Some(c) => (c.raw, c.header, c.file.clone()),
            None => ([0; HEADER_LEN], Header::default(), None),
        };
        let lease = Lease {
            q,
            shard,
            name,
            raw,
            header,
            file: OnceLock::new(),
            settled: false,
        };
        if let Some(f) = file {
            let _ = lease.file.set(f);
        }
        lease
    }

    /// Rename into receipts without barriers (for [`Queue::ack_batch`]).
    fn ack_rename(&mut self) -> Result<(Receipt, JobName)> {
        self.settled = true;
        let new = self.name.next(self.q.receipt_kind(self.token()), false);
        self.q.rename_job(
            &self.here(),
            &self.name,
            &self.q.place_receipts(self.receipt_shard()),
            &new,
            Op::Ack,
        )?;
        let r = Receipt {
            id: self.name.id,
            name: new.format(self.q.ident.id).to_string(),
        };
        Ok((r, new))
    }

    /// The job id.
    pub fn id(&self) -> JobId {
        self.name.id
    }

    /// The job's priority (`0..`[`crate::PRIORITY_LEVELS`], higher first).
    pub fn priority(&self) -> u8 {
        self.name.priority
    }

    /// The `receipts/<ss>` shard of this job (its id's shard; every level shares them).
    fn receipt_shard(&self) -> u16 {
        self.name.id.shard(self.q.ident.shards)
    }

    /// The payload, verified against both digests, in memory.
    ///
    /// Memory: a job file of up to 64 KiB (header included) was kept from the claim's read,
    /// and this costs nothing more. A larger payload is read from the job file on the first
    /// call, checked against the payload digest the claim verified, and kept until the lease
    /// drops: the payload's size, once. To process a large payload without holding it, use
    /// [`Lease::reader`].
    ///
    /// # Errors
    /// Only on the first call for a payload larger than the claim kept, all not done (the job
    /// stays leased by this lease): [`ErrorKind::LeaseLost`] when its file is no longer under
    /// this lease's name (recovered after the lease expired, or settled);
    /// [`ErrorKind::Io`] for a failed `open(2)` or `pread(2)`, and with `EBADMSG` when the
    /// file no longer holds the payload the claim verified (changed or damaged since): fail
    /// the job ([`Reason::CORRUPT`]), or release it and the next claim dead-letters it.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-payload-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, steadq::Options::default())?;
    /// q.enqueue(b"resize photo 17")?;
    /// let lease = q.claim()?.expect("a job is ready");
    /// assert_eq!(lease.payload()?, b"resize photo 17");
    /// lease.ack()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), steadq::Error>(())
    /// ```
    pub fn payload(&self) -> crate::Result<&[u8]> {
        if let Some(f) = self.file.get() {
            return Ok(&f[HEADER_LEN..]);
        }
        let len = usize::try_from(self.header.payload_len)
            .ok()
            .and_then(|n| n.checked_add(HEADER_LEN))
            .ok_or_else(|| self.read_error(None, StreamFailed::Errno(Errno::FBIG)))?;
        let mut r = self.reader()?;
        let mut file = vec![0u8; len];
        file[..HEADER_LEN].copy_from_slice(&self.raw);
        let mut at = HEADER_LEN;
        loop {
            // The read that fills the buffer checks the digest; one more must return 0.
            match r.next(&mut file[at..]) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(e) => return Err(self.read_error(r.path(), e).into()),
            }
        }
        if at != len {
            return Err(self
                .read_error(r.path(), StreamFailed::Changed("short"))
                .into());
        }
        let f = self.file.get_or_init(|| Arc::new(file));
        Ok(&f[HEADER_LEN..])
    }

    /// The payload's length, bytes (from the header the claim verified; no I/O).
    pub fn payload_len(&self) -> u64 {
        self.header.payload_len
    }

    /// The payload as a stream: a [`PayloadReader`] ([`std::io::Read`]) that does not borrow
    /// this lease (it may move to another thread while the lease is renewed).
    ///
    /// A payload in memory (a job file of up to 64 KiB, or one [`Lease::payload`] loaded) is
    /// read from there, with no I/O. A larger one is read from the job file (opened now under
    /// the lease's current name, `O_NOFOLLOW`) with its SHA-256 computed again as it goes:
    /// memory stays O(1) beyond the caller's buffer. If the file no longer holds the payload
    /// the claim verified, the read reaching its end fails with
    /// [`std::io::ErrorKind::InvalidData`] (and returns none of the last bytes); **read until
    /// a read returns `Ok(0)` before acting on the payload**, and do not ack a job whose
    /// stream failed: fail it ([`Reason::CORRUPT`]) or release it (the next claim verifies it
    /// again and dead-letters it if it is corrupt).
    ///
    /// # Errors
    /// Not done in every case, the job still leased by this lease:
    /// [`ErrorKind::LeaseLost`] when the job file is no longer under this lease's name;
    /// [`ErrorKind::Io`] when `open(2)` fails.
    ///
    /// # Examples
    /// ```
    /// use std::io::Read;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-reader-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, steadq::Options::default())?;
    /// q.enqueue(&vec![7u8; 1 << 20])?; // 1 MiB: streamed from the file, not kept
    /// let lease = q.claim()?.expect("a job is ready");
    /// let mut r = lease.reader()?;
    /// let (mut buf, mut sum) = ([0u8; 8192], 0u64);
    /// loop {
    ///     let n = r.read(&mut buf)?; // InvalidData if the file changed since the claim
    ///     if n == 0 {
    ///         break; // the whole payload was read and matched its digest
    ///     }
    ///     sum += buf[..n].iter().map(|&b| u64::from(b)).sum::<u64>();
    /// }
    /// assert_eq!(sum, 7 << 20);
    /// lease.ack()?;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reader(&self) -> crate::Result<PayloadReader> {
        if let Some(f) = self.file.get() {
            return Ok(PayloadReader::memory(f.clone()));
        }
        let here = self.here();
        let name = self.name.format(self.q.ident.id);
        let path = self.q.path(&format!("{}/{name}", here.rel));
        match self.q.sys.open_file_ro(here.dir.fd(), &name) {
            Ok(fd) => Ok(PayloadReader::file(self.q.clone(), fd, &self.header, path)),
            Err(Errno::NOENT) => Err(Cause::not_done(ErrorKind::LeaseLost, Some(path)).into()),
            Err(e) => Err(Cause::io(Call::Open, e, Outcome::NotDone, Some(path)).into()),
        }
    }

    /// A failed read of the payload as an error (not done): `EBADMSG` when the file changed.
    fn read_error(&self, path: Option<&std::path::Path>, e: StreamFailed) -> Cause {
        let errno = match e {
            StreamFailed::Errno(e) => e,
            StreamFailed::Changed(why) => {
                log::warn!(
                    "job {}: payload changed since its claim ({why})",
                    self.name.id
                );
                Errno::BADMSG
            }
        };
        Cause::io(
            Call::Read,
            errno,
            Outcome::NotDone,
            path.map(|p| p.to_path_buf()),
        )
    }

    /// This claim's attempt number (1 for the first claim).
    pub fn attempt(&self) -> u32 {
        self.name.attempt
    }

    /// Claims allowed in all.
    pub fn max_attempts(&self) -> u32 {
        self.name.max_attempts
    }

    /// The current leased name (generation, deadlines, token).
    pub fn name(&self) -> &JobName {
        &self.name
    }

    /// The lease token (128 bits).
    pub fn token(&self) -> u128 {
        match self.name.kind {
            Kind::Leased(l) => l.token,
            _ => 0,
        }
    }

    /// The handle that [`Queue::lease_from_handle`] accepts: the leased file name.
    pub fn handle(&self) -> String {
        self.name.format(self.q.ident.id).to_string()
    }

    /// Detach: return the handle and do not release on drop (the lease then lives until it is
    /// settled through the handle or expires).
    pub fn into_handle(mut self) -> String {
        self.settled = true;
        self.handle()
    }

    /// Make this guard release its job on drop again (a settling call that was not done
    /// hands it back through [`crate::SettleError::NotDone`]).
    pub(crate) fn rearm(&mut self) {
        self.settled = false;
    }

    fn here(&self) -> crate::ops::transition::Place<'_> {
        self.q.place_ready(self.shard, State::Leased)
    }

    /// Run a settling move. Whatever the result, drop will not release afterwards: a failed
    /// ack, nack, fail or release reports its own outcome, and a lease it left in place
    /// expires and is recovered like any other (unless a not-done failure hands the lease
    /// back, re-armed: `SettleError::new`).
    fn settle(
        &mut self,
        to: &crate::ops::transition::Place<'_>,
        new: JobName,
        op: Op,
    ) -> Result<()> {
        self.settled = true;
        let q = self.q.clone();
        let _op = q.op();
        Ok(q.move_job(&self.here(), &self.name, to, &new, op)?)
    }

    /// Extend the lease to `lease` from now (generation + 1, same token).
    ///
    /// # Errors
    /// [`RenewError::LeaseLost`] if the lease was recovered or settled elsewhere;
    /// [`RenewError::NotDone`] or [`RenewError::Indeterminate`] with [`ErrorKind::Io`]:
    /// not done before the rename; indeterminate when the barrier after
    /// the rename failed (the lease lives on under its new name, and this `Lease` uses it from
    /// now on) or the rename returned `EIO` (this `Lease` follows whichever name exists);
    /// [`ErrorKind::InvalidArgument`] ([`RenewError::NotDone`], the lease kept as it was) for
    /// a lease that is zero or longer than [`crate::MAX_LEASE`].
    pub fn renew(&mut self, lease: Duration) -> Result<(), RenewError> {
        crate::queue::check_lease(lease).map_err(RenewError::from_internal)?;
        let Kind::Leased(mut f) = self.name.kind else {
            unreachable!("a Lease always holds a leased name")
        };
        f.boot_deadline_ns = self.q.clock.boot_ns().saturating_add(ns(lease));
        f.wall_deadline_ns = self.q.clock.wall_ns().saturating_add(ns(lease));
        let new = self.name.next(Kind::Leased(f), false);
        let q = self.q.clone();
        let here = q.place_ready(self.shard, State::Leased);
        match self.q.rename_job(&here, &self.name, &here, &new, Op::Renew) {
            Ok(()) => {}
            Err(MoveFailed::Unknown(e)) => {
                // EIO from the rename: it may or may not have happened. Which name is live
                // now is a fact the directory shows; the next renew or settle must use it.
                let new_name = new.format(self.q.ident.id);
                if self.q.sys.stat_nofollow(here.dir.fd(), &new_name).is_ok() {
                    self.name = new;
                }
                return Err(RenewError::from_internal(e));
            }
            Err(m) => {
                // Not done: the old name stands (or, lost, belongs to someone else now).
                self.settled = m.is_lease_lost();
                return Err(RenewError::from_internal(m.into()));
            }
        }
        // Past the rename: the live name is the new one, whatever the barrier says.
        self.name = new;
        self.q.sync_place(&here).map_err(RenewError::from_internal)
    }

    /// Ack: rename the job into `receipts/<shard>/` and make that durable; then apply the
    /// queue's receipt policy ([`crate::ReceiptPolicy`]: cut the receipt to its header, or
    /// write its evidence line and remove it). The ack is done once the receipt is durable: a
    /// policy step that fails is logged and leaves a whole receipt. The file is not read
    /// again: it was verified once, at claim (a file corrupted while leased is not caught
    /// here).
    ///
    /// # Errors
    /// [`SettleError::LeaseLost`] (no receipt written); [`SettleError::NotDone`] with
    /// [`ErrorKind::Io`] when the rename failed cleanly (a full disk, an immutable
    /// directory): the job is still leased and the lease is handed back, to renew and ack
    /// again; [`SettleError::Indeterminate`] after the rename (its barrier failed, or the
    /// rename returned `EIO`).
    pub fn ack(self) -> Result<Receipt, SettleError> {
        self.ack_and_maybe_claim(None).map(|step| step.receipt)
    }

    /// Ack this job and claim the next one, both covered by one barrier: the worker loop's
    /// step (`steadq work` uses it between jobs). The ack's rename and the claim's rename
    /// are made first, then the barriers: on ext4 with a journal and on xfs one directory
    /// fsync, of the claim's directory, commits both (DESIGN.md, Barriers: "Ack and claim
    /// next"), so a worker makes one journal commit per job where `ack` then `claim_with`
    /// make two; elsewhere (btrfs, f2fs, tmpfs, ext4 without a journal) each directory
    /// gets its own fsync, as the two calls would. Strict keeps its meaning: when this
    /// returns `Ok`, the ack is done (its receipt durable) and a returned lease is durable
    /// too.
    ///
    /// The claim is [`Queue::claim_with`]'s with lease `lease` (recovery of due and expired
    /// jobs included), but it does not wait for a level another user is making
    /// (`ops/making.rs`): then `next` is `Ok(None)` and a later claim finds the job.
    ///
    /// # Errors
    /// The outer `Err` is the ack's, as [`Lease::ack`]: [`SettleError::NotDone`] hands the
    /// lease back (nothing claimed), with [`ErrorKind::InvalidArgument`] also for a `lease`
    /// that is zero or longer than [`crate::MAX_LEASE`]; [`SettleError::LeaseLost`];
    /// [`SettleError::Indeterminate`] when the rename returned `EIO` or the shared barrier
    /// failed. After a failed barrier a job the claim took (indeterminate too) is given back
    /// to ready with its attempt, best effort; if that fails its lease expires as any other.
    ///
    /// The claim's own outcome is [`AckedNext::next`]: an error there (not done before its
    /// rename, indeterminate after it, as [`Queue::claim_with`]) leaves the ack done.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-next-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, steadq::Options::default())?;
    /// for p in [b"job a", b"job b"] {
    ///     q.enqueue(p)?;
    /// }
    /// let mut lease = q.claim()?.expect("a job is ready");
    /// let mut done = Vec::new();
    /// loop {
    ///     done.push(lease.payload()?.to_vec()); // the work
    ///     let step = lease.ack_and_claim(Duration::from_secs(30))?;
    ///     match step.next? {
    ///         Some(next) => lease = next,
    ///         None => break,
    ///     }
    /// }
    /// assert_eq!(done, [b"job a".to_vec(), b"job b".to_vec()]);
    /// assert_eq!(q.status()?.acked, 2);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ack_and_claim(self, lease: Duration) -> Result<AckedNext, SettleError> {
        self.ack_and_maybe_claim(Some(lease))
    }

    /// [`Lease::ack_and_claim`] with a lease of `next`, or [`Lease::ack`] without one (then
    /// [`AckedNext::next`] is `Ok(None)`): one call for a worker that claims on only while it
    /// is not stopping (`steadq work`).
    ///
    /// # Errors
    /// As [`Lease::ack_and_claim`], or as [`Lease::ack`] without `next`.
    pub fn ack_and_maybe_claim(mut self, next: Option<Duration>) -> Result<AckedNext, SettleError> {
        match self.ack_next(next) {
            Ok((receipt, next)) => Ok(AckedNext {
                receipt,
                next: next.unwrap_or(Ok(None)).map_err(Error::from),
            }),
            Err(e) => Err(SettleError::new(e, self)),
        }
    }

    /// The ack's rename, then with `next` the claim of the next job with that lease (its
    /// rename without its barrier), then the barriers that cover both, then the receipt
    /// policy: [`Lease::ack`] and [`Lease::ack_and_claim`] (the claim's result is `Some`
    /// exactly when `next` is). `settled` is set unless the ack's rename was cleanly not
    /// done.
    #[allow(clippy::type_complexity)]
    fn ack_next(
        &mut self,
        next: Option<Duration>,
    ) -> Result<(Receipt, Option<Result<Option<Lease>>>)> {
        if let Some(lease) = next {
            crate::queue::check_lease(lease)?;
        }
        let new = self.name.next(self.q.receipt_kind(self.token()), false);
        let q = self.q.clone();
        let _op = q.op();
        let to = q.place_receipts(self.receipt_shard());
        match q.rename_job(&self.here(), &self.name, &to, &new, Op::Ack) {
            Ok(()) => self.settled = true,
            // Cleanly not done: still ours, unless the name was gone.
            Err(MoveFailed::NotDone(e)) => {
                self.settled = e.is_lease_lost();
                return Err(e);
            }
            // It may have moved: never release it or ack it again.
            Err(m) => {
                self.settled = true;
                return Err(m.into());
            }
        }
        // The claim's rename without its barrier: the one below covers it.
        let claimed = next.map(|l| q.claim_sweep_with(l, &mut RecoverReport::default(), false));
        let from = self.here();
        let barriers = match &claimed {
            Some(Ok(Some(l))) => {
                let leased = q.place_ready(l.shard, State::Leased);
                if q.group.one_barrier_per_rename(&q.sys, to.dir.fd()) {
                    // The claim's directory changed last in this thread: its fsync forces
                    // the log past the ack (xfs), or commits the whole journal (ext4).
                    q.sync_place(&leased)
                } else {
                    q.sync_moved(&from, &to).and_then(|()| {
                        if leased.rel == from.rel {
                            Ok(()) // the fsync of `from` came after the claim's rename
                        } else {
                            q.sync_place(&leased)
                        }
                    })
                }
            }
            _ => q.sync_moved(&from, &to),
        };
        if let Err(e) = barriers {
            if let Some(Ok(Some(l))) = claimed {
                // Never handed out: back to ready with its attempt, or left to expire.
                if let Err(r) = l.release_undelivered() {
                    log::warn!("giving back a claim whose barrier failed: {r}");
                }
            }
            return Err(e);
        }
        q.after_ack(self.receipt_shard(), &new, &self.raw);
        let receipt = Receipt {
            id: self.name.id,
            name: new.format(q.ident.id).to_string(),
        };
        Ok((receipt, claimed))
    }

    /// Nack: retry after `delay`, counted as an enqueue's
    /// [`EnqueueOptions::delay`](crate::EnqueueOptions::delay) is (the boot clock within this
    /// boot). Zero goes straight back to ready; with no attempt left (this was claim
    /// `max_attempts`) the job is dead-lettered (reason `exhausted`) whatever the delay.
    ///
    /// # Errors
    /// As [`Lease::ack`], plus [`ErrorKind::InvalidArgument`] (not done) for a delay
    /// reaching past the year 2262. On any not-done error (a bucket directory that cannot be
    /// made on a full disk included) the job stays leased under its name and the lease is
    /// handed back ([`SettleError::NotDone`]): dropping it releases the job, converting the
    /// error into an [`Error`] leaves the job leased until its deadline.
    pub fn nack(mut self, delay: Duration) -> Result<Nacked, SettleError> {
        self.nack_in_place(delay)
            .map_err(|e| SettleError::new(e, self))
    }

    /// [`Lease::nack`] with the crate's error; the caller hands the lease back on failure.
    fn nack_in_place(&mut self, delay: Duration) -> Result<Nacked> {
        // Whatever fails from here (a bucket that cannot be made on a full disk, a bad delay,
        // the rename) leaves the job leased under its name until its deadline: a failed nack
        // that reports "not done" must not have released the job on drop.
        self.settled = true;
        if self.name.exhausted() {
            let q = self.q.clone();
            let dead = q.place_dead()?;
            self.settle(
                &dead,
                self.name.next(
                    Kind::Dead {
                        reason: Reason::EXHAUSTED,
                    },
                    false,
                ),
                Op::NackExhausted,
            )?;
            return Ok(Nacked::Dead);
        }
        if delay.is_zero() {
            let q = self.q.clone();
            let to = q.place_ready(self.shard, State::Ready);
            self.settle(&to, self.name.next(Kind::Ready, false), Op::Release)?;
            return Ok(Nacked::Ready);
        }
        let nb = match crate::queue::due_after(self.q.clock.wall_ns(), delay) {
            Ok(nb) => nb,
            Err(e) => {
                // A bad argument moves nothing: the job stays leased under its name until its
                // deadline (dropping this guard must not release it either).
                self.settled = true;
                return Err(e);
            }
        };
        let q = self.q.clone();
        let to = q.place_delayed(nb)?;
        self.settle(
            &to,
            self.name.next(self.q.delayed_kind(nb, delay), false),
            Op::Nack,
        )?;
        Ok(Nacked::Delayed(
            std::time::UNIX_EPOCH + Duration::from_nanos(nb),
        ))
    }

    /// Fail: dead-letter the job now with `reason` ([`Reason::FAILED`] for a generic one).
    ///
    /// # Errors
    /// As [`Lease::nack`].
    pub fn fail(mut self, reason: Reason) -> Result<(), SettleError> {
        self.fail_in_place(reason)
            .map_err(|e| SettleError::new(e, self))
    }

    /// [`Lease::fail`] with the crate's error; the caller hands the lease back on failure.
    fn fail_in_place(&mut self, reason: Reason) -> Result<()> {
        // As in `nack`: a failure leaves the job leased, never released by drop.
        self.settled = true;
        let q = self.q.clone();
        let dead = q.place_dead()?;
        self.settle(
            &dead,
            self.name.next(Kind::Dead { reason }, false),
            Op::Fail,
        )
    }

    /// Release the job back to ready now (what drop does, with the error reported).
    ///
    /// # Errors
    /// As [`Lease::nack`].
    pub fn release(mut self) -> Result<(), SettleError> {
        self.release_in_place()
            .map_err(|e| SettleError::new(e, self))
    }

    /// [`Lease::release`] with the crate's error; the caller hands the lease back on failure.
    fn release_in_place(&mut self) -> Result<()> {
        let q = self.q.clone();
        let to = q.place_ready(self.shard, State::Ready);
        self.settle(&to, self.name.next(Kind::Ready, false), Op::Release)
    }

    /// Release a lease whose job never reached what would run it, giving back the attempt
    /// its claim used (`Op::ClaimUndelivered`): for a claimer that could not
    /// write the payload or the lease handle out (a full disk under `steadq claim
    /// --payload-out`), which otherwise used up an attempt per try and dead-lettered jobs
    /// that never ran. Only for that: a job that may have run is released with
    /// [`Lease::release`] (attempts count claims, and never go down otherwise).
    ///
    /// # Errors
    /// As [`Lease::nack`]: not done (the lease is handed back), indeterminate, or lease lost.
    pub fn release_undelivered(mut self) -> Result<(), SettleError> {
        let q = self.q.clone();
        let to = q.place_ready(self.shard, State::Ready);
        let mut back = self.name.next(Kind::Ready, false);
        back.attempt = crate::disk::state::attempt_after(Op::ClaimUndelivered, self.name.attempt);
        self.settle(&to, back, Op::ClaimUndelivered)
            .map_err(|e| SettleError::new(e, self))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.settled = true;
        let q = self.q.clone();
        let to = q.place_ready(self.shard, State::Ready);
        if let Err(e) = self.q.move_job(
            &self.here(),
            &self.name,
            &to,
            &self.name.next(Kind::Ready, false),
            Op::Release,
        ) {
            if !e.is_lease_lost() {
                log::warn!("releasing an unsettled lease of job {}: {e}", self.name.id);
            }
        }
    }
}

/// How many jobs this user may not move or open a handle names in warnings
/// ([`Queue::warn_refused`]): 3.
const REFUSED_WARNINGS: u32 = 3;

/// How [`Queue::try_claim`] failed: a job this user may not move (passed over), or anything
/// else (the claim fails).
enum TryFailed {
    /// The rename was refused (`EPERM`, `EACCES`): not done, nothing moved.
    Skip(Cause),
    /// Any other failure.
    Fail(Cause),
}
use TryFailed::{Fail, Skip};

impl From<Cause> for TryFailed {
    fn from(e: Cause) -> TryFailed {
        Fail(e)
    }
}

/// Whether a claim failed only because the jobs it found were all jobs this user may not
/// move (see [`Queue::claim`]): not done, `EPERM` or `EACCES`.
pub(crate) fn only_refused(e: &Cause) -> bool {
    refused(e) && e.outcome() == Outcome::NotDone
}

/// Whether a not-done move failed for lack of permission on the job's directory.
fn refused(e: &Cause) -> bool {
    let perm = |n: Errno| {
        e.errno()
            .is_some_and(|x| x.raw_os_error() == n.raw_os_error())
    };
    perm(Errno::PERM) || perm(Errno::ACCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let (b, m) = (Duration::from_secs(5), Duration::from_secs(60));
        let got: Vec<u64> = (1..=6).map(|a| backoff(a, b, m).as_secs()).collect();
        assert_eq!(got, vec![5, 10, 20, 40, 60, 60]);
        assert_eq!(backoff(u32::MAX, b, m), m);
    }

    /// A job listed before another thread remembered it as refused (the listing's refusal
    /// snapshot was taken first) is not tried by the claim that picks it: it stays ready
    /// under its name, and the claim answers with the refusal (not done), not a lease.
    #[test]
    fn a_job_remembered_refused_after_its_listing_is_not_tried() {
        let dir = std::env::temp_dir().join(format!("steadq-unit-refused-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opts = crate::Options {
            shards: 1,
            ..Default::default()
        };
        let q = Queue::create(&dir, opts).unwrap();
        let id = q.enqueue(b"root's").unwrap();
        // The listing a claim makes, with no refusal known yet: the job is a candidate.
        let mut seen = RecoverReport::default();
        let mut budget = 2 * q.ident.slots() as u32;
        q.load_levels(&mut seen, &mut budget, &mut false).unwrap();
        let skip = Cause::io(Call::Open, Errno::ACCESS, Outcome::NotDone, None);
        q.remember_refused(id, &skip);
        let e = match q.claim() {
            Err(e) => e,
            Ok(l) => panic!("the refusal, not a lease: {:?}", l.map(|l| l.id())),
        };
        assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
        let ready = std::fs::read_dir(dir.join("ready/00")).unwrap().count();
        assert_eq!((ready, q.status().unwrap().ready), (1, 1));
        let found = q.find(id).unwrap();
        assert_eq!((found.state, found.name.generation), (State::Ready, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two listings of one slot by two threads, the second ending first with "empty"; a job
    /// then arrives, and a third thread takes it as a pending name into the slot's
    /// candidates; the first listing (which began before the job was linked) ends last.
    /// Its empty result replaced the slot's candidates, dropping the job while the slot
    /// stayed known empty: this handle's claims answered "no job" beside a ready job.
    #[test]
    fn a_listing_ending_after_an_arrival_was_taken_keeps_it() {
        let dir = std::env::temp_dir().join(format!("steadq-unit-hold-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opts = crate::Options {
            shards: 1,
            ..Default::default()
        };
        let q = Queue::create(&dir, opts).unwrap();
        q.shards.drain(&q); // watches set up, nothing known yet
        let slot = q.ident.slot(crate::disk::name::DEFAULT_PRIORITY, 0);
        let now = q.clock.boot_ns();
        let mut seen = RecoverReport::default();
        // Thread A begins its listing and reads an empty directory.
        let gen_a = q.shards.skip(slot, now).unwrap_err();
        let (found_a, _) = q.sweep_shard(slot, &mut seen).unwrap();
        assert!(found_a.is_empty());
        // Thread C lists it too and ends first: known empty.
        let gen_c = q.shards.skip(slot, now).unwrap_err();
        let (found_c, _) = q.sweep_shard(slot, &mut seen).unwrap();
        q.shards.listed(slot, gen_c, found_c.is_empty(), None);
        // A job arrives; its event makes it a pending name, which thread B takes.
        let id = q.enqueue(b"arrived").unwrap();
        q.shards.drain(&q);
        q.take_arrivals(slot, q.clock.boot_ns());
        // Thread A's listing ends.
        q.shards.listed(slot, gen_a, found_a.is_empty(), None);
        q.hold_listed(slot, found_a);
        let l = q.claim().unwrap().expect("the arrived job, not \"no job\"");
        assert_eq!(l.id(), id);
        l.ack().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
