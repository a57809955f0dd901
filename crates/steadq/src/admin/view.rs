//! Looking at a queue and tending it: list, status, find, requeue and purge dead jobs
//! (compaction lives with the receipt policy in [`crate::admin::receipts`]).

use crate::disk::format::{verify, verify_receipt, HEADER_LEN};
use crate::disk::layout::{receipts_shard, DEAD_DIR};
use crate::disk::name::{parse_hex, parse_ready, raw_tag, JobId, JobName, Kind, NameError};
use crate::disk::scan::{state_of, Foreign};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, EntryType, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// One job found by [`Queue::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its state.
    pub state: State,
    /// Its directory relative to the root, e.g. `ready/03`.
    pub dir: String,
    /// Its parsed name.
    pub name: JobName,
}

impl Listed {
    /// Path relative to the queue root.
    pub fn rel_path(&self, queue_id: u128) -> String {
        format!("{}/{}", self.dir, self.name.format(queue_id))
    }
}

/// What one [`Queue::requeue_dead_report`] did.
#[derive(Debug, Default)]
pub struct RequeueReport {
    /// Dead jobs moved back to ready (done: each past its rename and barrier).
    pub requeued: u32,
    /// Dead jobs that could not be moved; the others were still tried.
    pub failed: u32,
    /// The first failed move, naming its job: not done when nothing moved, indeterminate once
    /// anything did (part of the batch happened).
    pub first_error: Option<crate::Error>,
    /// Directories under `dead/` this user could not read (or that are not directories),
    /// relative to the root: their jobs were not tried. With no failed move, `first_error`
    /// names the first of them.
    pub unreadable: Vec<String>,
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
    /// has them all at [`crate::DEFAULT_PRIORITY`]).
    pub ready_by_priority: [u64; crate::disk::name::PRIORITY_LEVELS as usize],
    /// Whether [`Status::bytes`] were counted (see [`Queue::status_with`]); when false they
    /// are all 0 and mean nothing.
    pub bytes_counted: bool,
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

    /// Jobs that count against the capacity limit: ready + leased + delayed.
    pub fn capacity_jobs(&self) -> u64 {
        self.ready + self.leased + self.delayed
    }

    /// Bytes that count against the capacity limit: those of ready, leased and delayed jobs.
    pub fn capacity_bytes(&self) -> u64 {
        self.bytes.ready + self.bytes.leased + self.bytes.delayed
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
        }
    }

    fn slot(&mut self, s: State) -> &mut u64 {
        match s {
            State::Ready => &mut self.ready,
            State::Leased => &mut self.leased,
            State::Delayed => &mut self.delayed,
            State::Dead => &mut self.dead,
            State::Acked => &mut self.acked,
        }
    }

    fn add(&mut self, s: State, n: u64) {
        *self.slot(s) += n;
    }

    fn sub(&mut self, s: State, n: u64) {
        *self.slot(s) -= n;
    }
}

/// Why [`Queue::load_job`] could not hand out a verified job.
pub(crate) enum Load {
    /// The name is gone (moved or removed meanwhile).
    Missing,
    /// Not a regular file, or it fails verification.
    Corrupt(crate::disk::format::Corruption),
    /// A call failed.
    Io(Call, Errno),
}

/// One entry seen by [`Queue::walk`].
pub(crate) struct Seen<'a> {
    pub dir_rel: &'a str,
    pub dir: BorrowedFd<'a>,
    pub raw: &'a str,
    pub parsed: core::result::Result<JobName, Foreign>,
}

