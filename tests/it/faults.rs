//! The fault matrix: every mutating operation, every filesystem call inside it, every errno it
//! can meet, and a "stop" (simulated crash) right after each call. For each case the outcome
//! reported must be the true one, and after recovery the queue's invariants must hold.
//!
//! True outcome: `Ok` means the effect is visible; `NotDone` means it is not; `Indeterminate`
//! allows either. A fault that fired on an fsync must never end in `Ok`.

use crate::common::*;
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;
use steadq::sys::{Call, Errno, Fault, FaultAction, FaultPlan};
use steadq::*;

const SEC: i64 = 1_000_000_000;

thread_local! {
    /// Cases where an indeterminate enqueue's job id was checked against the directory, and
    /// where a lease handed back by a not-done settle was checked and settled again (per
    /// thread: each operation's test counts its own).
    static IDS_CHECKED: Cell<u32> = const { Cell::new(0) };
    static LEASES_BACK: Cell<u32> = const { Cell::new(0) };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    Enqueue,
    EnqueueNamed,
    EnqueueDelayed,
    EnqueueBatch,
    Claim,
    Renew,
    Ack,
    AckHeader,
    AckNone,
    Nack,
    NackExhausted,
    Fail,
    Release,
    RecoverExpired,
    RecoverDue,
    Requeue,
    Compact,
    /// An enqueue with an idempotency key (key entry first, then the job).
    EnqueueKeyed,
    /// An enqueue into a queue with capacity limits (limits file read, tally built).
    EnqueueCapped,
    /// An enqueue at priority 6 (into `prio/6/<ss>`, a `.p6` name).
    EnqueuePrio,
    /// A claim of a priority-6 job (the claim looks at every level from 7 down).
    ClaimPrio,
    /// The ack of a priority-6 job (from `prio/6/<ss>` to `receipts/<ss>`).
    AckPrio,
    /// The nack (with a delay) of a priority-6 job: its delayed name keeps `.p6`.
    NackPrio,
    /// A streamed enqueue (`enqueue_reader`) of [`STREAMED`] bytes: chunks written at offset
    /// 128, read back for the envelope digest, the header written last (`O_TMPFILE` route).
    EnqueueStream,
    /// The same through a named file in `tmp/` (unlinked when not done).
    EnqueueStreamNamed,
    /// A claim of a job of a group with a limit: its slot in `groups/<g>/` first.
    ClaimGroup,
    /// The ack of a job of a group with a limit: its slot freed after the rename.
    AckGroup,
    /// The renewal of a job of a group with a limit: its slot rewritten (a temp file
    /// swapped with it) before the rename.
    RenewGroup,
}

/// The group of the group cases, with a limit of 1.
const GROUP: &str = "ffmpeg";

fn is_group(op: Op) -> bool {
    matches!(op, Op::ClaimGroup | Op::AckGroup | Op::RenewGroup)
}

/// The payload of the streamed enqueues: three chunks, the last one short.
const STREAMED: usize = 2 * 64 * 1024 + 100;

fn streamed() -> Vec<u8> {
    (0..STREAMED).map(|i| (i * 7 % 251) as u8).collect()
}

/// The priority the `*Prio` operations use.
const PRIO: u8 = 6;

fn is_prio(op: Op) -> bool {
    matches!(
        op,
        Op::EnqueuePrio | Op::ClaimPrio | Op::AckPrio | Op::NackPrio
    )
}

const OPS: [Op; 28] = [
    Op::Enqueue,
    Op::EnqueueNamed,
    Op::EnqueueDelayed,
    Op::EnqueueBatch,
    Op::Claim,
    Op::Renew,
    Op::Ack,
    Op::AckHeader,
    Op::AckNone,
    Op::Nack,
    Op::NackExhausted,
    Op::Fail,
    Op::Release,
    Op::RecoverExpired,
    Op::RecoverDue,
    Op::Requeue,
    Op::Compact,
    Op::EnqueueKeyed,
    Op::EnqueueCapped,
    Op::EnqueuePrio,
    Op::ClaimPrio,
    Op::AckPrio,
    Op::NackPrio,
    Op::EnqueueStream,
    Op::EnqueueStreamNamed,
    Op::ClaimGroup,
    Op::AckGroup,
    Op::RenewGroup,
];

fn keyed() -> EnqueueOptions {
    EnqueueOptions {
        key: Key::new("fault-key"),
        ..Default::default()
    }
}

/// "Nothing moved" where the operation itself says `Ok` (no job to claim, a pass that moved
/// nothing): the "not done" of the move under test.
fn nothing() -> Error {
    Error::NotDone(Cause::new(ErrorKind::NoSuchJob, None))
}

/// A settling call's result as an `Error`, keeping a lease it handed back (not done).
fn settled<T>(r: Result<T, SettleError>, back: &mut Option<Lease>) -> Result<(), Error> {
    match r {
        Ok(_) => Ok(()),
        Err(SettleError::NotDone { lease, error }) => {
            *back = Some(*lease);
            Err(Error::NotDone(error))
        }
        Err(e) => Err(e.into()),
    }
}

