//! A `Date` header far off the service's clock (a bogus proxy, a server whose clock was
//! wrong for one answer): one such answer must neither make live leases look expired (their
//! jobs delivered twice) nor give new leases absurd deadlines. Through the fault proxy, which
//! rewrites one answer's `Date`, in front of moto.

use crate::common::*;
use steadq::s3::clock::local_ms;
use steadq::s3::{client::Client, ErrorKind, Options, Outcome, Queue};

const LEASE_MS: i64 = 30_000;
const DAY: i64 = 86_400;

fn options() -> Options {
    Options {
        lease_ms: LEASE_MS,
        ..Options::default()
    }
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
