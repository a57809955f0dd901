//! Recovery: expired leases back to ready (or dead), due delayed jobs to ready, abandoned temp
//! files removed.
//!
//! A lease is expired when its boot id differs from this boot's (at once: `CLOCK_BOOTTIME`
//! restarted) or when `CLOCK_BOOTTIME` is past its `b` deadline. Every move starts from the
//! exact name found, so recovery is safe while workers run and when several processes recover
//! at once: of two recoverers one rename wins, the other sees `ENOENT` and skips. Running it
//! twice in a row moves nothing the second time.

use crate::enqueue::DirRef;
use crate::error::{Error, Outcome, Result};
use crate::name::{shard_name, Kind, Reason};
use crate::queue::Queue;
use crate::scan::scan;
use crate::state::{Op, State};
use crate::sys::{Call, EntryType, Errno};
use crate::transition::Place;
use std::os::fd::AsFd;

/// What one recovery pass did and saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoverReport {
    /// Expired leases moved back to ready.
    pub expired: u32,
    /// Expired leases with no attempt left, moved to dead.
    pub expired_dead: u32,
    /// Delayed jobs that were due, moved to ready.
    pub due: u32,
    /// Abandoned temp files removed from `tmp/`.
    pub temp_removed: u32,
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
}

impl RecoverReport {
    /// Jobs moved in all.
    pub fn moved(&self) -> u32 {
        self.expired + self.expired_dead + self.due
    }
}