/// Run `op` once against a fresh queue with `faults`; return (result, did-it-happen, plan).
/// Each operation's own outcome type is checked against the directory here (an indeterminate
/// enqueue names the only job that may exist; a not-done settle hands back a lease that still
/// holds the job and settles it once the fault is gone), then folded into an `Error`.
fn run(op: Op, faults: Vec<Fault>) -> (Result<(), Error>, bool, Arc<FaultPlan>, TempDir) {
    let d = TempDir::new("fault");
    let receipts = match op {
        Op::AckHeader => ReceiptPolicy::Header,
        Op::AckNone => ReceiptPolicy::None,
        _ => ReceiptPolicy::Job,
    };
    let setup = Queue::create(
        d.path(),
        Options {
            receipts,
            ..opts(1)
        },
    )
    .unwrap();
    let max = if op == Op::NackExhausted { 1 } else { 5 };
    match op {
        Op::Enqueue
        | Op::EnqueueNamed
        | Op::EnqueueDelayed
        | Op::EnqueueBatch
        | Op::EnqueuePrio
        | Op::EnqueueStream
        | Op::EnqueueStreamNamed
        | Op::EnqueueKeyed => {}
        Op::EnqueueCapped => setup
            .set_limits(Limits {
                max_jobs: Some(5),
                max_bytes: Some(1 << 20),
            })
            .unwrap(),
        Op::RecoverDue => {
            setup
                .enqueue_with(
                    b"due",
                    &EnqueueOptions {
                        delay: Some(Duration::from_secs(5)),
                        ..Default::default()
                    },
                )
                .unwrap()
                .id();
        }
        Op::Requeue => {
            setup.enqueue(b"x").unwrap();
            setup
                .claim()
                .unwrap()
                .unwrap()
                .fail(Reason::FAILED)
                .unwrap();
        }
        Op::Compact => {
            setup.enqueue(b"x").unwrap();
            setup.claim().unwrap().unwrap().ack().unwrap();
        }
        _ => {
            setup
                .enqueue_with(
                    b"payload",
                    &EnqueueOptions {
                        max_attempts: Some(max),
                        priority: is_prio(op).then_some(PRIO),
                        group: is_group(op).then(|| GroupName::new(GROUP).unwrap()),
                        ..Default::default()
                    },
                )
                .unwrap()
                .id();
        }
    }
    if is_group(op) {
        let g = GroupName::new(GROUP).unwrap();
        setup.set_group_limit(&g, Some(1)).unwrap();
    }
    drop(setup);
    let plan = FaultPlan::disarmed(faults);
    let durability = if op == Op::EnqueueBatch {
        Durability::Batched
    } else {
        Durability::Strict
    };
    let o = Options {
        shards: 1,
        durability,
        faults: Some(plan.clone()),
        force_named_publish: matches!(op, Op::EnqueueNamed | Op::EnqueueStreamNamed),
        ..Options::default()
    };
    let q = Queue::open_with(d.path(), o).unwrap();
    let mut lease = match op {
        Op::Renew
        | Op::Ack
        | Op::AckHeader
        | Op::AckNone
        | Op::Nack
        | Op::NackExhausted
        | Op::Fail
        | Op::Release
        | Op::AckPrio
        | Op::NackPrio
        | Op::AckGroup
        | Op::RenewGroup
        | Op::RecoverExpired => Some(
            q.claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(1)),
                ..Default::default()
            })
            .unwrap()
            .unwrap(),
        ),
        _ => None,
    };
    if op == Op::RecoverExpired {
        drop(lease.take().unwrap().into_handle());
        q.clock().shift_boot(2 * SEC);
    }
    if op == Op::RecoverDue || op == Op::Compact {
        q.clock().shift_wall(10 * SEC);
        q.clock().shift_boot(10 * SEC);
    }
    plan.arm();
    // The job an indeterminate enqueue names; the lease a not-done settle hands back.
    let mut maybe_job: Option<JobId> = None;
    let mut back: Option<Lease> = None;
    let mut named = |r: Result<(), EnqueueError>| {
        r.map_err(|e| {
            maybe_job = e.id();
            Error::from(e)
        })
    };
    let res: Result<(), Error> = match op {
        Op::Enqueue | Op::EnqueueNamed => named(q.enqueue(b"payload").map(drop)),
        Op::EnqueueDelayed => named(
            q.enqueue_with(
                b"payload",
                &EnqueueOptions {
                    delay: Some(Duration::from_secs(60)),
                    ..Default::default()
                },
            )
            .map(steadq::Enqueued::id)
            .map(drop),
        ),
        Op::EnqueueBatch => q.enqueue_batch(&[b"one", b"two", b"three"]).map(drop),
        Op::EnqueueKeyed => named(
            q.enqueue_with(b"payload", &keyed())
                .map(|r| assert!(!r.is_duplicate())),
        ),
        Op::EnqueueCapped => named(q.enqueue(b"payload").map(drop)),
        Op::EnqueueStream | Op::EnqueueStreamNamed => named(
            q.enqueue_reader(&mut &streamed()[..], &EnqueueOptions::default())
                .map(|r| assert!(!r.is_duplicate())),
        ),
        Op::EnqueuePrio => named(
            q.enqueue_with(
                b"payload",
                &EnqueueOptions {
                    priority: Some(PRIO),
                    ..Default::default()
                },
            )
            .map(steadq::Enqueued::id)
            .map(drop),
        ),
        // "No job" is the claim's "not done".
        Op::Claim | Op::ClaimPrio | Op::ClaimGroup => q.claim().and_then(|l| match l {
            Some(l) => {
                drop(l.into_handle());
                Ok(())
            }
            None => Err(nothing()),
        }),
        Op::Renew | Op::RenewGroup => {
            match lease.as_mut().unwrap().renew(Duration::from_secs(60)) {
                // A lost lease is its own variant, and it is always "not done".
                Err(e @ RenewError::LeaseLost(_)) => {
                    assert!(e.is_lease_lost() && e.outcome() == Outcome::NotDone);
                    Err(e.into())
                }
                r => r.map_err(Error::from),
            }
        }
        Op::Ack | Op::AckHeader | Op::AckNone | Op::AckPrio | Op::AckGroup => {
            settled(lease.take().unwrap().ack(), &mut back)
        }
        Op::Nack | Op::NackPrio => settled(
            lease
                .take()
                .unwrap()
                .nack(Duration::from_secs(30))
                .map(|n| assert!(matches!(n, Nacked::Delayed(_)))),
            &mut back,
        ),
        Op::NackExhausted => settled(
            lease
                .take()
                .unwrap()
                .nack(Duration::from_secs(30))
                .map(|n| assert_eq!(n, Nacked::Dead)),
            &mut back,
        ),
        Op::Fail => settled(lease.take().unwrap().fail(Reason::FAILED), &mut back),
        Op::Release => settled(lease.take().unwrap().release(), &mut back),
        // A pass that moved nothing reports "not done" for the move under test.
        Op::RecoverExpired | Op::RecoverDue => q.recover().into_result().and_then(|r| {
            if r.moved() == 1 {
                Ok(())
            } else {
                Err(nothing())
            }
        }),
        Op::Requeue => q.requeue_dead(None).into_result().and_then(|r| {
            if r.requeued == 1 {
                Ok(())
            } else {
                Err(nothing())
            }
        }),
        Op::Compact => q.compact(Duration::from_secs(1)).and_then(|r| {
            if r.removed == 1 {
                Ok(())
            } else {
                Err(nothing())
            }
        }),
    };
    // Keep a surviving lease from releasing itself on drop until the truth is read.
    let clean = Queue::open(d.path()).unwrap();
    let all = clean.list(None).unwrap();
    let happened = match op {
        Op::Enqueue | Op::EnqueueNamed | Op::EnqueueKeyed | Op::EnqueueCapped => all.len() == 1,
        Op::EnqueueStream | Op::EnqueueStreamNamed => all.len() == 1 && streamed_whole(&clean),
        Op::EnqueuePrio => all.len() == 1 && all[0].dir == "prio/6/00",
        Op::EnqueueDelayed => all.len() == 1 && all[0].state == State::Delayed,
        Op::EnqueueBatch => all.len() == 3,
        Op::Claim | Op::ClaimPrio | Op::ClaimGroup => all[0].name.attempt == 1,
        Op::Renew | Op::RenewGroup => all[0].state == State::Leased && all[0].name.generation == 2,
        Op::Ack | Op::AckHeader | Op::AckPrio | Op::AckGroup => all[0].state == State::Acked,
        // Under `none` the receipt goes once its evidence line is durable; a receipt kept
        // because that step failed is still a done ack.
        Op::AckNone => {
            all.is_empty() && evidence_lines(&d) == 1
                || all.len() == 1 && all[0].state == State::Acked
        }
        Op::Nack | Op::NackPrio => all[0].state == State::Delayed,
        Op::NackExhausted | Op::Fail => all[0].state == State::Dead,
        Op::Release | Op::RecoverExpired | Op::RecoverDue | Op::Requeue => {
            all[0].state == State::Ready
        }
        Op::Compact => all.is_empty(),
    };
    if let Some(id) = maybe_job {
        // Indeterminate, with the job it may have made: that job or none, never another.
        assert!(
            all.is_empty() || all.len() == 1 && all[0].name.id == id,
            "indeterminate enqueue of {id} left {all:?}"
        );
        assert!(matches!(&res, Err(Error::Indeterminate(_))), "{res:?}");
        IDS_CHECKED.with(|c| c.set(c.get() + 1));
    }
    if let Some(l) = back.as_ref() {
        // Not done, and the lease handed back still holds the job under its exact name.
        assert!(
            all.len() == 1 && all[0].state == State::Leased && all[0].name == *l.name(),
            "a lease handed back by a not-done {op:?} does not hold its job: {all:?}"
        );
    }
    if is_prio(op) {
        // Whatever happened, the job kept its level (in its name and its directory).
        for l in &all {
            assert_eq!(l.name.priority, PRIO, "{op:?}: {l:?} ({res:?})");
            assert!(matches!(l.state, State::Acked | State::Delayed) || l.dir == "prio/6/00");
        }
    }
    if is_group(op) {
        group_slots_agree(op, &clean, &res, plan.fired());
    }
    if op == Op::EnqueueBatch && !all.is_empty() && all.len() != 3 {
        // A partial batch is allowed only when the outcome admits it.
        assert!(
            matches!(&res, Err(e) if e.outcome() == Outcome::Indeterminate),
            "partial batch with {res:?}"
        );
    }
    if op == Op::EnqueueKeyed {
        // A keyed job never exists without its key; a retry names it, or enqueues anew.
        let live_keys = clean.live_keys().unwrap();
        if happened {
            assert_eq!(live_keys, 1, "a keyed job without its key: {res:?}");
        }
        let retry = clean.enqueue_with(b"payload", &keyed()).unwrap();
        assert_eq!(retry.is_duplicate(), happened, "{res:?} then {retry:?}");
        assert_eq!(clean.list(None).unwrap().len(), 1, "one job per key");
    }
    // Reuse: a lease that outlived a failed renew (not lost, not a simulated crash) must
    // renew again, whichever name the failure left live: the Lease follows its name by the
    // move's outcome (a rename whose barrier failed lives under the new name). The defect
    // this catches: a renew that kept the old name after its barrier failed, so the next
    // renew reported the lease lost and `work` killed a command whose lease was valid.
    if let (Op::Renew | Op::RenewGroup, Err(e), Some(l)) = (op, &res, lease.as_mut()) {
        if !e.is_lease_lost() && !plan.stopped() {
            plan.disarm();
            l.renew(Duration::from_secs(60))
                .unwrap_or_else(|e2| panic!("renew after the failed renew ({e}): {e2}"));
        }
    }
    // Reuse: the lease a not-done settle handed back settles the job once the fault is gone.
    if let Some(l) = back.take() {
        if !plan.stopped() {
            plan.disarm();
            let again = match op {
                Op::Ack | Op::AckHeader | Op::AckNone | Op::AckGroup => l.ack().map(drop),
                Op::Nack | Op::NackExhausted => l.nack(Duration::from_secs(30)).map(drop),
                Op::Fail => l.fail(Reason::FAILED),
                _ => l.release(),
            };
            if let Err(e2) = again {
                panic!("{op:?} again with the lease handed back ({res:?}): {e2}");
            }
            LEASES_BACK.with(|c| c.set(c.get() + 1));
        } else {
            drop(l.into_handle());
        }
    }
    drop(lease.take().map(|l| l.into_handle()));
    (res, happened, plan, d)
}

