//! The verifier's invariants, shared by the kill soak, the block-replay rig and the power-cut
//! rig. Input: a queue directory after a crash, and the marks of the operations that returned
//! done before it (`enq <id>`, `claim <id> <attempt>`, `ack <id>`, `nack <id>`, `fail <id>`).
//!
//! 1. every enqueue that returned done exists in exactly one state, and its file verifies;
//! 2. every ack that returned done has its receipt, and the job is nowhere else;
//! 3. no job is in two states (counting raw directory entries, not just parsed ones);
//! 4. no corrupt, torn or foreign file outside `dead/` (dead jobs with reason `corrupt` are
//!    allowed only for jobs whose enqueue was never marked done) and `quarantine/`;
//! 5. attempt counts never go down: a claim marked done with attempt `a` leaves attempt >= a;
//! 6. dependencies (`after <id> <dep>,...` marks): a job that left `waiting/` (ready, leased,
//!    acked) has every dependency acked; after recovery none still waits whose dependencies
//!    are all acked, and one whose dependency is dead is dead too;
//! 7. recovery is idempotent: run it twice (the second moves nothing); crash it part-way
//!    (a simulated stop after its Nth rename) and run it again: the invariants still hold;
//! 8. a fail that returned done leaves the job dead until a requeue of it begins
//!    (`requeuing <id>`); a requeue that returned done (`requeue <id>`) leaves it anything but
//!    dead until a later claim of it;
//! 9. keys (`key <key> <id>`): once a keyed enqueue returned done, an enqueue with the same
//!    key returns that job, not a new one;
//! 10. the admin phase: a purge that returned done (`purged <id>`) left the job gone, from
//!     every state (while it runs, `purging <id>`, dead or gone; its key, if it had one,
//!     may lapse from then on: docs/library.md, keys); a receipt-policy change
//!     that returned done (`policy <p>`) is what the identity file says, unless a later one
//!     has begun (`setting <p>`); a compaction or purge that returned done is counted in
//!     `steadq.counts` (`acked` at least the receipts compacted, `dead` at least the jobs
//!     purged: the totals never go down); a queue whose create returned done (`create
//!     <dir>`) opens; a job file damaged on purpose (`planted <id>`, the damage not a crash's)
//!     is excused from fsck until `fsck --quarantine` returned done (`quarantined <id>`), and
//!     after that it is in no state outside `quarantine/`. Renews (`renew`), recoveries
//!     (`recovered`) and jobs made due (`due`) add nothing: a lease dies with its boot, and
//!     recovery redoes a lost move (DESIGN.md, "The barrier matrix").

use crate::marks::Mark;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use steadq::sys::{Call, Fault, FaultAction, FaultPlan};
use steadq::{JobId, JobName, Kind, Options, Queue, Reason, State};

/// What the marks say happened.
#[derive(Debug, Default)]
pub struct Expect {
    /// Enqueues that returned done.
    pub enqueued: HashSet<JobId>,
    /// Acks that returned done.
    pub acked: HashSet<JobId>,
    /// Highest attempt of a claim that returned done, per job.
    pub claimed: HashMap<JobId, u32>,
    /// Payload digests of done enqueues, where the records carry them (the power-cut rig).
    pub digests: HashMap<JobId, String>,
    /// The dependencies of done enqueues that had some.
    pub after: HashMap<JobId, Vec<JobId>>,
    /// Jobs whose last marked operation is a fail that returned done: they must be dead.
    pub failed: HashSet<JobId>,
    /// Jobs whose last marked operation is a requeue that returned done: they must not be
    /// dead.
    pub requeued: HashSet<JobId>,
    /// Keyed enqueues that returned done: the key and its job.
    pub keys: Vec<(String, JobId)>,
    /// The limits group `g` (the power-cut agent's) may have: the last one set that returned
    /// done (none marked: not checked) and one being set after it, whose write the cut left
    /// indeterminate.
    pub group_limits: Vec<u32>,
    /// Dead jobs a purge was asked to delete (`purging`): dead or gone.
    pub purging: HashSet<JobId>,
    /// Jobs a purge that returned done deleted: gone.
    pub purged: HashSet<JobId>,
    /// The receipt policies the identity file may hold: the last one set that returned done
    /// (none marked: any) and one being set after it.
    pub policies: Vec<String>,
    /// Receipts removed by compactions that returned done.
    pub compacted_receipts: u64,
    /// Queues (directories beside `q`) whose create returned done.
    pub created: Vec<String>,
    /// Job files damaged on purpose, not yet quarantined: fsck's reports of them excused.
    pub planted: HashSet<JobId>,
    /// Job files an `fsck --quarantine` that returned done moved aside.
    pub quarantined: HashSet<JobId>,
    /// Whether receipt policy `header` was set (a `setting header` mark): a receipt may be
    /// cut to its header, so its payload does not verify; fsck judges it.
    pub cut_receipts: bool,
}

/// A setting's allowed values (`Expect::policies`, `Expect::group_limits`) after a record of
/// `v`: a set that returned done (`done`) leaves `v` alone allowed; a set begun after it adds
/// `v`, since the cut may have left its write on disk. Before any set returned done the list
/// stays empty: every value is allowed.
pub fn allow_setting<T: PartialEq>(allowed: &mut Vec<T>, v: T, done: bool) {
    if done {
        *allowed = vec![v];
    } else if !allowed.is_empty() && !allowed.contains(&v) {
        allowed.push(v);
    }
}

