//! Kill soak: producer and worker processes on one queue, SIGKILLed at random points, cycle
//! after cycle; after every cycle (and a recovery that is itself crashed part-way at random)
//! the verifier checks every invariant against what the processes reported done.
//!
//! Every random choice comes from one printed seed: `soak --seed S` reproduces a run.
//!
//! Usage: `soak [--cycles N] [--seed S] [--dir DIR] [--keep]`. Exit 0: no violation.

use crashlab::invariants::{verify, Expect};
use crashlab::marks::Mark;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use steadq::{Durability, EnqueueOptions, Options, Queue, Reason};

/// SplitMix64: small, seedable, good enough to pick kill times and actions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
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
        // One write(2) per line with O_APPEND: a kill never leaves half a line.
        let _ = self
            .f
            .write_all(format!("{} {op} {arg}\n", self.seq).as_bytes());
    }
}

fn queue(dir: &Path) -> Queue {
    Queue::open_with(
        dir,
        Options {
            durability: Durability::None,
            lease: Duration::from_millis(300),
            ..Options::default()
        },
    )
    .expect("open queue")
}

fn producer(dir: &Path, marks: &Path, seed: u64) {
    let q = queue(dir);
    let mut m = Marks::new(marks);
    let mut rng = Rng(seed);
    for i in 0.. {
        let o = EnqueueOptions {
            max_attempts: Some(1 + rng.below(3) as u32),
            delay: (rng.below(5) == 0).then(|| Duration::from_millis(rng.below(200))),
            ..Default::default()
        };
        let payload = format!(
            "soak job {seed:x}-{i} {}",
            "x".repeat(rng.below(3000) as usize)
        );
        if let Ok(id) = q.enqueue_with(payload.as_bytes(), &o) {
            m.mark("enq", &id.to_string());
        }
        // Keep producers near the workers' pace, so cycles stay small and mixed.
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
    }
}

fn worker(dir: &Path, marks: &Path, seed: u64) {
    let q = queue(dir);
    let mut m = Marks::new(marks);
    let mut rng = Rng(seed);
    loop {
        let Ok(Some(mut l)) = q.claim_wait(Duration::from_millis(300), Duration::from_millis(100))
        else {
            continue;
        };
        m.mark("claim", &format!("{} {}", l.id(), l.attempt()));
        let id = l.id().to_string();
        if rng.below(4) == 0 {
            let _ = l.renew(Duration::from_millis(300));
        }
        match rng.below(10) {
            0..=5 => {
                if l.ack().is_ok() {
                    m.mark("ack", &id);
                }
            }
            6 | 7 => {
                if l.nack(Duration::from_millis(rng.below(100))).is_ok() {
                    m.mark("nack", &id);
                }
            }
            8 => {
                if l.fail(Reason::FAILED).is_ok() {
                    m.mark("fail", &id);
                }
            }
            _ => drop(l), // released at once
        }
    }
}

fn spawn(role: &str, dir: &Path, marks: &Path, seed: u64) -> Child {
    Command::new(std::env::current_exe().expect("own exe"))
        .args(["--role", role, "--dir"])
        .arg(dir)
        .arg("--marks")
        .arg(marks)
        .args(["--seed", &seed.to_string()])
        .spawn()
        .expect("spawn child")
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
    let args: Vec<String> = std::env::args().collect();
    if let Some(role) = arg(&args, "--role") {
        let dir = PathBuf::from(arg(&args, "--dir").expect("--dir"));
        let marks = PathBuf::from(arg(&args, "--marks").expect("--marks"));
        let seed: u64 = arg(&args, "--seed")
            .and_then(|s| s.parse().ok())
            .expect("--seed");
        match role.as_str() {
            "producer" => producer(&dir, &marks, seed),
            "worker" => worker(&dir, &marks, seed),
            r => panic!("unknown role {r}"),
        }
        return;
    }
    let cycles: u64 = arg(&args, "--cycles")
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = arg(&args, "--seed")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    let base = arg(&args, "--dir").map(PathBuf::from).unwrap_or_else(|| {
        std::env::temp_dir().join(format!("steadq-soak-{}", std::process::id()))
    });
    let qdir = base.join("queue");
    let mdir = base.join("marks");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&mdir).expect("marks dir");
    Queue::create(
        &qdir,
        Options {
            shards: 4,
            ..Options::default()
        },
    )
    .expect("create queue");
    println!(
        "soak: seed {seed}, {cycles} cycles, queue {}",
        qdir.display()
    );
    let mut rng = Rng(seed);
    let t0 = Instant::now();
    let (mut total_violations, mut recovered, mut mid_recovery_crashes) = (0usize, 0u32, 0u32);
    let mut kills = 0u32;
    for cycle in 0..cycles {
        let mut children = Vec::new();
        for i in 0..2 {
            children.push(spawn(
                "producer",
                &qdir,
                &mdir.join(format!("c{cycle}-p{i}.marks")),
                rng.next(),
            ));
            children.push(spawn(
                "worker",
                &qdir,
                &mdir.join(format!("c{cycle}-w{i}.marks")),
                rng.next(),
            ));
        }
        // Kill each child at its own random moment within 30..400 ms.
        let mut deadlines: Vec<(Instant, usize)> = (0..children.len())
            .map(|i| {
                (
                    Instant::now() + Duration::from_millis(30 + rng.below(370)),
                    i,
                )
            })
            .collect();
        deadlines.sort();
        for (when, i) in deadlines {
            std::thread::sleep(when.saturating_duration_since(Instant::now()));
            let _ = children[i].kill();
            let _ = children[i].wait();
            kills += 1;
        }
        let expect = match Expect::from_marks(&read_marks(&mdir)) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("cycle {cycle}: bad marks: {e}");
                std::process::exit(2);
            }
        };
        let crash_at = (rng.below(2) == 0).then(|| 1 + rng.below(4) as u32);
        mid_recovery_crashes += crash_at.is_some() as u32;
        match verify(&qdir, &expect, crash_at) {
            Ok(v) => {
                recovered += v.recovered;
                for x in &v.violations {
                    println!("VIOLATION cycle {cycle} (seed {seed}): {x}");
                }
                total_violations += v.violations.len();
                if cycle % 5 == 4 || cycle + 1 == cycles {
                    println!(
                        "cycle {:>4}: {} jobs, {} enqueues / {} acks / {} claims marked done, {} violations so far",
                        cycle + 1,
                        v.jobs,
                        expect.enqueued.len(),
                        expect.acked.len(),
                        expect.claimed.len(),
                        total_violations
                    );
                }
            }
            Err(e) => {
                println!("VIOLATION cycle {cycle} (seed {seed}): verifier could not run: {e}");
                total_violations += 1;
            }
        }
        if total_violations > 0 {
            break;
        }
    }
    println!(
        "soak: {cycles} cycles, {kills} processes SIGKILLed, {mid_recovery_crashes} recoveries crashed part-way, {recovered} jobs recovered, {total_violations} violations, {:.1}s (seed {seed})",
        t0.elapsed().as_secs_f64()
    );
    if total_violations == 0 && !args.iter().any(|a| a == "--keep") {
        let _ = std::fs::remove_dir_all(&base);
    }
    std::process::exit(if total_violations == 0 { 0 } else { 1 });
}
