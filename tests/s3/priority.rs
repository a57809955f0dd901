//! Priority levels on s3:// queues (`Queue::enqueue_with`, `enqueue --priority`): a claim
//! takes a due job of the highest level that has one; a job keeps its level through every
//! transition; `repair` puts a marker back at its level; a queue without levels costs a claim
//! what it did.

use crate::common::*;
use std::time::{Duration, Instant};
use stowq::{Options, Queue, State};

fn open(port: u16, bucket: &str, prefix: &str) -> Queue {
    queue(port, bucket, prefix, Options::default())
}

/// Levels 5, 3 and 0, enqueued in the worst order (a level-5 job after a level-3 one, the
/// level-0 job first), are claimed 5, 3, 3, 0 by a handle that learns the levels from its
/// own listing (it enqueued nothing); the requests of each claim are counted: a queue whose
/// jobs are all at the default level costs one LIST per claim listing as before.
#[test]
fn a_higher_level_is_claimed_first_and_level_0_last() {
    let Some(m) = moto() else { return };
    bucket(m.port, "prio");
    let e = open(m.port, "prio", "order");
    let low = e.enqueue_with(b"low", Duration::ZERO, 0).unwrap();
    let a = e.enqueue(b"a").unwrap();
    let b = e.enqueue_with(b"b", Duration::ZERO, 3).unwrap();
    let high = e.enqueue_with(b"high", Duration::ZERO, 5).unwrap();
    let c = open(m.port, "prio", "order");
    let r0 = c.client.requests();
    let first = c.claim().unwrap().unwrap();
    let r1 = c.client.requests();
    assert_eq!(
        (first.id, first.priority, &first.payload[..]),
        (high, 5, &b"high"[..])
    );
    let mut mid = [c.claim().unwrap().unwrap(), c.claim().unwrap().unwrap()];
    mid.sort_by_key(|l| l.id);
    let mut want = [a, b];
    want.sort();
    assert_eq!([mid[0].id, mid[1].id], want, "the default level next");
    assert!(mid.iter().all(|l| l.priority == 3));
    let last = c.claim().unwrap().unwrap();
    assert_eq!((last.id, last.priority), (low, 0), "level 0 last");
    assert!(c.claim().unwrap().is_none());
    // The first claim: the default index's LIST (it shows the flags of 5 and 0), the
    // level-5 index's LIST, then the claim's PUT, marker PUT, DELETE and the record's and
    // envelope's GETs (a level's job starts at generation 1).
    let lists = r1 - r0;
    report(&format!(
        "stowq priority: requests of a first claim with levels 5 and 0 in use: {lists}"
    ));
    assert!((7..=8).contains(&lists), "{lists} requests");
    // Each job's lease carried its level to its receipt.
    for l in [&first, &mid[0], &mid[1], &last] {
        c.ack(l).unwrap();
        let (_, rec) = c.inspect(l.id).unwrap().unwrap();
        assert_eq!((rec.state, rec.level), (State::Done, l.priority));
    }
    let listed = c.list().unwrap();
    assert!(listed
        .iter()
        .any(|l| l.id == high && l.priority == 5 && l.state == State::Done));

    // Without levels: a claim costs what it did (one LIST, PUT, PUT, DELETE, GET).
    let q = open(m.port, "prio", "plain");
    q.enqueue(b"x").unwrap();
    let w = open(m.port, "prio", "plain");
    let r0 = w.client.requests();
    let l = w.claim().unwrap().unwrap();
    // 5, or 6 when the listing's random start shard is past the job's (it wraps around).
    let n = w.client.requests() - r0;
    assert!(
        (5..=6).contains(&n),
        "requests of a claim without levels: {n}"
    );
    assert_eq!(l.priority, 3);
}

