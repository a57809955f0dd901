//! Claim scheduling: which ready job a claim takes.
//!
//! `Queue::claim` and its kin walk the levels from the highest down, list the slots that
//! matter (at most one deep listing per claim), hold each slot's oldest ready jobs as its
//! candidates, take in the jobs that arrived while a slot was known empty, and pick the best
//! candidate (highest effective priority, then oldest id). Taking one candidate is
//! `take.rs`; listing one slot is `sweep.rs`.

use super::refusal::{only_refused, refused};
use super::take::TryFailed::{Fail, Full, Skip};
use super::Lease;
use crate::disk::barrier::Barrier;
use crate::disk::name::{GroupName, JobId, JobName, Kind};
use crate::disk::state::State;
use crate::disk::sys::Errno;
#[cfg(doc)]
use crate::error::ErrorKind; // named by the docs' links only
use crate::error::{Cause, Error, Outcome, Result};
use crate::ops::lease::ClaimOptions;
use crate::ops::recover::RecoverReport;
use crate::queue::Queue;
use std::time::Duration;

std::thread_local! {
    /// [`Queue::load_levels`]'s per-slot snapshot, kept between claims of this thread.
    static SKIP_SCRATCH: core::cell::Cell<Vec<Option<u64>>> = const { core::cell::Cell::new(Vec::new()) };
}

/// Ready jobs a claim's listing of one slot keeps: the oldest 256 of the whole directory (it
/// reads every name, parsing them without their tags, and tag-checks only those kept).
pub(super) const CLAIM_CANDIDATES: usize = 256;

/// How often a claiming handle makes due delayed jobs ready before it claims (see
/// `promote_due_first`): a due job waits at most this long behind ready jobs of a lower level.
const PROMOTE_EVERY: Duration = Duration::from_millis(100);

/// Whether job `n` is of a group in `full` (groups a claim found full, for a while).
fn of_full(n: &JobName, full: &[(GroupName, u64)]) -> bool {
    n.group.is_some_and(|g| full.iter().any(|f| f.0 == g))
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
    pub(super) fn claim_sweep_with(
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
            // Groups found full: their jobs stay held, passed over by the pick, and listings
            // pass them over too (ops/slots.rs), so other jobs are claimed meanwhile.
            let full = self.full_groups_now();
            self.load_levels(seen, &mut budget, &mut deep_done, &full)?;
            let Some((slot, name)) = self.pick(&full) else {
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
                Err(Full) => {
                    // Held again, for when the group has room: no listing needed to find it.
                    self.hold_listed(slot, vec![name]);
                    continue;
                }
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
        full: &[(GroupName, u64)],
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
            c.held.iter().any(|h| h.iter().any(|n| !of_full(n, full)))
        };
        let walked = self.walk_levels(seen, budget, deep_done, (now, full), &skip, any_held);
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
        (now, full): (u64, &[(GroupName, u64)]),
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
                // Arrivals of a full group are held too: the pick passes them over until the
                // group has room, and no listing is needed to find them then.
                self.take_arrivals(slot, now);
                if self.holds(slot, full) {
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
                let found = self.list_slot(slot, generation, seen)?;
                any |= found != 0;
                // A deep slot (a full set of candidates: it may hold many more) ends this
                // claim's listings; shallow ones are cheap and keep the order exact.
                found_some |= found >= CLAIM_CANDIDATES;
                *deep_done |= found >= CLAIM_CANDIDATES;
            }
            if any && self.opts.aging.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// List `slot` (its listing generation `generation`), note what the listing knows of it,
    /// and hold the ready jobs it found as the slot's candidates. Returns how many it found.
    fn list_slot(&self, slot: u16, generation: u64, seen: &mut RecoverReport) -> Result<usize> {
        let failed = seen.failed;
        let (mut found, expiry) = self.sweep_shard(slot, seen)?;
        let empty = found.is_empty() && seen.failed == failed;
        self.shards.listed(slot, generation, empty, expiry);
        // Oldest last, so pop() gives the oldest.
        found.sort_unstable_by_key(|n| core::cmp::Reverse(n.id));
        let n = found.len();
        self.hold_listed(slot, found);
        Ok(n)
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
    /// dropped, for a fresh listing), not counting those of the groups in `full`.
    pub(super) fn holds(&self, slot: u16, full: &[(GroupName, u64)]) -> bool {
        let mut c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let held = &mut c.held[slot as usize];
        match held.first() {
            None => false,
            Some(newest) if self.shards.arrived_before(slot, newest.id.0) => {
                held.clear();
                false
            }
            Some(_) => held.iter().any(|n| !of_full(n, full)),
        }
    }

    /// Take the best candidate held: the highest effective priority, then the oldest id.
    /// The effective priority is the job's own, or with aging `a` (see
    /// [`crate::Options::aging`]) its own plus one per `a` of age, at most the top level.
    fn pick(&self, full: &[(GroupName, u64)]) -> Option<(u16, JobName)> {
        let top = self.ident.levels().saturating_sub(1);
        let aging_ms = self.opts.aging.map(|a| (a.as_millis() as u64).max(1));
        // The wall clock matters only with aging (a clock read per claim otherwise).
        let now_ms = aging_ms.map_or(0, |_| self.clock.wall_ns() / 1_000_000);
        let mut c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        // A plain loop over the slots (64 in a version-3 queue) keeping the best level, id
        // and slot apart: `max_by_key` with a `(u8, Reverse<u128>)` key moved the key through
        // the stack at odd offsets, a store-forwarding stall per slot (perf: 1% of a tmpfs
        // lifecycle). Ties go to the later slot, as `max_by_key` gave them.
        let mut best: Option<(u8, JobId, usize, usize)> = None;
        for (slot, h) in c.held.iter().enumerate() {
            // The oldest candidate not of a full group (nearly always the last).
            let Some((at, n)) = h.iter().enumerate().rev().find(|(_, n)| !of_full(n, full)) else {
                continue;
            };
            let level = match aging_ms {
                None => n.priority,
                Some(a) => {
                    let up = now_ms.saturating_sub(n.id.unix_ms()) / a;
                    (n.priority as u64 + up).min(top.max(n.priority) as u64) as u8
                }
            };
            let better = best.is_none_or(|(l, id, ..)| level > l || (level == l && n.id <= id));
            if better {
                best = Some((level, n.id, slot, at));
            }
        }
        let (.., best, at) = best?;
        Some((best as u16, c.held[best].remove(at)))
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
    /// As [`Queue::claim`]. When a barrier fails, the outcome is indeterminate for the
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
        // On xfs, journaled ext4 and f2fs the fsync of the last claim's directory commits every
        // earlier claim of the batch too (`sync_batch`).
        if let Some(last) = last {
            let last = self.place_ready(last, State::Leased);
            if self.group.one_barrier_per_rename(&self.sys, last.dir.fd()) {
                self.sync_place(Barrier::ClaimDest, &last)?;
            } else {
                for s in shards {
                    self.sync_place(Barrier::ClaimDest, &self.place_ready(s, State::Leased))?;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::sys::Call;

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
        q.load_levels(&mut seen, &mut budget, &mut false, &[])
            .unwrap();
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
