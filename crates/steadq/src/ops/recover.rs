//! Recovery: expired leases back to ready (or dead), due delayed jobs to ready, abandoned temp
//! files removed.
//!
//! A lease is expired when its boot id differs from this boot's (at once: `CLOCK_BOOTTIME`
//! restarted) or when `CLOCK_BOOTTIME` is past its `b` deadline. Every move starts from the
//! exact name found, so recovery is safe while workers run and when several processes recover
//! at once: of two recoverers one rename wins, the other sees `ENOENT` and skips. Running it
//! twice in a row moves nothing the second time.

use crate::disk::layout::{bucket_dir, parse_bucket, DELAYED_DIR, TMP_DIR};
use crate::disk::name::{delay_due, due_wall_ns, JobName, Kind};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, EntryType, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::ops::enqueue::DirRef;
use crate::ops::transition::Place;
use crate::queue::Queue;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How long (ns) a temp file of a live pid may go unlocked before recovery takes its writer
/// for gone: its writer locks it right after making it ([`crate::disk::sys::Sys::create_file`]).
const TEMP_UNHELD_NS: u64 = 1_000_000_000;

/// How long (`CLOCK_BOOTTIME` ns) a handle goes at most between readings of the delayed
/// buckets later than the current wall-clock one ([`LaterBuckets`]).
pub(crate) const LATER_RECHECK_NS: u64 = 5_000_000_000;

/// What a handle's last reading of the delayed buckets later than the current wall-clock one
/// found. A bucket is chosen by a job's wall-clock not-before, but within one boot the job is
/// due by the boot clock ([`delay_due`]): after the wall clock went back (set a year ahead,
/// then corrected) a job in a bucket a year ahead may be due in seconds. Nothing on disk that
/// the queue owns says which later bucket holds such a job (a directory's mtime is set by
/// whoever last changed it: moving the first due job out of a bucket set it to now), so a
/// pass reads every later bucket when [`Queue::read_later_buckets`] says so, and between
/// such readings waits for the earliest boot-clock not-before it found there.
#[derive(Debug, Default)]
pub(crate) struct LaterBuckets {
    /// `CLOCK_BOOTTIME` ns of the last pass that read them all; 0: none yet (or a wall-clock
    /// step back was seen since: [`Queue::reread_later_buckets`]).
    read_at: AtomicU64,
    /// The earliest `CLOCK_BOOTTIME` not-before (ns) of a job of this boot that pass found in
    /// them not yet due; `u64::MAX`: none.
    next_due_boot_ns: AtomicU64,
}

/// What one recovery pass ([`Queue::recover`]) did and saw, with its first failure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoverReport {
    /// Expired leases moved back to ready.
    pub expired: u32,
    /// Expired leases with no attempt left, moved to dead.
    pub expired_dead: u32,
    /// Delayed jobs that were due, moved to ready.
    pub due: u32,
    /// Abandoned temp files removed from `tmp/`.
    pub temp_removed: u32,
    /// Older names of moves a crash split in two (both names one file, link count 2), removed
    /// in favour of the newer name (`ops/split.rs`): a lease whose ack, nack or fail left the
    /// new name too, or a delayed job whose promotion did.
    pub split: u32,
    /// Waiting jobs moved: promoted to ready (every dependency acked) or dead-lettered (a
    /// dependency dead), where a crash or a failure had left them waiting (`ops/deps.rs`).
    pub dependencies: u32,
    /// Empty past delayed buckets removed.
    pub buckets_removed: u32,
    /// Foreign entries seen (left in place; `fsck` reports them).
    pub foreign: u32,
    /// Live leases of this boot seen.
    pub live_leases: u32,
    /// Earliest not-before (unix ns) of a delayed job not yet due.
    pub next_due_wall_ns: Option<u64>,
    /// Earliest `CLOCK_BOOTTIME` deadline (ns) of a live lease of this boot.
    pub next_expiry_boot_ns: Option<u64>,
    /// Entries that could not be moved or removed (a full disk, an I/O error); the pass went
    /// on with the rest. Each was logged; the first is in `first_error`.
    pub failed: u32,
    /// The first failure, with its outcome (indeterminate when its rename may have happened).
    /// A pass that could not read a directory has one (naming it) even when `failed` is 0.
    pub first_error: Option<crate::Error>,
    /// Directories this user could not look into (`EACCES`, `EPERM`: a ready slot holding
    /// ready and leased jobs, `delayed/` or a delayed bucket), relative to the root: their
    /// jobs were not examined.
    pub unreadable: Vec<String>,
}

impl RecoverReport {
    /// Note directory `rel` as unreadable (once).
    pub(crate) fn unreadable_dir(&mut self, rel: String) {
        if !self.unreadable.contains(&rel) {
            self.unreadable.push(rel);
        }
    }

