//! The verifier's invariants, shared by the kill soak, the block-replay rig and the power-cut
//! rig. Input: a queue directory after a crash, and the marks of the operations that returned
//! done before it (`enq <id>`, `claim <id> <attempt>`, `ack <id>`, `nack <id>`, `fail <id>`).
//!
//! 1. every enqueue that returned done exists in exactly one state, and its file verifies;
//! 2. every ack that returned done has its receipt, and the job is nowhere else;
//! 3. no job is in two states (counting raw directory entries, not just parsed ones);
//! 4. no corrupt, torn or foreign file outside `dead/` (dead jobs with reason `corrupt` are
//!    allowed only for jobs whose enqueue was never marked done) and `quarantine/`;
//! 5. attempt counts never go down: a claim marked done with attempt `a` leaves attempt >= a;
//! 6. recovery is idempotent: run it twice (the second moves nothing); crash it part-way
//!    (a simulated stop after its Nth rename) and run it again: the invariants still hold.

use crate::marks::Mark;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use steadq::sys::{Call, Fault, FaultAction, FaultPlan};
use steadq::{JobId, Kind, Options, Queue, Reason, State};

/// What the marks say happened.
#[derive(Debug, Default)]
pub struct Expect {
    /// Enqueues that returned done.
    pub enqueued: HashSet<JobId>,
    /// Acks that returned done.
    pub acked: HashSet<JobId>,
    /// Highest attempt of a claim that returned done, per job.
    pub claimed: HashMap<JobId, u32>,
}

impl Expect {
    /// Read marks (`enq ID`, `ack ID`, `claim ID ATTEMPT`; other ops are ignored).
    pub fn from_marks(marks: &[Mark]) -> Result<Expect, String> {
        let mut e = Expect::default();
        for m in marks {
            let mut f = m.arg.split_whitespace();
            let id = || -> Result<JobId, String> {
                Err(format!("mark {}: bad job id in {:?}", m.seq, m.arg))
            };
            let parse_id = |s: Option<&str>| s.and_then(JobId::parse).map_or_else(id, Ok);
            match m.op.as_str() {
                "enq" => {
                    e.enqueued.insert(parse_id(f.next())?);
                }
                "ack" => {
                    e.acked.insert(parse_id(f.next())?);
                }
                "claim" => {
                    let j = parse_id(f.next())?;
                    let a: u32 = f
                        .next()
                        .and_then(|a| a.parse().ok())
                        .ok_or(format!("mark {}: bad attempt", m.seq))?;
                    let slot = e.claimed.entry(j).or_default();
                    *slot = (*slot).max(a);
                }
                _ => {}
            }
        }
        Ok(e)
    }
}

/// The outcome of one verification.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Every broken invariant, one line each.
    pub violations: Vec<String>,
    /// Jobs found after recovery.
    pub jobs: usize,
    /// Jobs recovery moved.
    pub recovered: u32,
}

fn open(dir: &Path, faults: Option<std::sync::Arc<FaultPlan>>) -> Result<Queue, String> {
    let o = Options {
        faults,
        ..Options::default()
    };
    match Queue::open_with(dir, o.clone()) {
        // A crash during create: completing it is what `steadq init` (or the systemd unit's
        // ExecStartPre) does after a reboot.
        Err(e) if *e.kind() == steadq::ErrorKind::Incomplete => {
            Queue::create(dir, o).map_err(|e| format!("completing create: {e}"))
        }
        r => r.map_err(|e| format!("open: {e}")),
    }
}

