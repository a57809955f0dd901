//! Where a rename happens: [`Queue::move_job`] is the one place a job changes state.
//!
//! `renameat2(old dir, exact old name, new dir, new name, RENAME_NOREPLACE)`, then fsync of
//! the destination directory, then of the source directory when it differs (except where the
//! block rig showed the first fsync covers both: xfs, journaled ext4 and f2fs, DESIGN.md Barriers). The rename is the
//! linearization point: an error from it is "not done" (`ENOENT`: the exact name is gone, so a
//! lease is lost or another process moved the job first), except `EIO`, which is
//! indeterminate. A failed fsync after it is indeterminate.
//!
//! The three ways a move can fail are a type, [`MoveFailed`], so a caller cannot confuse
//! "nothing moved" with "moved, but the barrier failed" (the job now lives under its new
//! name) or "the rename's result is unknown" (either name may exist).

use crate::disk::barrier::Barrier;
use crate::disk::layout::{
    dead_bucket, delayed_bucket, dir_rel, receipts_shard, DEAD_DIR, DELAYED_DIR,
};
use crate::disk::name::{JobName, Kind};
use crate::disk::state::{self, Op, State};
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::ops::enqueue::DirRef;
use crate::queue::Queue;
use std::os::fd::AsFd;

/// How a move that did not complete ended. Each carries the public [`Cause`] it becomes
/// (`?` converts it), whose [`Outcome`] agrees with the variant.
#[derive(Debug)]
pub(crate) enum MoveFailed {
    /// Nothing moved: a failure before the rename, or the rename failed cleanly (`ENOENT`,
    /// the exact old name is gone: [`ErrorKind::LeaseLost`]). Outcome: not done.
    NotDone(Cause),
    /// The rename happened and a barrier after it failed: the job lives under the new name,
    /// which may not survive a crash. Outcome: indeterminate.
    Renamed(Cause),
    /// The rename itself returned `EIO`: either name may exist now. Outcome: indeterminate.
    Unknown(Cause),
}

impl MoveFailed {
    /// True when nothing moved because the exact old name was gone (a lost lease, or another
    /// process moved the job first).
    pub(crate) fn is_lease_lost(&self) -> bool {
        matches!(self, MoveFailed::NotDone(e) if e.is_lease_lost())
    }
}

impl core::fmt::Display for MoveFailed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MoveFailed::NotDone(e) | MoveFailed::Renamed(e) | MoveFailed::Unknown(e) => {
                core::fmt::Display::fmt(e, f)
            }
        }
    }
}

impl From<MoveFailed> for Cause {
    fn from(m: MoveFailed) -> Cause {
        match m {
            MoveFailed::NotDone(e) | MoveFailed::Renamed(e) | MoveFailed::Unknown(e) => e,
        }
    }
}

/// What [`Queue::move_job`] and [`Queue::rename_job`] return.
pub(crate) type Moved = core::result::Result<(), MoveFailed>;

/// A directory a job can be in, with its path relative to the root (for messages).
pub(crate) struct Place<'a> {
    pub dir: DirRef<'a>,
    pub rel: crate::disk::layout::DirRel,
    pub state: State,
}

