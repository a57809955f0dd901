//! Streaming payloads (issue 9: claim verification by streaming; issue 12 item 5:
//! `Lease::reader()`): a claim reads a job file in 64 KiB chunks, a payload that fits one is
//! read with one `pread` and kept, a larger one is streamed again by the reader with its digest
//! checked; a file changed after the claim fails the stream and the job is not acked.

use crate::common::*;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use steadq::sys::{Call, Errno, Fault, FaultAction, FaultPlan};
use steadq::*;

const BIN: &str = env!("CARGO_BIN_EXE_steadq");
/// The claim's chunk (64 KiB).
const CHUNK: usize = 64 * 1024;
/// The job file's header.
const HEADER: usize = 128;

/// `n` bytes that differ from chunk to chunk (a misplaced chunk would not read back equal).
fn bytes(n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn counted(d: &TempDir) -> (Queue, Arc<FaultPlan>) {
    let plan = FaultPlan::new(vec![]);
    let q = Queue::create(
        d.path(),
        Options {
            faults: Some(plan.clone()),
            ..fast(1)
        },
    )
    .unwrap();
    (q, plan)
}

/// The job file of `lease` (in `ready/<shard>/`).
fn leased_file(dir: &Path, lease: &Lease) -> PathBuf {
    let h = lease.handle();
    let f = files(dir, "ready")
        .into_iter()
        .find(|f| f.ends_with(&h))
        .expect("the leased file");
    dir.join(f)
}

/// Flip one bit of byte `at` of `file` in place.
fn flip(file: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(file)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x04], at).unwrap();
}

#[test]
fn a_small_job_is_one_read_and_a_large_one_reads_back_exactly_in_chunks() {
    let d = TempDir::new("stream-chunks");
    let (q, plan) = counted(&d);
    // A job file under the 4 KiB probe: one pread at claim and no fstat of its size (the
    // short read showed its end); one fstat of its link count (a second name that is a
    // lease or a receipt is not run again: `take_leased`), as in every claim below.
    q.enqueue(&bytes(64)).unwrap();
    plan.reset_counts();
    let l = q.claim().unwrap().unwrap();
    let calls = (plan.count(Call::Read), plan.count(Call::Stat));
    assert_eq!(calls, (1, 1), "claim of a 64-byte job: (reads, stats)");
    assert_eq!(l.payload().unwrap(), &bytes(64)[..]);
    l.ack().unwrap();
    // A job file of exactly one chunk: the probe, then the rest (with a byte of room that
    // shows the end the header declared), kept, no read after and no fstat.
    // (A new handle: it lists the shard, where this one would check the name it saw arrive
    // with an `fstatat`, also counted as Stat.)
    let small = bytes(CHUNK - HEADER);
    q.enqueue(&small).unwrap();
    let fresh = Options {
        faults: Some(plan.clone()),
        ..fast(1)
    };
    let q = Queue::open_with(d.path(), fresh.clone()).unwrap();
    plan.reset_counts();
    let l = q.claim().unwrap().unwrap();
    let calls = (plan.count(Call::Read), plan.count(Call::Stat));
    assert_eq!(calls, (2, 1), "claim of a one-chunk job: (reads, stats)");
    let mut back = Vec::new();
    l.reader().unwrap().read_to_end(&mut back).unwrap();
    assert_eq!((l.payload().unwrap(), &back[..]), (&small[..], &small[..]));
    assert_eq!(
        plan.count(Call::Read),
        2,
        "a kept payload is not read again"
    );
    assert_eq!(l.payload_len(), small.len() as u64);
    l.ack().unwrap();

    // Three chunks and a bit: the claim reads 4 chunks; the reader streams it back exactly,
    // in reads of any size; payload() loads it once.
    let large = bytes(3 * CHUNK + 12_345);
    q.enqueue(&large).unwrap();
    let q = Queue::open_with(d.path(), fresh).unwrap();
    plan.reset_counts();
    let l = q.claim().unwrap().unwrap();
    // The probe, fstat, the rest of the first chunk, then three chunks.
    let calls = (plan.count(Call::Read), plan.count(Call::Stat));
    assert_eq!(calls, (5, 2), "claim of a 4-chunk job file: (reads, stats)");
    assert_eq!(l.payload_len(), large.len() as u64);
    for step in [1000, 4096, CHUNK, 1 << 20] {
        let mut r = l.reader().unwrap();
        let (mut back, mut buf) = (Vec::new(), vec![0u8; step]);
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        assert!(back == large, "reads of {step} bytes");
        assert_eq!(r.read(&mut buf).unwrap(), 0, "still at its end");
    }
    plan.reset_counts();
    assert!(l.payload().unwrap() == &large[..]);
    assert!(l.payload().unwrap() == &large[..]);
    assert_eq!(
        plan.count(Call::Read),
        1,
        "payload() loads it once (one pread here)"
    );
    let receipt = l.ack().unwrap();
    assert!(receipt.name.ends_with(".rct"));
    assert_eq!(counts(&q), [0, 0, 0, 0, 3]);
}

