//! Foreign objects under a queue's prefix: keys StowQ did not write must never stall or
//! misdirect a claim.

use crate::common::*;
use std::sync::mpsc;
use std::time::Duration;
use stowq::Options;

/// A key under `i/ready/` whose shard part is not the one hex digit StowQ writes (`00`, a
/// copy made by hand, another tool's object) parsed as a marker; when not yet due, the
/// claim's jump to the end of "its" shard (`i/ready/0/~`) sorted before the key itself, so
/// every claim listed the same page again, forever (one LIST after another, SIGTERM ignored).
#[test]
fn a_foreign_key_in_the_ready_index_does_not_stall_claims() {
    let Some(m) = moto() else { return };
    bucket(m.port, "foreign");
    let q = queue(m.port, "foreign", "q", Options::default());
    let foreign = "q/i/ready/00/9999999999999.0123456789abcdef0123456789abcdef.00000000.0";
    assert_eq!(q.client.put(foreign, b"").unwrap().status, 200);
    let id = q.enqueue(b"real job").unwrap();
    let port = m.port;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let q = queue(port, "foreign", "q", Options::default());
        // Enough claims that every random start shard is met, wrapping around included.
        let mut got = Vec::new();
        for _ in 0..24 {
            let before = q.client.requests();
            let l = q.claim().unwrap();
            got.push((l.map(|l| l.id), q.client.requests() - before));
        }
        let _ = tx.send(got);
    });
    let got = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("24 claims did not end within 60 s: a claim loops on the foreign key");
    let claimed: Vec<u128> = got.iter().filter_map(|(l, _)| *l).collect();
    assert_eq!(claimed, [id], "the real job, once; the foreign key never");
    let most = got.iter().map(|(_, n)| *n).max().unwrap();
    assert!(most <= 10, "at most a few requests per claim: {got:?}");
    assert_eq!(q.client.get(foreign).unwrap().status, 200, "left alone");
}

/// A foreign object at a generation's key above a job's newest (`P/j/<id>/0000000a`, not a
/// record): `repair` (run by `steadq recover`) took it for the newest generation, deleted
/// the job's ready marker as stale and put none, so a committed job was never claimed again
/// (`recover` exited 0 saying "deleted 1").
#[test]
fn repair_keeps_the_markers_of_a_job_beside_a_foreign_generation() {
    let Some(m) = moto() else { return };
    bucket(m.port, "foreign");
    let q = queue(m.port, "foreign", "rep", Options::default());
    let id = q.enqueue(b"precious").unwrap();
    let foreign = q.keys().gen(id, 0xa);
    assert_eq!(q.client.put(&foreign, b"not ours").unwrap().status, 200);
    let rep = q.repair().unwrap();
    assert_eq!((rep.put, rep.deleted), (0, 0), "{rep:?}");
    let listed: Vec<u128> = q.list().unwrap().iter().map(|l| l.id).collect();
    assert_eq!(listed, [id], "the job is still indexed");
    let l = q.claim().unwrap().expect("the job is still claimable");
    assert_eq!((l.id, l.payload.as_slice()), (id, &b"precious"[..]));
    assert_eq!(rep.foreign, 1, "the foreign object is reported");
    assert_eq!(
        q.client.get(&foreign).unwrap().body,
        b"not ours",
        "left alone"
    );
}

