//! The open-file limit and short threads: queues, claims and workers at any `ulimit -n`,
//! work fitting its concurrency and waiting while a shortage lasts.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use steadq::{Queue, State};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// `work --concurrency 1024` at `ulimit -n 64` (soft and hard) ran 1024 claiming threads;
/// the spawns past the limit failed with EMFILE and the worker stopped (exit 2, "cannot run
/// sh: Too many open files") with jobs left leased until their leases ran out (breaker
/// finding). Now it runs as many jobs at once as its descriptors allow, says so, and works
/// the queue through.
#[test]
fn work_fits_its_concurrency_to_the_open_file_limit() {
    let d = TempDir::new("work-nofile");
    let q = Queue::create(d.path(), opts(8)).unwrap();
    for i in 0..12u8 {
        q.enqueue(&[b'a' + i]).unwrap();
    }
    let (running, out) = work_until_acked(
        &q,
        "ulimit -Sn 64 && ulimit -Hn 64 && exec \"$S\" work \"$Q\" --concurrency 1024 --lease 30s -- sh -c 'cat > /dev/null'",
        &[],
        12,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        running,
        "the worker stopped by itself: {:?}\n{err}",
        out.status
    );
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(counts(&q), [0, 0, 0, 0, 12], "every job acked: {err}");
    let fit: u32 = err
        .split("running ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'running N jobs at once' warning: {err}"));
    assert!((1..1024).contains(&fit), "{fit}: {err}");
    assert!(err.contains("ulimit -n"), "{err}");
}

