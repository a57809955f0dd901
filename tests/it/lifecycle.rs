//! The whole job lifecycle on real directories.

use crate::common::*;
use std::time::Duration;
use steadq::*;

const SEC: i64 = 1_000_000_000;

#[test]
fn enqueue_claim_ack_leaves_one_receipt() {
    let d = TempDir::new("basic");
    let q = Queue::create(d.path(), opts(4)).unwrap();
    let id = q.enqueue(b"hello").unwrap();
    assert_eq!(counts(&q), [1, 0, 0, 0, 0]);
    let l = q.claim().unwrap().unwrap();
    assert_eq!(
        (l.id(), l.payload().unwrap(), l.attempt(), l.max_attempts()),
        (id, &b"hello"[..], 1, 5)
    );
    assert_eq!(l.name().generation, 1);
    assert_eq!(counts(&q), [0, 1, 0, 0, 0]);
    let r = l.ack().unwrap();
    assert_eq!(r.id, id);
    assert!(
        r.name.ends_with(".rct") && r.name.contains(".g0000000000000002.a00000001."),
        "{}",
        r.name
    );
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
    assert!(q.claim().unwrap().is_none());
    let rcpt = files(d.path(), "receipts");
    assert_eq!(rcpt.len(), 1);
    assert!(rcpt[0].ends_with(&r.name));
    // The receipt is the verified job file itself.
    let (h, p) = q.read_job(&q.find(id).unwrap()).unwrap();
    assert_eq!((p.as_slice(), h.payload_len), (&b"hello"[..], 5));
    assert!(files(d.path(), "tmp").is_empty(), "no temp files left");
}

#[test]
fn oldest_job_first_within_a_shard() {
    let d = TempDir::new("order");
    let q = Queue::create(d.path(), fast(1)).unwrap();
    let ids: Vec<JobId> = (0..20)
        .map(|i| q.enqueue(format!("job {i}").as_bytes()).unwrap())
        .collect();
    let mut got = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        got.push(l.id());
        l.ack().unwrap();
    }
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(got, sorted);
}

#[test]
fn delayed_job_waits_until_due() {
    let d = TempDir::new("delay");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let id = q
        .enqueue_with(
            b"later",
            &EnqueueOptions {
                delay: Some(Duration::from_secs(10)),
                ..Default::default()
            },
        )
        .unwrap()
        .id();
    assert_eq!(counts(&q), [0, 0, 1, 0, 0]);
    assert!(q.claim().unwrap().is_none());
    assert_eq!(q.recover().into_result().unwrap().due, 0);
    q.clock().shift_wall(11 * SEC);
    q.clock().shift_boot(11 * SEC);
    let r = q.recover().into_result().unwrap();
    assert_eq!(r.due, 1);
    let l = q.claim().unwrap().unwrap();
    assert_eq!((l.id(), l.name().generation, l.attempt()), (id, 2, 1));
    l.ack().unwrap();
}

#[test]
fn nack_backs_off_then_dead_letters_after_max_attempts() {
    let d = TempDir::new("nack");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let id = q
        .enqueue_with(
            b"flaky",
            &EnqueueOptions {
                max_attempts: Some(2),
                ..Default::default()
            },
        )
        .unwrap()
        .id();
    let l = q.claim().unwrap().unwrap();
    let Nacked::Delayed(nb) = l.nack(Duration::from_secs(5)).unwrap() else {
        panic!("expected delayed")
    };
    let nb_ns = nb.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    assert!(nb_ns > q.clock().wall_ns());
    assert_eq!(counts(&q), [0, 0, 1, 0, 0]);
    q.clock().shift_wall(6 * SEC);
    q.clock().shift_boot(6 * SEC);
    assert_eq!(q.recover().into_result().unwrap().due, 1);
    let l = q.claim().unwrap().unwrap();
    assert_eq!(l.attempt(), 2);
    assert_eq!(l.nack(Duration::from_secs(5)).unwrap(), Nacked::Dead);
    assert_eq!(counts(&q), [0, 0, 0, 1, 0]);
    let dead = q.list(Some(State::Dead)).unwrap();
    assert_eq!(dead[0].name.id, id);
    assert_eq!(
        dead[0].name.kind,
        Kind::Dead {
            reason: Reason::EXHAUSTED
        }
    );
    assert_eq!((dead[0].name.attempt, dead[0].name.generation), (2, 5));
    assert!(q.claim().unwrap().is_none());
    // Requeue resets attempts.
    assert_eq!(q.requeue_dead(Some(id)).into_result().unwrap().requeued, 1);
    let l = q.claim().unwrap().unwrap();
    assert_eq!(l.attempt(), 1);
    l.fail(Reason::new("badinput").unwrap()).unwrap();
    let dead = q.list(Some(State::Dead)).unwrap();
    assert_eq!(
        dead[0].name.kind,
        Kind::Dead {
            reason: Reason::new("badinput").unwrap()
        }
    );
    assert_eq!(q.purge_dead().unwrap(), 1);
    assert_eq!(counts(&q), [0, 0, 0, 0, 0]);
}