/// Right after a group case: a done claim holds a live slot (the limit is 1) unless a fault
/// fired (an `ENOENT` injected on the limits file's open reads as "no limit": the claim
/// then takes no slot, truthfully); never more than one slot for the one job; the job kept
/// its group whatever happened.
fn group_slots_agree(op: Op, q: &Queue, res: &Result<(), Error>, fired: bool) {
    let g = GroupName::new(GROUP).unwrap();
    let all = q.list(None).unwrap();
    assert!(
        all.iter().all(|l| l.name.group == Some(g)),
        "{op:?}: {all:?}"
    );
    let slots = q
        .status()
        .unwrap()
        .groups
        .iter()
        .map(|u| u.slots)
        .sum::<u32>();
    if op == Op::ClaimGroup && res.is_ok() && !fired {
        assert_eq!(slots, 1, "a done claim without its slot: {all:?}");
    }
    if op == Op::RenewGroup && res.is_ok() {
        // Its slot says the renewed lease (a live one for a minute).
        assert_eq!(slots, 1, "a done renewal without its slot: {all:?}");
    }

    assert!(slots <= 1, "{op:?}: {slots} slots for one job ({res:?})");
}

/// The one job of a streamed enqueue carries the payload exactly (claimed, then released;
/// fsck checks its digests again after recovery).
fn streamed_whole(q: &Queue) -> bool {
    let l = q.claim().unwrap().unwrap();
    let exact = l.payload().unwrap() == &streamed()[..];
    l.release().unwrap();
    assert!(exact, "the streamed payload differs");
    true
}

