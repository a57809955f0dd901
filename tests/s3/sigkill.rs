//! A `steadq work s3://...` process SIGKILLed mid-job: its lease expires and is recovered,
//! and the job runs again at attempt 2.
use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stowq::{Options, State};

/// `steadq` (built with `s3`) pointed at moto on `port`.
pub fn cli(port: u16) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_steadq"));
    c.env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("HOME", "/nonexistent");
    c
}

/// Exit code and trimmed stdout.
pub fn out(c: &mut Command) -> (i32, String) {
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
        .args(["work", url, "--lease", "2s", "--", "sh", "-c", &script])
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
