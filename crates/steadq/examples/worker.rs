//! A worker: take jobs from the queue at `DIR` and run each payload as a line of work, until
//! the queue has been empty for 2 s. Copy it and put your work in `process`.
//!
//! ```sh
//! cargo run -p steadq --example worker -- /tmp/jobs
//! ```
//!
//! Delivery is at-least-once: a worker that dies mid-job has its lease expire (60 s here) and
//! the job runs again, so `process` must be safe to run twice for one job id.

use std::time::Duration;
use steadq::{backoff, ClaimOptions, Nacked, Options, Queue, Reason};

/// What a job's outcome is: done, worth another try later, or never going to work.
enum Outcome {
    Done,
    Retry,
    Fatal(&'static str),
}

fn process(payload: &[u8]) -> Outcome {
    match std::str::from_utf8(payload) {
        Ok(text) if text.trim().is_empty() => Outcome::Fatal("empty"),
        // A stand-in for a resource that is not there yet (a file still uploading, say).
        Ok(text) if text.starts_with("later ") => Outcome::Retry,
        Ok(text) => {
            println!("working on: {}", text.trim());
            Outcome::Done
        }
        Err(_) => Outcome::Fatal("notutf8"),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: worker DIR")?;
    let q = Queue::open_with(&dir, Options::default())?;
    // A 60 s lease; a wait of up to 2 s sleeps on inotify: no polling while the queue is
    // empty.
    let o = ClaimOptions {
        lease: Some(Duration::from_secs(60)),
        wait: Some(Duration::from_secs(2)),
        ..Default::default()
    };
    while let Some(lease) = q.claim_with(&o)? {
        let attempt = lease.attempt();
        match process(lease.payload()?) {
            Outcome::Done => {
                lease.ack()?;
            }
            Outcome::Retry => {
                // 1 s, 2 s, 4 s ... up to 5 min; dead-lettered once attempts run out.
                let delay = backoff(attempt, Duration::from_secs(1), Duration::from_secs(300));
                let id = lease.id();
                match lease.nack(delay)? {
                    Nacked::Dead => eprintln!("{id}: attempt {attempt}, none left: dead-lettered"),
                    _ => eprintln!("{id}: attempt {attempt}, retry in {delay:?}"),
                }
            }
            Outcome::Fatal(why) => {
                eprintln!("{}: dead-lettered ({why})", lease.id());
                lease.fail(Reason::new(why).ok_or("bad reason")?)?;
            }
        }
    }
    Ok(())
}
