//! Dependencies: a job that waits for other jobs ([`crate::EnqueueOptions::after`]).
//!
//! ```text
//! <root>/waiting/<ready name>   the waiting job D (its name does not change while it waits)
//! <root>/needs/<D-id32>/<X-id32>  empty marker: D waits for X
//! <root>/after/<X-id32>/<D-id32>  empty marker: the same, indexed by X (X's dependents)
//! ```
//!
//! Enqueue of D after X...: (1) `needs/D/X` and `after/X/D` for every X not yet acked, and
//! their directories fsynced; (2) D linked into `waiting/` (the linearization point, as any
//! enqueue); (3) each X looked at again: acked, its marker goes; dead, D goes to dead (reason
//! `dependency`); no marker left, D is promoted (`waiting/` -> its ready slot, `RENAME_NOREPLACE`;
//! `ENOENT`: someone else promoted it). The ack of X, once done, does the same for every D
//! in `after/X/`. Why no dependent is stranded: an ack's listing of `after/X/` that misses
//! `after/X/D` ran before that marker was made, so before step (3) of D's enqueue, which then
//! sees X's receipt (DESIGN.md, Dependencies). A claim never looks at `waiting/`.
//!
//! Failures after D's link never turn the enqueue or the ack into an error: the job is
//! there, or acked; recovery ([`Queue::recover`]) finishes what was left.

mod lookup;
mod markers;

use crate::disk::layout::{AFTER_DIR, NEEDS_DIR, WAITING_DIR};
use crate::disk::name::{JobId, JobName, Kind, Reason};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, EntryType, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::ops::transition::Place;
use crate::queue::Queue;
use std::collections::HashMap;
use std::os::fd::AsFd;

/// The most dependencies one job may name ([`crate::EnqueueOptions::after`]).
pub const MAX_AFTER: usize = 64;

/// Where a dependency stands, as far as this module needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dep {
    /// Acked: a receipt, or a line in the evidence log.
    Acked,
    /// Dead-lettered: a name in a dead bucket.
    Dead,
    /// Anywhere else (or, for the quick look, not known to be acked or dead).
    Pending,
    /// Nowhere in the queue (only the thorough look says so).
    Unknown,
}

fn bad(id: JobId, problem: &'static str) -> Cause {
    Cause::not_done(ErrorKind::BadDependency { id, problem }, None)
}

/// The 32-hex id of a marker's name, or `None` for anything else (a hostile entry).
fn marker_id(name: Option<&str>, t: EntryType) -> Option<JobId> {
    let n = name?;
    (n.len() == 32 && matches!(t, EntryType::File | EntryType::Dir | EntryType::Unknown))
        .then(|| JobId::parse(n))
        .flatten()
        .filter(|id| id.to_string() == n)
}

impl Queue {
    /// Check `after` before anything is written, and return the dependencies not yet acked.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for more than [`MAX_AFTER`];
    /// [`ErrorKind::BadDependency`] naming the first id named twice, dead-lettered, or not
    /// in this queue (its own id is fresh, so it is never in the queue: no cycle can form).
    /// Not done.
    pub(crate) fn check_after(&self, after: &[JobId]) -> Result<Vec<JobId>> {
        if after.len() > MAX_AFTER {
            return Err(Cause::not_done(
                ErrorKind::InvalidArgument("more than 64 dependencies (after)"),
                None,
            ));
        }
        if let Some(x) = after
            .iter()
            .enumerate()
            .find_map(|(i, x)| after[..i].contains(x).then_some(x))
        {
            return Err(bad(*x, "is named twice"));
        }
        let mut open = Vec::new();
        for &x in after {
            // A dependency renamed while the walk listed its directory (claimed, acked,
            // expired by another process meanwhile) can be missed by it, as readdir(3)
            // allows: "not in this queue" is believed only after three walks.
            let mut state = self.dep_state(x, true)?;
            for _ in 0..2 {
                if !matches!(state, Dep::Unknown) {
                    break;
                }
                state = self.dep_state(x, true)?;
            }
            match state {
                Dep::Acked => {}
                Dep::Dead => return Err(bad(x, "is dead-lettered")),
                Dep::Unknown => return Err(bad(x, "is not in this queue")),
                Dep::Pending => open.push(x),
            }
        }
        Ok(open)
    }

