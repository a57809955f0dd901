//! `steadq work` settling its jobs: acks that are not done (retried, given up after one
//! lease, run out in the stop grace) and the barrier shared between an ack and the next claim.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use steadq::{Queue, State};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// A command that succeeded but whose ack was not done (receipts/00 made immutable with
/// `chattr +i` on a real ext4, by the command itself) does not run again: `work` keeps the
/// lease, renews it and retries the ack until it is done (here on its third of four tries).
#[test]
fn work_retries_an_ack_that_was_not_done() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP work_retries_an_ack_that_was_not_done: needs root, runs once");
        return;
    }
    let base = TempDir::new("ackretry");
    std::fs::create_dir_all(base.path()).unwrap();
    let m = crate::filesystems::mount_ext4_with(base.path(), 16, &["-b", "4096"])
        .expect("loop-mount ext4");
    let q = m.dir.join("q");
    let qs = q.to_str().unwrap();
    assert!(run(&["init", qs, "--shards", "1"]).status.success());
    let o = Command::new(BIN)
        .args(["enqueue", qs, "--file", "/dev/null"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rdir = q.join("receipts/00");
    let ran = m.dir.join("ran");
    let script = format!(
        "chattr +i '{}' && echo run >> '{}'",
        rdir.display(),
        ran.display()
    );
    let child = Command::new(BIN)
        .args([
            "work", qs, "--once", "--lease", "2s", "--", "sh", "-c", &script,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !ran.exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Past the lease: without the retry the job would have run again by now.
    std::thread::sleep(Duration::from_secs(3));
    crate::filesystems::sh("chattr", &["-i", rdir.to_str().unwrap()]).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("ack not done") && err.contains("acked (on try"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "run\n",
        "the command ran once"
    );
    let queue = Queue::open(&q).unwrap();
    let receipts = queue.list(Some(steadq::State::Acked)).unwrap();
    assert_eq!((receipts.len(), receipts[0].name.attempt), (1, 1));
    drop(queue);
    drop(m);
}

/// `work --once` whose settle was not done exited 0 ("settling failed" on stderr, the job
/// left leased): a command exiting 65 whose move to `dead/` is refused (`dead/` not writable
/// for the worker), and a failed command whose nack's move to `delayed/` is refused. Both now
/// exit 2 (not done: the job stays leased), as README's table says.
#[test]
fn work_once_reports_a_settle_that_was_not_done() {
    let Some(t) = AsNobody::new("once-settle") else {
        return;
    };
    let (code, _, err) =
        t.run("$S init $Q --shards 1 && echo a | $S enqueue $Q && echo b | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    t.chmod("dead", 0o555);
    t.chmod("delayed", 0o555);
    let (code, _, err) = t.run("$S work $Q --once -- sh -c 'cat >/dev/null; exit 65'");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("exit 65, but settling failed") && err.contains("Permission denied"),
        "{err}"
    );
    let (code, _, err) = t.run("$S work $Q --once --backoff 10s -- sh -c 'exit 1'");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("exit 1, but settling failed") && err.contains("stays leased"),
        "{err}"
    );
    let (code, out, err) = t.run("$S list $Q --state leased");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 2, "both jobs stay leased: {out}");
    assert!(t.ls("dead").is_empty() && t.ls("delayed").is_empty());
}

/// `work --once` whose ack cannot be done (`receipts/` not writable) tries the ack a few times
/// (4 tries, about 7 s), then exits 2 with the job left leased (found by a fresh-user trial:
/// it kept the lease and retried every 1/2/4/8… s forever, so a cron job never ended).
#[test]
fn work_once_gives_up_an_ack_that_is_not_done() {
    let Some(t) = AsNobody::new("once-ack") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1 && echo a | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    t.chmod("receipts", 0o555);
    for b in t.ls("receipts") {
        t.chmod(&format!("receipts/{b}"), 0o555);
    }
    let started = std::time::Instant::now();
    let (code, _, err) = t.run("timeout 20 $S work $Q --once -- sh -c 'cat >/dev/null'");
    let took = started.elapsed();
    assert_eq!(code, Some(2), "{err}");
    assert!(took < Duration::from_secs(12), "{took:?} {err}");
    assert_eq!(err.matches("ack not done (").count(), 3, "{err}");
    assert!(
        err.contains("ack not done after 4 tries; giving up")
            && err.contains("exit 0, but settling failed")
            && err.contains("stays leased"),
        "{err}"
    );
    let (code, out, err) = t.run("$S list $Q --state leased");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1, "the job stays leased: {out}");
}

