//! Looking at a queue and tending it: list, status, find, requeue and purge dead jobs
//! (compaction lives with the receipt policy in [`crate::admin::receipts`]).

use crate::disk::format::{verify, verify_receipt, HEADER_LEN};
use crate::disk::name::{parse_hex, shard_name, JobId, JobName, Kind};
use crate::disk::scan::{scan, state_of, Foreign};
use crate::disk::sys::{Call, Errno};
use crate::error::{Error, ErrorKind, Outcome, Result};
use crate::ops::state::{Op, State};
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

/// Counts and sizes per state, from [`Queue::status`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    /// Bytes in job files (header and payload, as `stat` reports their size) per state.
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
    /// Ready jobs per priority level (index = priority, 0..=7; a queue before version 3
    /// has them all at [`crate::name::DEFAULT_PRIORITY`]).
    pub ready_by_priority: [u64; crate::disk::name::PRIORITY_LEVELS as usize],
}

impl Status {
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

    fn add(&mut self, s: State, n: u64) {
        let slot = match s {
            State::Ready => &mut self.ready,
            State::Leased => &mut self.leased,
            State::Delayed => &mut self.delayed,
            State::Dead => &mut self.dead,
            State::Acked => &mut self.acked,
        };
        *slot += n;
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

    /// [`Queue::walk`] until `f` returns false: no further directory is read after that.
    pub(crate) fn walk_while(&self, mut f: impl FnMut(Seen<'_>) -> bool) -> Result<()> {
        let going = core::cell::Cell::new(true);
        let mut f = |s: Seen<'_>| {
            if going.get() {
                going.set(f(s));
            }
        };
        let id = self.ident.id;
        let shards = self.ident.shards;
        let rd = |e: Errno, rel: &str| {
            Error::io(Call::ReadDir, e, Outcome::NotDone, Some(self.path(rel)))
        };
        let ident = self.ident;
        for (area, fds) in [
            (State::Ready, &self.dirs.ready),
            (State::Acked, &self.dirs.receipts),
        ] {
            for (s, fd) in fds.iter().enumerate() {
                if !going.get() {
                    return Ok(());
                }
                // Ready slots: every level's shards (`ready/<ss>`, `prio/<l>/<ss>`).
                let (priority, shard) = ident.slot_parts(s as u16);
                let rel = match area {
                    State::Acked => format!("receipts/{}", shard_name(s as u16)),
                    _ => ident.slot_rel(s as u16),
                };
                let fits = |n: &JobName| match area {
                    State::Acked => {
                        crate::disk::scan::fits_receipt_shard(n, s as u16, shards)
                            && ident.has_priority(n.priority)
                    }
                    _ => crate::disk::scan::fits_ready_shard(n, priority, shard, shards),
                };
                let mut one = |dir: BorrowedFd<'_>| {
                    scan(&self.sys, dir, id, fits, |raw, parsed| {
                        f(Seen {
                            dir_rel: &rel,
                            dir,
                            raw,
                            parsed,
                        })
                    })
                };
                // A ready shard this user cannot read is skipped (warned, counted by status).
                match area {
                    State::Ready => self.list_ready_shard(s as u16, &mut one).map(drop),
                    _ => one(fd.as_fd()),
                }
                .map_err(|e| rd(e, &rel))?;
            }
        }
        for (area, parent_fd, parent) in [
            (State::Delayed, &self.dirs.delayed, "delayed"),
            (State::Dead, &self.dirs.dead, "dead"),
        ] {
            let mut buckets: Vec<String> = Vec::new();
            self.sys
                .read_dir(parent_fd.as_fd(), |name, _, t| match name {
                    Some(n)
                        if parse_hex(n.as_bytes(), 16).is_some()
                            && t != crate::disk::sys::EntryType::Other
                            && t != crate::disk::sys::EntryType::File =>
                    {
                        buckets.push(n.to_string())
                    }
                    _ => f(Seen {
                        dir_rel: parent,
                        dir: parent_fd.as_fd(),
                        raw: name.unwrap_or(""),
                        parsed: Err(Foreign::WrongPlace),
                    }),
                })
                .map_err(|e| rd(e, parent))?;
            buckets.sort();
            for b in buckets {
                if !going.get() {
                    return Ok(());
                }
                let rel = format!("{parent}/{b}");
                let fd: OwnedFd = match self.sys.open_dir_beneath(parent_fd.as_fd(), &b) {
                    Ok(fd) => fd,
                    Err(Errno::NOENT) => continue,
                    Err(Errno::LOOP | Errno::NOTDIR) => {
                        f(Seen {
                            dir_rel: parent,
                            dir: parent_fd.as_fd(),
                            raw: &b,
                            parsed: Err(Foreign::NotRegular),
                        });
                        continue;
                    }
                    Err(e) => {
                        return Err(Error::io(
                            Call::Open,
                            e,
                            Outcome::NotDone,
                            Some(self.path(&rel)),
                        ))
                    }
                };
                let width = self.ident.delayed_bucket_ns;
                let bucket = parse_hex(b.as_bytes(), 16).unwrap_or(0) as u64;
                let fits = |n: &JobName| match n.kind {
                    _ if !ident.has_priority(n.priority) => false,
                    Kind::Delayed { not_before_ns, .. } => {
                        area == State::Delayed && not_before_ns / width == bucket
                    }
                    Kind::Dead { .. } => area == State::Dead,
                    _ => false,
                };
                scan(&self.sys, fd.as_fd(), id, fits, |raw, parsed| {
                    f(Seen {
                        dir_rel: &rel,
                        dir: fd.as_fd(),
                        raw,
                        parsed,
                    })
                })
                .map_err(|e| rd(e, &rel))?;
            }
        }
        Ok(())
    }

