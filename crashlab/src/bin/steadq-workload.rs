//! The SteadQ crash workload (runs in the guest, static): a mix of enqueues, claims, acks,
//! nacks and fails on a queue at `<mountpoint>/q`, each recorded with an in-band mark only
//! after the operation returned done (past its rename and every barrier):
//! `enq <id>`, `claim <id> <attempt>`, `ack <id>`, `nack <id>`, `fail <id>`, and after the
//! `enq` of a job with dependencies `after <id> <dep>[,<dep>...]`. Every 16th step
//! claims and acks a batch (`claim_batch`, `ack_batch`) instead of one job; every 12th acks
//! with `ack_and_claim` and acks the job that claim took. Every seventh enqueue waits for the
//! thread's previous job (`EnqueueOptions::after`: `waiting/`, `needs/`, `after/`), and every
//! third is in group `g`, limited to 2 leased at once (`groups/g/<k>` slots), so the crash
//! states cover dependencies, their promotion by the ack, and group claims and settles.
//! Every tenth enqueue is a batch of two through a second, `Batched` handle (the batch
//! barriers); every fifth is keyed, and the same key enqueued again must return the same job
//! (`key <key> <id>` marked after it); most failed jobs are requeued right after their fail
//! (`requeuing <id>` before the call, `requeue <id>` once it returned done).
//!
//! After the steps an admin phase (one thread, about 25 operations) makes what the steps do
//! not: a renew, a lease expired and recovered, a delayed job made due, a dead-letter purge,
//! receipt policy `none` (`header` too with `--receipt-header`; identity file changes; compaction, `steadq.counts`,
//! evidence appends and rotations, receipt removals), a second queue `q2`, and a job file
//! damaged on purpose and quarantined by `fsck --quarantine`: see `admin_phase` for its marks
//! and `crashlab::invariants` (10) for what the verifier holds them to. Not with
//! `--skip-file-fsync` (that control is about job files only); with `--break` it runs.
//!
//! With `--threads N` (the rig's normal runs use 3) the steps are shared out among N threads
//! of one queue handle, step `i` to thread `i % N`, each marking what it finished: their
//! operations share barriers (a directory fsync started after several threads' renames
//! covers them all; on journaled ext4 one group spans every directory, steadq's
//! `ops/group.rs`), so every flush point is also a check of that sharing. The marks' order
//! across threads is free; the verifier reads them as sets (`crashlab::invariants`).
//!
//! `steadq-workload <mountpoint> <blockdev> <markbase> [--jobs N] [--threads N] [--batched] [--skip-file-fsync] [--receipt-header] [--break NAME]`
//!
//! `--skip-file-fsync` is the NEGATIVE CONTROL: every fsync of a job file "succeeds" without
//! being made (a lying barrier, `FaultAction::Skip`), so jobs are published before their data
//! is durable. The rig must find violations with it, or it proves nothing.
//! `--break NAME` removes one named barrier instead (`steadq::sys::Barrier`, several joined by
//! `+`): `rig.sh --break NAME`, one cell of the barrier matrix (crashlab/matrix.sh).
//!
//! Exit status: 0 done (`CRASHLAB_WORKLOAD_OK` on the console), 1 an operation failed
//! (`CRASHLAB_WORKLOAD_FAIL`), 2 usage.

use argh::FromArgs;
use crashlab::args::{self, size};
use crashlab::invariants::policy_name;
use crashlab::marks::{say, MarkWriter};
use std::path::PathBuf;
use std::process::exit;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use steadq::sys::{Call, Fault, FaultAction, FaultPlan};
use steadq::{Durability, JobId, Options, Queue, Reason, ReceiptPolicy};

