//! `steadq work`: exit codes that decide the job, commands and their children, timeouts,
//! signals, the queue replaced under it, and the environment its commands get.

use crate::common::*;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use steadq::{Queue, State};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// `steadq work` stops with an error naming the directory when a shard is replaced under it.
#[test]
fn work_exits_when_a_shard_is_replaced() {
    let d = TempDir::new("reshard-cli");
    Queue::create(d.path(), opts(8)).unwrap();
    let dir = d.path().to_str().unwrap();
    let mut w = Command::new(BIN)
        .args(["work", dir, "--", "cat"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the worker holds the queue's directories (not after a fixed delay: under CI load
    // it could open the queue only after the shard was made again, and then run on).
    wait_until_held(w.id(), &queue_dirs(d.path()));
    // An idle worker watches the queue once its open and first look are done.
    wait_until_watching(w.id());
    std::fs::remove_dir_all(d.path().join("ready/03")).unwrap();
    Queue::create(d.path(), opts(8)).unwrap();
    let t = Instant::now();
    while w.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if w.try_wait().unwrap().is_none() {
        w.kill().unwrap();
        panic!("worker still running 10 s after ready/03 was replaced");
    }
    let out = w.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ready/03 was removed or replaced"), "{err}");
}

fn has_running_child(pid: u32) -> bool {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    rd.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("children")).is_ok_and(|c| !c.trim().is_empty())
    })
}

fn sigterm(c: &Child) {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(c),
        rustix::process::Signal::TERM,
    )
    .unwrap();
}

