//! Field faults of the clocks and of the mounts under a queue: delayed jobs stranded by a
//! wall-clock step back, and a queue whose directories span filesystems.

use crate::common::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use steadq::{delay_due, EnqueueOptions, Queue, State};

const SEC: i64 = 1_000_000_000;
const YEAR: i64 = 365 * 86_400 * SEC;

fn delayed(q: &Queue, payload: &[u8], delay: Duration) {
    q.enqueue_with(
        payload,
        &EnqueueOptions {
            delay: Some(delay),
            ..Default::default()
        },
    )
    .unwrap()
    .id();
}

/// Shift `q`'s wall clock about a year ahead, to 1 s into a delayed bucket, so that delays of
/// up to 50 s set now land in that one bucket.
fn a_year_ahead_at_a_bucket_start(q: &Queue) {
    let width = steadq::Options::default().delayed_bucket_ns as i64;
    let ahead = q.clock().wall_ns() as i64 + YEAR;
    q.clock().shift_wall(YEAR + (width - ahead % width) + SEC);
}

/// Stamp the bucket directories under `delayed/` with `when`, as the kernel does when a job
/// is linked into them while the wall clock reads that (the test clock's shift does not
/// reach the filesystem).
fn stamp_buckets(root: &std::path::Path, when: SystemTime) {
    for b in std::fs::read_dir(root.join("delayed")).unwrap() {
        let f = std::fs::File::open(b.unwrap().path()).unwrap();
        f.set_modified(when).unwrap();
    }
}

/// Delayed jobs set while the wall clock was a year ahead, then corrected: within one boot
/// each is due at its boot-clock time, for a long-lived handle (recover), a fresh one (claim,
/// list) alike, whatever the bucket's mtime. Moving the first due job out of the bucket sets
/// its mtime to now; the second and third must not wait a year for the wall clock.
#[test]
fn delayed_jobs_in_a_later_bucket_follow_the_boot_clock_whatever_its_mtime() {
    let d = TempDir::new("later-bucket");
    let a = Queue::create(d.path(), opts(1)).unwrap();
    a_year_ahead_at_a_bucket_start(&a);
    // Boot-clock not-befores of 1 s, 20 s and 30 s from the real boot clock now.
    a.clock().shift_boot(-10 * SEC);
    delayed(&a, b"first", Duration::from_secs(11));
    delayed(&a, b"second", Duration::from_secs(30));
    delayed(&a, b"third", Duration::from_secs(40));
    let listed = a.list(Some(State::Delayed)).unwrap();
    assert_eq!(listed.len(), 3);
    assert!(
        listed.iter().all(|l| l.dir == listed[0].dir),
        "one bucket: {listed:?}"
    );
    let ahead = UNIX_EPOCH + Duration::from_nanos(a.clock().wall_ns());
    stamp_buckets(d.path(), ahead);
    drop(a);

    // A long-lived handle on the corrected clocks.
    let b = Queue::open(d.path()).unwrap();
    b.clock().shift_boot(2 * SEC);
    let r = b.recover().into_result().unwrap();
    assert_eq!(r.due, 1, "the first job is due by the boot clock");
    let wall = b.clock().wall_ns();
    let next = r.next_due_wall_ns.expect("the second job's due time");
    assert!(
        (wall + 17 * SEC as u64..wall + 20 * SEC as u64).contains(&next),
        "the second job is due in about 19 s, not in a year: {next} - {wall}"
    );
    let l = b.claim().unwrap().expect("the first job");
    assert_eq!(l.payload().unwrap(), b"first");
    l.ack().unwrap();

    b.clock().shift_boot(19 * SEC);
    let r = b.recover().into_result().unwrap();
    assert_eq!(
        r.due, 1,
        "the second job is due 20 s later by the boot clock"
    );
    let next = r.next_due_wall_ns.expect("the third job's due time");
    let wall = b.clock().wall_ns();
    assert!(
        (wall + 8 * SEC as u64..wall + 11 * SEC as u64).contains(&next),
        "the third job is due in about 10 s: {next} - {wall}"
    );
    let l = b.claim().unwrap().expect("the second job");
    assert_eq!(l.payload().unwrap(), b"second");
    l.ack().unwrap();

    // A fresh handle (a one-shot `steadq claim`): what list calls due, claim takes.
    let c = Queue::open(d.path()).unwrap();
    c.clock().shift_boot(31 * SEC);
    let listed = c.list(Some(State::Delayed)).unwrap();
    assert_eq!(listed.len(), 1);
    let k = c.clock();
    assert!(delay_due(
        &listed[0].name.kind,
        k.boot_id(),
        k.boot_ns(),
        k.wall_ns()
    ));
    let l = c
        .claim()
        .unwrap()
        .expect("list says the third job is due: claim takes it");
    assert_eq!(l.payload().unwrap(), b"third");
}

/// A waiting claim whose wall clock is stepped back while it waits: the due time it kept on
/// the wall clock is a year late, and the job it waits for is due by the boot clock in 1 s.
#[test]
fn a_waiting_claim_follows_a_wall_clock_step_back() {
    let d = TempDir::new("wait-step");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    a_year_ahead_at_a_bucket_start(&q);
    delayed(&q, b"retry", Duration::from_millis(1500));
    let w = q.clone();
    let waiter = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        let l = w
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                wait: Some(Duration::from_secs(4)),
                ..Default::default()
            })
            .unwrap();
        (l.map(|l| l.payload().unwrap().to_vec()), t.elapsed())
    });
    // The waiter's first listing is inside claim_wait: nothing to poll for.
    std::thread::sleep(Duration::from_millis(300));
    q.clock().shift_wall(-YEAR);
    let (got, took) = waiter.join().unwrap();
    assert_eq!(got.as_deref(), Some(&b"retry"[..]), "after {took:?}");
    assert!(took < Duration::from_millis(2500), "took {took:?}");
}

