//! Refusal memory: jobs this user may not move (`EPERM`, `EACCES`: a sticky shard directory
//! and another user's file), remembered per handle for [`UNREADABLE_RECHECK`] so that
//! listings pass them over, and warned about a few at a time.

use crate::disk::sys::Errno;
use crate::error::{Cause, Outcome};
use crate::queue::Queue;
use std::time::Duration;

/// How long claims skip a ready shard this user cannot read, or a job it may not move,
/// before trying it again; a waiting claim whose pass failed a move tries again after it too.
pub(crate) const UNREADABLE_RECHECK: Duration = Duration::from_secs(10);

/// How many jobs this user may not move or open a handle names in warnings
/// ([`Queue::warn_refused`]): 3.
const REFUSED_WARNINGS: u32 = 3;

/// Whether a claim failed only because the jobs it found were all jobs this user may not
/// move (see [`Queue::claim_for`]): not done, `EPERM` or `EACCES`.
pub(crate) fn only_refused(e: &Cause) -> bool {
    refused(e) && e.outcome() == Outcome::NotDone
}

/// Whether a not-done move failed for lack of permission on the job's directory.
pub(super) fn refused(e: &Cause) -> bool {
    let perm = |n: Errno| {
        e.errno()
            .is_some_and(|x| x.raw_os_error() == n.raw_os_error())
    };
    perm(Errno::PERM) || perm(Errno::ACCESS)
}

impl Queue {
    /// Remember job `id`, which a claim could not move (`e`), for [`UNREADABLE_RECHECK`]:
    /// listings pass it over until then.
    pub(super) fn remember_refused(&self, id: crate::disk::name::JobId, e: &Cause) {
        let until = self.clock.boot_ns() + UNREADABLE_RECHECK.as_nanos() as u64;
        let mut r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        r.retain(|x| x.0 != id.0);
        if r.len() >= 4096 {
            r.remove(0);
        }
        r.push((id.0, until, e.clone()));
    }

    /// The jobs remembered as refused and not lapsed, `(id, until boot ns)` sorted by id
    /// (lapsed ones are dropped).
    pub(super) fn refused_ids(&self) -> Vec<(u128, u64)> {
        let mut r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_empty() {
            return Vec::new();
        }
        let now = self.clock.boot_ns();
        r.retain(|x| x.1 > now);
        let mut ids: Vec<(u128, u64)> = r.iter().map(|x| (x.0, x.1)).collect();
        ids.sort_unstable();
        ids
    }

    /// Whether job `id` is remembered as refused and its refusal has not lapsed.
    pub(super) fn is_refused(&self, id: crate::disk::name::JobId) -> bool {
        let r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_empty() {
            return false;
        }
        let now = self.clock.boot_ns();
        r.iter().any(|x| x.0 == id.0 && x.1 > now)
    }

    /// The error of a job remembered as refused and not lapsed, if any.
    pub(super) fn live_refusal(&self) -> Option<Cause> {
        let r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.boot_ns();
        // A job passed over for its second name (`EMLINK`, see `take_leased`) is not a job
        // this user may not move: it makes no claim fail.
        let mlink = |e: &Cause| {
            e.errno()
                .is_some_and(|x| x.raw_os_error() == Errno::MLINK.raw_os_error())
        };
        r.iter()
            .find(|x| x.1 > now && !mlink(&x.2))
            .map(|x| x.2.clone())
    }

    /// Log job `id`, which a claim could not move or open for lack of permission (`e`), once
    /// per job per handle, and by name for the first [`REFUSED_WARNINGS`] jobs only: one `claim` beside
    /// 200 such jobs printed 200 warnings. Past that, one line says so and the rest go to
    /// the debug level.
    pub(super) fn warn_refused(&self, id: crate::disk::name::JobId, e: &Cause) {
        use std::sync::atomic::Ordering::Relaxed;
        // By job id: the path changes each time a claim gives the job back.
        let key = format!("job {id}");
        let mut warned = self.warned_blocks.lock().unwrap_or_else(|p| p.into_inner());
        if warned.contains(&key) || warned.len() >= 256 {
            return;
        }
        warned.push(key);
        match self.warned_refused.fetch_add(1, Relaxed) {
            n if n < REFUSED_WARNINGS => {
                log::warn!("{e}; this worker passes it over (fsck and status still count it)")
            }
            REFUSED_WARNINGS => log::warn!(
                "more jobs this user may not move or open are passed over (named at debug \
                 level: RUST_LOG=debug)"
            ),
            _ => log::debug!("{e}; this worker passes it over"),
        }
    }
}