    /// Step (3) of an enqueue, and what recovery and a requeue do for waiting job `d`
    /// (`name` in `waiting/`): each dependency looked at (`thorough`: one in no place of
    /// the queue counts as dead, a purged one); acked ones' markers removed; a dead one
    /// moves `d` to dead; none left, `d` is promoted. Returns the state `d` ended in.
    pub(crate) fn resolve_waiting(&self, name: &JobName, thorough: bool) -> Result<State> {
        for x in self.markers(NEEDS_DIR, name.id)? {
            match self.dep_state(x, thorough)? {
                Dep::Acked => self.unmark(NEEDS_DIR, name.id, x)?,
                Dep::Dead | Dep::Unknown => {
                    self.dependency_died(name)?;
                    return Ok(State::Dead);
                }
                Dep::Pending => {}
            }
        }
        if self.markers(NEEDS_DIR, name.id)?.is_empty() {
            self.promote(name)?;
            return Ok(State::Ready);
        }
        Ok(State::Waiting)
    }

    /// Move waiting job `name` to its ready slot (`DependenciesMet`); `ENOENT` (promoted or
    /// moved by another process meanwhile) is fine.
    fn promote(&self, name: &JobName) -> Result<bool> {
        let Some(from) = self.place_waiting(false)? else {
            return Ok(false);
        };
        // A promotion a crash split in two (btrfs: the waiting name beside the ready one,
        // one file): the ready name is the newer half, the waiting one goes (ops/split.rs);
        // moving it again would meet its own newer name (`EEXIST`) at every recovery.
        if self.settle_split(&from, name)? {
            let dh = name.id.to_string();
            if let Ok(Some(needs)) = self.deps_dir(NEEDS_DIR, false) {
                if let Ok(Some(nd)) = self.deps_sub(needs.as_fd(), &dh, NEEDS_DIR, false) {
                    for x in self.markers(NEEDS_DIR, name.id).unwrap_or_default() {
                        let _ = self.sys.unlink(nd.as_fd(), &x.to_string());
                    }
                }
                let _ = self.sys.rmdir(needs.as_fd(), &dh);
            }
            return Ok(true);
        }
        let to = self.place_ready_new(self.ident.slot_of(name))?;
        let new = name.next(Kind::Ready, false);
        match self.move_job(&from, name, &to, &new, Op::DependenciesMet) {
            Ok(()) => {}
            Err(m) if m.is_lease_lost() => return Ok(false),
            Err(m) => return Err(m.into()),
        }
        // Its markers are done with (best effort: a stale one is harmless).
        let dh = name.id.to_string();
        if let Ok(Some(needs)) = self.deps_dir(NEEDS_DIR, false) {
            let _ = self.sys.rmdir(needs.as_fd(), &dh);
        }
        Ok(true)
    }

    /// Dead-letter waiting job `name` (reason `dependency`), then every job waiting for it,
    /// and theirs. Markers stay (a requeue of a dependent waits again). `ENOENT`: moved by
    /// another process meanwhile, fine.
    fn dependency_died(&self, name: &JobName) -> Result<()> {
        let Some(from) = self.place_waiting(false)? else {
            return Ok(());
        };
        if self.settle_split(&from, name)? {
            return self.dependents_die(name.id).map(drop);
        }
        let to = self.place_dead()?;
        let new = name.next(
            Kind::Dead {
                reason: Reason::DEPENDENCY,
            },
            false,
        );
        match self.move_job(&from, name, &to, &new, Op::DependencyDead) {
            Ok(()) => {}
            Err(m) if m.is_lease_lost() => return Ok(()),
            Err(m) => return Err(m.into()),
        }
        self.dependents_die(name.id).map(drop)
    }