/// A worker started while `ready/` could not be searched (its shard held by a stand-in) goes
/// on when the permission is given back, and runs the jobs of that shard (found by a
/// fresh-user trial: within a second it stopped, exit 2, "ready/00 was removed or replaced
/// while this worker ran", although nothing was replaced).
#[test]
fn a_worker_goes_on_when_an_unsearchable_ready_directory_becomes_readable() {
    let Some(t) = AsNobody::new("standin-back") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1");
    assert_eq!(code, Some(0), "{err}");
    t.chmod("ready", 0o000);
    let mut worker = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(t.base.join("steadq"))
        .args(["work", t.q.to_str().unwrap(), "--lease", "5s", "--", "cat"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once it has opened the queue while `ready/` could not be searched (it says so).
    let lines = StderrLines::new(&mut worker);
    lines.wait_for("ready/00: cannot read this shard");
    let o = Command::new(BIN)
        .args(["enqueue", t.q.to_str().unwrap(), "--file", "/dev/null"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    t.chmod("ready", 0o755);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (mut acked, mut alive) = (0, true);
    while acked == 0 && alive && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        acked = Queue::open(&t.q).unwrap().status().unwrap().acked;
        alive = worker.try_wait().unwrap().is_none();
    }
    let _ = worker.kill();
    let status = worker.wait().unwrap();
    let err = lines.join();
    assert!(alive, "the worker stopped: {status:?} {err}");
    assert_eq!(acked, 1, "{err}");
    assert!(!err.contains("replaced"), "{err}");
}

/// A long-running `work` whose ack is not done retries it for one --lease, then gives up,
/// leaving the job leased, and goes on running (it no longer retries one job forever).
#[test]
fn a_running_worker_gives_up_an_ack_after_one_lease() {
    let Some(t) = AsNobody::new("run-ack") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1 && echo a | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    t.chmod("receipts", 0o555);
    for b in t.ls("receipts") {
        t.chmod(&format!("receipts/{b}"), 0o555);
    }
    let (code, _, err) = t.run("timeout 6 $S work $Q --lease 2s -- sh -c 'cat >/dev/null'");
    assert_eq!(code, Some(124), "still running when stopped: {err}");
    assert!(
        err.contains("ack not done after 3 tries; giving up"),
        "{err}"
    );
}

/// A stop (SIGTERM) while `work` retries an ack that was not done gave up at once ("ack not
/// done after 2 tries; giving up" within 17 ms, the --grace of 30 s unused), so the job ran
/// again although its command had succeeded (breaker finding). The retries now go on for
/// --grace after the stop: the ack made possible a second after the stop is done.
#[test]
fn a_stop_lets_an_ack_retry_run_out_its_grace() {
    let Some(t) = AsNobody::new("stop-ack") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1 && echo a | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    t.chmod("receipts/00", 0o555);
    let worker = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(t.base.join("steadq"))
        .args([
            "work",
            t.q.to_str().unwrap(),
            "--lease",
            "5s",
            "--grace",
            "10s",
        ])
        .args(["--", "sh", "-c", "cat >/dev/null"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Stop the worker once it says the first ack failed (not after a fixed delay: under CI
    // load a fixed delay could stop it before it had claimed anything).
    let mut worker = worker;
    let lines = StderrLines::new(&mut worker);
    lines.wait_for("ack not done (");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&worker),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    t.chmod("receipts/00", 0o755);
    let status = worker.wait().unwrap();
    let err = lines.join();
    assert!(status.success(), "{err}");
    assert!(err.contains("ack not done ("), "{err}");
    assert!(err.contains("acked (on try"), "{err}");
    let q = Queue::open(&t.q).unwrap();
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.leased, st.acked), (0, 0, 1), "{err}");
}

/// `steadq work` acks each job with `Lease::ack_and_claim`: the ack and the claim of the
/// worker's next job share their barrier. On xfs and journaled ext4 that is one directory
/// fsync per job (ack then claim made two); elsewhere the claim, in the ack's source
/// directory, rides on the ack's second fsync (three before: two for the ack, one for the
/// claim). Counted with strace; without strace or under qemu-user, said and passed.
#[test]
fn a_worker_shares_one_barrier_between_each_ack_and_its_next_claim() {
    if Command::new("strace").arg("-V").output().is_err()
        || std::env::var_os("STEADQ_QEMU_USER").is_some()
    {
        eprintln!("no strace, or under qemu-user: a_worker_shares_one_barrier... skipped");
        return;
    }
    let d = TempDir::new("cli-work-barriers");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    const JOBS: usize = 20;
    let queue = Queue::open(q).unwrap();
    for i in 0..JOBS {
        queue.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let trace = q.join("fsyncs.trace");
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-o", p(&trace), "-e", "trace=fsync", BIN])
        .args(["work", p(q), "-q", "--", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while queue.status().unwrap().acked < JOBS as u64 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        queue.status().unwrap().acked,
        JOBS as u64,
        "every job acked"
    );
    // Stop the worker (strace's child) with SIGTERM; strace exits after it.
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", strace.id())).unwrap();
    let worker: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(worker, libc::SIGTERM) }, 0);
    assert!(strace.wait().unwrap().success());
    let fsyncs = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("fsync("))
        .count();
    // Per job: 1 where one directory fsync covers both moves, 2 elsewhere, none on tmpfs
    // and ramfs (no barriers there: DESIGN.md, Barriers); a few more for the worker's
    // first claim and its start.
    let magic = rustix::fs::statfs(q).unwrap().f_type as u64;
    let per_job = if [0x0102_1994, 0x8584_58f6].contains(&magic) {
        0
    } else if steadq::sys::one_fsync_per_move(q) {
        1
    } else {
        2
    };
    assert!(
        (per_job * JOBS..=per_job * JOBS + 4).contains(&fsyncs),
        "{fsyncs} fsyncs for {JOBS} jobs, want {per_job} per job (+ up to 4)"
    );
}

/// A stop that arrives while `steadq work` is inside the barrier it shares between an ack
/// and the next claim leaves that next job claimed and not started: it goes back to ready
/// with its attempt given back (attempt 0, two generations on), not released as a used
/// attempt. strace slows every fsync by 400 ms so that the command's SIGTERM, sent 200 ms
/// after it exits, lands inside that barrier. Said and passed without strace, under
/// qemu-user, and on tmpfs (no fsyncs there to slow).
#[test]
fn a_worker_stopped_inside_its_shared_barrier_gives_the_next_job_back_unstarted() {
    if Command::new("strace").arg("-V").output().is_err()
        || std::env::var_os("STEADQ_QEMU_USER").is_some()
    {
        eprintln!("no strace, or under qemu-user: a_worker_stopped_inside... skipped");
        return;
    }
    let d = TempDir::new("cli-work-stop-next");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    let magic = rustix::fs::statfs(q).unwrap().f_type as u64;
    if [0x0102_1994, 0x8584_58f6].contains(&magic) {
        eprintln!("tmpfs: no fsync to slow; a_worker_stopped_inside... skipped");
        return;
    }
    let queue = Queue::open(q).unwrap();
    for i in 0..3 {
        queue.enqueue(format!("job {i}").as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let log = q.join("ran.log");
    let script = format!(
        "cat >/dev/null; echo $STEADQ_JOB_ID >> {}; (sleep 0.2; kill -TERM $PPID) & exit 0",
        p(&log)
    );
    let o = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync"])
        .args(["-e", "inject=fsync:delay_exit=400000", BIN])
        .args(["work", p(q), "-q", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let ran = std::fs::read_to_string(&log).unwrap();
    assert_eq!(ran.lines().count(), 1, "one job ran: {ran}");
    let jobs = queue.list(None).unwrap();
    let states: Vec<(State, u32, u64)> = jobs
        .iter()
        .map(|l| (l.state, l.name.attempt, l.name.generation))
        .collect();
    let acked = states.iter().filter(|s| s.0 == State::Acked).count();
    assert_eq!(acked, 1, "{states:?}");
    let ready: Vec<_> = states.iter().filter(|s| s.0 == State::Ready).collect();
    assert_eq!(ready.len(), 2, "{states:?}");
    assert!(
        ready.iter().all(|s| s.1 == 0),
        "no attempt used: {states:?}"
    );
    assert_eq!(
        ready.iter().filter(|s| s.2 == 2).count(),
        1,
        "the next job was claimed under the ack's barrier and given back: {states:?}"
    );
}
