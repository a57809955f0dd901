//! Performance-driven API and resource properties: a lease moves between threads and
//! outlives its handle; leases hold no file descriptor; group commit keeps each caller's
//! rename behind a completed barrier.

use crate::common::*;
use std::time::Duration;
use steadq::*;

#[test]
fn a_lease_moves_to_another_thread_and_outlives_its_handle() {
    let d = TempDir::new("lease-thread");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let id = q.enqueue(b"move me").unwrap();
    let lease = q.claim().unwrap().unwrap();
    drop(q); // the lease holds its own clone of the queue
    let r = std::thread::spawn(move || {
        assert_eq!(lease.payload().unwrap(), b"move me");
        lease.ack().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(r.id, id);
    let q = Queue::open(d.path()).unwrap();
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}

#[test]
#[ignore = "slow tier: 20,000 leases held at once (~15 s)"]
fn twenty_thousand_leases_hold_no_file_descriptors() {
    let d = TempDir::new("many-leases");
    let q = Queue::create(d.path(), fast(4)).unwrap();
    let n = 20_000;
    for chunk in 0..n / 500 {
        let p: Vec<Vec<u8>> = (0..500)
            .map(|i| format!("{chunk}/{i}").into_bytes())
            .collect();
        let refs: Vec<&[u8]> = p.iter().map(|v| v.as_slice()).collect();
        q.enqueue_batch(&refs).unwrap();
    }
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = fds();
    // Leases long enough to outlive a slow (debug, loaded) run of this test.
    let hour = std::time::Duration::from_secs(3600);
    let leases: Vec<Lease> = (0..n)
        .map(|_| {
            q.claim_with(&steadq::ClaimOptions {
                lease: Some(hour),
                ..Default::default()
            })
            .unwrap()
            .unwrap()
        })
        .collect();
    // /proc/self/fd counts the whole test process, and other tests run beside this one (a CI
    // run saw 16 more): the bound is far above them and far below one fd per lease (20,000).
    let grown = fds().saturating_sub(before);
    assert!(grown < 1_000, "{grown} fds for {n} leases");
    assert!(q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(hour),
            ..Default::default()
        })
        .unwrap()
        .is_none());
    q.ack_batch(leases).unwrap();
    assert_eq!(counts(&q)[4], n);
}

#[test]
fn a_handle_that_knows_its_shards_empty_still_sees_other_writers() {
    let d = TempDir::new("shards-known");
    let worker = Queue::create(d.path(), opts(8)).unwrap();
    let producer = Queue::open(d.path()).unwrap();
    for round in 0..50u32 {
        // The worker lists every shard and learns they are empty...
        assert!(worker.claim().unwrap().is_none());
        // ...then another handle (another process, as far as inotify can tell) adds jobs.
        let p = round.to_le_bytes();
        let ids: Vec<JobId> = (0..3).map(|_| producer.enqueue(&p).unwrap()).collect();
        let mut got: Vec<JobId> = (0..3)
            .map(|_| {
                let l = worker.claim().unwrap().expect("a job enqueued elsewhere");
                let id = l.id();
                l.ack().unwrap();
                id
            })
            .collect();
        got.sort();
        let mut want = ids;
        want.sort();
        assert_eq!(got, want);
    }
    // A lease released by another handle makes its shard claimable again.
    producer.enqueue(b"again").unwrap();
    let l = producer.claim().unwrap().unwrap();
    assert!(worker.claim().unwrap().is_none());
    l.release().unwrap();
    worker
        .claim()
        .unwrap()
        .expect("released job")
        .ack()
        .unwrap();
}

