//! Full disks and inodes: users are not locked out, a default queue fits 64 inodes,
//! compaction frees inodes, init refuses what the free inodes cannot hold, recovery does all it can.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::Duration;
use steadq::sys::{Call, Errno, Fault, FaultAction, FaultPlan};
use steadq::{EnqueueOptions, Options, Outcome, Queue};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// Recovery goes on past an entry it cannot move (here the first rename of the pass gets
/// ENOSPC), recovers the rest, and reports the failure with a partial (indeterminate) outcome.
#[test]
fn recovery_does_all_it_can() {
    let d = TempDir::new("recover-all");
    let plan = FaultPlan::disarmed(vec![Fault {
        call: Call::Rename,
        nth: 1,
        action: FaultAction::Fail(Errno::NOSPC),
    }]);
    let q = with_plan(&d, &plan, opts(1));
    for i in 0..40u8 {
        q.enqueue(&[i]).unwrap();
    }
    for _ in 0..40 {
        q.claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(5)),
            ..Default::default()
        })
        .unwrap()
        .unwrap()
        .into_handle();
    }
    q.clock().shift_boot(6_000_000_000);
    plan.arm();
    let r = q.recover();
    assert_eq!((r.expired, r.failed), (39, 1));
    let e = r.first_error.clone().expect("the failure is reported");
    assert_eq!(e.outcome(), Outcome::Indeterminate);
    assert!(e.to_string().contains("disk full"), "{e}");
    assert_eq!(counts(&q), [39, 1, 0, 0, 0]);
    assert_eq!(
        q.recover().into_result().unwrap().expired,
        1,
        "the fault fired once"
    );
    assert_eq!(counts(&q), [40, 0, 0, 0, 0]);
}

/// Out of inodes: enqueue says "disk full" (exit 2, not done); status, list, fsck and recover
/// still work (the open-time rename probe no longer needs an inode).
#[test]
fn a_full_disk_does_not_lock_users_out() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP a_full_disk_does_not_lock_users_out: needs root, runs once");
        return;
    }
    let base = TempDir::new("fulldisk");
    std::fs::create_dir_all(base.path()).unwrap();
    // 128 inodes: the layout takes 23, the rest is for jobs (priority level directories are
    // made on first use, `a_default_queue_fits_64_inodes_and_makes_a_level_on_first_use`).
    let m = crate::filesystems::mount_small_ext4(base.path(), 16, 128).expect("loop-mount ext4");
    let q = m.dir.join("q");
    let qs = q.to_str().unwrap();
    assert!(run(&["init", qs]).status.success());
    let mut enqueued = 0;
    let err = loop {
        let mut c = Command::new(BIN)
            .args(["enqueue", qs])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin.take().unwrap().write_all(b"job").unwrap();
        let out = c.wait_with_output().unwrap();
        if !out.status.success() {
            assert_eq!(out.status.code(), Some(2));
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        enqueued += 1;
        assert!(enqueued < 200, "128 inodes never ran out");
    };
    assert!(err.contains("disk full"), "{err}");
    assert!(err.contains("not done"), "{err}");
    for cmd in ["status", "list", "fsck", "recover"] {
        let out = run(&[cmd, qs]);
        assert!(
            out.status.success(),
            "steadq {cmd} on a full disk: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let st = Queue::open(&q).unwrap().status().unwrap();
    assert_eq!(st.ready, enqueued);
    drop(m);
}

/// On a 16 MiB ext4 made with `-N 64` (53 free inodes) a default queue (8 shards, version 3)
/// failed `init` with disk full: it made 86 directories, 64 of them for the priority levels
/// other than the default. They are now made by the first job placed at a level: `init`
/// takes 24 inodes (23 then `evidence.log`), and the first enqueue at priority 7 makes `prio/7/<ss>/`; that job is
/// claimed before the older default-priority ones.
#[test]
fn a_default_queue_fits_64_inodes_and_makes_a_level_on_first_use() {
    let Some((_base, m)) =
        ext4_of_64_inodes("a_default_queue_fits_64_inodes_and_makes_a_level_on_first_use")
    else {
        return;
    };
    let free = || rustix::fs::statvfs(&m.dir).unwrap().f_ffree;
    let before = free();
    let root = m.dir.join("q");
    let q = Queue::create(&root, Options::default()).expect("a default init on 64 inodes");
    summary(&format!(
        "a default queue (8 shards) on an ext4 with {before} free inodes took {} at init",
        before - free()
    ));
    assert!(!root.join("prio").exists(), "prio/ made at init");
    let old = q.enqueue(b"default").unwrap();
    let urgent = q
        .enqueue_with(
            b"urgent",
            &EnqueueOptions {
                priority: Some(7),
                ..Default::default()
            },
        )
        .unwrap()
        .id();
    let dirs = files(&root, "prio");
    assert!(
        !dirs.is_empty(),
        "the level-7 job is in prio/7/<ss>/: {dirs:?}"
    );
    assert!(root.join("prio/7").is_dir());
    let first = q.claim().unwrap().expect("the level-7 job");
    assert_eq!((first.id(), first.priority()), (urgent, 7));
    first.ack().unwrap();
    let next = q.claim().unwrap().expect("the default job");
    assert_eq!(next.id(), old);
    next.ack().unwrap();
    assert!(q.fsck().unwrap().clean());
    drop(q);
    drop(m);
}

/// Runs the calling test (`full_disk::<name>`, `name` its function's name) once more as a
/// process of its own, with one test thread, and returns true when that run passed (the
/// caller returns); false in that process, which runs the test's body.
///
/// Why: these tests count a filesystem's free inodes exactly, and a child process another
/// test thread forks holds copies of this process's descriptors until it execs. A directory
/// removed meanwhile keeps its inode until then: in parallel runs the count lagged by one
/// for up to 300 ms (`init` then found 24 inodes free where the test had left 23, and a
/// file meant for the inode a `rmdir` had just freed failed with disk full), about one run
/// in five; with one test thread, never in 12.
fn ran_alone(name: &str) -> bool {
    // Under qemu-user a foreign binary can be run again only through binfmt_misc.
    let no_rerun = std::env::var_os("STEADQ_QEMU_USER").is_some()
        && std::env::var("STEADQ_QEMU_BINFMT").as_deref() != Ok("1");
    if no_rerun || std::env::var("STEADQ_ALONE").as_deref() == Ok(name) {
        return false;
    }
    let test = format!("full_disk::{name}");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test, "--test-threads=1", "--nocapture"])
        .env("STEADQ_ALONE", name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{test} in a process of its own: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{test} did not run: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    true
}

/// A loop-mounted 16 MiB ext4 made with `-N 64` (53 inodes free) under a temp dir, for a test
/// named `tag`; `None` (said) unless run as root, and once (not in the per-filesystem reruns);
/// `None` too when the test passed in a process of its own ([`ran_alone`]).
fn ext4_of_64_inodes(tag: &str) -> Option<(TempDir, crate::filesystems::Mount)> {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP {tag}: needs root, runs once");
        return None;
    }
    if ran_alone(tag) {
        return None;
    }
    let base = TempDir::new(tag);
    std::fs::create_dir_all(base.path()).unwrap();
    let m = crate::filesystems::mount_small_ext4(base.path(), 16, 64).expect("loop-mount ext4");
    Some((base, m))
}

