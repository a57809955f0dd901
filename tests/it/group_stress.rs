//! Group commit under stress: 8-16 threads of one handle mixing every operation, with and
//! without a failed directory fsync, on whatever filesystem the run is on (the per-filesystem
//! rerun, `filesystems::suite_passes_on_real_filesystems`, runs it on loop ext4, xfs and btrfs,
//! where directories share one barrier group or keep one each: `ops/group.rs`). Each run
//! drains the queue and checks every job enqueued Ok is there exactly once, and no job stays
//! ready behind a claim that answers "no job" (the stranded-candidate bug of `hold_listed`,
//! found by this test: about 1 in 50-150 runs before the fix). `GROUP_RUNS=N` repeats the
//! fault-free part N times (default 3), `GROUP_NTHS=1,2,...` picks the failing fsyncs.

use crate::common::TempDir;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use steadq::sys::{Call, Errno, Fault, FaultAction, FaultPlan};
use steadq::{Durability, Options, OsErrno, Outcome, Queue, Reason, State};

/// Run `f` on `threads` threads; abort the process (a hang) if they take longer than `limit`.
fn run_threads(threads: usize, limit: Duration, f: impl Fn(usize) + Sync) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let d = &done;
        s.spawn(move || {
            let t = Instant::now();
            while !d.load(Ordering::SeqCst) {
                if t.elapsed() > limit {
                    eprintln!("HANG: threads still running after {limit:?}");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                s.spawn(move || f(t))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
}

#[derive(Default, Debug)]
struct Tally {
    ok: u64,
    /// (op, outcome, errno)
    errs: Vec<(&'static str, Outcome, Option<OsErrno>)>,
}

std::thread_local! {
    static MY_ERRS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

fn note(t: &Mutex<Tally>, op: &'static str, r: Result<(), (Outcome, Option<OsErrno>)>) {
    let mut t = t.lock().unwrap();
    match r {
        Ok(()) => t.ok += 1,
        Err((o, e)) => {
            t.errs.push((op, o, e));
            // One failed fsync covers each thread's call at most once.
            let n = MY_ERRS.with(|c| {
                c.set(c.get() + 1);
                c.get()
            });
            assert!(
                n <= 1,
                "one thread failed {n} times by one failed fsync: {:?}",
                t.errs
            );
        }
    }
}

/// Drain: claim and ack every ready job (and due delayed ones), then count by state; every
/// job id must appear exactly once across states.
fn drain_and_check(
    q: &Queue,
    ok_ids: &[steadq::JobId],
    maybe: &[steadq::JobId],
    unnamed: usize,
) -> [usize; 5] {
    for _ in 0..3 {
        while let Some(l) = q.claim().unwrap() {
            l.ack().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut seen: HashMap<steadq::JobId, Vec<State>> = HashMap::new();
    let mut c = [0usize; 5];
    for l in q.list(None).unwrap() {
        seen.entry(l.name.id).or_default().push(l.state);
        c[match l.state {
            State::Ready => 0,
            State::Leased => 1,
            State::Delayed => 2,
            State::Dead => 3,
            State::Acked | State::Waiting => 4,
        }] += 1;
    }
    for (id, st) in &seen {
        assert_eq!(st.len(), 1, "job {id:?} in states {st:?} (duplicated)");
    }
    for id in ok_ids {
        assert!(seen.contains_key(id), "job {id:?} enqueued Ok is lost");
    }
    let known: std::collections::HashSet<_> = ok_ids.iter().chain(maybe).collect();
    let unknown = seen.keys().filter(|id| !known.contains(id)).count();
    assert!(
        unknown <= unnamed,
        "{unknown} jobs appeared from nowhere (at most {unnamed} from failed batches)"
    );
    c
}

/// Mixed operations by `threads` threads sharing one handle; `fault`: fail the nth FsyncDir.
fn mixed(threads: usize, rounds: usize, fault: Option<u32>, durability: Durability) {
    let d = TempDir::new("group-mixed");
    let dir = d.path().to_path_buf();
    Queue::create(
        &dir,
        Options {
            shards: 8,
            ..Options::default()
        },
    )
    .unwrap();
    let plan = FaultPlan::disarmed(
        fault
            .map(|n| {
                vec![Fault {
                    call: Call::FsyncDir,
                    nth: n,
                    action: FaultAction::Fail(Errno::IO),
                }]
            })
            .unwrap_or_default(),
    );
    let q = Queue::open_with(
        &dir,
        Options {
            shards: 8,
            durability,
            max_attempts: 1000,
            faults: Some(plan.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    plan.arm();
    let tally = Mutex::new(Tally::default());
    let ok_ids = Mutex::new(Vec::new());
    let maybe_ids = Mutex::new(Vec::new());
    let e2 = |o: Outcome, e: Option<OsErrno>| Err((o, e));
    run_threads(threads, Duration::from_secs(120), |t| {
        let q = q.clone();
        MY_ERRS.with(|c| c.set(0));
        for i in 0..rounds {
            let payload = format!("t{t}-i{i}");
            match (t + i) % 7 {
                0..=2 => match q.enqueue(payload.as_bytes()) {
                    Ok(id) => {
                        ok_ids.lock().unwrap().push(id);
                        note(&tally, "enqueue", Ok(()))
                    }
                    Err(e) => {
                        if let steadq::EnqueueError::Indeterminate { id, .. } = &e {
                            maybe_ids.lock().unwrap().push(*id);
                        }
                        note(&tally, "enqueue", e2(e.outcome(), e.errno()))
                    }
                },
                3 => {
                    let p: Vec<Vec<u8>> = (0..3)
                        .map(|k| format!("{payload}-b{k}").into_bytes())
                        .collect();
                    let ps: Vec<&[u8]> = p.iter().map(|v| v.as_slice()).collect();
                    match q.enqueue_batch(&ps) {
                        Ok(ids) => {
                            ok_ids.lock().unwrap().extend(ids);
                            note(&tally, "enqueue_batch", Ok(()))
                        }
                        Err(e) => note(&tally, "enqueue_batch", e2(e.outcome(), e.cause().errno())),
                    }
                }
                4 => match q.claim_batch(4, Duration::from_secs(60)) {
                    Ok(ls) => {
                        note(&tally, "claim_batch", Ok(()));
                        if !ls.is_empty() {
                            match q.ack_batch(ls) {
                                Ok(_) => note(&tally, "ack_batch", Ok(())),
                                Err(e) => {
                                    note(&tally, "ack_batch", e2(e.outcome(), e.cause().errno()))
                                }
                            }
                        }
                    }
                    Err(e) => note(&tally, "claim_batch", e2(e.outcome(), e.cause().errno())),
                },
                _ => match q.claim_with(&steadq::ClaimOptions {
                    lease: Some(Duration::from_secs(60)),
                    ..Default::default()
                }) {
                    Ok(None) => note(&tally, "claim", Ok(())),
                    Ok(Some(mut l)) => {
                        note(&tally, "claim", Ok(()));
                        let r = match i % 6 {
                            0 => (
                                "ack",
                                l.ack().map(|_| ()).map_err(|e| (e.outcome(), e.errno())),
                            ),
                            1 => (
                                "nack",
                                l.nack(Duration::ZERO)
                                    .map(|_| ())
                                    .map_err(|e| (e.outcome(), e.errno())),
                            ),
                            2 => ("release", l.release().map_err(|e| (e.outcome(), e.errno()))),
                            3 => (
                                "fail",
                                l.fail(Reason::FAILED).map_err(|e| (e.outcome(), e.errno())),
                            ),
                            _ => match l.renew(Duration::from_secs(30)) {
                                Ok(()) => {
                                    note(&tally, "renew", Ok(()));
                                    (
                                        "ack",
                                        l.ack().map(|_| ()).map_err(|e| (e.outcome(), e.errno())),
                                    )
                                }
                                Err(e) => ("renew", Err((e.outcome(), e.errno()))),
                            },
                        };
                        note(&tally, r.0, r.1);
                    }
                    Err(e) => note(&tally, "claim", e2(e.outcome(), e.cause().errno())),
                },
            }
        }
    });
    plan.disarm();
    let t = tally.into_inner().unwrap();
    let fsyncs = plan.count(Call::FsyncDir);
    eprintln!(
        "mixed threads={threads} rounds={rounds} fault={fault:?} {durability:?}: ok={} errs={:?} fsync_dir={fsyncs} fired={}",
        t.ok, t.errs, plan.fired()
    );
    for (op, o, e) in &t.errs {
        assert_eq!(*e, Some(Errno::IO.into()), "{op}: unexpected errno");
        // Not done is right for an fsync before the rename (a new dead/ or delayed/ bucket,
        // a new priority slot): the drain below checks that nothing moved.
        if *o == Outcome::NotDone {
            assert!(
                matches!(*op, "fail" | "nack" | "enqueue" | "enqueue_batch"),
                "{op}: not done"
            );
        }
    }
    if fault.is_some() && plan.fired() && durability == Durability::Strict {
        assert!(
            !t.errs.is_empty(),
            "the failed fsync was reported to nobody"
        );
        assert!(
            t.errs.len() <= threads,
            "more callers failed ({}) than threads",
            t.errs.len()
        );
    }
    if fault.is_none() {
        assert!(t.errs.is_empty());
    }
    let ok = ok_ids.into_inner().unwrap();
    let maybe = maybe_ids.into_inner().unwrap();
    let unnamed = 3 * t.errs.iter().filter(|e| e.0 == "enqueue_batch").count();
    let c = drain_and_check(&q, &ok, &maybe, unnamed);
    eprintln!(
        "  counts ready/leased/delayed/dead/acked = {c:?}, ok enqueued {}",
        ok.len()
    );
    // A claim that failed indeterminate may hold its job leased until the lease runs out.
    let claims = t.errs.iter().filter(|e| e.0 == "claim").count()
        + 4 * t.errs.iter().filter(|e| e.0 == "claim_batch").count();
    if c[0] != 0 {
        for l in q.list(None).unwrap() {
            if l.state == State::Ready || l.state == State::Leased {
                eprintln!(
                    "  STUCK {:?} {} {:?} ok={} maybe={}",
                    l.state,
                    l.dir,
                    l.name,
                    ok.contains(&l.name.id),
                    maybe.contains(&l.name.id)
                );
            }
        }
        let again = q.claim().unwrap().map(|l| l.id());
        let q2 = Queue::open_with(
            &dir,
            Options {
                shards: 8,
                ..Options::default()
            },
        )
        .unwrap();
        let fresh = q2.claim().unwrap().map(|l| l.id());
        eprintln!("  same handle claims {again:?}; a fresh handle claims {fresh:?}");
    }
    assert_eq!(c[0], 0, "{c:?}");
    assert!(
        c[1] <= claims,
        "{c:?}: leased jobs but {claims} failed claims"
    );
    // The queue still works after the fault.
    q.enqueue(b"after").unwrap();
    q.claim().unwrap().unwrap().ack().unwrap();
    drop(q);
}

/// No faults: every job enqueued Ok is drained exactly once. Before the fix in
/// `Queue::hold_listed` (ops/lease.rs) a job stayed ready while the same handle's claims
/// answered "no job" (a fresh handle claimed it at once), about once in 50-150 runs.
#[test]
fn group_stress_mixed_no_fault() {
    let runs: usize = std::env::var("GROUP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for _ in 0..runs {
        for threads in [8, 12, 16] {
            mixed(threads, 40, None, Durability::Strict);
        }
    }
}

/// One failed directory fsync at each of several positions: only the callers it covered
/// fail, each as indeterminate with EIO (not done only where the fsync came before the
/// rename: a new bucket), at most once per thread; nothing is lost or duplicated.
#[test]
fn group_stress_mixed_failed_fsync_dir() {
    let ns: Vec<u32> = std::env::var("GROUP_NTHS")
        .ok()
        .map(|v| v.split(',').map(|x| x.parse().unwrap()).collect())
        .unwrap_or(vec![1, 3, 13, 50, 101]);
    for n in ns {
        for threads in [8, 12] {
            mixed(threads, 40, Some(n), Durability::Strict);
        }
    }
}

/// Every FsyncDir fails from the nth on (a dead disk): every later call errs, none hangs, none
/// reports Ok.
#[test]
fn group_stress_every_fsync_dir_fails() {
    let d = TempDir::new("group-dead");
    let dir = d.path().to_path_buf();
    Queue::create(
        &dir,
        Options {
            shards: 8,
            ..Options::default()
        },
    )
    .unwrap();
    let plan = FaultPlan::disarmed(vec![Fault {
        call: Call::FsyncDir,
        nth: 0,
        action: FaultAction::Fail(Errno::IO),
    }]);
    let q = Queue::open_with(
        &dir,
        Options {
            shards: 8,
            faults: Some(plan.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    plan.arm();
    let oks = AtomicU64::new(0);
    let errs = AtomicU64::new(0);
    run_threads(12, Duration::from_secs(60), |t| {
        for i in 0..30 {
            match q.enqueue(format!("{t}-{i}").as_bytes()) {
                Ok(_) => {
                    oks.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => {
                    assert_eq!(e.outcome(), Outcome::Indeterminate);
                    errs.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    });
    eprintln!(
        "dead disk: ok={} errs={}",
        oks.load(Ordering::SeqCst),
        errs.load(Ordering::SeqCst)
    );
    assert_eq!(
        oks.load(Ordering::SeqCst),
        0,
        "an enqueue returned Ok with every fsync failing"
    );
    drop(q);
}
