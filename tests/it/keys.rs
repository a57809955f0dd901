//! Idempotency keys (`keys/<sha256>`, `crates/steadq/src/ops/keys.rs`): one job per key, duplicates named,
//! across processes and across crashes (a key left without its job is retired, not obeyed).

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::Duration;
use steadq::sys::{Call, Fault, FaultAction, FaultPlan};
use steadq::*;

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

fn keyed(k: &str) -> EnqueueOptions {
    EnqueueOptions {
        key: Key::new(k),
        ..Default::default()
    }
}

#[test]
fn one_job_per_key_and_duplicates_name_it() {
    let d = TempDir::new("keys-one");
    let q = Queue::create(d.path(), fast(2)).unwrap();
    let first = q.enqueue_with(b"charge 1", &keyed("order-1")).unwrap();
    assert!(!first.is_duplicate());
    let again = q.enqueue_with(b"charge 1", &keyed("order-1")).unwrap();
    assert_eq!(again, Enqueued::Duplicate(first.id()));
    // enqueue_with with a key returns the same id.
    assert_eq!(
        q.enqueue_with(b"x", &keyed("order-1")).unwrap().id(),
        first.id()
    );
    let other = q.enqueue_with(b"charge 2", &keyed("order-2")).unwrap();
    assert_ne!(other.id(), first.id());
    assert_eq!(q.live_keys().unwrap(), 2);
    assert_eq!(q.status().unwrap().live_keys, 2);
    // Claimed, then acked: still a duplicate within the retention window.
    while let Some(l) = q.claim().unwrap() {
        l.ack().unwrap();
    }
    assert_eq!(
        q.enqueue_with(b"charge 1", &keyed("order-1")).unwrap(),
        Enqueued::Duplicate(first.id())
    );
    // A delayed keyed job.
    let later = EnqueueOptions {
        delay: Some(Duration::from_secs(600)),
        ..keyed("report-7")
    };
    let r = q.enqueue_with(b"r", &later).unwrap();
    assert_eq!(
        q.enqueue_with(b"r", &later).unwrap(),
        Enqueued::Duplicate(r.id())
    );
    // Retention: nothing younger than a day goes; with zero retention the settled keys go,
    // the key of the live (delayed) job stays.
    assert_eq!(q.compact_keys(Duration::from_secs(86_400)).unwrap(), 0);
    assert_eq!(q.compact_keys(Duration::ZERO).unwrap(), 2);
    assert_eq!(q.live_keys().unwrap(), 1);
    let n = q.enqueue_with(b"charge 1", &keyed("order-1")).unwrap();
    assert!(!n.is_duplicate(), "an expired key enqueues anew");
    assert!(q.fsck().unwrap().clean(), "keys/ belongs");
    // Tombstones are listed with ls and removed after an hour.
    let gone = std::fs::read_dir(d.path().join(KEYS_DIR))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".gone")
        })
        .count();
    assert_eq!(gone, 2);
    q.clock().shift_wall(2 * 3600 * 1_000_000_000);
    q.compact_keys(Duration::from_secs(365 * 86_400)).unwrap();
    assert_eq!(
        std::fs::read_dir(d.path().join(KEYS_DIR)).unwrap().count(),
        2
    );
}

#[test]
fn keys_are_checked() {
    assert!(Key::new("").is_none());
    assert!(Key::new(&"k".repeat(129)).is_none());
    assert!(Key::new("a/b").is_none());
    assert!(Key::new(&"k".repeat(128)).is_some());
}