impl Expect {
    /// Read marks (`enq ID`, `ack ID`, `claim ID ATTEMPT`, `after ID DEP,...`, `fail ID`,
    /// `requeuing ID`, `requeue ID`, `key KEY ID`; other ops are ignored), in their order.
    pub fn from_marks(marks: &[Mark]) -> Result<Expect, String> {
        let mut e = Expect::default();
        // Requeues begun (`requeuing`) with no claim of the job marked since.
        let mut requeuing = HashSet::new();
        for m in marks {
            let mut f = m.arg.split_whitespace();
            let id = || -> Result<JobId, String> {
                Err(format!("mark {}: bad job id in {:?}", m.seq, m.arg))
            };
            let parse_id = |s: Option<&str>| s.and_then(JobId::parse).map_or_else(id, Ok);
            match m.op.as_str() {
                "enq" => {
                    e.enqueued.insert(parse_id(f.next())?);
                }
                "ack" => {
                    e.acked.insert(parse_id(f.next())?);
                }
                "after" => {
                    let j = parse_id(f.next())?;
                    let deps = f
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .map(|d| parse_id(Some(d)))
                        .collect::<Result<Vec<_>, _>>()?;
                    e.after.insert(j, deps);
                }
                "claim" => {
                    let j = parse_id(f.next())?;
                    let a: u32 = f
                        .next()
                        .and_then(|a| a.parse().ok())
                        .ok_or(format!("mark {}: bad attempt", m.seq))?;
                    let slot = e.claimed.entry(j).or_default();
                    *slot = (*slot).max(a);
                    e.requeued.remove(&j);
                    requeuing.remove(&j);
                }
                "fail" => {
                    let j = parse_id(f.next())?;
                    e.failed.insert(j);
                    e.requeued.remove(&j);
                }
                // A requeue has begun: the job may be ready again, with its attempts reset.
                "requeuing" => {
                    let j = parse_id(f.next())?;
                    e.failed.remove(&j);
                    e.claimed.remove(&j);
                    requeuing.insert(j);
                }
                // Done; but another thread may have claimed the job between the requeue's
                // rename and this mark (its claim marked first): then it may be dead again.
                "requeue" => {
                    let j = parse_id(f.next())?;
                    e.failed.remove(&j);
                    if requeuing.remove(&j) {
                        e.requeued.insert(j);
                    }
                }
                // A dead job's key lapses with its purge (docs/library.md, keys): from the
                // purge's start its key may give a new job.
                "purging" => {
                    let j = parse_id(f.next())?;
                    e.keys.retain(|(_, k)| *k != j);
                    e.purging.insert(j);
                }
                "purged" => {
                    let j = parse_id(f.next())?;
                    e.purging.remove(&j);
                    e.failed.remove(&j);
                    e.purged.insert(j);
                }
                "setting" | "policy" => {
                    let p = f
                        .next()
                        .ok_or(format!("mark {}: no policy in {:?}", m.seq, m.arg))?
                        .to_string();
                    e.cut_receipts |= p == "header";
                    // The workload's queue starts with `job`, which is not marked.
                    allow_setting(&mut e.policies, p, m.op == "policy");
                }
                "compact" => {
                    let n: u64 = f
                        .next()
                        .and_then(|n| n.parse().ok())
                        .ok_or(format!("mark {}: bad count in {:?}", m.seq, m.arg))?;
                    e.compacted_receipts += n;
                }
                "create" => {
                    let d = f
                        .next()
                        .filter(|d| !d.contains('/') && !d.starts_with('.'))
                        .ok_or(format!("mark {}: bad queue name in {:?}", m.seq, m.arg))?;
                    e.created.push(d.to_string());
                }
                "planted" => {
                    e.planted.insert(parse_id(f.next())?);
                }
                "quarantined" => {
                    let j = parse_id(f.next())?;
                    e.planted.remove(&j);
                    e.quarantined.insert(j);
                }
                "key" => {
                    let key = f
                        .next()
                        .ok_or(format!("mark {}: no key in {:?}", m.seq, m.arg))?;
                    let j = parse_id(f.next())?;
                    e.keys.push((key.to_string(), j));
                }
                _ => {}
            }
        }
        Ok(e)
    }
}

/// The outcome of one verification.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Every broken invariant, one line each.
    pub violations: Vec<String>,
    /// Jobs found after recovery.
    pub jobs: usize,
    /// Jobs recovery moved.
    pub recovered: u32,
}

fn open(dir: &Path, faults: Option<std::sync::Arc<FaultPlan>>) -> Result<Queue, String> {
    let o = Options {
        faults,
        ..Options::default()
    };
    match Queue::open_with(dir, o.clone()) {
        // A crash during create: completing it is what `steadq init` (or the systemd unit's
        // ExecStartPre) does after a reboot.
        Err(e) if *e.kind() == steadq::ErrorKind::Incomplete => {
            Queue::create(dir, o).map_err(|e| format!("completing create: {e}"))
        }
        r => r.map_err(|e| format!("open: {e}")),
    }
}