#[test]
fn claim_dead_letters_a_ready_job_with_no_attempt_left() {
    let d = TempDir::new("exhausted");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue_with(
        b"x",
        &EnqueueOptions {
            max_attempts: Some(1),
            ..Default::default()
        },
    )
    .unwrap()
    .id();
    let l = q.claim().unwrap().unwrap();
    drop(l); // released to ready with attempt 1 of 1
    assert_eq!(counts(&q), [1, 0, 0, 0, 0]);
    assert!(q.claim().unwrap().is_none());
    assert_eq!(counts(&q), [0, 0, 0, 1, 0]);
}

#[test]
fn expired_lease_is_recovered_and_redelivered() {
    let d = TempDir::new("expire");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let id = q.enqueue(b"work").unwrap();
    let h = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(2)),
            ..Default::default()
        })
        .unwrap()
        .unwrap()
        .into_handle();
    assert_eq!(
        q.recover().into_result().unwrap().expired,
        0,
        "a live lease is left alone"
    );
    q.clock().shift_boot(3 * SEC);
    let r = q.recover().into_result().unwrap();
    assert_eq!((r.expired, r.live_leases), (1, 0));
    assert_eq!(
        q.recover().into_result().unwrap().moved(),
        0,
        "recovery is idempotent"
    );
    let l = q.claim().unwrap().unwrap();
    assert_eq!((l.id(), l.attempt(), l.name().generation), (id, 2, 3));
    l.ack().unwrap();
    assert!(q.lease_from_handle(&h).unwrap_err().is_lease_lost());
}

#[test]
fn lease_from_another_boot_is_recovered_at_once() {
    let d = TempDir::new("boot");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"work").unwrap();
    let h = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(3600)),
            ..Default::default()
        })
        .unwrap()
        .unwrap()
        .into_handle();
    // Rewrite the lease as if an earlier boot had taken it (same deadlines, other boot id).
    let name = JobName::parse(&h, q.id()).unwrap();
    let Kind::Leased(mut f) = name.kind else {
        panic!()
    };
    f.boot_id ^= 1;
    let other = JobName {
        kind: Kind::Leased(f),
        ..name
    };
    let dir = d.path().join("ready/00");
    std::fs::rename(dir.join(&h), dir.join(other.format(q.id()).as_str())).unwrap();
    let r = q.recover().into_result().unwrap();
    assert_eq!(r.expired, 1);
    assert_eq!(q.claim().unwrap().unwrap().attempt(), 2);
}

#[test]
fn stale_lease_cannot_ack_renew_or_nack() {
    let d = TempDir::new("stale");
    let q1 = Queue::create(d.path(), opts(2)).unwrap();
    let q2 = Queue::open(d.path()).unwrap();
    q1.enqueue(b"once").unwrap();
    let mut stale = q1
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    q2.clock().shift_boot(2 * SEC);
    assert_eq!(q2.recover().into_result().unwrap().expired, 1);
    let fresh = q2.claim().unwrap().unwrap();
    assert_eq!(fresh.attempt(), 2);
    fresh.ack().unwrap();
    let e = stale.renew(Duration::from_secs(30)).unwrap_err();
    assert!(e.is_lease_lost() && e.outcome() == Outcome::NotDone, "{e}");
    assert!(q1
        .lease_from_handle(&stale.handle())
        .unwrap_err()
        .is_lease_lost());
    let e = stale.ack().unwrap_err();
    assert!(e.is_lease_lost(), "{e}");
    assert_eq!(files(d.path(), "receipts").len(), 1, "exactly one receipt");
    assert_eq!(counts(&q1), [0, 0, 0, 0, 1]);
}

#[test]
fn stale_lease_nack_and_fail_change_nothing() {
    let d = TempDir::new("stale2");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"a").unwrap();
    q.enqueue(b"b").unwrap();
    let s1 = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let s2 = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let q2 = Queue::open(d.path()).unwrap();
    q2.clock().shift_boot(2 * SEC);
    assert_eq!(q2.recover().into_result().unwrap().expired, 2);
    let before = files(d.path(), "");
    assert!(s1.nack(Duration::from_secs(1)).unwrap_err().is_lease_lost());
    assert!(s2.fail(Reason::FAILED).unwrap_err().is_lease_lost());
    assert_eq!(files(d.path(), ""), before, "nothing changed");
}

#[test]
fn renew_moves_the_deadline_and_invalidates_the_old_name() {
    let d = TempDir::new("renew");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"long job").unwrap();
    let mut l = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    let old = l.handle();
    let (g, tok) = (l.name().generation, l.token());
    l.renew(Duration::from_secs(100)).unwrap();
    assert_eq!((l.name().generation, l.token()), (g + 1, tok));
    q.clock().shift_boot(5 * SEC);
    assert_eq!(
        q.recover().into_result().unwrap().expired,
        0,
        "renewed lease is live"
    );
    assert!(q.lease_from_handle(&old).unwrap_err().is_lease_lost());
    let via_handle = q.lease_from_handle(&l.into_handle()).unwrap();
    via_handle.ack().unwrap();
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}