impl Queue {
    /// Visit every entry of the four job areas (ready and receipt shards, delayed and dead
    /// buckets), foreign ones included. Unexpected subdirectories of `delayed/` and `dead/`
    /// are reported as foreign entries of those directories.
    pub(crate) fn walk(&self, mut f: impl FnMut(Seen<'_>)) -> Result<()> {
        self.walk_while(|s| {
            f(s);
            true
        })
    }

    /// [`Queue::walk`] until `f` returns false: no further entry is read after that.
    /// Directories this user cannot read are skipped with a warning.
    pub(crate) fn walk_while(&self, f: impl FnMut(Seen<'_>) -> bool) -> Result<()> {
        let mut unreadable = Vec::new();
        self.walk_noting(&mut unreadable, f)?;
        self.warn_unreadable(unreadable);
        Ok(())
    }

    /// Warn about each directory a walk could not read (`rel` from the root).
    fn warn_unreadable(&self, unreadable: Vec<String>) {
        for rel in unreadable {
            match self.not_a_directory_on(&rel) {
                // Once per handle, as the claims say it.
                Some(block) => self.warn_block(&block),
                None => log::warn!(
                    "{}: cannot read this directory (Permission denied); its jobs were skipped",
                    self.path(&rel).display()
                ),
            }
        }
    }

    /// [`Queue::walk_while`] that adds the directories this user cannot read (`EACCES`,
    /// `EPERM`: a ready or receipt shard, `delayed/`, `dead/` or one of their buckets) to
    /// `unreadable`, relative to the root, and goes on with the others.
    pub(crate) fn walk_noting(
        &self,
        unreadable: &mut Vec<String>,
        f: impl FnMut(Seen<'_>) -> bool,
    ) -> Result<()> {
        let slots: Vec<u16> = (0..self.ident.slots()).collect();
        self.walk_part(&slots, true, unreadable, f)
    }

    /// [`Queue::walk_noting`] over the ready slots `slots` only, and with `rest` the receipt
    /// shards and the delayed and dead buckets after them: a part of one walk, for threads
    /// to share ([`Queue::status_with`]).
    pub(crate) fn walk_part(
        &self,
        slots: &[u16],
        rest: bool,
        unreadable: &mut Vec<String>,
        mut f: impl FnMut(Seen<'_>) -> bool,
    ) -> Result<()> {
        let shards = self.ident.shards;
        let ident = self.ident;
        let receipts: Vec<u16> = if rest {
            (0..shards).collect()
        } else {
            Vec::new()
        };
        for (area, list) in [(State::Ready, slots), (State::Acked, &receipts[..])] {
            for s in list.iter().map(|&s| s as usize) {
                // Ready slots: every level's shards (`ready/<ss>`, `prio/<l>/<ss>`).
                let (priority, shard) = ident.slot_parts(s as u16);
                let rel = match area {
                    State::Acked => receipts_shard(s as u16),
                    _ => ident.slot_dir_rel(s as u16),
                };
                let fits = |n: &JobName| match area {
                    State::Acked => {
                        crate::disk::scan::fits_receipt_shard(n, s as u16, shards)
                            && ident.has_priority(n.priority)
                    }
                    _ => crate::disk::scan::fits_ready_shard(n, priority, shard, shards),
                };
                let list = |dir: BorrowedFd<'_>| self.walk_entries(dir, &rel, &fits, &mut f);
                // A slot this user cannot read is skipped (noted; a ready one is warned once
                // and counted by status).
                let going = match area {
                    // A level's slot not made yet holds no job.
                    State::Ready => match self.list_ready_shard(s as u16, list) {
                        Err(Errno::NOENT) => Ok(Some(true)),
                        // Not a directory on its path: holds no job; noted below.
                        Err(Errno::NOTDIR) => Ok(None),
                        r => r,
                    },
                    _ => self.list_held(self.dirs.receipts[s].as_fd(), &rel, list),
                }
                .map_err(|e| self.read_dir_error(e, &rel))?;
                let going = going.unwrap_or_else(|| {
                    // Behind an entry that is not a directory (a file named `prio`): that
                    // entry, once, not each of the 56 slots behind it.
                    let at = self
                        .not_a_directory_on(&rel)
                        .unwrap_or_else(|| rel.as_str().to_owned());
                    if !unreadable.contains(&at) {
                        unreadable.push(at);
                    }
                    true
                });
                if !going {
                    return Ok(());
                }
            }
        }
        if !rest {
            return Ok(());
        }
        for (area, parent_fd, parent) in [
            (State::Delayed, &self.dirs.delayed, "delayed"),
            (State::Dead, &self.dirs.dead, "dead"),
        ] {
            if !self.walk_buckets(area, parent_fd.as_fd(), parent, unreadable, &mut f)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One directory of [`Queue::walk_while`]: every entry, classified as
    /// [`crate::disk::scan`] does (name syntax, tag, place, entry type), until `f` returns
    /// false. Returns whether to go on.
    fn walk_dir(
        &self,
        dir: BorrowedFd<'_>,
        rel: &str,
        fits: impl Fn(&JobName) -> bool,
        f: &mut impl FnMut(Seen<'_>) -> bool,
    ) -> Result<bool> {
        self.walk_entries(dir, rel, &fits, f)
            .map_err(|e| self.read_dir_error(e, rel))
    }

    /// [`Queue::walk_dir`] with the listing's errno.
    fn walk_entries(
        &self,
        dir: BorrowedFd<'_>,
        rel: &str,
        fits: &impl Fn(&JobName) -> bool,
        f: &mut impl FnMut(Seen<'_>) -> bool,
    ) -> core::result::Result<bool, Errno> {
        let mut going = true;
        self.sys.read_dir_while(dir, |name, raw, t| {
            // A name that is not UTF-8 is passed on escaped (`\xNN`), so it is named, and
            // `fsck --quarantine` finds it again (`disk::name::unescape_name`).
            let escaped;
            let (parsed, raw) = match name {
                Some(n) => (classify(&self.sys, dir, n, self.ident.id, t, fits), n),
                None => {
                    escaped = crate::disk::name::escape_name(raw.to_bytes());
                    log::warn!("{rel}/{escaped}: foreign entry with a non-UTF-8 name");
                    (Err(Foreign::NotUtf8), escaped.as_str())
                }
            };
            going = f(Seen {
                dir_rel: rel,
                dir,
                raw,
                parsed,
            });
            going
        })?;
        Ok(going)
    }

    pub(crate) fn read_dir_error(&self, e: Errno, rel: &str) -> Cause {
        Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.path(rel)))
    }

    /// The buckets of `delayed/` or `dead/` for [`Queue::walk_while`], in time order; anything
    /// else in the parent is a foreign entry of it. Returns whether to go on.
    fn walk_buckets(
        &self,
        area: State,
        parent_fd: BorrowedFd<'_>,
        parent: &str,
        unreadable: &mut Vec<String>,
        f: &mut impl FnMut(Seen<'_>) -> bool,
    ) -> Result<bool> {
        let mut buckets: Vec<String> = Vec::new();
        let mut going = true;
        let listed = self.list_held(parent_fd, parent, |parent_fd| {
            buckets.clear();
            self.sys.read_dir_while(parent_fd, |name, raw, t| {
                match name {
                    Some(n)
                        if parse_hex(n.as_bytes(), 16).is_some()
                            && t != crate::disk::sys::EntryType::Other
                            && t != crate::disk::sys::EntryType::File =>
                    {
                        buckets.push(n.to_string())
                    }
                    Some(n) => {
                        going = f(Seen {
                            dir_rel: parent,
                            dir: parent_fd,
                            raw: n,
                            parsed: Err(Foreign::WrongPlace),
                        })
                    }
                    None => {
                        going = f(Seen {
                            dir_rel: parent,
                            dir: parent_fd,
                            raw: &crate::disk::name::escape_name(raw.to_bytes()),
                            parsed: Err(Foreign::NotUtf8),
                        })
                    }
                }
                going
            })
        });
        match listed.map_err(|e| self.read_dir_error(e, parent))? {
            Some(()) => {}
            None => {
                unreadable.push(parent.to_string());
                return Ok(true);
            }
        }
        buckets.sort();
        for b in &buckets {
            if !going {
                break;
            }
            let rel = format!("{parent}/{b}");
            let fd: OwnedFd = match self.sys.open_dir_beneath(parent_fd, b) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => continue,
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    going = f(Seen {
                        dir_rel: parent,
                        dir: parent_fd,
                        raw: b,
                        parsed: Err(Foreign::NotRegular),
                    });
                    continue;
                }
                Err(Errno::ACCESS | Errno::PERM) => {
                    unreadable.push(rel);
                    continue;
                }
                Err(e) => {
                    let path = Some(self.path(&rel));
                    return Err(Cause::io(Call::Open, e, Outcome::NotDone, path));
                }
            };
            going = self.walk_dir(fd.as_fd(), &rel, self.bucket_fits(area, b), f)?;
        }
        Ok(going)
    }

    /// Which names belong in bucket `b` of `area` (`delayed/` or `dead/`).
    fn bucket_fits(&self, area: State, b: &str) -> impl Fn(&JobName) -> bool {
        let width = self.ident.delayed_bucket_ns;
        let bucket = parse_hex(b.as_bytes(), 16).unwrap_or(0) as u64;
        let ident = self.ident;
        move |n: &JobName| match n.kind {
            _ if !ident.has_priority(n.priority) => false,
            Kind::Delayed { not_before_ns, .. } => {
                area == State::Delayed && not_before_ns / width == bucket
            }
            Kind::Dead { .. } => area == State::Dead,
            _ => false,
        }
    }

    /// Every job, or those in `state`, oldest first within each directory. Foreign entries
    /// are skipped (see [`Queue::fsck`]). On a live queue each job is listed once, as
    /// [`Queue::status`] counts it.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (not done) naming the directory that could not be read.
    pub fn list(&self, state: Option<State>) -> crate::Result<Vec<Listed>> {
        let mut unreadable = Vec::new();
        let out = self.list_noting(state, &mut unreadable)?;
        self.warn_unreadable(unreadable);
        Ok(out)
    }

    /// [`Queue::list`] that adds the directories this user cannot read to `unreadable`
    /// (as [`Queue::walk_noting`]) instead of warning about them.
    pub(crate) fn list_noting(
        &self,
        state: Option<State>,
        unreadable: &mut Vec<String>,
    ) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        let mut seen = IdSet::default();
        self.walk_noting(unreadable, |s| {
            if let Some(n) = s.parsed.ok().filter(|n| seen.insert(n.id)) {
                let st = state_of(&n.kind);
                if state.is_none_or(|w| w == st) {
                    out.push(Listed {
                        state: st,
                        dir: s.dir_rel.to_string(),
                        name: n,
                    });
                }
            }
            true
        })?;
        out.sort_by(|a, b| (&a.dir, a.name.id).cmp(&(&b.dir, b.name.id)));
        Ok(out)
    }

    /// Visit jobs as the directories are read (no sorting, nothing held but, with `once`,
    /// the ids seen: 16 bytes a job), calling `f` per job in `state` (or every state) until
    /// it returns false. With `once` each job is visited once even if it moves during the
    /// pass; without it memory stays flat at any depth and a job that moves may be visited
    /// twice. The first job is visited after reading one directory chunk.
    ///
    /// # Errors
    /// As [`Queue::list`].
    pub fn list_each(
        &self,
        state: Option<State>,
        once: bool,
        mut f: impl FnMut(Listed) -> bool,
    ) -> crate::Result<()> {
        let mut seen = IdSet::default();
        let mut going = true;
        self.walk_while(|s| {
            if let Some(n) = s.parsed.ok().filter(|n| !once || seen.insert(n.id)) {
                let st = state_of(&n.kind);
                if going && state.is_none_or(|w| w == st) {
                    going = f(Listed {
                        state: st,
                        dir: s.dir_rel.to_string(),
                        name: n,
                    });
                }
            }
            going
        })?;
        Ok(())
    }

    /// Counts, bytes and ages per state: [`Queue::status_with`] with bytes.
    ///
    /// # Errors
    /// As [`Queue::list`].
    pub fn status(&self) -> crate::Result<Status> {
        self.status_with(true)
    }

    /// Counts and ages per state, and bytes when `bytes` is true or the queue has a byte
    /// limit ([`Status::bytes_counted`] says whether they were).
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
    pub fn status_with(&self, bytes: bool) -> crate::Result<Status> {
        let mut st = Status::default();
        self.status_hook(&mut st); // hook: ops/capacity.rs (limits, live keys)
        st.bytes_counted = bytes || st.limits.max_bytes.is_some();
        let sized = st.bytes_counted;
        // The ready slots are shared out among threads, one slot in each `threads` to each
        // (at depth the jobs sit in the default level's slots, next to each other), the
        // last one also walking the receipts and buckets: at 1,000,000 jobs the pass is
        // mostly the kernel's `getdents64`, which threads on other cores run at once.
        let slots = self.ident.slots();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
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

    /// Find job `id` in any state.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchJob`] (not done), or as [`Queue::list`].
    pub fn find(&self, id: JobId) -> crate::Result<Listed> {
        let (found, unreadable) = self.names_of(id)?;
        self.warn_unreadable(unreadable);
        let found = found.into_iter().last();
        Ok(found.ok_or_else(|| Cause::not_done(ErrorKind::NoSuchJob, None))?)
    }

    /// Every name of job `id` in a place it belongs (ready and receipt shards, delayed and
    /// dead buckets; a misplaced name is foreign, not listed), in walk order, and the
    /// directories this user could not read (relative to the root): one walk of the queue.
    /// For [`Queue::find`] and for a move split by a crash (`ops/split.rs`).
    pub(crate) fn names_of(&self, id: JobId) -> Result<(Vec<Listed>, Vec<String>)> {
        let (mut found, mut unreadable) = (Vec::new(), Vec::new());
        self.walk_noting(&mut unreadable, |s| {
            match s.parsed {
                Ok(n) if n.id == id => found.push(Listed {
                    state: state_of(&n.kind),
                    dir: s.dir_rel.to_string(),
                    name: n,
                }),
                _ => {}
            }
            true
        })?;
        Ok((found, unreadable))
    }

    /// Read and verify the job file of `job`, returning (header, payload).
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] if it fails verification (nothing is moved);
    /// [`ErrorKind::LeaseLost`] if it moved meanwhile; [`ErrorKind::Io`]. Not done.
    pub fn read_job(&self, job: &Listed) -> crate::Result<(crate::disk::format::Header, Vec<u8>)> {
        let rel = job.rel_path(self.ident.id);
        let dir = self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), &job.dir)
            .map_err(|e| Cause::io(Call::Open, e, Outcome::NotDone, Some(self.path(&job.dir))))?;
        let name = job.name.format(self.ident.id);
        let path = Some(self.path(&rel));
        match self.load_job(dir.as_fd(), &name, job.name.id.0) {
            Ok(x) => Ok(x),
            Err(Load::Missing) => Err(Cause::not_done(ErrorKind::LeaseLost, path).into()),
            Err(Load::Corrupt(c)) => Err(Cause::not_done(ErrorKind::Corrupt(c), path).into()),
            Err(Load::Io(call, e)) => Err(Cause::io(call, e, Outcome::NotDone, path).into()),
        }
    }

    /// Verify the job file of `job` in 64 KiB chunks, as a claim does (memory does not grow
    /// with the payload), and return its header and its payload as a stream: kept in memory
    /// when the file fits one chunk, otherwise read from the file again as it is read, its
    /// SHA-256 checked at the end (see [`crate::PayloadReader`]). What `steadq show` uses.
    ///
    /// # Errors
    /// As [`Queue::read_job`].
    pub fn open_job(
        &self,
        job: &Listed,
    ) -> crate::Result<(crate::disk::format::Header, crate::PayloadReader)> {
        let rel = job.rel_path(self.ident.id);
        let path = Some(self.path(&rel));
        let opened = self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), &job.dir)
            .map_err(|e| Load::Io(Call::Open, e))
            .and_then(|dir| {
                let name = job.name.format(self.ident.id);
                self.check_job(dir.as_fd(), &name, job.name.id.0)
            });
        match opened {
            Ok((h, fd, Some(file))) => {
                drop(fd);
                Ok((h, crate::PayloadReader::memory(file)))
            }
            Ok((h, fd, None)) => {
                let path = self.path(&rel);
                Ok((h, crate::PayloadReader::file(self.clone(), fd, &h, path)))
            }
            Err(Load::Missing) => Err(Cause::not_done(ErrorKind::LeaseLost, path).into()),
            Err(Load::Corrupt(c)) => Err(Cause::not_done(ErrorKind::Corrupt(c), path).into()),
            Err(Load::Io(call, e)) => Err(Cause::io(call, e, Outcome::NotDone, path).into()),
        }
    }

