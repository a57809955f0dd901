//! The public API's option structs and error type: what `enqueue_with`, `claim_with` and
//! `Options::mode` do with each option, and the error a read-only call returns.

#[allow(dead_code)] // each test target uses some of the helpers
mod support;

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use steadq::*;
use support::*;

/// A stop flag already set claims nothing, with or without a wait, and leaves the job ready;
/// a wait on an empty queue ends after about its length with `Ok(None)`.
#[test]
fn claim_with_stops_and_waits_as_its_options_say() {
    let d = TempDir::new("api-claim");
    let q = Queue::create(d.path(), fast(2)).unwrap();
    let id = q.enqueue(b"x").unwrap();
    let stop = AtomicBool::new(true);
    for wait in [None, Some(Duration::from_secs(5))] {
        let o = ClaimOptions {
            wait,
            stop: Some(&stop),
            ..Default::default()
        };
        let t = Instant::now();
        assert!(q.claim_with(&o).unwrap().is_none(), "wait {wait:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(counts(&q), [1, 0, 0, 0, 0], "the job is still ready");
    }
    // Not stopped: the job is claimed, with the lease asked for.
    let short = ClaimOptions {
        lease: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    let l = q.claim_with(&short).unwrap().unwrap();
    assert_eq!(l.id(), id);
    let _ = l.into_handle();
    assert_eq!(counts(&q), [0, 1, 0, 0, 0]);
    // An empty queue: a wait of 200 ms returns None after at least that long.
    let d2 = TempDir::new("api-claim-empty");
    let q2 = Queue::create(d2.path(), fast(1)).unwrap();
    let o = ClaimOptions {
        wait: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let t = Instant::now();
    assert!(q2.claim_with(&o).unwrap().is_none());
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    // A zero lease is refused, not done, naming the argument.
    let zero = ClaimOptions {
        lease: Some(Duration::ZERO),
        ..Default::default()
    };
    let e = q.claim_with(&zero).unwrap_err();
    assert!(matches!(e, Error::NotDone(_)), "{e:?}");
    assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)), "{e:?}");
}

/// `enqueue_with` answers a taken key with `Duplicate` (nothing enqueued), and with
/// `EnqueueOptions::wait` waits for room on a full queue: `QueueFull` (not done) after the
/// wait when none came.
#[test]
fn enqueue_with_takes_the_key_and_the_wait() {
    let d = TempDir::new("api-enqueue");
    let q = Queue::create(d.path(), fast(2)).unwrap();
    let keyed = EnqueueOptions {
        key: Key::new("order-1"),
        ..Default::default()
    };
    let first = q.enqueue_with(b"a", &keyed).unwrap();
    assert!(matches!(first, Enqueued::New(_)), "{first:?}");
    let again = q.enqueue_with(b"a", &keyed).unwrap();
    assert_eq!(again, Enqueued::Duplicate(first.id()));
    assert_eq!(counts(&q), [1, 0, 0, 0, 0]);

    q.set_limits(Limits {
        max_jobs: Some(1),
        max_bytes: None,
    })
    .unwrap();
    let waiting = EnqueueOptions {
        wait: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let t = Instant::now();
    let e = q.enqueue_with(b"b", &waiting).unwrap_err();
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert!(matches!(e, EnqueueError::NotDone(_)), "{e:?}");
    assert!(matches!(e.kind(), ErrorKind::QueueFull { .. }), "{e:?}");
    // Room made: the waiting enqueue is done.
    q.claim().unwrap().unwrap().ack().unwrap();
    let id = q.enqueue_with(b"b", &waiting).unwrap().id();
    assert_eq!(q.find(id).unwrap().state, State::Ready);
}

/// A read-only call's error is `steadq::Error::NotDone`, holding the `Cause`; a function
/// returning `steadq::Result` takes every error type with `?`.
#[test]
fn read_only_errors_are_not_done_and_every_error_converts() {
    let d = TempDir::new("api-errors");
    let e = Queue::open(d.path().join("nothing-here")).unwrap_err();
    assert!(matches!(e, Error::NotDone(_)), "{e:?}");
    assert_eq!(e.outcome(), Outcome::NotDone);
    assert_eq!(e.cause().kind(), e.kind());
    assert!(
        e.path().is_some_and(|p| p.ends_with("nothing-here")),
        "{e:?}"
    );

    fn all_calls(dir: &std::path::Path) -> steadq::Result<u64> {
        let q = Queue::create(dir, Options::default())?; // Error
        q.enqueue(b"x")?; // EnqueueError
        let mut l = q.claim()?.expect("a job is ready"); // Error
        l.renew(Duration::from_secs(30))?; // RenewError
        l.ack()?; // SettleError
        Ok(q.status()?.acked) // a read-only call
    }
    assert_eq!(all_calls(d.path()).unwrap(), 1);
}

/// `OpenMode::ReadOnly` and `Check` open without the rename probe: nothing is written under
/// `tmp/`; the default mode probes (and removes its probe file again).
#[test]
fn open_modes_read_only_and_check_write_nothing() {
    let d = TempDir::new("api-modes");
    drop(Queue::create(d.path(), fast(1)).unwrap());
    let tmp = d.path().join("tmp");
    let mtime = || std::fs::metadata(&tmp).unwrap().modified().unwrap();
    let before = mtime();
    std::thread::sleep(Duration::from_millis(20));
    for mode in [OpenMode::ReadOnly, OpenMode::Check] {
        let q = Queue::open_with(d.path(), Options { mode, ..fast(1) }).unwrap();
        assert_eq!(q.options().mode, mode);
        assert_eq!(mtime(), before, "{mode:?} wrote in tmp/");
    }
    drop(Queue::open(d.path()).unwrap());
    assert_ne!(
        mtime(),
        before,
        "the read-write open makes its rename probe in tmp/"
    );
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}
