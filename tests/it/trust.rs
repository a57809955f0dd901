//! Entries a member of the queue's group can plant in the queue directory (a fifo, socket,
//! symlink or directory where the queue keeps one of its own files; a re-planted quarantine
//! name; forged sizes, deadlines, generations and names): each ends in a clear error naming
//! the entry, or a warning and a skip, within 2 s; never a hang, never a stopped queue.

use crate::common::*;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use steadq::*;

/// How long a command may take to give up on a planted entry.
const GIVE_UP: Duration = Duration::from_secs(2);

/// A fifo at `path`: opening it for writing blocks until a reader comes.
fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
}

/// A unix socket inode at `path`, made by `mknod(2)` (`S_IFSOCK`): `open(2)` of it fails
/// with `ENXIO` as of a bound one, and it needs no `bind(2)`, whose path is limited to 108
/// bytes (the per-filesystem rerun's temp paths are longer).
fn mksocket(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Socket,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
}

/// Run `f` on its own thread; its result within [`GIVE_UP`], or the test fails (the thread
/// is left behind, blocked).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    let r = rx
        .recv_timeout(GIVE_UP)
        .unwrap_or_else(|_| panic!("{what}: still blocked after {GIVE_UP:?}"));
    eprintln!("{what}: gave up after {:?}", t0.elapsed());
    r
}

