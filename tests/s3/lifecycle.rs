//! The whole job lifecycle against a real moto server on 127.0.0.1.

use crate::common::*;
use std::time::Duration;
use stowq::{Client, ErrorKind, Nacked, Options, Outcome, Queue, State};

#[test]
fn whole_lifecycle_against_moto() {
    let Some(m) = moto() else { return };
    bucket(m.port, "life");
    let opts = Options {
        lease_ms: 5_000,
        max_attempts: 2,
        ..Options::default()
    };
    let q = queue(m.port, "life", "app/q1", opts.clone());
    // A second create of the same prefix opens the same queue (its identity create got 412).
    let q2 = queue(m.port, "life", "app/q1", opts.clone());
    assert_eq!(q.queue_id(), q2.queue_id());
    assert!(q.client.clock.known(), "service clock learned from Date");
    let skew = q.client.clock.now_ms() - stowq::clock::local_ms();
    assert!(
        skew.abs() < 2_000,
        "moto runs on this machine: skew {skew} ms"
    );

    // Enqueue three, claim one, check the envelope came back verified.
    let a = q.enqueue(b"job a").unwrap();
    let b = q.enqueue(b"job b").unwrap();
    let c = q.enqueue(b"job c").unwrap();
    assert_eq!(q.status().unwrap().ready, 3);
    let mut l1 = q.claim().unwrap().expect("a ready job");
    assert!([a, b, c].contains(&l1.id));
    let want: &[u8] = if l1.id == a {
        b"job a"
    } else if l1.id == b {
        b"job b"
    } else {
        b"job c"
    };
    assert_eq!(l1.payload, want);
    assert_eq!(l1.attempt, 1);
    assert_eq!(l1.generation(), 1);
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.leased), (2, 1));

    // Renew moves the deadline and the generation.
    let d0 = l1.deadline_ms;
    std::thread::sleep(Duration::from_millis(20));
    q.renew(&mut l1, 10_000).unwrap();
    assert!(l1.deadline_ms > d0);
    assert_eq!(l1.generation(), 2);
    let (gen, rec) = q.inspect(l1.id).unwrap().unwrap();
    assert_eq!(
        (gen, rec.state, rec.due_ms),
        (2, State::Leased, l1.deadline_ms)
    );

    // Ack gives a receipt; the lease is then spent.
    let r = q.ack(&l1).unwrap();
    assert_eq!((r.id, r.gen, r.attempt), (l1.id, 3, 1));
    let e = q.ack(&l1).unwrap_err();
    assert_eq!(
        (e.outcome, e.kind),
        (Outcome::NotDone, ErrorKind::LeaseLost)
    );
    let (gen, rec) = q.inspect(l1.id).unwrap().unwrap();
    assert_eq!(
        (gen, rec.state, rec.token.as_str()),
        (3, State::Done, l1.token.as_str())
    );

    // Nack with a delay: not claimable until due (on the service clock). 6 s: the claims and
    // the status between must finish before it even when moto is slow (the s3 tests share
    // one test binary and run side by side).
    let l2 = q.claim().unwrap().unwrap();
    let t_nack = std::time::Instant::now();
    match q
        .nack(&l2, Duration::from_millis(6_000), "try later")
        .unwrap()
    {
        Nacked::Ready(due) => assert!(due >= l2.deadline_ms - 5_000 + 6_000 - 50),
        Nacked::Dead => panic!("attempt 1 of 2 must not be dead"),
    }
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.delayed, st.done), (1, 1, 1));
    let l3 = q.claim().unwrap().unwrap();
    assert_ne!(l3.id, l2.id, "the delayed job is not due yet");
    assert!(q.claim().unwrap().is_none(), "nothing else is due");
    // Due by the upper bound of the service clock (now + 1 s), so at most 1 s early.
    std::thread::sleep(Duration::from_millis(7_100).saturating_sub(t_nack.elapsed()));
    let l2b = q.claim().unwrap().expect("due now");
    assert_eq!((l2b.id, l2b.attempt), (l2.id, 2));

    // Out of attempts: the nack sends it to dead. Fail sends the other to dead too.
    assert_eq!(q.nack(&l2b, Duration::ZERO, "again").unwrap(), Nacked::Dead);
    q.fail(&l3, "bad input").unwrap();
    let (_, rec) = q.inspect(l3.id).unwrap().unwrap();
    assert_eq!((rec.state, rec.reason.as_str()), (State::Dead, "bad input"));
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.leased, st.done, st.dead), (0, 0, 1, 2));

    // Requeue one dead job, then the rest.
    assert_eq!(q.requeue(Some(l3.id)).unwrap(), 1);
    let e = q.requeue(Some(l3.id)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(q.requeue(None).unwrap(), 1);
    assert_eq!(q.status().unwrap().ready, 2);

    // Expired lease: recovered by the service clock, back to ready at the same attempt count.
    let short = Queue::open(
        Client::new(config(m.port, 10_000), "life"),
        "app/q1",
        Options {
            lease_ms: 2_000,
            ..opts.clone()
        },
    )
    .unwrap();
    let l4 = short.claim().unwrap().unwrap();
    assert_eq!(short.recover().unwrap().ready, 0, "not expired yet");
    std::thread::sleep(Duration::from_millis(3_100));
    let st = q.status().unwrap();
    assert_eq!(st.expired, 1);
    let rep = q.recover().unwrap();
    assert_eq!(rep.ready, 1);
    let e = short.ack(&l4).unwrap_err();
    assert_eq!(
        (e.outcome, e.kind),
        (Outcome::NotDone, ErrorKind::LeaseLost)
    );

    // The list shows every job once, in its newest generation.
    let all = q.list().unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all.iter().filter(|l| l.state == State::Ready).count(), 2);
    assert_eq!(all.iter().filter(|l| l.state == State::Done).count(), 1);
}