    /// Job `x` was dead-lettered: every job waiting for it (`after/<x>/`) goes to dead too,
    /// recursively. Called after every move into dead ([`Queue::move_job`]).
    pub(crate) fn dependents_die(&self, x: JobId) -> Result<u32> {
        let (mut work, mut died) = (vec![x], 0);
        while let Some(x) = work.pop() {
            let ds = self.markers(AFTER_DIR, x)?;
            if ds.is_empty() {
                continue;
            }
            // One listing of `waiting/` for all of x's dependents.
            let mut names = self.waiting_named(&ds)?;
            if names.is_empty() {
                continue;
            }
            // `waiting/` gone since its listing (moved away by someone): not done here,
            // named; recovery moves them once it is back.
            let Some(from) = self.place_waiting(false)? else {
                return Err(Cause::io(
                    Call::Open,
                    Errno::NOENT,
                    Outcome::NotDone,
                    Some(self.path(WAITING_DIR)),
                ));
            };
            let to = self.place_dead()?;
            for d in ds {
                let Some(n) = names.remove(&d) else {
                    continue;
                };
                // A death a crash split in two: the dead name is the newer half.
                if self.settle_split(&from, &n)? {
                    work.push(d);
                    continue;
                }
                let new = n.next(
                    Kind::Dead {
                        reason: Reason::DEPENDENCY,
                    },
                    false,
                );
                match self.move_job(&from, &n, &to, &new, Op::DependencyDead) {
                    Ok(()) => {
                        died += 1;
                        work.push(d);
                    }
                    Err(m) if m.is_lease_lost() => {}
                    Err(m) => return Err(m.into()),
                }
            }
        }
        Ok(died)
    }

    /// The follow-up of job `x`'s ack (once the ack is done): for each job waiting for it,
    /// its marker goes and, with none left, it is promoted; then `after/<x>/` goes. A
    /// failure is logged, never returned: the ack is done, and recovery finishes this.
    pub(crate) fn dependency_acked(&self, x: JobId) {
        if let Err(e) = self.dependency_acked_inner(x).map(drop) {
            log::warn!("job {x} acked; its dependents are left for recovery: {e}");
        }
    }

