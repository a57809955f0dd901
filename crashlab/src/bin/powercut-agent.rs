//! The power-cut rig's device agent (static; run at every boot by `powercut-agent.service` on a
//! Raspberry Pi, or by the virtual board's guest init). It
//! 1. opens the queue (creating it on the first boot) and runs recovery, timed;
//! 2. reports the queue's whole state to the controller: every entry's path, each job's
//!    payload digest (`bad` if the file does not verify), fsck's problems;
//! 3. runs `--threads` loops of producer and worker in this process, sharing one queue handle
//!    (so their barriers are shared by group commit), and `steadq work` workers as a child if
//!    `--steadq` is given, and sends every operation that returned done to the controller,
//!    waiting for its `ok` (recorded and fsynced) before going on.
//!
//! Every kind of operation runs: enqueue, claim, renew, ack, nack (now, or in a day), fail
//! then requeue of the dead job, a lease left to expire then recovery, compaction of receipts;
//! one enqueue in five waits for the loop's previous job (`waiting/`, moved by that job's ack
//! or dead with it), one in three is in group `g` (two of its jobs may be leased at once),
//! one in five is at another priority level, one in five keyed, one in ten a batch of two;
//! one loop in twenty sets the group's limit.
//! `--break NAME` removes one named barrier (`steadq::sys::Barrier`, through the fault plan)
//! for the whole run: the negative control the rig must catch. It runs one loop and no
//! `steadq work`, so no other thread's or process's barrier covers the removed one; when the
//! barrier is one only some kind of enqueue (or the limit) reaches, every loop does that kind
//! (`Lean`), so every cut after an enqueue comes after one that reached it.
//!
//! It runs until the power goes. Records: see `crashlab::record`.

use argh::FromArgs;
use crashlab::invariants::{digest, policy_name};
use crashlab::record::{read_record, Boot, Op};
use crashlab::rng::Rng;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use steadq::sys::{Barrier, FaultPlan};
use steadq::{JobId, Options, Queue};

#[derive(FromArgs)]
/// SteadQ power-cut agent: recover, report, work, confirm every done operation.
struct Args {
    /// queue directory (created on the first boot)
    #[argh(option)]
    queue: PathBuf,
    /// controller: tcp:HOST:PORT, or serial:/dev/ttyS1 (a raw serial line)
    #[argh(option)]
    connect: String,
    /// static steadq binary: also run `steadq work` on the queue
    #[argh(option)]
    steadq: Option<PathBuf>,
    /// command `steadq work` runs per job (default: sleep 0.3)
    #[argh(option, default = "String::from(\"sleep 0.3\")")]
    work_cmd: String,
    /// loops of enqueue then claim and settle that share this process's queue handle
    /// (default 3; with --break 1, so no other thread's barrier covers the removed one)
    #[argh(option, default = "3")]
    threads: u32,
    /// remove these barriers (names of `steadq::sys::Barrier` separated by `,` or `+`, or
    /// `ack-barriers` for ack-dest,ack-source) for the whole run: a negative control
    #[argh(option, long = "break")]
    break_barriers: Option<String>,
    /// three payloads in four of 16 to 255 bytes, so that their job files fit in a 512-byte
    /// inode (the `ext4-inline` flavour: `mkfs.ext4 -I 512 -O inline_data`); the fourth of
    /// the default 64 to 8,192
    #[argh(switch)]
    small: bool,
    /// time the filesystem mount took at boot, ms, if the boot script measured it
    /// (default: $CRASHLAB_MOUNT_MS, else 0)
    #[argh(option)]
    mount_ms: Option<u64>,
}

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("powercut-agent: {what}: {e}");
    println!("CRASHLAB_AGENT_FAIL {what}: {e}");
    exit(1)
}

/// The link to the controller: each line waits for the controller's `ok`.
struct Link {
    w: Box<dyn Write + Send>,
    r: BufReader<Box<dyn Read + Send>>,
    seq: u64,
}