    /// Open `name` in `dir` without following symlinks or blocking on a fifo, check it is a
    /// regular file and verify it as job `id` in 64 KiB chunks
    /// ([`crate::ops::payload::check_file`], the claim's verifier); a receipt cut to its
    /// header is checked as [`verify_receipt`] does. Returns the header, the open file, and
    /// the whole file when it fit one chunk. Used by `fsck` and [`Queue::open_job`].
    #[allow(clippy::type_complexity)]
    pub(crate) fn check_job(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        id: u128,
    ) -> core::result::Result<
        (
            crate::disk::format::Header,
            OwnedFd,
            Option<std::sync::Arc<Vec<u8>>>,
        ),
        Load,
    > {
        let fd = self.sys.open_file_ro(dir, name).map_err(|e| match e {
            Errno::NOENT => Load::Missing,
            Errno::LOOP | Errno::NXIO => Load::Corrupt(crate::disk::format::Corruption::NotRegular),
            e => Load::Io(Call::Open, e),
        })?;
        let size = match self.sys.fstat_allocated(fd.as_fd()) {
            Ok((rustix::fs::FileType::RegularFile, size, allocated))
                if crate::disk::sys::sparse(size, allocated) =>
            {
                return Err(Load::Corrupt(crate::disk::format::Corruption::Sparse {
                    declared: size,
                    allocated,
                }))
            }
            Ok((rustix::fs::FileType::RegularFile, size, _)) => size,
            Ok(_) => return Err(Load::Corrupt(crate::disk::format::Corruption::NotRegular)),
            Err(e) => return Err(Load::Io(Call::Stat, e)),
        };
        if name.ends_with(".rct") && size == HEADER_LEN as u64 {
            let mut head = vec![0u8; HEADER_LEN];
            self.sys
                .read_exact_at(fd.as_fd(), &mut head, 0)
                .map_err(|e| Load::Io(Call::Read, e))?;
            let h = verify_receipt(&head, id, self.ident.id).map_err(Load::Corrupt)?;
            return Ok((h, fd, Some(std::sync::Arc::new(head))));
        }
        match crate::ops::payload::check_file(&self.sys, fd.as_fd(), size, &[], id, self.ident.id) {
            Ok(c) => Ok((c.header, fd, c.file)),
            Err(Ok(c)) => Err(Load::Corrupt(c)),
            Err(Err((call, e))) => Err(Load::Io(call, e)),
        }
    }