#[test]
fn batches_and_threads_share_barriers_and_every_job_is_claimed_once() {
    let d = TempDir::new("group");
    let q = Queue::create(d.path(), opts(4)).unwrap();
    let payloads: Vec<Vec<u8>> = (0..400u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    q.enqueue_batch(&refs).unwrap();
    let acked = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            let q = q.clone();
            let acked = &acked;
            s.spawn(move || loop {
                let batch = q
                    .claim_batch(16, std::time::Duration::from_secs(60))
                    .unwrap();
                if batch.is_empty() {
                    break;
                }
                let n = batch.len();
                q.ack_batch(batch).unwrap();
                acked.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    assert_eq!(acked.into_inner(), 400);
    assert_eq!(counts(&q), [0, 0, 0, 0, 400]);
    assert!(q
        .claim_batch(4, std::time::Duration::from_secs(1))
        .unwrap()
        .is_empty());
}

#[test]
fn list_each_streams_and_stops_when_asked() {
    let d = TempDir::new("list-each");
    let q = Queue::create(d.path(), fast(4)).unwrap();
    let payloads: Vec<Vec<u8>> = (0..50u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    q.enqueue_batch(&refs).unwrap();
    let mut ids = Vec::new();
    q.list_each(None, true, |l| {
        ids.push(l.name.id);
        true
    })
    .unwrap();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50);
    let mut n = 0;
    q.list_each(Some(State::Ready), false, |_| {
        n += 1;
        n < 3
    })
    .unwrap();
    assert_eq!(n, 3);
}

#[test]
fn status_without_bytes_counts_alike_and_finds_the_oldest_ready_time() {
    let d = TempDir::new("status-fast");
    let q = Queue::create(d.path(), fast(2)).unwrap();
    // 17 older ids and 3 newer; all claimed, the 3 newer released first, the 17 older
    // 150 ms later: the oldest ids are not the longest ready, so the status that stats only
    // the oldest ids must notice and look further.
    let older: Vec<JobId> = (0..17).map(|_| q.enqueue(b"x").unwrap()).collect();
    std::thread::sleep(Duration::from_millis(3)); // newer ids: a later millisecond
    let newer: Vec<JobId> = (0..3).map(|_| q.enqueue(b"y").unwrap()).collect();
    let leases = q.claim_batch(20, Duration::from_secs(60)).unwrap();
    assert_eq!(leases.len(), 20);
    let (first, later): (Vec<Lease>, Vec<Lease>) =
        leases.into_iter().partition(|l| newer.contains(&l.id()));
    assert_eq!(later.len(), older.len());
    first.into_iter().for_each(|l| l.release().unwrap());
    std::thread::sleep(Duration::from_millis(150));
    later.into_iter().for_each(|l| l.release().unwrap());
    // A file shaped like a job name whose tag does not verify is foreign, never a job.
    let name = files(d.path(), "ready/00")[0].clone(); // "ready/00/<name>"
    let flip = if name.as_bytes()[name.len() - 5] == b'0' {
        '1'
    } else {
        '0'
    };
    let forged = format!(
        "{}{flip}{}",
        &name[..name.len() - 5],
        &name[name.len() - 4..]
    );
    std::fs::write(d.path().join(forged), b"not a job").unwrap();
    let t0 = std::time::Instant::now();
    let full = q.status().unwrap();
    let fast = q
        .status_with(&steadq::StatusOptions { bytes: false })
        .unwrap();
    let between = t0.elapsed();
    assert!(full.bytes_counted && !fast.bytes_counted);
    assert_eq!((fast.ready, fast.foreign), (20, 1));
    assert_eq!((full.ready, full.foreign), (20, 1));
    assert_eq!(full.bytes.ready, 20 * (128 + 1));
    assert_eq!(fast.bytes.ready, 0);
    let age = fast.oldest_ready_age.unwrap();
    assert!(age >= Duration::from_millis(150), "{age:?}");
    // Both find the same oldest job; the fast status ran after the full one, so its age is
    // larger by at most the time the two calls took (under qemu-user the full one took
    // 100 ms; ages are whole ms).
    let full_age = full.oldest_ready_age.unwrap();
    let ms = Duration::from_millis(1);
    assert!(
        age + ms >= full_age && age <= full_age + between + ms,
        "{full_age:?} {age:?} {between:?}"
    );
}

/// A handle whose calls are counted (no faults).
fn counted(dir: &std::path::Path) -> (Queue, std::sync::Arc<steadq::sys::FaultPlan>) {
    let plan = steadq::sys::FaultPlan::disarmed(vec![]);
    let o = Options {
        faults: Some(plan.clone()),
        ..Options::default()
    };
    (Queue::open_with(dir, o).unwrap(), plan)
}

#[test]
fn a_claim_of_a_job_that_arrived_in_an_empty_shard_lists_nothing() {
    let d = TempDir::new("no-listing");
    Queue::create(d.path(), opts(2)).unwrap();
    let (q, plan) = counted(d.path());
    let producer = Queue::open(d.path()).unwrap();
    assert!(q.claim().unwrap().is_none(), "lists both shards once");
    // A claim may list `delayed/` (due jobs first), at most once per 100 ms per handle: the
    // only listings allowed. Listing the shard for each new job made 20.
    let start = std::time::Instant::now();
    let mut listings = 0;
    for round in 0..20u32 {
        // From this handle and from another one alike.
        let id = if round % 2 == 0 {
            q.enqueue(&round.to_le_bytes()).unwrap()
        } else {
            producer.enqueue(&round.to_le_bytes()).unwrap()
        };
        plan.reset_counts();
        let l = q.claim().unwrap().expect("the job just enqueued");
        assert_eq!(l.id(), id);
        let n = plan.count(steadq::sys::Call::ReadDir);
        assert!(n <= 1, "round {round}: {n} listings");
        listings += n;
        l.ack().unwrap();
    }
    let promotes = start.elapsed().as_millis() as u32 / 100 + 1;
    assert!(
        listings <= promotes.min(19),
        "{listings} listings in 20 claims ({promotes} allowed for delayed/)"
    );
    assert!(q.claim().unwrap().is_none());
}

/// Claim and ack every job `q` hands out, in the order it hands them out.
fn claim_and_ack_all(q: &Queue) -> Vec<JobId> {
    std::iter::from_fn(|| {
        q.claim().unwrap().map(|l| {
            let id = l.id();
            l.ack().unwrap();
            id
        })
    })
    .collect()
}

#[test]
fn jobs_that_arrive_in_an_empty_shard_are_claimed_oldest_first() {
    let d = TempDir::new("arrival-order");
    let worker = Queue::create(d.path(), opts(1)).unwrap();
    let producer = Queue::open(d.path()).unwrap();
    assert!(worker.claim().unwrap().is_none());
    // A job comes, is claimed elsewhere, newer jobs come, then the first is released: it
    // comes back with its old id and must be claimed before the newer ones.
    let first = producer.enqueue(b"first").unwrap();
    let held = producer.claim().unwrap().unwrap();
    assert_eq!(held.id(), first);
    std::thread::sleep(Duration::from_millis(2)); // newer ids, by millisecond
    let newer: Vec<JobId> = (0..3)
        .map(|_| producer.enqueue(b"newer").unwrap())
        .collect();
    held.release().unwrap();
    let got = claim_and_ack_all(&worker);
    let mut want = vec![first];
    want.extend(newer);
    want[1..].sort(); // ids of one millisecond are ordered by their random part
    assert_eq!(got, want);
    // More arrivals than an empty shard keeps by name: a listing finds them all, in order.
    let many: Vec<JobId> = (0..40)
        .map(|_| producer.enqueue(b"many").unwrap())
        .collect();
    let got = claim_and_ack_all(&worker);
    let mut many = many;
    many.sort();
    assert_eq!(got, many);
}

#[test]
fn an_abandoned_lease_is_recovered_while_new_jobs_keep_arriving_in_its_shard() {
    // A worker taking each new job straight from its inotify event must still list the
    // shard once a lease in it has expired: a steady trickle of new jobs kept the abandoned
    // job waiting behind it for as long as the trickle lasted.
    let d = TempDir::new("trickle");
    let worker = Queue::create(d.path(), opts(1)).unwrap();
    let producer = Queue::open(d.path()).unwrap();
    assert!(worker.claim().unwrap().is_none());
    let abandoned = producer.enqueue(b"abandoned").unwrap();
    let lease = producer
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_millis(300)),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
    assert_eq!(lease.id(), abandoned);
    let _ = lease.into_handle(); // the holder dies: no release
    let start = std::time::Instant::now();
    let mut recovered_after = None;
    for i in 0..400u32 {
        producer.enqueue(&i.to_le_bytes()).unwrap();
        let l = worker.claim().unwrap().expect("a job");
        let id = l.id();
        l.ack().unwrap();
        if id == abandoned {
            recovered_after = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = recovered_after.expect("the abandoned job was never claimed during the trickle");
    // Its lease ran 300 ms; at most one claim's worth of held names (16) may come before it.
    assert!(after < Duration::from_secs(2), "recovered after {after:?}");
}

#[test]
fn a_failed_check_of_an_arrived_name_falls_back_to_a_listing() {
    // The fstatat of a name taken from an event fails (EIO here): the claim must not rename
    // it blindly nor lose it, but list the shard and claim the job from the listing.
    let d = TempDir::new("arrival-stat-fails");
    Queue::create(d.path(), opts(1)).unwrap();
    let (q, plan) =
        crate::common::open_failing(d.path(), steadq::sys::Call::Stat, 1, rustix::io::Errno::IO);
    assert!(q.claim().unwrap().is_none(), "the shard is now known empty");
    // From another handle: a job this handle linked itself is not checked.
    let id = Queue::open(d.path()).unwrap().enqueue(b"checked").unwrap();
    plan.arm();
    let l = q.claim().unwrap().expect("claimed after a listing");
    assert!(plan.fired(), "the name's check failed");
    assert_eq!(l.id(), id);
    // The shard's listing (and perhaps one of delayed/, at most once per 100 ms).
    let listings = plan.count(steadq::sys::Call::ReadDir);
    assert!((1..=2).contains(&listings), "{listings} listings");
    l.ack().unwrap();
}

/// Opening a queue of 64 shards with no priority level made, and its first claim, open each
/// directory once: every directory was opened, closed and opened again, and each of the 448
/// slots of the 7 levels not made was tried one by one at open and again at the first claim
/// (about 1,400 `openat2` calls; with as many `inotify_add_watch` calls they were most of a
/// new worker's 30 ms first claim at 1,000,000 jobs).
#[test]
fn a_new_handle_opens_each_directory_once_and_skips_levels_not_made() {
    let d = TempDir::new("open-count");
    let q = Queue::create(d.path(), opts(64)).unwrap();
    let id = q.enqueue(b"one").unwrap();
    drop(q);
    let plan = steadq::sys::FaultPlan::disarmed(Vec::new());
    let o = Options {
        faults: Some(plan.clone()),
        ..opts(64)
    };
    let q = Queue::open_with(d.path(), o).unwrap();
    let opened = plan.count(steadq::sys::Call::Open);
    // 64 ready and 64 receipt shards, tmp/, delayed/, dead/, the 7 levels looked at once;
    // twice that where `openat2` is missing (qemu-user, kernels before 5.6: each path of
    // two components is opened one component at a time). Before: 1,163.
    let per_path = 2;
    assert!(opened <= per_path * (64 + 64 + 3 + 7 + 8), "{opened} opens");
    plan.reset_counts();
    let l = q.claim().unwrap().unwrap();
    assert_eq!(l.id(), id);
    let opened = plan.count(steadq::sys::Call::Open);
    assert!(
        opened <= per_path * (7 + 4),
        "{opened} opens at the first claim"
    );
}

#[test]
fn a_claim_of_a_job_this_handle_linked_skips_the_check_of_its_name() {
    // One handle enqueues and claims (a library user's producer and worker threads): the
    // arrival is an O_TMPFILE it wrote itself, so its claim makes no `fstatat` of the name
    // (only the `fstat` of the opened file's link count). A job another handle enqueued is
    // still checked, once.
    let d = TempDir::new("own-arrival");
    Queue::create(d.path(), opts(2)).unwrap();
    let (q, plan) = counted(d.path());
    let producer = Queue::open(d.path()).unwrap();
    assert!(q.claim().unwrap().is_none(), "both shards now known empty");
    for round in 0..6u32 {
        let own = round % 2 == 0;
        let id = if own {
            q.enqueue(&round.to_le_bytes()).unwrap()
        } else {
            producer.enqueue(&round.to_le_bytes()).unwrap()
        };
        plan.reset_counts();
        let l = q.claim().unwrap().expect("the job just enqueued");
        assert_eq!(l.id(), id);
        let (stats, listings) = (
            plan.count(steadq::sys::Call::Stat),
            plan.count(steadq::sys::Call::ReadDir),
        );
        // A listing of delayed/ (at most once per 100 ms) may come with the claim; then
        // nothing else is taken from an event.
        if listings == 0 {
            // Plus the one `fstat` of the claimed file's link count (a job file with a
            // second name that is a lease or a receipt is not run again).
            assert_eq!(stats, if own { 1 } else { 2 }, "round {round} (own: {own})");
        }
        l.ack().unwrap();
    }
}

#[test]
fn a_claim_batch_takes_every_ready_job_that_arrived_in_known_empty_shards() {
    // A worker's shards are known empty; 100 jobs arrive (more inotify events than one
    // read returns). One claim_batch of 200 takes all 100: reading the events once per
    // batch took only the first buffer's worth (36 of 64 in the bench).
    let d = TempDir::new("batch-arrivals");
    Queue::create(d.path(), opts(8)).unwrap();
    let worker = Queue::open(d.path()).unwrap();
    let producer = Queue::open(d.path()).unwrap();
    assert!(worker.claim().unwrap().is_none(), "every shard known empty");
    let payloads: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    let mut ids = producer.enqueue_batch(&refs).unwrap();
    let leases = worker.claim_batch(200, Duration::from_secs(60)).unwrap();
    let mut got: Vec<JobId> = leases.iter().map(|l| l.id()).collect();
    ids.sort();
    got.sort();
    assert_eq!(got.len(), 100);
    assert_eq!(got, ids);
    worker.ack_batch(leases).unwrap();
}

#[test]
fn every_claim_batch_of_a_producing_worker_takes_the_whole_batch() {
    // One handle enqueues a batch of 64, claims it, acks it, again and again (the bench's
    // batched lifecycle). The claims' own lease events (64) queue up in front of the next
    // batch's arrivals; one read of the events per drain saw only the first 36 of them,
    // and the next claim_batch said "no job" with 64 ready (rounds 1-3 of 6 took 0).
    let d = TempDir::new("batch-rounds");
    let q = Queue::create(
        d.path(),
        Options {
            durability: steadq::Durability::Batched,
            ..Options::default()
        },
    )
    .unwrap();
    let payload = [7u8; 64];
    let refs: Vec<&[u8]> = vec![&payload[..]; 64];
    let mut took = Vec::new();
    for _ in 0..6 {
        q.enqueue_batch(&refs).unwrap();
        let ls = q.claim_batch(64, Duration::from_secs(60)).unwrap();
        took.push(ls.len());
        q.ack_batch(ls).unwrap();
    }
    assert_eq!(took, vec![64; 6]);
}

/// A new handle at depth makes one deep listing per claim, also when the oldest job it
/// finds has no attempt left: the claim dead-letters it and takes the next candidate of the
/// same listing. It listed a second slot (at 1,000,000 jobs in 64 shards: 29 ms instead of
/// 14 ms, one first claim in six of `examples/depth`, whose claims release their lease).
#[test]
fn a_claim_that_dead_letters_an_exhausted_job_lists_no_second_slot() {
    let d = TempDir::new("deep-exhausted");
    let q = Queue::create(
        d.path(),
        Options {
            max_attempts: 1,
            ..fast(2)
        },
    )
    .unwrap();
    // Both shards deeper than a listing keeps (256 candidates each).
    let payloads: Vec<Vec<u8>> = (0..800u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    q.enqueue_batch(&refs).unwrap();
    // The oldest job of the first slot listed, claimed and released: its one attempt used.
    let first = q.claim().unwrap().unwrap();
    let exhausted = first.id();
    first.release().unwrap();
    drop(q);

    let (b, plan) = counted(d.path());
    plan.reset_counts();
    let l = b.claim().unwrap().expect("a job");
    let with_dead_letter = plan.count(steadq::sys::Call::ReadDir);
    assert_ne!(l.id(), exhausted);
    l.ack().unwrap();
    assert_eq!(
        b.find(exhausted).unwrap().state,
        State::Dead,
        "dead-lettered by the claim"
    );

    let (c, plan) = counted(d.path());
    plan.reset_counts();
    let l = c.claim().unwrap().expect("a job");
    let plain = plan.count(steadq::sys::Call::ReadDir);
    l.ack().unwrap();
    assert!(plain > 0);
    assert_eq!(
        with_dead_letter, plain,
        "a claim that dead-letters its first candidate read {with_dead_letter} directory \
         pages, a plain first claim {plain}"
    );
}

/// The other side of the one-deep-listing rule: when every candidate of the claim's deep
/// listing is gone (each had no attempt left and was dead-lettered), the claim lists on
/// instead of answering "no job" beside slots it has not listed. Level 7 holds 300 exhausted
/// jobs (more than one listing keeps), level 3 one good job: a new handle's first claim
/// dead-letters all 300 and returns the good one.
#[test]
fn a_claim_whose_deep_listing_was_all_exhausted_lists_on_and_finds_the_job_below() {
    let d = TempDir::new("deep-all-exhausted");
    let q = Queue::create(
        d.path(),
        Options {
            max_attempts: 1,
            ..fast(1)
        },
    )
    .unwrap();
    let top = EnqueueOptions {
        priority: Some(7),
        ..Default::default()
    };
    for i in 0..300u32 {
        q.enqueue_with(&i.to_le_bytes(), &top).unwrap().id();
    }
    // All claimed, then all released: each has used its one attempt and is ready again.
    let held: Vec<Lease> = (0..300)
        .map(|_| q.claim().unwrap().expect("a level-7 job"))
        .collect();
    assert!(held.iter().all(|l| l.priority() == 7));
    for l in held {
        l.release().unwrap();
    }
    let good = q.enqueue(b"good").unwrap();
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.dead), (301, 0), "{st:?}");
    drop(q);

    let b = Queue::open(d.path()).unwrap();
    let l = b.claim().unwrap().expect("the level-3 job, not 'no job'");
    assert_eq!(l.id(), good);
    l.ack().unwrap();
    let st = b.status().unwrap();
    assert_eq!((st.dead, st.ready), (300, 0), "{st:?}");
}