impl Link {
    fn connect(spec: &str) -> Link {
        let deadline = Instant::now() + Duration::from_secs(120);
        if let Some(dev) = spec.strip_prefix("serial:") {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(dev)
                .unwrap_or_else(|e| die(dev, e));
            let r = f.try_clone().unwrap_or_else(|e| die(dev, e));
            return Link::new(Box::new(f), Box::new(r));
        }
        let addr = spec.strip_prefix("tcp:").unwrap_or(spec);
        loop {
            match TcpStream::connect(addr) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let r = s.try_clone().unwrap_or_else(|e| die("socket", e));
                    return Link::new(Box::new(s), Box::new(r));
                }
                Err(e) if Instant::now() > deadline => die(addr, e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    fn new(w: Box<dyn Write + Send>, r: Box<dyn Read + Send>) -> Link {
        Link {
            w,
            r: BufReader::new(r),
            seq: 0,
        }
    }

    /// Send a line the controller does not answer.
    fn say(&mut self, line: &str) {
        self.w
            .write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| die("send", e));
    }

    /// Send a line and wait until the controller has it on disk.
    fn confirm(&mut self, line: &str) {
        self.say(line);
        self.w.flush().unwrap_or_else(|e| die("send", e));
        match read_record(&mut self.r) {
            Ok(Some(a)) if a.starts_with("ok") => {}
            other => die("controller", format!("no ok for {line:?}: {other:?}")),
        }
    }

    fn op(&mut self, what: &str, id: JobId, arg: String) {
        // Before the record: a cut right after it must not hide the skips it made.
        if let Some(s) = SKIPS.get() {
            s.note();
        }
        self.seq += 1;
        let line = Op {
            seq: self.seq,
            what: what.into(),
            id,
            arg,
        }
        .line();
        self.confirm(&line);
    }
}

fn options(faults: Option<Arc<FaultPlan>>) -> Options {
    Options {
        shards: 2,
        faults,
        ..Options::default()
    }
}

fn open(dir: &Path, faults: Option<Arc<FaultPlan>>) -> Queue {
    let o = || options(faults.clone());
    if !dir.join(steadq::IDENTITY_FILE).exists() {
        let q = Queue::create(dir, o()).unwrap_or_else(|e| die("create", e));
        // The group a third of the jobs are in, two of them leased at once (slots under
        // groups/g/, never fsynced: every lease of an earlier boot is expired at recovery).
        q.set_group_limit(&group(), Some(2))
            .unwrap_or_else(|e| die("set_group_limit", e));
        return q;
    }
    match Queue::open_with(dir, o()) {
        // A cut during the first boot's create: completing it is what `steadq init` does.
        Err(e) if *e.kind() == steadq::ErrorKind::Incomplete => {
            Queue::create(dir, o()).unwrap_or_else(|e| die("complete create", e))
        }
        r => r.unwrap_or_else(|e| die("open", e)),
    }
}

/// The workload's group.
fn group() -> steadq::GroupName {
    steadq::GroupName::new("g").unwrap_or_else(|| die("group", "g"))
}

/// The barriers `--break` names; exits 2 naming an unknown one.
fn barriers(spec: &str) -> Vec<Barrier> {
    let mut out = Vec::new();
    for n in spec.split([',', '+']).filter(|n| !n.is_empty()) {
        match n {
            "ack-barriers" => out.extend([Barrier::AckDest, Barrier::AckSource]),
            // No barrier removed, the admin step in every loop: the control run of `Admin`.
            "admin" => {}
            n => match Barrier::parse(n) {
                Some(b) => out.push(b),
                None => {
                    let all: Vec<&str> = Barrier::ALL.iter().map(|b| b.name()).collect();
                    eprintln!(
                        "powercut-agent: --break: unknown barrier {n:?} (known: ack-barriers, {})",
                        all.join(", ")
                    );
                    exit(2)
                }
            },
        }
    }
    out
}

/// Every entry under `root`, relative, sorted (directories are walked, not listed).
fn walk(root: &Path, rel: &str, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    let mut names: Vec<(String, bool)> = rd
        .filter_map(|e| e.ok())
        .map(|e| {
            let dir = e.file_type().is_ok_and(|t| t.is_dir());
            (e.file_name().to_string_lossy().into_owned(), dir)
        })
        .collect();
    names.sort();
    for (n, dir) in names {
        let p = if rel.is_empty() {
            n
        } else {
            format!("{rel}/{n}")
        };
        if dir {
            walk(root, &p, out);
        } else {
            out.push(p);
        }
    }
}

fn report(link: &mut Link, q: &Queue, boot: &Boot) {
    link.say(&boot.line());
    let mut digests = HashMap::new();
    for l in q.list(None).unwrap_or_else(|e| die("list", e)) {
        // A receipt cut to its header (policy header) has no payload to digest: `bad`.
        let d = match q.read_job(&l) {
            Ok((h, p)) if p.len() as u64 == h.payload_len => digest(&p),
            _ => "bad".into(),
        };
        digests.insert(l.rel_path(q.id()), d);
    }
    let mut entries = Vec::new();
    walk(q.root(), "", &mut entries);
    for e in &entries {
        let d = digests.get(e).map_or("-", String::as_str);
        link.say(&format!("entry {e} {d}"));
    }
    let mut compacted: Vec<String> = crashlab::invariants::compacted(q.root())
        .iter()
        .map(|id| id.to_string())
        .collect();
    compacted.sort();
    for id in compacted {
        link.say(&format!("evidence {id}"));
    }
    // The group's limit as a claim reads it (`unreadable`: the limits file does not decode).
    let limit = match q.group_limits() {
        Ok(g) => g
            .iter()
            .find(|(n, _)| *n == group())
            .map_or("none".to_string(), |(_, m)| m.to_string()),
        Err(_) => "unreadable".to_string(),
    };
    link.say(&format!("limit {limit}"));
    link.say(&format!("policy {}", policy_name(q.receipt_policy())));
    match q.counts() {
        Ok(c) => link.say(&format!("counts {} {}", c.acked, c.dead)),
        Err(_) => link.say("counts unreadable"),
    }
    // The queues the admin step created beside this one, and whether each opens.
    let parent = q.root().parent().map(Path::to_path_buf).unwrap_or_default();
    let mut beside: Vec<String> = std::fs::read_dir(&parent)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("q2-"))
                .collect()
        })
        .unwrap_or_default();
    beside.sort();
    for name in beside {
        let how = match Queue::open(parent.join(&name)) {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("{:?}", e.kind()).replace(' ', "_"),
        };
        link.say(&format!("created {name} {how}"));
    }
    for p in q.fsck().unwrap_or_else(|e| die("fsck", e)).problems {
        link.say(&format!("fsck {p}"));
    }
    link.confirm(&format!("report {}", entries.len()));
}

