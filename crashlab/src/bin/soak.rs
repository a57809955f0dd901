//! Kill soak: producer and worker processes on one queue, each stopped dead at a seeded
//! filesystem call, cycle after cycle; after every cycle (and a recovery that is itself
//! crashed part-way at a seeded rename) the verifier checks every invariant against what the
//! processes reported done.
//!
//! How a process dies: its queue is opened with a steadq fault plan (`Options.faults`) whose
//! `StopAfter` fault fires at the Nth call of one kind (its stop point, e.g. the 17th
//! `renameat2`): that call is made, every later one fails with `ESHUTDOWN` and changes nothing,
//! and the process exits (`std::process::exit`, no destructor runs: no lease is released, no
//! mark written) as soon as the operation in progress returns. On disk that is a SIGKILL right
//! after the stop call. A second, later fault (a backstop on a kind the process always makes)
//! bounds the cycle when the first kind runs dry (a worker with nothing left to claim).
//!
//! Reproducible from the seed: the stop points (kind and N, per process and cycle) and the
//! recovery's crash point derive from `--seed` alone, and each cycle's line prints them with
//! the number of filesystem calls each process made before it stopped. Not reproducible: the
//! OS's interleaving of the four processes, so what was on disk when a worker reached its stop
//! call, and how many calls it took to get there, differ between runs (see crashlab/README.md).
//!
//! `soak [--cycles N] [--seed S] [--dir DIR] [--keep]`. Exit 0: no violation; 1: a violation;
//! 2: usage, or a child process did not end at its stop point (the soak itself is broken).

use argh::FromArgs;
use crashlab::args;
use crashlab::invariants::{verify, Expect};
use crashlab::marks::Mark;
use crashlab::rng::Rng;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{exit, Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};
use steadq::sys::{Call, Fault, FaultAction, FaultPlan};
use steadq::{Durability, EnqueueOptions, Options, Queue, Reason};

/// Exit status of a child that reached its stop point (anything else is a broken soak).
const STOPPED: i32 = 86;
/// How long a cycle may take before its remaining children are SIGKILLed and the soak fails.
const CYCLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(FromArgs)]
/// Kill soak: producers and workers on one queue, each stopped at a seeded filesystem call
/// (through steadq's fault plan), the queue verified after every cycle. Exit 0 no violation,
/// 1 violation, 2 usage or a broken soak.
struct Args {
    /// number of cycles (default 20)
    #[argh(option, default = "20")]
    cycles: u64,
    /// seed of every choice (default: from the clock; printed)
    #[argh(option)]
    seed: Option<u64>,
    /// working directory (default: $TMPDIR/steadq-soak-<pid>; emptied first)
    #[argh(option)]
    dir: Option<PathBuf>,
    /// keep the working directory after a run without violations
    #[argh(switch)]
    keep: bool,
    /// internal: run as a child process, `producer` or `worker`, on the queue at --dir
    #[argh(option, from_str_fn(role))]
    role: Option<Role>,
    /// internal: the child's marks file
    #[argh(option)]
    marks: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Producer,
    Worker,
}

fn role(s: &str) -> Result<Role, String> {
    match s {
        "producer" => Ok(Role::Producer),
        "worker" => Ok(Role::Worker),
        other => Err(format!("producer or worker, not {other:?}")),
    }
}

/// A process's stop point and its backstop, drawn first from the process's own seed (so the
/// parent, which picked the seed, can print them). With `Durability::None` a producer makes
/// opens, writes and links (or renames) and a worker lists, renames, opens and reads.
fn stop_points(role: Role, rng: &mut Rng) -> [Fault; 2] {
    let (kinds, most, backstop): (&[Call], u64, Fault) = match role {
        Role::Producer => (
            &[Call::Open, Call::Write, Call::Link],
            120,
            stop(Call::Open, 400),
        ),
        Role::Worker => (
            &[Call::ReadDir, Call::Rename, Call::Open, Call::Read],
            60,
            stop(Call::ReadDir, 150),
        ),
    };
    let kind = kinds[rng.below(kinds.len() as u64) as usize];
    [stop(kind, 1 + rng.below(most) as u32), backstop]
}

fn stop(call: Call, nth: u32) -> Fault {
    Fault {
        call,
        nth,
        action: FaultAction::StopAfter,
    }
}

fn show(f: &Fault) -> String {
    let name = f.call.name().split(' ').next().unwrap_or("?");
    format!("{name}#{}", f.nth)
}

/// A child's marks file: one line per operation that returned done, appended right after.
struct Marks {
    f: std::fs::File,
    seq: u64,
}

impl Marks {
    fn new(p: &Path) -> Marks {
        Marks {
            f: std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .expect("marks file"),
            seq: 0,
        }
    }
    fn mark(&mut self, op: &str, arg: &str) {
        self.seq += 1;
        // One write(2) per line with O_APPEND: a stop never leaves half a line.
        let _ = self
            .f
            .write_all(format!("{} {op} {arg}\n", self.seq).as_bytes());
    }
}

