//! `stowq`: SteadQ's subcommands on an `s3://bucket/prefix` queue.
//!
//! A separate binary, not an `s3://` mode of `steadq`: stowq depends on steadq (for the
//! envelope and outcomes), so a steadq feature depending on stowq would be a package cycle.
//!
//! Exit codes as steadq's: 0 done, 1 bad command line, 2 not done, 3 no job ready,
//! 4 indeterminate, 6 lease lost.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stowq::{s3::Client, Config, Error, ErrorKind, Lease, Options, Outcome, Queue};

const USAGE: &str = "usage: stowq COMMAND s3://bucket/prefix [ARGS]
  init URL                         create the bucket (if missing) and the queue
  enqueue URL [FILE|-]             enqueue a payload (default stdin); prints the job id
  claim URL [--lease-ms N] [--payload-out FILE]
                                   claim one job; prints its lease handle (exit 3: none ready)
  renew URL HANDLE [--lease-ms N]  extend a lease; prints the new handle
  ack URL HANDLE                   ack; prints the receipt generation
  nack URL HANDLE [--delay-ms N] [--reason TEXT]
  fail URL HANDLE REASON           dead-letter with a reason
  work URL [--lease-ms N] [--once] [--idle-exit] [--poll-ms N] -- CMD [ARGS...]
                                   run CMD per job, payload on stdin: exit 0 acks, 75 nacks
                                   after --retry-ms, 65 dead-letters, else nacks with backoff
  status URL                       counts per state
  list URL                         one line per job: id state generation attempt time_ms
  recover URL                      recover expired leases
  requeue URL [ID]                 dead jobs back to ready
  repair URL                       make the index agree with the jobs after a crash
Endpoint and credentials: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION, AWS_PROFILE and ~/.aws/credentials. Exit: 0 done, 1 usage, 2 not done,
3 no job ready, 4 indeterminate, 6 lease lost.";

struct Fail(i32, String);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let code = match (&e.kind, e.outcome) {
            (ErrorKind::LeaseLost, _) => 6,
            (_, Outcome::Indeterminate) => 4,
            (_, Outcome::NotDone) => 2,
        };
        Fail(code, e.to_string())
    }
}

