//! Commands that only look (`status`, `list`, `show`, `fsck`, `dead list`) write nothing to
//! the queue's filesystem, and a filesystem refused by its `statfs(2)` magic (NFS) is refused
//! before any call that could block there (a `flock` its lock daemon holds up).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{opts, steadq_in, TempDir};
use steadq::sys::{Call, FaultPlan};
use steadq::{EnqueueOptions, ErrorKind, JobId, Options, Queue, Reason};

/// Every entry under `root` (itself included), sorted, with what a change to it would move:
/// inode, size, mtime and ctime (ns). A created, removed or renamed entry, and a directory
/// whose entries changed (its mtime), all show.
fn snapshot(root: &Path) -> Vec<(String, u64, u64, i128, i128)> {
    fn walk(base: &Path, p: &Path, out: &mut Vec<(String, u64, u64, i128, i128)>) {
        let m = std::fs::symlink_metadata(p).unwrap();
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        out.push((
            p.strip_prefix(base).unwrap().to_string_lossy().into_owned(),
            m.ino(),
            m.size(),
            ns(m.mtime(), m.mtime_nsec()),
            ns(m.ctime(), m.ctime_nsec()),
        ));
        if m.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(base, &e.unwrap().path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// A queue at `dir` with jobs in every state: 2 ready, 1 delayed, 1 leased (1 h), 1 leased
/// whose lease has expired (not recovered), 1 dead, 1 acked. The id and payload of the job
/// leased for 1 h.
fn every_state(dir: &Path) -> (JobId, Vec<u8>) {
    // One shard: claims take the oldest first.
    let q = Queue::create(dir, opts(1)).unwrap();
    for p in [&b"acked"[..], b"dead", b"leased", b"expired"] {
        q.enqueue(p).unwrap();
    }
    q.claim().unwrap().unwrap().ack().unwrap();
    q.claim().unwrap().unwrap().fail(Reason::FAILED).unwrap();
    let leased = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(3600)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let id = (leased.id(), leased.payload().unwrap().to_vec());
    // Kept leased (not released on drop): forgotten, as a worker that died would leave it.
    std::mem::forget(leased);
    std::mem::forget(
        q.claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_millis(20)),
            ..Default::default()
        })
        .unwrap()
        .unwrap(),
    );
    q.enqueue(b"ready 1").unwrap();
    q.enqueue(b"ready 2").unwrap();
    let later = EnqueueOptions {
        delay: Some(Duration::from_secs(3600)),
        ..Default::default()
    };
    q.enqueue_with(b"later", &later).unwrap().id();
    let start = Instant::now();
    while q.status().unwrap().expired_leases == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the lease never expired"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    id
}

/// The calls that change a filesystem: none of them may come from a command that looks.
const WRITES: [Call; 11] = [
    Call::Mkdir,
    Call::Write,
    Call::Fsync,
    Call::FsyncDir,
    Call::Syncfs,
    Call::WriteOut,
    Call::Link,
    Call::Rename,
    Call::Unlink,
    // Taken only on a file just created (`Sys::create_file`: the rename probe's file).
    Call::Flock,
    // Every `O_CREAT` and `O_TMPFILE` open is an Open: counted below as a whole.
    Call::Open,
];

fn counted() -> (Options, Arc<FaultPlan>) {
    let plan = FaultPlan::new(Vec::new());
    let o = Options {
        faults: Some(plan.clone()),
        ..Options::default()
    };
    (o, plan)
}

/// The library calls behind `status`, `list`, `show`, `fsck` and `dead list`, each from its
/// own open, make no call that writes (the fault plan counts every syscall), and leave every
/// entry of the queue as it was: no probe file made and removed in `tmp/` (it changed `tmp/`'s
/// mtime and cost ~14 KiB of journal writes per call on ext4), no expired lease recovered.
/// Then the same through the binary, every format of `status` included.
#[test]
fn commands_that_look_write_nothing() {
    let d = TempDir::new("readonly");
    let (id, payload) = every_state(d.path());
    let before = snapshot(d.path());
    /// One command's library calls: the queue, the options to open it with, the leased
    /// job's id and payload.
    type Look = fn(&Path, Options, JobId, &[u8]);
    let looks: [(&str, Look); 5] = [
        ("status", |p, o, _, _| {
            let s = Queue::open_with(
                p,
                steadq::Options {
                    mode: steadq::OpenMode::Check,
                    ..o
                },
            )
            .unwrap();
            let s = s.status().unwrap();
            assert_eq!(
                (
                    s.ready,
                    s.leased,
                    s.expired_leases,
                    s.delayed,
                    s.dead,
                    s.acked
                ),
                (2, 2, 1, 1, 1, 1)
            );
        }),
        ("list", |p, o, _, _| {
            let q = Queue::open_with(
                p,
                steadq::Options {
                    mode: steadq::OpenMode::ReadOnly,
                    ..o
                },
            )
            .unwrap();
            assert_eq!(q.list(None).unwrap().len(), 7);
        }),
        ("dead list", |p, o, _, _| {
            let q = Queue::open_with(
                p,
                steadq::Options {
                    mode: steadq::OpenMode::ReadOnly,
                    ..o
                },
            )
            .unwrap();
            assert_eq!(q.list(Some(steadq::State::Dead)).unwrap().len(), 1);
        }),
        ("show", |p, o, id, payload| {
            let q = Queue::open_with(
                p,
                steadq::Options {
                    mode: steadq::OpenMode::ReadOnly,
                    ..o
                },
            )
            .unwrap();
            let l = q.find(id).unwrap();
            let (_, mut reader) = q.open_job(&l).unwrap();
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut reader, &mut got).unwrap();
            assert_eq!(got, payload);
        }),
        ("fsck", |p, o, _, _| {
            let r = Queue::open_with(
                p,
                steadq::Options {
                    mode: steadq::OpenMode::Check,
                    ..o
                },
            )
            .unwrap()
            .fsck()
            .unwrap();
            assert!(r.problems.is_empty(), "{:?}", r.problems);
        }),
    ];
    for (name, look) in looks {
        let (o, plan) = counted();
        // Opens (of directories and files, read-only) are allowed; any other write call is
        // not, nor a creating open, which the snapshot below would show.
        look(d.path(), o, id, &payload);
        for call in WRITES.iter().filter(|c| **c != Call::Open) {
            assert_eq!(plan.count(*call), 0, "{name}: {call:?} calls");
        }
        assert_eq!(snapshot(d.path()), before, "{name} changed the queue");
    }
    let q = d.path().to_str().unwrap();
    let id = id.to_string();
    for args in [
        &["status", q][..],
        &["status", q, "--prometheus"],
        &["status", q, "--json"],
        &["list", q],
        &["dead", "list", q],
        &["show", q, &id],
        &["fsck", q],
    ] {
        let o = steadq_in(args, b"");
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            snapshot(d.path()),
            before,
            "steadq {args:?} changed the queue"
        );
    }
    // `status` says the expired lease is expired; it stays leased for `recover` to move.
    let o = steadq_in(&["status", q, "--json"], b"");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("\"expired_leases\":1"), "{text}");
}

