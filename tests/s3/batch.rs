//! Batched claims and acks (`Queue::claim_batch`, `Queue::ack_batch`): one leased marker,
//! one multi-object delete and one done marker per batch, so at most six requests per job
//! from enqueue to ack; and every reader of the index (recovery, repair and check, status,
//! list, compaction) understands the batch markers.

use crate::common::*;
use std::time::{Duration, Instant};
use stowq::{Options, Outcome, Queue, State};

/// Every key under `P/i/<state>/`.
fn index_keys(q: &Queue, state: &str) -> Vec<String> {
    let prefix = format!("{}i/{state}/", q.keys().chains().trim_end_matches("j/"));
    let p = q.client.list(&prefix, None, None, 1000).unwrap().unwrap();
    p.entries.into_iter().map(|e| e.key).collect()
}

fn opts() -> Options {
    Options {
        compact_guard_ms: 0,
        ..Options::default()
    }
}

#[test]
fn a_batch_of_8_costs_at_most_6_requests_per_job_and_compacts() {
    let Some(m) = moto() else { return };
    bucket(m.port, "batch");
    // The default compaction guard: no fence GET on the acks.
    let q = queue(m.port, "batch", "b8", Options::default());
    let r0 = q.client.requests();
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(q.enqueue(format!("job {i}").as_bytes()).unwrap());
    }
    let r1 = q.client.requests();
    assert_eq!(r1 - r0, 16, "an enqueue is 2 requests");
    let leases = q.claim_batch(8).unwrap();
    let r2 = q.client.requests();
    assert_eq!(leases.len(), 8);
    for l in &leases {
        let i = ids.iter().position(|id| *id == l.id).expect("one of ours");
        assert_eq!(l.payload, format!("job {i}").into_bytes());
        assert_eq!((l.attempt, l.generation()), (1, 1));
        assert_eq!(l.deadline_ms, leases[0].deadline_ms, "one deadline");
    }
    assert!(
        !q.multi_delete_refused(),
        "{:?} takes DeleteObjects",
        m.kind
    );
    assert_eq!(index_keys(&q, "ready"), Vec::<String>::new());
    let leased = index_keys(&q, "leased");
    assert_eq!(leased.len(), 1, "one batch marker: {leased:?}");
    assert!(leased[0].ends_with(".b"));
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.leased, st.done), (0, 8, 0));
    assert_eq!(q.check().unwrap().problems(), 0, "{:?}", q.check());

    let r3 = q.client.requests();
    let acks = q.ack_batch(&leases);
    let r4 = q.client.requests();
    for (a, l) in acks.iter().zip(&leases) {
        let a = a.as_ref().expect("acked");
        assert_eq!((a.id, a.gen, a.attempt), (l.id, 2, 1));
    }
    assert_eq!(index_keys(&q, "leased"), Vec::<String>::new());
    let done = index_keys(&q, "done");
    assert_eq!(done.len(), 1, "one done batch marker: {done:?}");
    let per_job = ((r1 - r0) + (r2 - r1) + (r4 - r3)) as f64 / 8.0;
    report(&format!(
        "batch ({:?}): 8 jobs, enqueue {} + claim_batch {} + ack_batch {} requests: {per_job:.2} per job",
        m.kind,
        r1 - r0,
        r2 - r1,
        r4 - r3
    ));
    // LIST (a second when the shards after its random start held fewer than 8 due), 8
    // creates, 8 GETs, the marker, the multi-object delete; 8 creates, the marker, a DELETE.
    assert!([19, 20].contains(&(r2 - r1)), "{}", r2 - r1);
    assert_eq!(r4 - r3, 8 + 2);
    assert!(per_job <= 6.0, "{per_job} requests per job");
    let st = q.status().unwrap();
    assert_eq!((st.leased, st.done), (0, 8));
    let listed = q.list().unwrap();
    assert_eq!(listed.len(), 8);
    assert!(listed.iter().all(|l| l.state == State::Done && l.gen == 2));
    assert_eq!(q.check().unwrap().problems(), 0);

    // Compaction takes the batch done marker as a group.
    std::thread::sleep(Duration::from_millis(1_100));
    let q0 = queue(m.port, "batch", "b8", opts());
    let c = q0.compact(Duration::from_millis(1)).unwrap();
    assert_eq!((c.chains, c.objects), (8, 8 * 2 + 1));
    assert_eq!(index_keys(&q, "done"), Vec::<String>::new());
    for id in &ids {
        let (gen, rec) = q.inspect(*id).unwrap().unwrap();
        assert_eq!((gen, rec.state), (2, State::Done));
    }
    assert_eq!(q.check().unwrap().problems(), 0);
}