/// Lines in `evidence.log` (0 when there is none).
fn evidence_lines(d: &TempDir) -> usize {
    std::fs::read_to_string(d.path().join(EVIDENCE_FILE))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Under the `header` and `none` policies, what an ack does after its receipt is durable
/// (cut it; write evidence and remove it) may meet a failed fsync: the ack is still done, and
/// true to report, provided nothing was removed on the strength of that barrier.
fn policy_step_kept_the_receipt(op: Op, d: &TempDir) -> bool {
    let q = Queue::open(d.path()).unwrap();
    let all = q.list(None).unwrap();
    match op {
        Op::AckHeader => all.len() == 1 && all[0].state == State::Acked,
        Op::AckNone => all.len() == 1 && all[0].state == State::Acked,
        _ => false,
    }
}

/// After any case: recover, then the invariants hold.
fn check_invariants(d: &TempDir, ctx: &str, prio: bool) {
    let q = Queue::open(d.path()).unwrap();
    q.clock().shift_boot(3600 * SEC);
    q.clock().shift_wall(3600 * SEC);
    q.recover()
        .into_result()
        .unwrap_or_else(|e| panic!("{ctx}: recover failed: {e}"));
    let again = q.recover().into_result().unwrap();
    assert_eq!(again.moved(), 0, "{ctx}: recovery not idempotent");
    let f = q.fsck().unwrap();
    assert!(f.clean(), "{ctx}: fsck: {:?}", f.problems);
    let all = q.list(None).unwrap();
    let mut ids: Vec<JobId> = all.iter().map(|l| l.name.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all.len(), "{ctx}: a job in two states: {all:?}");
    assert!(
        all.iter().all(|l| l.state != State::Leased),
        "{ctx}: lease left after recovery"
    );
    // No slot outlives its lease's expiry: an hour on, every slot left is stale.
    for u in q.status().unwrap().groups {
        assert_eq!(
            u.slots, 0,
            "{ctx}: a live slot after every lease expired: {u:?}"
        );
    }
    if prio {
        // Recovery (an expired lease, a due delay) put it back into its own level.
        assert!(
            all.iter()
                .all(|l| l.name.priority == PRIO
                    && (l.state != State::Ready || l.dir == "prio/6/00")),
            "{ctx}: a job lost its priority: {all:?}"
        );
    }
}

fn errnos_for(call: Call) -> Vec<Errno> {
    let mut v = vec![
        Errno::IO,
        Errno::NOSPC,
        Errno::DQUOT,
        Errno::ROFS,
        Errno::INTR,
    ];
    if matches!(
        call,
        Call::Rename | Call::Link | Call::Open | Call::Unlink | Call::Mkdir
    ) {
        v.push(Errno::NOENT);
        v.push(Errno::EXIST);
    }
    v
}

/// What one operation's matrix met: its cases, how many ended in each outcome, the
/// indeterminate enqueues that named their job, and the not-done settles that handed back a
/// lease that held the job and settled it again.
#[derive(Debug, Default)]
struct Tally {
    cases: u32,
    done: u32,
    not_done: u32,
    indeterminate: u32,
    ids: u32,
    back: u32,
}

/// The fault matrix of one operation: a clean run counts the filesystem calls `op` makes;
/// then each call, one at a time, fails with each errno it can meet and is followed by a
/// stop. Every case's outcome must be the true one and the invariants must hold after
/// recovery (panics otherwise, naming the case).
fn matrix(op: Op) -> Tally {
    let mut t = Tally::default();
    let (ids0, back0) = (IDS_CHECKED.with(Cell::get), LEASES_BACK.with(Cell::get));
    // A clean run counts the calls the operation makes.
    let (res, happened, plan, _d) = run(op, vec![]);
    assert!(
        res.is_ok() && happened,
        "{op:?} without faults: {res:?} happened={happened}"
    );
    let counts: Vec<(Call, u32)> = Call::ALL
        .iter()
        .map(|&c| (c, plan.count(c)))
        .filter(|&(_, n)| n > 0)
        .collect();
    for &(call, n) in &counts {
        for nth in 1..=n {
            let mut actions: Vec<FaultAction> = errnos_for(call)
                .into_iter()
                .map(FaultAction::Fail)
                .collect();
            actions.push(FaultAction::StopAfter);
            for action in actions {
                let ctx = format!("{op:?} {call:?}#{nth} {action:?}");
                let (res, happened, plan, d) = run(op, vec![Fault { call, nth, action }]);
                t.cases += 1;
                let label = match &res {
                    Ok(()) => {
                        assert!(happened, "{ctx}: reported done but did not happen");
                        if matches!(call, Call::Fsync | Call::Syncfs | Call::WriteOut)
                            && plan.fired()
                            && !matches!(action, FaultAction::StopAfter)
                            && !policy_step_kept_the_receipt(op, &d)
                        {
                            panic!("{ctx}: a failed barrier ended in done");
                        }
                        t.done += 1;
                        "done"
                    }
                    Err(e) if e.outcome() == Outcome::NotDone => {
                        assert!(!happened, "{ctx}: reported not done but it happened ({e})");
                        assert!(
                            e.path().is_some() || !matches!(e.kind(), ErrorKind::Io { .. }),
                            "{ctx}: an I/O error without a path: {e}"
                        );
                        t.not_done += 1;
                        "not done"
                    }
                    Err(_) => {
                        t.indeterminate += 1;
                        "indeterminate"
                    }
                };
                // The first enqueue at a level makes its directories and fsyncs the
                // slot's parents (3 fsyncs) before the link: a failure there is not done.
                let level_dirs =
                    matches!(call, Call::Mkdir) || matches!(call, Call::FsyncDir) && nth <= 3;
                if op == Op::EnqueuePrio && level_dirs && matches!(action, FaultAction::Fail(_)) {
                    assert_eq!(label, "not done", "{ctx}: a level's directory failed");
                }
                check_invariants(&d, &ctx, is_prio(op));
            }
        }
    }
    t.ids = IDS_CHECKED.with(Cell::get) - ids0;
    t.back = LEASES_BACK.with(Cell::get) - back0;
    summary(&format!(
        "fault matrix, {op:?}: {} cases, {} done, {} not done, {} indeterminate (each checked \
         against the directory, invariants held after each); {} indeterminate enqueues named \
         their job, {} not-done settles handed back a lease and settled again",
        t.cases, t.done, t.not_done, t.indeterminate, t.ids, t.back
    ));
    assert!(t.cases > 0 && t.not_done > 0, "{op:?}: {t:?}");
    // Every not-done settle hands back its lease; every indeterminate enqueue that made an
    // id names it (`EnqueueBatch` has no single id).
    if matches!(
        op,
        Op::Ack
            | Op::AckHeader
            | Op::AckNone
            | Op::AckPrio
            | Op::Nack
            | Op::NackPrio
            | Op::NackExhausted
            | Op::Fail
            | Op::Release
    ) {
        assert!(
            t.back > 0,
            "{op:?}: no not-done settle handed back its lease: {t:?}"
        );
    }
    if is_named_enqueue(op) && t.indeterminate > 0 {
        assert!(
            t.ids > 0,
            "{op:?}: no indeterminate enqueue named its job: {t:?}"
        );
    }
    t
}

/// The enqueues whose errors name the job they may have made.
fn is_named_enqueue(op: Op) -> bool {
    matches!(
        op,
        Op::Enqueue
            | Op::EnqueueNamed
            | Op::EnqueueDelayed
            | Op::EnqueueKeyed
            | Op::EnqueueCapped
            | Op::EnqueueStream
            | Op::EnqueueStreamNamed
            | Op::EnqueuePrio
    )
}

/// One slow-tier test per operation of the matrix, `fault_matrix_reports_the_true_outcome_of_*`
/// (so `--skip faults::fault_matrix_reports_the_true_outcome` leaves them all out).
macro_rules! fault_matrix {
    ($($name:ident: $op:expr;)*) => {
        $(
            #[test]
            #[ignore = "slow tier: every call of the operation failed with each errno (the 25 take ~100 s)"]
            fn $name() {
                matrix($op);
            }
        )*
        /// Every operation of [`OPS`] has its test above.
        #[test]
        fn every_operation_has_its_fault_matrix_test() {
            let tested = [$($op),*];
            assert_eq!(tested.len(), OPS.len());
            assert!(OPS.iter().all(|op| tested.contains(op)), "{tested:?}");
        }
    };
}

fault_matrix! {
    fault_matrix_reports_the_true_outcome_of_enqueue: Op::Enqueue;
    fault_matrix_reports_the_true_outcome_of_enqueue_named: Op::EnqueueNamed;
    fault_matrix_reports_the_true_outcome_of_enqueue_delayed: Op::EnqueueDelayed;
    fault_matrix_reports_the_true_outcome_of_enqueue_batch: Op::EnqueueBatch;
    fault_matrix_reports_the_true_outcome_of_claim: Op::Claim;
    fault_matrix_reports_the_true_outcome_of_renew: Op::Renew;
    fault_matrix_reports_the_true_outcome_of_renew_group: Op::RenewGroup;
    fault_matrix_reports_the_true_outcome_of_ack: Op::Ack;
    fault_matrix_reports_the_true_outcome_of_ack_header: Op::AckHeader;
    fault_matrix_reports_the_true_outcome_of_ack_none: Op::AckNone;
    fault_matrix_reports_the_true_outcome_of_nack: Op::Nack;
    fault_matrix_reports_the_true_outcome_of_nack_exhausted: Op::NackExhausted;
    fault_matrix_reports_the_true_outcome_of_fail: Op::Fail;
    fault_matrix_reports_the_true_outcome_of_release: Op::Release;
    fault_matrix_reports_the_true_outcome_of_recover_expired: Op::RecoverExpired;
    fault_matrix_reports_the_true_outcome_of_recover_due: Op::RecoverDue;
    fault_matrix_reports_the_true_outcome_of_requeue: Op::Requeue;
    fault_matrix_reports_the_true_outcome_of_compact: Op::Compact;
    fault_matrix_reports_the_true_outcome_of_enqueue_keyed: Op::EnqueueKeyed;
    fault_matrix_reports_the_true_outcome_of_enqueue_capped: Op::EnqueueCapped;
    fault_matrix_reports_the_true_outcome_of_enqueue_prio: Op::EnqueuePrio;
    fault_matrix_reports_the_true_outcome_of_claim_prio: Op::ClaimPrio;
    fault_matrix_reports_the_true_outcome_of_ack_prio: Op::AckPrio;
    fault_matrix_reports_the_true_outcome_of_nack_prio: Op::NackPrio;
    fault_matrix_reports_the_true_outcome_of_enqueue_stream: Op::EnqueueStream;
    fault_matrix_reports_the_true_outcome_of_enqueue_stream_named: Op::EnqueueStreamNamed;
    fault_matrix_reports_the_true_outcome_of_claim_group: Op::ClaimGroup;
    fault_matrix_reports_the_true_outcome_of_ack_group: Op::AckGroup;
}

#[test]
fn a_failed_claim_fsync_is_indeterminate_and_the_job_comes_back() {
    let d = TempDir::new("claimfsync");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    Queue::open(d.path()).unwrap().enqueue(b"x").unwrap();
    let (q, plan) = open_failing(d.path(), Call::FsyncDir, 1, Errno::IO);
    plan.arm();
    let e = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(
        (e.outcome(), e.errno()),
        (Outcome::Indeterminate, Some(Errno::IO.into()))
    );
    assert!(
        e.to_string().contains("ready/00") && e.to_string().contains("indeterminate"),
        "{e}"
    );
    let q2 = Queue::open(d.path()).unwrap();
    q2.clock().shift_boot(2 * SEC);
    assert_eq!(q2.recover().into_result().unwrap().expired, 1);
    assert_eq!(q2.claim().unwrap().unwrap().attempt(), 2);
}

#[test]
fn eio_from_the_rename_itself_is_indeterminate_other_errnos_not_done() {
    for (errno, want) in [
        (Errno::IO, Outcome::Indeterminate),
        (Errno::NOSPC, Outcome::NotDone),
        (Errno::ROFS, Outcome::NotDone),
    ] {
        let d = TempDir::new("renameerr");
        drop(Queue::create(d.path(), opts(1)).unwrap());
        Queue::open(d.path()).unwrap().enqueue(b"x").unwrap();
        let (q, plan) = open_failing(d.path(), Call::Rename, 1, errno);
        let l = q.claim().unwrap().unwrap();
        plan.arm();
        let e = l.ack().unwrap_err();
        assert_eq!((e.outcome(), e.errno()), (want, Some(errno.into())));
    }
}

#[test]
fn a_skip_fault_lies_about_every_matching_barrier() {
    // The crash lab's negative control: fsyncs and write-outs of files "succeed" without
    // being made.
    let d = TempDir::new("skip");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    let skip = |call| Fault {
        call,
        nth: 0,
        action: FaultAction::Skip,
    };
    let plan = FaultPlan::new(vec![skip(Call::Fsync), skip(Call::WriteOut)]);
    let q = Queue::open_with(
        d.path(),
        Options {
            faults: Some(plan.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    for _ in 0..3 {
        q.enqueue(b"x").unwrap();
    }
    assert!(plan.fired());
    // Two file fsyncs per job (before and after its link); on xfs and journaled ext4 one
    // write-out (sync_file_range) before the link instead.
    let (file, out) = if steadq::sys::one_fsync_per_move(d.path()) {
        (0, 3)
    } else {
        (6, 0)
    };
    assert_eq!(
        (
            plan.count(Call::Fsync),
            plan.count(Call::WriteOut),
            plan.count(Call::FsyncDir)
        ),
        (file, out, 3)
    );
    assert_eq!(q.list(None).unwrap().len(), 3);
}

/// `--break NAME` of the crash rigs: a plan that removes one named barrier skips that site's
/// fsync, every time it is asked for, and no other barrier.
#[test]
fn a_named_barrier_is_removed_at_its_site_and_nowhere_else() {
    use steadq::sys::Barrier;
    let run = |skip: Option<Barrier>| {
        let d = TempDir::new("named-barrier");
        let plan = FaultPlan::new(Vec::new());
        if let Some(b) = skip {
            plan.skip_barrier(b);
        }
        let q = with_plan(&d, &plan, opts(1));
        plan.reset_counts();
        for _ in 0..2 {
            q.enqueue(b"x").unwrap();
            q.claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                ..Default::default()
            })
            .unwrap()
            .unwrap()
            .ack()
            .unwrap();
        }
        (plan.count(Call::FsyncDir), plan)
    };
    let (all, _) = run(None);
    let (fewer, plan) = run(Some(Barrier::AckDest));
    assert_eq!(plan.skipped(Barrier::AckDest), 2, "one per ack");
    for b in Barrier::ALL.iter().filter(|b| **b != Barrier::AckDest) {
        assert_eq!(plan.skipped(*b), 0, "{b}");
    }
    assert_eq!(
        fewer,
        all - 2,
        "the acks' receipts-directory fsyncs are not made"
    );
}

/// Purge, requeue and make_due follow one rule for a batch that fails part-way (not done
/// before the first change, indeterminate after it) and never create a directory as a side
/// effect (they used to `mkdir` every source bucket; purge reported "not done" after deleting).
#[test]
fn purge_and_requeue_follow_the_batch_rule_and_create_nothing() {
    let d = TempDir::new("batch-rule");
    let plan = FaultPlan::disarmed(vec![Fault {
        call: Call::Unlink,
        nth: 2,
        action: FaultAction::Fail(Errno::IO),
    }]);
    let q = Queue::create(
        d.path(),
        Options {
            faults: Some(plan.clone()),
            ..opts(1)
        },
    )
    .unwrap();
    for i in 0..3u8 {
        q.enqueue(&[i]).unwrap();
        let l = q.claim().unwrap().unwrap();
        l.fail(Reason::new("x").unwrap()).unwrap();
    }
    let delay = EnqueueOptions {
        delay: Some(Duration::from_secs(600)),
        ..Default::default()
    };
    q.enqueue_with(b"later", &delay).unwrap().id();
    plan.reset_counts();
    plan.arm();
    // The second unlink fails (EIO): the purge goes on past it, so two of the three are
    // deleted, and the outcome is indeterminate (deletions happened; that one may have).
    let e = q.purge_dead().unwrap_err();
    assert_eq!(e.outcome(), Outcome::Indeterminate, "{e}");
    assert_eq!(counts(&q)[3], 1, "the job whose unlink failed is left");
    // Requeue and make_due move jobs out of existing buckets without making any.
    assert_eq!(q.requeue_dead(None).into_result().unwrap().requeued, 1);
    assert_eq!(q.make_due(None).unwrap(), 1);
    assert_eq!(
        plan.count(Call::Mkdir),
        0,
        "no directory made by purge, requeue or make_due"
    );
    assert_eq!(counts(&q), [2, 0, 0, 0, 0]);
}

/// The outcome types carry the truth: an enqueue made indeterminate names the job it may
/// have made, and the directory then holds that job or none (never another, never guessed),
/// both when the link happened (a failed directory fsync after it) and when it did not (the
/// link itself returned `EIO`).
#[test]
fn an_indeterminate_enqueue_names_its_job_present_or_absent() {
    for (call, present) in [(Call::FsyncDir, true), (Call::Link, false)] {
        let d = TempDir::new("enqid");
        drop(Queue::create(d.path(), opts(1)).unwrap());
        // The named route (btrfs) publishes with a rename out of tmp/, not a link.
        let call = match call {
            Call::Link if steadq::sys::publishes_named(d.path()) => Call::Rename,
            c => c,
        };
        let plan = FaultPlan::disarmed(vec![Fault {
            call,
            nth: 1,
            action: FaultAction::Fail(Errno::IO),
        }]);
        let q = Queue::open_with(
            d.path(),
            Options {
                faults: Some(plan.clone()),
                ..Options::default()
            },
        )
        .unwrap();
        plan.arm();
        let e = q.enqueue(b"maybe").unwrap_err();
        assert!(plan.fired(), "{call:?}");
        let EnqueueError::Indeterminate { id, ref error } = e else {
            panic!("{call:?}: not indeterminate: {e:?}")
        };
        assert_eq!((e.id(), error.errno()), (Some(id), Some(Errno::IO.into())));
        assert!(e.to_string().contains(&id.to_string()), "{e}");
        let clean = Queue::open(d.path()).unwrap();
        match clean.find(id) {
            Ok(l) => {
                assert!(present, "{call:?}: {l:?}");
                assert_eq!(clean.read_job(&l).unwrap().1, b"maybe");
            }
            Err(e) => {
                assert!(!present, "{call:?}: {e}");
                assert_eq!(e.kind(), &ErrorKind::NoSuchJob);
            }
        }
        assert_eq!(clean.list(None).unwrap().len(), usize::from(present));
    }
}

/// A not-done nack (its delayed bucket cannot be made: the disk is full) hands the lease back,
/// still holding the job under its name: dropping it releases the job as dropping any lease
/// does, while converting the error into an `Error` (`?`) detaches it, so the job stays
/// leased until its deadline and the handle still settles it.
#[test]
fn a_not_done_nack_hands_the_lease_back_and_the_conversion_keeps_it_leased() {
    for drop_it in [true, false] {
        let d = TempDir::new("nackback");
        drop(Queue::create(d.path(), opts(1)).unwrap());
        let (q, plan) = open_failing(d.path(), Call::Mkdir, 1, Errno::NOSPC);
        q.enqueue(b"x").unwrap();
        let l = q.claim().unwrap().unwrap();
        let handle = l.handle();
        plan.arm();
        let e = l.nack(Duration::from_secs(600)).unwrap_err();
        assert!(plan.fired());
        assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
        let leased = |q: &Queue| q.status().unwrap().leased;
        assert_eq!(leased(&q), 1, "not done: still leased");
        if drop_it {
            let lease = e.into_lease().expect("handed back");
            assert_eq!(lease.handle(), handle);
            drop(lease);
            assert_eq!(
                (leased(&q), q.status().unwrap().ready),
                (0, 1),
                "drop released it"
            );
        } else {
            let f = Error::from(e);
            assert!(matches!(f, Error::NotDone(_)), "{f:?}");
            assert_eq!(leased(&q), 1, "the conversion changed nothing");
            plan.disarm();
            let again = q.lease_from_handle(&handle).unwrap();
            assert!(matches!(
                again.nack(Duration::from_secs(600)),
                Ok(Nacked::Delayed(_))
            ));
        }
    }
}

/// A lease recovered by another handle: renew and ack say so by variant, not done.
#[test]
fn a_lost_lease_is_its_own_variant_for_renew_and_ack() {
    let d = TempDir::new("lostvariant");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"x").unwrap();
    let mut l = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let other = Queue::open(d.path()).unwrap();
    other.clock().shift_boot(2 * SEC);
    assert_eq!(other.recover().into_result().unwrap().expired, 1);
    let e = l.renew(Duration::from_secs(30)).unwrap_err();
    assert!(matches!(e, RenewError::LeaseLost(_)), "{e:?}");
    assert_eq!(e.outcome(), Outcome::NotDone);
    let e = l.ack().unwrap_err();
    assert!(matches!(e, SettleError::LeaseLost(_)), "{e:?}");
    assert_eq!(
        q.status().unwrap().ready,
        1,
        "the job is back in ready, untouched"
    );
}

/// `fsck_quarantine` follows the batch rule: a move that fails after another entry was
/// quarantined is indeterminate (the pass changed the queue), not "not done" as it was.
#[test]
fn a_quarantine_failing_after_a_move_is_indeterminate() {
    for (nth, want) in [(1, Outcome::NotDone), (2, Outcome::Indeterminate)] {
        let d = TempDir::new("quarantine-batch");
        drop(Queue::create(d.path(), opts(1)).unwrap());
        for n in ["a.txt", "b.txt"] {
            std::fs::write(d.path().join("ready/00").join(n), b"foreign").unwrap();
        }
        let plan = FaultPlan::disarmed(vec![Fault {
            call: Call::Rename,
            nth,
            action: FaultAction::Fail(Errno::NOSPC),
        }]);
        let q = Queue::open_with(
            d.path(),
            Options {
                faults: Some(plan.clone()),
                ..Options::default()
            },
        )
        .unwrap();
        plan.arm();
        let e = q.fsck_quarantine().unwrap_err();
        assert!(plan.fired());
        assert_eq!(e.outcome(), want, "rename #{nth}: {e}");
        let moved = std::fs::read_dir(d.path().join("quarantine/ready/00"))
            .map(|r| r.count())
            .unwrap_or(0);
        assert_eq!(moved, nth as usize - 1, "rename #{nth}");
    }
}

/// `rename(2)` fails with `EACCES` when either directory is not writable: a failed ack names
/// the receipt shard it was moving into as well as the leased file (a fresh-user trial was
/// sent to fix the permissions of the ready shard, which were fine).
#[test]
fn a_failed_move_names_the_directory_it_was_moving_into() {
    let d = TempDir::new("moveinto");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    Queue::open(d.path()).unwrap().enqueue(b"x").unwrap();
    let (q, plan) = open_failing(d.path(), Call::Rename, 1, Errno::ACCESS);
    let lease = q.claim().unwrap().unwrap();
    plan.arm();
    let Err(SettleError::NotDone { error, mut lease }) = lease.ack() else {
        panic!("the ack should be not done");
    };
    let into = d.path().join("receipts/00");
    assert_eq!(error.into_dir(), Some(into.as_path()));
    let text = error.to_string();
    assert!(text.contains("ready/00/"), "{text}");
    assert!(
        text.contains(&format!("moving it into {}/", into.display())),
        "{text}"
    );
    // The same move within one directory (a renew) names no second directory.
    plan.arm();
    let Err(RenewError::NotDone(e)) = lease.renew(Duration::from_secs(60)) else {
        panic!("the renew should be not done");
    };
    assert_eq!(e.into_dir(), None, "{e}");
}

/// The first enqueue at a level makes `prio/`, `prio/<l>/` and the slot, and fsyncs the slot's
/// parents, before the job's link: a failed mkdir or fsync there is not done, names the
/// directory, and leaves no job. The next enqueue makes what is missing.
#[test]
fn a_level_that_cannot_be_made_is_not_done_and_names_its_directory() {
    let prio6 = EnqueueOptions {
        priority: Some(6),
        ..Default::default()
    };
    let cases = [
        // Each directory: its mkdir, then its owner and mode copied from ready/ (counted as
        // a Mkdir call: `Sys::copy_owner_and_mode`); a failed copy removes the directory.
        (Call::Mkdir, 1, "prio"),
        (Call::Mkdir, 2, "prio"),
        (Call::Mkdir, 3, "prio/6"),
        (Call::Mkdir, 4, "prio/6"),
        (Call::Mkdir, 5, "prio/6/00"),
        (Call::Mkdir, 6, "prio/6/00"),
        (Call::FsyncDir, 1, "prio/6"),
        (Call::FsyncDir, 2, "prio"),
        (Call::FsyncDir, 3, ""),
    ];
    for (call, nth, dir) in cases {
        let d = TempDir::new("prio-mkdir");
        drop(Queue::create(d.path(), opts(1)).unwrap());
        let plan = FaultPlan::disarmed(vec![Fault {
            call,
            nth,
            action: FaultAction::Fail(Errno::NOSPC),
        }]);
        let q = Queue::open_with(
            d.path(),
            Options {
                faults: Some(plan.clone()),
                ..opts(1)
            },
        )
        .unwrap();
        plan.arm();
        let e = Error::from(q.enqueue_with(b"x", &prio6).unwrap_err());
        let ctx = format!("{call:?}#{nth}: {e}");
        assert!(plan.fired(), "{ctx}");
        assert_eq!(e.outcome(), Outcome::NotDone, "{ctx}");
        assert_eq!(e.path(), Some(d.path().join(dir).as_path()), "{ctx}");
        let clean = Queue::open(d.path()).unwrap();
        assert!(clean.list(None).unwrap().is_empty(), "{ctx}");
        clean.enqueue_with(b"x", &prio6).unwrap().id();
        assert_eq!(clean.list(None).unwrap()[0].dir, "prio/6/00", "{ctx}");
    }
}

/// A move between directories that a crash split in two, as the block rig found on btrfs
/// (three threads, 1 of 1,825 crash states): after an ack that had not returned, the lease in
/// `ready/00` and its receipt were one file under both names. Recovery used to take the
/// lease for a live one and expire it, so the job ran again beside a receipt saying it was
/// acked. Now the newer name stands and the older is removed (`ops/split.rs`), for an ack,
/// a nack and a delayed job's promotion; a second link outside the queue changes nothing.
#[test]
fn a_move_split_by_a_crash_keeps_the_newer_name() {
    let only = |d: &std::path::Path, sub: &str| {
        let f = files(d, sub);
        assert_eq!(f.len(), 1, "{sub}: {f:?}");
        d.join(&f[0])
    };
    // Ack and nack: the lease's name is linked back beside the name the move gave it.
    for nack in [false, true] {
        let d = TempDir::new("split");
        let q = Queue::create(d.path(), opts(1)).unwrap();
        let id = q.enqueue(b"once").unwrap();
        let l = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_millis(20)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        let lease = only(d.path(), "ready");
        let newer = if nack {
            l.nack(Duration::from_secs(3600)).unwrap();
            only(d.path(), "delayed")
        } else {
            l.ack().unwrap();
            only(d.path(), "receipts")
        };
        std::fs::hard_link(&newer, &lease).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        let r = q.recover().into_result().unwrap();
        assert_eq!(
            (r.split, r.expired, r.expired_dead),
            (1, 0, 0),
            "nack {nack}"
        );
        assert!(!lease.exists() && newer.exists(), "nack {nack}");
        assert!(q.claim().unwrap().is_none(), "nack {nack}: run again");
        let want = if nack {
            [0, 0, 1, 0, 0]
        } else {
            [0, 0, 0, 0, 1]
        };
        assert_eq!(counts(&q), want, "nack {nack}");
        assert_eq!(
            q.find(id).unwrap().state,
            if nack { State::Delayed } else { State::Acked }
        );
        assert!(q.fsck().unwrap().problems.is_empty(), "nack {nack}");
    }
    // A promotion: the delayed name is linked back beside the ready one.
    let d = TempDir::new("split-due");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let o = EnqueueOptions {
        delay: Some(Duration::from_millis(10)),
        ..Default::default()
    };
    let id = q.enqueue_with(b"due once", &o).unwrap().id();
    let delayed = only(d.path(), "delayed");
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(q.recover().into_result().unwrap().due, 1);
    let ready = only(d.path(), "ready");
    std::fs::hard_link(&ready, &delayed).unwrap();
    let r = q.recover().into_result().unwrap();
    assert_eq!((r.split, r.due), (1, 0));
    assert!(!delayed.exists() && ready.exists());
    let l = q.claim().unwrap().unwrap();
    assert_eq!(l.id(), id);
    l.ack().unwrap();
    assert!(q.claim().unwrap().is_none(), "run again");
    // A second link outside the queue's directories: the lease is recovered as usual.
    let d = TempDir::new("split-foreign");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"linked elsewhere").unwrap();
    let _l = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_millis(20)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let outside = d.path().join("outside-link");
    std::fs::hard_link(only(d.path(), "ready"), &outside).unwrap();
    std::thread::sleep(Duration::from_millis(40));
    let r = q.recover().into_result().unwrap();
    assert_eq!((r.split, r.expired), (0, 1));
    assert!(q.claim().unwrap().is_some());
}

