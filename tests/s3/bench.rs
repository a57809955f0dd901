//! Benchmark: jobs/s (enqueued beforehand, then claimed and acked) with 1, 4 and 16 workers
//! (threads of one process, a handle each) against the server on 127.0.0.1, requests per
//! job, and the local SteadQ queue beside it; then the server's own ceiling (GETs/s).
//! `STOWQ_BENCH_JOBS` (default 24) sets the jobs per run. The figures in BENCHMARKS.md:
//! `STOWQ_SERVER=seaweedfs STOWQ_BENCH_JOBS=200 cargo test --release --features tls --test s3
//! bench_workers -- --nocapture`.

use crate::common::*;
use std::time::Instant;
use stowq::{Client, Options, Queue};

fn rand_id() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    u128::from(h.finish()) << 64 | u128::from(h.finish().rotate_left(17))
}

/// Claim and ack until empty with `workers` threads (a handle each): one job at a time with
/// `k` = 1, else `claim_batch(k)` and `ack_batch`; returns (jobs/s, requests per job with the
/// enqueue's 2).
fn stowq_run(port: u16, prefix: &str, workers: usize, jobs: usize, k: usize) -> (f64, f64) {
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
                if k == 1 {
                    while let Some(l) = q.claim().unwrap() {
                        q.ack(&l).unwrap();
                        n += 1;
                    }
                    return (n, q.client.requests() - base);
                }
                let mut last = base;
                loop {
                    let leases = q.claim_batch(k).unwrap();
                    if leases.is_empty() {
                        break;
                    }
                    n += leases.len();
                    assert!(q.ack_batch(&leases).iter().all(Result::is_ok));
                    last = q.client.requests();
                }
                // Up to its last ack: the final, empty claim's LISTs are an idle worker's.
                (n, last - base)
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

/// 1, 4 and 16 workers (threads, a handle each) claiming in batches of 8: jobs/s and
/// requests per job, beside [`bench_workers_against_moto_and_the_local_queue`]'s one at a
/// time (`STOWQ_BENCH_JOBS`, default 24; 400 for the figures in BENCHMARKS.md).
#[test]
fn bench_batched_workers() {
    let Some(m) = moto() else { return };
    bucket(m.port, "bench");
    let jobs = env_num("STOWQ_BENCH_JOBS", 24) as usize;
    for workers in [1, 4, 16] {
        let (jps, rpj) = stowq_run(m.port, &format!("bw{workers}"), workers, jobs, 8);
        report(&format!(
            "stowq bench ({:?}): {workers} worker(s) claiming batches of 8, {jobs} jobs: \
             {jps:.1} jobs/s, {rpj:.2} requests/job (enqueue+claim_batch+ack_batch)",
            m.kind
        ));
        assert!(jps > 0.5, "{jps} jobs/s");
    }
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

/// The server's own ceiling on this machine: `threads` clients, each with its own kept-alive
/// connection, GET one small object (`put`: PUT a new 200-byte object, as a job's records
/// are) for `secs` seconds; requests answered per second.
fn server_limit(port: u16, threads: usize, secs: f64, put: bool) -> f64 {
    let q = queue(port, "bench", "limit", Options::default());
    let key = q.keys().identity();
    let t0 = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let key = key.clone();
            std::thread::spawn(move || {
                let c = Client::new(config(port, 30_000), "bench");
                let mut n = 0u64;
                let body = [b'x'; 200];
                while t0.elapsed().as_secs_f64() < secs {
                    let r = if put {
                        c.put(&format!("limit/put/{:032x}", rand_id()), &body)
                    } else {
                        c.get(&key)
                    };
                    assert_eq!(r.unwrap().status, 200);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let n: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    n as f64 / t0.elapsed().as_secs_f64()
}

#[test]
fn bench_workers_against_moto_and_the_local_queue() {
    let Some(m) = moto() else { return };
    bucket(m.port, "bench");
    let jobs = env_num("STOWQ_BENCH_JOBS", 24) as usize;
    for workers in [1, 4, 16] {
        let (jps, rpj) = stowq_run(m.port, &format!("w{workers}"), workers, jobs, 1);
        let local = local_run(workers, jobs * 4);
        report(&format!(
            "stowq bench: {workers} worker(s), {jobs} jobs: {jps:.1} jobs/s, {rpj:.1} requests/job \
             (enqueue+claim+ack); local steadq {local:.0} jobs/s ({:.0}x)",
            local / jps
        ));
        assert!(jps > 0.5, "{jps} jobs/s");
    }
    // 2 s each for the figures (STOWQ_BENCH_JOBS=200), a glimpse in the suite's run.
    let secs = if jobs >= 100 { 2.0 } else { 0.3 };
    let gets = server_limit(m.port, 16, secs, false);
    let puts = server_limit(m.port, 16, secs, true);
    report(&format!(
        "stowq bench: the server's ceiling here ({:?}, 16 threads, kept-alive connections): \
         {gets:.0} GETs/s of one small object, {puts:.0} PUTs/s of new 200-byte objects",
        m.kind
    ));
}

/// One worker claims with `claim_batch(k)` and acks with `ack_batch` until the queue is
/// empty; returns (jobs/s, requests per job including the enqueue's 2).
fn stowq_batched_run(port: u16, prefix: &str, k: usize, jobs: usize) -> (f64, f64) {
    let q = queue(port, "bench", prefix, Options::default());
    let r0 = q.client.requests();
    for i in 0..jobs {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let t0 = Instant::now();
    let (mut n, mut last) = (0, r0);
    loop {
        let leases = q.claim_batch(k).unwrap();
        if leases.is_empty() {
            break;
        }
        n += leases.len();
        assert!(q.ack_batch(&leases).iter().all(Result::is_ok));
        last = q.client.requests();
    }
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(n, jobs);
    assert!(!q.multi_delete_refused());
    // Up to the last ack: the final, empty claim's LISTs are the idle worker's, not a job's.
    (jobs as f64 / secs, (last - r0) as f64 / jobs as f64)
}

#[test]
fn bench_batched_claims_and_acks_requests_per_job() {
    let Some(m) = moto() else { return };
    bucket(m.port, "bench");
    let jobs = env_num("STOWQ_BENCH_BATCH_JOBS", 48) as usize;
    for k in [1, 4, 8, 16] {
        let (jps, rpj) = stowq_batched_run(m.port, &format!("batch{k}"), k, jobs);
        report(&format!(
            "stowq bench ({:?}): batches of {k}, one worker, {jobs} jobs: {jps:.1} jobs/s, \
             {rpj:.2} requests/job (enqueue+claim_batch+ack_batch)",
            m.kind
        ));
        // Per job: 2 (enqueue) + 2 (lease create, envelope GET) + 1 (done create), and per
        // batch the leased marker, the multi-object delete, the done marker and the leased
        // marker's DELETE, plus the LISTs (one per listing, which serves several batches).
        let model = 5.0 + 4.0 / k as f64;
        assert!(rpj >= model, "batches of {k}: {rpj} requests per job");
        assert!(
            rpj <= model + 0.25,
            "batches of {k}: {rpj} requests per job"
        );
        if k >= 8 {
            assert!(rpj <= 6.0, "batches of {k}: {rpj} requests per job");
        }
    }
}
