//! The job lifecycle N times in one thread (enqueue, claim, ack), for counting syscalls:
//! `strace -c -f target/release/lifecycle-calls DIR 2000 strict|batched|none`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;
use steadq::{Durability, Options, Queue};

/// The system allocator, counting allocations and bytes asked for: heap traffic per job is a
/// deterministic view of user-space work that timing on a shared machine is not.
struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(l.size() as u64, Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System.alloc` with layout `l` (above).
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(n as u64, Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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
    // One lifecycle first, so that per-handle setup (watches, directory fds) is not counted.
    q.enqueue(&payload)?;
    q.claim()?.ok_or("no job to claim")?.ack()?;
    let (a0, b0) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed));
    let t = Instant::now();
    for _ in 0..jobs {
        q.enqueue(&payload)?;
        let lease = q.claim()?.ok_or("no job to claim")?;
        lease.ack()?;
    }
    let s = t.elapsed().as_secs_f64();
    eprintln!("{jobs} jobs in {s:.3} s: {:.0} jobs/s", jobs as f64 / s);
    let (a, b) = (ALLOCS.load(Relaxed) - a0, BYTES.load(Relaxed) - b0);
    let n = jobs.max(1) as u64;
    eprintln!("heap per job: {} allocations, {} bytes", a / n, b / n);
    Ok(())
}