/// `fsck --quarantine` moves entries, so it still makes the rename probe first (a handle
/// from `open_for_check` is opened without it): one probe file made, renamed and removed.
#[test]
fn fsck_quarantine_still_probes_renames() {
    let d = TempDir::new("readonly-quarantine");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    let (o, plan) = counted();
    let q = Queue::open_with(
        d.path(),
        steadq::Options {
            mode: steadq::OpenMode::Check,
            ..o
        },
    )
    .unwrap();
    assert_eq!(plan.count(Call::Rename), 0, "opened without the probe");
    let r = q.fsck_quarantine().unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(
        (
            plan.count(Call::Flock),
            plan.count(Call::Rename),
            plan.count(Call::Unlink)
        ),
        (1, 1, 1)
    );
}

/// NFS (`statfs` magic 0x6969, pretended by the fault plan: no NFS server here) is refused
/// from the root's `fstatfs`, the call after the root's open, by every way of opening and
/// by `create`: no `flock` (which a broken lock daemon can hold up for ever), no probe file,
/// nothing made. Before, the refusal came from the probe's rename, after its `flock`.
#[test]
fn nfs_is_refused_from_statfs_before_any_flock() {
    let d = TempDir::new("readonly-nfs");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    let before = snapshot(d.path());
    type Opener = fn(&Path, Options) -> steadq::Result<Queue>;
    let openers: [(&str, Opener); 4] = [
        ("open_with", |p, o| Queue::open_with(p, o)),
        ("open_read_only_with", |p, o| {
            Queue::open_with(
                p,
                steadq::Options {
                    mode: steadq::OpenMode::ReadOnly,
                    ..o
                },
            )
        }),
        ("open_for_check_with", |p, o| {
            Queue::open_with(
                p,
                steadq::Options {
                    mode: steadq::OpenMode::Check,
                    ..o
                },
            )
        }),
        ("create", |p, o| Queue::create(p, o)),
    ];
    let other = TempDir::new("readonly-nfs-new");
    let fresh = other.path().to_path_buf();
    for (name, open) in openers {
        for dir in [d.path(), &fresh] {
            if dir == fresh && name != "create" {
                continue;
            }
            let (o, plan) = counted();
            plan.pretend_fs_magic(0x6969);
            let e = open(dir, o)
                .err()
                .unwrap_or_else(|| panic!("{name}: opened"));
            assert_eq!(
                *e.kind(),
                ErrorKind::UnsupportedFilesystem { fs_type: "nfs" },
                "{name}: {e}"
            );
            assert_eq!(e.path(), Some(dir), "{name}");
            assert!(e.to_string().contains("nfs"), "{e}");
            let trace = plan.trace();
            assert_eq!(plan.count(Call::Flock), 0, "{name}: {trace:?}");
            // Nothing after the refusing `fstatfs` but, for `create`, the removal of the
            // directory it had just made.
            let stat = trace.iter().position(|c| *c == Call::Stat).unwrap();
            let after: Vec<_> = trace[stat + 1..]
                .iter()
                .filter(|c| !matches!(c, Call::Unlink | Call::FsyncDir))
                .collect();
            assert!(after.is_empty(), "{name}: {trace:?}");
        }
    }
    assert_eq!(
        snapshot(d.path()),
        before,
        "a refused open changed the queue"
    );
    assert!(!fresh.exists(), "a refused create left its directory");
    // On a supported filesystem the same check comes first, before the probe's `flock`.
    let (o, plan) = counted();
    drop(Queue::open_with(d.path(), o).unwrap());
    let trace = plan.trace();
    let first = |c: Call| trace.iter().position(|x| *x == c).unwrap();
    assert!(first(Call::Stat) < first(Call::Flock), "{trace:?}");
    assert!(
        trace[..first(Call::Stat)].iter().all(|c| *c == Call::Open),
        "{trace:?}"
    );
}
