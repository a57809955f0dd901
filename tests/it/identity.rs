//! A lost or damaged identity file (`steadq.queue`) must not orphan a queue: its checksum,
//! restoring it from the job headers, refusing when they disagree.

use crate::common::{fast, files, TempDir};
use std::path::Path;
use steadq::{ErrorKind, Queue, IDENTITY_FILE};

/// A queue with `n` ready jobs; returns its id.
fn queue_with_jobs(dir: &Path, shards: u16, n: usize) -> u128 {
    let q = Queue::create(dir, fast(shards)).unwrap();
    for i in 0..n {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    q.id()
}

fn claim_all(q: &Queue) -> usize {
    let mut leases = Vec::new();
    while let Some(l) = q.claim().unwrap() {
        leases.push(l);
    }
    leases.len()
}

#[test]
fn identity_carries_a_sum_line() {
    let d = TempDir::new("id-sum");
    let id = queue_with_jobs(d.path(), 2, 0);
    let text = std::fs::read_to_string(d.path().join(IDENTITY_FILE)).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.starts_with("sum=") && last.len() == 20, "{text}");
    assert!(text.contains(&format!("id={id:032x}\n")));
}

#[test]
fn removed_identity_is_restored_from_job_headers() {
    let d = TempDir::new("id-removed");
    let id = queue_with_jobs(d.path(), 4, 5);
    std::fs::remove_file(d.path().join(IDENTITY_FILE)).unwrap();
    // The options ask for another shard count: the layout's 4 win.
    let q = Queue::create(d.path(), fast(8)).unwrap();
    assert_eq!(q.id(), id);
    assert_eq!(q.identity().shards, 4);
    assert_eq!(claim_all(&q), 5);
    assert!(q.fsck().unwrap().clean());
}

#[test]
fn damaged_identity_fails_open_and_create_restores_it() {
    let d = TempDir::new("id-flip");
    let id = queue_with_jobs(d.path(), 2, 3);
    let file = d.path().join(IDENTITY_FILE);
    let text = std::fs::read_to_string(&file).unwrap();
    // Flip one hex digit of the id (still valid hex: only the sum can tell).
    let at = text.find("id=").unwrap() + 3;
    let mut b = text.into_bytes();
    b[at] = if b[at] == b'0' { b'1' } else { b'0' };
    std::fs::write(&file, &b).unwrap();

    let e = Queue::open(d.path()).unwrap_err();
    assert_eq!(*e.kind(), ErrorKind::BadIdentity);
    assert_eq!(e.path(), Some(file.as_path()));
    let msg = e.to_string();
    assert!(
        msg.contains("steadq.queue") && msg.contains("damaged"),
        "{msg}"
    );
    assert!(msg.contains("steadq init"), "{msg}");

    let q = Queue::create(d.path(), fast(2)).unwrap();
    assert_eq!(q.id(), id);
    assert_eq!(claim_all(&q), 3);
    // The damaged file is kept, beside the new one.
    let kept: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".steadq.queue.damaged."))
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(std::fs::read(d.path().join(&kept[0])).unwrap(), b);
    assert_eq!(Queue::open(d.path()).unwrap().id(), id);
}

#[test]
fn legacy_identity_without_sum_opens() {
    let d = TempDir::new("id-legacy");
    let id = queue_with_jobs(d.path(), 2, 1);
    let file = d.path().join(IDENTITY_FILE);
    let text = std::fs::read_to_string(&file).unwrap();
    // What SteadQ 0.1 wrote: the five version-1 fields, no sum.
    let legacy: String = text
        .lines()
        .take(5)
        .map(|l| format!("{}\n", l.replace("version=3", "version=1")))
        .collect();
    assert!(
        legacy.contains("version=1\n") && !legacy.contains("sum="),
        "{legacy}"
    );
    std::fs::write(&file, &legacy).unwrap();
    let q = Queue::open(d.path()).unwrap();
    assert_eq!((q.id(), q.identity().version), (id, 1));
    assert_eq!(claim_all(&q), 1);
}

#[test]
fn jobs_of_two_queues_without_identity_are_refused() {
    let a = TempDir::new("id-two-a");
    let b = TempDir::new("id-two-b");
    queue_with_jobs(a.path(), 1, 1);
    queue_with_jobs(b.path(), 1, 1);
    // Move b's job into a's shard directory, then lose a's identity.
    let job = files(b.path(), "ready").pop().unwrap();
    let name = Path::new(&job).file_name().unwrap();
    std::fs::rename(b.path().join(&job), a.path().join("ready/00").join(name)).unwrap();
    std::fs::remove_file(a.path().join(IDENTITY_FILE)).unwrap();

    let e = Queue::create(a.path(), fast(1)).unwrap_err();
    assert_eq!(*e.kind(), ErrorKind::IdentityLost { jobs: 2, ids: 2 });
    assert_eq!(e.outcome(), steadq::Outcome::NotDone);
    assert!(e.to_string().contains("will not re-identify"), "{e}");
    assert!(!a.path().join(IDENTITY_FILE).exists());
    assert_eq!(files(a.path(), "ready").len(), 2);
}

