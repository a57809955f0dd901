//! What a new user reached for around a two-service deployment (issue 42, "Reach"): jobs as
//! JSON, requeue by reason, waiting for a queue to drain, totals that survive compaction,
//! key retention apart from receipts, `show` of a compacted job, one Prometheus series per
//! queue, and an `enqueue --wait` that says it waited.

use crate::common::*;
use std::time::{Duration, Instant};

fn ok(o: &std::process::Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    text(&o.stdout)
}

fn init(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    ok(&steadq(&["init", p(d.path())]));
    d
}

fn enqueue(d: &TempDir, payload: &[u8], extra: &[&str]) -> String {
    let mut args = vec!["enqueue", p(d.path())];
    args.extend_from_slice(extra);
    ok(&steadq_in(&args, payload)).trim().to_string()
}

fn claim(d: &TempDir) -> String {
    ok(&steadq(&["claim", p(d.path())])).trim().to_string()
}

/// The string value of `key` in a one-line JSON object (test values hold no quotes).
fn field<'a>(json: &'a str, key: &str) -> &'a str {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} in {json}"))
        + key.len()
        + 3;
    let v = &json[at..];
    match v.strip_prefix('"') {
        Some(s) => &s[..s.find('"').unwrap()],
        None => &v[..v.find([',', '}']).unwrap()],
    }
}

fn status_json(d: &TempDir) -> String {
    ok(&steadq(&["status", p(d.path()), "--json"]))
}