fn usage(msg: &str) -> Fail {
    Fail(1, format!("{msg}\n{USAGE}"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => {}
        Err(Fail(code, msg)) => {
            eprintln!("stowq: {msg}");
            std::process::exit(code);
        }
    }
}

/// Take `--name VALUE` out of `args`.
fn take_opt(args: &mut Vec<String>, name: &str) -> Option<String> {
    let i = args.iter().position(|a| a == name)?;
    if i + 1 >= args.len() {
        return None;
    }
    args.remove(i);
    Some(args.remove(i))
}

fn take_flag(args: &mut Vec<String>, name: &str) -> bool {
    match args.iter().position(|a| a == name) {
        Some(i) => {
            args.remove(i);
            true
        }
        None => false,
    }
}

fn num(args: &mut Vec<String>, name: &str, default: i64) -> Result<i64, Fail> {
    match take_opt(args, name) {
        Some(v) => v
            .parse()
            .map_err(|_| usage(&format!("{name}: not a number"))),
        None => Ok(default),
    }
}

fn open(url: &str, options: Options, create: bool) -> Result<Queue, Fail> {
    let (bucket, prefix) = stowq::parse_s3_url(url).map_err(|m| usage(&m))?;
    let config = Config::from_env().map_err(|m| Fail(2, m))?;
    let client = Client::new(config, &bucket);
    if create {
        let r = client
            .create_bucket()
            .map_err(|f| Fail(2, format!("create bucket: {f:?}")))?;
        if r.status != 200 && r.status != 409 {
            return Err(Fail(
                2,
                format!("create bucket {bucket}: HTTP {}", r.status),
            ));
        }
        return Ok(Queue::create(client, &prefix, options)?);
    }
    Ok(Queue::open(client, &prefix, options)?)
}

/// `id.gen.token`: what a later command needs to take the lease up again.
fn handle(l: &Lease) -> String {
    format!("{:032x}.{:x}.{}", l.id, l.generation(), l.token)
}

fn parse_handle(q: &Queue, h: &str) -> Result<Lease, Fail> {
    let bad = || usage(&format!("{h:?}: not a lease handle from claim or renew"));
    let f: Vec<&str> = h.trim().split('.').collect();
    if f.len() != 3 {
        return Err(bad());
    }
    let id = u128::from_str_radix(f[0], 16).map_err(|_| bad())?;
    let gen = u64::from_str_radix(f[1], 16).map_err(|_| bad())?;
    Ok(q.resume_lease(id, gen, f[2])?)
}

fn run(all: &[String]) -> Result<(), Fail> {
    let (cmd, rest) = all.split_first().ok_or_else(|| usage("no command"))?;
    if cmd == "-h" || cmd == "--help" || cmd == "help" {
        println!("{USAGE}");
        return Ok(());
    }
    let mut args: Vec<String> = rest.to_vec();
    let tail = match args.iter().position(|a| a == "--") {
        Some(i) => {
            let t = args.split_off(i);
            t[1..].to_vec()
        }
        None => Vec::new(),
    };
    let mut opts = Options::default();
    opts.lease_ms = num(&mut args, "--lease-ms", opts.lease_ms)?;
    if args.is_empty() {
        return Err(usage("no s3://bucket/prefix"));
    }
    let url = args.remove(0);
    match cmd.as_str() {
        "init" => open(&url, opts, true).map(|q| println!("{:032x}", q.queue_id())),
        "enqueue" => enqueue(&open(&url, opts, false)?, &args),
        "claim" => claim(&open(&url, opts, false)?, &mut args),
        "renew" => {
            let q = open(&url, opts.clone(), false)?;
            let mut l = parse_handle(&q, args.first().ok_or_else(|| usage("no handle"))?)?;
            q.renew(&mut l, opts.lease_ms)?;
            println!("{}", handle(&l));
            Ok(())
        }
        "ack" => {
            let q = open(&url, opts, false)?;
            let l = parse_handle(&q, args.first().ok_or_else(|| usage("no handle"))?)?;
            let r = q.ack(&l)?;
            println!(
                "{:032x} done generation {} attempt {}",
                r.id, r.gen, r.attempt
            );
            Ok(())
        }
        "nack" => {
            let delay = num(&mut args, "--delay-ms", 0)?.max(0) as u64;
            let reason = take_opt(&mut args, "--reason").unwrap_or_default();
            let q = open(&url, opts, false)?;
            let l = parse_handle(&q, args.first().ok_or_else(|| usage("no handle"))?)?;
            println!("{:?}", q.nack(&l, Duration::from_millis(delay), &reason)?);
            Ok(())
        }
        "fail" => {
            let q = open(&url, opts, false)?;
            let l = parse_handle(&q, args.first().ok_or_else(|| usage("no handle"))?)?;
            let reason = args.get(1).ok_or_else(|| usage("no reason"))?;
            Ok(q.fail(&l, reason)?)
        }
        "work" => work(open(&url, opts, false)?, &mut args, &tail),
        "status" => {
            let s = open(&url, opts, false)?.status()?;
            println!(
                "ready {}\ndelayed {}\nleased {}\nexpired {}\ndone {}\ndead {}",
                s.ready, s.delayed, s.leased, s.expired, s.done, s.dead
            );
            Ok(())
        }
        "list" => {
            for l in open(&url, opts, false)?.list()? {
                let s = l.state.as_str();
                println!("{:032x} {s} {} {} {}", l.id, l.gen, l.attempt, l.sort_ms);
            }
            Ok(())
        }
        "recover" => {
            let r = open(&url, opts, false)?.recover()?;
            println!("ready {} dead {} stale {}", r.ready, r.dead, r.stale);
            Ok(())
        }
        "repair" => {
            let r = open(&url, opts, false)?.repair()?;
            println!("put {} deleted {}", r.put, r.deleted);
            Ok(())
        }
        "requeue" => {
            let only = match args.first() {
                Some(h) => Some(u128::from_str_radix(h, 16).map_err(|_| usage("bad job id"))?),
                None => None,
            };
            println!("{}", open(&url, opts, false)?.requeue(only)?);
            Ok(())
        }
        _ => Err(usage(&format!("unknown command {cmd:?}"))),
    }
}

fn enqueue(q: &Queue, args: &[String]) -> Result<(), Fail> {
    let mut payload = Vec::new();
    match args.first().map(String::as_str) {
        None | Some("-") => std::io::stdin().read_to_end(&mut payload),
        Some(f) => std::fs::File::open(f).and_then(|mut h| h.read_to_end(&mut payload)),
    }
    .map_err(|e| Fail(2, format!("read payload: {e}")))?;
    println!("{:032x}", q.enqueue(&payload)?);
    Ok(())
}

fn claim(q: &Queue, args: &mut Vec<String>) -> Result<(), Fail> {
    let out = take_opt(args, "--payload-out");
    let Some(l) = q.claim()? else {
        return Err(Fail(3, "no job ready".into()));
    };
    if let Some(path) = out {
        std::fs::write(&path, &l.payload).map_err(|e| Fail(4, format!("{path}: {e}")))?;
    }
    println!("{}", handle(&l));
    Ok(())
}

/// Keep renewing `lease` every third of the lease until `stop`; the newest lease is shared.
fn renewer(
    q: Arc<Queue>,
    lease: Arc<Mutex<Lease>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let every = Duration::from_millis((q.options.lease_ms / 3).max(100) as u64);
        let mut last = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
            if last.elapsed() < every {
                continue;
            }
            last = Instant::now();
            let mut l = lease.lock().unwrap_or_else(|p| p.into_inner());
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match q.renew(&mut l, q.options.lease_ms) {
                Ok(()) => {}
                Err(e) if e.outcome == Outcome::Indeterminate => {
                    // Settle it now: our own newer generation (same token) means it was done.
                    if let Ok(n) = q.resume_lease(l.id, l.generation() + 1, &l.token) {
                        *l = n;
                    } else {
                        eprintln!("stowq work: renew {:032x}: {e}", l.id);
                    }
                }
                Err(e) => eprintln!("stowq work: renew {:032x}: {e}", l.id),
            }
        }
    })
}

