//! The fault plan: which calls through [`Sys`](super::sys::Sys) fail, are skipped, or stop
//! everything after them (a simulated crash), and the count and trace of every call made.
//! Tests and the crash lab use it; a `Sys` without a plan pays one branch per call.

use super::barrier::Barrier;
use super::sys::{Call, Errno};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The most calls a [`FaultPlan`] keeps in its trace (64 Ki); later calls are counted only.
pub const TRACE_MAX: usize = 1 << 16;

/// What a [`Fault`] does to the call it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// The call is not made; it returns this errno.
    Fail(Errno),
    /// The call is made; afterwards every call fails with `ESHUTDOWN` (a simulated crash).
    StopAfter,
    /// The call is not made but reports success: a lying barrier. Only for `Fsync`,
    /// `FsyncDir`, `Syncfs` and `WriteOut` (elsewhere it acts as no fault); the crash lab's negative
    /// control uses it to prove that a skipped barrier is caught.
    Skip,
}

/// One injected fault: the `nth` (1-based) call of kind `call` gets `action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The kind of call to match.
    pub call: Call,
    /// 1-based index among calls of that kind made through this plan; 0 matches every call.
    pub nth: u32,
    /// What happens to it.
    pub action: FaultAction,
}

/// A fault-injection plan shared by one or more [`Sys`](super::sys::Sys) values. With no faults it only counts
/// calls, which is how a test learns how many calls of each kind an operation makes.
#[derive(Debug, Default)]
pub struct FaultPlan {
    faults: Vec<Fault>,
    counts: [AtomicU32; Call::ALL.len()],
    pub(super) stopped: AtomicBool,
    fired: AtomicBool,
    disarmed: AtomicBool,
    trace: Mutex<Vec<Call>>,
    pub(super) fs_magic: std::sync::atomic::AtomicI64,
    /// One bit per [`Barrier`] to skip, whether or not the plan is armed.
    skip_barriers: AtomicU64,
    /// How many times each skipped barrier was asked for (and not made).
    skipped: Mutex<std::collections::HashMap<Barrier, u32>>,
}

pub(super) enum Decision {
    Proceed,
    ProceedThenStop,
    Fail(Errno),
    Skip,
}

impl FaultPlan {
    /// A plan that injects `faults` (and counts every call).
    pub fn new(faults: Vec<Fault>) -> Arc<Self> {
        Arc::new(FaultPlan {
            faults,
            ..Default::default()
        })
    }

    /// A plan whose faults stay inactive (calls are still counted) until [`FaultPlan::arm`]:
    /// set-up steps (open, claim) then cannot trip them.
    pub fn disarmed(faults: Vec<Fault>) -> Arc<Self> {
        let p = FaultPlan {
            faults,
            ..Default::default()
        };
        p.disarmed.store(true, Ordering::SeqCst);
        Arc::new(p)
    }

    /// Zero the counters and activate the faults: `nth` now counts from here.
    pub fn arm(&self) {
        self.reset_counts();
        self.disarmed.store(false, Ordering::SeqCst);
    }

    /// Stop injecting: every later call proceeds (and is still counted).
    pub fn disarm(&self) {
        self.disarmed.store(true, Ordering::SeqCst);
    }

    /// Calls of `call` kind made so far.
    pub fn count(&self, call: Call) -> u32 {
        self.counts[call.index()].load(Ordering::SeqCst)
    }

    /// Whether a fault of this plan has fired.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Whether a `StopAfter` fault has fired (every later call fails with `ESHUTDOWN`).
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// The sequence of calls made so far, oldest first.
    pub fn trace(&self) -> Vec<Call> {
        self.trace.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Make every `fstatfs(2)` through this plan report filesystem magic `magic` (`f_type`,
    /// `linux/magic.h`) instead of the real one: for tests of a filesystem that cannot be
    /// mounted where they run (NFS, `0x6969`). 0 reports the real one again.
    pub fn pretend_fs_magic(&self, magic: i64) {
        self.fs_magic.store(magic, Ordering::SeqCst);
    }

    /// Remove barrier `b` for the rest of this plan's life: every call at that site reports
    /// success without being made ([`FaultAction::Skip`] for one named site, whatever the
    /// call kind, armed or not). The crash rigs' `--break NAME`.
    pub fn skip_barrier(&self, b: Barrier) {
        self.skip_barriers
            .fetch_or(1 << b.index(), Ordering::SeqCst);
    }

    /// How many times barrier `b` was asked for and skipped ([`FaultPlan::skip_barrier`]).
    pub fn skipped(&self, b: Barrier) -> u32 {
        self.skipped
            .lock()
            .map_or(0, |m| m.get(&b).copied().unwrap_or(0))
    }

    /// Whether barrier `b` is to be skipped; counts the skip.
    pub(super) fn skips(&self, b: Barrier) -> bool {
        let on = self.skip_barriers.load(Ordering::SeqCst) & (1 << b.index()) != 0;
        if on {
            if let Ok(mut m) = self.skipped.lock() {
                *m.entry(b).or_default() += 1;
            }
        }
        on
    }

    /// Zero the counters and the trace (the faults stay armed relative to the new zero).
    pub fn reset_counts(&self) {
        for c in &self.counts {
            c.store(0, Ordering::SeqCst);
        }
        if let Ok(mut t) = self.trace.lock() {
            t.clear();
        }
    }

    pub(super) fn decide(&self, call: Call) -> Decision {
        if self.stopped.load(Ordering::SeqCst) {
            return Decision::Fail(Errno::SHUTDOWN);
        }
        let n = self.counts[call.index()].fetch_add(1, Ordering::SeqCst) + 1;
        if let Ok(mut t) = self.trace.lock() {
            // Bounded: a long-lived plan (a soak child, a crash-lab agent) must not grow
            // without limit; the first TRACE_MAX calls are what tests look at.
            if t.len() < TRACE_MAX {
                t.push(call);
            }
        }
        if self.disarmed.load(Ordering::SeqCst) {
            return Decision::Proceed;
        }
        for f in &self.faults {
            if f.call == call && (f.nth == n || f.nth == 0) {
                self.fired.store(true, Ordering::SeqCst);
                return match f.action {
                    FaultAction::Fail(e) => Decision::Fail(e),
                    FaultAction::StopAfter => Decision::ProceedThenStop,
                    FaultAction::Skip => Decision::Skip,
                };
            }
        }
        Decision::Proceed
    }
}

#[cfg(test)]
mod trace_tests {
    use super::*;

    #[test]
    fn a_skipped_barrier_is_counted_and_no_other() {
        let plan = FaultPlan::new(Vec::new());
        plan.skip_barrier(Barrier::AckDest);
        assert!(plan.skips(Barrier::AckDest));
        assert!(!plan.skips(Barrier::AckSource));
        assert_eq!(plan.skipped(Barrier::AckDest), 1);
        assert_eq!(plan.skipped(Barrier::AckSource), 0);
    }

    #[test]
    fn the_trace_is_bounded_while_counts_go_on() {
        let plan = FaultPlan::new(Vec::new());
        for _ in 0..TRACE_MAX + 5 {
            let _ = plan.decide(Call::Open);
        }
        assert_eq!(plan.trace().len(), TRACE_MAX);
        assert_eq!(plan.count(Call::Open), (TRACE_MAX + 5) as u32);
    }
}