#[derive(FromArgs)]
/// The SteadQ crash workload: every operation that returned done is marked in-band on the
/// block device, past the filesystem, at markbase.
struct Args {
    /// the mounted filesystem (the queue is created at <mountpoint>/q)
    #[argh(positional)]
    mountpoint: PathBuf,
    /// the raw block device under it (marks are written there with O_DIRECT)
    #[argh(positional)]
    blockdev: PathBuf,
    /// byte offset of the mark area (4096-aligned; 448M, 0x1c000000, ...)
    #[argh(positional, from_str_fn(size))]
    markbase: u64,
    /// number of enqueue steps (default 40); every second one also claims and settles a job
    #[argh(option, default = "40")]
    jobs: u64,
    /// threads sharing the queue handle and the steps (default 1)
    #[argh(option, default = "1")]
    threads: u64,
    /// batched durability, and every fourth enqueue a batch of two
    #[argh(switch)]
    batched: bool,
    /// three payloads in four of 16 to 255 bytes, so that their job files (a 128-byte header
    /// and the payload) fit in a 512-byte inode (the `ext4-inline` flavour: `mkfs.ext4 -I 512
    /// -O inline_data`); the fourth keeps the default sizes, so files past the inode remain
    #[argh(switch)]
    small: bool,
    /// NEGATIVE CONTROL: every fsync of a job file reports success without being made
    #[argh(switch)]
    skip_file_fsync: bool,
    /// in the admin phase, also receipt policy `header` and two acks under it (off by
    /// default: on xfs a crash can leave such a receipt neither whole nor cut, its bytes
    /// past the header zeroed under its old size, which fsck reports as corrupt)
    #[argh(switch)]
    receipt_header: bool,
    /// NEGATIVE CONTROL: remove these barriers (`steadq::sys::Barrier` names joined by `+`)
    #[argh(option, long = "break")]
    break_barriers: Option<String>,
}

/// The barriers `--break` names; exits 2 naming an unknown one.
fn barriers(spec: &str) -> Vec<steadq::sys::Barrier> {
    spec.split(['+', ','])
        .filter(|n| !n.is_empty())
        .map(|n| {
            steadq::sys::Barrier::parse(n).unwrap_or_else(|| {
                eprintln!("steadq-workload: --break: unknown barrier {n:?}");
                exit(2)
            })
        })
        .collect()
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    say(&format!("CRASHLAB_WORKLOAD_FAIL {what}: {e}"));
    exit(1)
}

/// Writes one in-band mark, or ends the run; shared by the threads (one mark at a time, each
/// written only after its operation returned done).
struct Marker(Mutex<MarkWriter>);

impl Marker {
    fn mark(&self, op: &str, arg: impl std::fmt::Display) {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        w.mark(op, &arg.to_string())
            .unwrap_or_else(|e| fail("mark", e));
    }
}

/// Creates the queue at `<mountpoint>/q` with a plan that counts calls (the fsyncs made are
/// reported at the end); with the negative control the plan skips every file fsync from then
/// on (a torn identity file is not the bug under test).
fn create(a: &Args) -> (Queue, Queue, Arc<FaultPlan>) {
    let skip = |call| Fault {
        call,
        nth: 0,
        action: FaultAction::Skip,
    };
    // On xfs and journaled ext4 a job file is written out (sync_file_range) before its link,
    // not fsynced: the control skips both.
    let plan = FaultPlan::disarmed(if a.skip_file_fsync {
        vec![skip(Call::Fsync), skip(Call::WriteOut)]
    } else {
        Vec::new()
    });
    for b in a
        .break_barriers
        .as_deref()
        .map(barriers)
        .unwrap_or_default()
    {
        plan.skip_barrier(b);
    }
    let o = options(a, &plan);
    let q = Queue::create(a.mountpoint.join("q"), o.clone()).unwrap_or_else(|e| fail("create", e));
    // Capacity limits far above the workload: every enqueue then takes the limits check
    // (steadq.limits read behind its watch, the tally kept), and the file is in every state.
    let limits = steadq::Limits {
        max_jobs: Some(100_000),
        max_bytes: Some(1 << 30),
    };
    q.set_limits(limits)
        .unwrap_or_else(|e| fail("set_limits", e));
    q.set_group_limit(&group(), Some(2))
        .unwrap_or_else(|e| fail("set_group_limit", e));
    // A second handle on the same queue, `Batched`: its `enqueue_batch` shares the batch's
    // barriers (the first handle's, `Strict`, gives each job its own).
    let qb = Queue::open_with(
        a.mountpoint.join("q"),
        Options {
            durability: Durability::Batched,
            ..o
        },
    )
    .unwrap_or_else(|e| fail("open (batched)", e));
    plan.arm();
    (q, qb, plan)
}

/// The workload's group.
fn group() -> steadq::GroupName {
    steadq::GroupName::new("g").unwrap_or_else(|| fail("group", "g"))
}