fn work(q: Queue, args: &mut Vec<String>, cmd: &[String]) -> Result<(), Fail> {
    if cmd.is_empty() {
        return Err(usage("work needs -- CMD"));
    }
    let once = take_flag(args, "--once");
    let idle_exit = take_flag(args, "--idle-exit");
    let poll = num(args, "--poll-ms", 1000)?.max(10) as u64;
    let retry = num(args, "--retry-ms", 60_000)?.max(0) as u64;
    let q = Arc::new(q);
    loop {
        let claimed = match q.claim() {
            Ok(c) => c,
            // A long-running worker outlives an outage: log, wait, look again.
            Err(e) if !once => {
                eprintln!("stowq work: claim: {e}");
                std::thread::sleep(Duration::from_millis(poll));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let Some(l) = claimed else {
            if once || idle_exit {
                return Err(Fail(3, "no job ready".into()));
            }
            std::thread::sleep(Duration::from_millis(poll));
            continue;
        };
        run_job(&q, l, cmd, retry)?;
        if once {
            return Ok(());
        }
    }
}

fn run_job(q: &Arc<Queue>, l: Lease, cmd: &[String], retry_ms: u64) -> Result<(), Fail> {
    let id = format!("{:032x}", l.id);
    let spawned = Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("STOWQ_JOB_ID", &id)
        .env("STOWQ_ATTEMPT", l.attempt.to_string())
        .stdin(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            // The job is not at fault: give it back at once, then stop.
            let _ = q.nack(&l, Duration::ZERO, "command could not start");
            return Err(Fail(2, format!("{}: {e}", cmd[0])));
        }
    };
    let payload = l.payload.clone();
    let lease = Arc::new(Mutex::new(l));
    let stop = Arc::new(AtomicBool::new(false));
    let r = renewer(q.clone(), lease.clone(), stop.clone());
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&payload); // a command may exit without reading it all
    }
    let status = child.wait().map_err(|e| Fail(2, format!("wait: {e}")))?;
    stop.store(true, Ordering::Relaxed);
    let _ = r.join();
    let l = lease.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let backoff = Duration::from_millis(1000 << l.attempt.min(10));
    let outcome = match status.code() {
        Some(0) => q.ack(&l).map(|r| format!("acked (generation {})", r.gen)),
        Some(65) => q.fail(&l, "dataerr").map(|()| "dead-lettered".into()),
        Some(75) => q
            .nack(&l, Duration::from_millis(retry_ms), "tempfail")
            .map(|n| format!("{n:?}")),
        _ => q
            .nack(&l, backoff, &format!("command: {status}"))
            .map(|n| format!("{n:?}")),
    };
    match outcome {
        Ok(what) => eprintln!("stowq work: {id} {what}"),
        Err(e) => eprintln!("stowq work: {id}: {e}"),
    }
    Ok(())
}