/// `steadq work` on the queue; its per-job lines on stderr become claim and ack records.
fn spawn_work(bin: &Path, dir: &Path, cmd: &str, link: Arc<Mutex<Link>>) {
    let mut c = Command::new(bin)
        .arg("work")
        .arg(dir)
        .args(["--lease", "20s", "--backoff", "1s", "--", "sh", "-c", cmd])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| die("steadq work", e));
    let err = c.stderr.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            // "job <id> attempt <a>/<max>: exit 0, acked (12 ms)"
            let Some((id, a)) = work_line(&line) else {
                continue;
            };
            let mut l = link.lock().unwrap_or_else(|p| p.into_inner());
            l.op("claim", id, a.to_string());
            if line.contains(", acked (") {
                l.op("ack", id, String::new());
            }
        }
        let _ = c.wait();
    });
}

fn work_line(line: &str) -> Option<(JobId, u32)> {
    let mut f = line.strip_prefix("job ")?.split(' ');
    let id = JobId::parse(f.next()?)?;
    if f.next()? != "attempt" {
        return None;
    }
    let a = f.next()?.split('/').next()?.parse().ok()?;
    Some((id, a))
}

/// How many times the removed barriers were asked for so far, printed on the console when
/// it changes (`CRASHLAB_AGENT_SKIPPED <name>=<n> ...`): a negative control that was not
/// caught says whether its barrier was reached at all.
struct Skips {
    plan: Option<Arc<FaultPlan>>,
    broken: Vec<Barrier>,
    last: Mutex<u64>,
    /// The kind of enqueue every loop makes while the removed barrier is one only that kind
    /// reaches.
    lean: Lean,
}