/// Enqueue step `i` with dependencies on `prev` (the thread's previous job): a dependency
/// dead-lettered meanwhile is refused (`BadDependency`, not done), and the job is then
/// enqueued without it. Marks `enq` and `after`.
fn enqueue_after(q: &Queue, m: &Marker, payload: &[u8], o: &steadq::EnqueueOptions) -> JobId {
    match q.enqueue_with(payload, o) {
        Ok(e) => {
            let deps: Vec<String> = o.after.iter().map(|d| d.to_string()).collect();
            m.mark("enq", e.id());
            m.mark("after", format!("{} {}", e.id(), deps.join(",")));
            e.id()
        }
        Err(e) if matches!(e.kind(), steadq::ErrorKind::BadDependency { .. }) => {
            let o = steadq::EnqueueOptions {
                after: Vec::new(),
                ..o.clone()
            };
            let id = q
                .enqueue_with(payload, &o)
                .map(steadq::Enqueued::id)
                .unwrap_or_else(|e| fail("enqueue (dependency dead)", e));
            m.mark("enq", id);
            id
        }
        Err(e) => fail("enqueue (after)", e),
    }
}

/// Enqueue step `i`: payloads from 100 bytes to ~24 KiB, so some span several blocks (a
/// streamed one ~94 KiB), or with `small` three in four of 16 to 255 bytes; every fifth at
/// another priority, every fifth keyed.
fn enqueue(
    (q, qb): (&Queue, &Queue),
    m: &Marker,
    i: u64,
    (batched, small): (bool, bool),
    prev: &mut Option<JobId>,
) {
    let size = match small && i % 4 != 3 {
        true => 16 + (i * 7919 % 240) as usize,
        false => 100 + (i * 7919 % 24_000) as usize,
    };
    let payload: Vec<u8> = (0..size).map(|j| (i as usize * 31 + j * 7) as u8).collect();
    let grouped = i.is_multiple_of(3);
    let o = steadq::EnqueueOptions {
        group: grouped.then(group),
        ..Default::default()
    };
    if let (Some(p), true) = (*prev, i % 7 == 6 && i % 5 != 4) {
        let o = steadq::EnqueueOptions {
            after: vec![p],
            ..o
        };
        *prev = Some(enqueue_after(q, m, &payload, &o));
        return;
    }
    let ids: Vec<JobId> = if batched && i.is_multiple_of(4) {
        q.enqueue_batch(&[&payload[..], &payload[..size / 2]])
            .unwrap_or_else(|e| fail("enqueue_batch", e))
    } else if i.is_multiple_of(10) {
        // Every tenth enqueue a batch of two through the `Batched` handle: its barriers are
        // the batch's own (`enqueue-batch-data`, `enqueue-batch-names`); each job is marked
        // once the batch returned done.
        qb.enqueue_batch(&[&payload[..], &payload[..size / 2]])
            .unwrap_or_else(|e| fail("enqueue_batch (batched handle)", e))
    } else if i % 5 == 2 {
        // Every fifth enqueue at another priority level (prio/<l>/<ss>, a `.p<l>` name), so
        // the crash states cover prioritized enqueues, claims, acks and nacks too.
        let o = steadq::EnqueueOptions {
            priority: Some([7u8, 0, 5][(i / 5 % 3) as usize]),
            ..o
        };
        vec![q
            .enqueue_with(&payload, &o)
            .map(steadq::Enqueued::id)
            .unwrap_or_else(|e| fail("enqueue (priority)", e))]
    } else if i % 5 == 4 {
        // A keyed enqueue (keys/<sha256> linked no-replace before the job), every other one
        // streamed from a reader past one 64 KiB chunk (pwrite per chunk, the header last).
        let key = steadq::Key::new(&format!("workload-{i}")).unwrap_or_else(|| fail("key", i));
        let o = steadq::EnqueueOptions {
            key: Some(key),
            ..o
        };
        let done = if i % 10 == 4 {
            let big: Vec<u8> = payload
                .iter()
                .copied()
                .cycle()
                .take(70_000 + size)
                .collect();
            q.enqueue_reader(&mut &big[..], &o)
        } else {
            q.enqueue_with(&payload, &o)
        };
        let id = match done.unwrap_or_else(|e| fail("enqueue (keyed)", e)) {
            steadq::Enqueued::New(id) => id,
            d => fail(
                "enqueue (keyed)",
                format!("key {key} was new, but got {d:?}"),
            ),
        };
        // The same key again returns the same job, now and (the verifier checks) in every
        // crash state after the `key` mark.
        match q.enqueue_with(b"a duplicate", &o) {
            Ok(steadq::Enqueued::Duplicate(d)) if d == id => {}
            other => fail(
                "enqueue (keyed duplicate)",
                format!("{id} expected, got {other:?}"),
            ),
        }
        m.mark("enq", id);
        m.mark("key", format!("{key} {id}"));
        *prev = Some(id);
        return;
    } else {
        vec![q
            .enqueue_with(&payload, &o)
            .map(steadq::Enqueued::id)
            .unwrap_or_else(|e| fail("enqueue", e))]
    };
    for id in ids {
        m.mark("enq", id);
        *prev = Some(id);
    }
}

