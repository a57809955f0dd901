//! A producer: enqueue one job per line of standard input into the queue at `DIR` (made if
//! missing), each at most 3 attempts. A line is `KEY PAYLOAD`: the key (an order number, a
//! file's name: 1-128 bytes of `[A-Za-z0-9._:-]`) makes running it twice over the same input
//! enqueue nothing new. Copy it and change what a line means.
//!
//! ```sh
//! printf 'img-a resize a.jpg\nimg-b resize b.jpg\n' | cargo run -p steadq --example producer -- /tmp/jobs
//! ```
//!
//! Each enqueue is done (the job is durable), not done (nothing was made: safe to retry), or
//! indeterminate (the job may exist: `Queue::find` tells, or retry with the same key, which
//! cannot make a second job).

use std::io::BufRead;
use steadq::{EnqueueError, EnqueueOptions, Enqueued, Key, Options, Queue};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: producer DIR < lines")?;
    let q = Queue::create(&dir, Options::default())?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (key, payload) = line.split_once(' ').unwrap_or((&line, ""));
        let Some(key) = Key::new(key) else {
            return Err(format!(
                "line {line:?}: {key:?} is not a key ([A-Za-z0-9._:-], 1-128 bytes)"
            )
            .into());
        };
        let opts = EnqueueOptions {
            max_attempts: Some(3),
            key: Some(key),
            ..Default::default()
        };
        match q.enqueue_with(payload.as_bytes(), &opts) {
            Ok(Enqueued::New(id)) => println!("{id} {line}"),
            Ok(Enqueued::Duplicate(id)) => println!("{id} {line} (already enqueued)"),
            Err(e @ EnqueueError::Indeterminate { .. }) => {
                // It may have happened: say so, never guess. The same key makes no second job.
                eprintln!("{line}: {e}; run again to settle it");
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