/// The kind of operation a removed barrier is reached by, when only some operations reach
/// it: with `--break` of such a barrier every enqueue (or loop) is of that kind, so that
/// each cut comes right after one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lean {
    /// Any barrier of the plain lifecycle, or none removed: each kind now and then.
    Mixed,
    /// `enqueue-batch-data`, `enqueue-batch-names`: a batch of two.
    Batch,
    /// `level-dir`: an enqueue at another priority level.
    Level,
    /// `keys-dir-made`, `key-file`, `keys-dir`: a keyed enqueue.
    Key,
    /// `limits`: the group's limit set.
    Limits,
    /// `deps-marker`, `deps-dest`, `deps-source`: an enqueue after the previous job.
    After,
    /// `receipt-cut`, `receipt-unlink`, `evidence-rotate`, `purge-dead`, `counts`, `create`,
    /// `identity`, `quarantine` (or `--break admin`, removing none): the admin step.
    Admin,
}

fn lean(spec: &str, broken: &[Barrier]) -> Lean {
    if spec.split([',', '+']).any(|n| n == "admin") {
        return Lean::Admin;
    }
    broken
        .iter()
        .map(|b| match b.name() {
            "receipt-cut" | "receipt-unlink" | "evidence-rotate" | "purge-dead" | "counts"
            | "create" | "identity" | "quarantine" => Lean::Admin,
            "enqueue-batch-data" | "enqueue-batch-names" => Lean::Batch,
            "level-dir" => Lean::Level,
            "keys-dir-made" | "key-file" | "keys-dir" => Lean::Key,
            "limits" => Lean::Limits,
            "deps-marker" | "deps-dest" | "deps-source" => Lean::After,
            _ => Lean::Mixed,
        })
        .find(|l| *l != Lean::Mixed)
        .unwrap_or(Lean::Mixed)
}

/// Group limit changes made by this boot's loops (the next value is `2 + this % 3`).
static LIMIT_SETS: AtomicU32 = AtomicU32::new(0);

/// The run's skip counter, noted before every record is sent.
static SKIPS: std::sync::OnceLock<Skips> = std::sync::OnceLock::new();

impl Skips {
    fn note(&self) {
        let Some(p) = &self.plan else { return };
        let counts: Vec<(Barrier, u32)> = self.broken.iter().map(|b| (*b, p.skipped(*b))).collect();
        let total: u64 = counts.iter().map(|c| u64::from(c.1)).sum();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if total != *last {
            *last = total;
            let f: Vec<String> = counts.iter().map(|(b, n)| format!("{b}={n}")).collect();
            println!("CRASHLAB_AGENT_SKIPPED {}", f.join(" "));
        }
    }
}