/// Check the invariants on the queue at `dir` (which may be modified: recovery runs on it).
/// `crash_recovery_at`: first stop a recovery after its Nth rename, as a crash would.
pub fn verify(
    dir: &Path,
    expect: &Expect,
    crash_recovery_at: Option<u32>,
) -> Result<Verdict, String> {
    let mut v = Verdict::default();
    if let Some(n) = crash_recovery_at {
        let plan = FaultPlan::new(vec![Fault {
            call: Call::Rename,
            nth: n,
            action: FaultAction::StopAfter,
        }]);
        if let Ok(q) = open(dir, Some(plan)) {
            let _ = q.recover(); // stopped part-way: its result is not the point
        }
    }
    // A queue that cannot be opened after a crash (a torn identity file, say) is a violation,
    // not a failure of the verifier.
    let q = match open(dir, None) {
        Ok(q) => q,
        Err(e) => {
            v.violations
                .push(format!("queue unusable after the crash: {e}"));
            return Ok(v);
        }
    };
    // A crash state's leases belong to another boot (or this boot's dead processes): make all
    // of them expire now.
    q.clock().shift_boot(1 << 50);
    // And every delayed job due, so that the first pass leaves nothing for the second.
    q.clock().shift_wall(1 << 50);
    let r = q.recover().map_err(|e| format!("recover: {e}"))?;
    v.recovered = r.moved();
    let again = q.recover().map_err(|e| format!("second recover: {e}"))?;
    if again.moved() != 0 {
        v.violations.push(format!(
            "recovery not idempotent: the second pass moved {} jobs",
            again.moved()
        ));
    }
    let fsck = q.fsck(false).map_err(|e| format!("fsck: {e}"))?;
    for p in &fsck.problems {
        if !p.path.starts_with("quarantine/") {
            v.violations.push(format!("fsck: {p}"));
        }
    }
    let all = q.list(None).map_err(|e| format!("list: {e}"))?;
    v.jobs = all.len();
    let mut by_id: HashMap<JobId, Vec<&steadq::Listed>> = HashMap::new();
    for l in &all {
        by_id.entry(l.name.id).or_default().push(l);
    }
    for (id, ls) in &by_id {
        if ls.len() > 1 {
            let states: Vec<String> = ls.iter().map(|l| l.rel_path(q.id())).collect();
            v.violations
                .push(format!("job {id} in {} places: {states:?}", ls.len()));
        }
        if ls.iter().any(|l| l.state == State::Leased) {
            v.violations
                .push(format!("job {id} still leased after recovery"));
        }
    }
    for id in &expect.enqueued {
        match by_id.get(id).map(|v| v.as_slice()) {
            None | Some([]) => {
                if !expect.acked.contains(id) || !was_compacted(dir, id) {
                    v.violations.push(format!(
                        "enqueue of {id} returned done, but the job is gone"
                    ));
                }
            }
            Some([l, ..]) => {
                if matches!(l.name.kind, Kind::Dead { reason } if reason == Reason::CORRUPT) {
                    v.violations.push(format!(
                        "enqueue of {id} returned done, but its file is corrupt ({})",
                        l.rel_path(q.id())
                    ));
                } else if let Err(e) = q.read_job(l) {
                    v.violations.push(format!("job {id}: {e}"));
                }
            }
        }
    }
    for id in &expect.acked {
        match by_id.get(id).map(|v| v.as_slice()) {
            Some([l]) if l.state == State::Acked => {}
            other => v.violations.push(format!(
                "ack of {id} returned done, but the job is {:?}",
                other.map(|ls| ls.iter().map(|l| l.state).collect::<Vec<_>>())
            )),
        }
    }
    for (id, &a) in &expect.claimed {
        if let Some([l, ..]) = by_id.get(id).map(|v| v.as_slice()) {
            // Requeue (dead -> ready) is the only op that lowers attempts; workloads do not use it.
            if l.name.attempt < a {
                v.violations.push(format!(
                    "job {id}: attempt went down from {a} to {}",
                    l.name.attempt
                ));
            }
        }
    }
    Ok(v)
}

fn was_compacted(dir: &Path, id: &JobId) -> bool {
    std::fs::read_to_string(dir.join(steadq::EVIDENCE_FILE)).is_ok_and(|s| {
        s.lines()
            .any(|l| l.split(' ').nth(1) == Some(&id.to_string()))
    })
}
