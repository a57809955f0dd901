//! steadq-bench: SteadQ beside its peers in one run, on the filesystem you point it at.
//!
//! ```text
//! cargo run --release -p steadq-bench -- DIR [--duration 2s] [--rounds 3] [--workers 1,2,4,8]
//!                                            [--batch 64] [--payload 64] [--out DIR]
//!                                            [--only steadq:batched,bare:syncfs-batch]
//!                                            [--device vda] [--settle]
//! ```
//!
//! `--only` keeps the cases whose `system` or `system:mode` is listed (a quick look at one
//! figure; the ratios need both sides of it). Three cases run only when named there:
//! `bare:none-names` (the bare loop with SteadQ's name lengths), `bare:none-watch` (with an
//! inotify watch read per job) and `bare:none-names-watch` (both); with `steadq:none` and
//! `bare:none` they show what SteadQ's tmpfs gap to the bare loop is made of. A fourth,
//! `bare:strict-min`, is the bare loop with the fewest barriers a strict lifecycle needs on
//! journaled ext4 and xfs (three directory fsyncs a job, the file written out before its
//! link): beside `steadq:strict` and `redis:always` it shows SteadQ's overhead over that
//! pattern and the ceiling any queue with it has against Redis. Its variants
//! `bare:strict-min-names`, `bare:strict-min-shards` and `bare:strict-min-names-shards` add
//! SteadQ's name lengths and eight directories a state (a job's ready and receipt
//! directories picked apart), the two costs of SteadQ's on-disk format on that path.
//! `bare:strict-min-onedir` keeps the receipts in the ready directory, so an ack renames
//! within one directory: what a layout without `receipts/` would save on that path.
//! `bare:strict-file` commits every step through the job file's own fsync and never fsyncs
//! a directory: what that lever would cost where a filesystem logs a name with its file
//! (on f2fs a linked or renamed file's fsync is a checkpoint). It is a measurement, not a
//! protocol: most filesystems can lose its names in a crash.
//!
//! `bare:syncfs-steps` (run by default) takes a batch step by step as SteadQ's batched mode
//! does, one `syncfs` after the enqueues, one after the claims and one after the acks: the
//! bare protocol of a batched lifecycle. `bare:syncfs-batch` makes one `syncfs` for the
//! whole batch of lifecycles and leaves claims and acks without a barrier of their own.
//!
//! Two more run only when named: `steadq:strict-next` and `redis:always-next`, a worker's
//! step beside a producer's enqueue, where the ack of the job held and the claim of the
//! next share one barrier (`Lease::ack_and_claim`; in Redis, LREM and LMOVE pipelined, one
//! AOF fsync), 1 worker.
//!
//! On a filesystem with a block device, each case also reports the device's cache flushes
//! and KiB written per job (`/sys/dev/block/MAJ:MIN/stat`, or `/sys/block/<NAME>/stat` with
//! `--device NAME`, for example the disk under a dm-delay target): a strict rate is bound by
//! them, and on flash the bytes are wear. They are read after a `syncfs(2)` just before and
//! just after the timed part of each case, so setup and clean-up are not counted. With
//! `--settle` (root) each reading also freezes and thaws the filesystem (`FIFREEZE`,
//! `FITHAW`), which writes every dirty block to its final place: a case is then charged
//! its journal or log writes and the in-place write-back of the blocks they covered, which
//! a filesystem otherwise does later (ext4's journal checkpoint, xfs's log item push).
//! `bench/flash.sh` runs the bench in a QEMU guest on ext4, ext4 with `fast_commit`, f2fs,
//! tmpfs and an SD-card profile (a dm-delay device); see BENCHMARKS.md.
//!
//! Every case runs `--rounds` times, interleaved (round 1 of every case, then round 2, ...),
//! and the median is kept, so slow phases of a shared machine hit every system alike. The
//! systems: SteadQ (this tree, through the library), the bare syscall protocol (the same
//! renames and fsyncs, nothing else), SQLite (WAL, synchronous=FULL, bundled), and Redis
//! (appendfsync always) when `redis-server` is installed. Results go to
//! `bench/results/<unix time>/` (results.tsv, ratios.tsv, wear.tsv, chart.svg), which git
//! ignores.

mod bare;
mod journal;
mod redis;
mod report;
mod run;
mod sqlite;

