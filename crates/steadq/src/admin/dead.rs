//! Tending dead-letters and delayed jobs: requeue dead jobs to ready, make delayed jobs due
//! now, purge `dead/`; each a batch whose outcome follows the batch rule.

use super::view::Listed;
use crate::disk::barrier::Barrier;
use crate::disk::layout::DEAD_DIR;
use crate::disk::name::{JobId, Kind};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, Errno};
use crate::error::{Error, ErrorKind, Outcome, Result};
use crate::queue::Queue;
use std::os::fd::AsFd;

/// What one [`Queue::requeue_dead_report`] did.
#[derive(Debug, Default)]
pub struct RequeueReport {
    /// Dead jobs moved back to ready (done: each past its rename and barrier).
    pub requeued: u32,
    /// Dead jobs that could not be moved; the others were still tried.
    pub failed: u32,
    /// The first failed move, naming its job: not done when nothing moved, indeterminate once
    /// anything did (part of the batch happened).
    pub first_error: Option<crate::Failure>,
    /// Directories under `dead/` this user could not read (or that are not directories),
    /// relative to the root: their jobs were not tried. With no failed move, `first_error`
    /// names the first of them.
    pub unreadable: Vec<String>,
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
    /// reset to 0. Returns how many moved.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchJob`] if `id` is not dead; otherwise the first failing move's error,
    /// after trying every job: not done if nothing moved, indeterminate if anything did (the
    /// rule of [`Queue::recover`]). [`Queue::requeue_dead_report`] also says how many moved.
    pub fn requeue_dead(&self, id: Option<JobId>) -> Result<u32, crate::Failure> {
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
    pub fn requeue_dead_report(&self, id: Option<JobId>) -> Result<RequeueReport, crate::Failure> {
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
        let mut first: Option<Error> = None;
        for l in dead {
            let bucket = l.dir.trim_start_matches("dead/");
            let moved = self.source_bucket(true, bucket).and_then(|from| {
                // Back to the ready directory of its own priority.
                let to = self.place_ready_new(self.ident.slot_of(&l.name))?;
                let mut new = l.name.next(Kind::Ready, false);
                new.attempt = crate::disk::state::attempt_after(Op::Requeue, l.name.attempt);
                self.move_job(&from, &l.name, &to, &new, Op::Requeue)
                    .map_err(Error::from)
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
                let to = self.place_ready_new(self.ident.slot_of(&l.name))?;
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
    /// A job (or bucket) that cannot be deleted is logged and passed over: the others are
    /// still deleted (as `requeue --all` does), and the call then fails.
    ///
    /// # Errors
    /// The first failing unlink, bucket open or fsync, after the rest was tried. Not done
    /// when nothing was deleted; indeterminate once a job was (the batch rule of
    /// [`Queue::requeue_dead`] and [`Queue::recover`]), and for any failed fsync. Never
    /// creates a directory.
    pub fn purge_dead(&self) -> Result<u32, crate::Failure> {
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
        let (mut first, mut failed): (Option<Error>, u32) = (None, 0);
        let mut fail = |e: Error| {
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
                    fail(Error::io(Call::Unlink, e, o, Some(self.path(&rel))));
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
    fn sync_purged(&self, dirs: &[String], n: u32) -> Result<(), crate::Failure> {
        for d in dirs {
            let bucket = d.trim_start_matches("dead/").to_string();
            let place = match self.source_bucket(true, &bucket) {
                Ok(p) => p,
                Err(e) if e.is_lease_lost() => continue,
                Err(e) => return Err(e.with_outcome(batch_outcome(n)).into()),
            };
            self.barrier(Barrier::PurgeDead, place.dir.fd())
                .map_err(|e| {
                    Error::io(
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
                Error::io(
                    Call::FsyncDir,
                    e,
                    Outcome::Indeterminate,
                    Some(self.path("dead")),
                )
            })?;
        Ok(())
    }
}
