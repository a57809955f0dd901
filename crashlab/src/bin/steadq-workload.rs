//! The SteadQ crash workload (runs in the guest, static): a mix of enqueues, claims, acks,
//! nacks and fails on a queue at `<mountpoint>/q`, each recorded with an in-band mark only
//! after the operation returned done (past its rename and every barrier):
//! `enq <id>`, `claim <id> <attempt>`, `ack <id>`, `nack <id>`, `fail <id>`.
//!
//! `steadq-workload <mountpoint> <blockdev> <markbase> [--jobs N] [--batched] [--skip-file-fsync]`
//!
//! `--skip-file-fsync` is the NEGATIVE CONTROL: every fsync of a job file "succeeds" without
//! being made (a lying barrier, `FaultAction::Skip`), so jobs are published before their data
//! is durable. The rig must find violations with it, or it proves nothing.

use crashlab::marks::{say, MarkWriter, WorkloadArgs};
use std::process::exit;
use std::time::{Duration, Instant};
use steadq::sys::{Call, Fault, FaultAction, FaultPlan};
use steadq::{Durability, Options, Queue, Reason};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    say(&format!("CRASHLAB_WORKLOAD_FAIL {what}: {e}"));
    exit(1)
}

fn main() {
    let args = WorkloadArgs::from_env();
    let mut jobs = 40u64;
    let mut batched = false;
    let mut skip = false;
    let mut it = args.rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--jobs" => {
                jobs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| fail("args", "--jobs needs a number"))
            }
            "--batched" => batched = true,
            "--skip-file-fsync" => skip = true,
            "" => {}
            other => fail("args", format!("unknown option {other:?}")),
        }
    }
    let mut marks = MarkWriter::open(&args.blockdev, args.markbase)
        .unwrap_or_else(|e| fail("open mark device", e));
    // Armed after the queue exists: the bug under test is a job published before its data is
    // durable, not a torn identity file.
    let plan = FaultPlan::disarmed(vec![Fault {
        call: Call::Fsync,
        nth: 0,
        action: FaultAction::Skip,
    }]);
    let faults = skip.then(|| plan.clone());
    let o = Options {
        shards: 2,
        durability: if batched {
            Durability::Batched
        } else {
            Durability::Strict
        },
        faults,
        ..Options::default()
    };
    let dir = args.mountpoint.join("q");
    let q = Queue::create(&dir, o).unwrap_or_else(|e| fail("create", e));
    plan.arm();
    let mut mark = |op: &str, arg: String| {
        marks.mark(op, &arg).unwrap_or_else(|e| fail("mark", e));
    };
    let t = Instant::now();
    let mut n = 0u64;
    for i in 0..jobs {
        // Payloads from 100 bytes to ~24 KiB, so some span several blocks.
        let size = 100 + (i * 7919 % 24_000) as usize;
        let payload: Vec<u8> = (0..size).map(|j| (i as usize * 31 + j * 7) as u8).collect();
        if batched && i % 4 == 0 {
            let refs: Vec<&[u8]> = vec![&payload[..], &payload[..size / 2]];
            let ids = q
                .enqueue_batch(&refs)
                .unwrap_or_else(|e| fail("enqueue_batch", e));
            for id in ids {
                mark("enq", id.to_string());
            }
        } else {
            let id = q.enqueue(&payload).unwrap_or_else(|e| fail("enqueue", e));
            mark("enq", id.to_string());
        }
        n += 1;
        if i % 2 == 1 {
            let Some(l) = q
                .claim_for(Duration::from_secs(600))
                .unwrap_or_else(|e| fail("claim", e))
            else {
                continue;
            };
            let id = l.id().to_string();
            mark("claim", format!("{id} {}", l.attempt()));
            match i % 6 {
                1 | 5 => {
                    l.ack().unwrap_or_else(|e| fail("ack", e));
                    mark("ack", id);
                }
                3 if i % 12 == 3 => {
                    l.fail(Reason::FAILED).unwrap_or_else(|e| fail("fail", e));
                    mark("fail", id);
                }
                _ => {
                    l.nack(Duration::ZERO).unwrap_or_else(|e| fail("nack", e));
                    mark("nack", id);
                }
            }
        }
    }
    say(&format!(
        "CRASHLAB_WORKLOAD_DONE {n} iterations in {:.2}s{}",
        t.elapsed().as_secs_f64(),
        if skip {
            " (negative control: file fsyncs skipped)"
        } else {
            ""
        }
    ));
}