    /// Open `name` in `dir` without following symlinks or blocking on a fifo, check it is a
    /// regular file, read it (up to max(max_payload, 1 GiB) + header) and verify it as job `id`.
    /// Returns the header and the payload. Used by `read_job`.
    pub(crate) fn load_job(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        id: u128,
    ) -> core::result::Result<(crate::disk::format::Header, Vec<u8>), Load> {
        let fd = self.sys.open_file_ro(dir, name).map_err(|e| match e {
            Errno::NOENT => Load::Missing,
            Errno::LOOP | Errno::NXIO => Load::Corrupt(crate::disk::format::Corruption::NotRegular),
            e => Load::Io(Call::Open, e),
        })?;
        match self.sys.fstat(fd.as_fd()) {
            Ok((rustix::fs::FileType::RegularFile, _)) => {}
            Ok(_) => return Err(Load::Corrupt(crate::disk::format::Corruption::NotRegular)),
            Err(e) => return Err(Load::Io(Call::Stat, e)),
        }
        let mut buf = Vec::new();
        let limit = self
            .opts
            .max_payload
            .max(1 << 30)
            .saturating_add(HEADER_LEN as u64);
        self.sys
            .read_all(fd.as_fd(), limit, &mut buf)
            .map_err(|e| Load::Io(Call::Read, e))?;
        // A receipt may have been cut to its header (receipt policy or compaction).
        let h = if name.ends_with(".rct") {
            verify_receipt(&buf, id, self.ident.id)
        } else {
            verify(&buf, id, self.ident.id)
        }
        .map_err(Load::Corrupt)?;
        buf.drain(..HEADER_LEN);
        Ok((h, buf))
    }