/// `work --concurrency 2` whose second worker thread cannot be started (RLIMIT_NPROC of a
/// non-root user) panicked (exit 134) with a job the first thread had claimed left leased,
/// its attempt used (breaker finding). Now the threads that started run on, and a command
/// that cannot be forked for the same reason gives its job back with its attempt.
#[test]
fn work_short_of_threads_and_processes_loses_no_attempt() {
    // Under qemu-user the emulator's own threads count against RLIMIT_NPROC too, and qemu
    // aborts when it cannot make one ("qemu_thread_create: Resource temporarily
    // unavailable"): that tests the emulator, not SteadQ.
    if !rustix::process::geteuid().is_root()
        || std::env::var_os("STEADQ_TEST_DIR").is_some()
        || std::env::var_os("STEADQ_QEMU_USER").is_some()
    {
        eprintln!(
            "SKIP work_short_of_threads_and_processes: needs root, runs once, not under qemu-user"
        );
        return;
    }
    let (base, bin) = nobody_sandbox("nproc");
    let (bin, q) = (bin.as_str(), base.join("q"));
    let qs = q.to_str().unwrap();
    let (code, _, err) = as_nobody(&format!(
        "{bin} init {qs} >/dev/null && echo a | {bin} enqueue {qs} >/dev/null && \
         echo b | {bin} enqueue {qs} >/dev/null"
    ));
    assert_eq!(code, Some(0), "{err}");
    // nobody's tasks: timeout, steadq's main thread, its watcher, one worker; the second
    // worker and every fork of `cat` are refused (EAGAIN).
    let (code, _, err) = as_nobody(&format!(
        "exec timeout -s TERM 4 prlimit --nproc=4:4 {bin} work {qs} --concurrency 2 -- cat"
    ));
    assert!(!err.contains("panicked"), "{err}");
    assert!(matches!(code, Some(124) | Some(2)), "{code:?}: {err}");
    let queue = Queue::open(&q).unwrap();
    let c = counts(&queue);
    assert_eq!(c[1], 0, "no job left leased: {c:?}\n{err}");
    assert_eq!(c[0] + c[4], 2, "{c:?}\n{err}");
    for l in queue.list(Some(steadq::State::Ready)).unwrap() {
        assert_eq!(l.name.attempt, 0, "a ready job kept its attempt: {err}");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// A shortage that lasts (nobody may fork: RLIMIT_NPROC) made `work` take the job, hold it a
/// second, give it back and take it again, every second for as long as it lasted. It now
/// gives the job back at once and waits 1 s, then 2, 4, 8 ... (up to 64 s) while spawns keep
/// failing: over 9 s, 4 tries where there were 9.
#[test]
#[ignore = "slow tier: watches a worker's backoff for 9 s, then 5 s more (~15 s)"]
fn work_waits_longer_while_a_shortage_lasts() {
    if !rustix::process::geteuid().is_root()
        || std::env::var_os("STEADQ_TEST_DIR").is_some()
        || std::env::var_os("STEADQ_QEMU_USER").is_some()
    {
        eprintln!("SKIP work_waits_longer_while_a_shortage_lasts: needs root, runs once, not under qemu-user");
        return;
    }
    // A user of its own: RLIMIT_NPROC counts every process of the user, and other tests run
    // workers as `nobody` at the same time.
    let user = format!("sqnp{}", std::process::id() % 100_000);
    struct Gone(String);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = Command::new("userdel").arg(&self.0).output();
        }
    }
    let made = Command::new("useradd")
        .args(["-M", "-U", &user])
        .status()
        .unwrap();
    assert!(made.success(), "useradd {user}");
    let _gone = Gone(user.clone());
    let (base, bin) = nobody_sandbox("nproc-streak");
    let (bin, q) = (bin.as_str(), base.join("q"));
    let qs = q.to_str().unwrap();
    let (code, err) = as_user(
        &user,
        &format!("{bin} init {qs} >/dev/null && echo a | {bin} enqueue {qs} >/dev/null"),
    );
    assert_eq!(code, Some(0), "{err}");
    // The user's tasks: timeout, steadq's main thread, its watcher, one worker: every fork
    // of `cat` is refused (EAGAIN).
    let (code, err) = as_user(
        &user,
        &format!("exec timeout -s TERM 9 prlimit --nproc=4:4 {bin} work {qs} -- cat"),
    );
    assert_eq!(code, Some(124), "{err}");
    let waits: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("cannot start \"cat\" now"))
        .map(|l| l.rsplit("trying again in ").next().unwrap_or(""))
        .collect();
    // Tries at about 0, 1, 3 and 7 s; a slow start may leave the fourth past the 9 s.
    let doubling = ["1 s", "2 s", "4 s", "8 s"];
    assert!(
        (3..=4).contains(&waits.len()) && waits == doubling[..waits.len()],
        "{waits:?}: {err}"
    );
    let queue = Queue::open(&q).unwrap();
    let ready = queue.list(Some(steadq::State::Ready)).unwrap();
    assert_eq!(ready.len(), 1, "{err}");
    assert_eq!(
        ready[0].name.attempt, 0,
        "its attempt given back each time: {err}"
    );
    // Each slot of `--concurrency 3` keeps its own streak (one for the process made the
    // three double each other's waits: 1, 2 and 4 s at once, then 8, 16, 32; helper's
    // finding). Three jobs, six tasks allowed (timeout, main thread, watcher, 3 workers).
    let (code, err) = as_user(
        &user,
        &format!(
            "echo b | {bin} enqueue {qs} >/dev/null && echo c | {bin} enqueue {qs} >/dev/null && \
             exec timeout -s TERM 5 prlimit --nproc=6:6 {bin} work {qs} --concurrency 3 -- cat"
        ),
    );
    assert_eq!(code, Some(124), "{err}");
    let count = |w: &str| err.matches(&format!("trying again in {w}\n")).count();
    assert_eq!((count("1 s"), count("2 s")), (3, 3), "{err}");
    assert_eq!(count("8 s") + count("16 s") + count("32 s"), 0, "{err}");
    let c = counts(&queue);
    assert_eq!((c[0], c[1]), (3, 0), "{err}");
    let _ = std::fs::remove_dir_all(&base);
}

