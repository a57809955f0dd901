//! A `stowq work` process SIGKILLed mid-job: its lease expires and is recovered, and the job
//! runs again at attempt 2. Also the CLI's claim/ack round trip.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stowq::{Options, State};

fn cli(port: u16) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stowq"));
    c.env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("HOME", "/nonexistent");
    c
}

fn out(c: &mut Command) -> (i32, String) {
    let o = c.stderr(Stdio::inherit()).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).trim().to_string(),
    )
}

#[test]
fn a_sigkilled_worker_s_lease_is_recovered() {
    let Some(m) = moto() else { return };
    let url = "s3://kill/p";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "kill", "p", Options::default());
    let id = q.enqueue(b"long job").unwrap();
    let dir = std::env::temp_dir().join(format!("stowq-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pidfile = dir.join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let mut worker = cli(m.port)
        .args(["work", url, "--lease-ms", "2000", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !pidfile.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "worker never ran the job"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1_500)); // past one renewal (every 666 ms)
    worker.kill().unwrap(); // SIGKILL
    worker.wait().unwrap();
    let killed = Instant::now();
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    let _ = std::fs::remove_dir_all(&dir);

    let leased = q.list().unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].state, State::Leased);
    assert!(leased[0].gen >= 2, "the worker renewed at least once");
    let deadline = leased[0].sort_ms;
    let rep = loop {
        let r = q.recover().unwrap();
        if r.ready > 0 {
            break r;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "never recovered"
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    let after_expiry = q.client.clock.now_ms() - deadline;
    let after_kill = killed.elapsed().as_millis();
    assert_eq!(rep.ready, 1);
    assert!(
        after_expiry >= 0,
        "recovered before the deadline: {after_expiry} ms"
    );
    let l = q.claim().unwrap().unwrap();
    assert_eq!(
        (l.id, l.attempt, l.payload.as_slice()),
        (id, 2, &b"long job"[..])
    );
    q.ack(&l).unwrap();
    report(&format!(
        "stowq SIGKILL: 2 s lease recovered {after_expiry} ms after its deadline (service \
         clock), {after_kill} ms after the kill; job back at attempt 2"
    ));
}

#[test]
fn the_cli_round_trip() {
    let Some(m) = moto() else { return };
    let url = "s3://clib/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let p = std::env::temp_dir().join(format!("stowq-cli-{}", std::process::id()));
    std::fs::write(&p, b"hello").unwrap();
    let (code, id) = out(cli(m.port).args(["enqueue", url, p.to_str().unwrap()]));
    assert_eq!((code, id.len()), (0, 32));
    let got = p.with_extension("out");
    let (code, h) = out(cli(m.port).args(["claim", url, "--payload-out", got.to_str().unwrap()]));
    assert_eq!(code, 0);
    assert_eq!(std::fs::read(&got).unwrap(), b"hello");
    assert!(h.starts_with(&id));
    assert_eq!(
        out(cli(m.port).args(["claim", url])).0,
        3,
        "nothing else ready"
    );
    let (code, h2) = out(cli(m.port).args(["renew", url, &h]));
    assert_eq!(code, 0);
    assert_eq!(
        out(cli(m.port).args(["ack", url, &h])).0,
        6,
        "the old handle lost its lease"
    );
    assert_eq!(out(cli(m.port).args(["ack", url, &h2])).0, 0);
    let (code, s) = out(cli(m.port).args(["status", url]));
    assert_eq!((code, s.lines().nth(4)), (0, Some("done 1")));
    let (code, l) = out(cli(m.port).args(["list", url]));
    assert_eq!(code, 0);
    assert!(l.starts_with(&format!("{id} done 3 1 ")), "{l}");
    // work --once: exit 65 dead-letters, then requeue brings it back.
    out(cli(m.port).args(["enqueue", url, p.to_str().unwrap()]));
    let (code, _) = out(cli(m.port).args(["work", url, "--once", "--", "sh", "-c", "exit 65"]));
    assert_eq!(code, 0);
    let (_, s) = out(cli(m.port).args(["status", url]));
    assert_eq!(s.lines().nth(5), Some("dead 1"));
    assert_eq!(out(cli(m.port).args(["requeue", url])), (0, "1".into()));
    let (code, _) = out(cli(m.port).args(["work", url, "--once", "--", "cat"]));
    assert_eq!(code, 0);
    let (_, s) = out(cli(m.port).args(["status", url]));
    assert_eq!(s.lines().nth(4), Some("done 2"));
    assert_eq!(
        out(cli(m.port).args(["recover", url])).1,
        "ready 0 dead 0 stale 0"
    );
    let _ = std::fs::remove_file(&p);
    let _ = std::fs::remove_file(&got);
}
