//! Priorities (issue 12 item 1) and claim order (item 4): the highest level first across every
//! shard, oldest first within a level, priorities kept through every transition, the aging
//! rule against starvation, and version-1/2 queues left as they were.

use crate::common::*;
use std::time::Duration;
use steadq::{EnqueueOptions, ErrorKind, JobId, Options, Outcome, Queue, Reason, State};
use steadq::{DEFAULT_PRIORITY, PRIORITY_LEVELS};

fn at(p: u8) -> EnqueueOptions {
    EnqueueOptions {
        priority: Some(p),
        ..Default::default()
    }
}

/// Every ready job of a level, in every shard, goes before any job of a lower level; within a
/// level the oldest goes first. A top-level job enqueued while the handle holds candidates of
/// a lower level is the very next claim.
#[test]
fn claims_take_the_highest_level_first_across_every_shard_and_the_oldest_within_it() {
    let d = TempDir::new("prio-order");
    let q = Queue::create(d.path(), fast(8)).unwrap();
    let mut want: Vec<(u8, JobId)> = Vec::new();
    for i in 0..96u32 {
        let p = (i * 5 % PRIORITY_LEVELS as u32) as u8;
        want.push((p, q.enqueue_with(b"x", &at(p)).unwrap().id()));
    }
    // Highest level first, oldest (smallest id) first within it.
    want.sort_by_key(|&(p, id)| (std::cmp::Reverse(p), id));
    let mut got = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        got.push((l.priority(), l.id()));
        l.ack().unwrap();
    }
    assert_eq!(got, want);

    for _ in 0..20 {
        q.enqueue(b"default").unwrap();
    }
    let first = q.claim().unwrap().unwrap(); // the handle now holds default-level candidates
    assert_eq!(first.priority(), DEFAULT_PRIORITY);
    let urgent = q.enqueue_with(b"urgent", &at(7)).unwrap().id();
    let next = q.claim().unwrap().unwrap();
    assert_eq!((next.id(), next.priority()), (urgent, 7));
    let low = q.enqueue_with(b"low", &at(0)).unwrap().id();
    let mut order = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        order.push(l.id());
        l.ack().unwrap();
    }
    assert_eq!(order.len(), 20);
    assert_eq!(
        order.last(),
        Some(&low),
        "level 0 goes after all of level 3"
    );
}

/// A job's priority is in every name it has: delayed (nack), dead (fail), ready again after a
/// recovered lease, `make_due` and `dead requeue`, and `ls` shows where it is.
#[test]
fn a_job_keeps_its_priority_through_every_transition() {
    let d = TempDir::new("prio-keep");
    let q = Queue::create(d.path(), fast(4)).unwrap();
    let id = q.enqueue_with(b"p6", &at(6)).unwrap().id();
    let shard = format!("{:02x}", id.shard(4));
    let where_ = |q: &Queue| {
        let l = q.find(id).unwrap();
        assert_eq!(l.name.priority, 6, "{l:?}");
        assert!(l.rel_path(q.id()).contains(".p6."), "{l:?}");
        (l.state, l.dir)
    };
    assert_eq!(where_(&q), (State::Ready, format!("prio/6/{shard}")));
    let lease = q.claim().unwrap().unwrap();
    assert_eq!(lease.priority(), 6);
    assert!(lease.handle().contains(".p6."));
    assert_eq!(where_(&q), (State::Leased, format!("prio/6/{shard}")));
    lease.nack(Duration::from_secs(3600)).unwrap();
    assert_eq!(where_(&q).0, State::Delayed);
    assert_eq!(q.make_due(Some(id)).unwrap(), 1);
    assert_eq!(where_(&q), (State::Ready, format!("prio/6/{shard}")));
    // A lease that expires is recovered into its own level.
    let lease = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let _ = lease.into_handle();
    q.clock().shift_boot(2_000_000_000);
    assert_eq!(q.recover().into_result().unwrap().expired, 1);
    assert_eq!(where_(&q), (State::Ready, format!("prio/6/{shard}")));
    q.claim().unwrap().unwrap().fail(Reason::FAILED).unwrap();
    assert_eq!(where_(&q).0, State::Dead);
    assert_eq!(q.requeue_dead(Some(id)).into_result().unwrap().requeued, 1);
    assert_eq!(where_(&q), (State::Ready, format!("prio/6/{shard}")));
    let st = q.status().unwrap();
    assert_eq!(st.ready_by_priority, [0, 0, 0, 0, 0, 0, 1, 0]);
    let r = q.claim().unwrap().unwrap().ack().unwrap();
    assert!(r.name.contains(".p6."), "{}", r.name);
    assert!(q.fsck().unwrap().clean());
}

