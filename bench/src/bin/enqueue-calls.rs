//! Enqueue N jobs one call at a time (64-byte payloads), for counting syscalls per enqueue:
//! `strace -c -f target/release/enqueue-calls DIR N [strict|none] [limit]`. With `limit`
//! the queue gets a job limit far above N (so every enqueue is checked and admitted).

use steadq::{Durability, Limits, Options, Queue};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let dir = a
        .first()
        .ok_or("usage: enqueue DIR N [strict|none] [limit]")?;
    let n: usize = a.get(1).ok_or("N")?.parse()?;
    let durability = match a.get(2).map(String::as_str) {
        Some("none") => Durability::None,
        _ => Durability::Strict,
    };
    let q = Queue::create(
        dir,
        Options {
            durability,
            ..Options::default()
        },
    )?;
    if a.get(3).map(String::as_str) == Some("limit") {
        q.set_limits(Limits {
            max_jobs: Some(u64::MAX / 2),
            max_bytes: None,
        })?;
    }
    let payload = [b'x'; 64];
    for _ in 0..n {
        q.enqueue(&payload)?;
    }
    Ok(())
}