    /// Move dead job `id` (or every dead job, for `None`) back to ready with its attempt count
    /// reset to 0. Returns how many moved.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchJob`] if `id` is not dead; otherwise the first failing move's error,
    /// after trying every job: not done if nothing moved, indeterminate if anything did (the
    /// rule of [`Queue::recover`]). [`Queue::requeue_dead_report`] also says how many moved.
    pub fn requeue_dead(&self, id: Option<JobId>) -> Result<u32, crate::Error> {
        let mut r = self.requeue_dead_report(id)?;
        match r.first_error.take() {
            Some(e) => Err(e),
            None => Ok(r.requeued),
        }
    }

    /// [`Queue::requeue_dead`], with the count of a batch that failed part-way: every dead
    /// job is tried; one that cannot be moved (a full disk, a directory that refuses the
    /// rename) is counted in [`RequeueReport::failed`] and the others still move.
    ///
    /// # Errors
    /// Only what stops the whole call before any move: [`ErrorKind::NoSuchJob`] if `id` is
    /// not dead, or a listing that failed (not done). A failed move is in the report.
    pub fn requeue_dead_report(&self, id: Option<JobId>) -> Result<RequeueReport, crate::Error> {
        let mut r = RequeueReport::default();
        let dead = match id {
            Some(_) => self.jobs_in(State::Dead, id)?,
            // Every dead job: a `dead/` or bucket this user cannot read is noted, so that
            // "requeued N jobs" is not exit 0 beside jobs never tried (breaker finding).
            None => {
                let mut unreadable = Vec::new();
                let out = self.list_noting(Some(State::Dead), &mut unreadable)?;
                r.unreadable = unreadable
                    .into_iter()
                    .filter(|d| d == DEAD_DIR || d.starts_with(&format!("{DEAD_DIR}/")))
                    .collect();
                out
            }
        };
        let mut first: Option<Cause> = None;
        for l in dead {
            let bucket = l.dir.trim_start_matches("dead/");
            let moved = self.source_bucket(true, bucket).and_then(|from| {
                // Back to the ready directory of its own priority.
                let to = self.place_ready_new(self.ident.slot_of(&l.name))?;
                let mut new = l.name.next(Kind::Ready, false);
                new.attempt = crate::disk::state::attempt_after(Op::Requeue, l.name.attempt);
                self.move_job(&from, &l.name, &to, &new, Op::Requeue)
                    .map_err(Cause::from)
            });
            match moved {
                Ok(()) => r.requeued += 1,
                // Moved or purged by another process since the listing: not this call's job.
                Err(e) if e.is_lease_lost() && id.is_none() => {}
                Err(e) => {
                    log::warn!("requeue: {e}");
                    r.failed += 1;
                    first.get_or_insert(e.with_job(l.name.id));
                }
            }
        }
        if let (None, Some(rel)) = (&first, r.unreadable.first()) {
            first = Some(self.unreadable_dir_error(rel));
        }
        // The batch rule: indeterminate once anything moved.
        r.first_error = first.map(|e| {
            if r.requeued > 0 {
                e.with_outcome(Outcome::Indeterminate).into()
            } else {
                e.into()
            }
        });
        Ok(r)
    }