    /// Every job, or those in `state`, oldest first within each directory. Foreign entries
    /// are skipped (see [`Queue::fsck`]). On a live queue each job is listed once, as
    /// [`Queue::status`] counts it.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (not done) naming the directory that could not be read.
    pub fn list(&self, state: Option<State>) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        self.walk(|s| {
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
    ) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
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
        })
    }

    /// Counts, bytes and ages per state.
    ///
    /// On a live queue each job is counted once: a job that moves while the directories are
    /// read can be seen in two of them (read before and after its rename), and is then
    /// counted in the state seen first; a job can also be missed if it moves from a directory
    /// not yet read into one already read. So totals may be short by the jobs that moved
    /// during the pass, never over. Memory: 16 bytes per job for the ids seen.
    ///
    /// # Errors
    /// As [`Queue::list`].
    pub fn status(&self) -> Result<Status> {
        let mut st = Status::default();
        let (boot, now_boot, now) = (
            self.clock.boot_id(),
            self.clock.boot_ns(),
            self.clock.wall_ns(),
        );
        let mut oldest_ready_since: Option<u64> = None;
        let mut seen = std::collections::HashSet::new();
        self.walk(|s| {
            let Ok(n) = s.parsed else {
                st.foreign += 1;
                return;
            };
            if !seen.insert(n.id) {
                return;
            }
            let state = state_of(&n.kind);
            let meta = self.sys.stat_nofollow(s.dir, s.raw).ok();
            st.bytes.add(state, meta.as_ref().map_or(0, |m| m.size));
            match n.kind {
                Kind::Ready => {
                    st.ready += 1;
                    st.ready_by_priority[n.priority as usize % st.ready_by_priority.len()] += 1;
                    // Ready since its last rename; an unreadable entry counts from enqueue.
                    let since = meta.map_or(n.id.unix_ms() * 1_000_000, |m| m.ctime_ns);
                    oldest_ready_since = Some(oldest_ready_since.map_or(since, |o| o.min(since)));
                }
                Kind::Leased(l) => {
                    st.leased += 1;
                    if crate::disk::scan::lease_expired(&l, boot, now_boot) {
                        st.expired_leases += 1;
                    }
                }
                Kind::Delayed { .. } => st.delayed += 1,
                Kind::Dead { .. } => st.dead += 1,
                Kind::Receipt { .. } => st.acked += 1,
            }
        })?;
        st.oldest_ready_age =
            oldest_ready_since.map(|t| Duration::from_nanos(now.saturating_sub(t)));
        st.unreadable_shards = self.unreadable_shards();
        self.status_hook(&mut st); // hook: ops/capacity.rs (limits, live keys)
        Ok(st)
    }

    /// Find job `id` in any state.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchJob`] (not done), or as [`Queue::list`].
    pub fn find(&self, id: JobId) -> Result<Listed> {
        let mut found = None;
        self.walk(|s| {
            if let Ok(n) = s.parsed {
                if n.id == id {
                    found = Some(Listed {
                        state: state_of(&n.kind),
                        dir: s.dir_rel.to_string(),
                        name: n,
                    });
                }
            }
        })?;
        found.ok_or_else(|| Error::not_done(ErrorKind::NoSuchJob, None))
    }

    /// Read and verify the job file of `job`, returning (header, payload).
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] if it fails verification (nothing is moved);
    /// [`ErrorKind::LeaseLost`] if it moved meanwhile; [`ErrorKind::Io`]. Not done.
    pub fn read_job(&self, job: &Listed) -> Result<(crate::disk::format::Header, Vec<u8>)> {
        let rel = job.rel_path(self.ident.id);
        let dir = self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), &job.dir)
            .map_err(|e| Error::io(Call::Open, e, Outcome::NotDone, Some(self.path(&job.dir))))?;
        let name = job.name.format(self.ident.id);
        let path = Some(self.path(&rel));
        match self.load_job(dir.as_fd(), &name, job.name.id.0) {
            Ok(x) => Ok(x),
            Err(Load::Missing) => Err(Error::not_done(ErrorKind::LeaseLost, path)),
            Err(Load::Corrupt(c)) => Err(Error::not_done(ErrorKind::Corrupt(c), path)),
            Err(Load::Io(call, e)) => Err(Error::io(call, e, Outcome::NotDone, path)),
        }
    }

    /// Open `name` in `dir` without following symlinks or blocking on a fifo, check it is a
    /// regular file, read it (up to max(max_payload, 1 GiB) + header) and verify it as job `id`.
    /// Returns the header and the payload. Shared by `read_job` and `fsck`.
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
    /// indeterminate if an earlier move of the same call was done.
    pub fn requeue_dead(&self, id: Option<JobId>) -> Result<u32, crate::Failure> {
        let dead = self.jobs_in(State::Dead, id)?;
        let mut n = 0;
        for l in dead {
            let bucket = l.dir.trim_start_matches("dead/");
            let from = match self.source_bucket(true, bucket) {
                Ok(p) => p,
                Err(e) if e.is_lease_lost() && id.is_none() => continue,
                Err(e) if n > 0 => return Err(e.with_outcome(Outcome::Indeterminate).into()),
                Err(e) => return Err(e.into()),
            };
            // Back to the ready directory of its own priority.
            let to = self.place_ready(self.ident.slot_of(&l.name), State::Ready);
            let mut new = l.name.next(Kind::Ready, false);
            new.attempt = crate::ops::state::attempt_after(Op::Requeue, l.name.attempt);
            match self.move_job(&from, &l.name, &to, &new, Op::Requeue) {
                Ok(()) => n += 1,
                Err(e) if e.is_lease_lost() && id.is_none() => {}
                Err(e) if n > 0 => {
                    return Err(Error::from(e).with_outcome(Outcome::Indeterminate).into())
                }
                Err(e) => return Err(Error::from(e).into()),
            }
        }
        Ok(n)
    }

    /// The jobs in `state`, or only job `id` (which must be there: [`ErrorKind::NoSuchJob`]).
    fn jobs_in(&self, state: State, id: Option<JobId>) -> Result<Vec<Listed>> {
        let jobs: Vec<Listed> = self
            .list(Some(state))?
            .into_iter()
            .filter(|l| id.is_none_or(|i| l.name.id == i))
            .collect();
        if id.is_some() && jobs.is_empty() {
            return Err(Error::not_done(ErrorKind::NoSuchJob, None));
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
    pub fn make_due(&self, id: Option<JobId>) -> Result<u32, crate::Failure> {
        let delayed = self.jobs_in(State::Delayed, id)?;
        let mut r = crate::RecoverReport::default();
        for l in delayed {
            let bucket = l.dir.trim_start_matches("delayed/");
            let moved = self.source_bucket(false, bucket).and_then(|from| {
                let to = self.place_ready(self.ident.slot_of(&l.name), State::Ready);
                self.move_job(
                    &from,
                    &l.name,
                    &to,
                    &l.name.next(Kind::Ready, false),
                    Op::Due,
                )
                .map_err(Error::from)
            });
            match moved {
                Ok(()) => r.due += 1,
                Err(e) if e.is_lease_lost() => {}
                Err(e) => r.fail(e),
            }
        }
        match r.first_error.take() {
            Some(e) => Err(crate::ops::recover::partial(e.into_error(), &r).into()),
            None => Ok(r.due),
        }
    }

    /// Delete every dead job (not a state transition: the job is gone). Returns how many.
    ///
    /// # Errors
    /// The first failing unlink or fsync. Not done when nothing was deleted yet;
    /// indeterminate once a job was (the batch rule of [`Queue::requeue_dead`] and
    /// [`Queue::recover`]), and for any failed fsync. Never creates a directory.
    pub fn purge_dead(&self) -> Result<u32, crate::Failure> {
        let dead = self.list(Some(State::Dead))?;
        let mut n = 0;
        let mut dirs: Vec<String> = Vec::new();
        // The batch rule (as requeue and recovery): a failure before anything was deleted is
        // not done; after a deletion it is indeterminate (part of the batch happened).
        let partial = |n: u32| {
            if n > 0 {
                Outcome::Indeterminate
            } else {
                Outcome::NotDone
            }
        };
        for l in &dead {
            let bucket = l.dir.trim_start_matches("dead/");
            let place = match self.source_bucket(true, bucket) {
                Ok(p) => p,
                Err(e) if e.is_lease_lost() => continue,
                Err(e) => return Err(e.with_outcome(partial(n)).into()),
            };
            let rel = l.rel_path(self.ident.id);
            match self
                .sys
                .unlink(place.dir.fd(), &l.name.format(self.ident.id))
            {
                Ok(()) => n += 1,
                Err(Errno::NOENT) => {}
                Err(e) => {
                    return Err(
                        Error::io(Call::Unlink, e, partial(n), Some(self.path(&rel))).into(),
                    )
                }
            }
            if !dirs.contains(&l.dir) {
                dirs.push(l.dir.clone());
            }
        }
        for d in dirs {
            let bucket = d.trim_start_matches("dead/").to_string();
            let place = match self.source_bucket(true, &bucket) {
                Ok(p) => p,
                Err(e) if e.is_lease_lost() => continue,
                Err(e) => return Err(e.with_outcome(partial(n)).into()),
            };
            self.barrier(place.dir.fd()).map_err(|e| {
                Error::io(
                    Call::FsyncDir,
                    e,
                    Outcome::Indeterminate,
                    Some(self.path(&d)),
                )
            })?;
            let _ = self.sys.rmdir(self.dirs.dead.as_fd(), &bucket);
        }
        self.barrier(self.dirs.dead.as_fd()).map_err(|e| {
            Error::io(
                Call::FsyncDir,
                e,
                Outcome::Indeterminate,
                Some(self.path("dead")),
            )
        })?;
        Ok(n)
    }
}
