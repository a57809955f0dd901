//! `steadq work` as a process among processes: the descendants its commands leave behind
//! (reaped as a child subreaper, also as a container's PID 1), signals it was started with
//! ignored (nohup, a shell's background job), commands that read a terminal or are stopped.

use crate::common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use steadq::{Options, Queue};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A new queue at `d` with `jobs` jobs ready.
fn queue_with(d: &TempDir, jobs: usize) -> Queue {
    let q = Queue::create(d.path(), Options::default()).unwrap();
    for i in 0..jobs {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    q
}

/// Poll `cond` every 20 ms for up to `limit`; whether it came true.
fn poll(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Field `n` (1-based, as proc(5) numbers them) of `/proc/<pid>/stat` from the state (3) on.
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(n - 3).map(str::to_string)
}

/// The children of `pid` and their states (proc(5) field 3: `S`, `R`, `Z`, ...).
fn children(pid: u32) -> Vec<(u32, char)> {
    let want = pid.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&c| stat_field(c, 4).as_deref() == Some(want.as_str()))
        .filter_map(|c| Some((c, stat_field(c, 3)?.chars().next()?)))
        .collect()
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig)
        .unwrap();
}

/// Stop a worker and wait for it; its exit status.
fn stop(c: &mut Child) -> std::process::ExitStatus {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(c),
        rustix::process::Signal::TERM,
    );
    c.wait().unwrap()
}

