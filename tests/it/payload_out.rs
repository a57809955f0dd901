//! `claim --payload-out PATH` against hostile paths: symlinks (to a file, dangling, a hard
//! link to one), a FIFO with no reader, a socket, a directory, the claim's own stdout and
//! stderr, a file with another hard link. Each is refused before the claim (exit 2, the
//! path and the reason named), nothing outside is written or made, and every job stays
//! ready with no attempt used. A new path and an existing regular file still get the payload.
//! Then what it writes to: any writable file (/dev/null, a FIFO with a reader; /dev/full gives
//! the job back), nothing without a job, a payload cut part way (file size limit, stop
//! signal: the job is given back, the partial file removed), a path inside the queue (refused),
//! and a payload over the default limit.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use steadq::Queue;

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// A queue at `dir/q` with `n` jobs ("job-1", ...).
fn queue_with(dir: &Path, n: usize) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let q = dir.join("q");
    assert!(steadq(&["init", p(&q)]).status.success());
    for i in 1..=n {
        let o = steadq_in(&["enqueue", p(&q)], format!("job-{i}").as_bytes());
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    q
}

/// All `n` jobs of `q` are ready, none leased, and no attempt was used.
fn all_ready_unused(q: &Path, n: usize) {
    assert_eq!(counts(&Queue::open(q).unwrap()), [n, 0, 0, 0, 0]);
    let list = text(&steadq(&["list", p(q), "--state", "ready"]).stdout);
    assert_eq!(list.lines().count(), n, "{list}");
    assert!(
        list.lines().all(|l| l.contains(" attempt 0/")),
        "an attempt was used: {list}"
    );
}

/// A refused claim: exit 2, nothing on stdout, and stderr names `--payload-out PATH`, says
/// `why` and that no job was claimed.
fn refused(o: &Output, path: &Path, why: &str) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    let named = format!("--payload-out {}: ", path.display());
    assert!(err.contains(&named), "{err:?} lacks {named:?}");
    assert!(err.contains(why), "{err:?} lacks {why:?}");
    assert!(err.contains("nothing done (no job was claimed)"), "{err}");
}

/// A symlink at PATH was followed: run as root, the claim overwrote a root-owned file with
/// payload bytes a group member chose; a dangling one made a new file; a hard link to a
/// symlink passed the "more than one link" check (security trial). All three are refused,
/// the target unchanged or not made, the links left as they were, 3 jobs still ready.
#[test]
fn claim_payload_out_never_follows_a_symlink() {
    let d = TempDir::new("po-symlink");
    let q = queue_with(d.path(), 3);
    let target = d.path().join("target");
    std::fs::write(&target, b"orig").unwrap();
    let made = d.path().join("created");
    let links = d.path().join("links");
    std::fs::create_dir(&links).unwrap();
    let (p1, p2, s, p3) = (
        links.join("p1"),
        links.join("p2"),
        links.join("s"),
        links.join("p3"),
    );
    std::os::unix::fs::symlink(&target, &p1).unwrap();
    std::os::unix::fs::symlink(&made, &p2).unwrap();
    std::os::unix::fs::symlink(&target, &s).unwrap();
    // linkat(2) without AT_SYMLINK_FOLLOW: a second name of the symlink itself.
    std::fs::hard_link(&s, &p3).unwrap();
    assert!(std::fs::symlink_metadata(&p3).unwrap().is_symlink());
    for path in [&p1, &p2, &p3] {
        let o = steadq(&["claim", p(&q), "--lease", "1m", "--payload-out", p(path)]);
        refused(&o, path, "is a symbolic link; not followed");
        assert!(std::fs::symlink_metadata(path).unwrap().is_symlink());
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"orig");
    assert!(
        std::fs::symlink_metadata(&made).is_err(),
        "{made:?} was made"
    );
    all_ready_unused(&q, 3);
}