/// Check the invariants on the queue at `dir` (which may be modified: recovery runs on it).
/// `crash_recovery_at`: first stop a recovery after its Nth rename, as a crash would.
pub fn verify(
    dir: &Path,
    expect: &Expect,
    crash_recovery_at: Option<u32>,
) -> Result<Verdict, String> {
    let mut v = Verdict::default();
    if let Some(n) = crash_recovery_at {
        let plan = FaultPlan::new(vec![Fault {
            call: Call::Rename,
            nth: n,
            action: FaultAction::StopAfter,
        }]);
        if let Ok(q) = open(dir, Some(plan)) {
            let _ = q.recover(); // stopped part-way: its result is not the point
        }
    }
    // A queue that cannot be opened after a crash (a torn identity file, say) is a violation,
    // not a failure of the verifier.
    let q = match open(dir, None) {
        Ok(q) => q,
        Err(e) => {
            v.violations
                .push(format!("queue unusable after the crash: {e}"));
            return Ok(v);
        }
    };
    // A crash state's leases belong to another boot (or this boot's dead processes): make all
    // of them expire now.
    q.clock().shift_boot(1 << 50);
    // And every delayed job due, so that the first pass leaves nothing for the second.
    q.clock().shift_wall(1 << 50);
    let r = q
        .recover()
        .into_result()
        .map_err(|e| format!("recover: {e}"))?;
    v.recovered = r.moved();
    let again = q
        .recover()
        .into_result()
        .map_err(|e| format!("second recover: {e}"))?;
    if again.moved() != 0 {
        v.violations.push(format!(
            "recovery not idempotent: the second pass moved {} jobs",
            again.moved()
        ));
    }
    let fsck = q.fsck().map_err(|e| format!("fsck: {e}"))?;
    let snap = Snapshot::of_queue(&q).map_err(|e| format!("snapshot: {e}"))?;
    v.jobs = snap.jobs.len();
    v.violations.extend(
        fsck.problems
            .iter()
            .filter(|p| {
                !p.path.starts_with("quarantine/")
                    && !is_torn_evidence(&p.to_string())
                    && !is_split_requeue(dir, p)
                    && !expect
                        .planted
                        .iter()
                        .any(|id| p.path.contains(&id.to_string()))
            })
            .map(|p| format!("fsck: {p}")),
    );
    v.violations.extend(check(&snap, expect));
    v.violations.extend(check_keys(&q, expect));
    v.violations.extend(check_settings(&q, expect));
    Ok(v)
}

/// Invariant 10's settings and totals: the receipt policy the identity file holds is one
/// the marks allow, and `steadq.counts` holds at least what compactions and purges that
/// returned done removed.
fn check_settings(q: &Queue, expect: &Expect) -> Vec<String> {
    let mut out = Vec::new();
    let policy = match q.receipt_policy() {
        steadq::ReceiptPolicy::Job => "job",
        steadq::ReceiptPolicy::Header => "header",
        steadq::ReceiptPolicy::None => "none",
    };
    if !expect.policies.is_empty() && !expect.policies.iter().any(|p| p == policy) {
        out.push(format!(
            "receipt policy {:?} set (returned done), but the identity file says {policy}",
            expect.policies
        ));
    }
    let (acked, dead) = (expect.compacted_receipts, expect.purged.len() as u64);
    if acked + dead > 0 {
        match q.counts() {
            Ok(c) if c.acked >= acked && c.dead >= dead => {}
            Ok(c) => out.push(format!(
                "{acked} receipts compacted and {dead} dead jobs purged (returned done), but \
                 steadq.counts says acked {} dead {}",
                c.acked, c.dead
            )),
            Err(e) => out.push(format!("steadq.counts: {e}")),
        }
    }
    out
}

/// Invariant 10's creates: every queue beside `q` under `mountpoint` whose create returned
/// done opens as it is (not completed, not refused).
pub fn check_created(mountpoint: &Path, expect: &Expect) -> Vec<String> {
    expect
        .created
        .iter()
        .filter_map(|d| {
            Queue::open(mountpoint.join(d))
                .err()
                .map(|e| format!("create of queue {d} returned done, but it does not open: {e}"))
        })
        .collect()
}

/// Invariant 9: every key of a keyed enqueue that returned done still names its job: an
/// enqueue with it is a duplicate of that job. Run last, on the recovered queue (a key that
/// fails this check enqueues a new job).
fn check_keys(q: &Queue, expect: &Expect) -> Vec<String> {
    let mut out = Vec::new();
    for (key, id) in &expect.keys {
        let Some(k) = steadq::Key::new(key) else {
            out.push(format!("key mark of {id}: bad key {key:?}"));
            continue;
        };
        let o = steadq::EnqueueOptions {
            key: Some(k),
            ..Default::default()
        };
        match q.enqueue_with(b"key check", &o) {
            Ok(steadq::Enqueued::Duplicate(d)) if d == *id => {}
            other => out.push(format!(
                "keyed enqueue of {id} (key {key}) returned done, but the key now gives {:?}",
                other.map_err(|e| e.to_string())
            )),
        }
    }
    out
}

/// Whether fsck's problem is a requeue (dead to ready) that a crash split in two: a dead
/// name and a newer generation of the same job elsewhere, one file (same inode). DESIGN.md,
/// "Moves split by a crash": listings and `dead requeue` see only the newer name, a claim
/// of it removes the dead one, and removing a receipt settles it first, so the job is never
/// run twice; `fsck` reports the pair until then. Not a violation.
pub fn is_split_requeue(dir: &Path, p: &steadq::Problem) -> bool {
    use std::os::unix::fs::MetadataExt;
    let steadq::ProblemKind::Duplicate(other) = &p.kind else {
        return false;
    };
    let (dead, newer) = match (p.path.starts_with("dead/"), other.starts_with("dead/")) {
        (true, false) => (&p.path, other),
        (false, true) => (other, &p.path),
        _ => return false,
    };
    let gen = |rel: &str| {
        let n = rel.rsplit('/').next()?;
        JobName::parse_any_queue(n)
            .ok()
            .map(|j| (j.id, j.generation))
    };
    let (Some((di, dg)), Some((ni, ng))) = (gen(dead), gen(newer)) else {
        return false;
    };
    let inode = |rel: &str| {
        std::fs::symlink_metadata(dir.join(rel))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    di == ni && ng > dg && inode(dead).is_some() && inode(dead) == inode(newer)
}

/// Whether fsck's problem (as printed) is a torn evidence log: an append the crash cut short,
/// which the next append ends. It loses nothing that returned done (the receipts it was
/// for are removed only after the append's fsync), so it is no violation; a lost evidence line
/// shows as an ack that is neither a receipt nor evidence.
pub fn is_torn_evidence(problem: &str) -> bool {
    problem.contains("torn evidence (an append cut short by a crash)")
}

/// One job file found after recovery: where, its parsed name and its payload's digest
/// (`None`: the file does not verify).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Path relative to the queue root.
    pub rel: String,
    /// The parsed name.
    pub name: JobName,
    /// SHA-256 of the payload, lower-case hex; `None` if the file does not verify.
    pub digest: Option<String>,
}