#[test]
fn dropping_a_lease_releases_it_at_once() {
    let d = TempDir::new("drop");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"x").unwrap();
    drop(q.claim().unwrap().unwrap());
    let ready = q.list(Some(State::Ready)).unwrap();
    assert_eq!(
        (ready.len(), ready[0].name.attempt, ready[0].name.generation),
        (1, 1, 2)
    );
}

#[test]
fn a_flipped_payload_byte_is_never_handed_out() {
    let d = TempDir::new("flip");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"precious payload").unwrap();
    let good = q.enqueue(b"fine").unwrap();
    let bad = q
        .list(Some(State::Ready))
        .unwrap()
        .into_iter()
        .find(|l| l.name.id != good)
        .unwrap();
    let p = d.path().join(bad.rel_path(q.id()));
    let mut bytes = std::fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x01;
    std::fs::write(&p, bytes).unwrap();
    let l = q.claim().unwrap().unwrap();
    assert_eq!(l.id(), good, "only the good job is handed out");
    l.ack().unwrap();
    assert!(q.claim().unwrap().is_none());
    let dead = q.list(Some(State::Dead)).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].name.id, dead[0].name.kind),
        (
            bad.name.id,
            Kind::Dead {
                reason: Reason::CORRUPT
            }
        )
    );
    let f = q.fsck().unwrap();
    assert!(f.clean(), "{:?}", f.problems);
    assert_eq!(f.dead_corrupt, 1);
}

#[test]
fn a_job_is_verified_once_at_claim_not_again_at_ack() {
    let d = TempDir::new("flip2");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"abcdef").unwrap();
    let l = q.claim().unwrap().unwrap();
    let p = d.path().join("ready/00").join(l.handle());
    let mut bytes = std::fs::read(&p).unwrap();
    let at = 200.min(bytes.len() - 1);
    bytes[at] ^= 0x80;
    std::fs::write(&p, bytes).unwrap();
    // The payload handed out was verified at claim; ack renames without reading again.
    assert_eq!(l.payload().unwrap(), b"abcdef");
    l.ack().unwrap();
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}

#[test]
fn create_is_idempotent_and_concurrent_creators_agree() {
    let d = TempDir::new("create");
    let ids: Vec<u128> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| Queue::create(d.path(), opts(8)).unwrap().id()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
    let again = Queue::create(d.path(), opts(3)).unwrap();
    assert_eq!(
        (again.id(), again.identity().shards),
        (ids[0], 8),
        "an existing queue keeps its shards"
    );
    assert_eq!(
        std::fs::read_dir(d.path().join("ready")).unwrap().count(),
        8
    );
}

#[test]
fn open_refuses_what_is_not_a_queue_and_newer_formats() {
    let d = TempDir::new("open");
    std::fs::create_dir_all(d.path()).unwrap();
    let e = Queue::open(d.path()).unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotAQueue);
    assert!(
        e.to_string().contains(&d.path().display().to_string()),
        "{e}"
    );
    let e = Queue::open(d.path().join("missing")).unwrap_err();
    assert_eq!(e.errno(), Some(sys::Errno::NOENT.into()));
    assert!(e.to_string().contains("missing"), "{e}");
    let q = Queue::create(d.path().join("q"), opts(1)).unwrap();
    drop(q);
    let idf = d.path().join("q").join(IDENTITY_FILE);
    let text = std::fs::read_to_string(&idf)
        .unwrap()
        .replace("version=3", "version=9");
    std::fs::write(&idf, text).unwrap();
    let e = Queue::open(d.path().join("q")).unwrap_err();
    assert_eq!(
        e.kind(),
        &ErrorKind::UnsupportedVersion {
            found: 9,
            supported: 3
        }
    );
    assert!(e.to_string().contains("steadq.queue"), "{e}");
    // A half-created queue (a shard directory missing) is reported, and create completes it.
    let q2 = d.path().join("q2");
    drop(Queue::create(&q2, opts(2)).unwrap());
    std::fs::remove_dir(q2.join("ready/01")).unwrap();
    assert_eq!(Queue::open(&q2).unwrap_err().kind(), &ErrorKind::Incomplete);
    Queue::create(&q2, opts(2)).unwrap();
    Queue::open(&q2).unwrap();
}

#[test]
fn unsupported_filesystem_is_named() {
    // A filesystem that answers EINVAL to RENAME_NOREPLACE (NFS, old FUSE), simulated by
    // failing the open-time probe.
    let d = TempDir::new("nfs");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    let plan = sys::FaultPlan::new(vec![sys::Fault {
        call: sys::Call::Rename,
        nth: 1,
        action: sys::FaultAction::Fail(sys::Errno::INVAL),
    }]);
    let e = Queue::open_with(
        d.path(),
        Options {
            faults: Some(plan),
            ..Options::default()
        },
    )
    .unwrap_err();
    let ErrorKind::UnsupportedFilesystem { fs_type } = e.kind() else {
        panic!("{e}")
    };
    assert!(!fs_type.is_empty());
    assert!(
        e.to_string().contains(&d.path().display().to_string())
            && e.to_string().contains("renameat2"),
        "{e}"
    );
    assert!(files(d.path(), "tmp").is_empty(), "probe file removed");
}