/// Version-1 and version-2 queues (made the way the release before priorities makes them) keep
/// working at the default priority, gain no `prio/` directory, and refuse another priority
/// as not done, naming the argument and the version. Out-of-range levels are refused on any
/// queue.
#[test]
fn old_version_queues_keep_the_default_and_refuse_other_priorities() {
    for v in [1u32, 2] {
        let d = TempDir::new("prio-old");
        let o = Options {
            format_version: v,
            durability: steadq::Durability::None,
            ..Options::default()
        };
        let q = Queue::create(d.path(), o).unwrap();
        assert!(!d.path().join("prio").exists());
        let id = q.enqueue_with(b"a", &at(DEFAULT_PRIORITY)).unwrap().id();
        let e = q.enqueue_with(b"b", &at(5)).unwrap_err();
        assert_eq!(e.outcome(), Outcome::NotDone);
        let msg = e.to_string();
        assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)), "{msg}");
        assert!(
            msg.contains("priority") && msg.contains(&format!("version {v}")),
            "{msg}"
        );
        let key = EnqueueOptions {
            key: steadq::Key::new("k1"),
            ..at(1)
        };
        assert!(q.enqueue_with(b"c", &key).is_err());
        let q = Queue::open(d.path()).unwrap();
        assert_eq!(q.identity().version, v);
        let l = q.claim().unwrap().unwrap();
        assert_eq!((l.id(), l.priority()), (id, DEFAULT_PRIORITY));
        l.ack().unwrap();
        assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
        assert!(q.fsck().unwrap().clean());
    }
    let d = TempDir::new("prio-range");
    let q = Queue::create(d.path(), fast(2)).unwrap();
    assert_eq!(q.identity().version, 3);
    let e = q.enqueue_with(b"x", &at(8)).unwrap_err();
    assert!(e.to_string().contains("priority must be 0..=7"), "{e}");
    assert_eq!(counts(&q), [0, 0, 0, 0, 0]);
}

/// Starvation and the aging rule. Under a sustained level-7 load (ten level-7 jobs always
/// ready, one more enqueued per claim) a level-0 job is never served by strict priority; with
/// aging 60 s it is served once it is 7 × 60 s old. The clock moves 1 s per claim, so that is
/// claim 421 (420 level-7 claims before it).
#[test]
fn aging_serves_a_low_priority_job_under_sustained_high_load() {
    // (claims until the job was served, its age then, its age at the claim before), ms.
    let served = |aging: Option<Duration>, level: u8, claims: u32| -> Option<(u32, u64, u64)> {
        let d = TempDir::new("prio-aging");
        let o = Options { aging, ..fast(4) };
        let q = Queue::create(d.path(), o).unwrap();
        let low = q.enqueue_with(b"low", &at(level)).unwrap().id();
        for _ in 0..10 {
            q.enqueue_with(b"high", &at(7)).unwrap().id();
        }
        let mut before = 0;
        for n in 1..=claims {
            q.clock().shift_wall(1_000_000_000);
            q.enqueue_with(b"high", &at(7)).unwrap().id();
            let age = q.clock().wall_ns() / 1_000_000 - low.unix_ms();
            let l = q.claim().unwrap().unwrap();
            let (id, p) = (l.id(), l.priority());
            l.ack().unwrap();
            if id == low {
                return Some((n, age, before));
            }
            assert_eq!(p, 7, "a level-7 job, or the low one");
            before = age;
        }
        None
    };
    assert_eq!(
        served(None, 0, 1500),
        None,
        "strict priority starves level 0"
    );
    let a = Some(Duration::from_secs(60));
    for (level, due_s) in [(0u8, 420u64), (4, 180)] {
        let (n, age, before) = served(a, level, 1500).expect("aging serves it");
        eprintln!(
            "aging 60s: the level-{level} job was served at claim {n}, aged {age} ms (1 s of \
             clock per claim; real time adds a little)"
        );
        // Served at the first claim at which it had aged (7 - level) x 60 s.
        assert!(
            age >= due_s * 1000 && before < due_s * 1000,
            "{n} {age} {before}"
        );
    }
}