/// A queue's state after recovery, from a local directory ([`Snapshot::of_queue`]) or from a
/// device's report (the power-cut rig). [`check`] runs the invariants on it.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every job file.
    pub jobs: Vec<Found>,
    /// Ids the evidence log names (receipts compacted away).
    pub compacted: HashSet<JobId>,
}

/// A receipt policy's name in marks and records (as `steadq config` spells it).
pub fn policy_name(p: steadq::ReceiptPolicy) -> &'static str {
    match p {
        steadq::ReceiptPolicy::Job => "job",
        steadq::ReceiptPolicy::Header => "header",
        steadq::ReceiptPolicy::None => "none",
    }
}

/// Damage the job file at `path` on purpose (its last byte overwritten, then fsynced), for a
/// quarantine that both rigs' workloads check: the damage is no crash's.
///
/// # Errors
/// The open, write or fsync's error.
pub fn damage_last_byte(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    let len = f.metadata()?.len();
    f.write_all_at(b"X", len.saturating_sub(1))?;
    f.sync_all()
}

/// SHA-256 of `payload`, lower-case hex: the digest records and reports carry.
pub fn digest(payload: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(payload)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The state of a found job: its name's, but `Waiting` in `waiting/` (a waiting job keeps its
/// ready name).
pub fn state_at(f: &Found) -> State {
    if f.rel.starts_with("waiting/") {
        State::Waiting
    } else {
        state_of(&f.name)
    }
}

/// The state a name puts a job in.
pub fn state_of(name: &JobName) -> State {
    match name.kind {
        Kind::Ready => State::Ready,
        Kind::Leased(_) => State::Leased,
        Kind::Delayed { .. } => State::Delayed,
        Kind::Dead { .. } => State::Dead,
        Kind::Receipt { .. } => State::Acked,
    }
}

impl Snapshot {
    /// Every job of `q` with its digest, and the ids in its evidence log.
    pub fn of_queue(q: &Queue) -> Result<Snapshot, String> {
        let mut s = Snapshot::default();
        for l in q.list(None).map_err(|e| format!("list: {e}"))? {
            s.jobs.push(Found {
                rel: l.rel_path(q.id()),
                name: l.name,
                digest: q.read_job(&l).ok().map(|(_, p)| digest(&p)),
            });
        }
        s.compacted = compacted(q.root());
        Ok(s)
    }
}

/// The crash invariants on a recovered queue's snapshot; one line per violation.
///
/// 1. every enqueue that returned done is there once (or acked and compacted), verifies, is
///    not dead as corrupt, and has the payload it was enqueued with (when the digest is known);
/// 2. every ack that returned done is a receipt, and the job is nowhere else;
/// 3. no job is in two places, and no lease survives recovery;
/// 4. attempts never go down;
/// 5. a fail that returned done left the job dead, a requeue that returned done left it
///    anything but dead ([`Expect::failed`], [`Expect::requeued`]).
pub fn check(snap: &Snapshot, expect: &Expect) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_id: HashMap<JobId, Vec<&Found>> = HashMap::new();
    for f in &snap.jobs {
        by_id.entry(f.name.id).or_default().push(f);
    }
    let mut ids: Vec<&JobId> = by_id.keys().collect();
    ids.sort_by_key(|id| id.to_string());
    for id in ids {
        let fs = &by_id[id];
        if fs.len() > 1 {
            let places: Vec<&str> = fs.iter().map(|f| f.rel.as_str()).collect();
            out.push(format!("job {id} in {} places: {places:?}", fs.len()));
        }
        if fs.iter().any(|f| state_of(&f.name) == State::Leased) {
            out.push(format!("job {id} still leased after recovery"));
        }
    }
    for id in sorted(&expect.enqueued) {
        match by_id.get(id).map(|v| v.as_slice()) {
            // Gone with an evidence line: acked and compacted (an ack by `steadq work` may
            // be compacted before its record arrives).
            None | Some([]) => {
                if !snap.compacted.contains(id)
                    && !expect.purging.contains(id)
                    && !expect.purged.contains(id)
                {
                    out.push(format!(
                        "enqueue of {id} returned done, but the job is gone"
                    ));
                }
            }
            Some([f, ..]) => {
                if matches!(f.name.kind, Kind::Dead { reason } if reason == Reason::CORRUPT) {
                    out.push(format!(
                        "enqueue of {id} returned done, but its file is corrupt ({})",
                        f.rel
                    ));
                } else if f.digest.is_none()
                    && !(expect.cut_receipts && state_of(&f.name) == State::Acked)
                {
                    out.push(format!("job {id}: {} does not verify", f.rel));
                } else if let Some(want) = expect.digests.get(id) {
                    if f.digest.as_ref() != Some(want) {
                        out.push(format!(
                            "job {id}: payload digest differs from the enqueued one"
                        ));
                    }
                }
            }
        }
    }
    for id in sorted(&expect.acked) {
        match by_id.get(id).map(|v| v.as_slice()) {
            Some([f]) if state_of(&f.name) == State::Acked => {}
            None if snap.compacted.contains(id) => {}
            other => out.push(format!(
                "ack of {id} returned done, but the job is {:?}",
                other.map(|fs| fs.iter().map(|f| state_of(&f.name)).collect::<Vec<_>>())
            )),
        }
    }
    out.extend(check_dependencies(snap, expect, &by_id));
    for id in sorted(&expect.failed) {
        let states: Vec<State> = by_id
            .get(id)
            .map(|fs| fs.iter().map(|f| state_of(&f.name)).collect())
            .unwrap_or_default();
        let purging = expect.purging.contains(id) && states.is_empty();
        if states != [State::Dead] && !purging {
            out.push(format!(
                "fail of {id} returned done, but the job is {states:?}"
            ));
        }
    }
    for id in sorted(&expect.requeued) {
        if let Some(fs) = by_id.get(id) {
            if fs.iter().any(|f| state_of(&f.name) == State::Dead) {
                out.push(format!(
                    "requeue of {id} returned done, but the job is dead"
                ));
            }
        }
    }
    for id in sorted(&expect.purged) {
        if let Some(fs) = by_id.get(id) {
            out.push(format!(
                "purge of {id} returned done, but the job is {:?}",
                fs.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>()
            ));
        }
    }
    for id in sorted(&expect.quarantined) {
        if let Some(fs) = by_id.get(id) {
            out.push(format!(
                "fsck --quarantine moved {id} aside (returned done), but it is at {:?}",
                fs.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>()
            ));
        }
    }
    let mut claimed: Vec<(&JobId, &u32)> = expect.claimed.iter().collect();
    claimed.sort_by_key(|(id, _)| id.to_string());
    for (id, &a) in claimed {
        if let Some([f, ..]) = by_id.get(id).map(|v| v.as_slice()) {
            // Requeue (dead -> ready) lowers attempts: its `requeuing` mark drops the claims
            // before it. The other op that does, ClaimUnreadable, follows only a claim that
            // returned not done (never marked), so a marked claim's attempt still bounds the
            // job's from below.
            if f.name.attempt < a {
                out.push(format!(
                    "job {id}: attempt went down from {a} to {}",
                    f.name.attempt
                ));
            }
        }
    }
    out
}