#[test]
fn named_temp_file_fallback_publishes_and_cleans_up() {
    let d = TempDir::new("named");
    let q = Queue::create(
        d.path(),
        Options {
            shards: 2,
            force_named_publish: true,
            ..Options::default()
        },
    )
    .unwrap();
    let id = q.enqueue(b"via tmp").unwrap();
    assert_eq!(q.sys().publish_mode(), Some(sys::Publish::Named));
    assert!(files(d.path(), "tmp").is_empty());
    let l = q.claim().unwrap().unwrap();
    assert_eq!((l.id(), l.payload().unwrap()), (id, &b"via tmp"[..]));
    l.ack().unwrap();
}

#[test]
fn tmpfile_route_is_used_where_it_works() {
    let d = TempDir::new("tmpfile");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"x").unwrap();
    // Everywhere but btrfs, which publishes through tmp/ (DESIGN.md, "btrfs: every job
    // file is published through a named file"; filesystems::btrfs_publishes_through_a_named_file).
    if sys::publishes_named(d.path()) {
        assert_eq!(q.sys().publish_mode(), Some(sys::Publish::Named));
        return;
    }
    assert!(matches!(
        q.sys().publish_mode(),
        Some(sys::Publish::EmptyPath | sys::Publish::ProcFd)
    ));
}

#[test]
fn abandoned_temp_files_are_removed_live_ones_kept() {
    let d = TempDir::new("tmpclean");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let boot = q.clock().boot_id();
    let tmp = d.path().join("tmp");
    let other_boot = tmp.join(format!(
        "{:032x}.{:08x}.{:032x}.tmp",
        boot ^ 1,
        std::process::id(),
        7
    ));
    let dead_pid = tmp.join(format!("{boot:032x}.{:08x}.{:032x}.tmp", 0x7fff_fff0u32, 8));
    let live = tmp.join(format!(
        "{boot:032x}.{:08x}.{:032x}.tmp",
        std::process::id(),
        9
    ));
    for p in [&other_boot, &dead_pid, &live] {
        std::fs::write(p, b"partial").unwrap();
    }
    assert_eq!(q.recover().into_result().unwrap().temp_removed, 2);
    assert!(live.exists() && !other_boot.exists() && !dead_pid.exists());
    // A live pid is not enough once the file is over a second old: its writer holds an
    // `flock` on it (a pid may be another process's, in another pid namespace or reused).
    let held = tmp.join(format!(
        "{boot:032x}.{:08x}.{:032x}.tmp",
        std::process::id(),
        10
    ));
    std::fs::write(&held, b"partial").unwrap();
    let lock = std::fs::File::open(&held).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        q.recover().into_result().unwrap().temp_removed,
        1,
        "the unheld one goes"
    );
    assert!(!live.exists() && held.exists());
    drop(lock);
    // A child another test forks before its exec shares the lock until the exec (flock
    // belongs to the open file description): slow under qemu, so ask again for a while.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while q.recover().into_result().unwrap().temp_removed == 0 {
        assert!(std::time::Instant::now() < deadline, "still held: {held:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!held.exists());
}

#[test]
fn payload_limit_is_enforced_with_a_clear_error() {
    let d = TempDir::new("limit");
    let q = Queue::create(
        d.path(),
        Options {
            max_payload: 10,
            shards: 1,
            ..Options::default()
        },
    )
    .unwrap();
    q.enqueue(&[7u8; 10]).unwrap();
    let e = q.enqueue(&[7u8; 11]).unwrap_err();
    assert_eq!(
        (e.kind(), e.outcome()),
        (
            &ErrorKind::PayloadTooLarge { len: 11, limit: 10 },
            Outcome::NotDone
        )
    );
    assert!(e.to_string().contains("11 bytes"), "{e}");
    assert_eq!(counts(&q), [1, 0, 0, 0, 0]);
}

