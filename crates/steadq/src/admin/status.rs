//! Status: counts, bytes and ages per state, from one pass over the directories that up to
//! four threads share; a job seen twice (it moved during the pass) is counted once.

use super::view::IdSet;
use crate::disk::name::{JobId, JobName, Kind};
use crate::disk::scan::state_of;
use crate::disk::state::State;
use crate::disk::sys::Errno;
use crate::error::Result;
use crate::queue::Queue;
use std::time::Duration;

/// What [`Queue::status_with`] counts. `StatusOptions::default()` is [`Queue::status`]:
/// counts, bytes and ages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusOptions {
    /// Count the bytes per state ([`Status::bytes`]): a `stat` of each job, about twice the
    /// cost of the listing. Counted anyway when the queue has a byte limit. Default: true.
    pub bytes: bool,
}

impl Default for StatusOptions {
    fn default() -> Self {
        StatusOptions { bytes: true }
    }
}

/// Counts and sizes per state, from [`Queue::status`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Ready jobs.
    pub ready: u64,
    /// Leased jobs (live or expired).
    pub leased: u64,
    /// Leased jobs whose lease has expired (or is from another boot).
    pub expired_leases: u64,
    /// Delayed jobs.
    pub delayed: u64,
    /// Dead jobs.
    pub dead: u64,
    /// Receipts.
    pub acked: u64,
    /// Jobs waiting for others (`waiting/`: not claimable until their dependencies are
    /// acked; see [`crate::EnqueueOptions::after`]).
    pub waiting: u64,
    /// Foreign entries.
    pub foreign: u64,
    /// Bytes in job files (header and payload, as `stat` reports their size) per state, when
    /// [`Status::bytes_counted`].
    pub bytes: StateBytes,
    /// How long the longest-waiting ready job has been ready: from the moment it became
    /// ready (its file's inode change time, which every rename sets), not from enqueue, so a
    /// delayed or requeued job does not raise a false backlog alarm. `None`: nothing ready.
    pub oldest_ready_age: Option<Duration>,
    /// The capacity limits in force (`steadq.limits`; none when unset or unreadable). Use:
    /// [`Status::capacity_jobs`] and [`Status::capacity_bytes`].
    pub limits: crate::ops::capacity::Limits,
    /// Live idempotency keys (entries of `keys/`, tombstones excluded).
    pub live_keys: u64,
    /// Ready shards this user could not read (`EACCES`: a shard made unreadable by
    /// `chmod 000`); their jobs are missing from the counts above, and claims skip them.
    pub unreadable_shards: u64,
    /// Every job directory this user could not read (ready and receipt shards, `delayed/`,
    /// `dead/` and their buckets), relative to the root: their jobs are missing from the
    /// counts above.
    pub unreadable_dirs: Vec<String>,
    /// Ready jobs per priority level (index = priority, 0..=7; a queue before version 3
    /// has them all at [`crate::disk::name::DEFAULT_PRIORITY`]).
    pub ready_by_priority: [u64; crate::disk::name::PRIORITY_LEVELS as usize],
    /// Jobs ever acked, as far as this queue's directories tell: receipts now plus those
    /// compaction removed (`steadq.counts`); only goes up (see `admin/counts.rs` for a
    /// crash). `None` when `steadq.counts` is damaged or cannot be read. Acks under receipt
    /// policy `none`, whose receipt is never kept, are not counted.
    pub acked_total: Option<u64>,
    /// Jobs ever dead-lettered (a requeued job that dies again counts again): dead jobs now
    /// plus those requeued or purged. As [`Status::acked_total`].
    pub dead_total: Option<u64>,
    /// Whether [`Status::bytes`] were counted (see [`Queue::status_with`]); when false they
    /// are all 0 and mean nothing.
    pub bytes_counted: bool,
    /// Per group (with jobs ready or leased, or a limit), sorted by name: its ready and
    /// leased jobs, its limit and the slots held. Counted in the same pass as the states (a
    /// job that moves during it may be counted in neither or both of its group's columns).
    pub groups: Vec<crate::admin::groups::GroupUse>,
    /// The mount option under which this queue's durability barriers make nothing durable
    /// (`"f2fs mounted checkpoint=disable:0"`), as [`Queue::barriers_voided_by`] finds it;
    /// `None`: no such option, or the handle makes no barriers.
    pub barriers_voided_by: Option<String>,
}