/// Claims up to three jobs with `claim_batch` and acks them with `ack_batch`: on xfs and
/// journaled ext4 each batch makes one directory fsync (the last rename's), which commits
/// the earlier renames in order (DESIGN.md, Barriers).
fn claim_and_ack_batch(q: &Queue, m: &Marker) {
    let leases = q
        .claim_batch(3, Duration::from_secs(600))
        .unwrap_or_else(|e| fail("claim_batch", e));
    let ids: Vec<String> = leases.iter().map(|l| l.id().to_string()).collect();
    for (l, id) in leases.iter().zip(&ids) {
        m.mark("claim", format!("{id} {}", l.attempt()));
    }
    q.ack_batch(leases).unwrap_or_else(|e| fail("ack_batch", e));
    for id in ids {
        m.mark("ack", id);
    }
}

/// Claims a job and settles it by ack, fail or nack, as step `i` says.
fn claim_and_settle(q: &Queue, m: &Marker, i: u64) {
    let Some(l) = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(600)),
            ..Default::default()
        })
        .unwrap_or_else(|e| fail("claim", e))
    else {
        return;
    };
    let (l_id, id) = (l.id(), l.id().to_string());
    m.mark("claim", format!("{id} {}", l.attempt()));
    match i % 6 {
        5 if i % 12 == 5 => {
            // A worker's step: the ack and the next claim share one barrier
            // (`Lease::ack_and_claim`); both are marked once it returned done.
            let step = l
                .ack_and_claim(Duration::from_secs(600))
                .unwrap_or_else(|e| fail("ack_and_claim", e));
            m.mark("ack", id);
            if let Some(next) = step
                .next
                .unwrap_or_else(|e| fail("ack_and_claim (claim)", e))
            {
                let id = next.id().to_string();
                m.mark("claim", format!("{id} {}", next.attempt()));
                next.ack().unwrap_or_else(|e| fail("ack", e));
                m.mark("ack", id);
            }
        }
        1 | 5 => {
            l.ack().unwrap_or_else(|e| fail("ack", e));
            m.mark("ack", id);
        }
        3 if i % 12 == 3 => {
            l.fail(Reason::FAILED).unwrap_or_else(|e| fail("fail", e));
            m.mark("fail", id.clone());
            if i % 48 != 3 {
                // Requeue the dead job (attempts reset): `requeuing` first, since from here
                // on the job may be ready again before `requeue` is marked.
                m.mark("requeuing", &id);
                let r = q
                    .requeue_dead(Some(l_id))
                    .into_result()
                    .unwrap_or_else(|e| fail("requeue_dead", e));
                if r.requeued != 1 {
                    fail("requeue_dead", format!("{id}: {} requeued", r.requeued));
                }
                m.mark("requeue", id);
            }
        }
        _ => {
            l.nack(Duration::ZERO).unwrap_or_else(|e| fail("nack", e));
            m.mark("nack", id);
        }
    }
}

/// The options every handle of the run is opened with: the run's durability and its plan.
fn options(a: &Args, plan: &Arc<FaultPlan>) -> Options {
    Options {
        shards: 2,
        durability: if a.batched {
            Durability::Batched
        } else {
            Durability::Strict
        },
        faults: Some(Arc::clone(plan)),
        ..Options::default()
    }
}

/// Enqueues one job with `q`, marks `enq`, claims a job (a 600 s lease) and marks the claim:
/// the lease of the phase's next step (whatever job the claim took; the phase runs alone).
fn enqueue_and_claim(q: &Queue, m: &Marker, what: &str, lease: Duration) -> steadq::Lease {
    let id = q
        .enqueue(format!("admin phase: {what}").as_bytes())
        .unwrap_or_else(|e| fail(what, e));
    m.mark("enq", id);
    let l = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(lease),
            ..Default::default()
        })
        .unwrap_or_else(|e| fail(what, e))
        .unwrap_or_else(|| fail(what, "nothing to claim"));
    m.mark("claim", format!("{} {}", l.id(), l.attempt()));
    l
}

