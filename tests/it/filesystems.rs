//! Run the whole suite again on tmpfs and on loop-mounted ext4, xfs and btrfs images.
//!
//! Needs root, loop devices and mkfs.{ext4,xfs,btrfs}; without them it says why and skips
//! (CI installs them and runs as root, so there it runs). Set `STEADQ_FS=ext4,xfs` to choose.
//! The rerun is in the slow tier (`cargo test --workspace -- --ignored`); each filesystem's
//! run takes the fast and the slow tests alike, less `RERUN_SKIP` and the manual benchmark.

use std::path::{Path, PathBuf};
use std::process::Command;
use steadq::{Durability, Options, Queue};

pub(crate) fn sh(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub(crate) struct Mount {
    pub dir: PathBuf,
    img: Option<PathBuf>,
}

impl Drop for Mount {
    fn drop(&mut self) {
        // A child process another test thread has just forked holds copies of this
        // process's descriptors until it execs, so the mount can be busy for a moment
        // (under qemu-user, long enough that a plain `umount` left mounts behind). Try
        // again, then detach it (`umount -l`: gone once the last descriptor closes).
        let d = self.dir.to_str().unwrap();
        let mut tries = 0;
        while sh("umount", &[d]).is_err() && tries < 10 {
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if tries == 10 {
            let _ = sh("umount", &["-l", d]);
        }
        if let Some(i) = &self.img {
            let _ = std::fs::remove_file(i);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn mount(fs: &str, base: &Path) -> Result<Mount, String> {
    mount_with(fs, base, "loop")
}

/// A fresh 1 GiB image of `fs` (or a tmpfs) loop-mounted under `base` with mount options
/// `opts` (`"loop"` and more, comma-separated; ignored for tmpfs).
fn mount_with(fs: &str, base: &Path, opts: &str) -> Result<Mount, String> {
    let dir = base.join(format!("mnt-{fs}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if fs == "tmpfs" {
        sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                "size=512m",
                "steadq-test",
                dir.to_str().unwrap(),
            ],
        )?;
        return Ok(Mount { dir, img: None });
    }
    let img = base.join(format!("{fs}.img"));
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(1 << 30).map_err(|e| e.to_string())?;
    let i = img.to_str().unwrap();
    match fs {
        "ext4" => sh("mkfs.ext4", &["-q", "-F", i])?,
        "xfs" => sh("mkfs.xfs", &["-q", "-f", i])?,
        "btrfs" => sh("mkfs.btrfs", &["-q", "-f", i])?,
        _ => return Err(format!("unknown filesystem {fs}")),
    }
    let mut last = String::new();
    for _ in 0..4 {
        // Loop devices are torn down asynchronously; a quick remount can fail once.
        match sh("mount", &["-o", opts, "-t", fs, i, dir.to_str().unwrap()]) {
            Ok(()) => {
                return Ok(Mount {
                    dir,
                    img: Some(img),
                })
            }
            Err(e) => last = e,
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let _ = std::fs::remove_file(&img);
    Err(last)
}

/// A small ext4 image (`size_mb` MiB, at most `inodes` inodes) loop-mounted under `base`, for
/// full-disk tests. Needs root.
pub(crate) fn mount_small_ext4(base: &Path, size_mb: u64, inodes: u32) -> Result<Mount, String> {
    mount_ext4_with(base, size_mb, &["-N", &inodes.to_string()])
}

/// An ext4 image of `size_mb` MiB made with extra `mkfs.ext4` arguments (say `-b 4096 -m 0`),
/// loop-mounted under `base`. Needs root.
pub(crate) fn mount_ext4_with(base: &Path, size_mb: u64, mkfs: &[&str]) -> Result<Mount, String> {
    let dir = base.join("mnt-small");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let img = base.join("small.img");
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(size_mb << 20).map_err(|e| e.to_string())?;
    let i = img.to_str().unwrap();
    let mut args = vec!["-q", "-F"];
    args.extend_from_slice(mkfs);
    args.push(i);
    sh("mkfs.ext4", &args)?;
    sh("mount", &["-o", "loop", i, dir.to_str().unwrap()])?;
    Ok(Mount {
        dir,
        img: Some(img),
    })
}

/// A mount option that voids every barrier is found, reported by `status` (text and JSON)
/// and logged by a read-write open, on real loop mounts: ext4 `nobarrier` (found by the
/// root's device) and btrfs `nobarrier` (a subvolume's files have a device of their own, so
/// found by its mount ID); a plain ext4 mount reports none. Each fails without the
/// mountinfo check (`Queue::barriers_voided_by`). Two ways it was blinded are in place while
/// it runs: a mount elsewhere whose path is not UTF-8 (any FUSE user can make one; the whole
/// mountinfo was refused then), and a thread with a mount namespace of its own (it read the
/// process's mounts, not its own).
#[test]
fn a_mount_that_voids_barriers_is_reported() {
    use std::os::unix::ffi::OsStrExt;
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP a_mount_that_voids_barriers_is_reported: needs root, runs once");
        return;
    }
    let base = crate::common::TempDir::new("nobarrier");
    let odd = base.path().join(std::ffi::OsStr::from_bytes(b"odd\xff"));
    std::fs::create_dir_all(&odd).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "steadq-odd"])
        .arg(&odd)
        .status()
        .unwrap();
    assert!(mounted.success());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _odd = Unmount(odd);
    let cases = [
        ("ext4", "loop", None),
        ("ext4", "loop,nobarrier", Some("ext4 mounted nobarrier")),
        ("btrfs", "loop,nobarrier", Some("btrfs mounted nobarrier")),
    ];
    for (i, (fs, opts, want)) in cases.into_iter().enumerate() {
        let at = base.path().join(i.to_string());
        std::fs::create_dir_all(&at).unwrap();
        let m = mount_with(fs, &at, opts).expect("loop-mount");
        let q = Queue::create(m.dir.join("q"), Options::default()).unwrap();
        assert_eq!(q.barriers_voided_by().as_deref(), want, "{fs} -o {opts}");
        assert_eq!(q.status().unwrap().barriers_voided_by.as_deref(), want);
        let root = m.dir.join("q");
        let in_own_namespace = std::thread::spawn(move || {
            // SAFETY: unshare(2) with CLONE_NEWNS (and the CLONE_FS it implies) changes only
            // this thread's mount namespace and filesystem attributes, which no other thread
            // reads; the thread ends after this check.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNS) }, 0);
            Queue::open(&root).unwrap().barriers_voided_by()
        });
        assert_eq!(
            in_own_namespace.join().unwrap().as_deref(),
            want,
            "{fs}, own namespace"
        );
        let none = Queue::open_with(
            m.dir.join("q"),
            Options {
                durability: Durability::None,
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(
            none.barriers_voided_by(),
            None,
            "no barriers, nothing voided"
        );
        let qs = m.dir.join("q");
        let qs = qs.to_str().unwrap();
        let text = crate::common::run(&["status", qs]);
        let text = String::from_utf8_lossy(&text.stdout);
        let json = crate::common::run(&["status", "--json", qs]);
        let json = String::from_utf8_lossy(&json.stdout);
        let enq = crate::common::steadq_in(&["enqueue", qs], b"job");
        assert!(enq.status.success());
        let logged = String::from_utf8_lossy(&enq.stderr);
        match want {
            Some(w) => {
                let line = format!("warning  the filesystem is {w}: its fsyncs are no");
                assert!(text.contains(&line), "{text}");
                assert!(
                    json.contains(&format!(r#""barriers_voided_by":"{w}"}}"#)),
                    "{json}"
                );
                assert!(
                    logged.contains(&format!("the filesystem is {w}")),
                    "{logged}"
                );
            }
            None => {
                assert!(!text.contains("warning"), "{text}");
                assert!(json.contains(r#""barriers_voided_by":null}"#), "{json}");
                assert!(!logged.contains("durability barriers"), "{logged}");
            }
        }
    }
}

/// Tests the per-filesystem rerun leaves out: they measure memory or make their own loop
/// mounts, so the filesystem under `STEADQ_TEST_DIR` does not change what they check, and
/// they cost minutes per filesystem (CI's time budget). They run once, in the slow tier.
const RERUN_SKIP: [&str; 5] = [
    "budget::footprint_per_job_under_each_policy",
    "enqueue_stream::the_cli_enqueues_a_40_mib_file_and_stdin_in_flat_memory",
    "fsck::fsck_and_show_of_a_64_mib_job_stay_in_flat_memory",
    "perf::twenty_thousand_leases_hold_no_file_descriptors",
    "stream::a_worker_takes_a_large_job_in_flat_memory",
];

#[test]
#[ignore = "slow tier: the suite again on tmpfs, ext4, xfs and btrfs (minutes)"]
fn suite_passes_on_real_filesystems() {
    if std::env::var_os("STEADQ_TEST_DIR").is_some() {
        return; // already inside a per-filesystem run
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP suite_passes_on_real_filesystems: needs root for loop mounts (CI runs it as root)");
        return;
    }
    let wanted = std::env::var("STEADQ_FS").unwrap_or_else(|_| "tmpfs,ext4,xfs,btrfs".into());
    let base = std::env::temp_dir().join(format!("steadq-fs-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let mut ran = Vec::new();
    for fs in wanted.split(',') {
        let m = match mount(fs, &base) {
            Ok(m) => m,
            Err(e) => {
                assert!(
                    std::env::var_os("STEADQ_REQUIRE_FS").is_none(),
                    "cannot mount {fs}: {e}"
                );
                crate::common::summary(&format!("SKIP filesystem {fs}: {e}"));
                continue;
            }
        };
        let t = std::time::Instant::now();
        // The slow tier too (`--include-ignored`): every test that makes sense per
        // filesystem runs on each, fast or slow, but for the manual benchmark.
        let mut args = vec![
            "--include-ignored",
            "--skip",
            "filesystems::",
            "--skip",
            "capacity::check_cost_at_scale",
            "--test-threads=2",
        ];
        args.extend(RERUN_SKIP.iter().flat_map(|t| ["--skip", t]));
        if fs != "tmpfs" && fs != "ext4" {
            // The fault matrix injects its failures above the filesystem, but the barriers
            // it fails depend on it: it runs on tmpfs (every barrier of the table) and on
            // the journaled ext4 (one fsync per move), besides the main run; xfs takes the
            // ext4 path and btrfs the tmpfs one. ~100 s saved per filesystem left out.
            args.extend(["--skip", "faults::fault_matrix_reports_the_true_outcome"]);
        }
        let out = Command::new(std::env::current_exe().unwrap())
            .args(&args)
            .env("STEADQ_TEST_DIR", &m.dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let summary = text
            .lines()
            .rev()
            .find(|l| l.starts_with("test result"))
            .unwrap_or("no summary")
            .to_string();
        assert!(
            out.status.success(),
            "suite failed on {fs}:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        crate::common::summary(&format!(
            "filesystem {fs}: whole suite rerun: {summary} ({:.1} s)",
            t.elapsed().as_secs_f64()
        ));
        ran.push(fs.to_string());
        drop(m);
    }
    let _ = std::fs::remove_dir_all(&base);
    eprintln!("filesystems run: {ran:?}");
}

/// The barriers one Strict lifecycle makes, counted by the syscall layer: `[file fsyncs of
/// the enqueue, directory fsyncs of the enqueue, of the claim, of the ack]`, for the
/// `O_TMPFILE` route and then for the named route (`tmp/`).
fn lifecycle_barriers(dir: &Path) -> [[u32; 5]; 2] {
    use steadq::sys::{Call, FaultPlan};
    let mut out = [[0; 5]; 2];
    for (route, named) in [false, true].into_iter().enumerate() {
        let root = dir.join(format!("q-{route}"));
        Queue::create(&root, crate::common::opts(1)).unwrap();
        let plan = FaultPlan::disarmed(vec![]);
        let q = Queue::open_with(
            &root,
            Options {
                faults: Some(plan.clone()),
                force_named_publish: named,
                ..Options::default()
            },
        )
        .unwrap();
        // A first lifecycle learns the publishing route and sets up watches.
        q.enqueue(b"warm").unwrap();
        q.claim().unwrap().unwrap().ack().unwrap();
        plan.reset_counts();
        q.enqueue(b"counted").unwrap();
        out[route][0] = plan.count(Call::Fsync);
        out[route][1] = plan.count(Call::WriteOut);
        out[route][2] = plan.count(Call::FsyncDir);
        plan.reset_counts();
        let l = q.claim().unwrap().unwrap();
        out[route][3] = plan.count(Call::FsyncDir);
        plan.reset_counts();
        l.ack().unwrap();
        out[route][4] = plan.count(Call::FsyncDir);
        assert_eq!(
            crate::common::counts(&q)[4],
            2,
            "acked on {}",
            dir.display()
        );
    }
    out
}

#[test]
fn a_lifecycle_drops_only_the_barriers_the_rig_showed_redundant() {
    // DESIGN.md, Barriers: on xfs and on ext4 with a jbd2 journal (no fast commits) one
    // directory fsync commits the whole journal transaction, in order and flush first, so
    // the enqueue's file fsyncs become one write-out (sync_file_range) before the link, and
    // the named route's fsync of tmp/ and the ack's fsync of its source directory are left
    // out. Everywhere else every barrier of the table stays.
    let Some(base) = own_mounts(
        "a_lifecycle_drops_only_the_barriers_the_rig_showed_redundant",
        "barriers",
    ) else {
        return;
    };
    // [enqueue file fsyncs, enqueue write-outs, enqueue dir fsyncs, claim dir fsyncs,
    //  ack dir fsyncs], for the O_TMPFILE route and the named route
    let all = [[2, 0, 1, 1, 2], [2, 0, 2, 1, 2]];
    let dropped = [[0, 1, 1, 1, 1], [0, 1, 1, 1, 1]];
    // btrfs publishes through tmp/ on both routes (`btrfs_publishes_through_a_named_file`),
    // and leaves a stale name there to recovery: no fsync of tmp/ (`Shared::tmp_unsynced`).
    let named = [[2, 0, 1, 1, 2], [2, 0, 1, 1, 2]];
    for (fs, want) in [
        ("tmpfs", all),
        ("ext4", dropped),
        ("xfs", dropped),
        ("btrfs", named),
    ] {
        let Some(m) = mount_or_skip(fs, &base) else {
            continue;
        };
        assert_eq!(lifecycle_barriers(&m.dir), want, "barriers on {fs}");
    }
    // ext4 with fast commits writes a fast-commit record on fsync: untested by the rig.
    match mount_ext4_with(&base, 64, &["-O", "fast_commit"]) {
        Ok(m) => assert_eq!(
            lifecycle_barriers(&m.dir),
            all,
            "barriers on ext4 fast_commit"
        ),
        Err(e) => eprintln!("SKIP ext4 -O fast_commit: {e}"),
    }
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn init_on_ext4_with_fast_commit_warns() {
    // The block rig found ext4 unable to recover some of its crash states with fast commits
    // (DESIGN.md, "ext4 with fast commits"): `init` says so where it can read the superblock
    // (root), says nothing where it cannot (nobody), and nothing on ext4 with its defaults.
    let Some(base) = own_mounts("init_on_ext4_with_fast_commit_warns", "fcwarn") else {
        return;
    };
    for (what, mkfs, warned) in [
        ("fast_commit", &["-O", "fast_commit"][..], true),
        ("defaults", &[][..], false),
    ] {
        let m = match mount_ext4_with(&base, 64, mkfs) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("SKIP ext4 {what}: {e}");
                continue;
            }
        };
        let q = m.dir.join("q");
        let o = crate::common::steadq(&["init", q.to_str().unwrap()]);
        let err = crate::common::text(&o.stderr);
        assert!(o.status.success(), "ext4 {what}: {err}");
        assert_eq!(
            err.contains("tune2fs -O ^fast_commit"),
            warned,
            "ext4 {what}: {err}"
        );
        // Not under qemu-user, where `su` would start the emulator through binfmt_misc.
        if warned && std::env::var_os("STEADQ_QEMU_USER").is_none() {
            // A user who cannot read the device (not root) cannot tell: the queue is made,
            // without a warning and without an error about the superblock.
            use std::os::unix::fs::PermissionsExt;
            let (sandbox, bin) = crate::common::nobody_sandbox("fcwarn");
            std::fs::set_permissions(&m.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
            let qn = m.dir.join("qn");
            let (code, _, err) =
                crate::common::as_nobody(&format!("{bin} init {}", qn.to_str().unwrap()));
            assert_eq!(code, Some(0), "ext4 {what}, as nobody: {err}");
            assert!(
                !err.contains("fast_commit"),
                "ext4 {what}, as nobody: {err}"
            );
            assert!(qn.join("steadq.queue").is_file(), "{}", qn.display());
            let _ = std::fs::remove_dir_all(&sandbox);
        }
        drop(m);
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Directory fsyncs of a worker's step between two jobs, `[ack then claim_for,
/// ack_and_claim]`, in a queue of one shard.
fn step_barriers(dir: &Path) -> [u32; 2] {
    use steadq::sys::{Call, FaultPlan};
    let root = dir.join("q-step");
    Queue::create(&root, crate::common::opts(1)).unwrap();
    let plan = FaultPlan::disarmed(vec![]);
    let q = Queue::open_with(
        &root,
        Options {
            faults: Some(plan.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    for p in [&b"warm"[..], b"a", b"b", b"c"] {
        q.enqueue(p).unwrap();
        // Ids order by millisecond (then at random): one job per millisecond.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let l = q.claim().unwrap().unwrap();
    let mut out = [0; 2];
    plan.reset_counts();
    l.ack().unwrap();
    let l = q.claim().unwrap().unwrap();
    out[0] = plan.count(Call::FsyncDir);
    plan.reset_counts();
    let next = l.ack_and_claim(std::time::Duration::from_secs(30)).unwrap();
    out[1] = plan.count(Call::FsyncDir);
    let next = next.next.unwrap().expect("a third job");
    assert_eq!(next.payload().unwrap(), b"b");
    assert_eq!(crate::common::counts(&q), [1, 1, 0, 0, 2]);
    out
}

#[test]
fn ack_and_claim_shares_one_barrier_where_the_rig_showed_one_covers_both() {
    // DESIGN.md, Barriers, "Ack and claim next": on xfs and on journaled ext4 the fsync of
    // the claim's directory, made after both renames, covers the ack too (the same fact
    // `claim_batch` and `ack_batch` rest on): one fsync for the step, where ack then claim
    // make two. Elsewhere the ack keeps both of its fsyncs, and the claim in the same
    // directory is covered by the second of them.
    let Some(base) = own_mounts(
        "ack_and_claim_shares_one_barrier_where_the_rig_showed_one_covers_both",
        "step",
    ) else {
        return;
    };
    for (fs, want) in [
        ("tmpfs", [3, 2]),
        ("ext4", [2, 1]),
        ("xfs", [2, 1]),
        ("btrfs", [3, 2]),
    ] {
        let Some(m) = mount_or_skip(fs, &base) else {
            continue;
        };
        assert_eq!(step_barriers(&m.dir), want, "step barriers on {fs}");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// The barriers of one batched lifecycle of 64 jobs over 8 shards: `[enqueue_batch syncfs,
/// enqueue_batch write-outs, enqueue_batch directory fsyncs, claim_batch directory fsyncs,
/// ack_batch directory fsyncs]`, and the number of ready shards the batch landed in.
fn batch_barriers(dir: &Path) -> ([u32; 5], u32) {
    use steadq::sys::{Call, FaultPlan};
    let root = dir.join("q-batch");
    Queue::create(&root, crate::common::opts(8)).unwrap();
    let plan = FaultPlan::disarmed(vec![]);
    let q = Queue::open_with(
        &root,
        Options {
            faults: Some(plan.clone()),
            durability: steadq::Durability::Batched,
            ..Options::default()
        },
    )
    .unwrap();
    q.enqueue(b"warm").unwrap();
    q.claim().unwrap().unwrap().ack().unwrap();
    let payloads: Vec<Vec<u8>> = (0..64).map(|i| format!("job {i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| &p[..]).collect();
    let mut out = [0; 5];
    plan.reset_counts();
    let ids = q.enqueue_batch(&refs).unwrap();
    out[0] = plan.count(Call::Syncfs);
    out[1] = plan.count(Call::WriteOut);
    out[2] = plan.count(Call::FsyncDir);
    let shards = std::fs::read_dir(root.join("ready"))
        .unwrap()
        .filter(|e| {
            let p = e.as_ref().unwrap().path();
            std::fs::read_dir(p).unwrap().next().is_some()
        })
        .count() as u32;
    plan.reset_counts();
    let leases = q
        .claim_batch(64, std::time::Duration::from_secs(60))
        .unwrap();
    out[3] = plan.count(Call::FsyncDir);
    let mut got: Vec<_> = leases.iter().map(|l| l.id()).collect();
    let mut want = ids.clone();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(
        got,
        want,
        "the batch claimed every job of {}",
        dir.display()
    );
    plan.reset_counts();
    assert_eq!(q.ack_batch(leases).unwrap().len(), 64);
    out[4] = plan.count(Call::FsyncDir);
    assert_eq!(
        crate::common::counts(&q)[4],
        65,
        "acked on {}",
        dir.display()
    );
    (out, shards)
}

#[test]
fn a_batch_shares_one_barrier_per_step_where_commits_are_in_order() {
    // DESIGN.md, Barriers (batches): on xfs and journaled ext4 the fsync of the directory of
    // a batch's last rename or link commits every earlier one (and, after every file was
    // written out, their blocks), so each step of a batched lifecycle makes one barrier;
    // elsewhere one per directory touched, and two syncfs for the enqueues.
    let Some(base) = own_mounts(
        "a_batch_shares_one_barrier_per_step_where_commits_are_in_order",
        "batches",
    ) else {
        return;
    };
    for (fs, one) in [
        ("tmpfs", false),
        ("ext4", true),
        ("xfs", true),
        ("btrfs", false),
    ] {
        let Some(m) = mount_or_skip(fs, &base) else {
            continue;
        };
        let (got, k) = batch_barriers(&m.dir);
        assert!(k >= 2, "64 jobs landed in {k} shard(s) on {fs}");
        // 64 write-outs started, then 64 waited for.
        let want = if one {
            [0, 128, 1, 1, 1]
        } else {
            [2, 0, 0, k, 2 * k]
        };
        assert_eq!(got, want, "batch barriers on {fs} ({k} shards)");
    }
    match mount_ext4_with(&base, 64, &["-O", "fast_commit"]) {
        Ok(m) => {
            let (got, k) = batch_barriers(&m.dir);
            assert_eq!(
                got,
                [2, 0, 0, k, 2 * k],
                "batch barriers on ext4 fast_commit"
            );
        }
        Err(e) => eprintln!("SKIP ext4 -O fast_commit: {e}"),
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// tmpfs and ramfs make `fsync` and `syncfs` no-ops (`noop_fsync`, mm/shmem.c), so a handle
/// there issues no barriers under any policy ([`Queue::barriers`]); every disk filesystem
/// keeps them under Strict and Batched; a fault plan keeps them everywhere (the counts
/// above). The job still goes through its whole lifecycle.
#[test]
fn barriers_are_left_out_only_where_fsync_does_nothing() {
    use steadq::Durability;
    let Some(base) = own_mounts(
        "barriers_are_left_out_only_where_fsync_does_nothing",
        "volatile",
    ) else {
        return;
    };
    let mut seen = Vec::new();
    for (fs, disk) in [("tmpfs", false), ("ext4", true), ("btrfs", true)] {
        let Some(m) = mount_or_skip(fs, &base) else {
            continue;
        };
        let root = m.dir.join("q");
        Queue::create(&root, crate::common::opts(2)).unwrap();
        for durability in [Durability::Strict, Durability::Batched, Durability::None] {
            let q = Queue::open_with(
                &root,
                Options {
                    durability,
                    ..Options::default()
                },
            )
            .unwrap();
            let want = disk && durability != Durability::None;
            seen.push((fs, durability, q.barriers()));
            assert_eq!(q.barriers(), want, "{fs} {durability:?}");
            let id = q.enqueue(b"through").unwrap();
            let l = q.claim().unwrap().unwrap();
            assert_eq!((l.id(), l.payload().unwrap()), (id, &b"through"[..]));
            l.ack().unwrap();
        }
        // A fault plan keeps every barrier call, on tmpfs too.
        let q = Queue::open_with(
            &root,
            Options {
                faults: Some(steadq::sys::FaultPlan::new(vec![])),
                ..Options::default()
            },
        )
        .unwrap();
        assert!(q.barriers(), "{fs} with a fault plan");
        assert_eq!(crate::common::counts(&q)[4], 3, "acked on {fs}");
    }
    eprintln!("barriers: {seen:?}");
    let _ = std::fs::remove_dir_all(&base);
}

/// The held directories of a handle share one group-commit barrier (a barrier asked for in
/// one directory may be run as another's fsync) only on ext4 with a jbd2 journal and no fast
/// commits, whose directory fsync commits the running journal transaction (DESIGN.md,
/// Barriers); xfs forces its log only up to the directory's own last change, and btrfs,
/// tmpfs, ext4 without a journal and with fast commits keep a group per directory. On each,
/// eight threads of one handle then run 40 strict lifecycles each, and every job is acked once.
#[test]
fn directories_share_one_barrier_only_where_a_directory_fsync_commits_the_journal() {
    let Some(base) = own_mounts(
        "directories_share_one_barrier_only_where_a_directory_fsync_commits_the_journal",
        "shared",
    ) else {
        return;
    };
    let lifecycles = |dir: &Path| {
        let q = Queue::create(dir.join("q"), Options::default()).unwrap();
        std::thread::scope(|s| {
            for t in 0..8u32 {
                let q = q.clone();
                s.spawn(move || {
                    for i in 0..40u32 {
                        q.enqueue(&[t.to_le_bytes(), i.to_le_bytes()].concat())
                            .unwrap();
                        if let Some(l) = q.claim().unwrap() {
                            l.ack().unwrap();
                        }
                    }
                });
            }
        });
        while let Some(l) = q.claim().unwrap() {
            l.ack().unwrap();
        }
        assert_eq!(
            crate::common::counts(&q),
            [0, 0, 0, 0, 320],
            "{}",
            dir.display()
        );
    };
    for (fs, shared) in [
        ("tmpfs", false),
        ("ext4", true),
        ("xfs", false),
        ("btrfs", false),
    ] {
        let Some(m) = mount_or_skip(fs, &base) else {
            continue;
        };
        assert_eq!(steadq::sys::shared_barriers(&m.dir), shared, "{fs}");
        lifecycles(&m.dir);
    }
    for (what, mkfs) in [
        ("fast_commit", ["-O", "fast_commit"]),
        ("no journal", ["-O", "^has_journal"]),
    ] {
        match mount_ext4_with(&base, 64, &mkfs) {
            Ok(m) => {
                assert!(!steadq::sys::shared_barriers(&m.dir), "ext4 {what}");
                lifecycles(&m.dir);
            }
            Err(e) => eprintln!("SKIP ext4 {what}: {e}"),
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// The `linkat` and `renameat2` calls of one Strict enqueue, one keyed enqueue and one
/// Batched `enqueue_batch` of two jobs on the filesystem at `dir` (after a warm-up enqueue
/// that learns the publishing route): `[[links, renames]; 3]`.
fn publish_calls(dir: &Path) -> [[u32; 2]; 3] {
    use steadq::sys::{Call, FaultPlan};
    let mut out = [[0; 2]; 3];
    for (i, durability) in [Durability::Strict, Durability::Batched]
        .into_iter()
        .enumerate()
    {
        let root = dir.join(format!("q-publish-{i}"));
        Queue::create(&root, crate::common::opts(1)).unwrap();
        let plan = FaultPlan::disarmed(vec![]);
        let o = Options {
            faults: Some(plan.clone()),
            durability,
            ..Options::default()
        };
        let q = Queue::open_with(&root, o).unwrap();
        q.enqueue(b"warm").unwrap();
        let mut count = |slot: usize, f: &dyn Fn()| {
            plan.reset_counts();
            f();
            out[slot] = [plan.count(Call::Link), plan.count(Call::Rename)];
        };
        if durability == Durability::Strict {
            count(0, &|| {
                q.enqueue(b"one").unwrap();
            });
            let key = steadq::EnqueueOptions {
                key: steadq::Key::new("publish-calls"),
                ..Default::default()
            };
            count(1, &|| {
                q.enqueue_with(b"keyed", &key).unwrap();
            });
        } else {
            count(2, &|| {
                q.enqueue_batch(&[b"a", b"b"]).unwrap();
            });
        }
        assert_eq!(
            crate::common::counts(&q)[0],
            3,
            "ready on {}",
            dir.display()
        );
    }
    out
}

#[test]
fn btrfs_publishes_through_a_named_file() {
    // DESIGN.md, What the crash lab found: on btrfs (Debian 6.1 kernel) another thread's
    // directory fsync between an `O_TMPFILE`'s `linkat` and its second fsync left a job file
    // shorter than its header in ready/ after a crash (block rig, 3 threads: 2 of 1,240
    // crash states). There every job file and key entry is written under a name in tmp/,
    // fsynced, and renamed into place; elsewhere `O_TMPFILE` and `linkat` stay.
    let Some(base) = own_mounts("btrfs_publishes_through_a_named_file", "publish") else {
        return;
    };
    // [[links, renames] of an enqueue, of a keyed enqueue (key entry, then job), of a
    //  batch of two]
    let unnamed = [[1, 0], [2, 0], [2, 0]];
    let named = [[0, 1], [0, 2], [0, 2]];
    for (fs, want) in [("ext4", unnamed), ("xfs", unnamed), ("btrfs", named)] {
        let Some(m) = mount_or_skip(fs, &base) else {
            continue;
        };
        assert_eq!(publish_calls(&m.dir), want, "publishing calls on {fs}");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// The scratch directory of a test that makes its own mounts, or `None` (said why) when it
/// cannot: inside a per-filesystem run, or not root.
fn own_mounts(test: &str, tag: &str) -> Option<std::path::PathBuf> {
    if std::env::var_os("STEADQ_TEST_DIR").is_some() {
        return None; // inside a per-filesystem run: this test makes its own mounts
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP {test}: needs root");
        return None;
    }
    let base = std::env::temp_dir().join(format!("steadq-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    Some(base)
}

/// `fs` mounted under `base`, or `None` (said why) where it cannot be and no filesystem is
/// required (`STEADQ_REQUIRE_FS` unset).
fn mount_or_skip(fs: &str, base: &Path) -> Option<Mount> {
    match mount(fs, base) {
        Ok(m) => Some(m),
        Err(e) => {
            assert!(
                std::env::var_os("STEADQ_REQUIRE_FS").is_none(),
                "cannot mount {fs}: {e}"
            );
            eprintln!("SKIP {fs}: {e}");
            None
        }
    }
}

/// On btrfs every enqueue now writes its job under a name in tmp/ first. `recover` removes
/// a temp file only when the pid in its name is gone, so a producer in another pid
/// namespace (a container sharing the queue directory) killed mid-enqueue leaves its whole
/// payload in tmp/ for good: its pid there (1 here) is a live process outside (breaker
/// finding; with `O_TMPFILE` the kernel freed such a file with its last descriptor). Now a
/// writer holds an `flock` on its temp file, and a file no one holds that is over a second
/// old is removed whatever its pid.
#[test]
fn a_temp_file_of_a_producer_killed_in_another_pid_namespace_is_removed() {
    let Some(base) = own_mounts(
        "a_temp_file_of_a_producer_killed_in_another_pid_namespace_is_removed",
        "tmp-pidns",
    ) else {
        return;
    };
    let Some(m) = mount_or_skip("btrfs", &base) else {
        return;
    };
    let dir = m.dir.join("q");
    let q = Queue::create(&dir, Options::default()).unwrap();
    let mut p = Command::new("unshare")
        .args(["--pid", "--fork"])
        .arg(env!("CARGO_BIN_EXE_steadq"))
        .arg("enqueue")
        .arg(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A payload past one 64 KiB chunk, its stream kept open: the enqueue waits mid-write.
    let mut input = p.stdin.take().unwrap();
    std::io::Write::write_all(&mut input, &[7u8; 1 << 20]).unwrap();
    let tmp = dir.join("tmp");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_dir(&tmp).unwrap().count() == 0 {
        assert!(std::time::Instant::now() < deadline, "no temp file");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SIGKILL the enqueue (pid 1 of its namespace), then let unshare go.
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", p.id())).unwrap();
    for c in children.split_whitespace() {
        sh("kill", &["-9", c]).unwrap();
    }
    drop(input);
    let _ = p.wait();
    // Past the second a writer may take to lock its new file (recover.rs, TEMP_UNHELD_NS).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    q.recover().into_result().unwrap();
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    drop(q);
    drop(m);
    let _ = std::fs::remove_dir_all(&base);
    assert!(left.is_empty(), "left in tmp/ for good: {left:?}");
}
