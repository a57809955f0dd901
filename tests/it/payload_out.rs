//! `claim --payload-out PATH` against hostile paths: symlinks (to a file, dangling, a hard
//! link to one), a FIFO with no reader, a socket, a directory, the claim's own stdout and
//! stderr, a file with another hard link. Each is refused before the claim (exit 2, the
//! path and the reason named), nothing outside is written or made, and every job stays
//! ready with no attempt used. A new path and an existing regular file still get the payload.

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