#[test]
fn batched_enqueue_shares_barriers() {
    let d = TempDir::new("batch");
    let plan = sys::FaultPlan::new(vec![]);
    let o = Options {
        shards: 2,
        durability: Durability::Batched,
        faults: Some(plan.clone()),
        ..Options::default()
    };
    let q = Queue::create(d.path(), o).unwrap();
    plan.reset_counts();
    let payloads: Vec<Vec<u8>> = (0..50).map(|i| format!("batch {i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    let ids = q.enqueue_batch(&refs).unwrap();
    assert_eq!(ids.len(), 50);
    // Two syncfs for the whole batch (contents before the links, names after), nothing else;
    // on xfs and journaled ext4 every file is written out (started, then waited for) and
    // one fsync of the last link's directory commits it all in order (DESIGN.md, Barriers).
    let c = |k| plan.count(k);
    let one = sys::one_fsync_per_move(d.path());
    assert_eq!(
        (
            c(sys::Call::Syncfs),
            c(sys::Call::WriteOut),
            c(sys::Call::Fsync),
            c(sys::Call::FsyncDir)
        ),
        if one { (0, 100, 0, 1) } else { (2, 0, 0, 0) }
    );
    assert_eq!(counts(&q), [50, 0, 0, 0, 0]);
    // Strict issues per-job barriers for the same batch.
    let d2 = TempDir::new("batch2");
    let plan2 = sys::FaultPlan::new(vec![]);
    let q2 = Queue::create(
        d2.path(),
        Options {
            shards: 2,
            faults: Some(plan2.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    plan2.reset_counts();
    q2.enqueue_batch(&refs).unwrap();
    // Each job's file fsynced before and after its link, then its directory; on xfs and
    // journaled ext4 the file is only written out (sync_file_range) before its link, and the
    // directory's fsync commits both (DESIGN.md, Barriers).
    let (file, out) = if sys::one_fsync_per_move(d2.path()) {
        (0, 50)
    } else {
        (100, 0)
    };
    assert_eq!(
        (
            plan2.count(sys::Call::Fsync),
            plan2.count(sys::Call::WriteOut),
            plan2.count(sys::Call::FsyncDir)
        ),
        (file, out, 50),
        "strict: each job's file before (and after) its link, then its directory"
    );
}

/// On f2fs the fsync of a directory is a checkpoint, which writes every node and directory
/// block of the filesystem (`ops/group.rs`, `Reach::Journal`; DESIGN.md, Barriers): a
/// strict lifecycle there writes the job file out before its link instead of fsyncing it,
/// and makes one directory fsync a step, a move between directories included. The magic is
/// pretended here (the host may have no f2fs); the power-cut rig and the block rig run the
/// real one.
#[test]
fn on_f2fs_each_step_is_one_directory_fsync() {
    use steadq::sys::Call;
    let d = TempDir::new("f2fs-barriers");
    let plan = sys::FaultPlan::new(vec![]);
    plan.pretend_fs_magic(0xF2F5_2010);
    let q = Queue::create(
        d.path(),
        Options {
            shards: 2,
            faults: Some(plan.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    let calls = |step: &mut dyn FnMut()| {
        plan.reset_counts();
        step();
        [Call::Fsync, Call::WriteOut, Call::FsyncDir].map(|c| plan.count(c))
    };
    assert_eq!(
        calls(&mut || {
            q.enqueue(b"one").unwrap();
        }),
        [0, 1, 1]
    );
    let mut lease = None;
    assert_eq!(calls(&mut || lease = q.claim().unwrap()), [0, 0, 1]);
    let mut lease = lease;
    assert_eq!(
        calls(&mut || drop(lease.take().expect("the job").ack().unwrap())),
        [0, 0, 1]
    );
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}

#[test]
fn claim_wait_wakes_on_enqueue_and_times_out_when_empty() {
    let d = TempDir::new("wait");
    let q = Queue::create(d.path(), opts(4)).unwrap();
    assert!(q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(5)),
            wait: Some(Duration::from_millis(200)),
            ..Default::default()
        })
        .unwrap()
        .is_none());
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            Queue::open(d.path()).unwrap().enqueue(b"wake up").unwrap();
        });
        let l = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(5)),
                wait: Some(Duration::from_secs(20)),
                ..Default::default()
            })
            .unwrap()
            .expect("woken by the enqueue");
        assert_eq!(l.payload().unwrap(), b"wake up");
        l.ack().unwrap();
    });
}

#[test]
fn claim_wait_picks_up_a_delayed_job_when_due() {
    let d = TempDir::new("waitdelay");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue_with(
        b"soon",
        &EnqueueOptions {
            delay: Some(Duration::from_millis(400)),
            ..Default::default()
        },
    )
    .unwrap()
    .id();
    let l = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(5)),
            wait: Some(Duration::from_secs(20)),
            ..Default::default()
        })
        .unwrap()
        .expect("due after 400 ms");
    assert_eq!(l.payload().unwrap(), b"soon");
}

#[test]
fn compact_keeps_evidence_and_removes_old_receipts() {
    let d = TempDir::new("compact");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let a = q.enqueue(b"a").unwrap();
    q.claim().unwrap().unwrap().ack().unwrap();
    q.enqueue(b"b").unwrap();
    let l = q.claim().unwrap().unwrap();
    l.ack().unwrap();
    assert_eq!(
        q.compact(Duration::from_secs(3600)).unwrap().removed,
        0,
        "receipts are new"
    );
    q.clock().shift_wall(7200 * SEC);
    assert_eq!(q.compact(Duration::from_secs(3600)).unwrap().removed, 2);
    assert_eq!(counts(&q), [0, 0, 0, 0, 0]);
    let ev = std::fs::read_to_string(d.path().join("evidence.log")).unwrap();
    let lines: Vec<&str> = ev.lines().collect();
    assert_eq!(lines.len(), 2);
    let line_a = lines.iter().find(|l| l.contains(&a.to_string())).unwrap();
    let f: Vec<&str> = line_a.split(' ').collect();
    assert_eq!(f[0], "v1");
    // payload digest of "a"
    assert_eq!(
        f[3],
        "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
    );
    assert!(q.fsck().unwrap().clean());
}

