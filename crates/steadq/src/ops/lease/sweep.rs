//! The claim's listing of one ready slot: its oldest ready jobs, after its expired leases
//! went back to ready (or to `dead/`), and the earliest deadline of a live lease left in it.

use super::claim::CLAIM_CANDIDATES;
use super::refusal::UNREADABLE_RECHECK;
use crate::disk::name::{JobName, Kind, Reason};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::ops::recover::RecoverReport;
use crate::queue::Queue;

impl Queue {
    /// List ready slot `s` (`ready/<ss>` or `prio/<l>/<ss>`): its oldest ready jobs, after
    /// moving its expired leases back to ready (or to dead when no attempt is left). A move
    /// that fails is logged and counted in `seen.failed`; the listing goes on.
    /// Also returns the earliest deadline (boot ns) of a live lease left in the slot.
    pub(crate) fn sweep_shard(
        &self,
        s: u16,
        seen: &mut RecoverReport,
    ) -> Result<(Vec<JobName>, Option<u64>)> {
        let (priority, shard) = self.ident.slot_parts(s);
        let at = crate::disk::scan::SlotScan {
            queue_id: self.ident.id,
            priority,
            shard,
            shards: self.ident.shards,
            boot: self.clock.boot_id(),
            now_ns: self.clock.boot_ns(),
            max_ready: CLAIM_CANDIDATES,
            refused: self.refused_ids(),
            full: self.full_groups_now(),
        };
        let listed = self.list_ready_shard(s, |dir| {
            crate::disk::scan::scan_ready_shard(&self.sys, dir, &at, |raw, f| {
                self.warn_foreign(s, raw, f)
            })
        });
        let scan = match listed {
            Ok(Some(scan)) => scan,
            // A level's slot not made yet: empty (its making is an event, `ops/levels.rs`).
            // Not a directory on its path (a file named `prio`): empty too, warned once.
            Err(Errno::NOENT | Errno::NOTDIR) => return Ok((Vec::new(), None)),
            Ok(None) => {
                seen.unreadable_dir(self.ident.slot_rel(s));
                return Ok(self.unreadable_shard(s, seen));
            }
            Err(e) => {
                let rel = self.ident.slot_rel(s);
                return Err(Cause::io(
                    Call::ReadDir,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&rel)),
                ));
            }
        };
        seen.live_leases += scan.live;
        seen.foreign += scan.foreign;
        if let Some(x) = scan.next_expiry_boot_ns {
            seen.next_expiry_boot_ns = Some(seen.next_expiry_boot_ns.map_or(x, |y| y.min(x)));
        }
        let mut ready = scan.ready;
        self.move_expired(s, scan.expired, &mut ready, seen);
        // A listing that kept only the oldest knows the slot is not emptied by claiming them:
        // never "known empty" after its last candidate (recheck time 0).
        let mut expiry = if scan.truncated {
            Some(0)
        } else {
            scan.next_expiry_boot_ns
        };
        if scan.refused != 0 {
            // Jobs passed over as refused: listed again when the first of their refusals
            // lapses, when a waiting claim wakes to try them again. At that lapse, not a
            // full UNREADABLE_RECHECK from this listing (one of `work --concurrency 3`'s
            // threads listing just before another's refusal lapsed waited 10 s more), and
            // at the lapse of this slot's jobs, not of any (a worker beside 400 refused
            // jobs then relisted every slot at each lapse: 1.5 cores).
            let recheck = self.clock.boot_ns() + UNREADABLE_RECHECK.as_nanos() as u64;
            let at = scan.refused_until.unwrap_or(recheck).min(recheck);
            expiry = Some(expiry.map_or(at, |x| x.min(at)));
            seen.next_expiry_boot_ns = Some(seen.next_expiry_boot_ns.map_or(at, |y| y.min(at)));
        }
        Ok((ready, expiry))
    }

    /// Move slot `s`'s expired leases `expired` back to ready (their new names pushed on
    /// `ready`) or to dead (no attempt left), settling a split lease first; each move that
    /// fails is counted in `seen`, and the others are still made.
    fn move_expired(
        &self,
        s: u16,
        expired: Vec<JobName>,
        ready: &mut Vec<JobName>,
        seen: &mut RecoverReport,
    ) {
        for n in expired {
            // A lease whose ack, nack or fail a crash split in two (`ops/split.rs`): the
            // newer name stands, the lease is gone.
            match self.settle_split(&self.place_ready(s, State::Leased), &n) {
                Ok(true) => {
                    seen.split += 1;
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    seen.fail(e);
                    continue;
                }
            }
            match self.expire_lease(s, &n) {
                Ok(Some(r)) => {
                    seen.expired += 1;
                    ready.push(r);
                }
                Ok(None) => seen.expired_dead += 1,
                Err(e) if e.is_lease_lost() => {}
                Err(e) => seen.fail(e),
            }
        }
    }

    /// Shard `s`, which this user cannot read (logged by `list_ready_shard`): no
    /// candidates, and known empty until a recheck [`UNREADABLE_RECHECK`] from now, or
    /// [`MAKING_RECHECK`](crate::ops::making::MAKING_RECHECK) when the refusal is a
    /// directory in its making ([`Queue::in_making`]), when a waiting claim wakes to try it
    /// again.
    fn unreadable_shard(&self, s: u16, seen: &mut RecoverReport) -> (Vec<JobName>, Option<u64>) {
        let wait = match self.in_making[s as usize].load(std::sync::atomic::Ordering::Relaxed) {
            true => crate::ops::making::MAKING_RECHECK,
            false => UNREADABLE_RECHECK,
        };
        let at = self.clock.boot_ns() + wait.as_nanos() as u64;
        seen.next_expiry_boot_ns = Some(seen.next_expiry_boot_ns.map_or(at, |y| y.min(at)));
        (Vec::new(), Some(at))
    }

    /// Move expired lease `n` of shard `s` back to ready (`Some(new name)`) or, with no
    /// attempt left, to dead (`None`).
    fn expire_lease(&self, s: u16, n: &JobName) -> Result<Option<JobName>> {
        let from = self.place_ready(s, State::Leased);
        let r = if n.exhausted() {
            let dead = self.place_dead()?;
            let to = n.next(
                Kind::Dead {
                    reason: Reason::EXHAUSTED,
                },
                false,
            );
            self.move_job(&from, n, &dead, &to, Op::ExpireExhausted)?;
            // Named, and counted as a claim's dead-lettering: `work --once` whose sweep did
            // this said nothing and exited 3 "no job ready".
            log::warn!(
                "job {}: lease expired with no attempt left (attempt {}/{}); dead-lettered (reason exhausted)",
                n.id,
                n.attempt,
                n.max_attempts
            );
            self.claim_dead
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            None
        } else {
            let to = n.next(Kind::Ready, false);
            self.move_job(
                &from,
                n,
                &self.place_ready(s, State::Ready),
                &to,
                Op::Expire,
            )?;
            Some(to)
        };
        log::info!(
            "recovered expired lease of job {} (attempt {}/{})",
            n.id,
            n.attempt,
            n.max_attempts
        );
        Ok(r)
    }

    /// Warn about a foreign entry in `ready/<s>/` once per handle, then at debug level
    /// (`status` counts them and `fsck` lists them).
    fn warn_foreign(&self, s: u16, raw: &str, f: crate::disk::scan::Foreign) {
        let p = self.path(&format!("{}/{raw}", self.ident.slot_rel(s)));
        if !self
            .warned_foreign
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            log::warn!(
                "{}: {f}; skipped (more are logged at debug level; run `steadq fsck`)",
                p.display()
            );
        } else {
            log::debug!("{}: {f}; skipped", p.display());
        }
    }
}
