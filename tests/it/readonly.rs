//! A filesystem refused by its `statfs(2)` magic (NFS) is refused before any call that could
//! block there (a `flock` its lock daemon holds up).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use crate::common::{opts, TempDir};
use steadq::sys::{Call, FaultPlan};
use steadq::{ErrorKind, Options, Queue};

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

fn counted() -> (Options, Arc<FaultPlan>) {
    let plan = FaultPlan::new(Vec::new());
    let o = Options {
        faults: Some(plan.clone()),
        ..Options::default()
    };
    (o, plan)
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
    let openers: [(&str, Opener); 2] = [
        ("open_with", |p, o| Queue::open_with(p, o)),
        ("create", |p, o| {
            Queue::create(p, o).map_err(|f| f.into_error())
        }),
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
