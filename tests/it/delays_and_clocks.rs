//! Delayed jobs and the clocks they follow: due delays taken by plain and waiting claims,
//! made due now, the boot clock within one boot and the wall clock across boots.

use crate::common::*;
use std::time::{Duration, Instant};
use steadq::Queue;

/// A plain claim (no waiting) that finds nothing ready makes a due delayed job ready first.
#[test]
fn plain_claim_takes_a_due_delayed_job() {
    let d = TempDir::new("strand-delay");
    let q = Queue::create(d.path(), opts(4)).unwrap();
    delayed(&q, b"later", Duration::from_secs(5));
    assert!(q.claim().unwrap().is_none(), "not due yet");
    q.clock().shift_wall(6_000_000_000);
    q.clock().shift_boot(6_000_000_000);
    let l = q
        .claim()
        .unwrap()
        .expect("due job claimed without a recover");
    assert_eq!(l.payload().unwrap(), b"later");
    assert_eq!(l.attempt(), 1);
}

/// A delayed job enqueued by another handle while a claim waits is returned when due.
#[test]
fn claim_wait_learns_a_delayed_job_enqueued_while_it_waits() {
    let d = TempDir::new("wait-learn");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let t = Instant::now();
    let l = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            delayed(
                &Queue::open(d.path()).unwrap(),
                b"x",
                Duration::from_secs(1),
            );
        });
        q.claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            wait: Some(Duration::from_secs(20)),
            ..Default::default()
        })
        .unwrap()
    });
    let took = t.elapsed();
    assert!(l.is_some());
    assert!(took < Duration::from_secs(12), "returned after {took:?}");
}

/// The oldest ready job's age counts from when it became ready, not from enqueue: a delayed
/// job that just fell due does not look like a backlog.
#[test]
fn oldest_ready_age_counts_from_when_the_job_became_ready() {
    let d = TempDir::new("age");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    delayed(&q, b"x", Duration::from_millis(1000));
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(q.recover().into_result().unwrap().due, 1);
    let age = q.status().unwrap().oldest_ready_age.unwrap().as_nanos() as u64;
    assert!(
        age < 1_000_000_000,
        "age {age} ns; the job has been ready for about 0 s"
    );
}

/// A retry delay set while the wall clock was a year ahead: `recover --due-now` makes the job
/// ready now (and only delayed jobs move).
#[test]
fn delayed_jobs_can_be_made_due_now() {
    let d = TempDir::new("due-now");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    delayed(&q, b"a year away", Duration::from_secs(365 * 86400));
    q.enqueue(b"ready anyway").unwrap();
    assert_eq!(q.recover().into_result().unwrap().due, 0);
    assert_eq!(counts(&q), [1, 0, 1, 0, 0]);
    let out = run(&["recover", d.path().to_str().unwrap(), "--due-now"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("made due now 1"));
    assert_eq!(counts(&q), [2, 0, 0, 0, 0]);
    assert!(
        q.make_due(Some(steadq::JobId(7))).unwrap_err().kind() == &steadq::ErrorKind::NoSuchJob
    );
}

/// Stamp the bucket directories under `delayed/` with `when`, as the kernel would have when
/// the wall clock read that (the test clock's shift does not reach the filesystem).
fn stamp_buckets(root: &std::path::Path, when: std::time::SystemTime) {
    for b in std::fs::read_dir(root.join("delayed")).unwrap() {
        let f = std::fs::File::open(b.unwrap().path()).unwrap();
        f.set_modified(when).unwrap();
    }
}

/// Within one boot a retry delay follows the boot clock: a wall clock a day ahead does not run
/// it early, and one set a year ahead and then corrected does not strand it for a year.
#[test]
fn delays_follow_the_boot_clock_when_the_wall_clock_jumps() {
    const SEC: i64 = 1_000_000_000;
    const DAY: i64 = 86_400 * SEC;
    let d = TempDir::new("walljump");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    q.enqueue(b"retry me").unwrap();
    q.claim()
        .unwrap()
        .unwrap()
        .nack(Duration::from_secs(60))
        .unwrap();
    q.clock().shift_wall(DAY);
    assert_eq!(
        q.recover().into_result().unwrap().due,
        0,
        "a day of wall clock is not 60 s"
    );
    assert!(q.claim().unwrap().is_none());
    q.clock().shift_boot(61 * SEC);
    let l = q.claim().unwrap().expect("due after 60 s of boot clock");
    q.clock().shift_wall(-DAY);

    // The wall clock is a year ahead when the retry is set; then NTP corrects it.
    q.clock().shift_wall(365 * DAY);
    l.nack(Duration::from_secs(60)).unwrap();
    let ahead = std::time::UNIX_EPOCH + Duration::from_nanos(q.clock().wall_ns());
    stamp_buckets(d.path(), ahead);
    q.clock().shift_wall(-365 * DAY);
    assert_eq!(
        q.recover().into_result().unwrap().due,
        0,
        "not before its 60 s"
    );
    q.clock().shift_boot(61 * SEC);
    assert_eq!(
        q.recover().into_result().unwrap().due,
        1,
        "60 s later, not a year later"
    );
    assert_eq!(q.claim().unwrap().unwrap().attempt(), 3);
}

/// A delay set on another boot follows the wall clock (the boot clock restarted).
#[test]
fn a_delay_from_another_boot_follows_the_wall_clock() {
    const SEC: i64 = 1_000_000_000;
    let d = TempDir::new("otherboot");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    delayed(&q, b"later", Duration::from_secs(60));
    let l = &q.list(Some(steadq::State::Delayed)).unwrap()[0];
    let steadq::Kind::Delayed {
        not_before_ns,
        boot: Some(b),
    } = l.name.kind
    else {
        panic!("a version-2 delayed name carries the boot: {:?}", l.name)
    };
    assert_eq!(b.boot_id, q.clock().boot_id());
    // The same job as the previous boot left it: another boot id, a boot-clock time far off.
    let mut other = l.name;
    other.kind = steadq::Kind::Delayed {
        not_before_ns,
        boot: Some(steadq::BootDue {
            boot_id: b.boot_id ^ 1,
            not_before_boot_ns: u64::MAX / 2,
        }),
    };
    let dir = d.path().join(&l.dir);
    std::fs::rename(
        dir.join(l.name.format(q.id()).as_str()),
        dir.join(other.format(q.id()).as_str()),
    )
    .unwrap();
    assert_eq!(q.recover().into_result().unwrap().due, 0);
    q.clock().shift_wall(61 * SEC);
    assert_eq!(
        q.recover().into_result().unwrap().due,
        1,
        "the wall clock decides"
    );
}