/// A producer or worker process: its queue, opened through its fault plan.
struct Proc {
    q: Queue,
    plan: Arc<FaultPlan>,
    faults: [Fault; 2],
    marks: Marks,
    report: PathBuf,
    rng: Rng,
}

impl Proc {
    fn open(dir: &Path, marks: &Path, seed: u64, role: Role) -> Proc {
        let mut rng = Rng(seed);
        let faults = stop_points(role, &mut rng);
        // Armed once the queue is open: N counts the calls of the process's own operations.
        let plan = FaultPlan::disarmed(faults.to_vec());
        let o = Options {
            durability: Durability::None,
            lease: Duration::from_millis(300),
            faults: Some(Arc::clone(&plan)),
            ..Options::default()
        };
        let q = Queue::open_with(dir, o).expect("open queue");
        plan.arm();
        Proc {
            q,
            plan,
            faults,
            marks: Marks::new(marks),
            report: marks.with_extension("stop"),
            rng,
        }
    }

    /// Call after every queue operation: once the plan has stopped, the process is dead.
    /// Nothing more happens (no mark, no lease release, no destructor): it reports where it
    /// stopped, for the parent to print, and exits.
    fn alive(&self) {
        if !self.plan.stopped() {
            return;
        }
        let fired = match self
            .faults
            .iter()
            .position(|f| self.plan.count(f.call) == f.nth)
        {
            Some(0) => show(&self.faults[0]),
            Some(_) => format!("{} (backstop)", show(&self.faults[1])),
            None => "?".into(),
        };
        let calls: u32 = Call::ALL.iter().map(|&c| self.plan.count(c)).sum();
        let line = format!("{fired} [{calls} calls, {} done]\n", self.marks.seq);
        let _ = std::fs::write(&self.report, line);
        exit(STOPPED)
    }

    fn produce(mut self) -> ! {
        for i in 0u64.. {
            let rng = &mut self.rng;
            let o = EnqueueOptions {
                max_attempts: Some(1 + rng.below(3) as u32),
                delay: (rng.below(5) == 0).then(|| Duration::from_millis(rng.below(200))),
                ..Default::default()
            };
            let payload = format!("soak job {i} {}", "x".repeat(rng.below(3000) as usize));
            let r = self
                .q
                .enqueue_with(payload.as_bytes(), &o)
                .map(steadq::Enqueued::id);
            self.alive();
            if let Ok(id) = r {
                self.marks.mark("enq", &id.to_string());
            }
            // Keep producers near the workers' pace, so cycles stay small and mixed.
            std::thread::sleep(Duration::from_micros(self.rng.below(3000)));
        }
        unreachable!("a producer ends at its stop point")
    }

    fn work(mut self) -> ! {
        loop {
            let r = self.q.claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_millis(300)),
                wait: Some(Duration::from_millis(100)),
                ..Default::default()
            });
            self.alive();
            let Ok(Some(mut l)) = r else { continue };
            self.marks
                .mark("claim", &format!("{} {}", l.id(), l.attempt()));
            let id = l.id().to_string();
            if self.rng.below(4) == 0 {
                let _ = l.renew(Duration::from_millis(300));
                self.alive();
            }
            let (op, r) = match self.rng.below(10) {
                0..=5 => ("ack", l.ack().map(drop)),
                6 | 7 => {
                    let delay = Duration::from_millis(self.rng.below(100));
                    ("nack", l.nack(delay).map(drop))
                }
                8 => ("fail", l.fail(Reason::FAILED).map(drop)),
                _ => {
                    drop(l); // released at once
                    ("", Ok(()))
                }
            };
            self.alive();
            if r.is_ok() && !op.is_empty() {
                self.marks.mark(op, &id);
            }
        }
    }
}

fn child(a: &Args, role: Role) -> ! {
    let (Some(dir), Some(marks), Some(seed)) = (&a.dir, &a.marks, a.seed) else {
        eprintln!("soak: --role needs --dir, --marks and --seed");
        exit(args::USAGE)
    };
    let p = Proc::open(dir, marks, seed, role);
    match role {
        Role::Producer => p.produce(),
        Role::Worker => p.work(),
    }
}

/// One child of a cycle: its name (`p0`, `w1`, ...), process and marks file.
struct Kid {
    name: String,
    proc: Child,
    marks: PathBuf,
}

/// The soak's own state: where the queue is, and the totals of the cycles so far.
struct Soak {
    seed: u64,
    qdir: PathBuf,
    mdir: PathBuf,
    rng: Rng,
    stopped: u32,
    crashed_recoveries: u32,
    recovered: u32,
    violations: usize,
}

impl Soak {
    fn spawn(&mut self, cycle: u64, name: &str, role: Role) -> Kid {
        let seed = self.rng.next();
        let marks = self.mdir.join(format!("c{cycle}-{name}.marks"));
        let proc = Command::new(std::env::current_exe().expect("own exe"))
            .arg("--role")
            .arg(if role == Role::Producer {
                "producer"
            } else {
                "worker"
            })
            .arg("--dir")
            .arg(&self.qdir)
            .arg("--marks")
            .arg(&marks)
            .args(["--seed", &seed.to_string()])
            .spawn()
            .expect("spawn child");
        Kid {
            name: name.into(),
            proc,
            marks,
        }
    }