#[test]
fn status_counts_and_ages() {
    let d = TempDir::new("status");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    for i in 0..3 {
        q.enqueue(format!("{i}").as_bytes()).unwrap();
    }
    let h = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap()
        .unwrap()
        .into_handle();
    q.clock().shift_boot(2 * SEC);
    let s = q.status().unwrap();
    assert_eq!(
        (
            s.ready,
            s.leased,
            s.expired_leases,
            s.delayed,
            s.dead,
            s.acked
        ),
        (2, 1, 1, 0, 0, 0)
    );
    assert_eq!(s.bytes.ready, 2 * (128 + 1));
    assert!(s.oldest_ready_age.is_some());
    assert!(!h.is_empty());
}

#[test]
fn unlimited_payload_limit_does_not_overflow() {
    // Regression: max_payload + header length overflowed (panic in debug, a valid job
    // dead-lettered as corrupt in release).
    let d = TempDir::new("nolimit");
    let q = Queue::create(
        d.path(),
        Options {
            max_payload: u64::MAX,
            shards: 1,
            ..Options::default()
        },
    )
    .unwrap();
    q.enqueue(b"no limit").unwrap();
    let l = q.claim().unwrap().unwrap();
    assert_eq!(l.payload().unwrap(), b"no limit");
    l.ack().unwrap();
}

#[test]
fn a_job_larger_than_the_workers_limit_is_dead_lettered_as_toolarge_not_corrupt() {
    let d = TempDir::new("toolarge");
    let producer = Queue::create(
        d.path(),
        Options {
            max_payload: 1 << 20,
            shards: 1,
            ..Options::default()
        },
    )
    .unwrap();
    let big = producer.enqueue(&vec![9u8; 5000]).unwrap();
    let small = producer.enqueue(b"small").unwrap();
    let worker = Queue::open_with(
        d.path(),
        Options {
            max_payload: 1000,
            ..Options::default()
        },
    )
    .unwrap();
    let mut got = Vec::new();
    while let Some(l) = worker.claim().unwrap() {
        got.push(l.id());
        l.ack().unwrap();
    }
    assert_eq!(got, vec![small], "only the small job is handed out");
    let dead = worker.list(Some(State::Dead)).unwrap();
    assert_eq!((dead.len(), dead[0].name.id), (1, big));
    assert_eq!(
        dead[0].name.kind,
        Kind::Dead {
            reason: Reason::TOO_LARGE
        }
    );
    // It is intact: a worker with a higher limit can requeue and run it.
    assert!(producer.fsck().unwrap().clean());
    producer.requeue_dead(Some(big)).into_result().unwrap();
    let l = producer.claim().unwrap().unwrap();
    assert_eq!(l.payload().unwrap().len(), 5000);
}

#[test]
fn stray_entries_named_like_buckets_or_temp_files_do_not_stop_recovery() {
    let d = TempDir::new("stray");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue_with(
        b"later",
        &EnqueueOptions {
            delay: Some(Duration::from_secs(1)),
            ..Default::default()
        },
    )
    .unwrap()
    .id();
    std::fs::write(d.path().join("delayed/0000000000000001"), b"not a bucket").unwrap();
    let boot = q.clock().boot_id();
    std::fs::create_dir(
        d.path()
            .join(format!("tmp/{:032x}.{:08x}.{:032x}.tmp", boot ^ 1, 1, 2)),
    )
    .unwrap();
    q.clock().shift_wall(5 * SEC);
    q.clock().shift_boot(5 * SEC);
    let r = q.recover().into_result().unwrap();
    assert_eq!((r.due, r.foreign), (1, 2));
    let f = q.fsck().unwrap();
    assert_eq!(f.problems.len(), 2, "{:?}", f.problems);
    assert!(q
        .fsck_quarantine()
        .unwrap()
        .problems
        .iter()
        .all(|p| p.quarantined));
    assert!(q.fsck().unwrap().clean());
}

