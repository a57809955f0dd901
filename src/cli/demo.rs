//! `steadq demo`: the whole story on real input in one command.

use super::args::{Demo, DemoJob};
use super::exit::Exit;
use super::fixed;
use super::{open, CliError};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use steadq::{Durability, Options, Queue, State};

pub fn cmd_demo_job(a: DemoJob) -> Result<i32, CliError> {
    let mut path = String::new();
    std::io::stdin()
        .read_to_string(&mut path)
        .map_err(|e| CliError::not_done(format!("stdin: {e}")))?;
    // No path at all: this job's worker was SIGKILLed (by the demo) before it streamed the
    // payload. Nobody reads this exit and the job runs again elsewhere: stay quiet.
    if path.trim().is_empty() {
        return Ok(super::work::EX_TEMPFAIL);
    }
    let mut f = match std::fs::File::open(path.trim()) {
        Ok(f) => f,
        // The file vanished since it was enqueued: bad input, never retry.
        Err(e) => {
            eprintln!("{}: {e}", path.trim());
            return Ok(super::work::EX_DATAERR);
        }
    };
    let mut h = Sha256::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| CliError::not_done(format!("{}: {e}", path.trim())))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let line = format!("{}  {}\n", super::encode::hex(&h.finalize()), path.trim());
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.results)
        .map_err(|e| CliError::not_done(format!("{}: {e}", a.results.display())))?;
    out.write_all(line.as_bytes())
        .map_err(|e| CliError::not_done(format!("{}: {e}", a.results.display())))?;
    Ok(0)
}

/// Regular files (never symlinks) under well-known directories, up to `max`, each at most 4 MiB.
fn find_inputs(max: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = [
        "/usr/share/common-licenses",
        "/usr/share/doc",
        "/etc",
        "/usr/include",
        "/usr/share",
        "/usr/lib",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    stack.reverse();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if out.len() >= max {
                return out;
            }
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file()
                && e.metadata().is_ok_and(|m| m.len() <= 4 << 20)
                && std::fs::File::open(e.path()).is_ok()
                && !out.contains(&e.path())
            {
                out.push(e.path());
            }
        }
    }
    out
}

fn has_running_child(pid: u32) -> bool {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    rd.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("children")).is_ok_and(|c| !c.trim().is_empty())
    })
}

fn spawn_worker(exe: &Path, dir: &Path, results: &Path) -> Result<Child, CliError> {
    Command::new(exe)
        .arg("work")
        .arg(dir)
        .args([
            "--lease",
            "2s",
            "--quiet",
            "--backoff",
            "1s",
            "--grace",
            "5s",
            "--",
        ])
        .arg(exe)
        .arg("demo-job")
        .arg(results)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| CliError::not_done(format!("cannot start a worker ({}): {e}", exe.display())))
}

/// The demo's directory, and whether to remove it afterwards (only one it made itself).
fn pick_dir(a: &Demo) -> Result<(PathBuf, bool), CliError> {
    match &a.dir {
        // The demo consumes every job in its queue: never point it at real work.
        Some(d) if std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some()) => {
            Err(CliError::not_done(format!(
                "{}: exists and is not empty; the demo needs a new or empty directory (it works through every job in its queue)",
                d.display()
            )))
        }
        Some(d) => Ok((d.clone(), false)),
        None => Ok((
            std::env::temp_dir().join(format!("steadq-demo-{}", std::process::id())),
            !a.keep,
        )),
    }
}

pub fn cmd_demo(a: Demo) -> Result<Exit, CliError> {
    let (dir, remove) = pick_dir(&a)?;
    let results = dir.with_extension("results");
    let _ = std::fs::remove_file(&results);
    // Ctrl-C or SIGTERM ends the demo through the same cleanup as a normal end.
    super::work::install_handlers();
    let mut workers = Vec::new();
    let r = run_demo(&a, &dir, &results, &mut workers);
    stop_workers(&mut workers);
    if remove {
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&results);
        out!(
            "removed the demo queue {} and {} (--keep, or a directory argument, keeps them)",
            dir.display(),
            results.display()
        );
    } else if dir.exists() {
        out!(
            "queue kept at {}: try `steadq status {0}` or `steadq list {0} --state acked`",
            dir.display()
        );
    }
    r
}

/// SIGTERM every worker still running, then wait for all of them.
fn stop_workers(workers: &mut [Child]) {
    for w in workers.iter_mut() {
        if matches!(w.try_wait(), Ok(None)) {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(w),
                rustix::process::Signal::TERM,
            );
        }
    }
    for w in workers.iter_mut() {
        let _ = w.wait();
    }
}

fn interrupted() -> CliError {
    CliError::not_done("demo interrupted (SIGINT, SIGTERM, SIGHUP or SIGQUIT)")
}

