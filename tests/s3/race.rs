//! 32 workers race to claim the same 200 jobs on one moto server: each is acked exactly once.

use crate::common::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stowq::{Client, Options, Queue, State};

#[test]
fn thirty_two_workers_ack_two_hundred_jobs_exactly_once() {
    let Some(m) = moto() else { return };
    let workers = env_num("STOWQ_RACE_WORKERS", 32) as usize;
    let jobs = env_num("STOWQ_RACE_JOBS", 200) as usize;
    bucket(m.port, "race");
    let opts = Options {
        lease_ms: 120_000,
        ..Options::default()
    };
    let q = queue(m.port, "race", "r", opts.clone());
    let want: HashMap<u128, Vec<u8>> = enqueue_parallel(m.port, "race", "r", jobs)
        .into_iter()
        .collect();
    assert_eq!(want.len(), jobs);
    let want = Arc::new(want);
    let acked: Arc<Mutex<Vec<u128>>> = Arc::default();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (acked, want, opts) = (acked.clone(), want.clone(), opts.clone());
            std::thread::spawn(move || {
                let client = Client::new(config(m.port, 30_000), "race");
                let q = Queue::open(client, "r", opts).unwrap();
                let mut idle = 0;
                while idle < 2 {
                    let claimed = q.claim();
                    if let Err(e) = &claimed {
                        panic!("claim: {e}");
                    }
                    match claimed.unwrap() {
                        Some(l) => {
                            idle = 0;
                            assert_eq!(&l.payload, &want[&l.id], "payload of {:x}", l.id);
                            if let Err(e) = q.ack(&l) {
                                panic!("ack: {e}");
                            }
                            acked.lock().unwrap().push(l.id);
                        }
                        None => idle += 1,
                    }
                }
                (q.lost_races(), q.client.requests())
            })
        })
        .collect();
    let mut lost = 0;
    let mut requests = 0;
    for h in handles {
        let (l, r) = h.join().unwrap();
        lost += l;
        requests += r;
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len(), jobs, "every job acked, none twice");
    acked.sort();
    acked.dedup();
    assert_eq!(acked.len(), jobs, "no job acked twice");
    // The server's truth: every chain is enqueue, one lease, one done.
    for id in want.keys().take(50) {
        let (gen, rec) = q.inspect(*id).unwrap().unwrap();
        assert_eq!((gen, rec.state, rec.attempt), (2, State::Done, 1));
    }
    let st = q.status().unwrap();
    assert_eq!((st.done, st.ready, st.leased), (jobs as u64, 0, 0));
    let enq = 2.0 * jobs as f64; // an envelope create and a marker put each
    report(&format!(
        "stowq race: {workers} workers, {jobs} jobs, each acked once; {lost} lost claim races \
         (412); {:.1} requests/job in the race ({:.1} with enqueue); {:.1} jobs/s ({secs:.1} s)",
        requests as f64 / jobs as f64,
        (requests as f64 + enq) / jobs as f64,
        jobs as f64 / secs
    ));
    assert!(secs < 600.0);
    let _ = Duration::ZERO;
}