impl Queue {
    /// Ready slot `slot` (see [`crate::Identity`]'s slot helpers: a level's shard), where a
    /// job is (a source, or a move within its slot).
    pub(crate) fn place_ready(&self, slot: u16, state: State) -> Place<'_> {
        let rel = self.ident.slot_dir_rel(slot);
        // A foreign shard is never opened by its path: every call on the stand-in fails.
        let dir = match self.foreign_slot(slot) {
            Some(_) => crate::ops::enqueue::DirRef::Held(self.dirs.absent.as_fd()),
            None => self.held_dir(self.ready_fd(slot), &rel),
        };
        Place { dir, rel, state }
    }

    /// Ready slot `slot` as the destination of a job coming from elsewhere (an enqueue, a
    /// due delayed job, a requeued dead job): a level's slot is made on first use
    /// ([`Queue::ensure_slot`]).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (not done) naming the directory that could not be made durable.
    pub(crate) fn place_ready_new(&self, slot: u16) -> Result<Place<'_>> {
        self.ensure_slot(slot)?;
        Ok(self.place_ready(slot, State::Ready))
    }

    pub(crate) fn place_receipts(&self, shard: u16) -> Place<'_> {
        let rel = receipts_shard(shard);
        Place {
            dir: self.held_dir(self.dirs.receipts[shard as usize].as_fd(), &rel),
            rel,
            state: State::Acked,
        }
    }

    /// The delayed bucket for `not_before_ns`, created if needed.
    pub(crate) fn place_delayed(&self, not_before_ns: u64) -> Result<Place<'_>> {
        self.place_bucket(
            false,
            delayed_bucket(not_before_ns, self.ident.delayed_bucket_ns).as_str(),
        )
    }

    /// Today's dead-letter bucket, created if needed.
    pub(crate) fn place_dead(&self) -> Result<Place<'_>> {
        self.place_bucket(true, dead_bucket(self.clock.wall_ns()).as_str())
    }

    /// An existing bucket (`dead` or `delayed`) by name, or a new one.
    pub(crate) fn place_bucket(&self, dead: bool, bucket: &str) -> Result<Place<'_>> {
        let rel = dir_rel(format_args!(
            "{}/{bucket}",
            if dead { DEAD_DIR } else { DELAYED_DIR }
        ));
        let fd = self
            .bucket_dir(dead, bucket)
            .map_err(|(c, e)| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel))))?;
        Ok(Place {
            dir: DirRef::Opened(fd),
            rel,
            state: if dead { State::Dead } else { State::Delayed },
        })
    }

    /// A bucket a job was listed in, opened without creating it (a source is never made as
    /// a side effect). A bucket that is gone means the job moved meanwhile:
    /// [`ErrorKind::LeaseLost`], not done.
    pub(crate) fn source_bucket(&self, dead: bool, bucket: &str) -> Result<Place<'_>> {
        let rel = dir_rel(format_args!(
            "{}/{bucket}",
            if dead { DEAD_DIR } else { DELAYED_DIR }
        ));
        let parent = if dead {
            &self.dirs.dead
        } else {
            &self.dirs.delayed
        };
        let fd = match self.sys.open_dir_beneath(parent.as_fd(), bucket) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                return Err(Cause::not_done(ErrorKind::LeaseLost, Some(self.path(&rel))))
            }
            Err(e) => {
                return Err(Cause::io(
                    Call::Open,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&rel)),
                ))
            }
        };
        Ok(Place {
            dir: DirRef::Opened(fd),
            rel,
            state: if dead { State::Dead } else { State::Delayed },
        })
    }

    /// Move job `old` from `from` to `new` in `to` by `op`; see the module docs for outcomes.
    ///
    /// # Errors
    /// [`ErrorKind::LeaseLost`] (not done) when `old` no longer exists; [`ErrorKind::Io`]
    /// otherwise.
    pub(crate) fn move_job(
        &self,
        from: &Place<'_>,
        old: &JobName,
        to: &Place<'_>,
        new: &JobName,
        op: Op,
    ) -> Moved {
        self.rename_job(from, old, to, new, op)?;
        self.sync_moved(op, from, to).map_err(MoveFailed::Renamed)?;
        if to.state == State::Dead && op != Op::DependencyDead {
            // The jobs waiting for it die too (ops/deps.rs); the move itself is done, so a
            // failure here is recovery's to finish.
            match self.dependents_die(new.id) {
                Ok(0) => {}
                Ok(n) => log::info!(
                    "{}: job {} dead-lettered, and {n} jobs waiting for it (reason dependency)",
                    self.root.display(),
                    new.id
                ),
                Err(e) => log::warn!(
                    "job {} dead-lettered; its dependents are left for recovery: {e}",
                    new.id
                ),
            }
        }
        Ok(())
    }

    /// The barriers after a rename from `from` to `to`: fsync of `to`, then of `from` when it
    /// differs, except where the block rig showed the first covers both (xfs and journaled
    /// ext4: [`crate::ops::group::Group::one_barrier_per_rename`], DESIGN.md Barriers).
    ///
    /// # Errors
    /// [`ErrorKind::Io`], indeterminate (the rename happened).
    /// `op` names the barriers ([`Barrier::dest`], [`Barrier::source`]).
    pub(crate) fn sync_moved(&self, op: Op, from: &Place<'_>, to: &Place<'_>) -> Result<()> {
        self.sync_place(Barrier::dest(op), to)?;
        if from.rel != to.rel && !self.group.one_barrier_per_rename(&self.sys, to.dir.fd()) {
            self.sync_place(Barrier::source(op), from)?;
        }
        Ok(())
    }

    /// The barrier `b` after a move: fsync `place`'s directory (indeterminate on failure).
    pub(crate) fn sync_place(&self, b: Barrier, place: &Place<'_>) -> Result<()> {
        self.dir_barrier(b, &place.dir).map_err(|e| {
            Cause::io(
                Call::FsyncDir,
                e,
                Outcome::Indeterminate,
                Some(self.path(&place.rel)),
            )
        })
    }

    /// The rename alone, without barriers (batches share them; see [`Queue::move_job`]).
    pub(crate) fn rename_job(
        &self,
        from: &Place<'_>,
        old: &JobName,
        to: &Place<'_>,
        new: &JobName,
        op: Op,
    ) -> Moved {
        state::check(Some(from.state), op, to.state);
        debug_assert_eq!(new.generation, old.generation + 1);
        debug_assert_eq!(
            new.attempt,
            state::attempt_after(op, old.attempt),
            "{op:?} breaks the attempt rule of the transition table"
        );
        debug_assert_eq!(
            match to.state {
                // A waiting job keeps its ready name (ops/deps.rs).
                State::Waiting => State::Waiting,
                _ => crate::disk::scan::state_of(&new.kind),
            },
            to.state,
            "the new name's kind must be the target state's"
        );
        debug_assert!(to.state != State::Waiting || new.kind == crate::disk::name::Kind::Ready);
        let (a, b) = (old.format(self.ident.id), new.format(self.ident.id));
        if op == Op::Claim {
            // Its event, drained by a later claim, need not parse the name (ops/shards.rs).
            self.shards.made(self.ident.slot_of(new), &b, new);
        }
        // A bucket or level another user is making refuses this user for a moment.
        let rename = || self.sys.rename(from.dir.fd(), &a, to.dir.fd(), &b);
        match self.retry_making(&to.rel, rename) {
            Ok(()) => {}
            Err(Errno::NOENT) => {
                return Err(MoveFailed::NotDone(Cause::not_done(
                    ErrorKind::LeaseLost,
                    Some(self.path(&format!("{}/{a}", from.rel))),
                )))
            }
            Err(e) => {
                let e = self.dir_errno(to.dir.fd(), self.dir_errno(from.dir.fd(), e));
                let path = Some(self.path(&format!("{}/{a}", from.rel)));
                let err = |o| match to.rel == from.rel {
                    true => Cause::io(Call::Rename, e, o, path),
                    false => Cause::io(Call::Rename, e, o, path).moving_into(self.path(&to.rel)),
                };
                return Err(if e == Errno::IO {
                    MoveFailed::Unknown(err(Outcome::Indeterminate))
                } else {
                    MoveFailed::NotDone(err(Outcome::NotDone))
                });
            }
        }
        if from.state == State::Leased {
            self.after_lease_moved(old, new);
        }
        Ok(())
    }

    /// After a job of a group left leased name `old` for `new`: its group slot is freed
    /// (`ops/slots.rs`; a failure is logged, never the move's). A renewal (`new` leased too)
    /// rewrote its slot before its rename ([`Queue::renew_slot_first`]).
    fn after_lease_moved(&self, old: &JobName, new: &JobName) {
        let (Some(g), Kind::Leased(l)) = (old.group, old.kind) else {
            return;
        };
        if !matches!(new.kind, Kind::Leased(_)) {
            self.free_slot(&g, l.token);
        }
    }
}