impl Status {
    /// Count one sighting of a job in `state` (`add`), or take one back.
    fn tally(&mut self, state: State, expired: bool, size: u64, add: bool) {
        let slot = match state {
            State::Ready => &mut self.ready,
            State::Leased => &mut self.leased,
            State::Delayed => &mut self.delayed,
            State::Dead => &mut self.dead,
            State::Acked => &mut self.acked,
            State::Waiting => &mut self.waiting,
        };
        if add {
            *slot += 1;
            self.expired_leases += expired as u64;
            self.bytes.add(state, size);
        } else {
            *slot -= 1;
            self.expired_leases -= expired as u64;
            self.bytes.sub(state, size);
        }
    }

    /// Jobs that count against the capacity limit: ready + leased + delayed + waiting (as
    /// [`Queue::capacity_use`](crate::Queue::capacity_use) counts them).
    pub fn capacity_jobs(&self) -> u64 {
        self.ready + self.leased + self.delayed + self.waiting
    }

    /// Bytes that count against the capacity limit: those of ready, leased, delayed and
    /// waiting jobs.
    pub fn capacity_bytes(&self) -> u64 {
        self.bytes.ready + self.bytes.leased + self.bytes.delayed + self.bytes.waiting
    }
}

/// Bytes of job files in each state (each file's `st_size`: 128-byte header plus payload).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateBytes {
    /// Ready jobs, bytes.
    pub ready: u64,
    /// Leased jobs, bytes.
    pub leased: u64,
    /// Delayed jobs, bytes.
    pub delayed: u64,
    /// Dead jobs, bytes.
    pub dead: u64,
    /// Receipts, bytes.
    pub acked: u64,
    /// Waiting jobs, bytes.
    pub waiting: u64,
}

impl StateBytes {
    /// The bytes of one state.
    pub fn get(&self, s: State) -> u64 {
        match s {
            State::Ready => self.ready,
            State::Leased => self.leased,
            State::Delayed => self.delayed,
            State::Dead => self.dead,
            State::Acked => self.acked,
            State::Waiting => self.waiting,
        }
    }

    fn slot(&mut self, s: State) -> &mut u64 {
        match s {
            State::Ready => &mut self.ready,
            State::Leased => &mut self.leased,
            State::Delayed => &mut self.delayed,
            State::Dead => &mut self.dead,
            State::Acked => &mut self.acked,
            State::Waiting => &mut self.waiting,
        }
    }

    fn add(&mut self, s: State, n: u64) {
        *self.slot(s) += n;
    }

    fn sub(&mut self, s: State, n: u64) {
        *self.slot(s) -= n;
    }
}

/// How many of the oldest ready ids [`Queue::status_with`] keeps to find the oldest ready
/// time without a `stat` of every job.
const OLDEST_CANDIDATES: usize = 16;

/// At most this many threads share a [`Queue::status_with`] pass.
const STATUS_THREADS: usize = 4;

/// What one thread's part of a status pass saw.
#[derive(Default)]
struct Part {
    foreign: u64,
    ready_by_priority: [u64; crate::disk::name::PRIORITY_LEVELS as usize],
    unreadable: Vec<String>,
    oldest: Oldest,
    seen: Sightings,
    groups: crate::admin::groups::GroupCounts,
}

impl Part {
    /// Add `o`, a later part of the same pass.
    fn absorb(&mut self, o: Part) {
        self.foreign += o.foreign;
        for (a, b) in self.ready_by_priority.iter_mut().zip(o.ready_by_priority) {
            *a += b;
        }
        for u in o.unreadable {
            if !self.unreadable.contains(&u) {
                self.unreadable.push(u);
            }
        }
        self.oldest.absorb(o.oldest);
        self.seen.ids.extend(o.seen.ids);
        self.seen.codes.extend(o.seen.codes);
        self.seen.sizes.extend(o.seen.sizes);
        self.groups.absorb(o.groups);
    }
}