/// A second name of a lease's file whose kind does not belong where it is (a lease's name
/// in a receipt shard, linked there by hand) was taken for the state a split move reached:
/// recovery unlinked the lease, the only name the queue could use, and kept the misplaced
/// one, which no claim sees and `fsck --quarantine` moves to quarantine/ (the job was
/// neither run nor acked; breaker finding). A move leaves a receipt in a receipt shard, a
/// delayed name in a delayed bucket, a dead one in a dead bucket: only those count now.
#[test]
fn a_misplaced_second_name_is_not_taken_for_a_split_move() {
    let d = TempDir::new("split-misplaced");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"misplaced").unwrap();
    let mut l = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_millis(30)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let lease = d.path().join(&files(d.path(), "ready")[0]);
    l.renew(Duration::from_millis(30)).unwrap();
    let newer = files(d.path(), "ready")[0].clone();
    let newer_name = std::path::Path::new(&newer).file_name().unwrap().to_owned();
    std::mem::forget(l); // a worker that is gone: no release
                         // The renewed lease (a higher generation) is put back under the first lease's name, and
                         // linked into the receipt shard under its own.
    std::fs::rename(d.path().join(&newer), &lease).unwrap();
    let misplaced = d.path().join("receipts/00").join(newer_name);
    std::fs::hard_link(&lease, &misplaced).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    let r = q.recover().into_result().unwrap();
    assert_eq!((r.split, r.expired), (0, 1));
    let l = q.claim().unwrap().expect("the job is lost");
    assert_eq!(l.id(), id);
}