/// Claims and acks `n` jobs (enqueued first) with handle `q`; marks each.
fn ack_some(q: &Queue, m: &Marker, n: u32, what: &str) {
    for _ in 0..n {
        let l = enqueue_and_claim(q, m, what, Duration::from_secs(600));
        let id = l.id();
        l.ack().unwrap_or_else(|e| fail(what, e));
        m.mark("ack", id);
    }
}

/// Changes the receipt policy (the identity file: barrier `identity`), marked `setting P`
/// before and `policy P` once done, and reopens the queue so the policy applies.
fn set_policy(a: &Args, plan: &Arc<FaultPlan>, q: &Queue, m: &Marker, p: ReceiptPolicy) -> Queue {
    let name = policy_name(p);
    m.mark("setting", name);
    // Evidence logs of at most 512 bytes, so that every append of the phase after compaction
    // rotates (barrier `evidence-rotate`); 64 kept, so none of the run's is dropped.
    let limits = steadq::EvidenceLimits {
        max_bytes: 512,
        keep: 64,
    };
    q.set_receipt_policy(p, Some(limits))
        .unwrap_or_else(|e| fail("set_receipt_policy", e));
    m.mark("policy", name);
    Queue::open_with(a.mountpoint.join("q"), options(a, plan))
        .unwrap_or_else(|e| fail("open (new policy)", e))
}