#[test]
fn a_payload_changed_after_the_claim_fails_its_stream_and_is_not_acked() {
    let d = TempDir::new("stream-changed");
    let q = Queue::create(d.path(), fast(1)).unwrap();
    let large = bytes(2 * CHUNK + 7);
    let file_len = (HEADER + large.len()) as u64;
    // Flip the first payload byte, one in the middle, the last one; then cut the file short.
    for (i, at) in [HEADER as u64, file_len / 2, file_len - 1]
        .into_iter()
        .enumerate()
    {
        q.enqueue(&large).unwrap();
        let l = q.claim().unwrap().unwrap();
        flip(&leased_file(d.path(), &l), at);
        let mut r = l.reader().unwrap();
        let mut seen = 0usize;
        let mut buf = vec![0u8; 8192];
        let err = loop {
            match r.read(&mut buf) {
                Ok(0) => panic!("case {i}: a changed payload read to a clean end"),
                Ok(n) => seen += n,
                Err(e) => break e,
            }
        };
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidData,
            "case {i}: {err}"
        );
        assert!(seen < large.len(), "case {i}: the last bytes are withheld");
        let again = r.read(&mut buf).unwrap_err();
        assert_eq!(again.kind(), std::io::ErrorKind::InvalidData, "sticky");
        let e = l.payload().unwrap_err();
        assert_eq!(
            e.kind(),
            &ErrorKind::Io {
                call: Call::Read,
                errno: Errno::BADMSG.into()
            },
            "case {i}"
        );
        // Still leased by this lease, nothing acked: its holder dead-letters it.
        assert_eq!(counts(&q), [0, 1, 0, i, 0]);
        l.fail(Reason::CORRUPT).unwrap();
    }
    // A file cut short after the claim.
    q.enqueue(&large).unwrap();
    let l = q.claim().unwrap().unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(leased_file(d.path(), &l))
        .unwrap();
    f.set_len(file_len - 10).unwrap();
    let mut back = Vec::new();
    let e = l.reader().unwrap().read_to_end(&mut back).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    // Released, the next claim verifies it again and dead-letters it as corrupt.
    l.release().unwrap();
    assert!(q.claim().unwrap().is_none());
    assert_eq!(counts(&q), [0, 0, 0, 4, 0]);
    assert_eq!(
        files(d.path(), "dead")
            .iter()
            .filter(|f| f.contains(".xcorrupt."))
            .count(),
        4
    );
}

#[test]
fn a_large_job_corrupt_in_its_last_chunk_is_dead_lettered_at_claim() {
    let d = TempDir::new("stream-lastchunk");
    let q = Queue::create(d.path(), fast(1)).unwrap();
    let large = bytes(5 * CHUNK);
    let id = q.enqueue(&large).unwrap();
    let ready = files(d.path(), "ready");
    assert_eq!(ready.len(), 1);
    flip(&d.path().join(&ready[0]), (HEADER + large.len() - 1) as u64);
    assert!(q.claim().unwrap().is_none(), "never handed out");
    let dead = files(d.path(), "dead");
    assert!(
        dead.len() == 1 && dead[0].contains(".xcorrupt.") && dead[0].contains(&id.to_string()),
        "{dead:?}"
    );
}

/// A job file one byte longer or shorter than its header declares is dead-lettered as
/// corrupt at claim, on each of the claim's three read paths: under the 4 KiB probe (one
/// short read), up to one chunk (probe, then the rest with a byte of room), and larger
/// (fstat, then chunks). The paths without fstat take the file's length from where its
/// reads end, and a byte appended past the declared end must not pass.
#[test]
fn a_job_file_longer_or_shorter_than_declared_is_corrupt_on_every_read_path() {
    use std::io::Write;
    for payload in [64, 4096 - HEADER, 4096, 10_000, CHUNK - HEADER, 3 * CHUNK] {
        for grow in [true, false] {
            let d = TempDir::new("stream-length");
            let q = Queue::create(d.path(), fast(1)).unwrap();
            let id = q.enqueue(&bytes(payload)).unwrap();
            let file = d.path().join(&files(d.path(), "ready")[0]);
            let f = std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .unwrap();
            if grow {
                (&f).write_all(b"x").unwrap();
            } else {
                f.set_len((HEADER + payload - 1) as u64).unwrap();
            }
            drop(f);
            let case = format!(
                "payload {payload}, one byte {}",
                if grow { "more" } else { "less" }
            );
            assert!(q.claim().unwrap().is_none(), "{case}: never handed out");
            let dead = files(d.path(), "dead");
            assert!(
                dead.len() == 1
                    && dead[0].contains(".xcorrupt.")
                    && dead[0].contains(&id.to_string()),
                "{case}: {dead:?}"
            );
        }
    }
}