/// A queue whose receipts took the last inode: `compact`, the documented cure, failed
/// "evidence.log: open failed: disk full" (its first run had to make `evidence.log`, which
/// needs the inode it was about to free), and so did every enqueue, until receipts were
/// removed by hand (breaker finding). `init` now makes `evidence.log`, empty, while inodes
/// are free; compaction appends to it and frees a receipt's inode per job.
#[test]
fn compaction_frees_inodes_on_a_filesystem_that_has_none_left() {
    let Some((_base, m)) =
        ext4_of_64_inodes("compaction_frees_inodes_on_a_filesystem_that_has_none_left")
    else {
        return;
    };
    let free = || rustix::fs::statvfs(&m.dir).unwrap().f_ffree;
    let q = Queue::create(m.dir.join("q"), Options::default()).unwrap();
    let mut n = 0;
    let full = loop {
        match q.enqueue(b"x") {
            Ok(_) => n += 1,
            Err(e) => break e.to_string(),
        }
    };
    assert!(full.contains("disk full"), "{full}");
    assert!(n >= 10, "{n} jobs fit");
    while let Some(l) = q.claim().unwrap() {
        l.ack().unwrap();
    }
    assert_eq!((q.status().unwrap().acked, free()), (n, 0));
    let r = q
        .compact(Duration::ZERO)
        .expect("compaction on a filesystem with no free inode");
    assert_eq!(r.removed as u64, n);
    // Less the one `steadq.counts` takes, made by this first compaction after the receipts
    // were removed (on a full filesystem it counts after removing).
    assert!(
        free() >= n - 1,
        "{} inodes free after compacting {n} receipts",
        free()
    );
    assert_eq!(q.status().unwrap().acked_total, Some(n));
    q.enqueue(b"room again").unwrap();
    assert!(q.fsck().unwrap().clean());
    drop(q);
    drop(m);
}

