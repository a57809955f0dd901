//! Hostile entries planted under valid-looking names: never followed, never processed, never
//! a reason for a worker to stop.

use crate::common::*;
use std::os::unix::fs::symlink;
use steadq::*;

fn valid_name(q: &Queue, payload_id_seed: u128) -> String {
    let id = JobId::new(1_000, payload_id_seed);
    let shard = id.shard(q.identity().shards);
    assert_eq!(shard, 0);
    JobName::new_ready(id, 5).format(q.id()).to_string()
}

/// A fifo at `path` (opening it for reading would block forever).
fn mkfifo(path: &std::path::Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

#[test]
fn symlink_fifo_zero_filled_and_truncated_files_are_never_processed() {
    let d = TempDir::new("hostile");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let shard = d.path().join("ready/00");
    // A real job whose file is truncated under its own name.
    let trunc_id = q.enqueue(b"this payload will be cut short").unwrap();
    let trunc = q.find(trunc_id).unwrap();
    let trunc_path = d.path().join(trunc.rel_path(q.id()));
    let bytes = std::fs::read(&trunc_path).unwrap();
    std::fs::write(&trunc_path, &bytes[..140]).unwrap();
    // A secret outside the queue, reached through a symlink with a valid job name.
    let outside = d.path().with_extension("secret");
    std::fs::write(&outside, &bytes).unwrap();
    let link = shard.join(valid_name(&q, 1));
    symlink(&outside, &link).unwrap();
    // A fifo: opening it for reading would block forever.
    let fifo = shard.join(valid_name(&q, 2));
    mkfifo(&fifo);
    // A zero-filled file with a valid name.
    let zero = shard.join(valid_name(&q, 3));
    std::fs::write(&zero, vec![0u8; 4096]).unwrap();
    // A directory with a valid name.
    let dir = shard.join(valid_name(&q, 4));
    std::fs::create_dir(&dir).unwrap();
    // Plain junk.
    std::fs::write(shard.join("notes.txt"), b"hello").unwrap();
    let good = q.enqueue(b"the real work").unwrap();

    let mut handed_out = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        handed_out.push((l.id(), l.payload().unwrap().to_vec()));
        l.ack().unwrap();
    }
    assert_eq!(handed_out, vec![(good, b"the real work".to_vec())]);
    // Symlink, fifo, directory and junk are untouched; the secret was not read or moved.
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::symlink_metadata(&fifo).is_ok() && dir.is_dir());
    assert_eq!(std::fs::read(&outside).unwrap(), bytes);
    // Zero-filled and truncated files went to dead/ as corrupt.
    let dead = q.list(Some(State::Dead)).unwrap();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead.iter().all(|l| l.name.kind
        == Kind::Dead {
            reason: Reason::CORRUPT
        }));
    assert!(dead.iter().any(|l| l.name.id == trunc_id));
    // fsck reports the foreign entries, and quarantines them on request.
    let rep = q.fsck().unwrap();
    let paths: Vec<&str> = rep.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(rep.problems.len(), 4, "{paths:?}");
    assert!(paths.iter().any(|p| p.ends_with("notes.txt")));
    let rep = q.fsck_quarantine().unwrap();
    assert!(rep.problems.iter().all(|p| p.quarantined));
    assert!(q.fsck().unwrap().clean());
    assert!(std::fs::symlink_metadata(
        d.path()
            .join("quarantine/ready/00")
            .join(link.file_name().unwrap())
    )
    .unwrap()
    .file_type()
    .is_symlink());
    assert_eq!(std::fs::read(&outside).unwrap(), bytes);
    let _ = std::fs::remove_file(&outside);
}

