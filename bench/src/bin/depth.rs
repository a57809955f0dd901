//! Depth figures at a large backlog: `depth fill DIR N [SHARDS]` enqueues N ready jobs
//! (durability none, in batches), `depth claim DIR` times a new worker's first claim and
//! prints its peak RSS, `depth lease DIR N` claims N jobs with an hour's lease and leaves
//! them leased (the idle-cost figure: an idle `steadq work` and a CLI `claim` beside N leased
//! jobs), `depth wait DIR N` adds one ready job and N jobs waiting for it (`--after`; run it
//! before `fill`, which adds to an existing queue), `depth claims DIR K` times K claims by one
//! handle after its first (each lease released at the end), `depth recover DIR` times a recovery pass, `depth ack-first DIR [ID]` times the
//! ack of the oldest job (with the promotion of the jobs waiting for it). Time `steadq list DIR | head -1`
//! and `steadq status DIR` alongside.

use std::time::Instant;
use steadq::{Durability, Options, Queue};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, dir) = match (a.first(), a.get(1)) {
        (Some(c), Some(d)) => (c.as_str(), d.as_str()),
        _ => {
            return Err(
                "usage: depth fill DIR N [SHARDS] | depth claim DIR | depth lease DIR N \
                 | depth wait DIR N | depth claims DIR K"
                    .into(),
            )
        }
    };
    let opts = Options {
        durability: Durability::None,
        ..Options::default()
    };
    match cmd {
        "fill" => {
            let n: usize = a.get(2).ok_or("fill needs N")?.parse()?;
            // Optional shard count (default 8): a deep queue wants more shards, since a claim
            // lists a whole slot to take its oldest job.
            let shards = a.get(3).map_or(Ok(opts.shards), |s| s.parse())?;
            let q = Queue::open_with(dir, opts.clone()).or_else(|_| {
                Queue::create(
                    dir,
                    Options {
                        shards,
                        ..opts.clone()
                    },
                )
            })?;
            let payload = [b'x'; 64];
            let t = Instant::now();
            for done in (0..n).step_by(1000) {
                let refs: Vec<&[u8]> = vec![&payload[..]; 1000.min(n - done)];
                q.enqueue_batch(&refs)?;
            }
            println!("filled {n} jobs in {:.1} s", t.elapsed().as_secs_f64());
        }
        "claim" => {
            let t = Instant::now();
            let q = Queue::open_with(dir, opts.clone())?;
            let l = q.claim()?.ok_or("no job")?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            l.release()?;
            println!(
                "first claim (open included): {ms:.1} ms, peak RSS {} KiB",
                rss_kib()
            );
        }
        "lease" => {
            let n: usize = a.get(2).ok_or("lease needs N")?.parse()?;
            let q = Queue::open_with(dir, opts)?;
            let hour = std::time::Duration::from_secs(3600);
            let t = Instant::now();
            for l in q.claim_batch(n, hour)? {
                let _ = l.into_handle(); // stays leased: nobody releases it
            }
            println!("leased {n} jobs in {:.1} s", t.elapsed().as_secs_f64());
        }
        "wait" => {
            let n: usize = a.get(2).ok_or("wait needs N")?.parse()?;
            let q = Queue::open_with(dir, opts.clone())
                .or_else(|_| Queue::create(dir, opts.clone()))?;
            let x = q.enqueue(b"dependency")?;
            let after = steadq::EnqueueOptions {
                after: vec![x],
                ..Default::default()
            };
            let t = Instant::now();
            for _ in 0..n {
                q.enqueue_with(b"waits", &after)?;
            }
            let s = t.elapsed().as_secs_f64();
            println!("{n} jobs waiting for {x} in {s:.1} s");
        }
        "claims" => {
            let k: usize = a.get(2).ok_or("claims needs K")?.parse()?;
            let q = Queue::open_with(dir, opts.clone())?;
            let mut held = vec![q.claim()?.ok_or("no job")?];
            let t = Instant::now();
            for _ in 0..k {
                held.push(q.claim()?.ok_or("no job")?);
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / k.max(1) as f64;
            println!("{k} claims after the first: {us:.0} us each");
            for l in held {
                l.release()?;
            }
        }
        "recover" => {
            let q = Queue::open_with(dir, opts.clone())?;
            let t = Instant::now();
            let r = q.recover();
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            println!(
                "recover: {ms:.1} ms, {} dependents moved, {} failed",
                r.dependencies, r.failed
            );
        }
        "ack-first" => {
            // The ack of the oldest job (the one `depth wait` made the others wait for): its
            // follow-up moves every waiting dependent to ready.
            // With ID, jobs are claimed (and held, released at the end) until that one is.
            let q = Queue::open_with(dir, opts.clone())?;
            let want = a.get(2).and_then(|s| steadq::JobId::parse(s));
            let mut held = Vec::new();
            let l = loop {
                let l = q.claim()?.ok_or("no job")?;
                if want.is_none_or(|w| w == l.id()) {
                    break l;
                }
                held.push(l);
            };
            let id = l.id();
            let t = Instant::now();
            l.ack()?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            println!(
                "ack of {id} (with its dependents' promotion): {ms:.1} ms ({} others claimed first)",
                held.len()
            );
            for l in held {
                l.release()?;
            }
        }
        c => return Err(format!("unknown command {c}").into()),
    }
    Ok(())
}