    /// The jobs in `state`, or only job `id` (which must be there: [`ErrorKind::NoSuchJob`]).
    fn jobs_in(&self, state: State, id: Option<JobId>) -> Result<Vec<Listed>> {
        let jobs: Vec<Listed> = self
            .list(Some(state))
            .map_err(crate::Error::into_internal)?
            .into_iter()
            .filter(|l| id.is_none_or(|i| l.name.id == i))
            .collect();
        if id.is_some() && jobs.is_empty() {
            return Err(Cause::not_done(ErrorKind::NoSuchJob, None));
        }
        Ok(jobs)
    }

    /// Make delayed jobs ready now, whatever their not-before time: every delayed job, or only
    /// job `id`. For a retry delay set while the wall clock was wrong (a board without a
    /// real-time clock before NTP, or a clock set a year ahead), which would otherwise wait
    /// until the clock catches up. Returns how many moved.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchJob`] if `id` is not delayed; otherwise the first failing move,
    /// after trying every job: not done if nothing moved, indeterminate if anything did (the
    /// rule of [`Queue::recover`]).
    pub fn make_due(&self, id: Option<JobId>) -> Result<u32, crate::Error> {
        let delayed = self.jobs_in(State::Delayed, id)?;
        let mut r = crate::RecoverReport::default();
        for l in delayed {
            let bucket = l.dir.trim_start_matches("delayed/");
            let moved = self.source_bucket(false, bucket).and_then(|from| {
                let to = self.place_ready_new(self.ident.slot_of(&l.name))?;
                self.move_job(
                    &from,
                    &l.name,
                    &to,
                    &l.name.next(Kind::Ready, false),
                    Op::Due,
                )
                .map_err(Cause::from)
            });
            match moved {
                Ok(()) => r.due += 1,
                Err(e) if e.is_lease_lost() => {}
                Err(e) => r.fail(e),
            }
        }
        match r.first_error.take() {
            Some(e) => Err(crate::ops::recover::partial(e.into_cause(), &r).into()),
            None => Ok(r.due),
        }
    }