use journal::Meter;
use run::{timed, Res, Run};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One case: a system in a mode with a number of workers (threads or clients).
#[derive(Clone, Debug)]
pub struct Case {
    pub system: &'static str,
    pub mode: &'static str,
    pub workers: usize,
}

struct Args {
    dir: PathBuf,
    duration: Duration,
    rounds: usize,
    workers: Vec<usize>,
    batch: usize,
    payload: usize,
    out: PathBuf,
    only: Vec<String>,
    /// The block device whose `/sys/block/<name>/stat` is read (`--device`).
    device: Option<String>,
    /// Freeze and thaw the filesystem before each reading (`--settle`).
    settle: bool,
}

fn parse_args() -> Res<Args> {
    let mut it = std::env::args().skip(1);
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let mut a = Args {
        dir: std::env::temp_dir(),
        duration: Duration::from_secs(2),
        rounds: 3,
        workers: vec![1, 2, 4, 8],
        batch: 64,
        payload: 64,
        out: Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("results")
            .join(secs.to_string()),
        only: Vec::new(),
        device: None,
        settle: false,
    };
    while let Some(x) = it.next() {
        let mut val = || it.next().ok_or(format!("{x} needs a value"));
        match x.as_str() {
            "--duration" => {
                a.duration = Duration::from_secs_f64(val()?.trim_end_matches('s').parse()?)
            }
            "--rounds" => a.rounds = val()?.parse()?,
            "--workers" => {
                a.workers = val()?
                    .split(',')
                    .map(|w| w.parse())
                    .collect::<Result<_, _>>()?
            }
            "--batch" => a.batch = val()?.parse()?,
            "--payload" => a.payload = val()?.parse()?,
            "--out" => a.out = val()?.into(),
            "--device" => a.device = Some(val()?),
            "--settle" => a.settle = true,
            "--only" => a.only = val()?.split(',').map(str::to_owned).collect(),
            s if !s.starts_with('-') => a.dir = s.into(),
            s => return Err(format!("unknown option {s}").into()),
        }
    }
    Ok(a)
}

fn cases(a: &Args, redis: bool) -> Vec<Case> {
    let mut v = Vec::new();
    let c = |system, mode, workers| Case {
        system,
        mode,
        workers,
    };
    for &w in &a.workers {
        v.push(c("steadq", "strict", w));
        v.push(c("bare", "strict", w));
        v.push(c("sqlite", "full", w));
        if redis {
            v.push(c("redis", "always", w));
        }
    }
    v.push(c("steadq", "batched", 1));
    v.push(c("bare", "syncfs-batch", 1));
    v.push(c("bare", "syncfs-steps", 1));
    v.push(c("sqlite", "full-txn-batch", 1));
    v.push(c("steadq", "none", 1));
    v.push(c("bare", "none", 1));
    // Opt-in, named in --only: the bare loop with SteadQ's name lengths, with an inotify
    // watch read per job, with both (what the tmpfs gap to the bare loop is made of), and
    // with the fewest strict barriers (what a strict lifecycle costs on ext4 and xfs).
    // Opt-in, named in --only: a worker's step, where the ack of the job held and the claim
    // of the next share one barrier (SteadQ's `Lease::ack_and_claim`, Redis's LREM and
    // LMOVE pipelined), beside a producer's enqueue, 1 worker.
    // Opt-in, named in --only: SteadQ strict publishing each job through a named file in
    // `tmp/` instead of an `O_TMPFILE` (a build with `--features named-publish`): what the
    // orphan-list writes of `O_TMPFILE` cost in bytes per job, 1 worker.
    for (system, mode) in [
        ("steadq", "strict-next"),
        ("redis", "always-next"),
        ("steadq", "strict-named"),
    ] {
        if a.only.iter().any(|o| *o == format!("{system}:{mode}")) && (redis || system != "redis") {
            v.push(c(system, mode, 1));
        }
    }
    for m in [
        "none-names",
        "none-watch",
        "none-names-watch",
        "strict-min",
        "strict-min-names",
        "strict-min-shards",
        "strict-min-names-shards",
        "strict-min-onedir",
        "strict-file",
    ] {
        if a.only.iter().any(|o| o == &format!("bare:{m}")) {
            v.push(c("bare", m, 1));
        }
    }
    let wanted = |c: &Case| {
        a.only.is_empty()
            || a.only
                .iter()
                .any(|o| *o == c.system || *o == format!("{}:{}", c.system, c.mode))
    };
    v.retain(wanted);
    v
}