/// Invariant 6: the marked dependencies against where each job is after recovery.
fn check_dependencies(
    snap: &Snapshot,
    expect: &Expect,
    by_id: &HashMap<JobId, Vec<&Found>>,
) -> Vec<String> {
    let state = |id: &JobId| -> Option<State> {
        match by_id.get(id).map(|v| v.as_slice()) {
            Some([f, ..]) => Some(state_at(f)),
            _ if snap.compacted.contains(id) => Some(State::Acked),
            _ => None,
        }
    };
    let mut out = Vec::new();
    let mut ids: Vec<&JobId> = expect.after.keys().collect();
    ids.sort_by_key(|id| id.to_string());
    for id in ids {
        let deps = &expect.after[id];
        let acked = deps.iter().all(|d| state(d) == Some(State::Acked));
        let dead = deps.iter().find(|d| state(d) == Some(State::Dead));
        match (state(id), acked, dead) {
            (Some(State::Waiting), true, _) => out.push(format!(
                "job {id} still waits after recovery, its dependencies {deps:?} all acked"
            )),
            (Some(State::Ready | State::Leased | State::Acked | State::Delayed), false, _) => out
                .push(format!(
                    "job {id} left waiting/ before its dependencies were acked: {:?}",
                    deps.iter().map(|d| (d, state(d))).collect::<Vec<_>>()
                )),
            (Some(s), _, Some(d)) if s != State::Dead => out.push(format!(
                "job {id} is {s:?} after recovery, its dependency {d} dead-lettered"
            )),
            _ => {}
        }
    }
    out
}

fn sorted(ids: &HashSet<JobId>) -> Vec<&JobId> {
    let mut v: Vec<&JobId> = ids.iter().collect();
    v.sort_by_key(|id| id.to_string());
    v
}