#[test]
fn unreadable_headers_without_identity_are_refused() {
    let d = TempDir::new("id-zeroed");
    queue_with_jobs(d.path(), 1, 2);
    for f in files(d.path(), "ready") {
        std::fs::write(d.path().join(f), [0u8; 200]).unwrap();
    }
    std::fs::remove_file(d.path().join(IDENTITY_FILE)).unwrap();
    let e = Queue::create(d.path(), fast(1)).unwrap_err();
    assert_eq!(*e.kind(), ErrorKind::IdentityLost { jobs: 2, ids: 0 });
    assert!(!d.path().join(IDENTITY_FILE).exists());
}

#[test]
fn empty_layout_without_identity_gets_a_new_one() {
    let d = TempDir::new("id-empty");
    let old = queue_with_jobs(d.path(), 2, 0);
    std::fs::remove_file(d.path().join(IDENTITY_FILE)).unwrap();
    let q = Queue::create(d.path(), fast(2)).unwrap();
    assert_ne!(q.id(), old);
}

#[test]
fn fsck_blames_a_wrong_identity_once_and_quarantines_nothing() {
    let a = TempDir::new("id-wrong-a");
    let b = TempDir::new("id-wrong-b");
    let id_a = queue_with_jobs(a.path(), 2, 4);
    let id_b = queue_with_jobs(b.path(), 2, 0);
    // Another queue's identity (same shard count) installed over a's.
    std::fs::copy(b.path().join(IDENTITY_FILE), a.path().join(IDENTITY_FILE)).unwrap();
    let q = Queue::open(a.path()).unwrap();
    assert_eq!(q.id(), id_b);
    let rep = q.fsck_quarantine().unwrap();
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    let p = &rep.problems[0];
    assert_eq!(p.path, IDENTITY_FILE);
    assert_eq!(
        p.kind,
        steadq::ProblemKind::IdentityMismatch {
            identity: id_b,
            jobs_id: id_a,
            jobs: 4
        }
    );
    assert!(!p.quarantined);
    assert!(p.to_string().contains("steadq.queue"), "{p}");
    assert!(!a.path().join("quarantine").exists());
    assert_eq!(files(a.path(), "ready").len(), 4);
}

/// A rename refused with EPERM or ENOSYS (a seccomp profile) is not blamed on the filesystem.
#[test]
fn a_refused_rename_is_not_blamed_on_the_filesystem() {
    use steadq::sys::{Call, Errno, Fault, FaultAction, FaultPlan};
    let d = TempDir::new("id-seccomp");
    for errno in [Errno::PERM, Errno::NOSYS] {
        let faults = FaultPlan::new(vec![Fault {
            call: Call::Rename,
            nth: 0,
            action: FaultAction::Fail(errno),
        }]);
        let with = steadq::Options {
            faults: Some(faults),
            ..fast(1)
        };
        // create: the identity's publishing rename.
        let e = Queue::create(d.path(), with.clone()).unwrap_err();
        assert_eq!(
            *e.kind(),
            ErrorKind::RenameRefused {
                errno: errno.into()
            }
        );
        assert!(e.to_string().contains("refused by the system"), "{e}");
        assert!(!d.path().join(IDENTITY_FILE).exists());
        // open: the rename probe.
        drop(Queue::create(d.path(), fast(1)).unwrap());
        let e = Queue::open_with(d.path(), with).unwrap_err();
        assert_eq!(
            *e.kind(),
            ErrorKind::RenameRefused {
                errno: errno.into()
            }
        );
        std::fs::remove_file(d.path().join(IDENTITY_FILE)).unwrap();
    }
}

/// Two job files copied in from another queue beside one of the queue's own were blamed on
/// the identity file (a majority failed the tag check), with the advice to remove it, which
/// would have made `init` adopt the other queue's id (breaker finding). With any job that
/// passes the check the identity is this queue's: the copies are foreign, quarantined on
/// request.
#[test]
fn foreign_jobs_beside_one_of_the_queues_own_do_not_blame_the_identity() {
    let a = TempDir::new("id-mixed-a");
    let b = TempDir::new("id-mixed-b");
    queue_with_jobs(a.path(), 1, 1);
    queue_with_jobs(b.path(), 1, 2);
    for f in files(b.path(), "ready") {
        std::fs::copy(b.path().join(&f), a.path().join(&f)).unwrap();
    }
    let q = Queue::open(a.path()).unwrap();
    let rep = q.fsck().unwrap();
    assert_eq!(rep.problems.len(), 2, "{:?}", rep.problems);
    assert!(
        rep.problems.iter().all(|p| !matches!(
            p.kind,
            steadq::ProblemKind::IdentityMismatch { .. }
        ) && p.path.starts_with("ready/")),
        "{:?}",
        rep.problems
    );
    let rep = q.fsck_quarantine().unwrap();
    assert!(
        rep.problems.iter().all(|p| p.quarantined),
        "{:?}",
        rep.problems
    );
    assert_eq!(files(a.path(), "ready").len(), 1);
}