fn run_case(case: &Case, dir: &Path, a: &Args, redis_port: Option<u16>, meter: &Meter) -> Res<Run> {
    let payload = vec![b'x'; a.payload];
    let (p, b, d) = (&payload, a.batch, a.duration);
    let _ = std::fs::remove_dir_all(dir);
    let r = match (case.system, case.mode) {
        ("steadq", m) => {
            let durability = match m {
                "strict" | "strict-next" | "strict-named" => steadq::Durability::Strict,
                "batched" => steadq::Durability::Batched,
                _ => steadq::Durability::None,
            };
            #[allow(unused_mut)]
            let mut opts = steadq::Options {
                durability,
                ..Default::default()
            };
            if m == "strict-named" {
                #[cfg(feature = "named-publish")]
                {
                    opts.force_named_publish = true;
                }
                #[cfg(not(feature = "named-publish"))]
                return Err(
                    "steadq:strict-named needs a build with --features named-publish".into(),
                );
            }
            let q = steadq::Queue::create(dir, opts)?;
            let batch = if m == "batched" { b } else { 1 };
            if m == "strict-next" {
                metered(meter, || {
                    timed(case.workers, d, |_| {
                        let q = q.clone();
                        let mut held = None;
                        Ok(move || steadq_step_next(&q, p, &mut held))
                    })
                })?
            } else {
                metered(meter, || {
                    timed(case.workers, d, |_| {
                        let q = q.clone();
                        Ok(move || steadq_step(&q, p, batch))
                    })
                })?
            }
        }
        ("bare", m) => {
            let sync = match m {
                "strict" => bare::Sync::Strict,
                m if m.starts_with("strict-min") => bare::Sync::Min,
                "strict-file" => bare::Sync::File,
                "syncfs-batch" => bare::Sync::SyncfsPer(b),
                "syncfs-steps" => bare::Sync::SyncfsPerStep(b),
                _ => bare::Sync::None,
            };
            // The decomposition variants: none-names, none-watch, none-names-watch.
            let (names, watch) = (m.contains("names"), m.contains("watch"));
            let shards = if m.contains("shards") { 8 } else { 1 };
            metered(meter, || {
                timed(case.workers, d, |i| {
                    let mut w = bare::Bare::new(dir, i, sync, names, watch, shards)?;
                    if m.contains("onedir") {
                        w.receipts_in_ready()?;
                    }
                    Ok(move || w.step(p))
                })
            })?
        }
        ("sqlite", m) => {
            std::fs::create_dir_all(dir)?;
            // Held open until the case ends: when a database's last connection closes,
            // SQLite checkpoints and deletes its WAL, and the workers' would start a new one.
            let warm = sqlite::open(&dir.join("q.db"))?;
            sqlite::warm(&warm)?;
            let batch = if m == "full" { 1 } else { b };
            let r = metered(meter, || {
                timed(case.workers, d, |_| {
                    let mut c = sqlite::open(&dir.join("q.db"))?;
                    Ok(move || sqlite::step(&mut c, p, batch))
                })
            })?;
            drop(warm);
            r
        }
        _ => {
            let port = redis_port.ok_or("no redis")?;
            metered(meter, || {
                timed(case.workers, d, |i| {
                    let mut c = redis::Client::connect(port)?;
                    let mut n = 0u64;
                    let mut held = None;
                    let next = case.mode == "always-next";
                    Ok(move || {
                        n += 1;
                        let mut job = format!("{i}.{n}.").into_bytes();
                        job.extend_from_slice(p);
                        if next {
                            c.step_next(&job, &mut held)
                        } else {
                            c.lifecycle(&job)
                        }
                    })
                })
            })?
        }
    };
    let _ = std::fs::remove_dir_all(dir);
    Ok(r)
}

/// Run `f`, the timed part of a case, between two readings of `m`: the run carries the
/// journal commits and device counts it made (see [`Meter::around`]).
fn metered(m: &Meter, f: impl FnOnce() -> Res<Run>) -> Res<Run> {
    let (r, counted) = m.around(f);
    let mut r = r?;
    r.commits = counted.commits;
    r.device = counted.device;
    Ok(r)
}