/// Item 4's bound, measured: with 8 shards, one claiming handle never passes over the oldest
/// ready job of the top level, also when jobs come back with their old ids (releases, i.e.
/// `nack(0)`, and dropped leases) while the handle holds newer candidates. The figure: the
/// largest number of claims that passed over a job while it was the oldest ready job.
#[test]
fn no_claim_passes_over_the_oldest_ready_job_across_shards() {
    let d = TempDir::new("prio-bound");
    let o = Options {
        max_attempts: 1_000_000, // releases count attempts
        ..fast(8)
    };
    let q = Queue::create(d.path(), o).unwrap();
    // The model: ready job ids (all at the default level).
    let mut ready: std::collections::BTreeSet<JobId> = Default::default();
    let mut passed: std::collections::HashMap<JobId, u32> = Default::default();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut claims = 0;
    for _ in 0..600 {
        ready.insert(q.enqueue(b"j").unwrap());
    }
    while let Some(oldest) = ready.first().copied() {
        let Some(l) = q.claim().unwrap() else {
            let r = q.list(Some(State::Ready)).unwrap();
            let again: Vec<_> = ready.iter().map(|id| q.find(*id).map(|l| l.name)).collect();
            panic!("claim {claims}: none, but {r:?} ready; model {ready:?}; again {again:?}");
        };
        claims += 1;
        assert!(ready.remove(&l.id()), "claimed a job that was not ready");
        // Exception (c) of the bound: ids made in the same millisecond are ordered by their
        // random bits, so a new job enqueued in the millisecond of a held candidate can be
        // "older" than it without the handle knowing (seen under load, near the end).
        if l.id() != oldest && l.id().unix_ms() != oldest.unix_ms() {
            *passed.entry(oldest).or_default() += 1;
        }
        match next() % 10 {
            // Back with its old id, older than most candidates held.
            0 => {
                let id = l.id();
                assert_eq!(l.nack(Duration::ZERO).unwrap(), steadq::Nacked::Ready);
                ready.insert(id);
            }
            1 => {
                let id = l.id();
                drop(l);
                ready.insert(id);
            }
            2..=3 => {
                ready.insert(q.enqueue(b"new").unwrap());
                l.ack().unwrap();
            }
            _ => drop(l.ack().unwrap()),
        }
        if claims > 5000 {
            break;
        }
    }
    let worst = passed.values().copied().max().unwrap_or(0);
    eprintln!("{claims} claims over 8 shards; largest pass-over of the oldest ready job: {worst}");
    // The bound holds for a handle with its inotify watches. Where the per-user instance
    // limit is low (Debian's default is 128) and the whole suite runs beside this test, a
    // handle can be left without them: exception (b), a returning job waits at most the
    // 256 candidates of its slot. `.ci/run` raises the limit, so CI checks the exact bound.
    let instances: u32 = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let bound = if instances >= 1024 { 0 } else { 256 };
    assert!(
        worst <= bound,
        "{worst} > {bound} ({instances} instances): {passed:?}"
    );
}