/// A shard directory replaced by a symlink (a member of the queue's group can do it in a
/// `ready/` without the sticky bit) refused every open: every worker, enqueue and `init`
/// failed. It is never followed, and now skipped: the queue opens, enqueues go to the
/// other shard, claims take the other shard's jobs, and fsck names it.
#[test]
fn a_symlinked_shard_directory_is_skipped_never_followed() {
    let d = TempDir::new("symdir");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let kept = q.enqueue(b"before").unwrap();
    let shard = |q: &Queue, id| q.find(id).unwrap().rel_path(q.id());
    let before = shard(&q, kept);
    drop(q);
    let elsewhere = d.path().with_extension("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    // The shard that does not hold the job is replaced.
    let victim = if before.starts_with("ready/00/") {
        "ready/01"
    } else {
        "ready/00"
    };
    std::fs::remove_dir(d.path().join(victim)).unwrap();
    symlink(&elsewhere, d.path().join(victim)).unwrap();
    let q = Queue::open(d.path()).unwrap();
    for i in 0..20 {
        let id = q.enqueue(format!("job {i}").as_bytes()).unwrap();
        assert!(!shard(&q, id).starts_with(victim), "{i}");
    }
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    let mut claimed = 0;
    while let Some(l) = q.claim().unwrap() {
        l.ack().unwrap();
        claimed += 1;
    }
    assert_eq!(claimed, 21);
    let rep = q.fsck().unwrap();
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert_eq!(rep.problems[0].path, victim);
    assert_eq!(rep.problems[0].kind, ProblemKind::NotADirectory);
    // `init` on the existing queue does not fail for it either.
    drop(Queue::create(d.path(), opts(2)).unwrap());
    let _ = std::fs::remove_dir_all(&elsewhere);
}

#[test]
fn a_job_from_another_queue_is_foreign() {
    let d1 = TempDir::new("qa");
    let d2 = TempDir::new("qb");
    let a = Queue::create(d1.path(), opts(1)).unwrap();
    let b = Queue::create(d2.path(), opts(1)).unwrap();
    let id = a.enqueue(b"for a").unwrap();
    let l = a.find(id).unwrap();
    std::fs::copy(
        d1.path().join(l.rel_path(a.id())),
        d2.path().join(l.rel_path(a.id())),
    )
    .unwrap();
    assert!(
        b.claim().unwrap().is_none(),
        "tag made for queue a does not match queue b"
    );
    let rep = b.fsck().unwrap();
    assert_eq!(rep.problems.len(), 1);
    assert_eq!(
        rep.problems[0].kind,
        ProblemKind::Foreign(scan::Foreign::Name(name::NameError::Tag))
    );
}

#[test]
fn fsck_reports_one_job_in_two_states() {
    let d = TempDir::new("dup");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"twice").unwrap();
    let l = q.find(id).unwrap();
    // Plant a hard link of the ready job under a valid dead name in today's bucket.
    let dead = l.name.next(
        Kind::Dead {
            reason: Reason::FAILED,
        },
        false,
    );
    let bucket = name::bucket_name(q.clock().wall_ns(), 86_400_000_000_000);
    std::fs::create_dir_all(d.path().join("dead").join(bucket.as_str())).unwrap();
    std::fs::hard_link(
        d.path().join(l.rel_path(q.id())),
        d.path()
            .join("dead")
            .join(bucket.as_str())
            .join(dead.format(q.id()).as_str()),
    )
    .unwrap();
    let rep = q.fsck().unwrap();
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert!(
        matches!(rep.problems[0].kind, ProblemKind::Duplicate(_)),
        "{}",
        rep.problems[0]
    );
    assert!(rep.problems[0]
        .to_string()
        .contains("the same job id is also at"));
}

/// `fsck --quarantine` makes `quarantine/<dir>` one level at a time and never follows a
/// symlink planted there (it used to `mkdir` the whole path, following `quarantine/ready ->`
/// anywhere, and fsynced nothing it made).
#[test]
fn quarantine_does_not_follow_a_planted_symlink() {
    let d = TempDir::new("quarantine-symlink");
    let outside = d.path().with_extension("outside");
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&outside).unwrap();
    let q = Queue::create(d.path(), opts(1)).unwrap();
    std::fs::write(d.path().join("ready/00/stray.txt"), b"foreign").unwrap();
    std::fs::create_dir(d.path().join("quarantine")).unwrap();
    std::os::unix::fs::symlink(&outside, d.path().join("quarantine/ready")).unwrap();
    let e = q.fsck_quarantine().unwrap_err();
    assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was made or moved through the symlink"
    );
    assert!(
        d.path().join("ready/00/stray.txt").exists(),
        "the stray entry stays put"
    );
    // Without the symlink the same quarantine works and keeps the entry's path.
    std::fs::remove_file(d.path().join("quarantine/ready")).unwrap();
    let r = q.fsck_quarantine().unwrap();
    assert_eq!(r.problems.len(), 1);
    assert!(d.path().join("quarantine/ready/00/stray.txt").exists());
    let _ = std::fs::remove_dir_all(&outside);
}

/// A symlink with a made-up job-like name (its tag does not verify) is reported as a
/// symlink: the file type is checked before the name (it was "name tag mismatch").
#[test]
fn fsck_names_a_symlink_a_symlink_whatever_its_name() {
    let d = TempDir::new("symname");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let mut name = valid_name(&q, 7);
    let k = name.find(".k").unwrap() + 2;
    let flipped = if &name[k..k + 1] == "0" { "1" } else { "0" };
    name.replace_range(k..k + 1, flipped);
    symlink("/etc/passwd", d.path().join("ready/00").join(&name)).unwrap();
    let rep = q.fsck().unwrap();
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert_eq!(rep.problems[0].kind, ProblemKind::NotRegular("symlink"));
    assert_eq!(
        rep.problems[0].to_string(),
        format!("ready/00/{name}: foreign: symlink")
    );
}