/// `work` raises its own soft open-file limit toward the hard one to fit `--concurrency`;
/// the commands it runs get the limit it was started with, not the raised one (breaker
/// finding: they saw 68 where the caller had set 20).
#[test]
fn work_gives_its_commands_the_open_file_limit_it_was_started_with() {
    let d = TempDir::new("work-nofile-child");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"j").unwrap();
    let out = d.path().join("seen");
    let (running, o) = work_until_acked(
        &q,
        "ulimit -Sn 32 && exec \"$S\" work \"$Q\" --concurrency 8 -- sh -c 'ulimit -Sn > \"$O\"'",
        &[("O", out.as_os_str())],
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(running, "the worker stopped by itself: {err}");
    assert_eq!(counts(&q)[4], 1, "{err}");
    let seen = std::fs::read_to_string(&out).unwrap();
    assert_eq!(seen.trim(), "32", "{err}");
    // It raised its own (no warning: the hard limit had room).
    assert!(!err.contains("jobs at once"), "{err}");
}

/// Run `script` with `sh` ($S: the binary, $Q: `q`'s directory, plus `env`): a `work` that
/// works `q` until `acked` receipts are there (30 s at most), then gets SIGTERM if it still
/// runs. Returns whether it was still running, and its output (stderr piped).
fn work_until_acked(
    q: &Queue,
    script: &str,
    env: &[(&str, &std::ffi::OsStr)],
    acked: usize,
) -> (bool, std::process::Output) {
    let mut w = Command::new("sh")
        .args(["-c", script])
        .env("S", BIN)
        .env("Q", q.root())
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while counts(q)[4] < acked && t.elapsed() < Duration::from_secs(30) {
        if w.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let running = w.try_wait().unwrap().is_none();
    if running {
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&w),
            rustix::process::Signal::TERM,
        )
        .unwrap();
    }
    (running, w.wait_with_output().unwrap())
}

/// A queue of 8 shards holding one ready job, for the open-file-limit tests; `None` under
/// qemu-user, whose own descriptors count against the limit.
fn nofile_queue(name: &str) -> Option<(TempDir, Queue)> {
    if std::env::var_os("STEADQ_QEMU_USER").is_some() {
        return None;
    }
    let d = TempDir::new(name);
    let q = Queue::create(d.path(), opts(8)).unwrap();
    q.enqueue(b"j").unwrap();
    Some((d, q))
}

/// `steadq ARGS` on queue `q` (`{q}` in `args` stands for it) under `ulimit -n n`, soft and
/// hard: its output.
fn under_nofile(n: u32, q: &std::path::Path, args: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {n} && exec \"$S\" {}",
            args.replace("{q}", "\"$Q\"")
        ))
        .env("S", BIN)
        .env("Q", q)
        .output()
        .unwrap()
}

