//! Claim cost against the number of jobs in the bucket (`DESIGN-S3.md`, "Claims at a
//! million jobs"): `STOWQ_SCALE_SIZES` ready jobs (default 2000,20000), enqueued for real, then
//! the requests of claims, of an idle recovery and of `status` counted at each size.
//! Minutes of moto time, so not run by default:
//! `cargo test --features s3 --test s3 -- --ignored claim_cost_at_scale --nocapture`.

use crate::common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use stowq::{Client, Options, Queue};

/// Enqueue `n` jobs under `prefix` with 16 threads.
fn fill(port: u16, prefix: &str, n: usize) {
    queue(port, "scale", prefix, Options::default());
    let next = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..16)
        .map(|_| {
            let (next, prefix) = (next.clone(), prefix.to_string());
            std::thread::spawn(move || {
                let c = Client::new(config(port, 30_000), "scale");
                let q = Queue::open(c, &prefix, Options::default()).unwrap();
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    q.enqueue(b"scale job").unwrap();
                }
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
}

#[test]
#[ignore = "minutes of moto time: run with --ignored"]
fn claim_cost_at_scale() {
    let Some(m) = moto() else { return };
    bucket(m.port, "scale");
    let sizes = std::env::var("STOWQ_SCALE_SIZES").unwrap_or_else(|_| "2000,20000".into());
    for n in sizes.split(',').map(|s| s.trim().parse::<usize>().unwrap()) {
        let prefix = format!("n{n}");
        let t0 = Instant::now();
        fill(m.port, &prefix, n);
        let fill_s = t0.elapsed().as_secs_f64();
        let q = Queue::open(
            Client::new(config(m.port, 30_000), "scale"),
            &prefix,
            Options::default(),
        )
        .unwrap();
        let claims = 100;
        let (mut claim_reqs, mut claim_ms) = (0, 0.0);
        for _ in 0..claims {
            let r0 = q.client.requests();
            let t = Instant::now();
            let l = q.claim().unwrap().unwrap();
            claim_ms += t.elapsed().as_secs_f64() * 1000.0;
            claim_reqs += q.client.requests() - r0;
            q.ack(&l).unwrap();
        }
        // A claim without a lost race: its LISTs, then PUT leased, PUT marker, DELETE
        // marker, GET envelope.
        let lists = claim_reqs as f64 / claims as f64 - 4.0;
        let r0 = q.client.requests();
        q.recover().unwrap();
        let recover = q.client.requests() - r0;
        let r0 = q.client.requests();
        let t = Instant::now();
        let s = q.status().unwrap();
        let status_ms = t.elapsed().as_secs_f64() * 1000.0;
        let status = q.client.requests() - r0;
        assert_eq!((s.ready + s.done) as usize, n);
        assert!(lists < 1.5, "{lists} LISTs per claim at {n} jobs");
        report(&format!(
            "s3 scale: {n} jobs ({} objects, filled in {fill_s:.0} s): {lists:.2} LISTs per claim \
             ({:.0} ms a claim), {recover} LIST(s) per idle recovery, status {status} LISTs \
             ({status_ms:.0} ms)",
            2 * n + 1,
            claim_ms / claims as f64
        ));
    }
}