/// Settle a claimed job by one of the kinds of operation, each confirmed once done.
/// Returns whether it acked.
fn settle(q: &Queue, mut l: steadq::Lease, rng: &mut Rng, link: &Arc<Mutex<Link>>) -> bool {
    let id = l.id();
    let op = |what: &str, arg: String| link.lock().unwrap().op(what, id, arg);
    op("claim", l.attempt().to_string());
    if rng.chance(25) {
        l.renew(Duration::from_secs(30))
            .unwrap_or_else(|e| die("renew", e));
        op("renew", String::new());
    }
    match rng.below(20) {
        0..=11 => {
            l.ack().unwrap_or_else(|e| die("ack", e));
            op("ack", String::new());
            return true;
        }
        12 | 13 => {
            l.nack(Duration::ZERO).unwrap_or_else(|e| die("nack", e));
            op("nack", "0".into());
        }
        // Not due for a day: nothing moves it before the rig ends, so it must stay delayed.
        14 | 15 => {
            l.nack(NACK_LONG).unwrap_or_else(|e| die("nack", e));
            op("nack", NACK_LONG.as_secs().to_string());
        }
        _ => {
            l.fail(steadq::Reason::FAILED)
                .unwrap_or_else(|e| die("fail", e));
            op("fail", String::new());
            let n = q
                .requeue_dead(Some(id))
                .into_result()
                .unwrap_or_else(|e| die("requeue", e))
                .requeued;
            if n == 1 {
                op("requeue", String::new());
            }
        }
    }
    false
}

/// A nack's delay that outlasts any run of the rig (1,000 cycles on a Pi take about 17 h).
const NACK_LONG: Duration = Duration::from_secs(86_400);

/// A lease left to expire, then recovery, which moves it back to ready.
fn expire_and_recover(q: &Queue, link: &Arc<Mutex<Link>>) {
    let Some(l) = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_millis(50)),
            ..Default::default()
        })
        .unwrap_or_else(|e| die("claim", e))
    else {
        return;
    };
    let id = l.id();
    link.lock()
        .unwrap()
        .op("claim", id, l.attempt().to_string());
    // Never settled nor released: its lease runs out.
    std::mem::forget(l);
    std::thread::sleep(Duration::from_millis(80));
    let r = q
        .recover()
        .into_result()
        .unwrap_or_else(|e| die("recover", e));
    link.lock()
        .unwrap()
        .op("recover", id, r.moved().to_string());
}

