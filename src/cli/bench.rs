//! `steadq bench`: the job lifecycle (enqueue, claim with verification, ack) per durability
//! mode and worker count, for a duration or a job count: jobs/s and p50/p99 latency of one
//! lifecycle. Workers are threads sharing one queue handle, so they share barriers (group
//! commit). Absolute figures on shared machines swing; compare cases of one run, and see the
//! `bench/` crate for SteadQ beside the bare syscalls, SQLite and Redis.

use super::args::Bench;
use super::exit::Exit;
use super::fixed;
use super::CliError;
use std::path::Path;
use std::time::{Duration, Instant};
use steadq::{Durability, Options, Queue};

/// One case's result.
struct Run {
    jobs: usize,
    /// Wall time of the case, ns.
    ns: u128,
    /// Latency of each lifecycle (a batched job counts its batch's), ns.
    lat: Vec<u64>,
}

/// The `pct`-th percentile (0..=100) of sorted `v` (nearest rank), in µs to one decimal.
fn percentile_us(v: &[u64], pct: usize) -> String {
    let i = (v.len().saturating_sub(1) * pct + 50) / 100;
    fixed::fixed(v.get(i).map_or(0, |&ns| u128::from(ns)), 1000, 1)
}

/// One worker: lifecycles until `until` or `quota` jobs; `batch` > 1 uses the batch calls.
fn worker(
    q: &Queue,
    until: Instant,
    quota: usize,
    batch: usize,
    payload: &[u8],
) -> Result<(usize, Vec<u64>), CliError> {
    let (mut done, mut lat) = (0usize, Vec::new());
    let lease = Duration::from_secs(60);
    while Instant::now() < until && (quota == 0 || done < quota) {
        let t = Instant::now();
        if batch <= 1 {
            q.enqueue(payload)?;
            if let Some(l) = q.claim_with(&steadq::ClaimOptions {
                lease: Some(lease),
                ..Default::default()
            })? {
                l.ack()?;
                done += 1;
            }
            lat.push(t.elapsed().as_nanos() as u64);
        } else {
            let refs: Vec<&[u8]> = vec![payload; batch];
            q.enqueue_batch(&refs)?;
            let leases = q.claim_batch(batch, lease)?;
            let n = leases.len();
            q.ack_batch(leases)?;
            done += n;
            let ns = t.elapsed().as_nanos() as u64;
            lat.extend(std::iter::repeat_n(ns, n));
        }
    }
    Ok((done, lat))
}

/// Run one case in a fresh queue under `dir`.
fn case(
    dir: &Path,
    d: Durability,
    workers: usize,
    batch: usize,
    a: &Bench,
) -> Result<Run, CliError> {
    let q = Queue::create(
        dir,
        Options {
            durability: d,
            ..Options::default()
        },
    )?;
    let payload = vec![b'x'; a.payload];
    for chunk in (0..a.depth).step_by(1000) {
        let refs: Vec<&[u8]> = vec![&payload[..]; 1000.min(a.depth - chunk)];
        q.enqueue_batch(&refs)?;
    }
    let quota = a.jobs.div_ceil(workers);
    let t = Instant::now();
    let until = if a.jobs > 0 {
        t + Duration::from_secs(86400)
    } else {
        t + a.duration
    };
    let results = std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers)
            .map(|_| {
                let (q, payload) = (q.clone(), &payload);
                s.spawn(move || worker(&q, until, quota, batch, payload))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| CliError::not_done("bench worker panicked"))?
            })
            .collect::<Result<Vec<_>, CliError>>()
    })?;
    let ns = t.elapsed().as_nanos();
    drop(q);
    std::fs::remove_dir_all(dir)
        .map_err(|e| CliError::not_done(format!("{}: {e}", dir.display())))?;
    let mut run = Run {
        jobs: 0,
        ns,
        lat: Vec::new(),
    };
    for (n, l) in results {
        run.jobs += n;
        run.lat.extend(l);
    }
    run.lat.sort_unstable();
    Ok(run)
}

fn parse_list<T>(s: &str, what: &str, f: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, CliError> {
    s.split(',')
        .map(|x| f(x.trim()).ok_or_else(|| CliError::not_done(format!("bad {what} '{x}'"))))
        .collect()
}

fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

pub fn cmd_bench(a: Bench) -> Result<Exit, CliError> {
    let workers = parse_list(&a.workers, "worker count", |x| {
        x.parse::<usize>().ok().filter(|n| (1..=256).contains(n))
    })?;
    let modes = parse_list(&a.modes, "mode", |x| match x {
        "strict" => Some(("strict", Durability::Strict, 1)),
        "batched" => Some(("batched", Durability::Batched, a.batch.max(2))),
        "none" => Some(("none", Durability::None, 1)),
        _ => None,
    })?;
    let base = a
        .dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("steadq-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base)
        .map_err(|e| CliError::not_done(format!("{}: {e}", base.display())))?;
    let limit = match a.jobs {
        0 => format!("{:?} per case", a.duration),
        n => format!("{n} jobs per case"),
    };
    out!(
        "steadq bench in {} ({limit}, {}-byte payloads, depth {})",
        base.display(),
        a.payload,
        a.depth
    );
    out!(
        "{:<8} {:>7} {:>10} {:>10} {:>10} {:>9}",
        "mode",
        "workers",
        "jobs/s",
        "p50 us",
        "p99 us",
        "jobs"
    );
    for (i, (name, d, batch)) in modes.iter().enumerate() {
        for (j, &w) in workers.iter().enumerate() {
            let r = case(&base.join(format!("case{i}-{j}")), *d, w, *batch, &a)?;
            out!(
                "{name:<8} {w:>7} {:>10} {:>10} {:>10} {:>9}",
                fixed::per_sec(r.jobs as u128, r.ns),
                percentile_us(&r.lat, 50),
                percentile_us(&r.lat, 99),
                r.jobs
            );
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    if let Some(k) = peak_rss_kib() {
        out!("peak RSS {k} KiB");
    }
    Ok(Exit::Done)
}