#[test]
fn a_reader_without_write_access_can_still_look() {
    let d = TempDir::new("ro");
    drop(Queue::create(d.path(), opts(1)).unwrap());
    // Learn which open(2) is the rename probe's, then refuse exactly that one with EACCES.
    let count = sys::FaultPlan::new(vec![]);
    drop(
        Queue::open_with(
            d.path(),
            Options {
                faults: Some(count.clone()),
                ..Options::default()
            },
        )
        .unwrap(),
    );
    let trace = count.trace();
    let first_rename = trace.iter().position(|c| *c == sys::Call::Rename).unwrap();
    let nth = trace[..first_rename]
        .iter()
        .filter(|c| **c == sys::Call::Open)
        .count() as u32;
    let plan = sys::FaultPlan::new(vec![sys::Fault {
        call: sys::Call::Open,
        nth,
        action: sys::FaultAction::Fail(sys::Errno::ACCESS),
    }]);
    let q = Queue::open_with(
        d.path(),
        Options {
            faults: Some(plan.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    assert!(plan.fired());
    assert_eq!(q.status().unwrap().ready, 0);
}

#[test]
fn out_of_range_options_are_refused_and_change_nothing() {
    let d = TempDir::new("validate");
    let bad = |o: Options, what: &str| {
        let e = Queue::create(d.path(), o).map(|_| ()).unwrap_err();
        assert_eq!(e.outcome(), Outcome::NotDone);
        assert!(e.to_string().contains(what), "{e} lacks {what}");
        assert!(!d.path().exists(), "a refused create made the directory");
    };
    bad(
        Options {
            shards: 0,
            ..opts(4)
        },
        "shards",
    );
    bad(
        Options {
            max_attempts: 0,
            ..opts(4)
        },
        "max attempts",
    );
    bad(
        Options {
            delayed_bucket_ns: 0,
            ..opts(4)
        },
        "bucket",
    );
    bad(
        Options {
            lease: MAX_LEASE + Duration::from_secs(1),
            ..opts(4)
        },
        "7 days",
    );
    bad(
        Options {
            lease: Duration::ZERO,
            ..opts(4)
        },
        "longer than zero",
    );
    let q = Queue::create(d.path(), opts(4)).unwrap();
    let e = Queue::open_with(
        d.path(),
        Options {
            max_attempts: 0,
            ..opts(4)
        },
    )
    .map(|_| ())
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)), "{e}");

    // A claim or renew past the 7-day cap is refused, and the job stays where it was.
    q.enqueue(b"x").unwrap();
    let e = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(MAX_LEASE * 2),
            ..Default::default()
        })
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)), "{e}");
    assert_eq!(counts(&q), [1, 0, 0, 0, 0]);
    let mut l = q.claim().unwrap().unwrap();
    let before = l.handle();
    let e = l.renew(MAX_LEASE * 2).unwrap_err();
    assert_eq!(e.outcome(), Outcome::NotDone);
    assert_eq!(l.handle(), before, "a refused renew keeps the lease's name");

    // A delay past 2262 is refused: enqueue adds nothing, nack leaves the lease leased.
    let far = Duration::from_secs(300 * 365 * 86_400);
    let e = q
        .enqueue_with(
            b"y",
            &EnqueueOptions {
                delay: Some(far),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("2262"), "{e}");
    assert_eq!(counts(&q), [0, 1, 0, 0, 0]);
    let e = l.nack(far).unwrap_err();
    assert_eq!(e.outcome(), Outcome::NotDone);
    assert!(e.to_string().contains("2262"), "{e}");
    assert_eq!(
        counts(&q),
        [0, 1, 0, 0, 0],
        "the refused nack neither moved nor released the job"
    );
}

#[test]
fn job_id_debug_and_display_agree() {
    let id = JobId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
    assert_eq!(id.to_string(), "0123456789abcdef0011223344556677");
    assert_eq!(format!("{id:?}"), "JobId(0123456789abcdef0011223344556677)");
}

/// `ack_batch` renames each lease through the lease's own queue but made the batch's
/// barriers (and applied the receipt policy) on the directories of the queue it was called
/// on: a lease of another queue came back `Ok` with its receipt never synced (its queue's
/// plan counted no directory fsync). It is refused now, not done, before any rename.
#[test]
fn ack_batch_refuses_a_lease_of_another_queue() {
    let (da, db) = (TempDir::new("ackb-a"), TempDir::new("ackb-b"));
    let a = Queue::create(da.path(), opts(2)).unwrap();
    let plan = sys::FaultPlan::new(vec![]);
    let b = Queue::create(
        db.path(),
        Options {
            faults: Some(plan.clone()),
            ..opts(2)
        },
    )
    .unwrap();
    let id = b.enqueue(b"b's job").unwrap();
    let own = {
        a.enqueue(b"a's job").unwrap();
        a.claim().unwrap().unwrap()
    };
    let theirs = b.claim().unwrap().unwrap();
    plan.reset_counts();
    let e = a.ack_batch(vec![own, theirs]).unwrap_err();
    assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
    assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("another queue"), "{e}");
    assert_eq!(
        plan.count(sys::Call::Rename),
        1,
        "only the release of b's lease"
    );
    // Nothing acked in either queue; both leases were released as they dropped.
    assert_eq!(counts(&a), [1, 0, 0, 0, 0]);
    assert_eq!(counts(&b), [1, 0, 0, 0, 0]);
    assert_eq!(b.find(id).unwrap().state, State::Ready);
    // The lease's own queue acks it, durably.
    let l = b.claim().unwrap().unwrap();
    plan.reset_counts();
    assert_eq!(b.ack_batch(vec![l]).unwrap().len(), 1);
    if b.barriers() {
        assert!(plan.count(sys::Call::FsyncDir) >= 1);
    }
}

/// A waiting claim on a queue removed under its handle (`rm -r`) waited out its whole
/// timeout and answered `Ok(None)`, "no job", and so on for good: a worker looping on
/// `claim_wait` idled on directories no job reaches. It fails now, not done with
/// `ErrorKind::Replaced`, soon after the removal, and when the queue was removed before
/// the wait began.
#[test]
fn claim_wait_on_a_removed_queue_fails_instead_of_waiting_out_its_timeout() {
    let d = TempDir::new("wait-removed");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::remove_dir_all(d.path()).unwrap();
        });
        let e = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(5)),
                wait: Some(Duration::from_secs(20)),
                ..Default::default()
            })
            .map(|l| l.is_some())
            .unwrap_err();
        assert_eq!(
            (e.outcome(), e.kind()),
            (Outcome::NotDone, &ErrorKind::Replaced)
        );
        assert!(e.to_string().contains("removed or replaced"), "{e}");
    });
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // Removed before the wait began.
    let t = std::time::Instant::now();
    let e = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(5)),
            wait: Some(Duration::from_secs(20)),
            ..Default::default()
        })
        .map(|l| l.is_some())
        .unwrap_err();
    assert_eq!(
        (e.outcome(), e.kind()),
        (Outcome::NotDone, &ErrorKind::Replaced)
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(!q.is_current());
}