    /// Waits for every child to reach its stop point; returns what each reported, e.g.
    /// `p0 open#41 [130 calls, 29 done]`: it stopped right after its 41st open, the 130th
    /// filesystem call it made, with 29 operations marked done.
    fn reap(&mut self, kids: &mut [Kid]) -> Vec<String> {
        let deadline = Instant::now() + CYCLE_TIMEOUT;
        let mut out = Vec::new();
        for k in kids.iter_mut() {
            let status = loop {
                match k.proc.try_wait().expect("wait for child") {
                    Some(s) => break Some(s),
                    None if Instant::now() >= deadline => break None,
                    None => std::thread::sleep(Duration::from_millis(5)),
                }
            };
            let report = std::fs::read_to_string(k.marks.with_extension("stop"));
            match (status.and_then(|s| s.code()), report) {
                (Some(STOPPED), Ok(r)) => out.push(format!("{} {}", k.name, r.trim())),
                (code, _) => {
                    let _ = k.proc.kill();
                    let _ = k.proc.wait();
                    println!(
                        "soak: BROKEN: {} did not end at its stop point (exit {code:?}, seed {})",
                        k.name, self.seed
                    );
                    exit(2);
                }
            }
            self.stopped += 1;
        }
        out
    }

    /// Recovery crashed part-way at random, then the invariants, on what this cycle left.
    fn check(&mut self, cycle: u64) -> (Expect, usize) {
        let expect = Expect::from_marks(&read_marks(&self.mdir)).unwrap_or_else(|e| {
            eprintln!("cycle {cycle}: bad marks: {e}");
            exit(2)
        });
        let crash_at = (self.rng.below(2) == 0).then(|| 1 + self.rng.below(4) as u32);
        self.crashed_recoveries += crash_at.is_some() as u32;
        let seed = self.seed;
        match verify(&self.qdir, &expect, crash_at) {
            Ok(v) => {
                self.recovered += v.recovered;
                for x in &v.violations {
                    println!("VIOLATION cycle {cycle} (seed {seed}): {x}");
                }
                self.violations += v.violations.len();
                (expect, v.jobs)
            }
            Err(e) => {
                println!("VIOLATION cycle {cycle} (seed {seed}): verifier could not run: {e}");
                self.violations += 1;
                (expect, 0)
            }
        }
    }

    fn cycle(&mut self, cycle: u64) {
        let mut kids = Vec::new();
        for i in 0..2 {
            kids.push(self.spawn(cycle, &format!("p{i}"), Role::Producer));
            kids.push(self.spawn(cycle, &format!("w{i}"), Role::Worker));
        }
        let stops = self.reap(&mut kids);
        println!("cycle {:>4} stops: {}", cycle + 1, stops.join("; "));
        let (expect, jobs) = self.check(cycle);
        println!(
            "cycle {:>4}: {jobs} jobs, {} enqueues / {} acks / {} claims marked done, {} violations so far",
            cycle + 1,
            expect.enqueued.len(),
            expect.acked.len(),
            expect.claimed.len(),
            self.violations
        );
    }
}

fn read_marks(dir: &Path) -> Vec<Mark> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "marks") {
            for line in std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
            {
                if let Some(m) = Mark::parse_line(line) {
                    out.push(m);
                }
            }
        }
    }
    out
}

fn main() {
    let a: Args = args::from_env();
    if let Some(role) = a.role {
        child(&a, role);
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let base = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("steadq-soak-{}", std::process::id()))
    });
    let mut s = Soak {
        seed,
        qdir: base.join("queue"),
        mdir: base.join("marks"),
        rng: Rng(seed),
        stopped: 0,
        crashed_recoveries: 0,
        recovered: 0,
        violations: 0,
    };
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&s.mdir).expect("marks dir");
    let o = Options {
        shards: 4,
        ..Options::default()
    };
    Queue::create(&s.qdir, o).expect("create queue");
    println!(
        "soak: seed {seed}, {} cycles, queue {}",
        a.cycles,
        s.qdir.display()
    );
    let t0 = Instant::now();
    for cycle in 0..a.cycles {
        s.cycle(cycle);
        if s.violations > 0 {
            break;
        }
    }
    println!(
        "soak: {} cycles, {} processes stopped at their seeded call, {} recoveries crashed part-way, {} jobs recovered, {} violations, {:.1}s (seed {seed})",
        a.cycles,
        s.stopped,
        s.crashed_recoveries,
        s.recovered,
        s.violations,
        t0.elapsed().as_secs_f64()
    );
    if s.violations == 0 && !a.keep {
        let _ = std::fs::remove_dir_all(&base);
    }
    exit(if s.violations == 0 { 0 } else { 1 });
}