/// The earliest time (unix ns) a ready job became ready: its file's inode change time, which
/// every rename sets.
#[derive(Default)]
pub(super) struct Oldest {
    /// Earliest ready time found so far.
    since: Option<u64>,
    /// The ready jobs with the smallest ids seen (at most [`OLDEST_CANDIDATES`]).
    candidates: Vec<JobName>,
    /// Ready jobs passed over by the candidates (a larger id than every candidate's).
    passed: bool,
}

impl Oldest {
    fn at(&mut self, t: u64) {
        self.since = Some(self.since.map_or(t, |o| o.min(t)));
    }

    /// A ready job with its `stat` (an unreadable entry counts from its enqueue).
    fn stated(&mut self, n: &JobName, meta: Option<&crate::disk::sys::Meta>) {
        self.at(meta.map_or(n.id.unix_ms() * 1_000_000, |m| m.ctime_ns));
    }

    /// Add `o`, kept by another thread over other slots: the smallest ids of both.
    fn absorb(&mut self, o: Oldest) {
        if let Some(t) = o.since {
            self.at(t);
        }
        self.passed |= o.passed;
        self.candidates.extend(o.candidates);
        if self.candidates.len() > OLDEST_CANDIDATES {
            self.candidates.sort_unstable_by_key(|n| n.id);
            self.candidates.truncate(OLDEST_CANDIDATES);
            self.passed = true;
        }
    }

    /// A ready job not yet stated: kept if its id is among the smallest seen.
    fn candidate(&mut self, n: JobName) {
        if self.candidates.len() < OLDEST_CANDIDATES {
            self.candidates.push(n);
            return;
        }
        self.passed = true;
        let max = (0..self.candidates.len()).max_by_key(|&i| self.candidates[i].id);
        if let Some(i) = max.filter(|&i| n.id < self.candidates[i].id) {
            self.candidates[i] = n;
        }
    }

    /// `stat` the candidates oldest id first, until the earliest ready time found is no later
    /// than the next candidate's enqueue time plus [`ID_RESOLUTION_NS`]. `None` when that does
    /// not settle it: the earliest time found is later than that bound for some job passed
    /// over. The bound is the ids' resolution (1 ms): an id says only the millisecond its job
    /// was made in, so jobs enqueued within one millisecond (about 40 at a time on tmpfs)
    /// cannot be ordered by id, and without the slack a status of such a queue found no bound
    /// and fell back to a `stat` of every ready job (1,000,000 `stat` calls, 2 s, at 1M jobs in
    /// 8 shards). With it the age found is short of the true one by less than 1 ms, the
    /// resolution the CLI prints.
    fn settle(self, q: &Queue) -> Option<Option<u64>> {
        self.settle_by(|n| {
            let dir = q.ready_fd(q.ident.slot_of(n));
            q.sys
                .stat_nofollow(dir, &n.format(q.ident.id))
                .map(|m| m.ctime_ns)
        })
    }

    /// [`Oldest::settle`] with `ready_at` giving a job's ready time (its `ctime`, unix ns).
    fn settle_by(
        mut self,
        mut ready_at: impl FnMut(&JobName) -> core::result::Result<u64, Errno>,
    ) -> Option<Option<u64>> {
        if self.since.is_some() || self.candidates.is_empty() {
            return Some(self.since); // stated all along (bytes counted), or nothing ready
        }
        let mut candidates = core::mem::take(&mut self.candidates);
        candidates.sort_unstable_by_key(|n| n.id);
        // The earliest a job of this id can have become ready, plus the id's resolution: a
        // time found at or before it is no later than that job's ready time by 1 ms or more.
        let bound = |n: &JobName| {
            n.id.unix_ms()
                .saturating_mul(1_000_000)
                .saturating_add(ID_RESOLUTION_NS)
        };
        for n in &candidates {
            if self.since.is_some_and(|t| t <= bound(n)) {
                return Some(self.since);
            }
            match ready_at(n) {
                Ok(t) => self.at(t),
                Err(Errno::NOENT) => {} // moved on meanwhile: no longer ready
                Err(_) => self.at(n.id.unix_ms().saturating_mul(1_000_000)),
            }
        }
        let last = candidates.last().map_or(0, bound);
        match self.since {
            Some(t) if !self.passed || t <= last => Some(Some(t)),
            _ => None,
        }
    }
}