/// Run the built `steadq` with `args`; its output within [`GIVE_UP`], or it is killed and
/// the test fails.
fn steadq_within(args: &[&str]) -> std::process::Output {
    use std::process::{Command, Stdio};
    let t0 = Instant::now();
    let mut c = Command::new(env!("CARGO_BIN_EXE_steadq"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > GIVE_UP {
            c.kill().unwrap();
            c.wait().unwrap();
            panic!("steadq {args:?}: still running after {GIVE_UP:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("steadq {args:?}: ended after {:?}", t0.elapsed());
    c.wait_with_output().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn with_receipts(d: &TempDir, receipts: ReceiptPolicy) -> Queue {
    Queue::create(
        d.path(),
        Options {
            receipts,
            ..opts(2)
        },
    )
    .unwrap()
}

/// One acked job (its receipt kept), then `evidence.log` replaced by `plant`.
fn acked_with_evidence(tag: &str, plant: impl FnOnce(&Path)) -> (TempDir, Queue) {
    let d = TempDir::new(tag);
    let q = with_receipts(&d, ReceiptPolicy::Job);
    q.enqueue(b"acked").unwrap();
    q.claim().unwrap().unwrap().ack().unwrap();
    let ev = d.path().join("evidence.log");
    std::fs::remove_file(&ev).unwrap();
    plant(&ev);
    (d, q)
}

#[test]
fn compact_gives_up_on_a_fifo_at_the_evidence_log() {
    let (d, q) = acked_with_evidence("trust-compact-fifo", mkfifo);
    let dir = d.path().to_str().unwrap();
    let o = steadq_within(&["compact", dir, "--older-than", "0s"]);
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("evidence.log") && err.contains("not a regular file"),
        "{err}"
    );
    // The receipt is kept: nothing was removed without its evidence line.
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
    assert!(std::fs::symlink_metadata(d.path().join("evidence.log"))
        .unwrap()
        .file_type()
        .is_fifo());
}

#[test]
fn compact_never_writes_through_a_symlink_or_into_a_directory_at_the_evidence_log() {
    use std::os::unix::fs::symlink;
    let outside = TempDir::new("trust-outside");
    std::fs::create_dir(outside.path()).unwrap();
    let target = outside.path().join("victim");
    std::fs::write(&target, b"untouched\n").unwrap();
    let t = target.clone();
    let (d, q) = acked_with_evidence("trust-compact-link", move |ev| symlink(&t, ev).unwrap());
    let r = within("compact, symlink at evidence.log", move || {
        q.compact(Duration::ZERO)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let e = r.unwrap_err();
    assert!(e.contains("evidence.log") && e.contains("symlink"), "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), b"untouched\n");
    assert_eq!(files(d.path(), "receipts").len(), 1, "the receipt is kept");

    let (d, q) = acked_with_evidence("trust-compact-dir", |ev| std::fs::create_dir(ev).unwrap());
    let e = within("compact, directory at evidence.log", move || {
        q.compact(Duration::ZERO)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .unwrap_err();
    assert!(
        e.contains("evidence.log") && e.contains("not a regular file"),
        "{e}"
    );
    assert_eq!(files(d.path(), "receipts").len(), 1, "the receipt is kept");
}

/// Under `--receipts none` the ack's rename is the ack (done) and the evidence line comes
/// after it: a fifo at `evidence.log` leaves the receipt in place (compaction takes it
/// later), the ack is done and returns at once.
#[test]
fn an_ack_under_receipts_none_is_done_and_keeps_its_receipt_with_a_fifo_at_the_evidence_log() {
    let d = TempDir::new("trust-ack-fifo");
    let q = with_receipts(&d, ReceiptPolicy::None);
    let ev = d.path().join("evidence.log");
    std::fs::remove_file(&ev).unwrap();
    mkfifo(&ev);
    let id = q.enqueue(b"work").unwrap();
    let lease = q.claim().unwrap().unwrap();
    let r = within("ack, receipts none, fifo at evidence.log", move || {
        lease.ack().map(|r| r.name).map_err(|e| e.to_string())
    });
    let receipt = r.expect("the ack's rename is done");
    assert_eq!(
        counts(&q),
        [0, 0, 0, 0, 1],
        "the receipt stays: no evidence line"
    );
    assert_eq!(q.find(id).unwrap().state, State::Acked);
    assert!(files(d.path(), "receipts")[0].ends_with(&receipt));
    // Through the CLI: done (exit 0), the warning names evidence.log.
    q.enqueue(b"more").unwrap();
    let dir = d.path().to_str().unwrap();
    let h = steadq_within(&["claim", dir]);
    let h = String::from_utf8(h.stdout).unwrap();
    let o = steadq_within(&["ack", dir, h.trim()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("evidence.log") && err.contains("not a regular file"),
        "{err}"
    );
    assert_eq!(counts(&q), [0, 0, 0, 0, 2]);
}

#[test]
fn an_ack_under_receipts_none_never_writes_through_a_symlink_at_the_evidence_log() {
    let outside = TempDir::new("trust-outside-ack");
    std::fs::create_dir(outside.path()).unwrap();
    let target = outside.path().join("victim");
    std::fs::write(&target, b"untouched\n").unwrap();
    let d = TempDir::new("trust-ack-link");
    let q = with_receipts(&d, ReceiptPolicy::None);
    let ev = d.path().join("evidence.log");
    std::fs::remove_file(&ev).unwrap();
    std::os::unix::fs::symlink(&target, &ev).unwrap();
    q.enqueue(b"work").unwrap();
    let lease = q.claim().unwrap().unwrap();
    within("ack, receipts none, symlink at evidence.log", move || {
        lease.ack().is_ok()
    })
    .then_some(())
    .expect("the ack is done");
    assert_eq!(std::fs::read(&target).unwrap(), b"untouched\n");
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}

/// A hard link at `evidence.log` (a member's, to a file outside the queue: the kernel
/// allows it where `fs.protected_hardlinks` is 0, or for a file the member may write) is a
/// second name for another file: an ack under `--receipts none` never appends to it, and an
/// `init` of the queue never gives it the queue's owner, group or mode.
#[test]
fn an_ack_or_init_never_writes_or_shares_a_hard_link_at_the_evidence_log() {
    use std::os::unix::fs::PermissionsExt;
    let outside = TempDir::new("trust-outside-hardlink");
    std::fs::create_dir(outside.path()).unwrap();
    let target = outside.path().join("victim");
    std::fs::write(&target, b"untouched\n").unwrap();
    let empty = outside.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = TempDir::new("trust-ack-hardlink");
    let q = with_receipts(&d, ReceiptPolicy::None);
    let ev = d.path().join("evidence.log");
    std::fs::remove_file(&ev).unwrap();
    std::fs::hard_link(&target, &ev).unwrap();
    q.enqueue(b"work").unwrap();
    let lease = q.claim().unwrap().unwrap();
    within("ack, receipts none, hard link at evidence.log", move || {
        lease.ack().is_ok()
    })
    .then_some(())
    .expect("the ack is done");
    assert_eq!(std::fs::read(&target).unwrap(), b"untouched\n");
    assert_eq!(counts(&q), [0, 0, 0, 0, 1], "the receipt is kept");
    // Through the CLI: done (exit 0), the warning names evidence.log and the link.
    q.enqueue(b"more").unwrap();
    let dir = d.path().to_str().unwrap();
    let h = steadq_within(&["claim", dir]);
    let h = String::from_utf8(h.stdout).unwrap();
    let o = steadq_within(&["ack", dir, h.trim()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("evidence.log") && err.contains("more than one link"),
        "{err}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"untouched\n");
    // `init` shares an empty evidence.log like ready/: never the file behind a hard link.
    std::fs::remove_file(&ev).unwrap();
    std::fs::hard_link(&empty, &ev).unwrap();
    let o = steadq_within(&["init", dir]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mode = std::fs::metadata(&empty).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600, "the outside file keeps its mode");
    assert_eq!(std::fs::read(&empty).unwrap(), b"");
}

/// A keyed enqueue whose key names a job with no file left reads the evidence logs for its
/// ack line, and `fsck` reads them whole: a member's sparse `evidence.log` (`truncate -s
/// 1T`) is refused unread, naming it, where both read zeros for ever (a 50 GiB one: over
/// 2 minutes, memory growing, a line without a newline carried whole).
#[test]
fn a_sparse_evidence_log_is_refused_unread_by_a_keyed_enqueue_and_fsck() {
    let d = TempDir::new("trust-evidence-sparse");
    let q = with_receipts(&d, ReceiptPolicy::None);
    let key = EnqueueOptions {
        key: Key::new("order-1"),
        ..Default::default()
    };
    q.enqueue_with(b"charge", &key).unwrap();
    q.claim().unwrap().unwrap().ack().unwrap();
    let ev = d.path().join("evidence.log");
    std::fs::remove_file(&ev).unwrap();
    std::fs::File::create(&ev)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let dir = d.path().to_path_buf();
    let e = within("keyed enqueue, sparse evidence.log", move || {
        let q = Queue::open(&dir).unwrap();
        q.enqueue_with(b"charge", &key)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .unwrap_err();
    assert!(e.contains("evidence.log"), "{e}");
    let dir = d.path().to_path_buf();
    let rep = within("fsck, sparse evidence.log", move || {
        Queue::open(&dir).unwrap().fsck().unwrap()
    });
    assert!(
        rep.problems.iter().any(|p| p.path == "evidence.log"),
        "{:?}",
        rep.problems
    );
    // 32 MiB written without a newline: read once, in flat memory (it was carried whole and
    // searched again at every 64 KiB read: minutes), and reported torn.
    std::fs::write(&ev, vec![b'x'; 32 << 20]).unwrap();
    let dir = d.path().to_path_buf();
    let rep = within("fsck, 32 MiB line in evidence.log", move || {
        Queue::open(&dir).unwrap().fsck().unwrap()
    });
    assert!(
        rep.problems.iter().any(|p| p.path == "evidence.log"
            && matches!(p.kind, ProblemKind::TornEvidence { tail, .. } if tail == 32 << 20)),
        "{:?}",
        rep.problems
    );
}

/// A key entry whose job is gone is retired by a rename to its tombstone name, without
/// replacing: a member who plants that tombstone beside the entry made every enqueue of the
/// key rename, fail with `EEXIST`, take it for "retired by another" and look again, for
/// ever (100% of a core). The enqueue now fails at once naming the entry, and
/// `compact_keys` leaves the pair and goes on.
#[test]
fn a_planted_key_tombstone_fails_the_keyed_enqueue_at_once() {
    let d = TempDir::new("trust-key-tomb");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let key = EnqueueOptions {
        key: Key::new("order-7"),
        ..Default::default()
    };
    let id = q.enqueue_with(b"x", &key).unwrap().id();
    std::fs::remove_file(d.path().join(q.find(id).unwrap().rel_path(q.id()))).unwrap();
    let keys = d.path().join("keys");
    let entry = std::fs::read_dir(&keys)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let entry = entry.to_str().unwrap().to_string();
    std::fs::write(keys.join(format!("{entry}.{id}.gone")), b"").unwrap();
    let dir = d.path().to_path_buf();
    let e = within("keyed enqueue, tombstone taken", move || {
        let q = Queue::open(&dir).unwrap();
        q.enqueue_with(b"x", &key)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .unwrap_err();
    assert!(e.contains(&entry), "{e}");
    let dir = d.path().to_path_buf();
    let retired = within("compact_keys, tombstone taken", move || {
        Queue::open(&dir)
            .unwrap()
            .compact_keys(Duration::ZERO)
            .map_err(|e| e.to_string())
    });
    assert_eq!(retired, Ok(0));
    assert!(keys.join(&entry).exists(), "the entry stays");
}

/// `steadq.limits` is read by every enqueue (and `fsck`): a fifo or a socket there is an
/// error naming it, not a read of whatever a writer feeds it; the jobs already there stay.
#[test]
fn a_fifo_or_socket_at_the_limits_file_is_named_and_refused() {
    for kind in ["fifo", "socket"] {
        let d = TempDir::new(&format!("trust-limits-{kind}"));
        let q = Queue::create(d.path(), opts(1)).unwrap();
        let id = q.enqueue(b"already here").unwrap();
        let p = d.path().join("steadq.limits");
        match kind {
            "fifo" => mkfifo(&p),
            _ => mksocket(&p),
        }
        let q = std::sync::Arc::new(q);
        let q2 = q.clone();
        let e = within(&format!("limits, {kind}"), move || q2.limits().map(|_| ()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("steadq.limits") && e.contains("not a regular file"),
            "{kind}: {e}"
        );
        let q2 = q.clone();
        let e = within(&format!("enqueue, {kind} at limits"), move || {
            q2.enqueue(b"new").map_err(|e| e.to_string())
        })
        .unwrap_err();
        assert!(e.contains("steadq.limits"), "{kind}: {e}");
        let rep = q.fsck().unwrap();
        let p = rep.problems.iter().find(|p| p.path == "steadq.limits");
        assert_eq!(
            p.map(|p| p.kind.clone()),
            Some(ProblemKind::NotRegular(kind)),
            "{kind}: {rep:?}"
        );
        let l = q.claim().unwrap().unwrap();
        assert_eq!(l.id(), id, "{kind}: the job is intact");
    }
}

/// A key entry in `keys/` is read by every enqueue with its key: a fifo or socket there
/// fails that enqueue with its name (not done), and compaction of keys skips it.
#[test]
fn a_fifo_or_socket_at_a_key_entry_is_named_and_refused() {
    for kind in ["fifo", "socket"] {
        let d = TempDir::new(&format!("trust-key-{kind}"));
        let q = Queue::create(d.path(), opts(1)).unwrap();
        let key = Key::new("order-1").unwrap();
        let o = EnqueueOptions {
            key: Some(key),
            ..Default::default()
        };
        q.enqueue_with(b"first", &o).unwrap(); // makes keys/
        let entry = key.entry_name(q.id());
        let p = d.path().join("keys").join(&entry);
        std::fs::remove_file(&p).unwrap();
        match kind {
            "fifo" => mkfifo(&p),
            _ => mksocket(&p),
        }
        let q = std::sync::Arc::new(q);
        let q2 = q.clone();
        let e = within(&format!("enqueue_unique, {kind} at keys/"), move || {
            q2.enqueue_with(b"again", &o).map_err(|e| e.to_string())
        })
        .unwrap_err();
        assert!(
            e.contains(&format!("keys/{entry}")) && e.contains("not a regular file"),
            "{kind}: {e}"
        );
        let q2 = q.clone();
        within(&format!("compact_keys, {kind} at keys/"), move || {
            q2.compact_keys(Duration::ZERO).map(|_| ()).unwrap()
        });
        assert_eq!(counts(&q), [1, 0, 0, 0, 0], "{kind}: the job is intact");
    }
}

#[test]
fn a_fifo_at_the_identity_file_is_named() {
    let d = TempDir::new("trust-ident-fifo");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    let p = d.path().join("steadq.queue");
    std::fs::remove_file(&p).unwrap();
    mkfifo(&p);
    let root = d.path().to_path_buf();
    let e = within("open, fifo at steadq.queue", move || {
        Queue::open(&root).map(|_| ()).map_err(|e| e.to_string())
    })
    .unwrap_err();
    assert!(
        e.contains("steadq.queue") && e.contains("not a regular file"),
        "{e}"
    );
}

/// Two entries whose quarantine paths were planted beforehand: both are reported with both
/// paths, the other bad entries are moved all the same.
/// `fsck` of a queue a member filled with foreign entries (one empty file each, a few
/// hundred thousand inodes) takes time in proportion to them, not to their square: four
/// times the entries took sixteen times as long (200,000: 21 s, where 25,000 took 0.3 s).
#[test]
fn fsck_of_many_foreign_entries_takes_time_in_proportion_to_them() {
    let timed = |n: usize| {
        let d = TempDir::new("trust-fsck-many");
        let q = Queue::create(d.path(), opts(1)).unwrap();
        let shard = d.path().join("ready/00");
        for i in 0..n {
            std::fs::File::create(shard.join(format!("junk{i:06}"))).unwrap();
        }
        let t = Instant::now();
        let rep = q.fsck().unwrap();
        let took = t.elapsed();
        assert_eq!(rep.problems.len(), n);
        took
    };
    let small = timed(8_000);
    let large = timed(32_000);
    eprintln!("fsck: 8,000 foreign entries {small:?}, 32,000 {large:?}");
    assert!(
        large < small * 8 + Duration::from_millis(300),
        "8,000 entries {small:?}, 32,000 {large:?}: more than linear"
    );
}

/// Names of one job id forged by a member (the tag is computable from `steadq.queue`), each
/// an empty file in the job's shard: `fsck` reports each as corrupt and as a duplicate, in
/// time in proportion to them (60,000 took 24 s, 20,000 2 s: each duplicate was looked up
/// in every problem so far).
#[test]
fn fsck_of_many_forged_duplicates_takes_time_in_proportion_to_them() {
    let timed = |n: u64| {
        let d = TempDir::new("trust-fsck-dups");
        let q = Queue::create(d.path(), opts(1)).unwrap();
        let id = q.enqueue(b"one").unwrap();
        let l = q.find(id).unwrap();
        let shard = d.path().join(&l.dir);
        for g in 0..n {
            let mut name = l.name;
            name.generation = 100 + g;
            std::fs::File::create(shard.join(name.format(q.id()).as_str())).unwrap();
        }
        let t = Instant::now();
        let rep = q.fsck().unwrap();
        let took = t.elapsed();
        let dups = rep
            .problems
            .iter()
            .filter(|p| matches!(p.kind, ProblemKind::Duplicate(_)))
            .count();
        assert_eq!(dups as u64, n);
        took
    };
    let small = timed(1_500);
    let large = timed(6_000);
    eprintln!("fsck: 1,500 forged duplicates {small:?}, 6,000 {large:?}");
    assert!(
        large < small * 8 + Duration::from_millis(200),
        "1,500 duplicates {small:?}, 6,000 {large:?}: more than linear"
    );
}

#[test]
fn quarantine_goes_on_past_taken_quarantine_names() {
    let d = TempDir::new("trust-quarantine");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let good = q.enqueue(b"good").unwrap();
    let shard = d.path().join("ready/00");
    for n in ["junk1", "junk2", "junk3", "junk4"] {
        std::fs::write(shard.join(n), n).unwrap();
    }
    let qdir = d.path().join("quarantine/ready/00");
    std::fs::create_dir_all(&qdir).unwrap();
    std::fs::write(qdir.join("junk1"), b"planted").unwrap();
    std::fs::write(qdir.join("junk3"), b"planted").unwrap();
    let rep = q.fsck_quarantine().unwrap();
    let mut taken: Vec<_> = rep
        .problems
        .iter()
        .filter_map(|p| match &p.kind {
            ProblemKind::QuarantineTaken { at, .. } => {
                assert!(!p.quarantined);
                let text = p.to_string();
                assert!(
                    text.contains(&p.path) && text.contains(at.as_str()),
                    "{text}"
                );
                Some((p.path.clone(), at.clone()))
            }
            _ => None,
        })
        .collect();
    taken.sort();
    assert_eq!(
        taken,
        [
            ("ready/00/junk1".into(), "quarantine/ready/00/junk1".into()),
            ("ready/00/junk3".into(), "quarantine/ready/00/junk3".into()),
        ] as [(String, String); 2]
    );
    let mut moved: Vec<_> = rep
        .problems
        .iter()
        .filter(|p| p.quarantined)
        .map(|p| p.path.as_str())
        .collect();
    moved.sort();
    assert_eq!(moved, ["ready/00/junk2", "ready/00/junk4"]);
    assert_eq!(std::fs::read(qdir.join("junk2")).unwrap(), b"junk2");
    assert_eq!(
        std::fs::read(qdir.join("junk1")).unwrap(),
        b"planted",
        "never replaced"
    );
    assert!(shard.join("junk1").exists() && shard.join("junk3").exists());
    assert_eq!(q.claim().unwrap().unwrap().id(), good);
    // The CLI: the collisions listed, exit 5 (problems left).
    std::fs::write(shard.join("junk5"), b"junk5").unwrap();
    let o = steadq_within(&["fsck", d.path().to_str().unwrap(), "--quarantine"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(5), "{out}{}", stderr(&o));
    for n in ["junk1", "junk3"] {
        assert!(
            out.contains(&format!("ready/00/{n}: "))
                && out.contains(&format!("quarantine/ready/00/{n} already exists")),
            "{out}"
        );
    }
    assert!(qdir.join("junk5").exists(), "{out}");
}

/// A ready job's file grown to 100 GiB over a hole (`truncate -s`), its header's payload
/// length forged to match: reported corrupt (sparse) unread (fsck hashed it to its end, at
/// about 390 MB/s), and counted by what is allocated, not by its apparent size.
#[test]
fn a_sparse_job_file_is_corrupt_unread_and_not_counted_at_its_size() {
    use std::os::unix::fs::FileExt;
    let d = TempDir::new("trust-sparse");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"grown").unwrap();
    let rel = q.find(id).unwrap().rel_path(q.id());
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.path().join(&rel))
        .unwrap();
    f.set_len(100 << 30).unwrap();
    // The payload length at offset 56 (crates/steadq/src/disk/format.rs) agrees with the new size.
    f.write_all_at(&((100u64 << 30) - 128).to_le_bytes(), 56)
        .unwrap();
    drop(f);
    let q = std::sync::Arc::new(q);
    let q2 = q.clone();
    let rep = within("fsck of a 100 GiB sparse job", move || q2.fsck().unwrap());
    assert_eq!(rep.problems.len(), 1, "{rep:?}");
    assert_eq!(rep.problems[0].path, rel);
    assert!(
        matches!(
            rep.problems[0].kind,
            ProblemKind::Corrupt(format::Corruption::Sparse { declared, allocated })
                if declared == 100 << 30 && allocated < 1 << 20
        ),
        "{rep:?}"
    );
    assert!(
        rep.problems[0].to_string().contains("sparse"),
        "{}",
        rep.problems[0]
    );
    let st = q.status().unwrap();
    assert!(
        st.bytes.ready < 1 << 20,
        "counted at {} bytes",
        st.bytes.ready
    );
    // A byte limit of 1 MiB still has room: the forged size fills nothing.
    q.set_limits(Limits {
        max_jobs: None,
        max_bytes: Some(1 << 20),
    })
    .unwrap();
    q.enqueue(b"fits").unwrap();
    // A claim dead-letters it as corrupt without reading 100 GiB, and hands out the other.
    let l = within("claim past a sparse job", move || {
        q.claim().unwrap().map(|l| l.id())
    });
    assert!(l.is_some_and(|l| l != id));
}

/// A lease renamed to a deadline of `u64::MAX` ns of this boot hid its job for 213,503
/// days: past the 7-day cap it counts as expired, and fsck names it.
#[test]
fn a_forged_lease_deadline_past_the_cap_counts_as_expired() {
    let d = TempDir::new("trust-lease");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"hidden").unwrap();
    let l = q.claim().unwrap().unwrap();
    let (dir, old) = {
        let x = q.find(id).unwrap();
        (x.dir.clone(), x.name)
    };
    let Kind::Leased(mut f) = old.kind else {
        panic!("not leased: {old:?}")
    };
    f.boot_deadline_ns = u64::MAX;
    let forged = JobName {
        kind: Kind::Leased(f),
        ..old
    };
    std::fs::rename(
        d.path().join(&dir).join(old.format(q.id()).as_str()),
        d.path().join(&dir).join(forged.format(q.id()).as_str()),
    )
    .unwrap();
    std::mem::forget(l); // its name is gone; nothing of it is used again
    let rep = q.fsck().unwrap();
    assert!(
        rep.problems.iter().any(|p| matches!(
            p.kind,
            ProblemKind::LeaseBeyondCap { deadline_in_ns } if deadline_in_ns > 7 * 86_400 * 1_000_000_000
        ) && p.to_string().contains("7-day lease cap")),
        "{rep:?}"
    );
    assert_eq!(q.status().unwrap().expired_leases, 1);
    let r = q.recover().into_result().unwrap();
    assert_eq!(r.expired, 1, "{r:?}");
    let again = q.claim().unwrap().expect("given back");
    assert_eq!(again.id(), id);
    assert!(q.fsck().unwrap().problems.is_empty());
}

/// A ready name at generation `ffffffffffffffff`: its next move would wrap to generation 0.
/// Never claimed or moved by a worker; fsck names it and `--quarantine` moves it.
#[test]
fn a_job_at_the_last_generation_is_never_reissued() {
    let d = TempDir::new("trust-gen");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"forged").unwrap();
    let x = q.find(id).unwrap();
    let last = JobName {
        generation: u64::MAX,
        ..x.name
    };
    let last_name = last.format(q.id()).to_string();
    let from = d.path().join(&x.dir).join(x.name.format(q.id()).as_str());
    std::fs::rename(&from, d.path().join(&x.dir).join(&last_name)).unwrap();
    assert!(q.claim().unwrap().is_none(), "never handed out");
    assert!(q.recover().first_error.is_none());
    let gen0 = files(d.path(), "")
        .into_iter()
        .filter(|f| f.contains(".g0000000000000000."))
        .count();
    assert_eq!(gen0, 0, "nothing re-issued at generation 0");
    let rep = q.fsck_quarantine().unwrap();
    assert_eq!(rep.problems.len(), 1, "{rep:?}");
    assert_eq!(rep.problems[0].path, format!("{}/{last_name}", x.dir));
    assert_eq!(
        rep.problems[0].kind,
        ProblemKind::Foreign(Foreign::Name(name::NameError::LastGeneration))
    );
    assert!(rep.problems[0].quarantined);
    assert!(d
        .path()
        .join("quarantine")
        .join(&x.dir)
        .join(&last_name)
        .exists());
}

/// A name that is not UTF-8 is named (escaped, `\xNN`) and moved by `fsck --quarantine`.
#[test]
fn a_name_that_is_not_utf8_is_named_and_quarantined() {
    use std::os::unix::ffi::OsStrExt;
    let d = TempDir::new("trust-utf8");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let good = q.enqueue(b"good").unwrap();
    let raw = std::ffi::OsStr::from_bytes(b"bad\xff\xfename");
    std::fs::write(d.path().join("ready/00").join(raw), b"x").unwrap();
    let rep = q.fsck().unwrap();
    assert_eq!(rep.problems.len(), 1, "{rep:?}");
    assert_eq!(rep.problems[0].path, "ready/00/bad\\xff\\xfename");
    assert_eq!(rep.problems[0].kind, ProblemKind::Foreign(Foreign::NotUtf8));
    let rep = q.fsck_quarantine().unwrap();
    assert!(rep.problems[0].quarantined, "{rep:?}");
    assert!(d.path().join("quarantine/ready/00").join(raw).exists());
    assert!(!d.path().join("ready/00").join(raw).exists());
    assert!(q.fsck().unwrap().problems.is_empty());
    assert_eq!(q.claim().unwrap().unwrap().id(), good);
}

/// A small job's file with bytes appended past what its header declares (4 KiB or more:
/// the claim's first read is full): dead-lettered as corrupt. The claim indexed past the
/// end of its buffer and panicked.
#[test]
fn a_job_file_longer_than_its_header_says_is_dead_lettered_not_a_panic() {
    use std::io::Write;
    let d = TempDir::new("trust-grown");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"small").unwrap();
    let good = q.enqueue(b"good").unwrap();
    let rel = q.find(id).unwrap().rel_path(q.id());
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(d.path().join(&rel))
        .unwrap();
    f.write_all(&[b'x'; 8192]).unwrap();
    drop(f);
    // Ids made in one millisecond are not ordered: claim until none is left.
    let mut handed = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        handed.push(l.id());
        l.ack().unwrap();
    }
    assert_eq!(handed, vec![good]);
    assert_eq!(q.find(id).unwrap().state, State::Dead);
}

/// Names a member plants holding terminal controls (an OSC title, a screen clear, `\r`, a
/// newline, a C1 CSI) reach the operator's terminal escaped (`\xNN`) from every command that
/// prints them (`fsck`, `status`, `list`, `list --json`, the warnings), and are quarantined
/// by their bytes. They were printed raw: `fsck` retitled and cleared the terminal.
#[test]
fn names_with_terminal_controls_are_printed_escaped() {
    use std::os::unix::ffi::OsStrExt;
    let d = TempDir::new("trust-ansi");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let good = q.enqueue(b"good").unwrap();
    let raw = std::ffi::OsStr::from_bytes(b"x\x1b]0;PWNED\x07\x1b[2J\rfake\nline\xc2\x9b1m");
    std::fs::write(d.path().join("ready/00").join(raw), b"x").unwrap();
    std::fs::create_dir(d.path().join("dead").join(raw)).unwrap();
    let qp = p(d.path());
    let mut all = Vec::new();
    for args in [
        &["fsck", qp][..],
        &["status", qp],
        &["list", qp],
        &["list", qp, "--json"],
    ] {
        let o = run(args);
        for (what, b) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
            let bad: Vec<u8> = b
                .iter()
                .copied()
                .filter(|&c| (c < 0x20 && c != b'\n') || c == 0x7f)
                .collect();
            assert!(bad.is_empty(), "{args:?} {what}: {:?}", text(b));
            assert!(
                !text(b).contains('\u{9b}'),
                "{args:?} {what}: {:?}",
                text(b)
            );
        }
        all.push(text(&o.stdout) + &text(&o.stderr));
    }
    let esc = "x\\x1b]0;PWNED\\x07\\x1b[2J\\x0dfake\\x0aline\\xc2\\x9b1m";
    assert!(all[0].contains(&format!("ready/00/{esc}")), "{}", all[0]);
    assert!(all[0].contains(&format!("dead/{esc}")), "{}", all[0]);
    let rep = q.fsck_quarantine().unwrap();
    assert!(rep.problems.iter().all(|p| p.quarantined), "{rep:?}");
    assert!(!d.path().join("ready/00").join(raw).exists());
    assert!(!d.path().join("dead").join(raw).exists());
    assert!(q.fsck().unwrap().problems.is_empty());
    assert_eq!(q.claim().unwrap().unwrap().id(), good);
}
