//! Benchmark: jobs/s (enqueued beforehand, then claimed and acked) with 1, 4 and 16 workers
//! against moto on 127.0.0.1, requests per job, and the local SteadQ queue beside it.
//! `STOWQ_BENCH_JOBS` (default 24) sets the jobs per run.

use crate::common::*;
use std::time::Instant;
use stowq::{Client, Options, Queue};

/// Claim and ack until empty with `workers` threads; returns (jobs/s, requests/job).
fn stowq_run(port: u16, prefix: &str, workers: usize, jobs: usize) -> (f64, f64) {
    queue(port, "bench", prefix, Options::default()); // creates the identity
    enqueue_parallel(port, "bench", prefix, jobs);
    let t0 = Instant::now();
    let hs: Vec<_> = (0..workers)
        .map(|_| {
            let prefix = prefix.to_string();
            std::thread::spawn(move || {
                let c = Client::new(config(port, 30_000), "bench");
                let q = Queue::open(c, &prefix, Options::default()).unwrap();
                let base = q.client.requests();
                let mut n = 0;
                while let Some(l) = q.claim().unwrap() {
                    q.ack(&l).unwrap();
                    n += 1;
                }
                (n, q.client.requests() - base)
            })
        })
        .collect();
    let (mut done, mut reqs) = (0, 0);
    for h in hs {
        let (n, r) = h.join().unwrap();
        done += n;
        reqs += r;
    }
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(done, jobs);
    // Enqueue costs 2 requests a job (the envelope's create and its marker).
    (jobs as f64 / secs, reqs as f64 / jobs as f64 + 2.0)
}

/// The same with the local queue on this machine's temp directory.
fn local_run(workers: usize, jobs: usize) -> f64 {
    let dir = std::env::temp_dir().join(format!("stowq-bench-{}-{workers}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let q = steadq::Queue::create(&dir, steadq::Options::default()).unwrap();
    for i in 0..jobs {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let t0 = Instant::now();
    let hs: Vec<_> = (0..workers)
        .map(|_| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let q = steadq::Queue::open(&dir).unwrap();
                let mut n = 0;
                while let Some(l) = q.claim().unwrap() {
                    l.ack().unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let done: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(done, jobs);
    let _ = std::fs::remove_dir_all(&dir);
    jobs as f64 / secs
}

#[test]
fn bench_workers_against_moto_and_the_local_queue() {
    let Some(m) = moto() else { return };
    bucket(m.port, "bench");
    let jobs = env_num("STOWQ_BENCH_JOBS", 24) as usize;
    for workers in [1, 4, 16] {
        let (jps, rpj) = stowq_run(m.port, &format!("w{workers}"), workers, jobs);
        let local = local_run(workers, jobs * 4);
        report(&format!(
            "stowq bench: {workers} worker(s), {jobs} jobs: {jps:.1} jobs/s, {rpj:.1} requests/job \
             (enqueue+claim+ack); local steadq {local:.0} jobs/s ({:.0}x)",
            local / jps
        ));
        assert!(jps > 0.5, "{jps} jobs/s");
    }
}