/// A delayed job of a high level is not claimed before it is due (a level-3 job is taken
/// meanwhile), and is claimed first once due.
#[test]
fn a_delayed_high_level_job_is_not_claimed_early() {
    let Some(m) = moto() else { return };
    bucket(m.port, "priodelay");
    let q = open(m.port, "priodelay", "q");
    let t0 = q.client.clock.upper_ms();
    let high = q.enqueue_with(b"high", Duration::from_secs(3), 7).unwrap();
    let low = q.enqueue(b"low").unwrap();
    let w = open(m.port, "priodelay", "q");
    let l = w.claim().unwrap().unwrap();
    assert_eq!(
        (l.id, l.priority),
        (low, 3),
        "the due level-3 job, not the delayed level 7"
    );
    assert!(w.claim().unwrap().is_none(), "the level-7 job is not due");
    let due = q.inspect(high).unwrap().unwrap().1.due_ms;
    assert!(due >= t0 + 3_000, "due {due} t0 {t0}");
    // A level-3 job ready before the level-7 one is due.
    let low2 = q.enqueue(b"low2").unwrap();
    let start = Instant::now();
    let got = loop {
        // A fresh handle each time: no candidates kept from an earlier listing.
        let w = open(m.port, "priodelay", "q");
        let now = w.client.clock.upper_ms();
        if now >= due {
            break (w.claim().unwrap().unwrap(), now);
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never due");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        (got.0.id, got.0.priority),
        (high, 7),
        "once due, before the level-3 job"
    );
    assert_eq!(w.claim().unwrap().unwrap().id, low2);
    // A claim takes a job that may be due by its upper bound of the service's time (1 s).
    assert!(
        got.1 + 1_000 >= due,
        "claimed at {} (upper bound), due {due}",
        got.1
    );
}

/// A nacked, an expired, a failed and requeued job keeps its level: its records and markers
/// carry it, `list` and `show`'s `inspect` give it, and each time it is back ready it is
/// claimed before a level-3 job that was ready first.
#[test]
fn nack_expiry_and_requeue_keep_the_level() {
    let Some(m) = moto() else { return };
    bucket(m.port, "priokeep");
    let q = queue(
        m.port,
        "priokeep",
        "q",
        Options {
            lease_ms: 1_000,
            ..Options::default()
        },
    );
    let plain = q.enqueue(b"plain").unwrap();
    let id = q.enqueue_with(b"six", Duration::ZERO, 6).unwrap();
    let check = |what: &str| {
        let l = q.claim().unwrap().unwrap();
        assert_eq!((l.id, l.priority), (id, 6), "{what}: claimed first");
        let (_, rec) = q.inspect(id).unwrap().unwrap();
        assert_eq!((rec.state, rec.level), (State::Leased, 6), "{what}");
        l
    };
    let l = check("new");
    q.nack(&l, Duration::ZERO, "again").unwrap();
    let listed = q.list().unwrap();
    let mine = listed.iter().find(|x| x.id == id).unwrap();
    assert_eq!((mine.state, mine.priority), (State::Ready, 6), "after nack");
    let l = check("nacked");
    // Expiry: let the lease pass, recover.
    let t = Instant::now();
    loop {
        let r = q.recover().unwrap();
        if r.ready == 1 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never expired");
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = l;
    let l = check("expired");
    q.fail(&l, "no").unwrap();
    let (_, rec) = q.inspect(id).unwrap().unwrap();
    assert_eq!((rec.state, rec.level), (State::Dead, 6));
    assert_eq!(q.requeue(Some(id)).unwrap(), 1);
    let l = check("requeued");
    q.ack(&l).unwrap();
    let p = q.claim().unwrap().unwrap();
    assert_eq!((p.id, p.priority), (plain, 3));
}

/// `repair` (and `fsck`'s `check`) put a lost marker back at the job's level, read from its
/// record: in the level's own ready index, and a claim then takes the job first.
#[test]
fn repair_puts_a_lost_marker_back_at_its_level() {
    let Some(m) = moto() else { return };
    bucket(m.port, "priorepair");
    let q = open(m.port, "priorepair", "q");
    q.enqueue(b"plain").unwrap();
    let id = q.enqueue_with(b"seven", Duration::ZERO, 7).unwrap();
    let marker = q
        .client
        .list(&q.keys().ready_index(7), None, None, 10)
        .unwrap()
        .unwrap()
        .entries;
    assert_eq!(marker.len(), 1);
    let key = marker[0].key.clone();
    assert!(
        key.starts_with("q/i/ready-7/") && key.ends_with(".p7"),
        "{key}"
    );
    assert_eq!(q.client.delete(&key).unwrap().status, 204);
    let c = q.check().unwrap();
    assert_eq!(c.missing.len(), 1, "{c:?}");
    assert_eq!(
        (c.missing[0].0, &c.missing[0].3),
        (id, &key),
        "the marker repair would put"
    );
    assert!(
        c.foreign.is_empty(),
        "the level flags are not foreign: {c:?}"
    );
    let r = q.repair().unwrap();
    assert_eq!((r.put, r.deleted, r.foreign), (1, 0, 0));
    assert_eq!(
        q.client.get(&key).unwrap().status,
        200,
        "put back at its level"
    );
    let w = open(m.port, "priorepair", "q");
    let l = w.claim().unwrap().unwrap();
    assert_eq!((l.id, l.priority), (id, 7));
    assert_eq!(q.repair().unwrap().put, 0);
}

/// `enqueue --priority` on the CLI: `show` prints the level, `list --json` gives it,
/// `status` counts ready jobs per level (text, `--json`, `--prometheus`), a claim takes the
/// highest; `--priority` with `--key` is refused by name (not done, nothing enqueued).
#[test]
fn enqueue_priority_on_the_cli() {
    use crate::sigkill::{cli, out};
    let Some(m) = moto() else { return };
    let url = "s3://cliprio/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let enq = |p: &str| {
        let (code, id) = out(cli(m.port)
            .args(["enqueue", url, "--priority", p])
            .stdin(std::process::Stdio::null()));
        assert_eq!(code, 0);
        id
    };
    let _three = enq("3");
    let seven = enq("7");
    let _one = enq("1");
    let (code, s) = out(cli(m.port).args(["show", url, &seven]));
    assert_eq!(code, 0);
    assert!(s.contains("\npriority  7\n"), "{s}");
    let (code, s) = out(cli(m.port).args(["status", url]));
    assert_eq!(code, 0);
    assert!(s.ends_with("\nready by priority  7:1 3:1 1:1"), "{s}");
    let (_, j) = out(cli(m.port).args(["status", url, "--json"]));
    assert!(
        j.ends_with(",\"ready_by_priority\":[0,1,0,1,0,0,0,1]}"),
        "{j}"
    );
    let (_, p) = out(cli(m.port).args(["status", url, "--prometheus"]));
    assert!(
        p.contains("steadq_ready_by_priority{queue=\"s3://cliprio/q\",priority=\"7\"} 1"),
        "{p}"
    );
    let (_, l) = out(cli(m.port).args(["list", url, "--json"]));
    assert!(
        l.contains(&format!(
            "{{\"id\":\"{seven}\",\"state\":\"ready\",\"attempt\":0,\"priority\":7,\"gen\":1,"
        )),
        "{l}"
    );
    let (code, h) = out(cli(m.port).args(["claim", url]));
    assert_eq!(code, 0);
    assert!(h.starts_with(&seven), "{h}");
    let o = cli(m.port)
        .args(["enqueue", url, "--priority", "6", "--key", "k"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("enqueue --priority with --key: not supported on s3:// queues ("),
        "{err}"
    );
    let (_, j) = out(cli(m.port).args(["status", url, "--json"]));
    assert!(
        j.ends_with(",\"ready_by_priority\":[0,1,0,1,0,0,0,0]}"),
        "nothing enqueued: {j}"
    );
}