/// A queue opened under an open-file limit too low for its shard directories failed with a
/// bare "open failed: Too many open files (os error 24)" on some shard (breaker finding).
/// The message now names the limit, its value and what to raise; nothing changes.
#[test]
fn a_queue_opened_past_the_open_file_limit_names_the_limit() {
    // The emulator's own descriptors count against the limit: its test, not ours.
    let Some((d, q)) = nofile_queue("open-nofile") else {
        return;
    };
    let before = counts(&q);
    for cmd in ["claim", "status", "recover"] {
        let o = under_nofile(12, d.path(), &format!("{cmd} {{q}}"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(err.contains("(os error 24)"), "{cmd}: {err}");
        assert!(
            err.contains("open-file limit (RLIMIT_NOFILE, now 12) is reached"),
            "{cmd}: {err}"
        );
        assert!(err.contains("raise `ulimit -n`"), "{cmd}: {err}");
        assert_eq!(counts(&q), before, "{cmd} changed the queue");
    }
}

/// Under an open-file limit just low enough, the boot id could not be read: the handle
/// warned "cannot read /proc/sys/kernel/random/boot_id" and went on with boot id 0, so a
/// lease it made would look like an earlier boot's to every other handle (breaker
/// finding). Now a boot id that cannot be read for want of descriptors fails the open (not
/// done, the limit named); at every limit a claim either fails that way, finds no job, or
/// makes a lease carrying this boot's id.
#[test]
fn a_claim_at_any_open_file_limit_fails_cleanly_or_leases_with_this_boots_id() {
    // The emulator's own descriptors count against the limit: its test, not ours.
    let Some((d, q)) = nofile_queue("boot-nofile") else {
        return;
    };
    let boot: String = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .replace('-', "");
    let mut leased = 0;
    for n in 12..=40 {
        let o = under_nofile(n, d.path(), "claim {q}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("boot_id;"), "ulimit -n {n}: {err}");
        match o.status.code() {
            Some(0) => {
                let handle = String::from_utf8_lossy(&o.stdout).trim().to_string();
                assert!(
                    handle.contains(&format!(".o{boot}.")),
                    "ulimit -n {n}: lease {handle} lacks this boot's id {boot}"
                );
                q.lease_from_handle(&handle).unwrap().ack().unwrap();
                q.enqueue(b"j").unwrap();
                leased += 1;
            }
            Some(2) => {
                let want = format!("(RLIMIT_NOFILE, now {n})");
                assert!(err.contains(&want), "ulimit -n {n}: {err}");
            }
            c => panic!("ulimit -n {n}: exit {c:?}: {err}"),
        }
        assert_eq!(
            counts(&q)[0] + counts(&q)[1],
            1,
            "ulimit -n {n}: one job, ready or leased"
        );
    }
    assert!(leased > 0, "no limit up to 40 let a claim through");
}

/// `work --once` at an open-file limit with room for the queue but not for its command
/// claimed the job, failed to start the command (EMFILE), and gave the job back: the job's
/// name changed at every try (breaker finding). It now checks for a job's descriptors
/// before it claims, as `work` does; at every limit it either acks the job or changes
/// nothing.
#[test]
fn work_once_at_any_open_file_limit_acks_or_changes_nothing() {
    // The emulator's own descriptors count against the limit: its test, not ours.
    let Some((d, q)) = nofile_queue("once-nofile") else {
        return;
    };
    let ready = |q: &Queue| q.list(Some(State::Ready)).unwrap();
    for n in 12..=48 {
        let before = ready(&q);
        let o = under_nofile(n, d.path(), "work {q} --once -- sh -c 'cat >/dev/null'");
        let err = String::from_utf8_lossy(&o.stderr);
        match o.status.code() {
            Some(0) => {
                assert_eq!(counts(&q), [0, 0, 0, 0, 1], "ulimit -n {n}: {err}");
                return;
            }
            Some(2) => {
                assert_eq!(ready(&q), before, "ulimit -n {n} changed the job: {err}");
                assert!(
                    err.contains("ulimit -n") || err.contains("RLIMIT_NOFILE"),
                    "{n}: {err}"
                );
            }
            c => panic!("ulimit -n {n}: exit {c:?}: {err}"),
        }
    }
    panic!("no limit up to 48 let `work --once` run its job");
}

/// Settling a move a crash split in two (`ops/split.rs`) opened every delayed and dead
/// bucket and held them all open at once: with more buckets than the open-file limit (a
/// dead bucket per day of a few years, under the usual `ulimit -n 1024`) every `recover`
/// failed with EMFILE, the split lease stayed forever, and a bucket that failed to open
/// was skipped as if empty (breaker finding). Now one bucket is open at a time.
#[test]
fn a_split_move_settles_with_more_buckets_than_the_open_file_limit() {
    if std::env::var_os("STEADQ_QEMU_USER").is_some() {
        return;
    }
    let d = TempDir::new("split-nofile");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"once").unwrap();
    let l = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_millis(20)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let lease = d.path().join(&files(d.path(), "ready")[0]);
    l.ack().unwrap();
    let receipt = d.path().join(&files(d.path(), "receipts")[0]);
    std::fs::hard_link(&receipt, &lease).unwrap();
    for b in 0..200u64 {
        std::fs::create_dir(d.path().join(format!("dead/{:016x}", 20_000 + b))).unwrap();
    }
    std::thread::sleep(Duration::from_millis(40));
    let o = under_nofile(64, d.path(), "recover {q}");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("split moves settled 1"), "{out}{err}");
    assert!(!lease.exists() && receipt.exists());
    assert_eq!(q.find(id).unwrap().state, State::Acked);
    assert!(q.claim().unwrap().is_none(), "run again");
}