/// A service that ignores `If-None-Match: *` (answers 200 and overwrites) cannot run a
/// queue: every transition's race would have many winners. `Queue::create` (`steadq init`)
/// finds out when it creates a queue (a second conditional create must be refused) and
/// reports it, not done, leaving nothing behind; and it never rewrites an existing queue's
/// identity, which re-keyed the queue so every job's envelope failed verification and was
/// dead-lettered as corrupt.
#[test]
fn a_service_that_ignores_conditional_writes_is_refused_and_changes_nothing() {
    let Some(m) = moto_only(
        "the proxy strips the signed If-None-Match header, which a signature-checking server refuses",
    ) else {
        return;
    };
    bucket(m.port, "uncond");
    let p = Proxy::start(m.port);
    p.unconditional(true);
    let c = || stowq::Client::new(config(p.port, 10_000), "uncond");
    let e = stowq::Queue::create(c(), "fresh", Options::default()).unwrap_err();
    assert_eq!(e.outcome, stowq::Outcome::NotDone, "{e}");
    assert!(e.to_string().contains("If-None-Match"), "{e}");
    let direct = stowq::Client::new(config(m.port, 10_000), "uncond");
    assert_eq!(
        direct.get("fresh/queue").unwrap().status,
        404,
        "nothing left"
    );
    // An existing queue, created through a service that honours it, is opened as it is.
    let q = queue(m.port, "uncond", "old", Options::default());
    let id = q.enqueue(b"job").unwrap();
    let again = stowq::Queue::create(c(), "old", Options::default()).unwrap();
    assert_eq!(
        again.queue_id(),
        q.queue_id(),
        "the identity was not rewritten"
    );
    let l = q
        .claim()
        .unwrap()
        .expect("the job is still claimable, not corrupt");
    assert_eq!((l.id, l.payload.as_slice()), (id, &b"job"[..]));
}

/// Other objects under the queue's index and chain prefixes (another tool's, a stray upload)
/// were passed over by `repair` without a word. They are still left as they are, and now
/// counted in [`RepairReport::foreign`] and named in warnings, as `fsck` does on a local
/// queue; `steadq recover` prints the count.
#[test]
fn repair_reports_every_object_that_is_not_the_queues() {
    let Some(m) = moto() else { return };
    bucket(m.port, "foreign");
    let q = queue(m.port, "foreign", "strays", Options::default());
    let id = q.enqueue(b"real").unwrap();
    let strays = [
        "strays/i/ready/0/not-a-marker",
        "strays/i/dead/readme.txt",
        "strays/j/notes",
        "strays/j/zz/00000000",
    ];
    for k in strays {
        assert_eq!(q.client.put(k, b"not ours").unwrap().status, 200, "{k}");
    }
    let rep = q.repair().unwrap();
    assert_eq!((rep.put, rep.deleted, rep.foreign), (0, 0, 4), "{rep:?}");
    for k in strays {
        assert_eq!(q.client.get(k).unwrap().body, b"not ours", "{k} left alone");
    }
    let listed: Vec<u128> = q.list().unwrap().iter().map(|l| l.id).collect();
    assert_eq!(listed, [id]);
    // The CLI's `recover` runs repair and prints the count.
    let o = crate::sigkill::cli(m.port)
        .args(["recover", "s3://foreign/strays"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("index: put 0 deleted 0 foreign 4"), "{text}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("strays/j/notes is not a job generation"),
        "{err}"
    );
}

/// A ready marker naming a generation above the job's newest (written by hand, or an index
/// restored from a newer backup than the chains): a claim stepped from it and created a
/// generation above a gap in the chain, a second lease of the job beside the one taken from
/// its true marker. A marker whose generation does not exist is now deleted, not acted on.
#[test]
fn a_marker_of_a_generation_that_does_not_exist_is_not_claimed() {
    let Some(m) = moto() else { return };
    bucket(m.port, "foreign");
    let q = queue(m.port, "foreign", "forged", Options::default());
    let id = q.enqueue(b"once").unwrap();
    let rec = stowq::keys::Record {
        state: stowq::State::Ready,
        attempt: 0,
        at_ms: 1,
        due_ms: 1,
        token: String::new(),
        nonce: String::new(),
        reason: String::new(),
        level: stowq::DEFAULT_LEVEL,
    };
    let forged = q.keys().marker(id, 5, &rec);
    assert_eq!(q.client.put(&forged, b"").unwrap().status, 200);
    let first = q.claim().unwrap().expect("the job");
    assert_eq!((first.id, first.payload.as_slice()), (id, &b"once"[..]));
    assert!(
        q.claim().unwrap().is_none(),
        "a second lease of the same job"
    );
    assert_eq!(
        q.client.get(&q.keys().gen(id, 6)).unwrap().status,
        404,
        "no gap"
    );
    assert_eq!(
        q.client.get(&forged).unwrap().status,
        404,
        "the marker is gone"
    );
    q.ack(&first).unwrap();
}