/// The resolution of a job id's time, ns: ids carry unix milliseconds.
const ID_RESOLUTION_NS: u64 = 1_000_000;

/// Every job sighting of one pass of [`Queue::status_with`], in the order seen: counted at
/// once, and after the pass every sighting of a job but its first is taken back (a job that
/// moved while the directories were read). Sorting a copy of the ids finds the repeats with
/// sequential memory access (a hash set of 1,000,000 ids costs a cache miss per job).
#[derive(Default)]
struct Sightings {
    ids: Vec<u128>,
    /// State index (0..5) plus 8 for an expired lease, per sighting.
    codes: Vec<u8>,
    /// File sizes, when bytes are counted.
    sizes: Vec<u64>,
}

const STATES: [State; 5] = [
    State::Ready,
    State::Leased,
    State::Delayed,
    State::Dead,
    State::Acked,
];

impl Sightings {
    fn push(&mut self, id: JobId, state: State, expired: bool, size: u64, sized: bool) {
        let i = STATES.iter().position(|&s| s == state).unwrap_or(0) as u8;
        self.ids.push(id.0);
        self.codes.push(i | if expired { 8 } else { 0 });
        if sized {
            self.sizes.push(size);
        }
    }

    fn uncount_repeats(self, st: &mut Status) {
        let mut sorted = self.ids.clone();
        sorted.sort_unstable();
        let repeated: IdSet = sorted
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| JobId(w[0]))
            .collect();
        drop(sorted);
        if repeated.is_empty() {
            return;
        }
        let mut first = IdSet::default();
        for (i, &id) in self.ids.iter().enumerate() {
            if repeated.contains(&JobId(id)) && !first.insert(JobId(id)) {
                let c = self.codes[i];
                let size = self.sizes.get(i).copied().unwrap_or(0);
                st.tally(STATES[(c & 7) as usize], c & 8 != 0, size, false);
            }
        }
    }
}

impl Queue {
    /// Fill the capacity and key fields of a status (a damaged limits file or an unreadable
    /// `keys/` is logged, not fatal: status must work on a damaged queue).
    fn fill_limits_and_keys(&self, st: &mut Status) {
        st.limits = self.limits().unwrap_or_else(|e| {
            log::warn!("{e}");
            crate::ops::capacity::Limits::default()
        });
        st.live_keys = self.live_keys().unwrap_or_else(|e| {
            log::warn!("{e}");
            0
        });
    }

    /// Counts, bytes and ages per state: [`Queue::status_with`] with
    /// `StatusOptions::default()`.
    ///
    /// # Errors
    /// As [`Queue::list`].
    pub fn status(&self) -> crate::Result<Status> {
        self.status_with(&StatusOptions::default())
    }