fn min_opt(a: Option<u64>, b: u64) -> Option<u64> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Queue {
    /// One recovery pass over the whole queue.
    ///
    /// # Errors
    /// The first failure stops the pass: [`crate::ErrorKind::Io`] naming the path. Not done
    /// if the pass had moved nothing yet; indeterminate if it had (the moves before the
    /// failure are done) or if the failing move itself is indeterminate. A move that loses a
    /// race (`ENOENT`) is not an error.
    pub fn recover(&self) -> Result<RecoverReport> {
        let mut r = RecoverReport::default();
        let res = self
            .recover_leases(&mut r)
            .and_then(|()| self.recover_delayed(&mut r))
            .and_then(|()| self.recover_tmp(&mut r));
        match res {
            Ok(()) => Ok(r),
            // A pass that already moved something is partial: the pass as a whole happened in
            // part, which is neither done nor not done.
            Err(e) if r.moved() + r.temp_removed + r.buckets_removed > 0 => {
                Err(e.with_outcome(Outcome::Indeterminate))
            }
            Err(e) => Err(e),
        }
    }

    fn recover_leases(&self, r: &mut RecoverReport) -> Result<()> {
        let (boot, now) = (self.clock.boot_id(), self.clock.boot_ns());
        for s in 0..self.ident.shards {
            let mut expired = Vec::new();
            let shards = self.ident.shards;
            scan(
                &self.sys,
                self.dirs.ready[s as usize].as_fd(),
                self.ident.id,
                |n| crate::scan::fits_ready_shard(n, s, shards),
                |_, e| match e {
                    Ok(n) => {
                        if let Kind::Leased(l) = n.kind {
                            if l.boot_id != boot || now >= l.boot_deadline_ns {
                                expired.push(n);
                            } else {
                                r.live_leases += 1;
                                r.next_expiry_boot_ns =
                                    min_opt(r.next_expiry_boot_ns, l.boot_deadline_ns);
                            }
                        }
                    }
                    Err(_) => r.foreign += 1,
                },
            )
            .map_err(|e| {
                Error::io(
                    Call::ReadDir,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&format!("ready/{}", shard_name(s)))),
                )
            })?;
            let from = self.place_ready(s, State::Leased);
            for n in expired {
                let res = if n.exhausted() {
                    let dead = self.place_dead()?;
                    self.move_job(
                        &from,
                        &n,
                        &dead,
                        &n.next(
                            Kind::Dead {
                                reason: Reason::EXHAUSTED,
                            },
                            false,
                        ),
                        Op::ExpireExhausted,
                    )
                    .map(|()| r.expired_dead += 1)
                } else {
                    let to = self.place_ready(s, State::Ready);
                    self.move_job(&from, &n, &to, &n.next(Kind::Ready, false), Op::Expire)
                        .map(|()| r.expired += 1)
                };
                match res {
                    Ok(()) => log::info!(
                        "recovered expired lease of job {} (attempt {}/{})",
                        n.id,
                        n.attempt,
                        n.max_attempts
                    ),
                    Err(e) if e.is_lease_lost() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn recover_delayed(&self, r: &mut RecoverReport) -> Result<()> {
        let now = self.clock.wall_ns();
        let width = self.ident.delayed_bucket_ns;
        let current = now / width;
        let mut buckets: Vec<u64> = Vec::new();
        self.sys
            .read_dir(self.dirs.delayed.as_fd(), |name, _, t| {
                match name.and_then(|n| crate::name::parse_hex(n.as_bytes(), 16)) {
                    // A file or symlink named like a bucket is foreign, never a reason to stop.
                    Some(b) if matches!(t, EntryType::Dir | EntryType::Unknown) => {
                        buckets.push(b as u64)
                    }
                    _ => r.foreign += 1,
                }
            })
            .map_err(|e| {
                Error::io(
                    Call::ReadDir,
                    e,
                    Outcome::NotDone,
                    Some(self.path("delayed")),
                )
            })?;
        buckets.sort_unstable();
        for b in buckets {
            if b > current {
                r.next_due_wall_ns = min_opt(r.next_due_wall_ns, b.saturating_mul(width));
                continue;
            }
            let bname = format!("{b:016x}");
            let from = match self.sys.open_dir_beneath(self.dirs.delayed.as_fd(), &bname) {
                Ok(fd) => Place {
                    dir: DirRef::Opened(fd),
                    rel: format!("delayed/{bname}"),
                    state: State::Delayed,
                },
                // Removed meanwhile by another recoverer: nothing to do.
                Err(Errno::NOENT) => continue,
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    r.foreign += 1;
                    continue;
                }
                Err(e) => {
                    return Err(Error::io(
                        Call::Open,
                        e,
                        Outcome::NotDone,
                        Some(self.path(&format!("delayed/{bname}"))),
                    ))
                }
            };
            let mut due = Vec::new();
            let mut entries = 0u32;
            scan(
                &self.sys,
                from.dir.fd(),
                self.ident.id,
                |n| matches!(n.kind, Kind::Delayed { not_before_ns } if not_before_ns / width == b),
                |_, e| {
                    entries += 1;
                    match e {
                        Ok(n) => match n.kind {
                            Kind::Delayed { not_before_ns } if not_before_ns <= now => due.push(n),
                            Kind::Delayed { not_before_ns } => {
                                r.next_due_wall_ns = min_opt(r.next_due_wall_ns, not_before_ns)
                            }
                            _ => {}
                        },
                        Err(_) => r.foreign += 1,
                    }
                },
            )
            .map_err(|e| {
                Error::io(
                    Call::ReadDir,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&from.rel)),
                )
            })?;
            for n in &due {
                let s = n.id.shard(self.ident.shards);
                let to = self.place_ready(s, State::Ready);
                match self.move_job(&from, n, &to, &n.next(Kind::Ready, false), Op::Due) {
                    Ok(()) => r.due += 1,
                    Err(e) if e.is_lease_lost() => {}
                    Err(e) => return Err(e),
                }
            }
            // Remove buckets at least one full width in the past once empty; a nack or delayed
            // enqueue only ever targets the current bucket or later ones.
            if entries as usize == due.len() && b + 1 < current {
                match self.sys.rmdir(self.dirs.delayed.as_fd(), &bname) {
                    Ok(()) => r.buckets_removed += 1,
                    Err(e) => log::debug!("keeping delayed/{bname}: {e}"),
                }
            }
        }
        Ok(())
    }

    /// Remove temp files (`<boot32>.<pid8>.<rand32>.tmp`, and open-time probes) whose writer
    /// is gone: another boot, or a pid that no longer exists.
    fn recover_tmp(&self, r: &mut RecoverReport) -> Result<()> {
        let boot = self.clock.boot_id();
        let mut dead = Vec::new();
        self.sys
            .read_dir(self.dirs.tmp.as_fd(), |name, _, _| {
                let Some(name) = name else {
                    return r.foreign += 1;
                };
                let mut f = name.split('.');
                let (Some(b), Some(p)) = (f.next(), f.next()) else {
                    return r.foreign += 1;
                };
                match (
                    crate::name::parse_hex(b.as_bytes(), 32),
                    crate::name::parse_hex(p.as_bytes(), 8),
                ) {
                    (Some(b), Some(p)) => {
                        let alive = b == boot
                            && rustix::process::Pid::from_raw(p as i32).is_some_and(|pid| {
                                rustix::process::test_kill_process(pid)
                                    != Err(rustix::io::Errno::SRCH)
                            });
                        if !alive {
                            dead.push(name.to_string());
                        }
                    }
                    _ => r.foreign += 1,
                }
            })
            .map_err(|e| Error::io(Call::ReadDir, e, Outcome::NotDone, Some(self.path("tmp"))))?;
        for name in dead {
            match self.sys.unlink(self.dirs.tmp.as_fd(), &name) {
                Ok(()) => r.temp_removed += 1,
                Err(Errno::NOENT) => {}
                // A directory (or an entry we may not remove) named like a temp file is
                // foreign: reported by fsck, never a reason to stop recovering.
                Err(Errno::ISDIR | Errno::PERM | Errno::ACCESS) => r.foreign += 1,
                Err(e) => {
                    return Err(Error::io(
                        Call::Unlink,
                        e,
                        Outcome::NotDone,
                        Some(self.path(&format!("tmp/{name}"))),
                    ))
                }
            }
        }
        Ok(())
    }
}