#[test]
fn a_corrupt_envelope_never_reaches_a_worker() {
    let Some(m) = moto() else { return };
    bucket(m.port, "corrupt");
    let q = queue(m.port, "corrupt", "", Options::default());
    let id = q.enqueue(b"precious payload").unwrap();
    // Flip a payload byte in place (a plain PUT over generation 0).
    let key = q.keys().gen(id, 0);
    let mut body = q.client.get(&key).unwrap().body;
    let last = body.len() - 1;
    body[last] ^= 1;
    assert_eq!(q.client.put(&key, &body).unwrap().status, 200);
    assert!(q.claim().unwrap().is_none(), "the only job was corrupt");
    let (_, rec) = q.inspect(id).unwrap().unwrap();
    assert_eq!(rec.state, State::Dead);
    assert_eq!(rec.reason, "corrupt envelope: payload SHA-256 mismatch");
}

#[test]
fn conditional_writes_are_refused_when_unsigned_and_settled_when_signed() {
    let Some(m) = moto() else { return };
    bucket(m.port, "cond");
    let c = Client::new(config(m.port, 10_000), "cond");
    assert_eq!(c.put_if_absent("k", b"1").unwrap().status, 200);
    assert_eq!(c.put_if_absent("k", b"2").unwrap().status, 412);
    assert_eq!(c.get("k").unwrap().body, b"1");
    // Unsigned, on the existing key: moto answers 403, not 412, which is why every request is
    // signed.
    let r = stowq::http::send(&stowq::http::Request {
        method: "PUT",
        host: "127.0.0.1",
        port: m.port,
        target: "/cond/k",
        headers: &[("if-none-match".into(), "*".into())],
        body: b"x",
        timeout: Duration::from_secs(10),
        tls: false,
    })
    .unwrap();
    assert_eq!(r.status, 403);
    assert_eq!(c.get("k").unwrap().body, b"1");
}