#[test]
fn a_partly_acked_batch_keeps_its_marker_until_the_last_job_settles() {
    let Some(m) = moto() else { return };
    bucket(m.port, "batch");
    let q = queue(m.port, "batch", "part", opts());
    for i in 0..6 {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let leases = q.claim_batch(6).unwrap();
    assert_eq!(leases.len(), 6);
    assert!(q.ack_batch(&leases[..3]).iter().all(Result::is_ok));
    assert_eq!(index_keys(&q, "leased").len(), 1, "3 jobs still under it");
    let st = q.status().unwrap();
    assert_eq!((st.leased, st.done), (3, 3));
    assert_eq!(q.check().unwrap().problems(), 0, "{:?}", q.check());
    // A spent lease acked again is lost, and settles nothing twice.
    let again = q.ack_batch(&leases[..1]);
    assert!(matches!(&again[0], Err(e) if e.outcome == Outcome::NotDone));
    // The rest settle one by one: an ack, a nack, a renew (which leaves the batch) and its
    // ack; the marker goes with the last.
    q.ack(&leases[3]).unwrap();
    q.nack(&leases[4], Duration::ZERO, "again").unwrap();
    assert_eq!(index_keys(&q, "leased").len(), 1);
    let mut last = leases[5].clone();
    q.renew(&mut last, 60_000).unwrap();
    let leased = index_keys(&q, "leased");
    assert_eq!(leased.len(), 1, "{leased:?}");
    assert!(
        !leased[0].ends_with(".b"),
        "the renewed job's own marker: {leased:?}"
    );
    q.ack(&last).unwrap();
    assert_eq!(index_keys(&q, "leased"), Vec::<String>::new());
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.leased, st.done), (1, 0, 5));
    assert_eq!(q.check().unwrap().problems(), 0, "{:?}", q.check());
    let l = q.claim().unwrap().expect("the nacked job");
    assert_eq!(l.attempt, 2);
}

#[test]
fn an_expired_batch_lease_is_recovered_with_its_attempts() {
    let Some(m) = moto() else { return };
    bucket(m.port, "batch");
    let o = Options {
        lease_ms: 1_500,
        ..opts()
    };
    let q = queue(m.port, "batch", "expire", o);
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(q.enqueue(format!("job {i}").as_bytes()).unwrap());
    }
    let leases = q.claim_batch(5).unwrap();
    assert_eq!(leases.len(), 5);
    // One acked, one renewed for a minute (it leaves the batch); three dropped by a dead
    // holder.
    q.ack(&leases[0]).unwrap();
    let mut renewed = leases[1].clone();
    q.renew(&mut renewed, 60_000).unwrap();
    let t0 = Instant::now();
    let mut back = 0;
    while back < 3 {
        assert!(t0.elapsed() < Duration::from_secs(15), "not recovered");
        let r = q.recover().unwrap();
        back += r.ready;
        assert_eq!(r.dead, 0);
        if back < 3 {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert_eq!(back, 3, "each dropped job once");
    assert_eq!(
        index_keys(&q, "leased").len(),
        1,
        "only the renewed job's marker"
    );
    for l in &leases[2..] {
        let (gen, rec) = q.inspect(l.id).unwrap().unwrap();
        assert_eq!((gen, rec.state, rec.attempt), (2, State::Ready, 1));
    }
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.leased, st.done), (3, 1, 1));
    assert_eq!(q.check().unwrap().problems(), 0, "{:?}", q.check());
    // Claimed again in a batch: attempt 2, the same jobs.
    let again = q.claim_batch(8).unwrap();
    let mut got: Vec<u128> = again.iter().map(|l| l.id).collect();
    let mut want: Vec<u128> = leases[2..].iter().map(|l| l.id).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    assert!(again.iter().all(|l| l.attempt == 2));
    assert!(q.ack_batch(&again).iter().all(Result::is_ok));
    q.ack(&renewed).unwrap();
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.leased, st.done), (0, 0, 5));
}