/// A FIFO with no reader blocked the claim in open(2) for ever, a stop signal ignored
/// (README: a stop ends a claim within 250 ms). It is refused at once (`O_NONBLOCK`:
/// ENXIO), well within 2 s, the job still ready; so are a socket and a directory.
#[test]
fn claim_payload_out_refuses_a_fifo_without_a_reader_at_once() {
    let d = TempDir::new("po-fifo");
    let q = queue_with(d.path(), 1);
    let fifo = d.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    let mut child = Command::new(BIN)
        .args(["claim", p(&q), "--lease", "1m", "--payload-out", p(&fifo)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(2) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("claim --payload-out to a FIFO with no reader still blocked after 2 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = t0.elapsed();
    let o = child.wait_with_output().unwrap();
    refused(
        &o,
        &fifo,
        "is a FIFO with no reader (opening it would wait for one); not opened",
    );
    eprintln!("claim to a FIFO with no reader gave up after {took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    let sock = d.path().join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let o = steadq(&["claim", p(&q), "--payload-out", p(&sock)]);
    refused(&o, &sock, "is a socket or a device with nothing behind it");
    let dir = d.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    let o = steadq(&["claim", p(&q), "--payload-out", p(&dir)]);
    refused(&o, &dir, "is a directory");
    all_ready_unused(&q, 1);
}

/// With stdout redirected to a file, `--payload-out /dev/stdout` (or `/proc/self/fd/1`, or
/// that file's own path) put the payload into the very file that carries the lease handle.
/// All are refused: the first two are symlinks, the third the same inode as fd 1; stderr's
/// file alike. The stdout file gets neither payload nor handle; the job stays ready.
#[test]
fn claim_payload_out_refuses_the_file_its_stdout_writes_to() {
    let d = TempDir::new("po-stdout");
    let q = queue_with(d.path(), 1);
    let out = d.path().join("out");
    let run = |target: &Path, stdout: &Path, stderr: Option<&Path>| {
        let mut c = Command::new(BIN);
        c.args(["claim", p(&q), "--payload-out", p(target)])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(stdout).unwrap());
        match stderr {
            Some(e) => c.stderr(std::fs::File::create(e).unwrap()),
            None => c.stderr(Stdio::piped()),
        };
        c.output().unwrap()
    };
    for target in ["/dev/stdout", "/proc/self/fd/1"] {
        let o = run(Path::new(target), &out, None);
        refused(&o, Path::new(target), "is a symbolic link; not followed");
        assert_eq!(std::fs::read(&out).unwrap(), b"", "{target}");
    }
    let o = run(&out, &out, None);
    refused(&o, &out, "is the file this claim's stdout writes to");
    assert_eq!(std::fs::read(&out).unwrap(), b"");
    let err = d.path().join("err");
    let o = run(&err, &out, Some(&err));
    assert_eq!(o.status.code(), Some(2));
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(
        said.contains(&format!(
            "--payload-out {}: is the file this claim's stderr writes to",
            err.display()
        )),
        "{said}"
    );
    assert!(!said.contains("job-1"), "{said}");
    assert_eq!(std::fs::read(&out).unwrap(), b"");
    all_ready_unused(&q, 1);
}

/// A regular file with a second hard link: the other name may be a file this claim must
/// not overwrite. It was refused only on the queue's own filesystem (a queue file reached
/// that way); on another filesystem (here /dev/shm, tmpfs, when the test directory is not
/// on it) both names got the payload. Refused wherever it is, both names keep their bytes.
#[test]
fn claim_payload_out_refuses_a_hard_linked_file() {
    use std::os::unix::fs::MetadataExt;
    let d = TempDir::new("po-hardlink");
    let q = queue_with(d.path(), 1);
    let shm = TempDir::new("po-hardlink-shm");
    let other = Path::new("/dev/shm").join(shm.path().file_name().unwrap());
    let mut places = Vec::new();
    let queue_dev = std::fs::metadata(&q).unwrap().dev();
    if std::fs::create_dir(&other).is_ok() {
        if std::fs::metadata(&other).unwrap().dev() != queue_dev {
            places.push(other.clone());
        } else {
            eprintln!("SKIP the other-filesystem case: /dev/shm is the queue's filesystem");
        }
    }
    places.push(d.path().join("near"));
    for place in &places {
        std::fs::create_dir_all(place).unwrap();
        let (a, b) = (place.join("a"), place.join("b"));
        std::fs::write(&a, b"keep").unwrap();
        std::fs::hard_link(&a, &b).unwrap();
        let o = steadq(&["claim", p(&q), "--payload-out", p(&a)]);
        refused(&o, &a, "a file with 2 hard links");
        assert_eq!(std::fs::read(&b).unwrap(), b"keep");
    }
    let _ = std::fs::remove_dir_all(&other);
    all_ready_unused(&q, 1);
}

/// What works still works: a new path is made (mode 0666 less the umask) and gets the
/// payload; an existing regular file is cut and gets the next one; with no job left a new
/// path is removed again and an existing file keeps its bytes.
#[test]
fn claim_payload_out_still_writes_a_new_or_an_existing_file() {
    use std::os::unix::fs::PermissionsExt;
    let d = TempDir::new("po-plain");
    let q = queue_with(d.path(), 2);
    let new = d.path().join("new");
    let o = steadq(&["claim", p(&q), "--payload-out", p(&new)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 1, "one handle");
    let first = std::fs::read(&new).unwrap();
    assert!(first == b"job-1" || first == b"job-2", "{first:?}");
    let umask = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|m| u32::from_str_radix(m.trim(), 8).unwrap())
        .unwrap();
    let mode = std::fs::metadata(&new).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660 & !umask, "never readable by every user");
    let old = d.path().join("old");
    std::fs::write(&old, b"a longer old content").unwrap();
    let o = steadq(&["claim", p(&q), "--payload-out", p(&old)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let second = std::fs::read(&old).unwrap();
    assert!(second != first && (second == b"job-1" || second == b"job-2"));
    let gone = d.path().join("gone");
    assert_eq!(
        steadq(&["claim", p(&q), "--payload-out", p(&gone)])
            .status
            .code(),
        Some(3)
    );
    assert!(std::fs::symlink_metadata(&gone).is_err());
    assert_eq!(
        steadq(&["claim", p(&q), "--payload-out", p(&old)])
            .status
            .code(),
        Some(3)
    );
    assert_eq!(std::fs::read(&old).unwrap(), second);
    assert_eq!(counts(&Queue::open(&q).unwrap()), [0, 2, 0, 0, 0]);
}

/// Another user's file planted in a sticky directory others may write (`/tmp`-like, 1777):
/// a root claim would have written the payload into a file its planter can read. Refused as
/// the kernel's `protected_regular` refuses it to an `O_CREAT` open; the file keeps its
/// bytes, the job stays ready. The claimer's own file there is still written.
#[test]
fn claim_payload_out_refuses_another_users_file_in_a_sticky_shared_dir() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP claim_payload_out_refuses_another_users_file_in_a_sticky_shared_dir: needs root, runs once");
        return;
    }
    let d = TempDir::new("payload-sticky");
    let q = queue_with(d.path(), 2);
    let drop = d.path().join("drop");
    std::fs::create_dir(&drop).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&drop, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = drop.join("p");
    std::fs::write(&planted, b"mine").unwrap();
    // Owned by nobody (65534), as if that user had made it.
    rustix::fs::chown(&planted, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
    let o = steadq(&[
        "claim",
        p(&q),
        "--lease",
        "1m",
        "--payload-out",
        p(&planted),
    ]);
    refused(&o, &planted, "another user's file in a sticky directory");
    assert_eq!(std::fs::read(&planted).unwrap(), b"mine");
    all_ready_unused(&q, 2);
    // The claimer's own file in the same directory takes the payload.
    let own = drop.join("own");
    std::fs::write(&own, b"old").unwrap();
    let o = steadq(&["claim", p(&q), "--lease", "1m", "--payload-out", p(&own)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(std::fs::read(&own).unwrap().starts_with(b"job-"));
}

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