#[test]
fn repair_restores_the_index_after_crash_windows() {
    let Some(m) = moto() else { return };
    bucket(m.port, "repair");
    let q = queue(m.port, "repair", "r", Options::default());
    // Enqueue died before its ready marker: no claim can find the job.
    let a = q.enqueue(b"a").unwrap();
    let st = q.list().unwrap();
    let k = q.keys().index(State::Ready);
    let page = q.client.list(&k, None, None, 10).unwrap().unwrap();
    assert_eq!((st.len(), page.entries.len()), (1, 1));
    assert_eq!(q.client.delete(&page.entries[0].key).unwrap().status, 204);
    assert!(q.claim().unwrap().is_none());
    // A claim of b died right after its create: leased, deadline passed, no leased marker,
    // and the ready marker still there.
    let b = q.enqueue(b"b").unwrap();
    let rec = stowq::keys::Record {
        state: State::Leased,
        attempt: 1,
        at_ms: 0,
        due_ms: q.client.clock.now_ms() - 5_000,
        token: "t".into(),
        nonce: "n".into(),
        reason: String::new(),
        level: stowq::DEFAULT_LEVEL,
    };
    let r = q
        .client
        .put_if_absent(&q.keys().gen(b, 1), &rec.encode())
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(
        q.claim().unwrap().is_none(),
        "b's marker is stale, a has none"
    );
    assert_eq!(q.lost_races(), 1);
    let rep = q.repair().unwrap();
    assert_eq!((rep.put, rep.deleted), (2, 1));
    assert_eq!(
        q.repair().unwrap(),
        stowq::RepairReport::default(),
        "idempotent"
    );
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.expired), (1, 1));
    let l = q.claim().unwrap().unwrap();
    assert_eq!(l.id, a);
    q.ack(&l).unwrap();
    // b's lease is recovered like any expired one.
    let l = q.claim().unwrap().unwrap();
    assert_eq!((l.id, l.attempt, l.payload.as_slice()), (b, 2, &b"b"[..]));
}

/// A queue whose prefix holds `&`, `<`, `>` and non-ASCII: the server escapes them in its
/// listings' XML, and every listing (list, claim, status, ack's marker moves) reads them back
/// decoded, so the jobs are found, claimed and acked.
#[test]
fn a_prefix_with_xml_specials_and_non_ascii_round_trips() {
    let Some(m) = moto() else { return };
    bucket(m.port, "xml-keys");
    let prefix = "a&b<c>d/caf\u{e9}-\u{65e5}";
    let q = queue(m.port, "xml-keys", prefix, Options::default());
    let ids: Vec<u128> = (0..3)
        .map(|i| q.enqueue(format!("job {i}").as_bytes()).unwrap())
        .collect();
    let listed = q.list().unwrap();
    assert_eq!(listed.len(), 3, "{listed:?}");
    let mut acked = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        q.ack(&l).unwrap();
        acked.push(l.id);
    }
    acked.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(acked, want);
    let st = q.status().unwrap();
    assert_eq!((st.done, st.ready, st.leased), (3, 0, 0));
}

/// Claims take several jobs from one listing: the due markers a claim's LIST returned and
/// did not use are tried by the next claims of the same handle (for up to
/// `stowq::CANDIDATES_KEEP`), so one worker claiming 20 jobs lists a few times (a listing
/// starts at a random one of 16 shards and reads on from there), not 20 times: 7 requests a
/// job (claim: create, marker put, marker delete, envelope GET; ack:
/// create, marker put, marker delete) plus those LISTs. The requests go over kept-alive
/// connections: on SeaweedFS a handle opens one (or a few), not one per request.
#[test]
fn claims_take_several_jobs_from_one_listing_over_one_connection() {
    let Some(m) = moto() else { return };
    bucket(m.port, "batch");
    let q = queue(m.port, "batch", "b", Options::default());
    for i in 0..20 {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let w = Queue::open(
        Client::new(config(m.port, 10_000), "batch"),
        "b",
        Options::default(),
    )
    .unwrap();
    let (r0, c0) = (w.client.requests(), w.client.pool.opened());
    let mut n = 0;
    while let Some(l) = w.claim().unwrap() {
        w.ack(&l).unwrap();
        n += 1;
    }
    let (reqs, conns) = (w.client.requests() - r0, w.client.pool.opened() - c0);
    assert_eq!(n, 20);
    // 20 × 7, the listings that found the jobs, and the empty claim at the end (2-4 LISTs):
    // at most 12 LISTs, where a LIST per claim made it 20 + 2 at least.
    assert!(
        (20 * 7 + 1 + 2..=20 * 7 + 12).contains(&reqs),
        "{reqs} requests for 20 jobs"
    );
    // moto's server (werkzeug) closes every connection after its answer; SeaweedFS keeps them.
    if m.kind == Kind::Seaweed {
        assert!(conns <= 2, "{conns} connections for {reqs} requests");
    }
    report(&format!(
        "stowq batch claims: 20 jobs claimed and acked by one handle in {reqs} requests over {conns} connection(s)"
    ));
}