fn main() {
    let a: Args = argh::from_env();
    let mount_ms = a.mount_ms.unwrap_or_else(|| {
        std::env::var("CRASHLAB_MOUNT_MS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    });
    let broken = a
        .break_barriers
        .as_deref()
        .map(barriers)
        .unwrap_or_default();
    let plan = (!broken.is_empty()).then(|| {
        let p = FaultPlan::new(Vec::new());
        for b in &broken {
            p.skip_barrier(*b);
        }
        p
    });
    let mut link = Link::connect(&a.connect);
    let t = Instant::now();
    let q = open(&a.queue, plan.clone());
    let r = q
        .recover()
        .into_result()
        .unwrap_or_else(|e| die("recover", e));
    let boot = Boot {
        queue_id: q.id(),
        mount_ms,
        recover_ms: t.elapsed().as_millis() as u64,
        moved: u64::from(r.moved()),
    };
    report(&mut link, &q, &boot);
    println!("CRASHLAB_AGENT_REPORTED {}", boot.line());
    if !broken.is_empty() {
        let names: Vec<&str> = broken.iter().map(|b| b.name()).collect();
        println!("CRASHLAB_AGENT_BREAK {}", names.join(","));
    }
    let plan_for_batch = plan.clone();
    let skips = SKIPS.get_or_init(|| Skips {
        plan,
        broken: broken.clone(),
        last: Mutex::new(u64::MAX),
        lean: lean(a.break_barriers.as_deref().unwrap_or(""), &broken),
    });
    skips.note();
    let link = Arc::new(Mutex::new(link));
    // A second handle, `Batched`: its `enqueue_batch` makes the batch's own barriers (a
    // `Strict` handle gives each job its own).
    let qb = Queue::open_with(
        &a.queue,
        Options {
            durability: steadq::Durability::Batched,
            ..options(plan_for_batch)
        },
    )
    .unwrap_or_else(|e| die("open (batched)", e));
    // One loop and no `steadq work` with a barrier removed (no other barrier covers it) or
    // with the admin step (which needs the queue to itself).
    let alone = !broken.is_empty() || skips.lean == Lean::Admin;
    if let Some(bin) = a.steadq.as_ref().filter(|_| !alone) {
        spawn_work(bin, &a.queue, &a.work_cmd, link.clone());
    }
    let seed = u64::from_le_bytes(q.id().to_le_bytes()[..8].try_into().unwrap()) ^ boot_salt();
    let threads = if !alone { a.threads.max(1) } else { 1 };
    let small = a.small;
    for t in 1..threads {
        let (q, qb, link) = (q.clone(), qb.clone(), link.clone());
        std::thread::spawn(move || {
            run(
                &q,
                &qb,
                Rng(seed ^ u64::from(t).wrapping_mul(0x9e37_79b9)),
                &link,
                skips,
                small,
            )
        });
    }
    run(&q, &qb, Rng(seed), &link, skips, small);
}

/// One loop until the power goes: enqueue a random payload (with `small`, three in four of
/// 16 to 255 bytes), then claim and settle a job; now and then a lease left to expire and
/// recovered, and a compaction of the receipts.
fn run(
    q: &Queue,
    qb: &Queue,
    mut rng: Rng,
    link: &Arc<Mutex<Link>>,
    skips: &Skips,
    small: bool,
) -> ! {
    let mut last_ack: Option<JobId> = None;
    let mut prev: Option<JobId> = None;
    let lean = skips.lean;
    let mut n: u64 = 0;
    loop {
        n += 1;
        let size = match small && rng.below(4) != 0 {
            true => rng.between(16, 255),
            false => rng.between(64, 8192),
        } as usize;
        let payload: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
        // One enqueue in ten is a batch of two through the `Batched` handle (its barriers
        // are the batch's own), every one when a batch barrier is removed.
        if lean == Lean::Batch || rng.below(10) == 0 {
            let half = &payload[..size / 2];
            let ids = qb
                .enqueue_batch(&[&payload[..], half])
                .unwrap_or_else(|e| die("enqueue_batch", e));
            for (id, p) in ids.iter().zip([&payload[..], half]) {
                link.lock().unwrap().op("enq", *id, digest(p));
            }
            prev = ids.last().copied();
        } else {
            let id = enqueue_one(q, &payload, &mut rng, lean, prev, link);
            prev = Some(id);
        }
        if lean == Lean::Limits || rng.below(20) == 0 {
            // The group's limit, 2, 3 and 4 by turns across the loops (steadq.limits
            // replaced by rename); the report at the next boot must give the last one
            // confirmed, or the one whose `limiting` record came after it (a cut before its
            // `limit` record leaves that write indeterminate: it may be on disk already).
            // Three values, so within a boot a stale file (the value before the last) is
            // neither of the two allowed.
            // The link is held from the first record to the last, so the records of the
            // loops' limits are in the order of their writes.
            let id = prev.expect("a job was enqueued just above");
            let mut l = link.lock().unwrap();
            let max = 2 + LIMIT_SETS.fetch_add(1, Ordering::Relaxed) % 3;
            l.op("limiting", id, max.to_string());
            q.set_group_limit(&group(), Some(max))
                .unwrap_or_else(|e| die("set_group_limit", e));
            l.op("limit", id, max.to_string());
        }
        skips.note();
        match rng.below(12) {
            0 => expire_and_recover(q, link),
            1 => {
                if let Some(id) = last_ack {
                    let r = q
                        .compact(Duration::ZERO)
                        .unwrap_or_else(|e| die("compact", e));
                    link.lock()
                        .unwrap()
                        .op("compact", id, r.removed.to_string());
                }
            }
            _ => {}
        }
        if let (Lean::Admin, Some(p)) = (lean, prev) {
            admin_step(q, &mut rng, link, n, p, skips.plan.clone());
        }
        if let Some(l) = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                ..Default::default()
            })
            .unwrap_or_else(|e| die("claim", e))
        {
            let id = l.id();
            if settle(q, l, &mut rng, link) {
                last_ack = Some(id);
            }
        }
        skips.note();
    }
}

/// One enqueue of `payload`, confirmed (`enq`, then `after` or `key`): one in five waits for
/// the loop's previous job (`waiting/`, then moved to ready by that job's ack, or dead with
/// it; refused when that job is dead already, then enqueued without it), one in three is in
/// group `g`, one in five at another priority level, one in five keyed. When a removed
/// barrier is one only some enqueues reach (`lean`), every enqueue is of that kind.
fn enqueue_one(
    q: &Queue,
    payload: &[u8],
    rng: &mut Rng,
    lean: Lean,
    prev: Option<JobId>,
    link: &Arc<Mutex<Link>>,
) -> JobId {
    // A key unique to this payload (random bytes), so a duplicate means a key came back.
    // Keys do not go with dependencies (`InvalidArgument`).
    let key = (lean == Lean::Key || (lean != Lean::After && rng.below(5) == 0)).then(|| {
        steadq::Key::new(&format!("pc-{}", &digest(payload)[..40]))
            .unwrap_or_else(|| die("key", "pc-"))
    });
    let want_after = key.is_none() && (lean == Lean::After || rng.below(5) == 0);
    let after: Vec<JobId> = prev.filter(|_| want_after).into_iter().collect();
    let priority =
        (lean == Lean::Level || rng.below(5) == 0).then(|| [7u8, 0, 5][rng.below(3) as usize]);
    let o = steadq::EnqueueOptions {
        after: after.clone(),
        group: (rng.below(3) == 0).then(group),
        priority,
        key,
        ..Default::default()
    };
    let (e, deps) = match q.enqueue_with(payload, &o) {
        Ok(e) => (e, after.first()),
        Err(e) if matches!(e.kind(), steadq::ErrorKind::BadDependency { .. }) => {
            let o = steadq::EnqueueOptions {
                after: Vec::new(),
                ..o
            };
            let e = q
                .enqueue_with(payload, &o)
                .unwrap_or_else(|e| die("enqueue (dependency dead)", e));
            (e, None)
        }
        Err(e) => die("enqueue", e),
    };
    if e.is_duplicate() {
        die(
            "enqueue (keyed)",
            format!("a new key gave the existing job {}", e.id()),
        );
    }
    let id = e.id();
    let mut l = link.lock().unwrap();
    l.op("enq", id, digest(payload));
    if let Some(d) = deps {
        l.op("after", id, d.to_string());
    }
    if let Some(k) = key {
        l.op("key", id, k.as_str().to_string());
    }
    id
}

/// The admin step (`Lean::Admin`: one loop, alone on the queue), each operation recorded once
/// it returned done: a job failed and every dead job purged (`purging` records before the
/// purge, `purged` after); the receipt policy set to the next of header, none, job
/// (`setting` before, `policy` after: the identity file), with evidence logs of 4 KiB so
/// that appends rotate (every rotated log kept), and two jobs acked under it through a handle opened after it; a
/// compaction (`compact`: `steadq.counts`); every tenth step a queue created beside this one
/// (`create`); a job file damaged on purpose (`planted`, before the damage) and moved aside by
/// `fsck --quarantine` (`quarantined`). `prev` (the loop's last job) stands in for the id of
/// the records that name none.
fn admin_step(
    q: &Queue,
    rng: &mut Rng,
    link: &Arc<Mutex<Link>>,
    n: u64,
    prev: JobId,
    plan: Option<Arc<FaultPlan>>,
) {
    let op = |what: &str, id: JobId, arg: String| link.lock().unwrap().op(what, id, arg);
    let lease = steadq::ClaimOptions {
        lease: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    if let Some(l) = q.claim_with(&lease).unwrap_or_else(|e| die("claim", e)) {
        let id = l.id();
        op("claim", id, l.attempt().to_string());
        l.fail(steadq::Reason::FAILED)
            .unwrap_or_else(|e| die("fail", e));
        op("fail", id, String::new());
    }
    let dead: Vec<JobId> = q
        .list(Some(steadq::State::Dead))
        .unwrap_or_else(|e| die("list dead", e))
        .iter()
        .map(|l| l.name.id)
        .collect();
    for id in &dead {
        op("purging", *id, String::new());
    }
    let k = q.purge_dead().unwrap_or_else(|e| die("purge_dead", e));
    if k as usize != dead.len() {
        die("purge_dead", format!("{k} purged, {} listed", dead.len()));
    }
    for id in &dead {
        op("purged", *id, String::new());
    }
    let p = [
        steadq::ReceiptPolicy::Header,
        steadq::ReceiptPolicy::None,
        steadq::ReceiptPolicy::Job,
    ][(n % 3) as usize];
    op("setting", prev, policy_name(p).into());
    // Every rotated log kept: one the agent removed would take its acks' evidence with it
    // (the runs are long), and a rotation's barrier covers its rename as well as removals.
    let limits = steadq::EvidenceLimits {
        max_bytes: 4096,
        keep: 1_000_000,
    };
    q.set_receipt_policy(p, Some(limits))
        .unwrap_or_else(|e| die("set_receipt_policy", e));
    op("policy", prev, policy_name(p).into());
    let qp = Queue::open_with(q.root(), options(plan.clone()))
        .unwrap_or_else(|e| die("open (new policy)", e));
    for _ in 0..2 {
        let payload: Vec<u8> = (0..rng.between(64, 2048))
            .map(|_| rng.next() as u8)
            .collect();
        let id = qp
            .enqueue(&payload)
            .unwrap_or_else(|e| die("enqueue (admin)", e));
        op("enq", id, digest(&payload));
        if let Some(l) = qp.claim_with(&lease).unwrap_or_else(|e| die("claim", e)) {
            let id = l.id();
            op("claim", id, l.attempt().to_string());
            l.ack().unwrap_or_else(|e| die("ack (admin)", e));
            op("ack", id, String::new());
        }
    }
    let r = qp
        .compact(Duration::ZERO)
        .unwrap_or_else(|e| die("compact", e));
    op("compact", prev, r.removed.to_string());
    if n % 10 == 1 {
        let name = format!("q2-{n}-{:x}", rng.next() as u32);
        let d = q.root().parent().map(|p| p.join(&name));
        let d = d.unwrap_or_else(|| die("create", "the queue has no parent directory"));
        Queue::create(&d, options(plan)).unwrap_or_else(|e| die("create", e));
        op("create", prev, name);
    }
    let id = qp
        .enqueue(b"admin step: a job to corrupt")
        .unwrap_or_else(|e| die("enqueue (to corrupt)", e));
    let at = q.root().join(
        q.find(id)
            .unwrap_or_else(|e| die("find (to corrupt)", e))
            .rel_path(q.id()),
    );
    op("planted", id, String::new());
    crashlab::invariants::damage_last_byte(&at).unwrap_or_else(|e| die("corrupt", e));
    let rep = q
        .fsck_quarantine()
        .unwrap_or_else(|e| die("fsck --quarantine", e));
    if !rep.problems.iter().any(|p| p.quarantined) {
        die("fsck --quarantine", format!("{id} was not quarantined"));
    }
    op("quarantined", id, String::new());
}

/// Differs per boot, so each boot's payloads differ.
fn boot_salt() -> u64 {
    let mut s = String::new();
    let _ =
        File::open("/proc/sys/kernel/random/boot_id").and_then(|mut f| f.read_to_string(&mut s));
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x1000_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_steadq_work_lines() {
        let id = "0000018c0a1b2c3d4e5f60718293a4b5";
        let (j, a) =
            super::work_line(&format!("job {id} attempt 2/5: exit 0, acked (12 ms)")).unwrap();
        assert_eq!((j.to_string().as_str(), a), (id, 2));
        assert!(super::work_line("steadq work: stopped by signal 15").is_none());
    }
}