/// A job with no attempt left whose move to `dead/` cannot be made (here `dead` is a file;
/// in the field, a `dead/` this user may not write or no inode left for a bucket) stopped
/// every claim of its level: the claim failed on it each time, oldest first, and the jobs
/// behind it were never claimed (breaker finding). Now it is passed over and left ready; the
/// other jobs are claimed; with only such jobs left the claim fails naming the cause (not
/// "no job").
#[test]
fn an_exhausted_job_that_cannot_be_dead_lettered_does_not_block_the_jobs_behind_it() {
    let d = TempDir::new("exhausted-blocked");
    let q = Queue::create(
        d.path(),
        Options {
            max_attempts: 1,
            ..fast(1)
        },
    )
    .unwrap();
    for i in 0..3u8 {
        q.enqueue(&[i]).unwrap();
    }
    // Claimed, then given back: each has used its one attempt and is ready again.
    let held: Vec<steadq::Lease> = (0..3).map(|_| q.claim().unwrap().unwrap()).collect();
    for l in held {
        l.release().unwrap();
    }
    let good = EnqueueOptions {
        max_attempts: Some(5),
        ..Default::default()
    };
    let behind = [
        q.enqueue_with(b"D", &good).unwrap().id(),
        q.enqueue_with(b"E", &good).unwrap().id(),
    ];
    drop(q);
    std::fs::remove_dir_all(d.path().join("dead")).unwrap();
    std::fs::write(d.path().join("dead"), b"not a directory").unwrap();

    let q = Queue::open(d.path()).unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let l = q.claim().unwrap().expect("a job behind the exhausted ones");
        got.push(l.id());
        l.ack().unwrap();
    }
    got.sort();
    let mut want = behind.to_vec();
    want.sort();
    assert_eq!(got, want);
    let e = q
        .claim()
        .expect_err("only exhausted jobs that cannot move are left");
    assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
    assert!(e.to_string().contains("/dead"), "{e}");
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.dead), (3, 0), "{st:?}");
}

/// `init` on a filesystem with too few free inodes for the layout published the identity,
/// then failed part-way through the directories: exit 4 ("it may have happened"), an
/// incomplete queue that every later command refused, and `init` again failed the same way
/// until inodes were freed. It now refuses first (exit 2), naming both figures, and leaves
/// nothing behind: not even the queue's directory it made.
#[test]
fn init_refuses_a_new_queue_the_free_inodes_cannot_hold_and_changes_nothing() {
    let Some((_base, m)) = ext4_of_64_inodes(
        "init_refuses_a_new_queue_the_free_inodes_cannot_hold_and_changes_nothing",
    ) else {
        return;
    };
    let free = || rustix::fs::statvfs(&m.dir).unwrap().f_ffree;
    let fill = m.dir.join("fill");
    std::fs::create_dir(&fill).unwrap();
    let mut n = 0;
    while free() > 10 {
        std::fs::write(fill.join(n.to_string()), b"").unwrap();
        n += 1;
    }
    let q = m.dir.join("q");
    let qs = q.to_str().unwrap();
    let out = run(&["init", qs]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a new queue takes 24 inodes"), "{err}");
    assert!(err.contains(qs), "{err}");
    assert!(!q.exists(), "nothing left behind");
    assert_eq!(free(), 10, "every inode given back");
    // The library says the same, not done.
    let e = Queue::create(&q, Options::default()).unwrap_err();
    assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
    assert!(
        matches!(
            e.into_cause().kind(),
            steadq::ErrorKind::TooFewInodes { needed: 24, .. }
        ),
        "kind"
    );
    assert!(!q.exists());
    // One inode short of the 24 (2 x 8 shards + 8, the queue's directory included): refused.
    // Exactly 24 (a helper's finding: the queue's own directory was counted on one side
    // only, and an inode for the rename probe, which a full filesystem skips, on the
    // other): made, every inode used.
    let mut i = 0;
    while free() < 23 {
        std::fs::remove_file(fill.join(i.to_string())).unwrap();
        i += 1;
    }
    let out = run(&["init", qs]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("takes 24 inodes and the filesystem has 23 free"),
        "{err}"
    );
    std::fs::remove_file(fill.join(i.to_string())).unwrap();
    assert_eq!(free(), 24);
    let out = run(&["init", qs]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(free(), 0);
    std::fs::remove_file(fill.join((i + 1).to_string())).unwrap();
    let queue = Queue::open(&q).unwrap();
    queue.enqueue(b"fits").unwrap();
    assert!(queue.fsck().unwrap().clean());
    drop(queue);
    // An incomplete queue (a shard directory missing) with no inode free: `init` cannot
    // complete it, and says so as not done (it said "it may have happened", exit 4, for a
    // mkdir that failed: helper's finding); with one inode free it does.
    std::fs::remove_dir(q.join("receipts/07")).unwrap();
    std::fs::write(fill.join("last"), b"").unwrap();
    assert_eq!(free(), 0);
    let out = run(&["init", qs]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("receipts/07: mkdir failed: disk full"),
        "{err}"
    );
    assert!(
        err.contains("not done") && !err.contains("may have happened"),
        "{err}"
    );
    std::fs::remove_file(fill.join("last")).unwrap();
    assert!(run(&["init", qs]).status.success());
    assert!(Queue::open(&q).unwrap().fsck().unwrap().clean());
}