#[test]
fn end_to_end_two_producers_three_workers_one_killed() {
    let d = TempDir::new("cli-e2e");
    let out = d.path().with_extension("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let o = steadq(&["init", p(d.path()), "--shards", "4"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // Two shell producers at once.
    let producer = |tag: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("for i in $(seq 1 60); do echo job-{tag}-$i | {BIN} enqueue {} >/dev/null || exit 1; done", p(d.path())))
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (producer("a"), producer("b"));
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    // Three workers running a real command: copy the payload to a file named after the job.
    let cmd = format!(
        "cat > {}/$STEADQ_JOB_ID.$STEADQ_ATTEMPT; sleep 0.02",
        p(&out)
    );
    let worker = || {
        Command::new(BIN)
            .args([
                "work",
                p(d.path()),
                "--lease",
                "2s",
                "--quiet",
                "--",
                "sh",
                "-c",
                &cmd,
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut workers: Vec<Child> = (0..3).map(|_| worker()).collect();
    // Kill one worker while it runs a job.
    let victim = workers[0].id();
    let t = Instant::now();
    while !has_running_child(victim) && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(has_running_child(victim), "worker never ran a job");
    workers[0].kill().unwrap();
    workers[0].wait().unwrap();
    let q = Queue::open(d.path()).unwrap();
    let t = Instant::now();
    while q.status().unwrap().acked < 120 {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "stuck: {:?}",
            q.status().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for w in &workers[1..] {
        sigterm(w);
    }
    for w in &mut workers[1..] {
        assert!(w.wait().unwrap().success());
    }
    let s = q.status().unwrap();
    assert_eq!(
        (s.acked, s.ready, s.leased, s.delayed, s.dead),
        (120, 0, 0, 0, 0)
    );
    let receipts = q.list(Some(State::Acked)).unwrap();
    let mut ids: Vec<_> = receipts.iter().map(|l| l.name.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 120, "every job acked exactly once");
    assert!(
        receipts.iter().any(|l| l.name.attempt == 2),
        "the killed worker's job was recovered and run again"
    );
    // Every payload reached the command.
    let mut payloads: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    payloads.sort();
    payloads.dedup();
    assert!(payloads.len() >= 120);
    let o = steadq(&["fsck", p(d.path())]);
    assert!(
        o.status.success(),
        "fsck: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let o = steadq(&["status", p(d.path()), "--json"]);
    assert!(
        text(&o.stdout).contains("\"acked\":120"),
        "{}",
        text(&o.stdout)
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn work_once_exit_codes_decide_the_job() {
    let d = TempDir::new("cli-codes");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    let run = |code: i32| {
        steadq(&[
            "work",
            p(q),
            "--once",
            "--backoff",
            "30s",
            "--retry-delay",
            "90s",
            "--",
            "sh",
            "-c",
            &format!("cat >/dev/null; exit {code}"),
        ])
    };
    let state = || Queue::open(q).unwrap().list(None).unwrap()[0].clone();
    // No job: exit 3.
    assert_eq!(run(0).status.code(), Some(3));
    steadq_in(&["enqueue", p(q), "--max-attempts", "3"], b"x");
    assert_eq!(run(0).status.code(), Some(0));
    assert_eq!(state().state, State::Acked);
    let qq = Queue::open(q).unwrap();
    qq.compact(Duration::ZERO).unwrap();
    steadq_in(&["enqueue", p(q), "--max-attempts", "3"], b"x");
    assert!(run(75).status.success());
    let l = state();
    assert_eq!((l.state, l.name.attempt), (State::Delayed, 1));
    let steadq::Kind::Delayed { not_before_ns, .. } = l.name.kind else {
        panic!()
    };
    let wait = not_before_ns.saturating_sub(qq.clock().wall_ns());
    assert!(
        wait > 80_000_000_000 && wait <= 90_000_000_000,
        "75 retries after --retry-delay, got {wait} ns"
    );
    // Exit 1: exponential backoff, attempt 1 waits --backoff (30s).
    std::fs::remove_dir_all(q).unwrap();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    steadq_in(&["enqueue", p(q), "--max-attempts", "3"], b"x");
    assert!(run(1).status.success());
    let l = state();
    let steadq::Kind::Delayed { not_before_ns, .. } = l.name.kind else {
        panic!("{l:?}")
    };
    let wait = not_before_ns.saturating_sub(qq.clock().wall_ns());
    assert!(
        wait > 20_000_000_000 && wait <= 30_000_000_000,
        "exit 1 backs off --backoff, got {wait} ns"
    );
    std::fs::remove_dir_all(q).unwrap();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    steadq_in(&["enqueue", p(q), "--max-attempts", "1"], b"y");
    let o = run(1);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("attempts exhausted, dead-lettered"),
        "{}",
        text(&o.stderr)
    );
    let l = state();
    assert_eq!(
        (l.state, l.name.kind),
        (
            State::Dead,
            steadq::Kind::Dead {
                reason: steadq::Reason::EXHAUSTED
            }
        )
    );
    let o = steadq(&["dead", "requeue", p(q), "--all"]);
    assert!(text(&o.stdout).contains("requeued 1"));
    assert!(run(65).status.success());
    assert_eq!(
        state().name.kind,
        steadq::Kind::Dead {
            reason: steadq::Reason::new("dataerr").unwrap()
        }
    );
    assert!(steadq(&["dead", "purge", p(q)]).status.success());
    assert!(Queue::open(q).unwrap().list(None).unwrap().is_empty());
    // A command that cannot start: exit 2, and the job is released, not burnt.
    steadq_in(&["enqueue", p(q)], b"z");
    let o = steadq(&["work", p(q), "--once", "--", "/nonexistent/cmd"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("/nonexistent/cmd"),
        "{}",
        text(&o.stderr)
    );
    let l = state();
    assert_eq!(
        (l.state, l.name.attempt, l.name.generation),
        (State::Ready, 0, 0),
        "never claimed: no attempt used"
    );
}

/// SIGTERM, and SIGINT, SIGHUP (the terminal closed) and SIGQUIT alike: a breaker found
/// SIGHUP and SIGQUIT killed `work` outright (exit 129), its command's children ran on, and
/// the job ran a second time at its lease's end while the first copy still wrote.
#[test]
fn sigterm_lets_a_running_job_finish_or_releases_it_after_the_grace_period() {
    use rustix::process::Signal;
    let cases = [
        ("10s", "0.5", State::Acked, Signal::TERM),
        ("300ms", "30", State::Ready, Signal::TERM),
        ("10s", "0.5", State::Acked, Signal::HUP),
        ("300ms", "30", State::Ready, Signal::QUIT),
        ("10s", "0.5", State::Acked, Signal::INT),
    ];
    for (grace, sleep, want, sig) in cases {
        let d = TempDir::new("cli-term");
        let q = d.path();
        assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
        steadq_in(&["enqueue", p(q)], b"long job");
        let mut w = Command::new(BIN)
            .args([
                "work",
                p(q),
                "--grace",
                grace,
                "--quiet",
                "--",
                "sh",
                "-c",
                &format!("cat >/dev/null; sleep {sleep}"),
            ])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !has_running_child(w.id()) {
            assert!(t.elapsed() < Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(5));
        }
        rustix::process::kill_process(rustix::process::Pid::from_child(&w), sig).unwrap();
        let status = w.wait().unwrap();
        assert!(status.success(), "{sig:?}: {status:?}");
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "stopped within the grace period"
        );
        let l = Queue::open(q).unwrap().list(None).unwrap();
        assert_eq!(
            l[0].state, want,
            "{sig:?}, grace {grace}, job sleeps {sleep}s"
        );
    }
}

#[test]
fn a_killed_worker_takes_its_command_with_it() {
    let d = TempDir::new("cli-pdeath");
    assert!(steadq(&["init", p(d.path())]).status.success());
    steadq_in(&["enqueue", p(d.path())], b"x");
    let mut w = Command::new(BIN)
        .args([
            "work",
            p(d.path()),
            "--quiet",
            "--",
            "sh",
            "-c",
            "cat >/dev/null; sleep 30",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let child = loop {
        let kids: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", w.id()))
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| c.split_whitespace().map(String::from).collect::<Vec<_>>())
            .collect();
        if let Some(k) = kids.first() {
            break k.clone();
        }
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(5));
    };
    w.kill().unwrap();
    w.wait().unwrap();
    let t = Instant::now();
    // Gone, or a zombie waiting for init to reap it.
    while std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the command outlived its worker"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A worker SIGKILLed between the fork and the exec of its command (the moment `steadq demo`
/// kills at): the child sees it and exits without a word. Before, it returned an error from
/// its pre-exec hook and std, failing to report it to the dead parent, printed "fatal runtime
/// error: assertion failed: output.write(&bytes).is_ok(), aborting".
#[test]
fn a_worker_killed_before_its_command_started_leaves_no_abort_message() {
    let d = TempDir::new("cli-prexec");
    assert!(steadq(&["init", p(d.path())]).status.success());
    let mut stderr = String::new();
    for _ in 0..30 {
        steadq_in(&["enqueue", p(d.path())], b"x");
        let mut w = Command::new(BIN)
            // A command that lasts (until the worker's death takes it), so the spin sees it.
            .args(["work", p(d.path()), "--quiet", "--", "sleep", "30"])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        // Spin, no sleep: the kill should land right after the fork.
        while !std::fs::read_dir(format!("/proc/{}/task", w.id()))
            .unwrap()
            .flatten()
            .any(|t| {
                std::fs::read_to_string(t.path().join("children"))
                    .is_ok_and(|c| !c.trim().is_empty())
            })
        {
            assert!(t.elapsed() < Duration::from_secs(20));
        }
        w.kill().unwrap();
        w.wait().unwrap();
        // EOF once the orphan (if any) is gone too: it holds the pipe's write end.
        w.stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
    }
    assert!(!stderr.contains("fatal runtime error"), "{stderr}");
}

#[test]
fn a_worker_notices_its_queue_was_replaced() {
    let d = TempDir::new("cli-ghost");
    assert!(steadq(&["init", p(d.path())]).status.success());
    let mut w = Command::new(BIN)
        .args([
            "work",
            p(d.path()),
            "--lease",
            "2s",
            "--quiet",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the worker holds the queue's directories (not after a fixed delay: under CI load
    // it could open the queue only after it was made again, and then run on).
    wait_until_held(w.id(), &queue_dirs(d.path()));
    // And past its open's rename probe in tmp/ (slow under emulation): removed during the
    // probe, the open itself fails (not done, naming the probe file) before any worker runs.
    let t = Instant::now();
    while files(d.path(), "tmp").iter().any(|f| f.ends_with(".probe")) {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "the open's probe never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::remove_dir_all(d.path()).unwrap();
    assert!(steadq(&["init", p(d.path())]).status.success());
    let t = Instant::now();
    let status = loop {
        if let Some(s) = w.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "worker kept running on the removed queue"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut w.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2));
    // Noticed while running, or (under emulation the probe of its open can begin after the
    // wait above found none) its open failed on the removed probe, at the probe file's
    // open or at its rename: not done either way.
    let probe_gone = [".probe: open failed: ", ".probe: renameat2 failed: "]
        .iter()
        .any(|call| err.contains(&format!("{call}No such file or directory")));
    assert!(
        err.contains("removed or replaced") || (probe_gone && err.contains("/tmp/")),
        "{err}"
    );
}

#[test]
fn a_background_child_holding_stdin_does_not_stall_the_worker() {
    // 200 KiB is more than a pipe holds: the payload cannot all be written, and the
    // background sleep keeps the pipe open after the command exited 0.
    let d = TempDir::new("cli-bgstdin");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    let o = steadq_in(
        &["enqueue", p(q), "--max-attempts", "2"],
        &vec![b'x'; 200 << 10],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut w = Command::new(BIN)
        .args([
            "work",
            p(q),
            "--lease",
            "1s",
            "--backoff",
            "1s",
            "--",
            "sh",
            "-c",
            // (sh gives an asynchronous list /dev/null as stdin unless told otherwise)
            "exec 3<&0; sleep 4 <&3 3<&- & exit 0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let qq = Queue::open(q).unwrap();
    // Long enough for a stalled worker to lose the lease twice (4 s per stalled attempt).
    while t.elapsed() < Duration::from_secs(10) {
        let s = qq.status().unwrap();
        if s.acked + s.dead >= 1 && t.elapsed() > Duration::from_secs(3) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    sigterm(&w);
    assert!(w.wait().unwrap().success());
    let receipts = job_files(q, "receipts", ".rct");
    assert_eq!(receipts.len(), 1, "{:?}", files(q, ""));
    assert!(receipts[0].contains(".a00000001."), "{receipts:?}");
    assert_eq!(job_files(q, "dead", ".sqj"), Vec::<String>::new());
}

#[test]
fn a_command_that_never_reads_stdin_is_acked() {
    let d = TempDir::new("cli-noread");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    steadq_in(&["enqueue", p(q)], &vec![b'y'; 1 << 20]);
    let o = steadq(&["work", p(q), "--once", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let receipts = job_files(q, "receipts", ".rct");
    assert_eq!(receipts.len(), 1, "{:?}", files(q, ""));
    assert!(receipts[0].contains(".a00000001."), "{receipts:?}");
}

#[test]
fn work_timeout_stops_the_command_and_retries_with_backoff() {
    let d = TempDir::new("cli-timeout");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    steadq_in(&["enqueue", p(q)], b"slow");
    let t = Instant::now();
    let o = steadq(&[
        "work",
        p(q),
        "--once",
        "--timeout",
        "1s",
        "--backoff",
        "30s",
        "--",
        "sleep",
        "30",
    ]);
    let took = t.elapsed();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(took < Duration::from_secs(6), "took {took:?}");
    assert!(
        text(&o.stderr).contains("timed out after 1s"),
        "{}",
        text(&o.stderr)
    );
    let l = Queue::open(q).unwrap().list(None).unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].state, l[0].name.attempt), (State::Delayed, 1));
    assert_eq!(job_files(q, "delayed", ".sqj").len(), 1);
}

/// `work --once` whose claim dead-letters a job larger than its `--max-payload` handled that
/// job: exit 0 (it exited 3, "no job ready", which ends a drain loop as if nothing happened),
/// the job is dead with reason `toolarge` and the command never ran. With nothing left it
/// exits 3; a plain `claim` in the same case exits 3 (no handle to print).
#[test]
fn work_once_that_dead_letters_a_too_large_job_exits_0() {
    let d = TempDir::new("cli-toolarge");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    let marker = d.path().join("ran");
    let work = || {
        steadq(&[
            "work",
            p(q),
            "--once",
            "--max-payload",
            "10",
            "--",
            "sh",
            "-c",
            &format!("cat >/dev/null; touch {}", p(&marker)),
        ])
    };
    assert!(steadq_in(&["enqueue", p(q)], &[7u8; 11]).status.success());
    let o = work();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("1 job(s) dead-lettered"),
        "{}",
        text(&o.stderr)
    );
    assert!(!marker.exists(), "the command ran");
    let dead = Queue::open(q).unwrap().list(Some(State::Dead)).unwrap();
    assert_eq!(dead.len(), 1);
    assert!(
        matches!(dead[0].name.kind, steadq::Kind::Dead { reason } if reason.as_str() == "toolarge")
    );
    assert_eq!(work().status.code(), Some(3));
    assert!(steadq_in(&["enqueue", p(q)], &[7u8; 11]).status.success());
    let o = steadq(&["claim", p(q), "--max-payload", "10"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
}

/// `STEADQ_QUEUE` was the queue path as typed (`to`, `./to/`): a command that changed
/// directory and then called `steadq enqueue "$STEADQ_QUEUE"` got "No such file or
/// directory" (breaker finding). It is absolute now.
#[test]
fn steadq_queue_is_absolute_whatever_was_typed() {
    let d = TempDir::new("cli-queue-env");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("to");
    assert!(steadq(&["init", p(&q)]).status.success());
    assert!(steadq_in(&["enqueue", p(&q)], b"hand on").status.success());
    let o = Command::new(BIN)
        .current_dir(d.path())
        .args(["work", "./to/", "--once", "-q", "--", "sh", "-c"])
        .arg(format!(
            "cd / && echo \"$STEADQ_QUEUE\" && cat | {BIN} enqueue \"$STEADQ_QUEUE\" >/dev/null"
        ))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), format!("{}\n", q.display()));
    let st = Queue::open(&q).unwrap().status().unwrap();
    assert_eq!((st.ready, st.acked), (1, 1));
}

/// With its working directory removed, `work ../q` gave its command `STEADQ_QUEUE=../q`
/// (`std::path::absolute` needs the working directory), which names nothing from anywhere
/// else (breaker finding E). It is the queue directory's absolute path now.
#[test]
fn steadq_queue_is_absolute_when_the_working_directory_is_gone() {
    let d = TempDir::new("cli-queue-env-nocwd");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("q");
    assert!(steadq(&["init", p(&q)]).status.success());
    assert!(steadq_in(&["enqueue", p(&q)], b"job").status.success());
    std::fs::create_dir_all(d.path().join("gone")).unwrap();
    let o = Command::new("sh")
        .current_dir(d.path())
        .args(["-c", "cd gone && rmdir ../gone && exec \"$S\" work ../q --once -q -- sh -c 'echo \"$STEADQ_QUEUE\"'"])
        .env("S", BIN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let want = std::fs::canonicalize(&q).unwrap();
    assert_eq!(text(&o.stdout), format!("{}\n", want.display()));
}

/// A command that `work` found but exec(2) could not start (a script whose `#!` interpreter
/// is missing, or whose `#!` line ends in a carriage return) released its job keeping the
/// claim's attempt: a timer retrying `work --once` dead-lettered the job as exhausted
/// without ever running it (breaker finding). The attempt is given back, the exit is 2 (not
/// done) and the message names the cause.
#[test]
fn a_command_whose_interpreter_is_missing_uses_no_attempt() {
    use std::os::unix::fs::PermissionsExt;
    let d = TempDir::new("cli-no-interp");
    std::fs::create_dir_all(d.path()).unwrap();
    for (name, script, says) in [
        (
            "missing",
            &b"#!/nonexistent/interp\necho hi\n"[..],
            "the interpreter its line \"#!/nonexistent/interp\" names is missing",
        ),
        (
            "crlf",
            &b"#!/bin/sh\r\necho hi\r\n"[..],
            "ends in a carriage return",
        ),
    ] {
        let q = d.path().join(name);
        let qs = p(&q);
        assert!(steadq(&["init", qs]).status.success());
        assert!(steadq_in(&["enqueue", qs, "--max-attempts", "1"], b"x")
            .status
            .success());
        let script_path = d.path().join(format!("{name}.sh"));
        std::fs::write(&script_path, script).unwrap();
        std::fs::set_permissions(&script_path, std::fs::Permissions::from_mode(0o755)).unwrap();
        for _ in 0..3 {
            let o = steadq(&["work", qs, "--once", "--", p(&script_path)]);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{name}: {err}");
            assert!(err.contains(says), "{name}: {err}");
            assert!(
                err.contains("given back to ready with its attempt"),
                "{name}: {err}"
            );
        }
        let listed = text(&steadq(&["list", qs]).stdout);
        assert!(
            listed.starts_with("ready") && listed.contains("attempt 0/1"),
            "{name}: {listed}"
        );
    }
}