    /// Counts and ages per state, and bytes when [`StatusOptions::bytes`] is true or the queue
    /// has a byte limit ([`Status::bytes_counted`] says whether they were).
    ///
    /// Cost: one pass over the directories (`getdents64`) and one SHA-256 of each name (its
    /// tag: an entry whose name does not verify, is of the wrong kind for its directory or is
    /// not a regular file is counted as foreign, never as a job). Bytes need a `stat` of each
    /// job, about twice the cost of the listing (at 1,000,000 jobs, see BENCHMARKS.md). The
    /// oldest ready age needs a `stat` of a few of the oldest ready jobs only: a job became
    /// ready at or after its enqueue, so the stats stop once the earliest ready time found is
    /// no later than the enqueue time (in the id, whole ms) of the next candidate plus 1 ms
    /// (the age is then short by less than 1 ms). That bound assumes
    /// the wall clock did not step back between an enqueue and a rename; if it did, the age
    /// may be reported short by the step.
    ///
    /// On a live queue each job is counted once: a job that moves while the directories are
    /// read can be seen in two of them (read before and after its rename), and is then
    /// counted once, in one of the states it was seen in; a job can also be missed if it moves from a directory
    /// not yet read into one already read. So totals may be short by the jobs that moved
    /// during the pass, never over. Memory: about 40 bytes per job (the ids seen and a sorted
    /// copy, at the end of the pass; 8 more with bytes).
    ///
    /// # Errors
    /// As [`Queue::list`].
    pub fn status_with(&self, o: &StatusOptions) -> crate::Result<Status> {
        let bytes = o.bytes;
        let mut st = Status::default();
        self.fill_limits_and_keys(&mut st);
        st.bytes_counted = bytes || st.limits.max_bytes.is_some();
        let sized = st.bytes_counted;
        // The ready slots are shared out among threads, one slot in each `threads` to each
        // (at depth the jobs sit in the default level's slots, next to each other), the
        // last one also walking the receipts and buckets: at 1,000,000 jobs the pass is
        // mostly the kernel's `getdents64`, which threads on other cores run at once.
        let slots = self.ident.slots();
        let threads = crate::disk::sys::Sys::cpus()
            .clamp(1, STATUS_THREADS)
            .min(slots as usize);
        let share = |i: usize| -> Vec<u16> { (i as u16..slots).step_by(threads).collect() };
        let parts: Vec<Result<Part>> = if threads == 1 {
            vec![self.status_part(&share(0), true, sized)]
        } else {
            std::thread::scope(|sc| {
                let others: Vec<_> = (1..threads)
                    .map(|i| sc.spawn(move || self.status_part(&share(i), i + 1 == threads, sized)))
                    .collect();
                let mut parts = vec![self.status_part(&share(0), false, sized)];
                for h in others {
                    parts.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
                }
                parts
            })
        };
        let mut all = Part::default();
        for p in parts {
            all.absorb(p?);
        }
        st.foreign = all.foreign;
        st.ready_by_priority = all.ready_by_priority;
        st.unreadable_dirs = all.unreadable;
        st.groups = self.group_use(all.groups);
        st.barriers_voided_by = self.barriers_voided_by();
        for (i, &c) in all.seen.codes.iter().enumerate() {
            let size = all.seen.sizes.get(i).copied().unwrap_or(0);
            st.tally(STATES[(c & 7) as usize], c & 8 != 0, size, true);
        }
        all.seen.uncount_repeats(&mut st);
        let since = match all.oldest.settle(self) {
            Some(t) => t,
            None => self.oldest_ready_by_stat()?,
        };
        let now = self.clock.wall_ns();
        st.oldest_ready_age = since.map(|t| Duration::from_nanos(now.saturating_sub(t)));
        st.unreadable_shards = self.unreadable_shards();
        // A `waiting/` this user may not read (a member's, made first at mode 700) is skipped
        // like an unreadable bucket: named, its jobs uncounted, every other count given.
        let waiting = match self.waiting_jobs() {
            Ok(w) => w,
            Err(e) => match self.unreadable_rel(&e) {
                Some(rel) => {
                    log::warn!("{e}; the jobs waiting there are not counted (fsck names it)");
                    if !st.unreadable_dirs.contains(&rel) {
                        st.unreadable_dirs.push(rel);
                    }
                    Vec::new()
                }
                None => return Err(e.into()),
            },
        };
        st.waiting = waiting.len() as u64;
        if sized {
            st.bytes.waiting = self.waiting_bytes(&waiting);
        }
        // Read after the listing: what it saw present is counted here or still present, so
        // a total never goes down (admin/counts.rs).
        match self.read_counts() {
            Ok(c) => {
                st.acked_total = Some(st.acked + c.acked);
                st.dead_total = Some(st.dead + c.dead);
            }
            Err(e) => log::warn!("{e}"),
        }
        Ok(st)
    }

