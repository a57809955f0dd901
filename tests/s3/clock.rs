//! A `Date` header far off the service's clock (a bogus proxy, a server whose clock was
//! wrong for one answer): one such answer must neither make live leases look expired (their
//! jobs delivered twice) nor give new leases absurd deadlines. Through the fault proxy, which
//! rewrites one answer's `Date`, in front of moto.

use crate::common::*;
use stowq::clock::local_ms;
use stowq::{Client, ErrorKind, Options, Outcome, Queue};

const LEASE_MS: i64 = 30_000;
const DAY: i64 = 86_400;

fn options() -> Options {
    Options {
        lease_ms: LEASE_MS,
        ..Options::default()
    }
}

/// A queue `q` in a new `bucket`, and two handles of it through one fault proxy.
fn two_handles_behind_a_proxy(port: u16, bucket_name: &str) -> (Proxy, Queue, Queue) {
    bucket(port, bucket_name);
    drop(queue(port, bucket_name, "q", options()));
    let p = Proxy::start(port);
    let open = || {
        Queue::open(
            Client::new(config(p.port, 10_000), bucket_name),
            "q",
            options(),
        )
        .unwrap()
    };
    let (a, b) = (open(), open());
    (p, a, b)
}

/// A lease deadline given now: within the lease (plus a few seconds of slack) of this
/// machine's clock, which moto shares.
fn assert_plausible_deadline(deadline_ms: i64, what: &str) {
    let now = local_ms();
    assert!(
        (now + LEASE_MS - 5_000..=now + LEASE_MS + 5_000).contains(&deadline_ms),
        "{what}: deadline {deadline_ms} is {} s from now, not about {} s",
        (deadline_ms - now) / 1000,
        LEASE_MS / 1000
    );
}

/// Why the stepped-clock tests run on moto only: the client signs with the service's time,
/// here an hour ahead of the real one, which a server that checks signature dates (SeaweedFS,
/// as AWS: 15 minutes) refuses with 403; the tests of one skewed answer stay within that.
const STEPPED_CLOCK: &str = "the proxy moves the service clock an hour, so the client's \
     signatures carry that time, which a server checking signature dates refuses";

#[test]
fn one_date_a_day_ahead_neither_expires_live_leases_nor_stretches_new_ones() {
    let Some(m) = moto() else { return };
    bucket(m.port, "skew-ahead");
    let a = queue(m.port, "skew-ahead", "q", options());
    let p = Proxy::start(m.port);
    let b = Queue::open(
        Client::new(config(p.port, 10_000), "skew-ahead"),
        "q",
        options(),
    )
    .unwrap();
    let first = a.enqueue(b"first").unwrap();
    let live = a.claim().unwrap().expect("a claims the first job");
    assert_eq!(live.id, first);
    let second = a.enqueue(b"second").unwrap();
    // b's next answer is dated a day ahead; the ones after it are the server's own.
    p.date_skew(0, DAY);
    assert_eq!(b.client.get("q/absent").unwrap().status, 404);
    assert_eq!(p.seen(), 1);
    let rep = b.recover().unwrap();
    assert_eq!(
        (rep.ready, rep.dead),
        (0, 0),
        "a's lease has 30 s left: nothing to recover"
    );
    let l = b.claim().unwrap().expect("b claims the second job");
    assert_eq!(l.id, second, "the first job is still a's");
    assert_plausible_deadline(l.deadline_ms, "b's lease");
    a.ack(&live).expect("a's lease is still a's");
    b.ack(&l).unwrap();
}

#[test]
fn a_first_date_a_day_behind_does_not_give_a_lease_that_is_born_expired() {
    let Some(m) = moto() else { return };
    bucket(m.port, "skew-behind");
    let a = queue(m.port, "skew-behind", "q", options());
    let p = Proxy::start(m.port);
    // The first answer b ever sees (opening the queue) is dated a day back.
    p.date_skew(0, -DAY);
    let b = Queue::open(
        Client::new(config(p.port, 10_000), "skew-behind"),
        "q",
        options(),
    )
    .unwrap();
    let id = a.enqueue(b"job").unwrap();
    let l = b.claim().unwrap().expect("b claims the job");
    assert_eq!(l.id, id);
    assert_plausible_deadline(l.deadline_ms, "b's lease");
    let rep = a.recover().unwrap();
    assert_eq!((rep.ready, rep.dead), (0, 0), "b's lease is live");
    assert!(a.claim().unwrap().is_none(), "the job is b's alone");
    b.ack(&l).unwrap();
}