    /// Jobs moved in all.
    pub fn moved(&self) -> u32 {
        self.expired + self.expired_dead + self.due + self.dependencies
    }

    /// The report as a result: `Ok` with the report when nothing failed
    /// ([`RecoverReport::first_error`] is `None`), else `Err` with that first error (not done
    /// if nothing was changed, indeterminate once anything was). The counts of a failed pass
    /// are in the report only: read them before calling this.
    ///
    /// # Errors
    /// [`RecoverReport::first_error`], when there is one.
    pub fn into_result(mut self) -> crate::Result<Self> {
        match self.first_error.take() {
            None => Ok(self),
            Some(e) => Err(e),
        }
    }

    /// Count and log a failure; keep the first.
    pub(crate) fn fail(&mut self, e: crate::Cause) {
        log::warn!("recover: {e}");
        self.failed += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.into());
        }
    }
}

fn min_opt(a: Option<u64>, b: u64) -> Option<u64> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Queue {
    /// One recovery pass over the whole queue, and its report. It does all it can: an entry
    /// that cannot be moved (say the disk is full) is counted in [`RecoverReport::failed`] and
    /// the pass goes on with the others.
    ///
    /// # Outcome
    /// [`RecoverReport::first_error`] holds the first failure, naming its path, or names the
    /// first directory that could not be read ([`RecoverReport::unreadable`]); `None` when
    /// everything was examined and every move was done. Its outcome follows the batch rule
    /// (the same for `recover`, `requeue_dead` and `purge_dead`): **not done** if nothing was
    /// changed, **indeterminate** if anything was (the moves before and after the failure are
    /// done) or if the failing move itself is indeterminate. A move that loses a race
    /// (`ENOENT`) is not a failure. [`RecoverReport::into_result`] turns the report into a
    /// [`crate::Result`] for `?`.
    #[must_use = "its first_error says what could not be done"]
    pub fn recover(&self) -> RecoverReport {
        let mut r = RecoverReport::default();
        for s in 0..self.ident.slots() {
            if let Err(e) = self.sweep_shard(s, &mut r) {
                r.fail(e);
            }
        }
        if let Err(e) = self.recover_delayed(&mut r) {
            r.fail(e);
        }
        if let Err(e) = self.recover_tmp(&mut r) {
            r.fail(e);
        }
        if let Err(e) = self.recover_waiting(&mut r) {
            r.fail(e);
        }
        // Not everything was examined: that is a failure of the pass, named by its path.
        if let (None, Some(rel)) = (&r.first_error, r.unreadable.first()) {
            r.first_error = Some(self.unreadable_dir_error(rel).into());
        }
        if let Some(e) = r.first_error.take() {
            r.first_error = Some(partial(e.into_cause(), &r).into());
        }
        r
    }

    /// Whether this pass reads the delayed buckets later than the current wall-clock one
    /// (`boot_now`: `CLOCK_BOOTTIME` ns): on a handle's first pass, once a job of this boot
    /// the last reading found there is due by the boot clock, after a wall-clock step back
    /// ([`Queue::reread_later_buckets`]), and at least every [`LATER_RECHECK_NS`] (jobs
    /// other processes placed there while the wall clock was ahead).
    fn read_later_buckets(&self, boot_now: u64) -> bool {
        let at = self.later_buckets.read_at.load(Relaxed);
        at == 0
            || boot_now >= self.later_buckets.next_due_boot_ns.load(Relaxed)
            || boot_now.saturating_sub(at) >= LATER_RECHECK_NS
    }

    /// Have the next pass read every delayed bucket (the wall clock was seen to go back: a job
    /// placed while it was ahead may be due by the boot clock).
    pub(crate) fn reread_later_buckets(&self) {
        self.later_buckets.read_at.store(0, Relaxed);
    }

    /// Move due delayed jobs to ready ([`crate::delay_due`], the one due rule), bucket by
    /// bucket up to the current wall-clock one, and every later bucket too when
    /// [`Queue::read_later_buckets`] says so. Otherwise a later bucket only gives its start
    /// as a lower bound of the next due time, beside the earliest boot-clock due time the
    /// last reading of them found ([`LaterBuckets`]).
    pub(crate) fn recover_delayed(&self, r: &mut RecoverReport) -> Result<()> {
        let now = self.clock.wall_ns();
        let boot_now = self.clock.boot_ns().max(1);
        let width = self.ident.delayed_bucket_ns;
        let current = now / width;
        let read_later = self.read_later_buckets(boot_now);
        let mut buckets: Vec<u64> = Vec::new();
        let mut foreign = 0;
        let listed = self
            .list_held(self.dirs.delayed.as_fd(), DELAYED_DIR, |fd| {
                buckets.clear();
                foreign = 0;
                self.sys.read_dir(fd, |name, _, t| {
                    match name.and_then(parse_bucket) {
                        // A file or symlink named like a bucket is foreign, never a reason
                        // to stop.
                        Some(b) if matches!(t, EntryType::Dir | EntryType::Unknown) => {
                            buckets.push(b)
                        }
                        _ => foreign += 1,
                    }
                })
            })
            .map_err(|e| {
                Cause::io(
                    Call::ReadDir,
                    e,
                    Outcome::NotDone,
                    Some(self.path(DELAYED_DIR)),
                )
            })?;
        r.foreign += foreign;
        if listed.is_none() {
            r.unreadable_dir(DELAYED_DIR.to_string());
            return Ok(());
        }
        buckets.sort_unstable();
        let mut later_due = u64::MAX;
        for b in buckets {
            if b > current && !read_later {
                r.next_due_wall_ns = min_opt(r.next_due_wall_ns, b.saturating_mul(width));
                continue;
            }
            if let Err(e) = self.recover_bucket(b, now, current, r, &mut later_due) {
                r.fail(e);
            }
        }
        let later = &self.later_buckets;
        if read_later {
            later.next_due_boot_ns.store(later_due, Relaxed);
            later.read_at.store(boot_now, Relaxed);
        } else {
            let due = later.next_due_boot_ns.load(Relaxed);
            if due != u64::MAX {
                let wall = now.saturating_add(due.saturating_sub(boot_now));
                r.next_due_wall_ns = min_opt(r.next_due_wall_ns, wall);
            }
        }
        Ok(())
    }

    /// Move the due jobs of delayed bucket `b` to ready; remove the bucket once empty and a
    /// full width in the past. A job not yet due is read without checking its tag; every job
    /// moved is parsed in full. In a bucket later than `current`, the earliest boot-clock
    /// not-before of a job of this boot not yet due lowers `later_due` (ns).
    fn recover_bucket(
        &self,
        b: u64,
        now: u64,
        current: u64,
        r: &mut RecoverReport,
        later_due: &mut u64,
    ) -> Result<()> {
        let width = self.ident.delayed_bucket_ns;
        let bname = bucket_dir(b);
        let Some(from) = self.open_bucket(&bname, r)? else {
            return Ok(());
        };
        let ident = self.ident;
        let fits = |n: &JobName| {
            matches!(n.kind, Kind::Delayed { not_before_ns, .. } if not_before_ns / width == b)
                && ident.has_priority(n.priority)
        };
        let (boot, boot_now) = (self.clock.boot_id(), self.clock.boot_ns());
        let mut due = Vec::new();
        let mut entries = 0u32;
        self.sys
            .read_dir(from.dir.fd(), |name, _, t| {
                entries += 1;
                let Some(name) = name else {
                    return r.foreign += 1;
                };
                if let Ok((n, _)) = JobName::parse_untagged(name) {
                    if !delay_due(&n.kind, boot, boot_now, now) && fits(&n) {
                        let due = due_wall_ns(&n.kind, boot, boot_now, now);
                        r.next_due_wall_ns = min_opt(r.next_due_wall_ns, due);
                        if let Kind::Delayed { boot: Some(d), .. } = n.kind {
                            if b > current && d.boot_id == boot {
                                *later_due = (*later_due).min(d.not_before_boot_ns);
                            }
                        }
                        return;
                    }
                }
                match crate::disk::scan::classify(
                    &self.sys,
                    from.dir.fd(),
                    name,
                    self.ident.id,
                    t,
                    &fits,
                ) {
                    Ok(n) => due.push(n),
                    Err(_) => r.foreign += 1,
                }
            })
            .map_err(|e| {
                Cause::io(
                    Call::ReadDir,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&from.rel)),
                )
            })?;
        self.promote_due(&from, &due, r);
        // Remove buckets at least one full width in the past once empty; a nack or delayed
        // enqueue only ever targets the current bucket or later ones.
        if entries as usize == due.len() && b + 1 < current {
            match self.sys.rmdir(self.dirs.delayed.as_fd(), &bname) {
                Ok(()) => r.buckets_removed += 1,
                Err(e) => log::debug!("keeping delayed/{bname}: {e}"),
            }
        }
        Ok(())
    }

    /// Move delayed jobs `due`, listed in bucket `from`, to the ready directory of each one's
    /// own priority and shard, settling a split promotion first; each move that fails is
    /// counted in `r`, and the others are still made.
    fn promote_due(&self, from: &Place<'_>, due: &[JobName], r: &mut RecoverReport) {
        for n in due {
            // A promotion a crash split in two (`ops/split.rs`): the ready name stands.
            match self.settle_split(from, n) {
                Ok(true) => {
                    r.split += 1;
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    r.fail(e);
                    continue;
                }
            }
            // Back to the ready directory of its own priority and shard.
            let to = match self.place_ready_new(self.ident.slot_of(n)) {
                Ok(to) => to,
                Err(e) => {
                    r.fail(e);
                    continue;
                }
            };
            match self.move_job(from, n, &to, &n.next(Kind::Ready, false), Op::Due) {
                Ok(()) => r.due += 1,
                Err(e) if e.is_lease_lost() => {}
                Err(e) => r.fail(e.into()),
            }
        }
    }

    /// Open delayed bucket `bname`; `None` when it is gone (another recoverer removed it) or
    /// not a directory (counted foreign).
    fn open_bucket(&self, bname: &str, r: &mut RecoverReport) -> Result<Option<Place<'_>>> {
        let rel = crate::disk::layout::dir_rel(format_args!("{DELAYED_DIR}/{bname}"));
        match self.sys.open_dir_beneath(self.dirs.delayed.as_fd(), bname) {
            Ok(fd) => Ok(Some(Place {
                dir: DirRef::Opened(fd),
                rel,
                state: State::Delayed,
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::NOTDIR | Errno::LOOP) => {
                r.foreign += 1;
                Ok(None)
            }
            Err(Errno::ACCESS | Errno::PERM) => {
                r.unreadable_dir(rel.as_str().to_owned());
                Ok(None)
            }
            Err(e) => Err(Cause::io(
                Call::Open,
                e,
                Outcome::NotDone,
                Some(self.path(&rel)),
            )),
        }
    }

    /// Remove temp files (`<boot32>.<pid8>.<rand32>.tmp`, and open-time probes) whose writer
    /// is gone: another boot, a pid that no longer exists, or a file over [`TEMP_UNHELD_NS`]
    /// old that no one holds an `flock` on (its pid alive here is another process: the
    /// writer ran in another pid namespace, a container sharing the queue, or its pid was
    /// reused). On btrfs every enqueue goes through `tmp/`, so a producer killed there
    /// leaves its temp file for this to remove.
    fn recover_tmp(&self, r: &mut RecoverReport) -> Result<()> {
        let boot = self.clock.boot_id();
        let now = self.clock.wall_ns();
        let mut foreign = 0;
        let listed = self
            .list_held(self.dirs.tmp.as_fd(), TMP_DIR, |fd| {
                let mut dead = Vec::new();
                self.sys.read_dir(fd, |name, _, _| {
                    let Some(name) = name else {
                        return foreign += 1;
                    };
                    let Some(t) = crate::disk::name::TempName::parse(name) else {
                        return foreign += 1;
                    };
                    // Of this boot, its pid alive here, and held by its writer or changed in
                    // the last second (a writer locks its file at once). A pid alone may be
                    // another process: the writer's in another pid namespace, or reused.
                    let alive = t.boot_id == boot
                        && rustix::process::Pid::from_raw(t.pid as i32).is_some_and(|pid| {
                            rustix::process::test_kill_process(pid) != Err(Errno::SRCH)
                        })
                        && (self.sys.temp_held(fd, name)
                            || self
                                .sys
                                .stat_nofollow(fd, name)
                                .is_ok_and(|m| now.saturating_sub(m.ctime_ns) < TEMP_UNHELD_NS));
                    if !alive {
                        dead.push(name.to_string());
                    }
                })?;
                Ok(dead)
            })
            .map_err(|e| Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.path(TMP_DIR))))?;
        r.foreign += foreign;
        let Some(dead) = listed else {
            r.unreadable_dir(TMP_DIR.to_string());
            return Ok(());
        };
        for name in dead {
            match self.sys.unlink(self.dirs.tmp.as_fd(), &name) {
                Ok(()) => r.temp_removed += 1,
                Err(Errno::NOENT) => {}
                // A directory (or an entry we may not remove) named like a temp file is
                // foreign: reported by fsck, never a reason to stop recovering.
                Err(Errno::ISDIR | Errno::PERM | Errno::ACCESS) => r.foreign += 1,
                Err(e) => r.fail(Cause::io(
                    Call::Unlink,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&format!("{TMP_DIR}/{name}"))),
                )),
            }
        }
        Ok(())
    }
}

/// The one rule for a batch that failed part-way: indeterminate once anything was changed.
pub(crate) fn partial(e: crate::Cause, r: &RecoverReport) -> crate::Cause {
    if r.moved() + r.temp_removed + r.buckets_removed > 0 {
        e.with_outcome(Outcome::Indeterminate)
    } else {
        e
    }
}
