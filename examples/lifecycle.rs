//! The job lifecycle N times in one thread (enqueue, claim, ack), for counting syscalls:
//! `strace -c -f target/release/examples/lifecycle DIR 2000 strict|batched|none`.

use std::time::Instant;
use steadq::{Durability, Options, Queue};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: lifecycle DIR [JOBS] [strict|batched|none]")?;
    let jobs: usize = args.next().map_or(Ok(2000), |s| s.parse())?;
    let durability = match args.next().as_deref() {
        None | Some("strict") => Durability::Strict,
        Some("batched") => Durability::Batched,
        Some("none") => Durability::None,
        Some(m) => return Err(format!("unknown mode {m}").into()),
    };
    let q = Queue::create(
        &dir,
        Options {
            durability,
            ..Options::default()
        },
    )?;
    let payload = [b'x'; 64];
    let t = Instant::now();
    for _ in 0..jobs {
        q.enqueue(&payload)?;
        let lease = q.claim()?.ok_or("no job to claim")?;
        lease.ack()?;
    }
    let s = t.elapsed().as_secs_f64();
    eprintln!("{jobs} jobs in {s:.3} s: {:.0} jobs/s", jobs as f64 / s);
    Ok(())
}