    /// Delete every dead job (not a state transition: the job is gone). Returns how many.
    /// A job (or bucket) that cannot be deleted is logged and passed over: the others are
    /// still deleted (as `requeue --all` does), and the call then fails.
    ///
    /// # Errors
    /// The first failing unlink, bucket open or fsync, after the rest was tried. Not done
    /// when nothing was deleted; indeterminate once a job was (the batch rule of
    /// [`Queue::requeue_dead`] and [`Queue::recover`]), and for any failed fsync. Never
    /// creates a directory.
    pub fn purge_dead(&self) -> Result<u32, crate::Error> {
        // A dead bucket (or `dead/`) this user cannot read holds jobs that are not purged:
        // a failure, not a warning beside "purged N" and exit 0 (breaker finding; `requeue
        // --all` fails the same way).
        let mut unreadable = Vec::new();
        let dead = self.list_noting(Some(State::Dead), &mut unreadable)?;
        let mut n = 0;
        let mut dirs: Vec<String> = Vec::new();
        // The first failure and how many jobs failed: a job that cannot be deleted (a
        // bucket another user owns, an unlink refused) no longer stops the purge of the
        // jobs after it (breaker finding: `requeue --all` went on, `purge` stopped).
        let (mut first, mut failed): (Option<Cause>, u32) = (None, 0);
        let mut fail = |e: Cause| {
            log::warn!("{e}; passed over");
            failed += 1;
            first.get_or_insert(e);
        };
        for rel in unreadable
            .iter()
            .filter(|r| *r == "dead" || r.starts_with("dead/"))
        {
            fail(self.unreadable_dir_error(rel));
        }
        for l in &dead {
            let bucket = l.dir.trim_start_matches("dead/");
            let place = match self.source_bucket(true, bucket) {
                Ok(p) => p,
                Err(e) if e.is_lease_lost() => continue,
                Err(e) => {
                    fail(e);
                    continue;
                }
            };
            let rel = l.rel_path(self.ident.id);
            match self
                .sys
                .unlink(place.dir.fd(), &l.name.format(self.ident.id))
            {
                Ok(()) => n += 1,
                Err(Errno::NOENT) => {}
                Err(e) => {
                    // EIO: the unlink may have happened.
                    let o = match e {
                        Errno::IO => Outcome::Indeterminate,
                        _ => Outcome::NotDone,
                    };
                    fail(Cause::io(Call::Unlink, e, o, Some(self.path(&rel))));
                    continue;
                }
            }
            if !dirs.contains(&l.dir) {
                dirs.push(l.dir.clone());
            }
        }
        if let Some(e) = first {
            log::warn!(
                "purged {n} dead job(s); {failed} job(s) or director(ies) could not be (the first is named below)"
            );
            // The directories of what was deleted are still made durable first.
            let _ = self.sync_purged(&dirs, n);
            let o = match e.outcome() {
                Outcome::Indeterminate => Outcome::Indeterminate,
                _ => batch_outcome(n),
            };
            return Err(e.with_outcome(o).into());
        }
        self.sync_purged(&dirs, n)?;
        Ok(n)
    }