/// `claim_wait_until` with its stop flag set swept the queue before it looked at the flag,
/// so it went on handing out ready jobs: a worker looping on it for a graceful shutdown
/// (`while let Some(l) = q.claim_wait_until(.., &stop)?`) took every ready job after the
/// flag was set (1,000 of 1,000 in a trial) instead of stopping. A set flag now answers
/// `Ok(None)` and takes nothing.
#[test]
fn claim_wait_until_takes_no_job_once_stop_is_set() {
    let d = TempDir::new("wait-stop");
    let q = Queue::create(d.path(), fast(2)).unwrap();
    for i in 0..3 {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(true);
    let t = std::time::Instant::now();
    let got = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            wait: Some(Duration::from_secs(20)),
            stop: Some(&stop),
        })
        .unwrap();
    assert!(got.is_none(), "a job was claimed after stop was set");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(counts(&q), [3, 0, 0, 0, 0]);
    // Cleared, it claims as before.
    stop.store(false, std::sync::atomic::Ordering::SeqCst);
    let l = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            wait: Some(Duration::from_secs(5)),
            stop: Some(&stop),
        })
        .unwrap()
        .expect("a ready job");
    l.ack().unwrap();
}

/// An enqueue through a handle whose queue was removed (`rm -r`) failed with "ready/00: open
/// failed: Operation not permitted" (what `O_TMPFILE` answers in a removed directory), took
/// the shard for one this user may not write, and after one try per shard answered "this
/// user may not make job files in any of its 8 shards ...: give the shards the owner and
/// mode of the queue's other directories": a permission hunt for a queue that is gone. It
/// says the queue was removed (`ErrorKind::Replaced`), not done, every time.
#[test]
fn an_enqueue_on_a_removed_queue_says_so_not_permission() {
    let d = TempDir::new("enq-removed");
    let q = Queue::create(d.path(), opts(4)).unwrap();
    q.enqueue(b"before").unwrap();
    std::fs::remove_dir_all(d.path()).unwrap();
    for i in 0..6 {
        let e = q.enqueue(format!("after {i}").as_bytes()).unwrap_err();
        assert_eq!(
            (e.outcome(), e.kind()),
            (Outcome::NotDone, &ErrorKind::Replaced),
            "try {i}: {e}"
        );
        assert_eq!(e.path(), Some(d.path()));
    }
    let e = q.enqueue_reader(&mut &[7u8; 100_000][..], &Default::default());
    assert_eq!(e.unwrap_err().kind(), &ErrorKind::Replaced);
}

/// `Lease::ack_and_claim`: a worker's step acks its job and hands over the next one, oldest
/// first, until none is ready; every ack is a receipt and no job is left leased. A lease
/// of zero is refused before anything moves (not done, the lease handed back).
#[test]
fn ack_and_claim_acks_then_hands_over_the_next_job_in_order() {
    let d = TempDir::new("ack-next");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    for p in [b"one", b"two", b"six"] {
        q.enqueue(p).unwrap();
        // Ids order by millisecond (then at random): one job per millisecond.
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut lease = q.claim().unwrap().unwrap();
    let lease_for = Duration::from_secs(30);
    // Refused first: a zero lease. Nothing acked, the job still leased by this guard.
    lease = match lease.ack_and_claim(Duration::ZERO) {
        Err(SettleError::NotDone { lease, error }) => {
            assert!(
                matches!(error.kind(), ErrorKind::InvalidArgument(_)),
                "{error}"
            );
            *lease
        }
        other => panic!("a zero lease must be refused, not done: {other:?}"),
    };
    assert_eq!(counts(&q), [2, 1, 0, 0, 0]);
    let mut seen = Vec::new();
    let mut receipts = Vec::new();
    loop {
        seen.push(lease.payload().unwrap().to_vec());
        let id = lease.id();
        let step = lease.ack_and_claim(lease_for).unwrap();
        assert_eq!(step.receipt.id, id);
        receipts.push(step.receipt.name.clone());
        match step.next.unwrap() {
            Some(next) => {
                assert_eq!(next.attempt(), 1);
                // Both moves of the step happened: one more receipt, one job leased.
                assert_eq!(counts(&q)[1], 1);
                lease = next;
            }
            None => break,
        }
    }
    assert_eq!(seen, [b"one".to_vec(), b"two".to_vec(), b"six".to_vec()]);
    assert_eq!(receipts.len(), 3);
    assert!(receipts.iter().all(|r| r.ends_with(".rct")), "{receipts:?}");
    assert_eq!(counts(&q), [0, 0, 0, 0, 3]);
}