fn steadq_step(q: &steadq::Queue, payload: &[u8], batch: usize) -> Res<usize> {
    let lease = Duration::from_secs(60);
    if batch <= 1 {
        q.enqueue(payload)?;
        // Under contention another worker may take every job this one could see: its own
        // job is then claimed by someone else later.
        return Ok(
            match q.claim_with(&steadq::ClaimOptions {
                lease: Some(lease),
                ..Default::default()
            })? {
                Some(l) => l.ack().map(|_| 1)?,
                None => 0,
            },
        );
    }
    let refs: Vec<&[u8]> = vec![payload; batch];
    q.enqueue_batch(&refs)?;
    let ls = q.claim_batch(batch, lease)?;
    let n = ls.len();
    q.ack_batch(ls)?;
    Ok(n)
}

/// A worker's step beside a producer: enqueue one job, then ack the job held and claim the
/// next under one barrier (`Lease::ack_and_claim`). Returns 1 when a job was acked.
fn steadq_step_next(
    q: &steadq::Queue,
    payload: &[u8],
    held: &mut Option<steadq::Lease>,
) -> Res<usize> {
    let lease = Duration::from_secs(60);
    q.enqueue(payload)?;
    Ok(match held.take() {
        Some(l) => {
            *held = l.ack_and_claim(lease)?.next?;
            1
        }
        None => {
            *held = q.claim_with(&steadq::ClaimOptions {
                lease: Some(lease),
                ..Default::default()
            })?;
            0
        }
    })
}

/// Remove `steadq-bench-PID` directories that an interrupted run (Ctrl-C, kill) left in
/// `dir`: those whose PID is no longer a running steadq-bench.
fn remove_stale(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("steadq-bench-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim_end() != "steadq-bench" && e.file_type().is_ok_and(|t| t.is_dir()) {
            eprintln!("removing {} left by an interrupted run", e.path().display());
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn main() -> Res<()> {
    let a = parse_args()?;
    remove_stale(&a.dir);
    let base = a.dir.join(format!("steadq-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    let server = redis::start(&base.join("redis"))?;
    if server.is_none() {
        eprintln!("redis-server not installed: Redis cases skipped");
    }
    let cases = cases(&a, server.is_some());
    // On ext3/ext4, the journal commits of each case are counted (jbd2's count), and on a
    // block device its flushes and sectors written, around the timed part of each case.
    let meter = Meter::new(&base, a.device.as_deref())?.settling(a.settle);
    if let Some(p) = meter.info() {
        eprintln!("counting journal commits from {}", p.display());
    }
    if let Some(p) = meter.stat() {
        eprintln!("counting device flushes and writes from {}", p.display());
    }
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); cases.len()];
    for round in 0..a.rounds {
        for (i, c) in cases.iter().enumerate() {
            // Redis keeps its lists across cases; they are empty after each lifecycle.
            let r = run_case(
                c,
                &base.join(format!("case{i}")),
                &a,
                server.as_ref().map(|s| s.port),
                &meter,
            )?;
            eprintln!(
                "round {} {:<7} {:<23} {}w {:>9.0} jobs/s {:>6} flushes/job {:>7} KiB/job",
                round + 1,
                c.system,
                c.mode,
                c.workers,
                r.rate(),
                r.flushes_per_job()
                    .map_or_else(|| "-".into(), |x| format!("{x:.2}")),
                r.kib_per_job()
                    .map_or_else(|| "-".into(), |x| format!("{x:.1}"))
            );
            runs[i].push(r);
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&base);
    let ratios = report::ratios(&cases, &runs);
    let medians: Vec<Run> = runs.into_iter().map(report::median).collect();
    let wear = report::wear(&cases, &medians);
    report::print(&cases, &medians, &ratios, &wear, &a.dir, a.rounds);
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(
        a.out.join("results.tsv"),
        report::tsv(&cases, &medians, &ratios),
    )?;
    std::fs::write(a.out.join("ratios.tsv"), report::ratios_tsv(&ratios))?;
    std::fs::write(a.out.join("wear.tsv"), report::wear_tsv(&wear))?;
    std::fs::write(a.out.join("chart.svg"), report::svg(&cases, &medians))?;
    println!(
        "wrote {}/results.tsv, ratios.tsv, wear.tsv and chart.svg",
        a.out.display()
    );
    Ok(())
}