#[test]
fn a_failed_read_in_a_chunked_claim_or_stream_changes_nothing_and_keeps_the_lease() {
    let large = bytes(3 * CHUNK);
    for nth in 1..=4 {
        let d = TempDir::new("stream-readfault");
        let plan = FaultPlan::disarmed(vec![Fault {
            call: Call::Read,
            nth,
            action: FaultAction::Fail(Errno::IO),
        }]);
        let q = Queue::create(
            d.path(),
            Options {
                faults: Some(plan.clone()),
                ..fast(1)
            },
        )
        .unwrap();
        q.enqueue(&large).unwrap();
        plan.arm();
        // The claim's rename happened: indeterminate, and the job was released.
        let e = q.claim().unwrap_err();
        assert_eq!(e.outcome(), Outcome::Indeterminate, "read {nth}: {e}");
        assert_eq!(counts(&q), [1, 0, 0, 0, 0], "read {nth}: back in ready");
        // The stream: the nth read of the reader fails with the errno; the lease stays.
        let l = q.claim().unwrap().unwrap();
        plan.arm();
        let mut back = Vec::new();
        let e = l.reader().unwrap().read_to_end(&mut back).unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(Errno::IO.raw_os_error()),
            "read {nth}"
        );
        assert_eq!(counts(&q), [0, 1, 0, 0, 0]);
        plan.disarm();
        back.clear();
        l.reader().unwrap().read_to_end(&mut back).unwrap();
        assert!(back == large);
        l.ack().unwrap();
    }
}

#[test]
fn work_streams_a_large_payload_and_does_not_ack_one_changed_after_the_claim() {
    let d = TempDir::new("stream-work");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let large = bytes(16 * CHUNK + 3);
    let out = d.path().join("out");
    q.enqueue(&large).unwrap();
    let o = Command::new(BIN)
        .args([
            "work",
            "--once",
            d.path().to_str().unwrap(),
            "--",
            "sh",
            "-c",
        ])
        .arg(format!("cat > '{}'", out.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        std::fs::read(&out).unwrap() == large,
        "the command got the payload"
    );
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
    // A command that reads nothing and exits 0 is acked too (the rest is checked anyway).
    q.enqueue(&large).unwrap();
    let o = Command::new(BIN)
        .args(["work", "--once", d.path().to_str().unwrap(), "--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(counts(&q), [0, 0, 0, 0, 2]);

    // The command itself changes the last payload byte of its leased file, then reads all of
    // stdin and exits 0: the worker must not ack it, and dead-letters it as corrupt.
    q.enqueue(&large).unwrap();
    let last = HEADER + large.len() - 1;
    let other = if large[large.len() - 1] == b'Z' {
        'Y'
    } else {
        'Z'
    };
    let script = format!(
        "f=$(ls \"$STEADQ_QUEUE\"/ready/*/*) && \
         printf {other} | dd of=\"$f\" bs=1 seek={last} conv=notrunc 2>/dev/null && \
         cat > /dev/null; exit 0"
    );
    let o = Command::new(BIN)
        .args([
            "work",
            "--once",
            d.path().to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("reading its payload failed") && err.contains("reason corrupt"),
        "{err}"
    );
    assert_eq!(counts(&q), [0, 0, 0, 1, 2], "{err}");
    assert!(files(d.path(), "dead")[0].contains(".xcorrupt."));
}

#[test]
fn claim_payload_out_streams_a_large_payload_exactly() {
    let d = TempDir::new("stream-claim");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let large = bytes(4 * CHUNK + 1);
    q.enqueue(&large).unwrap();
    // Beside the queue, not in it (a path inside the queue is refused).
    let out = d.path().with_extension("payload");
    let o = Command::new(BIN)
        .args(["claim", d.path().to_str().unwrap(), "--payload-out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(std::fs::read(&out).unwrap() == large);
    let _ = std::fs::remove_file(&out);
    let handle = String::from_utf8(o.stdout).unwrap();
    let l = q.lease_from_handle(handle.trim()).unwrap();
    assert!(l.payload().unwrap() == &large[..]);
    l.ack().unwrap();
}

#[test]
fn a_worker_takes_a_large_job_in_flat_memory() {
    // 12 MiB: a worker holding the payload (as before: claim 1x, stdin copy 1x) would reach
    // 24 MiB and more; streaming stays near the process's own few MB. The command reads the
    // worker's high-water mark after it has read all of stdin (the feed then read all of it).
    let d = TempDir::new("stream-rss");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(&bytes(12 << 20)).unwrap();
    let o = Command::new(BIN)
        .args([
            "work",
            "--once",
            d.path().to_str().unwrap(),
            "--",
            "sh",
            "-c",
        ])
        .arg("cat >/dev/null; grep VmHWM /proc/$PPID/status")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let kib: u64 = out
        .split_whitespace()
        .nth(1)
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {out:?}"));
    summary(&format!(
        "stream: steadq work on a 12 MiB job: VmHWM {kib} KiB"
    ));
    assert!(
        kib < rss_bound_kib(10 * 1024),
        "worker high-water mark {kib} KiB for a 12 MiB job"
    );
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}