/// On btrfs an enqueue renames its job file out of `tmp/` and does not fsync `tmp/` after it
/// (`Shared::tmp_unsynced`): a crash may then leave the old temp name beside the job's name,
/// one file under both. Recovery removes the temp name as abandoned (another boot's), and the
/// job stays, claimable, its payload whole.
#[test]
fn a_temp_name_left_beside_its_published_job_is_removed_and_the_job_stays() {
    let d = TempDir::new("tmp-split");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"published").unwrap();
    let job = files(d.path(), "ready");
    assert_eq!(job.len(), 1);
    let stale = d.path().join("tmp").join(format!(
        "{:032x}.{:08x}.{:032x}.tmp",
        q.clock().boot_id() ^ 1,
        std::process::id(),
        9
    ));
    std::fs::hard_link(d.path().join(&job[0]), &stale).unwrap();
    let r = q.recover().into_result().unwrap();
    assert_eq!((r.temp_removed, r.split), (1, 0));
    assert!(!stale.exists());
    assert_eq!(files(d.path(), "ready"), job);
    let l = q.claim().unwrap().unwrap();
    assert_eq!((l.id(), l.payload().unwrap()), (id, &b"published"[..]));
    l.ack().unwrap();
}

/// `Lease::ack_and_claim` reports the truth when the barrier it shares fails: the ack is
/// indeterminate (its receipt exists: the rename happened), and the job its claim took,
/// never handed out, is given back to ready with its attempt. A claim that fails before
/// its rename leaves the ack done and says so in `next`.
#[test]
fn ack_and_claim_with_a_failed_barrier_is_indeterminate_and_gives_the_next_job_back() {
    let d = TempDir::new("ack-next-fault");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    let plan = FaultPlan::disarmed(vec![Fault {
        call: Call::FsyncDir,
        nth: 1,
        action: FaultAction::Fail(Errno::IO),
    }]);
    let q = Queue::open_with(
        d.path(),
        Options {
            faults: Some(plan.clone()),
            ..opts(1)
        },
    )
    .unwrap();
    q.enqueue(b"first").unwrap();
    // Ids order by millisecond (then at random): "second" one millisecond later.
    std::thread::sleep(Duration::from_millis(2));
    q.enqueue(b"second").unwrap();
    let lease = q.claim().unwrap().unwrap();
    assert_eq!(lease.payload().unwrap(), b"first");
    plan.arm();
    match lease.ack_and_claim(Duration::from_secs(30)) {
        Err(e @ SettleError::Indeterminate(_)) => {
            assert_eq!(e.outcome(), Outcome::Indeterminate, "{e}")
        }
        other => panic!("a failed shared barrier must be indeterminate: {other:?}"),
    }
    plan.disarm();
    // The ack's rename happened; the second job is ready again, its attempt given back.
    assert_eq!(counts(&q), [1, 0, 0, 0, 1]);
    let again = q.claim().unwrap().unwrap();
    assert_eq!(again.payload().unwrap(), b"second");
    assert_eq!(again.attempt(), 1, "the attempt was given back");
    // A claim that fails before its rename (the listing's open fails) leaves the ack
    // done and reports the claim's error, not done, in `next`.
    q.enqueue(b"third").unwrap();
    let plan2 = FaultPlan::disarmed(vec![Fault {
        call: Call::Rename,
        nth: 2,
        action: FaultAction::Fail(Errno::NOSPC),
    }]);
    let q2 = Queue::open_with(
        d.path(),
        Options {
            faults: Some(plan2.clone()),
            ..opts(1)
        },
    )
    .unwrap();
    drop(again); // released to ready
    let l = q2.claim().unwrap().unwrap();
    plan2.arm();
    let step = l.ack_and_claim(Duration::from_secs(30)).unwrap();
    let e = step.next.unwrap_err();
    assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
    assert_eq!(
        counts(&q2),
        [1, 0, 0, 0, 2],
        "the ack is done, one job still ready"
    );
}