/// A worker's command's background child is reparented to the worker (a child subreaper),
/// not to init, and once it exits the worker reaps it: no zombie is left. Before, it went to
/// init (or, under a worker that is a container's PID 1, stayed a zombie of the worker).
#[test]
fn orphaned_grandchildren_are_the_workers_and_are_reaped() {
    if std::env::var_os("STEADQ_QEMU_USER").is_some() {
        // qemu-user does not pass prctl(PR_SET_CHILD_SUBREAPER) to the kernel: the worker
        // runs, its orphans go to init.
        eprintln!("SKIP orphaned_grandchildren_are_the_workers_and_are_reaped: qemu-user");
        return;
    }
    let d = TempDir::new("wp-subreaper");
    let q = queue_with(&d, 1);
    let pidfile = d.path().with_extension("bg");
    let _ = std::fs::remove_file(&pidfile);
    let script = format!("sleep 30 & echo $! > {}; exit 0", p(&pidfile));
    let mut w = Command::new(BIN)
        .args(["work", p(d.path()), "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let worker = w.id();
    assert!(
        poll(Duration::from_secs(10), || q.status().unwrap().acked == 1
            && std::fs::read_to_string(&pidfile)
                .is_ok_and(|s| s.ends_with('\n'))),
        "the job was not acked"
    );
    let bg: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ppid = stat_field(bg, 4);
    // It ends (as a command's leftover child would) while the worker waits for jobs.
    signal(bg, rustix::process::Signal::KILL);
    let gone = poll(Duration::from_secs(3), || {
        std::fs::metadata(format!("/proc/{bg}")).is_err()
    });
    let state = stat_field(bg, 3);
    let zombies: Vec<_> = children(worker)
        .into_iter()
        .filter(|c| c.1 == 'Z')
        .collect();
    assert!(stop(&mut w).success());
    let _ = std::fs::remove_file(&pidfile);
    assert_eq!(
        ppid,
        Some(worker.to_string()),
        "the command's background child {bg} was not reparented to the worker {worker}"
    );
    assert!(
        gone,
        "the worker did not reap its orphan {bg} (state {state:?})"
    );
    assert!(zombies.is_empty(), "zombies under the worker: {zombies:?}");
}

/// `steadq work` as PID 1 of a PID namespace (`unshare --pid --fork`, a container's init):
/// jobs whose commands leave background children behind leave no zombies. Before, every
/// such child stayed a zombie of the worker (two per job here).
#[test]
fn a_pid1_worker_leaves_no_zombies() {
    if !Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        println!("SKIP a_pid1_worker_leaves_no_zombies: unshare --pid --fork is not available");
        return;
    }
    let d = TempDir::new("wp-pid1");
    let jobs = 4;
    let q = queue_with(&d, jobs);
    let mut u = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--kill-child",
            BIN,
            "work",
            p(d.path()),
            "--",
        ])
        .args(["sh", "-c", "sleep 0.2 & sleep 0.2 & exit 0"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut worker = 0;
    assert!(
        poll(Duration::from_secs(10), || {
            worker = children(u.id()).first().map_or(0, |c| c.0);
            worker != 0
        }),
        "no worker under unshare"
    );
    assert!(
        poll(Duration::from_secs(20), || q.status().unwrap().acked
            == jobs as u64),
        "the jobs were not acked"
    );
    // Every background sleep has ended (a zombie, or reaped).
    assert!(
        poll(Duration::from_secs(10), || children(worker)
            .iter()
            .all(|c| c.1 == 'Z')),
        "the background sleeps did not end: {:?}",
        children(worker)
    );
    let reaped = poll(Duration::from_secs(3), || children(worker).is_empty());
    let left = children(worker);
    signal(worker, rustix::process::Signal::TERM);
    let _ = u.wait();
    assert!(
        reaped,
        "zombies under the PID 1 worker while it waits: {left:?}"
    );
}

/// A worker started through `sh -c 'trap "" SIGS; exec steadq work ...'`: what nohup(1)
/// and a shell's background job give it.
fn worker_ignoring(d: &TempDir, sigs: &str) -> Child {
    let script = format!("trap '' {sigs}; exec \"$0\" work \"$1\" -- true");
    let w = Command::new("sh")
        .args(["-c", &script, BIN, p(d.path())])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_watching(w.id());
    w
}

/// SIGHUP and SIGINT that were ignored when `work` started (nohup; a non-interactive
/// shell's background job) stay ignored: the worker runs on and still works a job enqueued
/// after them. SIGTERM is handled even then (a service manager's stop must work), and
/// without the ignore SIGHUP stops it as before.
#[test]
fn signals_ignored_at_start_stay_ignored_except_sigterm() {
    use rustix::process::Signal;
    let d = TempDir::new("wp-nohup");
    let q = queue_with(&d, 0);
    let mut w = worker_ignoring(&d, "HUP INT TERM");
    for (n, sig) in [(1, Signal::HUP), (2, Signal::INT)] {
        signal(w.id(), sig);
        q.enqueue(b"after the signal").unwrap();
        let acked = poll(Duration::from_secs(10), || {
            q.status().unwrap().acked == n || w.try_wait().unwrap().is_some()
        }) && q.status().unwrap().acked == n;
        let running = w.try_wait().unwrap().is_none();
        if !(acked && running) {
            let _ = stop(&mut w);
            panic!("after {sig:?} (ignored at start): job acked {acked}, worker running {running}");
        }
    }
    // SIGTERM, ignored at start too, still stops it gracefully.
    signal(w.id(), Signal::TERM);
    let mut status = None;
    let ended = poll(Duration::from_secs(10), || {
        status = w.try_wait().unwrap();
        status.is_some()
    });
    if !ended {
        signal(w.id(), Signal::KILL);
    }
    let err = StderrLines::new(&mut w).join();
    assert!(ended, "SIGTERM did not stop the worker");
    assert!(status.unwrap().success(), "{err}");
    assert!(err.contains("stopped by signal 15"), "{err}");

    // Not ignored: SIGHUP stops it, as before.
    let mut w = worker_ignoring(&d, "USR2");
    signal(w.id(), Signal::HUP);
    let ended = poll(Duration::from_secs(10), || w.try_wait().unwrap().is_some());
    if !ended {
        signal(w.id(), Signal::KILL);
    }
    let err = StderrLines::new(&mut w).join();
    assert!(ended, "SIGHUP did not stop a worker that did not ignore it");
    assert!(err.contains("stopped by signal 1"), "{err}");
}

/// `work --once` in a real terminal (tmux) with a command that reads `/dev/tty`: the command
/// runs without the worker's controlling terminal, so opening it fails (ENXIO) and the job
/// is settled as failed at once. Before, the command was stopped (SIGTTIN: a background
/// process group reading its terminal) and the worker renewed its lease for ever.
#[test]
fn a_command_reading_the_terminal_fails_instead_of_stopping() {
    let runs = |prog: &str, args: &[&str]| {
        Command::new(prog)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !runs("tmux", &["-V"]) {
        println!("SKIP a_command_reading_the_terminal_fails_instead_of_stopping: no tmux (apt-get install tmux)");
        return;
    }
    if !runs("env", &["--default-signal=TTIN,TTOU", "true"]) {
        println!("SKIP a_command_reading_the_terminal_fails_instead_of_stopping: env has no --default-signal (coreutils 8.31)");
        return;
    }
    let d = TempDir::new("wp-tty");
    let q = queue_with(&d, 1);
    let done = d.path().with_extension("done");
    let log = d.path().with_extension("log");
    let _ = std::fs::remove_file(&done);
    let socket = format!("steadq-wp-{}", std::process::id());
    // SIGTTIN and SIGTTOU at their default actions, as a job of an interactive shell has them
    // (tmux's panes start with them ignored: a background read then fails with EIO instead).
    let line = format!(
        "env --default-signal=TTIN,TTOU {BIN} work --once {} -- sh -c 'read x < /dev/tty' 2> {}; echo $? > {}.tmp && mv {}.tmp {}",
        p(d.path()),
        p(&log),
        p(&done),
        p(&done),
        p(&done)
    );
    let started = Instant::now();
    let st = Command::new("tmux")
        .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
        .args(["-x", "80", "-y", "24", &line])
        .status()
        .unwrap();
    assert!(st.success(), "tmux new-session failed");
    let finished = poll(Duration::from_secs(15), || done.exists());
    let took = started.elapsed();
    let _ = Command::new("tmux")
        .args(["-L", &socket, "kill-server"])
        .stderr(Stdio::null())
        .status();
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    let code = std::fs::read_to_string(&done).unwrap_or_default();
    let _ = std::fs::remove_file(&done);
    let _ = std::fs::remove_file(&log);
    assert!(finished, "work --once did not finish in 15 s: {err}");
    println!("work --once with a command reading /dev/tty finished in {took:?}");
    assert_eq!(code.trim(), "0", "{err}");
    assert!(err.contains("exit 2") && err.contains("failed"), "{err}");
    // Nacked by the failure rules: delayed for its backoff, its attempt used.
    assert_eq!(counts(&q), [0, 0, 1, 0, 0], "{err}");
}

/// A command stopped by a signal (here it stops itself) makes no progress: its lease is not
/// renewed, and after a whole lease it is ended as hung and the job settled as failed, so
/// `work --once` finishes. Before, the worker renewed the lease of the stopped command for
/// ever.
#[test]
fn a_stopped_command_is_not_renewed_and_is_ended() {
    let d = TempDir::new("wp-stopped");
    let q = queue_with(&d, 1);
    let started = Instant::now();
    let mut w = Command::new(BIN)
        .args(["work", "--once", "--lease", "1s", p(d.path())])
        .args(["--", "sh", "-c", "kill -STOP $$"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    let ended = poll(Duration::from_secs(10), || {
        status = w.try_wait().unwrap();
        status.is_some()
    });
    let took = started.elapsed();
    if !ended {
        let _ = w.kill();
        let _ = w.wait();
    }
    let err = StderrLines::new(&mut w).join();
    assert!(ended, "work --once did not end in 10 s: {err}");
    println!("work --once with a stopped command (lease 1 s) ended in {took:?}");
    assert!(status.unwrap().success(), "{err}");
    assert!(err.contains("hung"), "{err}");
    assert_eq!(counts(&q), [0, 0, 1, 0, 0], "{err}");
}
