//! Taking one candidate: the claim's rename to a leased name, then opening the leased file,
//! verifying it and handing it out as a [`Lease`]; a job that shares its file with another
//! live name, or that this user may not open, is given back.

use super::refusal::refused;
use super::{ns, Lease};
use crate::disk::name::{JobName, Kind, LeaseFields, Reason};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Outcome};
use crate::ops::transition::MoveFailed;
use crate::queue::{random, Queue};
use std::os::fd::AsFd;
use std::time::Duration;

/// How [`Queue::try_claim`] failed: a job this user may not move (passed over), or anything
/// else (the claim fails).
pub(super) enum TryFailed {
    /// The rename was refused (`EPERM`, `EACCES`): not done, nothing moved.
    Skip(Cause),
    /// Any other failure.
    Fail(Cause),
    /// The job's group is full (every slot held): nothing moved; its jobs are passed over
    /// for a while ([`Queue::remember_full`]).
    Full,
}

use TryFailed::{Fail, Full, Skip};

impl From<Cause> for TryFailed {
    fn from(e: Cause) -> TryFailed {
        Fail(e)
    }
}

impl Queue {
    /// Try to claim one candidate. `Ok(None)`: lost the race, or it was dead-lettered.
    pub(super) fn try_claim(
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
            // over like a job this user may not move: failing the claim would stop every
            // claim of its level, the oldest job being tried first each time, while the
            // jobs behind it wait. Only a move that may have happened fails the claim.
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
        let slot = self.group_slot_first(&name, &fields)?;
        let to = self.place_ready(shard, State::Leased);
        let moved = if sync {
            self.move_job(&here, &name, &to, &leased, Op::Claim)
        } else {
            self.rename_job(&here, &name, &to, &leased, Op::Claim)
        };
        if let (Some(g), Err(MoveFailed::NotDone(_))) = (slot, &moved) {
            // Not leased: the slot taken for it is given up.
            self.free_slot(&g, fields.token);
        }
        match moved {
            Ok(()) => self.take_leased(shard, leased, &to),
            Err(e) if e.is_lease_lost() => Ok(None),
            Err(MoveFailed::NotDone(e)) if refused(&e) => Err(Skip(e)),
            Err(e) => Err(Cause::from(e).into()),
        }
    }

    /// For a claim of `name` with lease `fields`: when its group has a limit, take a slot of
    /// the group first (`ops/slots.rs`); the group taken from, if any. `Full` when every slot
    /// is held (the group is remembered full), and also when the limits file cannot be
    /// read: the group's jobs wait rather than run past a limit not known (logged; fsck
    /// names the file). `Skip` (not done: no slot taken, nothing moved) when the slot's calls
    /// fail.
    fn group_slot_first(
        &self,
        name: &JobName,
        fields: &LeaseFields,
    ) -> core::result::Result<Option<crate::disk::name::GroupName>, TryFailed> {
        let Some(g) = name.group else {
            return Ok(None);
        };
        let limit = match self.group_limit_now(&g) {
            Ok(None) => return Ok(None),
            Ok(Some(n)) => n,
            Err(e) => {
                self.warn_once(
                    format!("group limits {g}"),
                    format_args!("group {g}: its limit is not known ({e}); its jobs wait"),
                );
                self.remember_full(g);
                return Err(Full);
            }
        };
        match self.take_slot(&g, limit, name.id, fields) {
            Ok(Some(_)) => Ok(Some(g)),
            Ok(None) => {
                self.remember_full(g);
                Err(Full)
            }
            // No slot could be taken (a group directory this user may not write, a symlink
            // in its place, a full disk): nothing moved; the job is passed over like one this
            // user may not move, other jobs are claimed, and the claim fails with this error
            // (not done) only when nothing else could be.
            Err(e) => Err(Skip(e)),
        }
    }

    /// After the claim's rename: open the leased file, read and verify it once, and hand it
    /// out, or dead-letter it (corrupt, too large). `Ok(None)`: dead-lettered. A file this
    /// user may not open goes back to ready with its attempt (`Skip`, not done; see
    /// [`Queue::give_back`]).
    pub(super) fn take_leased(
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
            // back with its attempt and the claim is not done. Were the claim indeterminate,
            // with the attempt used and the job leased until expiry, a worker at its fd
            // limit (`ulimit -n 32`, `work --concurrency 1024`) would dead-letter whole
            // queues `exhausted` without running a job.
            Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOMEM)) => {
                return Err(self.give_back(shard, leased, e, false))
            }
            // The leased name is gone before the claim could open it (a `stat` says so too):
            // its lease ran out first (a lease shorter than the moment between the rename
            // and this open, on a loaded machine) and a recovery took the job back, or fsck
            // moved it aside. The claim lost the race for it, as to another worker: nothing
            // is handed out and the next job is tried. The attempt it used stays used, as a
            // worker's that died holding it would. A name still there is indeterminate.
            Err(Errno::NOENT)
                if self.sys.stat_nofollow(to.dir.fd(), &raw).err() == Some(Errno::NOENT) =>
            {
                log::debug!(
                    "{}: gone before this claim could open it (its lease ran out); passed over",
                    self.path(&rel()).display()
                );
                return Ok(None);
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

    /// Log `msg` at warn level once per handle for `key` (at most 256 keys).
    fn warn_once(&self, key: String, msg: core::fmt::Arguments<'_>) {
        let mut w = self.warned_blocks.lock().unwrap_or_else(|p| p.into_inner());
        if w.contains(&key) || w.len() >= 256 {
            return;
        }
        w.push(key);
        log::warn!("{msg}");
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
    pub(super) fn give_back(
        &self,
        shard: u16,
        leased: JobName,
        errno: Errno,
        pass_over: bool,
    ) -> TryFailed {
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
}