/// Unmounts its directory when dropped.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = crate::filesystems::sh("umount", &[self.0.to_str().unwrap()]);
    }
}

/// A queue whose `receipts/` is another filesystem (a tmpfs mounted there, its shards made
/// again in it): every ack would fail with `EXDEV`. Open and create refuse it naming
/// `receipts`, before any job can run; fsck reports it (exit 5).
#[test]
fn a_queue_split_across_filesystems_is_refused_and_reported() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("SKIP a_queue_split_across_filesystems_is_refused_and_reported: needs root");
        return;
    }
    let d = TempDir::new("split-fs");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    q.enqueue(b"the job").unwrap();
    drop(q);
    let receipts = d.path().join("receipts");
    let shards: Vec<_> = std::fs::read_dir(&receipts)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    crate::filesystems::sh(
        "mount",
        &[
            "-t",
            "tmpfs",
            "-o",
            "size=4m",
            "sq-split",
            receipts.to_str().unwrap(),
        ],
    )
    .unwrap();
    let _m = Mounted(receipts.clone());
    for s in &shards {
        std::fs::create_dir(receipts.join(s)).unwrap();
    }
    let want = format!("{}: on another filesystem (st_dev ", receipts.display());
    for e in [
        Queue::open(d.path()).unwrap_err(),
        Queue::create(d.path(), opts(2)).unwrap_err(),
    ] {
        assert!(
            matches!(e.kind(), steadq::ErrorKind::OtherFilesystem { dev, root_dev } if dev != root_dev),
            "{e:?}"
        );
        assert_eq!(e.outcome(), steadq::Outcome::NotDone);
        let msg = e.to_string();
        assert!(msg.starts_with(&want), "{msg}");
        assert!(msg.contains("a queue must be on one filesystem"), "{msg}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_steadq"))
        .args(["fsck", d.path().to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert!(
        text.contains("receipts: on another filesystem (st_dev "),
        "{text}"
    );
    let st = Queue::open_with(
        d.path(),
        steadq::Options {
            mode: steadq::OpenMode::Check,
            ..Default::default()
        },
    )
    .unwrap()
    .fsck()
    .unwrap();
    assert_eq!(st.problems.len(), 1, "{:?}", st.problems);
    assert_eq!(st.problems[0].path, "receipts");
}

/// `steadq` run by `unshare --time --boottime <shift_s>` (`time_namespaces(7)`): a process
/// whose `CLOCK_BOOTTIME` reads `shift_s` seconds off the host's, with the host's boot id.
/// `None` where time namespaces cannot be made (no CAP_SYS_ADMIN, a kernel without them).
fn steadq_in_time_namespace(shift_s: i64, args: &[&str]) -> Option<std::process::Output> {
    let probe = std::process::Command::new("unshare")
        .args(["--time", "--boottime", &shift_s.to_string(), "true"])
        .output()
        .ok()?;
    if !probe.status.success() {
        eprintln!("skipped: unshare --time: {}", text(&probe.stderr));
        return None;
    }
    let o = std::process::Command::new("unshare")
        .args(["--time", "--boottime", &shift_s.to_string()])
        .arg(env!("CARGO_BIN_EXE_steadq"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    Some(o)
}

/// Seconds since boot, from `/proc/uptime`.
fn uptime_s() -> f64 {
    let t = std::fs::read_to_string("/proc/uptime").unwrap();
    t.split_whitespace().next().unwrap().parse().unwrap()
}

/// A lease taken in a time namespace whose boot clock runs 20 s behind the host's: its
/// 10-minute lease must look live to the host (it looked 10 s past expiry, so the host took
/// the job while its holder ran it), and the holder's ack from inside the namespace is done.
#[test]
fn a_lease_taken_in_a_time_namespace_behind_the_host_is_live_to_the_host() {
    if uptime_s() < 60.0 {
        eprintln!("skipped: the boot clock must read more than 60 s to be shifted back 20 s");
        return;
    }
    let d = TempDir::new("timens-behind");
    let q = p(d.path());
    assert!(steadq(&["init", q]).status.success());
    let o = steadq_in(&["enqueue", q], b"job");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let Some(o) = steadq_in_time_namespace(-20, &["claim", q, "--lease", "10s"]) else {
        return;
    };
    assert!(o.status.success(), "{}", text(&o.stderr));
    let handle = text(&o.stdout).trim().to_string();
    let host = steadq(&["claim", q, "--lease", "10s"]);
    assert_eq!(
        host.status.code(),
        Some(3),
        "the host took a job whose lease is live: {}",
        text(&host.stdout)
    );
    let ack = steadq_in_time_namespace(-20, &["ack", q, &handle]).unwrap();
    assert!(ack.status.success(), "{}", text(&ack.stderr));
}

/// A lease taken in a time namespace whose boot clock runs an hour ahead of the host's: a
/// 1-second lease must lapse for the host after about a second (it stuck for an hour).
#[test]
fn a_lease_taken_in_a_time_namespace_ahead_of_the_host_lapses_on_time() {
    let d = TempDir::new("timens-ahead");
    let q = p(d.path());
    assert!(steadq(&["init", q]).status.success());
    let o = steadq_in(&["enqueue", q], b"job");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let Some(o) = steadq_in_time_namespace(3600, &["claim", q, "--lease", "1s"]) else {
        return;
    };
    assert!(o.status.success(), "{}", text(&o.stderr));
    let host = steadq(&["claim", q, "--lease", "10s", "--wait", "5s"]);
    assert_eq!(
        host.status.code(),
        Some(0),
        "the host could not take the job whose 1 s lease lapsed: {}",
        text(&host.stderr)
    );
}