    /// [`Queue::purge_dead`]'s barriers: each bucket it deleted from (removed when it is
    /// now empty), then `dead/`.
    fn sync_purged(&self, dirs: &[String], n: u32) -> Result<(), crate::Error> {
        for d in dirs {
            let bucket = d.trim_start_matches("dead/").to_string();
            let place = match self.source_bucket(true, &bucket) {
                Ok(p) => p,
                Err(e) if e.is_lease_lost() => continue,
                Err(e) => return Err(e.with_outcome(batch_outcome(n)).into()),
            };
            self.barrier(place.dir.fd()).map_err(|e| {
                Cause::io(
                    Call::FsyncDir,
                    e,
                    Outcome::Indeterminate,
                    Some(self.path(d)),
                )
            })?;
            let _ = self.sys.rmdir(self.dirs.dead.as_fd(), &bucket);
        }
        self.barrier(self.dirs.dead.as_fd()).map_err(|e| {
            Cause::io(
                Call::FsyncDir,
                e,
                Outcome::Indeterminate,
                Some(self.path("dead")),
            )
        })?;
        Ok(())
    }
}

/// The batch rule of a purge (as requeue and recovery): a failure before anything was
/// deleted is not done; after `deleted` > 0 it is indeterminate (part of the batch happened).
fn batch_outcome(deleted: u32) -> Outcome {
    if deleted > 0 {
        Outcome::Indeterminate
    } else {
        Outcome::NotDone
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
    }
}

/// The earliest time (unix ns) a ready job became ready: its file's inode change time, which
/// every rename sets.
#[derive(Default)]
struct Oldest {
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

/// A hasher for job ids: their low 80 bits are random, so a multiply of the low 64 spreads
/// them (SipHash's resistance to chosen keys buys nothing against names in one's own queue).
#[derive(Default)]
struct IdHasher(u64);

impl core::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = (v as u64 ^ (v >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A set of job ids (the ids seen in one pass).
type IdSet = std::collections::HashSet<JobId, core::hash::BuildHasherDefault<IdHasher>>;

/// [`crate::disk::scan`]'s classification of one entry (name syntax, tag, place, entry type;
/// an entry of unknown type is looked at with `stat`), with the tag checked over the raw
/// name: a name that parses is canonical (fixed-width lowercase fields), so the name without
/// its `.k<tag16>` field is the canonical form the tag covers, and nothing is re-formatted.
fn classify(
    sys: &crate::disk::sys::Sys,
    dir: BorrowedFd<'_>,
    name: &str,
    queue_id: u128,
    t: EntryType,
    fits: &impl Fn(&JobName) -> bool,
) -> core::result::Result<JobName, Foreign> {
    let (n, tag) = match parse_ready(name.as_bytes()) {
        Some(x) => x,
        None => JobName::parse_untagged(name).map_err(Foreign::Name)?,
    };
    if raw_tag(queue_id, name) != Some(tag) {
        return Err(Foreign::Name(NameError::Tag));
    }
    if !fits(&n) {
        return Err(Foreign::WrongPlace);
    }
    match t {
        EntryType::File => Ok(n),
        EntryType::Unknown => match sys.stat_nofollow(dir, name) {
            Ok(m) if m.file_type == rustix::fs::FileType::RegularFile => Ok(n),
            _ => Err(Foreign::NotRegular),
        },
        _ => Err(Foreign::NotRegular),
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
        let st = q.status_with(true).unwrap();
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
