//! `claim --payload-out` and payload limits: any writable file, partial files, size limits
//! and stop signals, paths inside the queue.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use steadq::Queue;

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

#[test]
fn large_payload_limit_keeps_the_payload() {
    // Regression: --max-payload 18446744073709551615 overflowed and enqueued an empty payload.
    let d = TempDir::new("cli-maxlimit");
    assert!(steadq(&["init", p(d.path())]).status.success());
    let id = text(
        &steadq_in(
            &[
                "enqueue",
                p(d.path()),
                "--max-payload",
                "18446744073709551615",
            ],
            b"hello world",
        )
        .stdout,
    )
    .trim()
    .to_string();
    assert_eq!(
        steadq(&["show", p(d.path()), &id, "--raw"]).stdout,
        b"hello world"
    );
}

/// `claim --payload-out FILE` touches FILE only when it claimed a job: with no job (exit 3) an
/// existing file keeps its bytes and a missing one is not left behind (found by a fresh-user
/// trial: the file was cut to 0 bytes before the claim).
#[test]
fn a_claim_without_a_job_leaves_the_payload_file_alone() {
    let d = TempDir::new("cli-payload-out");
    let qs = d.path().to_str().unwrap();
    let init = steadq(&["init", qs]);
    assert!(init.status.success(), "{init:?}");
    let keep = d.path().with_extension("keep");
    std::fs::write(&keep, b"important").unwrap();
    let out = steadq(&["claim", qs, "--payload-out", keep.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(std::fs::read(&keep).unwrap(), b"important");
    let new = d.path().with_extension("new");
    let out = steadq(&["claim", qs, "--payload-out", new.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(!new.exists());
    assert!(steadq_in(&["enqueue", qs], b"job").status.success());
    let out = steadq(&["claim", qs, "--payload-out", keep.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read(&keep).unwrap(), b"job");
    std::fs::remove_file(&keep).unwrap();
}

/// The reading end of the FIFO at `path`, opened without waiting for a writer
/// (`O_NONBLOCK`), so a `claim --payload-out` started after it finds its reader. Read at
/// end of stream (the writer gone), it gives what is left in the pipe.
fn fifo_reader(path: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .unwrap()
}

/// `claim --payload-out` takes any writable file: /dev/null and a FIFO get the payload (they
/// were cut with set_len, EINVAL: exit 4 and the attempt used, so with --max-attempts 1 the
/// job was dead-lettered without running). A write that fails after the claim (/dev/full:
/// ENOSPC) releases the job and exits 2, not 4: the release was done, the job is ready again,
/// and with its attempt given back: nothing ran it (a cron `claim` beside a full disk used
/// one per run and dead-lettered the job, reason exhausted, without running it: breaker).
#[test]
fn claim_writes_the_payload_to_any_writable_file() {
    let d = TempDir::new("cli-payload-dev");
    let q = p(d.path());
    assert!(steadq(&["init", q]).status.success());
    let enq = |payload: &[u8], attempts: &str| {
        let o = steadq_in(&["enqueue", q, "--max-attempts", attempts], payload);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        text(&o.stdout).trim().to_string()
    };
    let settle = |o: Output| {
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let o = steadq(&["ack", q, text(&o.stdout).trim()]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    };
    enq(b"to the void", "1");
    settle(steadq(&["claim", q, "--payload-out", "/dev/null"]));
    // A FIFO, its reading end open before the claim starts (the claim refuses a FIFO with
    // no reader); the payload fits in the pipe's buffer, read once the claim is done.
    let fifo = d.path().with_extension("fifo");
    let _ = std::fs::remove_file(&fifo);
    let mk = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(mk.success());
    enq(b"through a pipe", "1");
    let mut reader = fifo_reader(&fifo);
    let o = Command::new(BIN)
        .args(["claim", q, "--payload-out", p(&fifo)])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut got).unwrap();
    assert_eq!(got, b"through a pipe");
    settle(o);
    std::fs::remove_file(&fifo).unwrap();
    let c = [0, 0, 0, 0, 2];
    assert_eq!(counts(&Queue::open(d.path()).unwrap()), c, "two receipts");
    // /dev/full: the write fails after the claim; the job is released, exit 2. Three times
    // over a job of 2 attempts: it is still ready, none used.
    let id = enq(b"no room", "2");
    for _ in 0..3 {
        let o = steadq(&["claim", q, "--payload-out", "/dev/full"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("/dev/full: ")
                && err.contains("released to ready, its attempt given back; not done"),
            "{err}"
        );
        assert!(o.stdout.is_empty());
    }
    let list = text(&steadq(&["list", q, "--state", "ready"]).stdout);
    assert!(
        list.starts_with(&format!("ready   {id} attempt 0/2")),
        "{list}"
    );
}

/// `claim --payload-out FILE` whose write fails part-way (here `ulimit -f 1`: EFBIG after
/// 1,024 bytes of a 5,000-byte payload) gave the job back but left the first 1,024 bytes in
/// the file, which a script that missed the exit status read as the payload. A file the
/// claim made is now removed, one that existed is emptied, and the message says which.
#[test]
fn a_payload_file_written_part_way_is_not_left_behind() {
    let d = TempDir::new("cli-payload-partial");
    let q = p(d.path());
    assert!(steadq(&["init", q]).status.success());
    let payload: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let o = steadq_in(&["enqueue", q, "--max-attempts", "1"], &payload);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();
    let out = d.path().with_extension("payload");
    let limited = |path: &Path| {
        Command::new("sh")
            .args([
                "-c",
                "ulimit -f 1; exec \"$0\" claim \"$1\" --payload-out \"$2\"",
            ])
            .args([BIN, q, p(path)])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for (existed, left) in [(false, "removed"), (true, "emptied")] {
        if existed {
            std::fs::write(&out, b"an older file").unwrap();
        } else {
            let _ = std::fs::remove_file(&out);
        }
        let o = limited(&out);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("; the partial file was {left}"))
                && err.contains("released to ready, its attempt given back; not done"),
            "{err}"
        );
        match std::fs::metadata(&out) {
            Ok(m) => assert!(existed && m.len() == 0, "{} bytes left", m.len()),
            Err(_) => assert!(!existed, "the existing file is kept, emptied"),
        }
    }
    // A dangling symlink as the path is not followed: refused before the claim, nothing
    // made at its end, the link left as it was (tests/it/payload_out.rs has the rest).
    let target = d.path().with_extension("target");
    let link = d.path().with_extension("link");
    let _ = std::fs::remove_file(&target);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = limited(&link);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is a symbolic link; not followed"), "{err}");
    assert!(!target.exists(), "nothing is made at the link's end");
    assert!(
        std::fs::symlink_metadata(&link).is_ok(),
        "the user's link stays"
    );
    std::fs::remove_file(&link).unwrap();
    // The job is ready with its one attempt unused, and a claim without the limit gets it
    // whole.
    let list = text(&steadq(&["list", q, "--state", "ready"]).stdout);
    assert!(
        list.starts_with(&format!("ready   {id} attempt 0/1")),
        "{list}"
    );
    let o = steadq(&["claim", q, "--payload-out", p(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), payload);
    std::fs::remove_file(&out).unwrap();
}

/// `claim` past `ulimit -f` died of SIGXFSZ after the claim (exit 153, half a handle
/// written, the job leased with an attempt used), and a stop signal while `claim` wrote a
/// large payload to a slow pipe killed it the same way: a job with one attempt went dead
/// without ever running (breaker findings). Now SIGXFSZ is ignored (the write fails with
/// EFBIG) and a stop signal interrupts the delivery: both give the job back with its
/// attempt (exit 2).
#[test]
fn claim_gives_the_job_back_when_a_file_size_limit_or_a_stop_signal_cuts_its_output() {
    let d = TempDir::new("cli-xfsz-stop");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("q");
    let qs = p(&q);
    assert!(steadq(&["init", qs]).status.success());
    assert!(steadq_in(&["enqueue", qs, "--max-attempts", "1"], b"small")
        .status
        .success());
    let out = d.path().join("big.out");
    std::fs::write(&out, vec![0u8; 1000]).unwrap();
    let o = Command::new("sh")
        .args(["-c", "ulimit -f 1; exec \"$S\" claim \"$Q\" >> \"$O\""])
        .env("S", BIN)
        .env("Q", qs)
        .env("O", &out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("File too large"),
        "{}",
        text(&o.stderr)
    );
    let listed = text(&steadq(&["list", qs]).stdout);
    assert!(
        listed.starts_with("ready") && listed.contains("attempt 0/1"),
        "{listed}"
    );
    // A 3 MB payload into a FIFO nobody drains; SIGTERM once the job is leased.
    let q2 = d.path().join("q2");
    let q2s = p(&q2);
    assert!(steadq(&["init", q2s]).status.success());
    let big = d.path().join("big.bin");
    std::fs::write(&big, vec![7u8; 3_000_000]).unwrap();
    let e = steadq(&["enqueue", q2s, "--file", p(&big), "--max-attempts", "1"]);
    assert!(e.status.success(), "{}", text(&e.stderr));
    let fifo = d.path().join("pf");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // The FIFO's reading end, open before the claim starts (the claim refuses a FIFO with
    // no reader) and never drained: the claim blocks in its write until the signal. The
    // signal is sent once the job is leased (not after a fixed delay, which under CI load
    // could land before the claim had installed its handler).
    let reader = fifo_reader(&fifo);
    let claim = Command::new(BIN)
        .args(["claim", q2s, "--lease", "30s", "--payload-out", p(&fifo)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !text(&steadq(&["list", q2s]).stdout).starts_with("leased") {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the claim never leased the job"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = rustix::process::Pid::from_raw(claim.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let o = claim.wait_with_output().unwrap();
    drop(reader);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("stopped by signal 15"),
        "{}",
        text(&o.stderr)
    );
    let listed = text(&steadq(&["list", q2s]).stdout);
    assert!(
        listed.starts_with("ready") && listed.contains("attempt 0/1"),
        "{listed}"
    );
}

/// `claim --payload-out` into the queue directory overwrote what it named: the identity file
/// (every later command: "identity damaged") or another job's file (dead-lettered as corrupt)
/// (breaker finding). A path inside the queue, symlinks resolved, is refused before the
/// claim.
#[test]
fn claim_refuses_a_payload_path_inside_the_queue() {
    let d = TempDir::new("cli-payload-inside");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("q");
    let qs = p(&q);
    assert!(steadq(&["init", qs, "--shards", "1"]).status.success());
    assert!(steadq_in(&["enqueue", qs], b"job").status.success());
    std::os::unix::fs::symlink(&q, d.path().join("alias")).unwrap();
    let identity = std::fs::read(q.join("steadq.queue")).unwrap();
    let before = snapshot(&q);
    for target in [
        q.join("steadq.queue"),
        q.join("ready/00/new.bin"),
        d.path().join("alias/tmp/x"),
    ] {
        let o = steadq(&["claim", qs, "--payload-out", p(&target)]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("inside the queue directory"),
            "{}",
            text(&o.stderr)
        );
    }
    // A hard link outside the queue to one of its files: cutting it wiped the identity, or
    // another ready job (breaker finding). Refused before the claim, naming the links.
    let job = std::fs::read_dir(q.join("ready/00"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let job_bytes = std::fs::read(&job).unwrap();
    for (i, file) in [q.join("steadq.queue"), job.clone()].iter().enumerate() {
        let link = d.path().join(format!("hard{i}"));
        std::fs::hard_link(file, &link).unwrap();
        let o = steadq(&["claim", qs, "--payload-out", p(&link)]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("a file with 2 hard links on the queue's filesystem"),
            "{}",
            text(&o.stderr)
        );
        std::fs::remove_file(&link).unwrap();
    }
    // A bind mount of the queue, or of one of its files, outside it (root only): the same
    // files by device and inode, with one link each (breaker finding).
    if rustix::process::geteuid().is_root() {
        let mount = |args: &[&str]| Command::new("mount").args(args).status().unwrap().success();
        let umount =
            |at: &Path| assert!(Command::new("umount").arg(at).status().unwrap().success());
        let bindq = d.path().join("bindq");
        std::fs::create_dir_all(&bindq).unwrap();
        let single = d.path().join("single");
        std::fs::write(&single, b"").unwrap();
        if mount(&["--bind", p(&q), p(&bindq)]) {
            for inside in ["steadq.queue", "evidence.log"] {
                let o = steadq(&["claim", qs, "--payload-out", p(&bindq.join(inside))]);
                let err = text(&o.stderr);
                if o.status.code() != Some(2) {
                    umount(&bindq);
                }
                assert_eq!(o.status.code(), Some(2), "{inside}: {err}");
                assert!(err.contains(&format!("the queue's own {inside}")), "{err}");
            }
            umount(&bindq);
        }
        if mount(&["--bind", p(&job), p(&single)]) {
            let o = steadq(&["claim", qs, "--payload-out", p(&single)]);
            let err = text(&o.stderr);
            umount(&single);
            assert_eq!(o.status.code(), Some(2), "{err}");
            assert!(err.contains("a SteadQ job file"), "{err}");
        }
    }
    assert_eq!(std::fs::read(&job).unwrap(), job_bytes);
    assert_eq!(snapshot(&q), before);
    assert_eq!(std::fs::read(q.join("steadq.queue")).unwrap(), identity);
    let out = d.path().join("payload.bin");
    assert!(steadq(&["claim", qs, "--payload-out", p(&out)])
        .status
        .success());
    assert_eq!(std::fs::read(&out).unwrap(), b"job");
}