#[test]
fn a_service_whose_dates_never_agree_is_refused_by_name() {
    let Some(m) = moto() else { return };
    bucket(m.port, "skew-each");
    drop(queue(m.port, "skew-each", "q", options()));
    let p = Proxy::start(m.port);
    // Each answer an hour further ahead than the one before.
    p.date_skew_each(3600);
    let e = Queue::open(
        Client::new(config(p.port, 10_000), "skew-each"),
        "q",
        options(),
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(e.outcome, Outcome::NotDone);
    let ErrorKind::Config(msg) = &e.kind else {
        panic!("not a Config error: {e:?}")
    };
    assert!(msg.contains(&format!("127.0.0.1:{}", p.port)), "{msg}");
    assert!(
        msg.contains("Date headers of 4 answers in a row disagree"),
        "{msg}"
    );
    assert_eq!(p.seen(), 4, "the identity read, then three more");
}

/// The service's clock steps forward for good (as this handle sees it: the server's clock
/// was corrected, or this machine slept and its monotonic clock stood still meanwhile). The
/// first answer after the step is held back until the next one confirms it; a claim whose
/// listing was that first answer must not write its lease by the old clock: to every handle
/// that already knows the new time that lease is expired at birth, and its job is delivered
/// a second time.
#[test]
fn a_claim_right_after_the_service_clock_steps_forward_gives_a_live_lease() {
    let Some(m) = moto_only(STEPPED_CLOCK) else {
        return;
    };
    let (p, a, b) = two_handles_behind_a_proxy(m.port, "skew-step");
    let id = a.enqueue(b"job").unwrap();
    // An hour forward, every answer from now on.
    const STEP_S: i64 = 3600;
    p.date_shift(STEP_S);
    // a sees the new time twice in a row: its clock has stepped.
    for _ in 0..2 {
        assert_eq!(a.client.get("q/absent").unwrap().status, 404);
    }
    let skew = a.client.clock.now_ms() - local_ms();
    assert!(
        (skew - STEP_S * 1000).abs() < 3_000,
        "a's clock stepped: {skew} ms"
    );
    // b's first answer after the step is its claim's listing.
    let l = b.claim().unwrap().expect("b claims the job");
    assert_eq!(l.id, id);
    let service_now = local_ms() + STEP_S * 1000;
    assert!(
        l.deadline_ms > service_now,
        "b's lease was born expired: its deadline is {} s before the service's now",
        (service_now - l.deadline_ms) / 1000
    );
    let rep = a.recover().unwrap();
    assert_eq!((rep.ready, rep.dead), (0, 0), "b's lease is live");
    assert!(a.claim().unwrap().is_none(), "the job is b's alone");
    b.ack(&l).unwrap();
}

/// A nack right after the service clock stepped forward (its first answer seen, not yet
/// confirmed): the due time was counted from the old clock, so a nack of 60 s after an
/// hour's step made the job due at once, and another worker ran it again straight away. A
/// nack now settles a clock in doubt first, as a claim and a renewal do.
#[test]
fn a_nack_right_after_the_service_clock_steps_forward_keeps_its_delay() {
    let Some(m) = moto_only(STEPPED_CLOCK) else {
        return;
    };
    let (p, a, b) = two_handles_behind_a_proxy(m.port, "skew-nack");
    let id = a.enqueue(b"job").unwrap();
    let l = b.claim().unwrap().expect("b claims the job");
    assert_eq!(l.id, id);
    const STEP_S: i64 = 3600;
    p.date_shift(STEP_S);
    // a confirms the step; b has seen one answer of the new time (in doubt).
    for _ in 0..2 {
        assert_eq!(a.client.get("q/absent").unwrap().status, 404);
    }
    assert_eq!(b.client.get("q/absent").unwrap().status, 404);
    assert!(
        b.client.clock.in_doubt(),
        "b's clock waits for a confirmation"
    );
    let due = match b
        .nack(&l, std::time::Duration::from_secs(60), "later")
        .unwrap()
    {
        stowq::Nacked::Ready(due) => due,
        other => panic!("{other:?}"),
    };
    let service_now = local_ms() + STEP_S * 1000;
    assert!(
        due > service_now + 50_000,
        "the due time is {} s from the service's now, not about 60",
        (due - service_now) / 1000
    );
    assert!(
        a.claim().unwrap().is_none(),
        "the nacked job waits its 60 s"
    );
}