/// A move recovery never sees, split by a crash (`ops/split.rs`): a claim's dead-lettering
/// of a job with no attempt left, whose ready name survived beside its dead one. The next
/// claim dead-lettered the ready name again: the same day its new name was the dead name
/// already there, the rename failed (`EEXIST`) and every claim failed, not done, naming
/// that job; a day later it made a second dead name, which `fsck` reported as a duplicate.
/// Now the claim keeps the newer (dead) name and removes the ready one.
#[test]
fn a_split_dead_lettering_keeps_the_newer_name() {
    let only = |d: &std::path::Path, sub: &str| {
        let f = files(d, sub);
        assert_eq!(f.len(), 1, "{sub}: {f:?}");
        d.join(&f[0])
    };
    // A claim's dead-lettering: attempt 1 of 1 released to ready, then claimed.
    let d = TempDir::new("split-exhausted");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let o = EnqueueOptions {
        max_attempts: Some(1),
        ..Default::default()
    };
    let id = q.enqueue_with(b"no attempt left", &o).unwrap().id();
    drop(q.claim().unwrap().unwrap()); // released: ready, attempt 1 of 1
    let ready = only(d.path(), "ready");
    assert!(
        q.claim().unwrap().is_none(),
        "dead-lettered, not handed out"
    );
    let dead = only(d.path(), "dead");
    std::fs::hard_link(&dead, &ready).unwrap();
    assert!(q.claim().unwrap().is_none());
    assert!(!ready.exists() && dead.exists());
    assert_eq!(
        files(d.path(), "dead"),
        files(d.path(), "dead")[..1],
        "one dead name"
    );
    assert_eq!(counts(&q), [0, 0, 0, 1, 0]);
    assert_eq!(q.find(id).unwrap().state, State::Dead);
    assert!(q.fsck().unwrap().problems.is_empty());
}