    fn dependency_acked_inner(&self, x: JobId) -> Result<u32> {
        let root = self.dirs.root.as_fd();
        // The cost every ack pays: one `fstatat`, no heap allocation.
        let at = crate::disk::layout::dir_rel(format_args!("{AFTER_DIR}/{x}"));
        if let Err(Errno::NOENT | Errno::NOTDIR) = self.sys.stat_nofollow(root, &at) {
            return Ok(0);
        }
        let mut promoted = 0;
        let ds = self.markers(AFTER_DIR, x)?;
        // Many dependents: `waiting/` listed once, not once each. A dependent linked after
        // this listing promotes itself (its step 3 finds x's receipt, which came first).
        let mut names = match ds.len() {
            0 | 1 => None,
            _ => Some(self.waiting_named(&ds)?),
        };
        // One dependent's failure (a marker someone replaced with a directory, say) is
        // returned after the others are done, not before.
        let mut first_err = None;
        for d in ds {
            let one = |names: &mut Option<HashMap<JobId, JobName>>| -> Result<u32> {
                self.unmark(NEEDS_DIR, d, x)?;
                let mut promoted = 0;
                if self.markers(NEEDS_DIR, d)?.is_empty() {
                    let n = match names {
                        Some(m) => m.remove(&d),
                        None => self.waiting_name(d)?,
                    };
                    if let Some(n) = n {
                        promoted = self.promote(&n)? as u32;
                    }
                }
                self.unmark(AFTER_DIR, x, d)?;
                Ok(promoted)
            };
            match one(&mut names) {
                Ok(n) => promoted += n,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        if let Some(after) = self.deps_dir(AFTER_DIR, false)? {
            match self.sys.rmdir(after.as_fd(), &x.to_string()) {
                Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => {}
                Err(e) => {
                    let rel = format!("{AFTER_DIR}/{x}");
                    return Err(Cause::io(
                        Call::Unlink,
                        e,
                        Outcome::NotDone,
                        Some(self.path(&rel)),
                    ));
                }
            }
        }
        Ok(promoted)
    }

    /// Recovery's part, driven by `after/`: for each job X others wait for, X acked, the
    /// ack's follow-up is done again (a crash may have cut it short); X dead, its waiting
    /// dependents die. Then every waiting job with no marker left is promoted (its last
    /// marker went, by an ack's follow-up that ran before it was linked, or by one cut
    /// short). Cost: one listing of `waiting/`, one of `after/<X>/` per X, one look at each X
    /// with a dependent waiting (its receipts shard, the dead buckets, the evidence log), and
    /// one listing of `needs/<D>/` per waiting job; no receipt scan per waiting job.
    ///
    /// A directory of these this user may not read (a member's, made first at mode 700) is
    /// noted in [`crate::RecoverReport::unreadable`] and what is behind it skipped (a waiting
    /// job whose markers cannot be read is never promoted); the rest is done.
    pub(crate) fn recover_waiting(&self, r: &mut crate::RecoverReport) -> Result<()> {
        let note = |r: &mut crate::RecoverReport, e: Cause| match self.unreadable_rel(&e) {
            Some(rel) => r.unreadable_dir(rel),
            None => r.fail(e),
        };
        let mut xs = Vec::new();
        let listed = self
            .deps_dir(AFTER_DIR, false)
            .and_then(|after| match after {
                Some(after) => self
                    .sys
                    .read_dir(after.as_fd(), |n, _, t| {
                        if let Some(x) = marker_id(n, t).filter(|_| t != EntryType::File) {
                            xs.push(x);
                        }
                    })
                    .map_err(|e| self.read_dir_error(e, AFTER_DIR)),
                None => Ok(()),
            });
        if let Err(e) = listed {
            xs.clear();
            note(r, e);
        }
        // Only an X with a dependent in `waiting/` can need anything here (its follow-up
        // cut short, or its death not passed on), so X is looked at (its receipts shard, the
        // dead buckets, the evidence log) only then: one listing of `after/<x>/` each, and
        // `after/` full of empty or foreign directories costs no evidence scans.
        let waiting_ids: Option<std::collections::HashSet<JobId>> = self
            .waiting_jobs()
            .ok()
            .map(|w| w.iter().map(|n| n.id).collect());
        for x in xs {
            if let Some(w) = &waiting_ids {
                match self.markers(AFTER_DIR, x) {
                    Ok(ds) if !ds.iter().any(|d| w.contains(d)) => continue,
                    _ => {}
                }
            }
            let moved = match self.dep_state(x, false) {
                Ok(Dep::Acked) => self.dependency_acked_inner(x),
                Ok(Dep::Dead) => self.dependents_die(x),
                Ok(_) => Ok(0),
                Err(e) => Err(e),
            };
            match moved {
                Ok(n) => r.dependencies += n,
                Err(e) => r.fail(e),
            }
        }
        let waiting = match self.waiting_jobs() {
            Ok(w) => w,
            Err(e) => {
                note(r, e);
                Vec::new()
            }
        };
        for n in waiting {
            match self.markers(NEEDS_DIR, n.id) {
                Ok(m) if m.is_empty() => match self.promote(&n) {
                    Ok(true) => r.dependencies += 1,
                    Ok(false) => {}
                    Err(e) => r.fail(e),
                },
                Ok(m) => match self.rejoin(&n, &m) {
                    Ok(true) => r.dependencies += 1,
                    Ok(false) => {}
                    Err(e) => note(r, e),
                },
                Err(e) => note(r, e),
            }
        }
        Ok(())
    }

    /// Waiting job `n` needs `xs` (`needs/<n>/`): where one of them lacks its `after/<x>/<n>`
    /// (removed or moved away by hand; no crash leaves that, the markers are durable before
    /// the job is linked) no ack would ever move `n`, so the markers are made again and `n`
    /// resolved now ([`Queue::resolve_waiting`]). Cost: one `openat2` and one `fstatat` per
    /// marker.
    /// `Ok(true)`: `n` left `waiting/`.
    fn rejoin(&self, n: &JobName, xs: &[JobId]) -> Result<bool> {
        let after = self.deps_dir(AFTER_DIR, false)?;
        let dh = n.id.to_string();
        let lost: Vec<JobId> = xs
            .iter()
            .copied()
            .filter(|x| {
                // Never followed: `after/<x>` opened beneath, the marker not followed.
                let marked = after.as_ref().is_some_and(|a| {
                    self.sys
                        .open_dir_beneath(a.as_fd(), &x.to_string())
                        .is_ok_and(|ax| {
                            self.sys
                                .stat_nofollow(ax.as_fd(), &dh)
                                .is_ok_and(|m| m.file_type == rustix::fs::FileType::RegularFile)
                        })
                });
                !marked
            })
            .collect();
        if lost.is_empty() {
            return Ok(false);
        }
        log::warn!(
            "{}: waiting job {} had no marker in {AFTER_DIR}/ for {} of its dependencies; made again",
            self.root.display(),
            n.id,
            lost.len()
        );
        self.make_markers_inner(n.id, &lost)?;
        Ok(self.resolve_waiting(n, false)? != State::Waiting)
    }
}

impl Queue {
    /// [`Queue::enqueue_with`] of a job with dependencies (`o.after` not empty): checked,
    /// markers made, the job linked into `waiting/` (the linearization point, with the
    /// outcomes of any enqueue), then its dependencies looked at again (step 3 above).
    pub(crate) fn enqueue_after(
        &self,
        payload: &[u8],
        o: &crate::EnqueueOptions,
    ) -> core::result::Result<crate::Enqueued, crate::EnqueueError> {
        use crate::EnqueueError as E;
        if o.delay.is_some_and(|d| !d.is_zero()) || o.key.is_some() || o.wait.is_some() {
            return Err(E::from_internal(Cause::not_done(
                ErrorKind::InvalidArgument(
                    "after (dependencies) cannot go with delay, key or wait",
                ),
                None,
            )));
        }
        let open = self.check_after(&o.after).map_err(E::from_internal)?;
        let _room = self
            .admit(1, payload.len() as u64)
            .map_err(E::from_internal)?;
        if open.is_empty() {
            // Every dependency acked already: an ordinary enqueue, straight to ready.
            let plain = crate::EnqueueOptions {
                after: Vec::new(),
                ..o.clone()
            };
            return self
                .enqueue_as(None, payload, &plain)
                .map(crate::Enqueued::New)
                .map_err(E::from_internal);
        }
        let _op = self.op();
        let p = self
            .prepare(Some(payload), o, None)
            .map_err(E::from_internal)?;
        let d = p.name.id;
        self.make_markers(d, &open).map_err(E::from_internal)?;
        let published = self
            .write_job(&p, true)
            .and_then(|w| self.publish_durably(&p, w));
        if let Err(e) = published {
            if e.outcome() == Outcome::NotDone {
                self.forget_markers(d, &open);
            }
            return Err(E::from_internal(e));
        }
        if let Err(e) = self.resolve_waiting(&p.name, false) {
            log::warn!("job {d} enqueued waiting; its dependencies are left for recovery: {e}");
        }
        Ok(crate::Enqueued::New(d))
    }
}

impl Queue {
    /// An operator's requeue of dead job `name` (in `from`) whose dependencies are not all
    /// acked: back to `waiting/` (`RequeueWaiting`, attempts reset), then its dependencies
    /// looked at thoroughly: one dead (or purged, in no place of the queue) sends it back to
    /// dead, none left promotes it. Requeue the dead dependency first.
    ///
    /// # Errors
    /// As [`Queue::move_job`] for the move; a failure after it is logged (recovery
    /// finishes it).
    pub(crate) fn requeue_waiting(&self, from: &Place<'_>, name: &JobName) -> Result<()> {
        let to = self.place_waiting(true)?.expect("made");
        let mut new = name.next(Kind::Ready, false);
        new.attempt = crate::disk::state::attempt_after(Op::RequeueWaiting, name.attempt);
        self.move_job(from, name, &to, &new, Op::RequeueWaiting)?;
        if let Err(e) = self.resolve_waiting(&new, true) {
            log::warn!(
                "job {} requeued waiting; its dependencies are left for recovery: {e}",
                new.id
            );
        }
        Ok(())
    }
}

impl Queue {
    /// After dead job `x` was purged: jobs still waiting for it die (a purged dependency
    /// never comes back), and its markers go, both ways. Best effort, logged: what stays is
    /// harmless (`fsck` lists it; a requeued dependent finds `x` nowhere and dies again).
    pub(crate) fn purged_deps(&self, x: JobId) {
        if let Err(e) = self.dependents_die(x) {
            log::warn!("job {x} purged; its dependents are left for recovery: {e}");
        }
        let dependents = self.markers(AFTER_DIR, x).unwrap_or_default();
        let needs = self.markers(NEEDS_DIR, x).unwrap_or_default();
        self.forget_markers(x, &needs);
        if let Ok(Some(after)) = self.deps_dir(AFTER_DIR, false) {
            let xh = x.to_string();
            if let Ok(Some(ax)) = self.deps_sub(after.as_fd(), &xh, AFTER_DIR, false) {
                for d in dependents {
                    let _ = self.sys.unlink(ax.as_fd(), &d.to_string());
                }
            }
            let _ = self.sys.rmdir(after.as_fd(), &xh);
        }
    }
}