#[test]
fn repair_indexes_a_batch_whose_marker_was_lost() {
    let Some(m) = moto() else { return };
    bucket(m.port, "batch");
    let q = queue(m.port, "batch", "lost", opts());
    for i in 0..4 {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let leases = q.claim_batch(4).unwrap();
    // A crash between the lease creates and the batch marker: leased chains, no marker.
    let key = index_keys(&q, "leased").pop().unwrap();
    assert_eq!(q.client.delete(&key).unwrap().status, 204);
    let c = q.check().unwrap();
    assert_eq!(c.missing.len(), 4, "{c:?}");
    assert!(c
        .missing
        .iter()
        .all(|(_, g, s, _)| (*g, *s) == (1, State::Leased)));
    let r = q.repair().unwrap();
    assert_eq!(r.put, 4);
    assert_eq!(q.check().unwrap().problems(), 0);
    assert!(q.ack_batch(&leases).iter().all(Result::is_ok));
    // Their leases still name the lost batch marker: the per-job leased markers `repair`
    // put are stale after the acks, and `repair` deletes them.
    let st = q.status().unwrap();
    assert_eq!((st.leased, st.done), (0, 4));
    assert_eq!(q.repair().unwrap().deleted, 4);
    assert_eq!(q.check().unwrap().problems(), 0);
}

/// A batch leased marker whose jobs were all settled by leases that did not know the batch
/// (taken up again by handle, as `steadq ack` does) is stale: `check` reports it once,
/// `repair` deletes it, and recovery would too at its deadline.
#[test]
fn a_stale_batch_marker_is_reported_and_repaired() {
    let Some(m) = moto() else { return };
    bucket(m.port, "batch");
    let q = queue(m.port, "batch", "stale", opts());
    for i in 0..3 {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let leases = q.claim_batch(3).unwrap();
    assert_eq!(leases.len(), 3);
    let key = index_keys(&q, "leased").pop().unwrap();
    for l in &leases {
        let again = q.resume_lease(l.id, l.generation(), &l.token).unwrap();
        q.ack(&again).unwrap();
    }
    assert_eq!(index_keys(&q, "leased"), vec![key.clone()]);
    let st = q.status().unwrap();
    assert_eq!((st.leased, st.done), (0, 3), "the newest generation wins");
    let c = q.check().unwrap();
    assert_eq!(c.problems(), 1, "{c:?}");
    assert_eq!(c.stale[0].0, key);
    assert_eq!(q.repair().unwrap().deleted, 1);
    assert_eq!(q.check().unwrap().problems(), 0);
    assert_eq!(index_keys(&q, "leased"), Vec::<String>::new());
}

/// A batch takes the highest level first, as single claims do, and its jobs keep their
/// level through the batch's markers (`list`) and the ack.
#[test]
fn a_batch_claims_the_highest_level_first() {
    let Some(m) = moto() else { return };
    bucket(m.port, "batch");
    let q = queue(m.port, "batch", "prio", opts());
    let low: Vec<u128> = (0..2).map(|_| q.enqueue(b"low").unwrap()).collect();
    let high: Vec<u128> = (0..2)
        .map(|_| q.enqueue_with(b"high", Duration::ZERO, 6).unwrap())
        .collect();
    let first = q.claim_batch(2).unwrap();
    let mut got: Vec<u128> = first.iter().map(|l| l.id).collect();
    got.sort_unstable();
    let mut want = high.clone();
    want.sort_unstable();
    assert_eq!(got, want);
    assert!(first
        .iter()
        .all(|l| l.priority == 6 && l.payload == b"high"));
    let listed = q.list().unwrap();
    assert!(listed
        .iter()
        .filter(|l| high.contains(&l.id))
        .all(|l| l.state == State::Leased && l.priority == 6));
    let rest = q.claim_batch(8).unwrap();
    assert_eq!(rest.len(), 2);
    assert!(rest.iter().all(|l| low.contains(&l.id) && l.priority == 3));
    assert!(q.ack_batch(&first).iter().all(Result::is_ok));
    assert!(q.ack_batch(&rest).iter().all(Result::is_ok));
    let listed = q.list().unwrap();
    assert!(listed
        .iter()
        .all(|l| l.state == State::Done && l.priority == if high.contains(&l.id) { 6 } else { 3 }));
    assert_eq!(q.check().unwrap().problems(), 0);
}

/// An older steadq (before batches; the binary `STOWQ_OLD_STEADQ` names, e.g. built from
/// 490595e with `--features s3`; skipped without it) on a queue with batch markers: it
/// neither sees nor claims a batch-leased job, its `fsck` reports the batch markers as
/// foreign and the jobs as unindexed (exit 5), its `recover` indexes them (`repair`) and,
/// once the dead holder's lease has expired, makes them ready; its workers then run each job
/// once more. No job is claimed twice while leased, none is lost.
#[test]
fn an_older_steadq_neither_claims_a_batched_job_twice_nor_loses_one() {
    let Some(old) = std::env::var_os("STOWQ_OLD_STEADQ") else {
        report("STOWQ_OLD_STEADQ not set: the older-client test is skipped");
        return;
    };
    let Some(m) = moto() else { return };
    bucket(m.port, "batchold");
    let url = "s3://batchold/q";
    let o = Options {
        lease_ms: 5_000, // long enough that the first steps run before it ends
        ..opts()
    };
    let q = queue(m.port, "batchold", "q", o);
    let ids: Vec<u128> = (0..6)
        .map(|i| q.enqueue(format!("job {i}").as_bytes()).unwrap())
        .collect();
    let acked = q.claim_batch(2).unwrap();
    assert!(q.ack_batch(&acked).iter().all(Result::is_ok));
    let dropped = q.claim_batch(4).unwrap();
    assert_eq!(dropped.len(), 4, "a holder that dies with its batch");
    let deadline = dropped[0].deadline_ms;
    let run = |args: &[&str]| -> (i32, String) {
        let o = std::process::Command::new(&old)
            .args(args)
            .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{}", m.port))
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("HOME", "/nonexistent")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code().unwrap_or(-1), text)
    };
    // Before the deadline: nothing to claim (the leased jobs are not offered twice).
    assert_eq!(
        run(&["claim", url]).0,
        3,
        "no job ready for the older client"
    );
    let (code, text) = run(&["fsck", url]);
    assert_eq!(code, 5, "{text}");
    assert!(
        text.contains(".b"),
        "the batch markers named as foreign: {text}"
    );
    // Its recover indexes the jobs (per-job markers beside the batch markers).
    let (code, text) = run(&["recover", url]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(run(&["claim", url]).0, 3, "still leased: {text}");
    // After the deadline its recovery makes the dropped jobs ready, attempt kept.
    while q.client.clock.now_ms() <= deadline + 1_000 {
        std::thread::sleep(Duration::from_millis(100));
        let _ = q.status();
    }
    // (A recovery lists the leased index from a random shard and wraps around only when it
    // found nothing after it: a few runs may be needed.)
    let ready = |l: &stowq::Lease| q.inspect(l.id).unwrap().unwrap().1;
    for _ in 0..20 {
        let (code, text) = run(&["recover", url]);
        assert_eq!(code, 0, "{text}");
        if dropped.iter().all(|l| ready(l).state == State::Ready) {
            break;
        }
    }
    for l in &dropped {
        let rec = ready(l);
        assert_eq!((rec.state, rec.attempt), (State::Ready, 1));
    }
    for _ in 0..4 {
        let (code, text) = run(&["work", url, "--once", "--", "cat"]);
        assert_eq!(code, 0, "{text}");
    }
    assert_eq!(run(&["claim", url]).0, 3);
    for id in &ids {
        let (gen, rec) = q.inspect(*id).unwrap().unwrap();
        let again = dropped.iter().any(|l| l.id == *id);
        let want = if again { (4, 2) } else { (2, 1) };
        assert_eq!((gen, rec.state, rec.attempt), (want.0, State::Done, want.1));
    }
    // The new client: the dead batch's marker is stale, `repair` deletes it.
    let c = q.check().unwrap();
    assert_eq!(c.stale.len(), 1, "{c:?}");
    q.repair().unwrap();
    assert_eq!(q.check().unwrap().problems(), 0);
    assert_eq!(q.status().unwrap().done, 6);
}

/// A batch that starts from the markers kept from its handle's last listing and runs out
/// of them lists again for the rest: the markers it already tried show up again in that
/// listing (their deletes come after the batch), and counting them as found ended the batch
/// short (3 of 4 ready jobs claimed, one run in a few).
#[test]
fn a_batch_after_kept_markers_still_takes_k() {
    let Some(m) = moto() else { return };
    bucket(m.port, "batch");
    for round in 0..8 {
        let q = queue(m.port, "batch", &format!("kept{round}"), opts());
        for i in 0..6 {
            q.enqueue(format!("job {i}").as_bytes()).unwrap();
        }
        let first = q.claim_batch(2).unwrap();
        assert_eq!(first.len(), 2);
        let rest = q.claim_batch(4).unwrap();
        assert_eq!(rest.len(), 4, "round {round}");
        assert!(q.ack_batch(&first).iter().all(Result::is_ok));
        assert!(q.ack_batch(&rest).iter().all(Result::is_ok));
    }
}
