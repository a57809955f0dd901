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
        let acked = poll(Duration::from_secs(10), || q.status().unwrap().acked == n);
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