/// The admin phase, after the steps (one thread, alone on the queue): the operations the
/// steps do not make, each marked once it returned done. A lease renewed (`renew <id>`); a
/// lease that expires and the recovery that moves it back (`recovered <n>`); a delayed job
/// made due (`due <id>`); a failed job and every dead job purged (`purging <id>` before,
/// `purged <id>` after); a second queue created (`create q2`); a job file corrupted on
/// purpose (`planted <id>` before) and moved aside by `fsck --quarantine` (`quarantined
/// <id>`); with `--receipt-header`, receipt policy `header` (`setting`/`policy` marks
/// around the identity change) and two acks under it; compaction of every receipt (`compact <n>`, the evidence log and
/// `steadq.counts`); policy `none` and four acks under it (evidence appends, each rotating
/// the log, and receipt removals). Each is followed by others that flush, so a crash state
/// can hold its mark without its effect (the last operation's only later flush is the
/// unmount's).
fn admin_phase(a: &Args, plan: &Arc<FaultPlan>, q: &Queue, m: &Marker) {
    // A renew: its deadlines need not survive a crash (a lease dies with its boot).
    let mut l = enqueue_and_claim(q, m, "renew", Duration::from_secs(600));
    l.renew(Duration::from_secs(900))
        .unwrap_or_else(|e| fail("renew", e));
    m.mark("renew", l.id());
    let id = l.id();
    l.ack().unwrap_or_else(|e| fail("ack (renewed)", e));
    m.mark("ack", id);
    // A lease that expires, and the recovery that moves it back to ready.
    let l = enqueue_and_claim(q, m, "expire", Duration::from_millis(1));
    let started = Instant::now();
    loop {
        let r = q
            .recover()
            .into_result()
            .unwrap_or_else(|e| fail("recover", e));
        if r.moved() > 0 {
            m.mark("recovered", r.moved());
            break;
        }
        if started.elapsed() > Duration::from_secs(10) {
            fail(
                "recover",
                format!("the 1 ms lease of {} never expired", l.id()),
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(l);
    // A delayed job (a nack by a day) made due now.
    let l = enqueue_and_claim(q, m, "delay", Duration::from_secs(600));
    let id = l.id();
    l.nack(Duration::from_secs(86_400))
        .unwrap_or_else(|e| fail("nack (delay)", e));
    m.mark("nack", id);
    let n = q.make_due(Some(id)).unwrap_or_else(|e| fail("make_due", e));
    if n != 1 {
        fail("make_due", format!("{id}: {n} moved"));
    }
    m.mark("due", id);
    // A failed job, and every dead job purged.
    let l = enqueue_and_claim(q, m, "purge", Duration::from_secs(600));
    let id = l.id();
    l.fail(Reason::FAILED).unwrap_or_else(|e| fail("fail", e));
    m.mark("fail", id);
    let dead: Vec<JobId> = q
        .list(Some(steadq::State::Dead))
        .unwrap_or_else(|e| fail("list dead", e))
        .iter()
        .map(|l| l.name.id)
        .collect();
    for id in &dead {
        m.mark("purging", id);
    }
    let n = q.purge_dead().unwrap_or_else(|e| fail("purge_dead", e));
    if n as usize != dead.len() {
        fail("purge_dead", format!("{n} purged, {} listed", dead.len()));
    }
    for id in &dead {
        m.mark("purged", id);
    }
    // A second queue.
    Queue::create(a.mountpoint.join("q2"), options(a, plan))
        .unwrap_or_else(|e| fail("create q2", e));
    m.mark("create", "q2");
    // A job file whose payload is damaged on purpose, moved aside by fsck.
    let id = q
        .enqueue(b"admin phase: a job to corrupt")
        .unwrap_or_else(|e| fail("enqueue (to corrupt)", e));
    let at = a.mountpoint.join("q").join(
        q.find(id)
            .unwrap_or_else(|e| fail("find (to corrupt)", e))
            .rel_path(q.id()),
    );
    m.mark("planted", id);
    crashlab::invariants::damage_last_byte(&at).unwrap_or_else(|e| fail("corrupt", e));
    let rep = q
        .fsck_quarantine()
        .unwrap_or_else(|e| fail("fsck --quarantine", e));
    if !rep.problems.iter().any(|p| p.quarantined) {
        fail(
            "fsck --quarantine",
            format!("{id} was not quarantined: {rep:?}"),
        );
    }
    m.mark("quarantined", id);
    // With --receipt-header, receipts cut to their headers (`truncate`, no barrier: a cut
    // receipt or a whole one is an ack, DESIGN.md, Receipts).
    let qh = a.receipt_header.then(|| {
        let qh = set_policy(a, plan, q, m, ReceiptPolicy::Header);
        ack_some(&qh, m, 2, "ack (policy header)");
        qh
    });
    let q = qh.as_ref().unwrap_or(q);
    // Every receipt compacted (evidence lines, `steadq.counts`, the receipts' removal).
    let r = q
        .compact(Duration::ZERO)
        .unwrap_or_else(|e| fail("compact", e));
    m.mark("compact", r.removed);
    // No receipts: an evidence line per ack, the log rotated at each.
    let qn = set_policy(a, plan, q, m, ReceiptPolicy::None);
    ack_some(&qn, m, 4, "ack (policy none)");
}

fn main() {
    let a: Args = args::from_env();
    if a.threads == 0 {
        fail("--threads", "must be at least 1");
    }
    let m = Marker(Mutex::new(
        MarkWriter::open(&a.blockdev, a.markbase).unwrap_or_else(|e| fail("open mark device", e)),
    ));
    let (q, qb, plan) = create(&a);
    // Which journals are attached: on ext4 a move between directories makes one directory
    // fsync, not two, when this lists the disk (steadq's ops/group.rs; DESIGN.md, Barriers).
    let jbd2: Vec<String> = std::fs::read_dir("/proc/fs/jbd2")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    say(&format!("CRASHLAB_WORKLOAD_JBD2 {jbd2:?}"));
    let t = Instant::now();
    let step = |i: u64, prev: &mut Option<JobId>| {
        enqueue((&q, &qb), &m, i, (a.batched, a.small), prev);
        if i % 16 == 15 {
            claim_and_ack_batch(&q, &m);
        } else if i % 2 == 1 {
            claim_and_settle(&q, &m, i);
        }
    };
    std::thread::scope(|s| {
        for t in 0..a.threads {
            let step = &step;
            s.spawn(move || {
                let mut prev = None;
                (t..a.jobs)
                    .step_by(a.threads as usize)
                    .for_each(|i| step(i, &mut prev))
            });
        }
    });
    // The negative control checks that the rig sees job files published before their data:
    // the admin phase adds nothing to that, and would double its crash states.
    if !a.skip_file_fsync {
        admin_phase(&a, &plan, &q, &m);
    }
    say(&format!(
        "CRASHLAB_WORKLOAD_FSYNCS file {} dir {} write-out {} syncfs {}",
        plan.count(Call::Fsync),
        plan.count(Call::FsyncDir),
        plan.count(Call::WriteOut),
        plan.count(Call::Syncfs)
    ));
    if let Some(spec) = &a.break_barriers {
        let n: Vec<String> = barriers(spec)
            .iter()
            .map(|b| format!("{b}={}", plan.skipped(*b)))
            .collect();
        say(&format!("CRASHLAB_WORKLOAD_SKIPPED {}", n.join(" ")));
    }
    say(&format!(
        "CRASHLAB_WORKLOAD_OK {} iterations on {} threads in {:.2}s{}",
        a.jobs,
        a.threads,
        t.elapsed().as_secs_f64(),
        if a.skip_file_fsync {
            " (negative control: file fsyncs skipped)"
        } else {
            ""
        }
    ));
}