    /// One thread's part of [`Queue::status_with`]: ready slots `slots`, and with `rest` the
    /// receipts and buckets.
    fn status_part(&self, slots: &[u16], rest: bool, sized: bool) -> Result<Part> {
        let (boot, now_boot) = (self.clock.boot_id(), self.clock.boot_ns());
        let mut p = Part::default();
        let mut unreadable = Vec::new();
        self.walk_part(slots, rest, &mut unreadable, |s| {
            let Ok(n) = s.parsed else {
                p.foreign += 1;
                return true;
            };
            let state = state_of(&n.kind);
            let expired =
                matches!(n.kind, Kind::Leased(l) if crate::disk::scan::lease_expired(&l, boot, now_boot));
            let mut size = 0;
            if sized {
                let meta = self.sys.stat_nofollow(s.dir, s.raw).ok();
                size = meta.as_ref().map_or(0, |m| m.counted_size());
                if state == State::Ready {
                    p.oldest.stated(&n, meta.as_ref());
                }
            } else if state == State::Ready {
                p.oldest.candidate(n);
            }
            if state == State::Ready {
                p.ready_by_priority[n.priority as usize % p.ready_by_priority.len()] += 1;
            }
            if let Some(g) = n.group.filter(|_| matches!(state, State::Ready | State::Leased)) {
                if !expired {
                    p.groups.add(g, state == State::Leased);
                }
            }
            p.seen.push(n.id, state, expired, size, sized);
            true
        })?;
        p.unreadable = unreadable;
        Ok(p)
    }

