//! `steadq bench`: lifecycle throughput under each durability policy, as ratios against a
//! commit-forcing fsync baseline measured in the same run (absolute figures on shared
//! machines swing 2-10x; ratios hold).

use super::args::Bench;
use super::exit::Exit;
use super::CliError;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;
use steadq::{Durability, Options, Queue};

/// fsync'd 64-byte appends per second: one journal commit each.
fn fsync_baseline(dir: &Path, n: usize) -> std::io::Result<f64> {
    let p = dir.join("fsync-baseline");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&p)?;
    let t = Instant::now();
    for i in 0..n {
        f.write_all_at(&[7u8; 64], (i * 64) as u64)?;
        f.sync_all()?;
    }
    let r = n as f64 / t.elapsed().as_secs_f64();
    std::fs::remove_file(p)?;
    Ok(r)
}

fn lifecycle(
    dir: &Path,
    d: Durability,
    jobs: usize,
    threads: usize,
    batch: usize,
    payload: &[u8],
) -> Result<f64, CliError> {
    let q = Queue::create(
        dir,
        Options {
            durability: d,
            shards: 8,
            ..Options::default()
        },
    )?;
    let per = jobs / threads;
    let t = Instant::now();
    std::thread::scope(|s| -> Result<(), CliError> {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let q = &q;
                s.spawn(move || -> Result<(), CliError> {
                    let mut done = 0;
                    while done < per {
                        let n = batch.min(per - done);
                        let refs: Vec<&[u8]> = (0..n).map(|_| payload).collect();
                        q.enqueue_batch(&refs)?;
                        let mut leases = Vec::with_capacity(n);
                        while leases.len() < n {
                            match q.claim()? {
                                Some(l) => leases.push(l),
                                None => break,
                            }
                        }
                        done += leases.len().max(1);
                        q.ack_batch(leases)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join()
                .map_err(|_| CliError::usage("bench thread panicked"))??;
        }
        Ok(())
    })?;
    let rate = (per * threads) as f64 / t.elapsed().as_secs_f64();
    drop(q);
    std::fs::remove_dir_all(dir).map_err(|e| CliError::usage(format!("{}: {e}", dir.display())))?;
    Ok(rate)
}

fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

pub fn cmd_bench(a: Bench) -> Result<Exit, CliError> {
    if a.jobs == 0 || a.threads == 0 || a.threads > 256 {
        return Err(CliError::usage("--jobs must be > 0 and --threads 1..=256"));
    }
    let base = a
        .dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("steadq-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base)
        .map_err(|e| CliError::usage(format!("{}: {e}", base.display())))?;
    let payload = vec![b'x'; a.payload];
    let fsync = fsync_baseline(&base, a.jobs.min(2000))
        .map_err(|e| CliError::usage(format!("{}: {e}", base.display())))?;
    out!(
        "steadq bench in {} ({} jobs per case, {}-byte payloads)",
        base.display(),
        a.jobs,
        a.payload
    );
    out!("{:<34} {:>10} {:>16}", "case", "jobs/s", "x fsync baseline");
    out!(
        "{:<34} {:>10.0} {:>16.2}",
        "baseline: fsync'd 64 B append",
        fsync,
        1.0
    );
    let cases: [(&str, Durability, usize, usize); 5] = [
        ("strict, 1 thread", Durability::Strict, 1, 1),
        ("strict, N threads", Durability::Strict, a.threads, 1),
        (
            "batched (64 per barrier), 1 thread",
            Durability::Batched,
            1,
            64,
        ),
        (
            "batched (64), N threads",
            Durability::Batched,
            a.threads,
            64,
        ),
        ("none (no fsync), 1 thread", Durability::None, 1, 1),
    ];
    for (i, (name, d, threads, batch)) in cases.into_iter().enumerate() {
        let r = lifecycle(
            &base.join(format!("case{i}")),
            d,
            a.jobs,
            threads,
            batch,
            &payload,
        )?;
        let name = name.replace('N', &a.threads.to_string());
        out!("{name:<34} {r:>10.0} {:>16.2}", r / fsync);
    }
    let _ = std::fs::remove_dir_all(&base);
    if let Some(k) = peak_rss_kib() {
        out!("peak RSS {k} KiB");
    }
    Ok(Exit::Done)
}
