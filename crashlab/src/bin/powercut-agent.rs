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
//! It runs until the power goes. Records: see `crashlab::record`.

use argh::FromArgs;
use crashlab::invariants::digest;
use crashlab::record::{read_record, Boot, Op};
use crashlab::rng::Rng;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
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
    /// (default 3; the broken build runs 1, so no other thread's barrier covers its acks)
    #[argh(option, default = "3")]
    threads: u32,
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

fn options() -> Options {
    Options {
        shards: 2,
        ..Options::default()
    }
}

fn open(dir: &Path) -> Queue {
    if !dir.join(steadq::IDENTITY_FILE).exists() {
        return Queue::create(dir, options()).unwrap_or_else(|e| die("create", e));
    }
    match Queue::open_with(dir, options()) {
        // A cut during the first boot's create: completing it is what `steadq init` does.
        Err(e) if *e.kind() == steadq::ErrorKind::Incomplete => {
            Queue::create(dir, options()).unwrap_or_else(|e| die("complete create", e))
        }
        r => r.unwrap_or_else(|e| die("open", e)),
    }
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
        let d = q.read_job(&l).map_or("bad".into(), |(_, p)| digest(&p));
        digests.insert(l.rel_path(q.id()), d);
    }
    let mut entries = Vec::new();
    walk(q.root(), "", &mut entries);
    for e in &entries {
        let d = digests.get(e).map_or("-", String::as_str);
        link.say(&format!("entry {e} {d}"));
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

/// Ack. The broken build (`--features break-ack-barriers`) acks through a handle whose every
/// fsync "succeeds" without being made: the negative control the rig must catch.
#[cfg(not(feature = "break-ack-barriers"))]
fn claim_and_settle(q: &Queue, rng: &mut Rng, link: &Arc<Mutex<Link>>) {
    let Some(l) = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            ..Default::default()
        })
        .unwrap_or_else(|e| die("claim", e))
    else {
        return;
    };
    settle(l, rng, link);
}

#[cfg(feature = "break-ack-barriers")]
fn claim_and_settle(q: &Queue, rng: &mut Rng, link: &Arc<Mutex<Link>>) {
    use steadq::sys::{Call, Fault, FaultAction, FaultPlan};
    let skip = |call| Fault {
        call,
        nth: 0,
        action: FaultAction::Skip,
    };
    // A handle of its own per job: its plan is armed for the ack only, so the claim keeps its
    // barriers and the bug under test is the ack's alone.
    let plan = FaultPlan::disarmed(vec![
        skip(Call::Fsync),
        skip(Call::FsyncDir),
        skip(Call::Syncfs),
    ]);
    let bq = Queue::open_with(
        q.root(),
        Options {
            faults: Some(plan.clone()),
            ..options()
        },
    )
    .unwrap_or_else(|e| die("open", e));
    let Some(l) = bq
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            ..Default::default()
        })
        .unwrap_or_else(|e| die("claim", e))
    else {
        return;
    };
    settle_armed(l, rng, link, &plan);
}

#[cfg(feature = "break-ack-barriers")]
fn settle_armed(
    l: steadq::Lease,
    rng: &mut Rng,
    link: &Arc<Mutex<Link>>,
    plan: &steadq::sys::FaultPlan,
) {
    let id = l.id();
    link.lock()
        .unwrap()
        .op("claim", id, l.attempt().to_string());
    if rng.chance(70) {
        plan.arm();
        l.ack().unwrap_or_else(|e| die("ack", e));
        link.lock().unwrap().op("ack", id, String::new());
    } else {
        l.nack(Duration::ZERO).unwrap_or_else(|e| die("nack", e));
        link.lock().unwrap().op("nack", id, String::new());
    }
}

#[cfg(not(feature = "break-ack-barriers"))]
fn settle(l: steadq::Lease, rng: &mut Rng, link: &Arc<Mutex<Link>>) {
    let id = l.id();
    link.lock()
        .unwrap()
        .op("claim", id, l.attempt().to_string());
    let (what, r) = match rng.below(10) {
        0..=6 => ("ack", l.ack().map(|_| ())),
        7 | 8 => ("nack", l.nack(Duration::ZERO).map(|_| ())),
        _ => ("fail", l.fail(steadq::Reason::FAILED)),
    };
    r.unwrap_or_else(|e| die(what, e));
    link.lock().unwrap().op(what, id, String::new());
}

fn main() {
    let a: Args = argh::from_env();
    let mount_ms = a.mount_ms.unwrap_or_else(|| {
        std::env::var("CRASHLAB_MOUNT_MS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    });
    let mut link = Link::connect(&a.connect);
    let t = Instant::now();
    let q = open(&a.queue);
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
    let link = Arc::new(Mutex::new(link));
    if let Some(bin) = &a.steadq {
        spawn_work(bin, &a.queue, &a.work_cmd, link.clone());
    }
    let seed = u64::from_le_bytes(q.id().to_le_bytes()[..8].try_into().unwrap()) ^ boot_salt();
    let threads = if cfg!(feature = "break-ack-barriers") {
        1
    } else {
        a.threads.max(1)
    };
    for t in 1..threads {
        let (q, link) = (q.clone(), link.clone());
        std::thread::spawn(move || {
            run(
                &q,
                Rng(seed ^ u64::from(t).wrapping_mul(0x9e37_79b9)),
                &link,
            )
        });
    }
    run(&q, Rng(seed), &link);
}

/// One loop until the power goes: enqueue a random payload, then claim and settle a job.
fn run(q: &Queue, mut rng: Rng, link: &Arc<Mutex<Link>>) -> ! {
    loop {
        let size = rng.between(64, 8192) as usize;
        let payload: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
        let id = q.enqueue(&payload).unwrap_or_else(|e| die("enqueue", e));
        link.lock().unwrap().op("enq", id, digest(&payload));
        claim_and_settle(q, &mut rng, link);
    }
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