/// A requeue (dead to ready) split by a crash leaves the stale dead name beside the job's
/// newer one. Listings hide it while the newer name exists; once the newer name is removed
/// (the receipt under `ReceiptPolicy::None`, or by compaction) it would be visible, and
/// `dead requeue` would run the acked job again. The removal settles the split first.
#[test]
fn a_split_requeue_leaves_no_dead_name_once_the_receipt_is_removed() {
    let only = |d: &std::path::Path, sub: &str| {
        let f = files(d, sub);
        assert_eq!(f.len(), 1, "{sub}: {f:?}");
        d.join(&f[0])
    };
    // The receipt removed by the `none` policy at the ack, and by compaction.
    for policy in [ReceiptPolicy::None, ReceiptPolicy::Job] {
        let d = TempDir::new("split-requeue");
        let q = Queue::create(
            d.path(),
            Options {
                receipts: policy,
                ..opts(1)
            },
        )
        .unwrap();
        let id = q.enqueue(b"acked once").unwrap();
        q.claim().unwrap().unwrap().fail(Reason::FAILED).unwrap();
        let dead = only(d.path(), "dead");
        assert_eq!(q.requeue_dead(Some(id)).into_result().unwrap().requeued, 1);
        let ready = only(d.path(), "ready");
        // The crash kept both names: one file, link count 2.
        std::fs::hard_link(&ready, &dead).unwrap();
        assert_eq!(
            counts(&q),
            [1, 0, 0, 0, 0],
            "{policy:?}: the stale name is hidden"
        );
        q.claim().unwrap().unwrap().ack().unwrap();
        if policy == ReceiptPolicy::Job {
            assert_eq!(q.compact(Duration::ZERO).unwrap().removed, 1);
        }
        assert!(files(d.path(), "receipts").is_empty(), "{policy:?}");
        assert!(!dead.exists(), "{policy:?}: stale dead name left");
        assert_eq!(counts(&q), [0; 5], "{policy:?}");
        assert_eq!(
            q.requeue_dead(None).into_result().unwrap().requeued,
            0,
            "{policy:?}: acked job requeued"
        );
        assert!(q.claim().unwrap().is_none(), "{policy:?}");
        assert!(q.fsck().unwrap().problems.is_empty(), "{policy:?}");
    }
}