    /// The earliest time a ready job became ready, by a `stat` of every ready job (the
    /// fallback of [`Queue::status_with`] when the oldest ids were all made ready lately).
    fn oldest_ready_by_stat(&self) -> Result<Option<u64>> {
        let mut oldest = Oldest::default();
        self.walk(|s| {
            if let Some(n) = s.parsed.as_ref().ok().filter(|n| n.kind == Kind::Ready) {
                oldest.stated(n, self.sys.stat_nofollow(s.dir, s.raw).ok().as_ref());
            }
        })?;
        Ok(oldest.since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_seen_twice_is_counted_once_in_the_state_seen_first() {
        let mut st = Status {
            bytes_counted: true,
            ..Status::default()
        };
        let mut seen = Sightings::default();
        for (id, state, expired, size) in [
            (1, State::Ready, false, 10),
            (2, State::Leased, true, 20),
            (3, State::Delayed, false, 30),
            (1, State::Acked, false, 10),
            (2, State::Ready, false, 20),
        ] {
            st.tally(state, expired, size, true);
            seen.push(JobId(id), state, expired, size, true);
        }
        seen.uncount_repeats(&mut st);
        let counts = (st.ready, st.leased, st.expired_leases, st.delayed, st.acked);
        assert_eq!(counts, (1, 1, 1, 1, 0));
        assert_eq!(
            (st.bytes.ready, st.bytes.leased, st.bytes.acked),
            (10, 20, 0)
        );
    }

    #[test]
    fn the_oldest_candidates_are_the_smallest_ids() {
        let mut o = Oldest::default();
        for i in (0..100u128).rev() {
            o.candidate(JobName::new_ready(JobId(i), 5));
        }
        let mut ids: Vec<u128> = o.candidates.iter().map(|n| n.id.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..OLDEST_CANDIDATES as u128).collect::<Vec<_>>());
        assert!(o.passed);
    }

    /// Jobs enqueued within one millisecond share their ids' time: the oldest ready time is
    /// found from the first candidate's `stat`, not by a `stat` of every ready job (before,
    /// 1,000,000 `stat` calls at 1M jobs filled at about 40 a millisecond). Jobs made ready
    /// well after their enqueue still send the status to the full pass.
    #[test]
    fn jobs_of_one_millisecond_settle_the_oldest_ready_time_without_a_full_pass() {
        let ms = 1_700_000_000_000u64;
        let fill = |o: &mut Oldest| {
            for r in 0..40u128 {
                o.candidate(JobName::new_ready(JobId::new(ms, r), 5));
            }
        };
        let mut o = Oldest::default();
        fill(&mut o);
        assert!(o.passed);
        let mut stats = 0;
        let found = o.settle_by(|n| {
            stats += 1;
            Ok(ms * 1_000_000 + 300_000 + (n.id.0 & 0xffff) as u64 * 1_000)
        });
        assert_eq!((found, stats), (Some(Some(ms * 1_000_000 + 300_000)), 1));
        // Ready 5 ms after their enqueue (claimed and released): a job passed over may have
        // become ready before them, so no bound.
        let mut o = Oldest::default();
        fill(&mut o);
        let found = o.settle_by(|_| Ok(ms * 1_000_000 + 5_000_000));
        assert_eq!(found, None);
    }

    /// Parts kept by threads over other slots merge to what one pass keeps: the smallest
    /// ids of all, "passed" once any were passed over, the earliest time.
    #[test]
    fn oldest_parts_merge_to_the_smallest_ids_of_all() {
        let (mut a, mut b) = (Oldest::default(), Oldest::default());
        for i in 0..100u128 {
            let part = if i % 3 == 0 { &mut a } else { &mut b };
            part.candidate(JobName::new_ready(JobId(1000 - i), 5));
        }
        b.since = Some(7);
        a.absorb(b);
        let mut ids: Vec<u128> = a.candidates.iter().map(|n| n.id.0).collect();
        ids.sort_unstable();
        let want: Vec<u128> = (1000 - 99..1000 - 99 + OLDEST_CANDIDATES as u128).collect();
        assert_eq!((ids, a.passed, a.since), (want, true, Some(7)));
        // Two small parts that fit: nothing passed over.
        let (mut c, mut d) = (Oldest::default(), Oldest::default());
        c.candidate(JobName::new_ready(JobId(5), 5));
        d.candidate(JobName::new_ready(JobId(3), 5));
        c.absorb(d);
        assert_eq!((c.candidates.len(), c.passed), (2, false));
    }

    /// The threads' parts of a status pass add up to the figures of one pass over the same
    /// queue, job by job and state by state, whatever slots each thread took.
    #[test]
    fn a_status_shared_by_threads_counts_what_one_pass_counts() {
        let dir = std::env::temp_dir().join(format!("steadq-status-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let q = Queue::create(
            &dir,
            crate::Options {
                shards: 3,
                ..Default::default()
            },
        )
        .unwrap();
        for i in 0..40u8 {
            let o = crate::EnqueueOptions {
                priority: Some(i % 8),
                delay: (i % 13 == 0).then_some(Duration::from_secs(600)),
                ..Default::default()
            };
            q.enqueue_with(&[i; 10], &o).unwrap();
        }
        for i in 0..9 {
            let l = q.claim().unwrap().unwrap();
            match i % 3 {
                0 => drop(l.ack().unwrap()),
                1 => l.fail(crate::Reason::new("test").unwrap()).unwrap(),
                _ => drop(l.into_handle()), // stays leased
            }
        }
        std::fs::write(dir.join("ready/01/stray"), b"x").unwrap();
        let st = q.status().unwrap();
        // One part holding every slot, and the rest: the single-thread pass.
        let all: Vec<u16> = (0..q.ident.slots()).collect();
        let one = q.status_part(&all, true, true).unwrap();
        let mut want = Status::default();
        for (i, &c) in one.seen.codes.iter().enumerate() {
            want.tally(
                STATES[(c & 7) as usize],
                c & 8 != 0,
                one.seen.sizes[i],
                true,
            );
        }
        let got = (
            st.ready, st.leased, st.delayed, st.dead, st.acked, st.foreign,
        );
        let one_pass = (
            want.ready,
            want.leased,
            want.delayed,
            want.dead,
            want.acked,
            one.foreign,
        );
        assert_eq!(got, one_pass);
        assert_eq!(got, (27, 3, 4, 3, 3, 1), "40 jobs: 4 delayed, 9 claimed");
        assert_eq!(st.bytes.ready, want.bytes.ready);
        assert_eq!(st.ready_by_priority, one.ready_by_priority);
        assert_eq!(st.ready_by_priority.iter().sum::<u64>(), 27);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