/// 8 processes (the CLI) race to enqueue each of 6 keys: one job per key, every process
/// printing that job's id, the others told "duplicate" on stderr with exit 0.
#[test]
fn keys_dedup_across_processes() {
    let d = TempDir::new("keys-procs");
    let dir = d.path().to_str().unwrap().to_string();
    Queue::create(d.path(), opts(4)).unwrap();
    let keys = ["a", "b", "c", "d", "e", "f"];
    let mut kids = Vec::new();
    for p in 0..8 {
        for k in keys {
            let c = Command::new(BIN)
                .args(["enqueue", &dir, "--key", k])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            kids.push((k, p, c));
        }
    }
    let mut ids: std::collections::HashMap<&str, Vec<String>> = Default::default();
    let mut dups = 0;
    for (k, p, mut c) in kids {
        use std::io::Write;
        let _ = c
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{k} from {p}").as_bytes());
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{:?}", out);
        if String::from_utf8_lossy(&out.stderr).contains("duplicate") {
            dups += 1;
        }
        ids.entry(k)
            .or_default()
            .push(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    let q = Queue::open(d.path()).unwrap();
    assert_eq!(q.list(None).unwrap().len(), keys.len(), "one job per key");
    for (k, v) in &ids {
        assert!(v.iter().all(|i| i == &v[0]), "key {k}: {v:?}");
    }
    assert_eq!(dups, 8 * keys.len() - keys.len());
    summary(&format!(
        "keys: 8 processes x {} keys -> {} jobs, {dups} duplicates answered with the first id",
        keys.len(),
        keys.len()
    ));
}

/// A crash (a simulated stop) at every call of a keyed enqueue, then a retry from a fresh
/// handle: the retry enqueues when no job was published and names the job when one was;
/// never two jobs, never a key that blocks.
#[test]
fn a_crash_at_any_step_then_a_retry_gives_one_job() {
    let (mut published, mut not) = (0, 0);
    let calls = {
        let d = TempDir::new("keys-trace");
        drop(Queue::create(d.path(), opts(1)).unwrap());
        let plan = FaultPlan::new(vec![]);
        let q = Queue::open_with(
            d.path(),
            Options {
                faults: Some(plan.clone()),
                ..opts(1)
            },
        )
        .unwrap();
        plan.reset_counts();
        q.enqueue_with(b"p", &keyed("k")).unwrap();
        plan.trace()
    };
    let mut seen: std::collections::HashMap<Call, u32> = Default::default();
    for call in calls {
        let n = seen.entry(call).or_default();
        *n += 1;
        let d = TempDir::new("keys-crash");
        drop(Queue::create(d.path(), opts(1)).unwrap());
        let plan = FaultPlan::disarmed(vec![Fault {
            call,
            nth: *n,
            action: FaultAction::StopAfter,
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
        let res = q.enqueue_with(b"p", &keyed("k"));
        drop(q);
        let fresh = Queue::open(d.path()).unwrap();
        let before = fresh.list(None).unwrap();
        let retry = fresh.enqueue_with(b"p", &keyed("k")).unwrap();
        let after = fresh.list(None).unwrap();
        assert_eq!(after.len(), 1, "{call:?}#{n}: {res:?} then {retry:?}");
        match before.as_slice() {
            [] => {
                assert!(!retry.is_duplicate(), "{call:?}#{n}");
                assert!(
                    !matches!(res, Ok(Enqueued::New(_))),
                    "{call:?}#{n}: done but no job"
                );
                not += 1;
            }
            [job] => {
                assert_eq!(retry, Enqueued::Duplicate(job.name.id), "{call:?}#{n}");
                if let Err(e) = &res {
                    assert_eq!(e.outcome(), Outcome::Indeterminate, "{call:?}#{n}: {e}");
                }
                published += 1;
            }
            more => panic!("{call:?}#{n}: two jobs {more:?}"),
        }
        assert!(fresh.fsck().unwrap().clean());
    }
    summary(&format!(
        "keys: a stop after each of the calls of a keyed enqueue, then a retry: {published} \
         stops after the job's link -> the retry named it; {not} before -> the retry enqueued; \
         never two jobs"
    ));
}

/// A key left by a producer that died before publishing (its pid is gone) is an orphan: the
/// next enqueue retires it at once; a key whose creator lives makes a duplicate wait.
#[test]
fn an_orphan_key_of_a_dead_process_is_retired() {
    let d = TempDir::new("keys-orphan");
    let q = Queue::create(d.path(), fast(1)).unwrap();
    let k = Key::new("job-9").unwrap();
    let dead = Command::new("true").spawn().unwrap();
    let pid = dead.id();
    let mut dead = dead;
    dead.wait().unwrap();
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let ns = ns.to_string_lossy();
    let ns = ns.trim_start_matches("pid:[").trim_end_matches(']');
    std::fs::create_dir_all(d.path().join(KEYS_DIR)).unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .replace('-', "");
    std::fs::write(
        d.path().join(KEYS_DIR).join(k.entry_name(q.id())),
        format!(
            "steadq-key 1\nkey=job-9\nid=0123456789abcdef0123456789abcdef\nname=-\ncreator={boot} {pid} {ns}\n"
        ),
    )
    .unwrap();
    let t = std::time::Instant::now();
    let r = q
        .enqueue_with(
            b"x",
            &EnqueueOptions {
                key: Some(k),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(!r.is_duplicate());
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "no wait for a dead creator"
    );
    assert!(d
        .path()
        .join(KEYS_DIR)
        .join(format!(
            "{}.0123456789abcdef0123456789abcdef.gone",
            k.entry_name(q.id())
        ))
        .exists());
}

/// A key whose job was acked and its receipt removed (receipt policy `none`; or compaction
/// under any policy) still names that job: it looked like an orphan (no job file anywhere),
/// was retired, and the same key enqueued a second job, which ran again (breaker: "charged
/// card" twice). The evidence log's line is the job's trace now.
#[test]
fn a_key_of_a_job_acked_without_a_receipt_still_names_it() {
    for (policy, compact) in [(ReceiptPolicy::None, false), (ReceiptPolicy::Job, true)] {
        let d = TempDir::new("keys-evidence");
        let o = Options {
            receipts: policy,
            ..fast(2)
        };
        let q = Queue::create(d.path(), o).unwrap();
        let first = q.enqueue_with(b"charge", &keyed("order-1234")).unwrap();
        let l = q.claim().unwrap().unwrap();
        assert_eq!(l.id(), first.id());
        l.ack().unwrap();
        if compact {
            assert_eq!(q.compact(Duration::ZERO).unwrap().removed, 1, "{policy}");
        }
        assert!(
            files(d.path(), "receipts").is_empty(),
            "{policy}: no receipt left"
        );
        // Another handle (a new process): nothing of this one's memory helps it.
        let q2 = Queue::open(d.path()).unwrap();
        assert_eq!(
            q2.enqueue_with(b"charge", &keyed("order-1234")).unwrap(),
            Enqueued::Duplicate(first.id()),
            "{policy}"
        );
        assert!(
            q2.claim().unwrap().is_none(),
            "{policy}: nothing to run again"
        );
        // Compaction does not take the key for an orphan either; retention still ends it.
        assert_eq!(q2.compact_keys(Duration::from_secs(86_400)).unwrap(), 0);
        assert_eq!(q2.compact_keys(Duration::ZERO).unwrap(), 1);
        assert!(!q2
            .enqueue_with(b"charge", &keyed("order-1234"))
            .unwrap()
            .is_duplicate());
    }
}

/// A torn last line of `evidence.log` (a power cut mid-append: a text fragment, or zeros a
/// filesystem exposed past the data that reached the disk) does not swallow the next ack's
/// line: the key of a job acked after the tear still names it, and fsck reports the tear.
#[test]
fn a_torn_evidence_tail_does_not_swallow_the_next_ack() {
    for torn in [&b"v1 01a24"[..], &[0u8; 16][..]] {
        let d = TempDir::new("keys-torn");
        let o = Options {
            receipts: ReceiptPolicy::None,
            ..fast(2)
        };
        let q = Queue::create(d.path(), o).unwrap();
        q.enqueue_with(b"a", &keyed("order-1")).unwrap();
        q.claim().unwrap().unwrap().ack().unwrap();
        let ev = d.path().join("evidence.log");
        let mut f = std::fs::OpenOptions::new().append(true).open(&ev).unwrap();
        std::io::Write::write_all(&mut f, torn).unwrap();
        drop(f);
        assert!(
            q.fsck()
                .unwrap()
                .problems
                .iter()
                .any(|p| p.path == "evidence.log"
                    && p.kind
                        == ProblemKind::TornEvidence {
                            lines: 0,
                            tail: torn.len() as u64
                        }),
            "fsck names the open tail"
        );
        let second = q.enqueue_with(b"b", &keyed("order-2")).unwrap();
        q.claim().unwrap().unwrap().ack().unwrap();
        let q2 = Queue::open(d.path()).unwrap();
        assert_eq!(
            q2.enqueue_with(b"b", &keyed("order-2")).unwrap(),
            Enqueued::Duplicate(second.id()),
            "{torn:?}"
        );
        let torn_lines: Vec<Problem> = q2
            .fsck()
            .unwrap()
            .problems
            .into_iter()
            .filter(|p| p.path == "evidence.log")
            .collect();
        assert_eq!(
            torn_lines,
            vec![Problem {
                path: "evidence.log".into(),
                kind: ProblemKind::TornEvidence { lines: 1, tail: 0 },
                quarantined: false
            }],
            "{torn:?}"
        );
    }
}

/// A key entry planted by a user who may write `keys/`, naming one of her live processes as
/// its creator (its age is its ctime, which she can refresh), made every `enqueue --key K`
/// wait up to KEY_ORPHAN_AFTER (10 minutes; for ever while refreshed). The wait is bounded
/// now (KEY_WAIT_MAX, 3 s): the enqueue fails not done (exit 2), naming the entry and the
/// pid it names, and nothing is enqueued.
#[test]
fn a_planted_key_entry_of_a_live_process_bounds_the_wait() {
    let d = TempDir::new("keys-planted");
    let q = Queue::create(d.path(), fast(1)).unwrap();
    let k = Key::new("pay-7").unwrap();
    let mut live = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = live.id();
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let ns = ns.to_string_lossy();
    let ns = ns.trim_start_matches("pid:[").trim_end_matches(']');
    std::fs::create_dir_all(d.path().join(KEYS_DIR)).unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .replace('-', "");
    let entry = k.entry_name(q.id());
    std::fs::write(
        d.path().join(KEYS_DIR).join(&entry),
        format!(
            "steadq-key 1\nkey=pay-7\nid=0123456789abcdef0123456789abcdef\nname=-\ncreator={boot} {pid} {ns}\n"
        ),
    )
    .unwrap();
    let t = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(["enqueue", d.path().to_str().unwrap(), "--key", "pay-7"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = t.elapsed();
    let _ = live.kill();
    let _ = live.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("gave up after {took:?}: {err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("keys/{entry}")), "{err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    assert!(err.contains("not done"), "{err}");
    assert!(took >= KEY_WAIT_MAX, "{took:?}");
    assert!(
        took < KEY_WAIT_MAX + Duration::from_millis(1500),
        "{took:?}"
    );
    assert_eq!(q.status().unwrap().ready, 0);
}
