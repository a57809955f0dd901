//! Tending dead-letters and delayed jobs: requeue dead jobs to ready, make delayed jobs due
//! now, purge `dead/`; each a batch whose outcome follows the batch rule.

use super::view::Listed;
use crate::disk::barrier::Barrier;
use crate::disk::layout::DEAD_DIR;
use crate::disk::layout::NEEDS_DIR;
use crate::disk::name::{JobId, Kind, Reason};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::queue::Queue;
use std::os::fd::AsFd;

/// What one [`Queue::requeue_dead`] did, with its first failure.
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
    /// Dead jobs left dead, untouched, because a job they wait for (`EnqueueOptions::after`)
    /// is dead and was not requeued by this call: requeued, they would only die again.
    pub held: u32,
    /// The first of them: (the dependent, the dead job it waits for).
    pub held_by: Option<(JobId, JobId)>,
}

impl RequeueReport {
    /// The report as a result: `Ok` with the report when nothing failed
    /// ([`RequeueReport::first_error`] is `None`), else `Err` with that first error (not done
    /// if nothing moved, indeterminate once anything did). The counts of a failed call are in
    /// the report only: read them before calling this.
    ///
    /// # Errors
    /// [`RequeueReport::first_error`], when there is one.
    pub fn into_result(mut self) -> crate::Result<Self> {
        match self.first_error.take() {
            None => Ok(self),
            Some(e) => Err(e),
        }
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

impl Queue {
    /// Move dead job `id` (or every dead job, for `None`) back to ready with its attempt count
    /// reset to 0, and report how many moved. Every dead job is tried: one that cannot be
    /// moved (a full disk, a directory that refuses the rename) is counted in
    /// [`RequeueReport::failed`] and the others still move.
    ///
    /// # Outcome
    /// [`RequeueReport::first_error`] is `None` when every job tried was moved. Otherwise it
    /// is [`ErrorKind::NoSuchJob`] if `id` is not dead, a listing that failed, the first
    /// failing move (naming its job) or the first directory of dead jobs that could not be
    /// read: **not done** if nothing moved, **indeterminate** once anything did (the batch
    /// rule of [`Queue::recover`]). [`RequeueReport::into_result`] turns the report into a
    /// [`crate::Result`] for `?`.
    #[must_use = "its first_error says what could not be done"]
    pub fn requeue_dead(&self, id: Option<JobId>) -> RequeueReport {
        self.requeue_dead_with(id, None)
    }

    /// [`Queue::requeue_dead`] of the dead jobs with reason `reason` only (`None`: any
    /// reason); with `id`, [`ErrorKind::NoSuchJob`] also when that job has another reason.
    /// The same outcome rule.
    #[must_use = "its first_error says what could not be done"]
    pub fn requeue_dead_with(&self, id: Option<JobId>, reason: Option<Reason>) -> RequeueReport {
        let mut r = RequeueReport::default();
        if let Err(e) = self.requeue_dead_into(id, reason, &mut r) {
            r.first_error = Some(e);
        }
        r
    }

    /// [`Queue::requeue_dead_with`]'s pass into `r`; `Err` only for what stops it before any
    /// move (`id` not dead, a listing that failed: not done).
    fn requeue_dead_into(
        &self,
        id: Option<JobId>,
        reason: Option<Reason>,
        r: &mut RequeueReport,
    ) -> Result<(), crate::Error> {
        let _counting = self.counts_lock()?;
        let mut dead = match id {
            Some(_) => self.jobs_in(State::Dead, id)?,
            // Every dead job: a `dead/` or bucket this user cannot read is noted and fails
            // the call, so that "requeued N jobs" never stands beside jobs never tried.
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
        dead.retain(|l| reason.is_none_or(|r| l.name.kind == Kind::Dead { reason: r }));
        if id.is_some() && dead.is_empty() {
            return Err(Cause::not_done(ErrorKind::NoSuchJob, None).into());
        }
        let mut first: Option<Cause> = None;
        // Jobs that wait for others go last, each only once no job it waits for is still
        // dead: passes until one moves none, so a chain requeued together comes back in
        // order (a dependency before its dependents) whatever the listing's order.
        let mut rest = Vec::new();
        let mut order = Vec::with_capacity(dead.len());
        for l in dead {
            match self.markers(NEEDS_DIR, l.name.id) {
                Ok(m) if !m.is_empty() => rest.push((l, m)),
                _ => order.push(l),
            }
        }
        let mut held = Vec::new();
        let mut planned: std::collections::HashSet<JobId> =
            order.iter().map(|l| l.name.id).collect();
        while !rest.is_empty() {
            let before = order.len();
            let mut still = Vec::new();
            for (l, needs) in rest {
                match self.a_dead_dependency(&needs, &planned) {
                    Some(x) => still.push((l, needs, x)),
                    None => {
                        planned.insert(l.name.id);
                        order.push(l)
                    }
                }
            }
            if order.len() == before {
                held = still.into_iter().map(|(l, _, x)| (l.name.id, x)).collect();
                break;
            }
            rest = still.into_iter().map(|(l, n, _)| (l, n)).collect();
        }
        r.held = held.len() as u32;
        r.held_by = held.first().copied();
        if let (Some(_), Some(&(_, x))) = (id, held.first()) {
            return Err(Cause::not_done(
                ErrorKind::BadDependency {
                    id: x,
                    problem: "is still dead: requeue it first",
                },
                None,
            )
            .into());
        }
        let listed = order.len() as i64;
        let later = self.count_ahead(0, listed)?;
        for l in order {
            self.count_progress();
            let bucket = l.dir.trim_start_matches("dead/");
            let moved = self.source_bucket(true, bucket).and_then(|from| {
                if !self.markers(NEEDS_DIR, l.name.id)?.is_empty() {
                    // Dependencies not all acked: it waits again (ops/deps.rs).
                    return self.requeue_waiting(&from, &l.name);
                }
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
        self.settle_dead(later, listed, r.requeued);
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
        Ok(())
    }

    /// The first of `needs` that is dead now (a look at the dead buckets per id) and not in
    /// `planned` (requeued before it by this call), if any. A dependency that cannot be
    /// looked at counts as not dead: the requeue then resolves it as any requeue does.
    fn a_dead_dependency(
        &self,
        needs: &[JobId],
        planned: &std::collections::HashSet<JobId>,
    ) -> Option<JobId> {
        needs.iter().copied().find(|&x| {
            !planned.contains(&x)
                && matches!(self.dep_state(x, false), Ok(crate::ops::deps::Dep::Dead))
        })
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
        // a failure, not a warning beside "purged N" (as in `requeue_dead`).
        let _counting = self.counts_lock()?;
        let mut unreadable = Vec::new();
        let dead = self.list_noting(Some(State::Dead), &mut unreadable)?;
        let later = self.count_ahead(0, dead.len() as i64)?;
        let mut n = 0;
        let mut dirs: Vec<String> = Vec::new();
        // The first failure and how many jobs failed: a job that cannot be deleted (a
        // bucket another user owns, an unlink refused) is counted and the purge goes on
        // with the jobs after it, as `requeue_dead` does.
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
                Ok(()) => {
                    n += 1;
                    self.purged_deps(l.name.id); // ops/deps.rs
                }
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
        self.settle_dead(later, dead.len() as i64, n);
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

    /// After a requeue or purge of `listed` dead jobs that removed `moved`: take back from
    /// `steadq.counts` those counted ahead and not removed, or, when none were counted
    /// ahead (`later`: a full filesystem), count those removed (admin/counts.rs). A failure
    /// is logged: taking back, a total runs ahead; counting, it drops by them.
    fn settle_dead(&self, later: bool, listed: i64, moved: u32) {
        let moved = i64::from(moved);
        if later {
            self.count_after(0, moved, "dead jobs requeued or purged");
        } else if moved < listed {
            self.count_after(0, moved - listed, "dead jobs counted ahead and not removed");
        }
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
            self.barrier(Barrier::PurgeDead, place.dir.fd())
                .map_err(|e| {
                    Cause::io(
                        Call::FsyncDir,
                        e,
                        Outcome::Indeterminate,
                        Some(self.path(d)),
                    )
                })?;
            let _ = self.sys.rmdir(self.dirs.dead.as_fd(), &bucket);
        }
        self.barrier(Barrier::PurgeDead, self.dirs.dead.as_fd())
            .map_err(|e| {
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