/// Enqueue one job per input file, in batches of 64. Returns how many.
fn enqueue_inputs(q: &Queue, max: usize) -> Result<u64, CliError> {
    let inputs = find_inputs(max);
    if inputs.is_empty() {
        return Err(CliError::not_done(
            "found no readable files under /usr/share, /etc or /usr/lib to hash",
        ));
    }
    let t = Instant::now();
    let paths: Vec<Vec<u8>> = inputs
        .iter()
        .map(|p| p.as_os_str().as_encoded_bytes().to_vec())
        .collect();
    for chunk in paths.chunks(64) {
        let refs: Vec<&[u8]> = chunk.iter().map(|p| p.as_slice()).collect();
        q.enqueue_batch(&refs)?;
    }
    let enq = t.elapsed();
    out!(
        "enqueued {} jobs (one per file to hash) in {}s: {} jobs/s, batches of 64 sharing their fsyncs",
        inputs.len(),
        fixed::secs(enq.as_nanos(), 2),
        fixed::per_sec(inputs.len() as u128, enq.as_nanos())
    );
    Ok(inputs.len() as u64)
}

/// Start the workers, then SIGKILL the first one while it runs a job.
fn start_and_kill_one(
    a: &Demo,
    dir: &Path,
    results: &Path,
    workers: &mut Vec<Child>,
) -> Result<(), CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::not_done(format!("cannot find my own executable: {e}")))?;
    out!("starting {} worker processes: steadq work {} --lease 2s -- steadq demo-job (strict fsyncs on every claim and ack)", a.workers, dir.display());
    for _ in 0..a.workers.max(2) {
        workers.push(spawn_worker(&exe, dir, results)?);
    }
    let victim = workers[0].id();
    let kill_by = Instant::now() + Duration::from_secs(20);
    while !has_running_child(victim) && Instant::now() < kill_by {
        if super::work::stop_requested() {
            return Err(interrupted());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_mid_job = has_running_child(victim);
    let _ = workers[0].kill();
    let _ = workers[0].wait();
    out!(
        "SIGKILLed worker pid {victim} {}",
        if killed_mid_job {
            "in the middle of a job"
        } else {
            "(between jobs)"
        }
    );
    Ok(())
}

/// Wait until every job is acked or dead and no lease is left.
fn wait_settled(q: &Queue, total: u64) -> Result<steadq::Status, CliError> {
    let give_up = Instant::now() + Duration::from_secs(600);
    let mut last_print = Instant::now();
    let p = super::progress::Progress::start("demo".into(), "jobs settled", Some(total));
    loop {
        let s = q.status()?;
        p.set(s.acked + s.dead);
        if s.acked + s.dead >= total && s.leased == 0 {
            return Ok(s);
        }
        if super::work::stop_requested() {
            return Err(interrupted());
        }
        if Instant::now() > give_up {
            return Err(CliError::not_done(format!(
                "demo timed out: {} of {total} jobs settled",
                s.acked + s.dead
            )));
        }
        // On a terminal the progress line says it (a line printed under it would be cut).
        if last_print.elapsed() >= Duration::from_secs(2) && !p.shown_with_stdout() {
            out!(
                "  ... {} acked, {} ready, {} leased ({} expired), {} delayed",
                s.acked,
                s.ready,
                s.leased,
                s.expired_leases,
                s.delayed
            );
            last_print = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_demo(
    a: &Demo,
    dir: &Path,
    results: &Path,
    workers: &mut Vec<Child>,
) -> Result<Exit, CliError> {
    out!("== SteadQ demo: queue {}", dir.display());
    let q = Queue::create(
        dir,
        Options {
            durability: Durability::Batched,
            ..Options::default()
        },
    )?;
    let total = enqueue_inputs(&q, a.jobs)?;
    let t = Instant::now();
    start_and_kill_one(a, dir, results, workers)?;
    let st = wait_settled(&q, total)?;
    let elapsed = t.elapsed();
    stop_workers(workers);
    summary(a, dir, results, &st, total, elapsed)
}

fn summary(
    a: &Demo,
    dir: &Path,
    results: &Path,
    st: &steadq::Status,
    total: u64,
    elapsed: Duration,
) -> Result<Exit, CliError> {
    let q = open(dir)?;
    let receipts = q.list(Some(State::Acked))?;
    let retries: u64 = receipts
        .iter()
        .map(|l| (l.name.attempt as u64).saturating_sub(1))
        .sum();
    let recovered = receipts.iter().filter(|l| l.name.attempt > 1).count();
    let lines = std::fs::read_to_string(results)
        .map(|s| s.lines().count())
        .unwrap_or(0);
    let f = q.fsck()?;
    out!("== summary");
    out!("jobs              {total}");
    out!(
        "receipts          {} (dead-lettered: {})",
        st.acked,
        st.dead
    );
    out!("retries           {retries}");
    out!("recovered leases  {recovered} (the killed worker's job ran again elsewhere: at-least-once)");
    out!("hash results      {lines} lines in {}", results.display());
    out!(
        "throughput        {} jobs/s ({} workers, {}s, each job a process)",
        fixed::per_sec(u128::from(total), elapsed.as_nanos()),
        a.workers.max(2) - 1,
        fixed::secs(elapsed.as_nanos(), 2)
    );
    out!(
        "fsck              {} ({} entries, {} verified)",
        if f.clean() { "clean" } else { "PROBLEMS" },
        f.checked,
        super::cmd::job_files(f.verified)
    );
    for p in &f.problems {
        out!("  {p}");
    }
    let ok = f.clean() && st.acked + st.dead == total && st.acked > 0;
    Ok(if ok { Exit::Done } else { Exit::NotDone })
}