/// The ids the evidence logs at the queue root `dir` name (receipts compacted away, or
/// removed under receipt policy `none`): `evidence.log` and the rotated
/// `evidence.<hex>.log` files.
pub fn compacted(dir: &Path) -> HashSet<JobId> {
    let mut names = vec![steadq::EVIDENCE_FILE.to_string()];
    if let Ok(d) = std::fs::read_dir(dir) {
        names.extend(d.flatten().filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            (n != steadq::EVIDENCE_FILE && n.starts_with("evidence.") && n.ends_with(".log"))
                .then_some(n)
        }));
    }
    names
        .iter()
        .filter_map(|n| std::fs::read_to_string(dir.join(n)).ok())
        .flat_map(|s| {
            s.lines()
                .filter_map(|l| l.split(' ').nth(1).and_then(JobId::parse))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Each invariant on a hand-made queue tree: one tree that keeps it, one that breaks it.
#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    struct Tree(PathBuf, Queue);

    impl Tree {
        fn new(name: &str) -> Tree {
            let p =
                std::env::temp_dir().join(format!("crashlab-inv-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            let q = Queue::create(&p, Options::default()).unwrap();
            Tree(p, q)
        }
        fn path_of(&self, id: JobId) -> PathBuf {
            let l = self.1.find(id).unwrap();
            self.0.join(l.rel_path(self.1.id()))
        }
        fn verify(&self, e: &Expect) -> Vec<String> {
            verify(&self.0, e, None).unwrap().violations
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn enq(t: &Tree, e: &mut Expect, payload: &[u8]) -> JobId {
        let id = t.1.enqueue(payload).unwrap();
        e.enqueued.insert(id);
        e.digests.insert(id, digest(payload));
        id
    }

    fn has(v: &[String], text: &str) -> bool {
        v.iter().any(|x| x.contains(text))
    }

    #[test]
    fn every_done_enqueue_is_there_and_verifies() {
        let t = Tree::new("enq");
        let mut e = Expect::default();
        let a = enq(&t, &mut e, b"first");
        assert_eq!(t.verify(&e), Vec::<String>::new());
        // Broken: the file is gone.
        std::fs::remove_file(t.path_of(a)).unwrap();
        let v = t.verify(&e);
        assert!(has(&v, "returned done, but the job is gone"), "{v:?}");
        // Broken: a file whose payload changed (same length, so only the checksum tells).
        let t = Tree::new("enq2");
        let mut e = Expect::default();
        let b = enq(&t, &mut e, b"second");
        let p = t.path_of(b);
        let mut bytes = std::fs::read(&p).unwrap();
        *bytes.last_mut().unwrap() ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
        assert!(!t.verify(&e).is_empty());
    }

    #[test]
    fn a_reported_payload_must_match_the_enqueued_digest() {
        let t = Tree::new("digest");
        let mut e = Expect::default();
        let a = enq(&t, &mut e, b"payload");
        assert!(t.verify(&e).is_empty());
        e.digests.insert(a, digest(b"another payload"));
        let v = t.verify(&e);
        assert!(has(&v, "payload digest differs"), "{v:?}");
    }

    #[test]
    fn every_done_ack_is_a_receipt() {
        let t = Tree::new("ack");
        let mut e = Expect::default();
        let a = enq(&t, &mut e, b"acked");
        let b = enq(&t, &mut e, b"not acked");
        let l =
            t.1.claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(60)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        // Either may be claimed first (oldest-first holds only within a shard).
        let (a, b) = if l.id() == a { (a, b) } else { (b, a) };
        assert_eq!(l.id(), a);
        l.ack().unwrap();
        e.acked.insert(a);
        assert!(t.verify(&e).is_empty());
        // Broken: an ack said done for a job that is still ready (its rename was lost).
        e.acked.insert(b);
        let v = t.verify(&e);
        assert!(
            has(
                &v,
                &format!("ack of {b} returned done, but the job is Some([Ready])")
            ),
            "{v:?}"
        );
    }

    #[test]
    fn no_job_is_in_two_places() {
        let t = Tree::new("two");
        let mut e = Expect::default();
        let a = enq(&t, &mut e, b"once");
        let ready = t.path_of(a);
        let l =
            t.1.claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(60)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        l.ack().unwrap();
        e.acked.insert(a);
        assert!(t.verify(&e).is_empty());
        // Broken: the receipt and the ready file both exist (a copy, as a torn move would leave).
        let receipt = t.path_of(a);
        let snap = Snapshot::of_queue(&t.1).unwrap();
        std::fs::copy(&receipt, &ready).unwrap();
        // A local queue lists the job once; fsck sees the second entry.
        let v = t.verify(&e);
        assert!(has(&v, "the same job id is also at"), "{v:?}");
        // A device's report lists every entry: the snapshot holds both.
        let mut two = snap.clone();
        two.jobs.push(Found {
            rel: "ready/00/copy".into(),
            ..snap.jobs[0].clone()
        });
        assert!(check(&snap, &e).is_empty());
        let v = check(&two, &e);
        assert!(has(&v, &format!("job {a} in 2 places")), "{v:?}");
    }

    #[test]
    fn attempts_never_go_down() {
        let t = Tree::new("attempt");
        let mut e = Expect::default();
        let a = enq(&t, &mut e, b"retried");
        let l =
            t.1.claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(60)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        e.claimed.insert(a, l.attempt());
        l.nack(Duration::ZERO).unwrap();
        assert_eq!(e.claimed[&a], 1);
        assert!(t.verify(&e).is_empty());
        // Broken: a claim with attempt 2 returned done, but the job says 1.
        e.claimed.insert(a, 2);
        let v = t.verify(&e);
        assert!(has(&v, "attempt went down from 2 to 1"), "{v:?}");
    }

    #[test]
    fn fsck_must_be_clean() {
        let t = Tree::new("fsck");
        let mut e = Expect::default();
        let a = enq(&t, &mut e, b"job");
        assert!(t.verify(&e).is_empty());
        // Broken: a stray file in a shard directory.
        let shard = t.path_of(a).parent().unwrap().to_path_buf();
        std::fs::write(shard.join("stray"), b"x").unwrap();
        let v = t.verify(&e);
        assert!(v.iter().any(|x| x.starts_with("fsck: ")), "{v:?}");
    }

    /// A requeue split by a crash (the dead name beside the newer ready name, one file) is
    /// accepted; the same pair as two files, or the dead name the newer, is a violation.
    #[test]
    fn a_split_requeue_is_accepted_and_only_that() {
        let t = Tree::new("split-requeue");
        let mut e = Expect::default();
        let a = enq(&t, &mut e, b"job");
        // A generation above 0 (claimed and given back), as a requeued job has.
        t.1.claim().unwrap().unwrap().nack(Duration::ZERO).unwrap();
        let ready = t.path_of(a);
        let l = t.1.find(a).unwrap();
        // The dead name the requeue came from: generation below the ready one's.
        let dead_name = JobName {
            generation: l.name.generation.saturating_sub(1),
            kind: Kind::Dead {
                reason: Reason::FAILED,
            },
            ..l.name
        };
        let bucket = t.0.join("dead/0000000000000001");
        std::fs::create_dir_all(&bucket).unwrap();
        let dead = bucket.join(dead_name.format(t.1.id()).to_string());
        let rel = |p: &Path| p.strip_prefix(&t.0).unwrap().to_string_lossy().into_owned();
        let problem = |a: &Path, b: &Path| steadq::Problem {
            path: rel(a),
            kind: steadq::ProblemKind::Duplicate(rel(b)),
            quarantined: false,
        };
        // One file under both names, the ready one newer: a split requeue.
        std::fs::hard_link(&ready, &dead).unwrap();
        assert!(is_split_requeue(&t.0, &problem(&dead, &ready)));
        assert!(is_split_requeue(&t.0, &problem(&ready, &dead)));
        assert!(
            t.verify(&e).iter().all(|v| !v.contains("same job id")),
            "{:?}",
            t.verify(&e)
        );
        // Two files: a real duplicate.
        std::fs::remove_file(&dead).unwrap();
        std::fs::copy(&ready, &dead).unwrap();
        assert!(!is_split_requeue(&t.0, &problem(&dead, &ready)));
        assert!(t.verify(&e).iter().any(|v| v.starts_with("fsck: ")));
    }

    #[test]
    fn a_snapshot_with_a_lease_after_recovery_is_a_violation() {
        let t = Tree::new("lease");
        let mut e = Expect::default();
        enq(&t, &mut e, b"leased");
        let _l =
            t.1.claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(600)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        let s = Snapshot::of_queue(&t.1).unwrap();
        assert_eq!(s.jobs.len(), 1);
        let v = check(&s, &e);
        assert!(has(&v, "still leased after recovery"), "{v:?}");
        // The same tree after recovery (verify expires every lease first) keeps it.
        drop(_l);
        assert!(t.verify(&e).is_empty());
    }

    fn lease(t: &Tree) -> steadq::Lease {
        t.1.claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(60)),
            ..Default::default()
        })
        .unwrap()
        .unwrap()
    }

    fn marks(lines: &[(&str, String)]) -> Vec<Mark> {
        lines
            .iter()
            .enumerate()
            .map(|(i, (op, arg))| Mark::new(i as u64, op, arg))
            .collect()
    }

    #[test]
    fn a_done_fail_leaves_the_job_dead_until_its_requeue_begins() {
        let t = Tree::new("fail");
        let a = t.1.enqueue(b"failed").unwrap();
        let l = lease(&t);
        let m = marks(&[
            ("enq", a.to_string()),
            ("claim", format!("{a} 1")),
            ("fail", a.to_string()),
        ]);
        let e = Expect::from_marks(&m).unwrap();
        assert_eq!(e.failed, HashSet::from([a]));
        // Broken: the fail's rename was lost, the lease expired back to ready.
        l.nack(Duration::ZERO).unwrap();
        let v = t.verify(&e);
        assert!(
            has(
                &v,
                &format!("fail of {a} returned done, but the job is [Ready]")
            ),
            "{v:?}"
        );
        // Kept: once its requeue began (`requeuing`), ready is fine, and attempt 0 too.
        let mut m2 = m.clone();
        m2.push(Mark::new(3, "requeuing", &a.to_string()));
        let e2 = Expect::from_marks(&m2).unwrap();
        assert!(e2.failed.is_empty() && e2.claimed.is_empty());
        assert_eq!(t.verify(&e2), Vec::<String>::new());
        // Kept: really dead.
        lease(&t).fail(Reason::FAILED).unwrap();
        assert_eq!(t.verify(&e), Vec::<String>::new());
    }

    #[test]
    fn a_done_requeue_leaves_the_job_out_of_dead_until_a_later_claim() {
        let t = Tree::new("requeue");
        let a = t.1.enqueue(b"requeued").unwrap();
        lease(&t).fail(Reason::FAILED).unwrap();
        let m = marks(&[
            ("enq", a.to_string()),
            ("claim", format!("{a} 1")),
            ("fail", a.to_string()),
            ("requeuing", a.to_string()),
            ("requeue", a.to_string()),
        ]);
        let e = Expect::from_marks(&m).unwrap();
        assert_eq!(e.requeued, HashSet::from([a]));
        assert!(e.failed.is_empty());
        // Broken: the requeue's rename was lost, the job is still dead.
        let v = t.verify(&e);
        assert!(
            has(
                &v,
                &format!("requeue of {a} returned done, but the job is dead")
            ),
            "{v:?}"
        );
        // Kept: requeued, attempt 0 (below the claim's 1, which the requeue dropped).
        assert_eq!(t.1.requeue_dead(Some(a)).requeued, 1);
        assert_eq!(t.verify(&e), Vec::<String>::new());
        // A later claim (and a fail in flight): dead is allowed again.
        let mut m2 = m.clone();
        m2.push(Mark::new(5, "claim", &format!("{a} 1")));
        let e2 = Expect::from_marks(&m2).unwrap();
        assert!(e2.requeued.is_empty());
        lease(&t).fail(Reason::FAILED).unwrap();
        assert_eq!(t.verify(&e2), Vec::<String>::new());
        // The same when another thread's claim was marked before the requeue's own mark.
        let mut m3 = m[..4].to_vec();
        m3.push(Mark::new(4, "claim", &format!("{a} 1")));
        m3.push(Mark::new(5, "requeue", &a.to_string()));
        let e3 = Expect::from_marks(&m3).unwrap();
        assert!(e3.requeued.is_empty() && e3.failed.is_empty());
        assert_eq!(e3.claimed.get(&a), Some(&1));
        assert_eq!(t.verify(&e3), Vec::<String>::new());
    }

    #[test]
    fn a_done_purge_leaves_the_job_gone() {
        let t = Tree::new("purge");
        let a = t.1.enqueue(b"purged").unwrap();
        lease(&t).fail(Reason::FAILED).unwrap();
        let mut m = marks(&[
            ("enq", a.to_string()),
            ("claim", format!("{a} 1")),
            ("fail", a.to_string()),
            ("purging", a.to_string()),
        ]);
        // Begun: its key (had it one) may lapse from here.
        let mut keyed = m.clone();
        keyed.insert(1, Mark::new(9, "key", &format!("k-1 {a}")));
        assert_eq!(Expect::from_marks(&keyed[..2]).unwrap().keys.len(), 1);
        assert!(Expect::from_marks(&keyed).unwrap().keys.is_empty());
        // Begun: dead is fine.
        assert_eq!(
            t.verify(&Expect::from_marks(&m).unwrap()),
            Vec::<String>::new()
        );
        // Broken: the purge returned done, the job is still dead.
        m.push(Mark::new(4, "purged", &a.to_string()));
        let e = Expect::from_marks(&m).unwrap();
        let v = t.verify(&e);
        assert!(
            has(&v, &format!("purge of {a} returned done, but the job is")),
            "{v:?}"
        );
        // Kept: gone (and counted).
        assert_eq!(t.1.purge_dead().unwrap(), 1);
        assert_eq!(t.verify(&e), Vec::<String>::new());
    }

    #[test]
    fn a_done_policy_change_is_in_the_identity_file() {
        let t = Tree::new("policy");
        let set = marks(&[("setting", "none".into())]);
        // Begun only: the old policy is fine.
        assert_eq!(
            t.verify(&Expect::from_marks(&set).unwrap()),
            Vec::<String>::new()
        );
        let mut m = set.clone();
        m.push(Mark::new(1, "policy", "none"));
        let e = Expect::from_marks(&m).unwrap();
        let v = t.verify(&e);
        assert!(has(&v, "but the identity file says job"), "{v:?}");
        t.1.set_receipt_policy(steadq::ReceiptPolicy::None, None)
            .unwrap();
        assert_eq!(t.verify(&e), Vec::<String>::new());
        // A later change begun: either is fine.
        m.push(Mark::new(2, "setting", "header"));
        assert_eq!(
            t.verify(&Expect::from_marks(&m).unwrap()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_done_compaction_is_counted() {
        let t = Tree::new("counts");
        let a = t.1.enqueue(b"acked").unwrap();
        lease(&t).ack().unwrap();
        let mut m = marks(&[("enq", a.to_string()), ("ack", a.to_string())]);
        m.push(Mark::new(2, "compact", "1"));
        let e = Expect::from_marks(&m).unwrap();
        // Broken: the receipt is gone, the counts file says nothing of it.
        let receipt = t.path_of(a);
        assert_eq!(t.1.compact(Duration::ZERO).unwrap().removed, 1);
        assert_eq!(t.verify(&e), Vec::<String>::new());
        std::fs::remove_file(t.0.join("steadq.counts")).unwrap();
        let v = t.verify(&e);
        assert!(
            has(&v, "1 receipts compacted and 0 dead jobs purged"),
            "{v:?}"
        );
        assert!(!receipt.exists());
    }

    #[test]
    fn a_done_create_opens() {
        let t = Tree::new("create");
        let e = Expect::from_marks(&marks(&[("create", "q2".into())])).unwrap();
        let v = check_created(&t.0, &e);
        assert!(
            has(&v, "create of queue q2 returned done, but it does not open"),
            "{v:?}"
        );
        Queue::create(t.0.join("q2"), Options::default()).unwrap();
        assert_eq!(check_created(&t.0, &e), Vec::<String>::new());
    }

    #[test]
    fn a_planted_job_is_excused_until_quarantined_then_must_be_gone() {
        let t = Tree::new("quarantine");
        let a = t.1.enqueue(b"damaged").unwrap();
        let p = t.path_of(a);
        let mut bytes = std::fs::read(&p).unwrap();
        *bytes.last_mut().unwrap() ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
        let mut m = marks(&[("planted", a.to_string())]);
        assert_eq!(
            t.verify(&Expect::from_marks(&m).unwrap()),
            Vec::<String>::new()
        );
        // Broken: quarantined (returned done), but the file is still in ready.
        m.push(Mark::new(1, "quarantined", &a.to_string()));
        let e = Expect::from_marks(&m).unwrap();
        let v = t.verify(&e);
        assert!(
            has(&v, &format!("fsck --quarantine moved {a} aside")),
            "{v:?}"
        );
        assert!(v.iter().any(|x| x.starts_with("fsck: ")), "{v:?}");
        t.1.fsck_quarantine().unwrap();
        assert_eq!(t.verify(&e), Vec::<String>::new());
    }

    #[test]
    fn a_done_keyed_enqueue_keeps_its_key() {
        let t = Tree::new("key");
        let key = steadq::Key::new("k-1").unwrap();
        let o = steadq::EnqueueOptions {
            key: Some(key),
            ..Default::default()
        };
        let a = t.1.enqueue_with(b"keyed", &o).unwrap().id();
        let m = marks(&[("enq", a.to_string()), ("key", format!("k-1 {a}"))]);
        let e = Expect::from_marks(&m).unwrap();
        assert_eq!(e.keys, vec![("k-1".to_string(), a)]);
        assert_eq!(t.verify(&e), Vec::<String>::new());
        // Broken: the key entry was lost (its job is there): the key gives a new job.
        let keys = t.0.join(steadq::KEYS_DIR);
        for f in std::fs::read_dir(&keys).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        let v = t.verify(&e);
        assert!(
            has(
                &v,
                &format!(
                    "keyed enqueue of {a} (key k-1) returned done, but the key now gives Ok(New("
                )
            ),
            "{v:?}"
        );
    }
}