#[test]
fn entries_that_appear_in_a_shard_known_empty_are_checked_before_any_claim_moves_them() {
    // After a claim found the shard empty, a new job is taken from its inotify event without
    // a listing (ops/shards.rs, pending names): a symlink, fifo or directory with a valid job
    // name that appears the same way must still never be renamed or read.
    let d = TempDir::new("hostile-known-empty");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    assert!(
        q.claim().unwrap().is_none(),
        "empty: the shard is now known empty"
    );
    let shard = d.path().join("ready/00");
    let outside = d.path().with_extension("secret");
    std::fs::write(&outside, b"not a job").unwrap();
    let link = shard.join(valid_name(&q, 11));
    symlink(&outside, &link).unwrap();
    let fifo = shard.join(valid_name(&q, 12));
    mkfifo(&fifo);
    let dir = shard.join(valid_name(&q, 13));
    std::fs::create_dir(&dir).unwrap();
    let good = q.enqueue(b"real").unwrap();
    let mut got = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        got.push(l.id());
        l.ack().unwrap();
    }
    assert_eq!(got, vec![good]);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::symlink_metadata(&fifo).is_ok() && dir.is_dir());
    assert_eq!(std::fs::read(&outside).unwrap(), b"not a job");
    assert!(q.list(Some(State::Dead)).unwrap().is_empty());
    let _ = std::fs::remove_file(&outside);
}

/// A default-level shard owned by another user than `ready/` (a member of the queue's group
/// moved the owner's shard away and made her own) is not the queue's: a job file in it is
/// never claimed, no enqueue goes there, and fsck names it. Before, its jobs were claimed
/// and new jobs went into it.
#[test]
fn a_shard_of_another_owner_is_never_listed_nor_placed_into() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP a_shard_of_another_owner_is_never_listed_nor_placed_into: needs root");
        return;
    }
    let d = TempDir::new("foreign-shard");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    // A job in each shard, then ready/01 given to another user with its job in it.
    let mut planted = None;
    while planted.is_none() {
        let id = q.enqueue(b"x").unwrap();
        if q.find(id)
            .unwrap()
            .rel_path(q.id())
            .starts_with("ready/01/")
        {
            planted = Some(id);
        } else {
            q.claim().unwrap().unwrap().ack().unwrap();
        }
    }
    drop(q);
    std::os::unix::fs::chown(d.path().join("ready/01"), Some(54_321), None).unwrap();
    let q = Queue::open(d.path()).unwrap();
    for i in 0..20 {
        let id = q.enqueue(format!("job {i}").as_bytes()).unwrap();
        let at = q.find(id).unwrap().rel_path(q.id());
        assert!(at.starts_with("ready/00/"), "{i}: {at}");
    }
    let mut claimed = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        claimed.push(l.id());
        l.ack().unwrap();
    }
    assert_eq!(claimed.len(), 20);
    assert!(!claimed.contains(&planted.unwrap()));
    let rep = q.fsck().unwrap();
    assert!(
        rep.problems.iter().any(|p| p.path == "ready/01"
            && matches!(p.kind, ProblemKind::ForeignOwner { owner: 54_321, .. })),
        "{:?}",
        rep.problems
    );
}

/// A second name of one job file (a hard link into `ready/` made by a user who may write
/// the shards) made the job run again: the same job id was claimed and acked once per name.
/// A claim now refuses a job file with more than one name: it is given back and passed
/// over, the claim says "no job" (no error), and the lease goes on to its ack.
#[test]
fn a_hard_link_of_a_leased_job_into_ready_is_never_claimed() {
    let d = TempDir::new("hardlink-claim");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    let id = q.enqueue(b"once").unwrap();
    let ready = q.find(id).unwrap().rel_path(q.id());
    let l = q.claim().unwrap().unwrap();
    let leased = q.find(id).unwrap().rel_path(q.id());
    assert_ne!(ready, leased);
    std::fs::hard_link(d.path().join(&leased), d.path().join(&ready)).unwrap();
    // Another worker, while the job is leased, and after its ack.
    let other = Queue::open(d.path()).unwrap();
    assert!(other.claim().unwrap().is_none());
    l.ack().unwrap();
    for _ in 0..3 {
        let fresh = Queue::open(d.path()).unwrap();
        assert!(
            fresh.claim().unwrap().is_none(),
            "the link is never a second run"
        );
    }
    assert!(other.claim().unwrap().is_none());
    let st = q.status().unwrap();
    assert_eq!(st.leased, 0);
    assert_eq!(
        std::fs::read_dir(d.path().join("receipts/00"))
            .unwrap()
            .count(),
        1
    );
    // The planted name is left for the operator, and fsck names it.
    assert_eq!(st.ready, 1);
    assert!(!q.fsck().unwrap().clean());
}