#[test]
fn list_and_claim_print_one_json_object_per_job() {
    let d = init("reach-json");
    let ready = enqueue(&d, b"a", &["--max-attempts", "2"]);
    let later = enqueue(&d, b"b", &["--delay", "1h"]);
    let out = ok(&steadq(&["list", p(d.path()), "--json"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let r = lines.iter().find(|l| l.contains(&ready)).unwrap();
    assert_eq!(field(r, "state"), "ready");
    assert_eq!(field(r, "max"), "2");
    assert_eq!(field(r, "priority"), "3");
    assert_eq!(field(r, "deadline"), "null");
    assert!(d.path().join(field(r, "path")).is_file(), "{r}");
    let l = lines.iter().find(|l| l.contains(&later)).unwrap();
    assert_eq!(field(l, "state"), "delayed");
    let due: f64 = field(l, "deadline").parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((due - now - 3600.0).abs() < 60.0, "{due} vs {now}");

    let c = ok(&steadq(&["claim", p(d.path()), "--json", "--lease", "5m"]));
    assert_eq!(c.lines().count(), 1, "{c}");
    assert_eq!(field(&c, "id"), ready);
    assert_eq!(field(&c, "state"), "leased");
    assert_eq!(field(&c, "attempt"), "1");
    let expires: f64 = field(&c, "deadline").parse().unwrap();
    assert!((expires - now - 300.0).abs() < 60.0, "{c}");
    let handle = field(&c, "handle");
    assert!(field(&c, "path").ends_with(handle), "{c}");
    assert!(d.path().join(field(&c, "path")).is_file(), "{c}");
    // The handle in the JSON is the lease: ack takes it whole.
    ok(&steadq(&["ack", p(d.path()), handle]));
}

#[test]
fn dead_requeue_by_reason_moves_only_that_reason() {
    let d = init("reach-reason");
    let mut ids = Vec::new();
    for reason in ["timeout", "badinput", "timeout"] {
        ids.push(enqueue(&d, reason.as_bytes(), &[]));
        let h = claim(&d);
        ok(&steadq(&["fail", p(d.path()), &h, "--reason", reason]));
    }
    // JOB with another reason: refused, nothing changed.
    let o = steadq(&[
        "dead",
        "requeue",
        p(d.path()),
        &ids[1],
        "--reason",
        "timeout",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("with reason timeout"),
        "{}",
        text(&o.stderr)
    );
    let o = steadq(&["dead", "requeue", p(d.path()), "--reason", "Time!"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let out = ok(&steadq(&[
        "dead",
        "requeue",
        p(d.path()),
        "--all",
        "--reason",
        "timeout",
    ]));
    assert_eq!(out.trim(), "requeued 2 jobs");
    let dead = ok(&steadq(&["list", p(d.path()), "--state", "dead", "--json"]));
    assert_eq!(dead.lines().count(), 1, "{dead}");
    assert_eq!(field(&dead, "id"), ids[1]);
    assert_eq!(field(&dead, "reason"), "badinput");
    let ready = ok(&steadq(&[
        "list",
        p(d.path()),
        "--state",
        "ready",
        "--json",
    ]));
    let mut got: Vec<&str> = ready.lines().map(|l| field(l, "id")).collect();
    got.sort_unstable();
    let mut want = vec![ids[0].as_str(), ids[2].as_str()];
    want.sort_unstable();
    assert_eq!(got, want);
    // One JOB with its reason.
    let out = ok(&steadq(&[
        "dead",
        "requeue",
        p(d.path()),
        &ids[1],
        "--reason",
        "badinput",
    ]));
    assert_eq!(out.trim(), format!("requeued {}", ids[1]));
}

#[test]
fn wait_empty_returns_when_drained_and_times_out_otherwise() {
    let d = init("reach-wait");
    // Empty now: at once.
    ok(&steadq(&["wait", p(d.path()), "--empty"]));
    let o = steadq(&["wait", p(d.path())]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    enqueue(&d, b"x", &[]);
    let t = Instant::now();
    let o = steadq(&["wait", p(d.path()), "--empty", "--timeout", "300ms"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(
        text(&o.stderr).contains("waited 0.300s"),
        "{}",
        text(&o.stderr)
    );
    // A leased job counts until it is settled; a delayed one counts too.
    let h = claim(&d);
    enqueue(&d, b"y", &["--delay", "1h"]);
    let mut waiter = std::process::Command::new(env!("CARGO_BIN_EXE_steadq"))
        .args(["wait", p(d.path()), "--empty", "--timeout", "60s"])
        .spawn()
        .unwrap();
    wait_until_watching(waiter.id());
    ok(&steadq(&["ack", p(d.path()), &h]));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "the delayed job is left"
    );
    let t = Instant::now();
    ok(&steadq(&["recover", p(d.path()), "--due-now"]));
    let h = claim(&d);
    ok(&steadq(&["ack", p(d.path()), &h]));
    assert_eq!(waiter.wait().unwrap().code(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn totals_only_go_up_across_compaction_requeue_and_purge() {
    let d = init("reach-totals");
    for _ in 0..3 {
        enqueue(&d, b"j", &[]);
    }
    for _ in 0..2 {
        let h = claim(&d);
        ok(&steadq(&["ack", p(d.path()), &h]));
    }
    let h = claim(&d);
    ok(&steadq(&["fail", p(d.path()), &h]));
    let s = status_json(&d);
    assert_eq!(
        (field(&s, "acked_total"), field(&s, "dead_total")),
        ("2", "1")
    );
    ok(&steadq(&["compact", p(d.path()), "--older-than", "0s"]));
    let s = status_json(&d);
    assert_eq!(field(&s, "acked"), "0", "the gauge drops");
    assert_eq!(field(&s, "acked_total"), "2", "the total does not");
    let prom = ok(&steadq(&["status", p(d.path()), "--prometheus"]));
    assert!(
        prom.contains("# TYPE steadq_acked_total counter\n"),
        "{prom}"
    );
    assert!(prom.contains("steadq_acked_total{queue="), "{prom}");
    assert!(prom.contains("} 2\n# HELP steadq_dead_total"), "{prom}");
    // Requeued, dead again, purged: every dead-lettering counts once.
    ok(&steadq(&["dead", "requeue", p(d.path()), "--all"]));
    assert_eq!(field(&status_json(&d), "dead_total"), "1");
    let h = claim(&d);
    ok(&steadq(&["fail", p(d.path()), &h]));
    ok(&steadq(&["dead", "purge", p(d.path())]));
    let s = status_json(&d);
    assert_eq!((field(&s, "dead"), field(&s, "dead_total")), ("0", "2"));
    let counts = std::fs::read_to_string(d.path().join("steadq.counts")).unwrap();
    assert!(
        counts.starts_with("steadq-counts\nversion=1\nacked=2\ndead=2\nsum="),
        "{counts}"
    );
    ok(&steadq(&["fsck", p(d.path())]));
    // Damaged: status says nothing of totals (null), compaction refuses, nothing removed.
    std::fs::write(
        d.path().join("steadq.counts"),
        counts.replace("acked=2", "acked=9"),
    )
    .unwrap();
    assert_eq!(field(&status_json(&d), "acked_total"), "null");
    let h = {
        enqueue(&d, b"k", &[]);
        claim(&d)
    };
    ok(&steadq(&["ack", p(d.path()), &h]));
    let o = steadq(&["compact", p(d.path()), "--older-than", "0s"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("steadq.counts is damaged"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(field(&status_json(&d), "acked"), "1");
}

#[test]
fn compact_keys_older_than_keeps_keys_apart_from_receipts() {
    let d = init("reach-keys");
    enqueue(&d, b"k", &["--key", "order-1"]);
    let h = claim(&d);
    ok(&steadq(&["ack", p(d.path()), &h]));
    let args = ["compact", p(d.path()), "--older-than", "0s"];
    ok(&steadq(&[&args[..], &["--keys-older-than", "1h"]].concat()));
    let s = status_json(&d);
    assert_eq!((field(&s, "acked"), field(&s, "live_keys")), ("0", "1"));
    ok(&steadq(&args));
    assert_eq!(field(&status_json(&d), "live_keys"), "0");
}

#[test]
fn show_finds_a_compacted_job_by_its_evidence_line() {
    let d = init("reach-show");
    let id = enqueue(&d, b"a", &[]);
    let h = claim(&d);
    ok(&steadq(&["ack", p(d.path()), &h]));
    ok(&steadq(&["compact", p(d.path()), "--older-than", "0s"]));
    let out = ok(&steadq(&["show", p(d.path()), &id]));
    assert!(out.contains(&format!("job       {id}\n")), "{out}");
    assert!(
        out.contains("state     acked, receipt removed (compacted)"),
        "{out}"
    );
    // SHA-256 of "a".
    assert!(
        out.contains(
            "sha256    ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb\n"
        ),
        "{out}"
    );
    // The ack time in UTC beside its unix seconds, both the same millisecond, as GNU date
    // prints it.
    let acked = out
        .lines()
        .find_map(|l| l.strip_prefix("acked     "))
        .unwrap_or_else(|| panic!("{out}"));
    assert_same_moment(acked);
    let o = steadq(&["show", p(d.path()), &id, "--raw"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("payload was not kept"),
        "{}",
        text(&o.stderr)
    );
    let o = steadq(&["show", p(d.path()), "0123456789abcdef0123456789abcdef"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("no job"), "{}", text(&o.stderr));
}

#[test]
fn prometheus_queue_label_is_the_canonical_path() {
    let d = init("reach-label");
    let parent = d.path().parent().unwrap();
    let rel = d.path().file_name().unwrap();
    let from = |dir: &std::path::Path, q: &std::ffi::OsStr| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_steadq"))
            .arg("status")
            .arg(q)
            .arg("--prometheus")
            .current_dir(dir)
            .output()
            .unwrap();
        ok(&o)
    };
    let relative = from(parent, rel);
    let absolute = from(std::path::Path::new("/"), d.path().as_os_str());
    assert_eq!(relative, absolute);
    let canon = std::fs::canonicalize(d.path()).unwrap();
    assert!(
        relative.contains(&format!("{{queue=\"{}\"", canon.display())),
        "{relative}"
    );
}

#[test]
fn enqueue_wait_timeout_says_it_waited_and_how_long() {
    let d = TempDir::new("reach-full");
    ok(&steadq(&["init", p(d.path()), "--max-jobs", "1"]));
    enqueue(&d, b"1", &[]);
    let o = steadq_in(&["enqueue", p(d.path()), "--wait", "300ms"], b"2");
    assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(
        e.contains("queue full") && e.contains("waited 0.300s for room"),
        "{e}"
    );
}

/// A line a member forges in `evidence.log` with terminal controls in its receipt name is
/// not a line: `show` of its id finds no job and prints no control byte. It printed the
/// name raw (a retitled, cleared terminal).
#[test]
fn show_never_prints_a_forged_evidence_lines_terminal_controls() {
    let d = init("reach-forged");
    let id = "01a249a5c4ea8d296259883873ebf42c";
    let z = "0".repeat(64);
    let line = format!("v1 {id} \x1b]0;PWN\x07\x1b[2Jx.rct {z} {z} 5\n");
    let mut log = std::fs::read(d.path().join("evidence.log")).unwrap_or_default();
    log.extend_from_slice(line.as_bytes());
    std::fs::write(d.path().join("evidence.log"), log).unwrap();
    let o = steadq(&["show", p(d.path()), id]);
    let all = [o.stdout.clone(), o.stderr.clone()].concat();
    assert!(
        !all.contains(&0x1b) && !all.contains(&0x07),
        "{:?}",
        text(&all)
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("no job"), "{}", text(&o.stderr));
}

/// The inotify watches `wait --empty` holds (this user's `fs.inotify.max_user_watches`,
/// shared with the user's other processes): 3000 bucket directories a member made in
/// `delayed/` do not take 3000 of them (at most the slots and `delayed/` when there are
/// over 1024), and the wait still sees the queue empty within its one-second look. It
/// watched every one.
#[test]
fn wait_empty_does_not_spend_a_watch_per_planted_bucket() {
    let d = init("reach-watches");
    enqueue(&d, b"a", &[]);
    for i in 1..=3000u64 {
        std::fs::create_dir(d.path().join(format!("delayed/{i:016x}"))).unwrap();
    }
    let mut w = std::process::Command::new(env!("CARGO_BIN_EXE_steadq"))
        .args(["wait", "--empty", p(d.path()), "--timeout", "20s"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let watches = || {
        let mut n = 0;
        for fd in std::fs::read_dir(format!("/proc/{}/fd", w.id()))
            .into_iter()
            .flatten()
        {
            let fd = fd.unwrap().path();
            if std::fs::read_link(&fd).is_ok_and(|l| l.to_str() == Some("anon_inode:inotify")) {
                let info = format!(
                    "/proc/{}/fdinfo/{}",
                    w.id(),
                    fd.file_name().unwrap().to_str().unwrap()
                );
                let info = std::fs::read_to_string(info).unwrap_or_default();
                n += info.lines().filter(|l| l.starts_with("inotify")).count();
            }
        }
        n
    };
    let (t, mut most, mut seen) = (Instant::now(), 0, 0);
    while t.elapsed() < Duration::from_secs(3) {
        let n = watches();
        most = most.max(n);
        seen += usize::from(n > 0);
        std::thread::sleep(Duration::from_millis(5));
    }
    let h = claim(&d);
    ok(&steadq(&["ack", p(d.path()), &h]));
    let t = Instant::now();
    let status = loop {
        if let Some(s) = w.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = w.kill();
            panic!("wait --empty did not see the queue empty");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = text(&w.wait_with_output().unwrap().stderr);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(seen > 0, "never saw the wait's inotify instance");
    assert!(most <= 300, "wait --empty held {most} watches");
}

/// `nack --delay` says when the job is due in UTC for a person and in unix seconds for a
/// script (it printed unix seconds only): both name the same moment, one hour from now.
#[test]
fn a_delayed_nack_prints_its_due_time_in_utc_and_unix_seconds() {
    let d = TempDir::new("nack-due-utc");
    let q = d.path();
    assert!(steadq(&["init", p(q)]).status.success());
    assert!(steadq_in(&["enqueue", p(q)], b"x").status.success());
    let h = text(&steadq(&["claim", p(q)]).stdout).trim().to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let o = steadq(&["nack", p(q), &h, "--delay", "1h"]);
    assert!(o.status.success(), "{o:?}");
    let s = text(&o.stdout);
    let (utc, unix) = s
        .trim()
        .strip_prefix("delayed until ")
        .and_then(|r| r.split_once(" (unix "))
        .unwrap_or_else(|| panic!("{s:?}"));
    let unix = unix.strip_suffix(')').unwrap_or_else(|| panic!("{s:?}"));
    let secs: f64 = unix.parse().unwrap();
    assert!((secs - now - 3600.0).abs() < 30.0, "{s} vs now {now}");
    // GNU date prints the same moment the same way.
    let date = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{unix}"), "+%FT%T.%3NZ"])
        .output()
        .unwrap();
    assert_eq!(text(&date.stdout).trim(), utc, "{s}");
}

/// `line` is `<UTC> (unix S.mmm)` and GNU `date` prints S.mmm as that UTC time.
fn assert_same_moment(line: &str) {
    let (utc, unix) = line
        .split_once(" (unix ")
        .and_then(|(u, r)| Some((u, r.strip_suffix(')')?)))
        .unwrap_or_else(|| panic!("{line:?}"));
    assert_eq!(
        unix.split_once('.').map(|(_, f)| f.len()),
        Some(3),
        "{line}"
    );
    let date = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{unix}"), "+%FT%T.%3NZ"])
        .output()
        .unwrap();
    assert_eq!(text(&date.stdout).trim(), utc, "{line}");
}

/// `show` prints a job's created time as one moment twice, UTC and unix seconds (they
/// disagreed by a millisecond half the time: one was rounded, the other cut).
#[test]
fn show_prints_the_created_time_as_one_moment() {
    let d = init("show-created");
    for _ in 0..20 {
        let id = enqueue(&d, b"x", &[]);
        let out = ok(&steadq(&["show", p(d.path()), &id]));
        let created = out
            .lines()
            .find_map(|l| l.strip_prefix("created   "))
            .unwrap_or_else(|| panic!("{out}"));
        assert_same_moment(created);
    }
}