/// The CLI: `enqueue --priority N`, `list` shows the level, `status` (text, JSON, Prometheus)
/// shows ready depth per level, a bad level is refused naming `priority` with the queue
/// unchanged, `work --aging` and `claim --aging` are taken.
#[test]
fn the_cli_enqueues_lists_and_counts_by_priority() {
    let run = |args: &[&str], input: &[u8]| {
        let o = steadq_in(args, input);
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (o.status.code(), text(&o.stdout), text(&o.stderr))
    };
    let d = TempDir::new("prio-cli");
    let q = d.path().to_str().unwrap();
    assert_eq!(run(&["init", q], b"").0, Some(0));
    assert_eq!(run(&["enqueue", q, "--priority", "7"], b"a").0, Some(0));
    assert_eq!(run(&["enqueue", q, "--priority", "7"], b"b").0, Some(0));
    assert_eq!(run(&["enqueue", q], b"c").0, Some(0));
    // Out of range: refused at parsing, naming the option and the value (exit 1, bad usage).
    // The input is larger than a pipe holds, so the writer always sees the pipe closed by a
    // child that exits without reading it (common::feed takes that as the child's answer).
    let (code, _, err) = run(&["enqueue", q, "--priority", "9"], &vec![b'd'; 256 * 1024]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("'--priority' with value '9': a priority is 0..=7"),
        "{err}"
    );
    let (_, out, _) = run(&["status", q], b"");
    assert!(out.contains("ready by priority  7:2 3:1\n"), "{out}");
    let (_, out, _) = run(&["status", q, "--json"], b"");
    assert!(
        out.contains(r#""ready_by_priority":[0,0,0,1,0,0,0,2]"#),
        "{out}"
    );
    let (_, out, _) = run(&["status", q, "--prometheus"], b"");
    assert!(out.contains(",priority=\"7\"} 2\n"), "{out}");
    let (_, out, _) = run(&["list", q], b"");
    assert_eq!(out.matches(" prio 7 ").count(), 2, "{out}");
    assert_eq!(out.matches(" prio 3 ").count(), 1, "{out}");
    assert_eq!(out.matches("prio/7/").count(), 2, "{out}");
    // The two level-7 jobs first, then the default one.
    let (code, h, err) = run(&["claim", q, "--aging", "60s"], b"");
    assert_eq!(code, Some(0), "{err}");
    assert!(h.contains(".p7."), "{h}");
    let (code, _, err) = run(&["work", q, "--once", "--aging", "1m", "--", "true"], b"");
    assert_eq!(code, Some(0), "{err}");
    let st = Queue::open(d.path()).unwrap().status().unwrap();
    assert_eq!(st.ready_by_priority, [0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!((st.leased, st.acked), (1, 1));
}

/// Within a shard the oldest ready job goes first, also past the 256 names one listing keeps:
/// a listing reads the whole directory and keeps the oldest, whatever order the filesystem
/// lists names in.
#[test]
fn within_a_shard_the_oldest_ready_job_goes_first_at_any_depth() {
    let d = TempDir::new("prio-depth");
    let q = Queue::create(d.path(), fast(1)).unwrap();
    let ids: Vec<JobId> = (0..700).map(|_| q.enqueue(b"j").unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    let mut got = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        got.push(l.id());
        l.ack().unwrap();
    }
    assert_eq!(got, sorted);
}

/// Deep slots (more ready jobs than a listing keeps as candidates) are listed one per claim,
/// so a new handle's first claim reads one slot, not the whole level: the price is that a
/// claim may pass over the oldest ready job while its slot is not yet listed, fewer than
/// `shards` times. Fails if the rule were dropped for "list only the first slot" (unbounded)
/// or if deep slots were never relisted.
#[test]
#[ignore = "slow tier: 2,400 jobs claimed one by one through a fresh handle (~15 s)"]
fn deep_slots_pass_over_the_oldest_job_fewer_than_shards_times() {
    let d = TempDir::new("prio-deep");
    let shards = 8u16;
    let q = Queue::create(d.path(), fast(shards)).unwrap();
    let mut ready: std::collections::BTreeSet<JobId> = Default::default();
    for _ in 0..(shards as usize * 300) {
        ready.insert(q.enqueue(b"x").unwrap());
    }
    let fresh = Queue::open(d.path()).unwrap();
    let (mut worst, mut run, mut oldest) = (0u32, 0u32, None);
    while let Some(l) = fresh.claim().unwrap() {
        let first = *ready.first().unwrap();
        if oldest != Some(first) {
            (oldest, run) = (Some(first), 0);
        }
        if l.id() != first {
            run += 1;
            worst = worst.max(run);
        }
        assert!(ready.remove(&l.id()));
        l.ack().unwrap();
    }
    assert!(ready.is_empty(), "every job was claimed");
    eprintln!(
        "{} deep-slot claims; largest pass-over: {worst}",
        shards as usize * 300
    );
    assert!(worst < shards as u32, "passed over {worst} times");
}

/// A due delayed job (a retry after nack, or `--delay`) of a high level is claimed before
/// ready jobs of a lower level: a claiming handle makes due jobs ready before it looks at the
/// ready ones (at most every 100 ms). Found by a fresh-user trial: a one-shot `claim` took
/// every level-0 job before a due level-7 one. Fails without `promote_due_first`.
#[test]
fn a_due_delayed_job_is_claimed_before_lower_levels() {
    let d = TempDir::new("prio-due");
    let q = Queue::create(d.path(), fast(4)).unwrap();
    let urgent = q
        .enqueue_with(
            b"D7",
            &EnqueueOptions {
                priority: Some(7),
                delay: Some(Duration::from_secs(1)),
                ..Default::default()
            },
        )
        .unwrap()
        .id();
    for _ in 0..3 {
        q.enqueue_with(b"L0", &at(0)).unwrap().id();
    }
    q.clock().shift_wall(2_000_000_000);
    q.clock().shift_boot(2_000_000_000);
    let first = q.claim().unwrap().unwrap();
    assert_eq!((first.id(), first.priority()), (urgent, 7));
    first.ack().unwrap();
    // The same for a job nacked with a delay by a handle that has claimed meanwhile.
    let l = q.claim().unwrap().unwrap();
    assert_eq!(l.priority(), 0);
    let retry = q.enqueue_with(b"R7", &at(7)).unwrap().id();
    let r = q.claim().unwrap().unwrap();
    assert_eq!(r.id(), retry);
    r.nack(Duration::from_secs(1)).unwrap();
    l.ack().unwrap();
    q.clock().shift_wall(2_000_000_000);
    q.clock().shift_boot(2_000_000_000);
    let next = q.claim().unwrap().unwrap();
    assert_eq!((next.id(), next.priority()), (retry, 7));
}

/// A level's directories are made by its first job, not at init. A handle that looked at a
/// level before it existed (a claim that found nothing: the missing slots known empty) still
/// finds a job another handle places there later, in every shard.
#[test]
fn a_claim_finds_a_job_at_a_level_made_after_it_last_looked() {
    let d = TempDir::new("prio-lazy");
    let q = Queue::create(d.path(), opts(4)).unwrap();
    assert!(!d.path().join("prio").exists(), "prio/ made at init");
    assert!(q.claim().unwrap().is_none());
    let other = Queue::open(d.path()).unwrap();
    let mut ids = Vec::new();
    for _ in 0..16 {
        ids.push(other.enqueue_with(b"x", &at(6)).unwrap().id());
    }
    ids.sort();
    let mut got = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        assert_eq!(l.priority(), 6);
        got.push(l.id());
        l.ack().unwrap();
    }
    assert_eq!(got, ids, "every level-6 job, oldest first");
    assert!(
        !d.path().join("prio/5").exists(),
        "only the level used is made"
    );
}

/// A worker blocked in a waiting claim wakes for a job enqueued at a level whose directories
/// did not exist when it started waiting (it watches the directories on the way to them).
#[test]
fn a_waiting_claim_wakes_for_a_job_at_a_level_made_while_it_waits() {
    let d = TempDir::new("prio-lazy-wait");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    assert!(!d.path().join("prio").exists());
    let waiter = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        let l = q.claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            wait: Some(Duration::from_secs(20)),
            ..Default::default()
        });
        (l.unwrap().map(|l| (l.priority(), l.id())), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(700));
    let id = Queue::open(d.path())
        .unwrap()
        .enqueue_with(b"x", &at(1))
        .unwrap()
        .id();
    let (got, took) = waiter.join().unwrap();
    assert_eq!(got, Some((1, id)));
    assert!(took < Duration::from_secs(10), "woke only after {took:?}");
}

/// fsck of a new queue reports nothing (the levels' directories are not made yet, which is
/// not a problem), nor after one level's first job; a missing `ready/<ss>` or `receipts/<ss>`
/// is still an incomplete queue.
#[test]
fn fsck_of_a_new_queue_reports_nothing_and_a_missing_shard_is_still_found() {
    let d = TempDir::new("prio-lazy-fsck");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    assert!(!d.path().join("prio").exists());
    let r = q.fsck().unwrap();
    assert!(r.clean(), "{:?}", r.problems);
    q.enqueue_with(b"x", &at(0)).unwrap().id();
    let r = q.fsck().unwrap();
    assert!(r.clean(), "{:?}", r.problems);
    assert_eq!(r.verified, 1);
    drop(q);
    for gone in ["ready/01", "receipts/00"] {
        std::fs::remove_dir(d.path().join(gone)).unwrap();
        let e = Queue::open(d.path()).unwrap_err();
        assert_eq!(*e.kind(), ErrorKind::Incomplete, "{gone}: {e}");
        assert!(e.path().is_some_and(|p| p.ends_with(gone)), "{gone}: {e}");
        drop(Queue::create(d.path(), opts(2)).unwrap());
    }
}
