//! Subcommand arguments and the small commands. `work`, `demo` and `bench` have their own
//! files.

pub mod bench;
pub mod demo;
pub mod stdout;
pub mod work;

use argh::FromArgs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use steadq::{
    EnqueueOptions, Error, ErrorKind, JobId, Kind, Options, Outcome, Queue, Reason, State,
};

/// An error for the command line: a message and an exit code.
pub struct CliError {
    msg: String,
    code: i32,
}

impl CliError {
    /// Exit code 2 (not done) with a message.
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError {
            msg: msg.into(),
            code: 2,
        }
    }
    pub fn code(&self) -> i32 {
        self.code
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> CliError {
        let code = if e.is_lease_lost() {
            6
        } else if e.outcome() == Outcome::Indeterminate {
            4
        } else {
            2
        };
        CliError {
            msg: e.to_string(),
            code,
        }
    }
}

/// Parse `500ms`, `30s`, `5m`, `2h`, `7d`, `1.5m`. The unit is required: a bare `10` could mean
/// seconds or minutes, so it is refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad =
        || format!("bad duration '{s}': use a number with ms, s, m, h or d, e.g. 30s, 5m, 7d");
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let mult = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return Err(bad()),
    };
    let secs = n * mult;
    if !secs.is_finite() || !(0.0..=1e12).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

fn dur(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// A lease: 1 s to 7 days. Longer leases would keep a crashed worker's job hidden for weeks.
pub fn lease_dur(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(7 * 86400) {
        return Err(format!("bad lease '{s}': use 1s to 7d"));
    }
    Ok(d)
}

/// Open an existing queue, with an error that says which path.
pub fn open(dir: &Path) -> Result<Queue, CliError> {
    Ok(Queue::open(dir)?)
}

/// A JSON string literal (RFC 8259: quote, backslash and control characters escaped).
fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn fmt_age(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn state_name(s: State) -> &'static str {
    match s {
        State::Ready => "ready",
        State::Leased => "leased",
        State::Delayed => "delayed",
        State::Dead => "dead",
        State::Acked => "acked",
    }
}

fn parse_state(s: &str) -> Result<State, String> {
    Ok(match s {
        "ready" => State::Ready,
        "leased" => State::Leased,
        "delayed" => State::Delayed,
        "dead" => State::Dead,
        "acked" | "receipts" => State::Acked,
        _ => {
            return Err(format!(
                "bad state '{s}': use ready, leased, delayed, dead or acked"
            ))
        }
    })
}

fn parse_job_id(s: &str) -> Result<JobId, CliError> {
    // Accept a bare id or any job file name (its first field is the id).
    let first = s
        .rsplit('/')
        .next()
        .unwrap_or(s)
        .split('.')
        .next()
        .unwrap_or("");
    JobId::parse(first).ok_or_else(|| {
        CliError::usage(format!(
            "bad job id '{s}': expected 32 lowercase hex digits (see `steadq list`)"
        ))
    })
}

/// Create a queue (or complete an interrupted creation); print its id.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "init",
    example = "steadq init /var/lib/jobs --shards 16"
)]
pub struct Init {
    /// queue directory (its parent must exist)
    #[argh(positional)]
    dir: PathBuf,
    /// shards, 1..=256 (default 8); for an existing queue with another count, exit 2
    #[argh(option)]
    shards: Option<u16>,
}

pub fn cmd_init(a: Init) -> Result<i32, CliError> {
    let defaults = Options::default();
    let q = Queue::create(
        &a.dir,
        Options {
            shards: a.shards.unwrap_or(defaults.shards),
            ..defaults
        },
    )?;
    let have = q.identity().shards;
    // Without --shards (the systemd unit runs init before every start) any count is fine.
    if let Some(want) = a.shards.filter(|&w| w != have) {
        return Err(CliError::usage(format!(
            "{}: queue exists with {have} shards; --shards {want} was not applied",
            a.dir.display()
        )));
    }
    stdout::note_done(
        format!(
            "the queue {} WAS created (or already existed)",
            a.dir.display()
        ),
        "its id",
    );
    out!("{:032x}", q.id());
    eprintln!("queue {} ready: {have} shards", a.dir.display());
    Ok(0)
}

/// Enqueue one job (payload from --file or stdin); print its id.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "enqueue",
    example = "echo 'resize img_001.jpg' | steadq enqueue /var/lib/jobs",
    example = "steadq enqueue /var/lib/jobs --file job.json --max-attempts 3 --delay 10m"
)]
pub struct Enqueue {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// read the payload from this file instead of stdin
    #[argh(option)]
    file: Option<PathBuf>,
    /// claims allowed before the job is dead-lettered (default 5)
    #[argh(option)]
    max_attempts: Option<u32>,
    /// do not run before this much time has passed (e.g. 30s, 10m)
    #[argh(option, from_str_fn(dur))]
    delay: Option<Duration>,
    /// largest payload accepted, bytes (default 16 MiB)
    #[argh(option, default = "16 << 20")]
    max_payload: u64,
}

fn read_limited(r: &mut dyn Read, limit: u64, what: &str) -> Result<Vec<u8>, CliError> {
    let mut buf = Vec::new();
    r.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| CliError::usage(format!("{what}: {e}")))?;
    if buf.len() as u64 > limit {
        return Err(CliError::usage(format!(
            "{what}: payload exceeds the limit of {limit} bytes (--max-payload)"
        )));
    }
    Ok(buf)
}

pub fn cmd_enqueue(a: Enqueue) -> Result<i32, CliError> {
    if a.max_attempts == Some(0) {
        return Err(CliError::usage("--max-attempts must be at least 1"));
    }
    // Read the payload first: a bad file changes nothing.
    let payload = match &a.file {
        Some(f) => {
            let mut file = std::fs::File::open(f)
                .map_err(|e| CliError::usage(format!("{}: {e}", f.display())))?;
            read_limited(&mut file, a.max_payload, &f.display().to_string())?
        }
        None => read_limited(&mut std::io::stdin().lock(), a.max_payload, "stdin")?,
    };
    let q = Queue::open_with(
        &a.dir,
        Options {
            max_payload: a.max_payload,
            ..Options::default()
        },
    )?;
    let id = q.enqueue_with(
        &payload,
        &EnqueueOptions {
            max_attempts: a.max_attempts,
            delay: a.delay,
        },
    )?;
    stdout::note_done(format!("the job WAS enqueued as {id}"), "its id");
    out!("{id}");
    Ok(0)
}

pub use work::Work;

/// Claim one job; print its lease handle (for renew/ack/nack/fail).
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "claim",
    example = "rc=0; h=$(steadq claim /var/lib/jobs --payload-out /tmp/p) || rc=$?; [ $rc = 3 ] && exit 0; [ $rc = 0 ] || exit $rc",
    example = "process /tmp/p && steadq ack /var/lib/jobs \"$h\"",
    error_code(3, "no job ready (within --wait)")
)]
pub struct Claim {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// lease (visibility timeout), 1s to 7d, e.g. 5m (default 30s)
    #[argh(option, default = "Duration::from_secs(30)", from_str_fn(lease_dur))]
    lease: Duration,
    /// wait up to this long for a job (default: do not wait)
    #[argh(option, from_str_fn(dur))]
    wait: Option<Duration>,
    /// write the verified payload to this file (a path: '-' is refused, as stdout carries
    /// the lease handle that `h=$(...)` captures)
    #[argh(option)]
    payload_out: Option<PathBuf>,
    /// largest payload read, bytes (default 16 MiB); larger jobs go to dead/ (toolarge)
    #[argh(option, default = "16 << 20")]
    max_payload: u64,
}

pub fn cmd_claim(a: Claim) -> Result<i32, CliError> {
    if a.payload_out
        .as_deref()
        .is_some_and(|p| p.as_os_str() == "-")
    {
        return Err(CliError::usage(
            "--payload-out -: stdout carries the lease handle, so the payload needs a file path (e.g. --payload-out /tmp/payload)",
        ));
    }
    // Open the payload file before claiming: a bad path then changes nothing.
    let mut file = match &a.payload_out {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?,
        ),
        None => None,
    };
    let q = Queue::open_with(
        &a.dir,
        Options {
            max_payload: a.max_payload,
            ..Options::default()
        },
    )?;
    let lease = match a.wait {
        Some(w) => q.claim_wait(a.lease, w)?,
        None => q.claim_for(a.lease)?,
    };
    let Some(lease) = lease else {
        eprintln!("no job ready in {}", a.dir.display());
        return Ok(3);
    };
    if let (Some(f), Some(p)) = (file.as_mut(), &a.payload_out) {
        if let Err(e) = f.write_all(lease.payload()).and_then(|()| f.sync_all()) {
            let released = match lease.release() {
                Ok(()) => "the job was released to ready".to_string(),
                Err(r) => format!("releasing the job failed too: {r}"),
            };
            return Err(CliError {
                msg: format!("{}: {e}; {released}", p.display()),
                code: 4,
            });
        }
    }
    let handle = lease.handle();
    let text = format!("{handle}\n").into_bytes();
    let attempt = lease.attempt();
    if let (false, Some(e)) = (stdout::write(&text), stdout::take_error()) {
        // Nobody got the handle: give the job back rather than leave it hidden for a lease.
        let msg = format!("the job's lease handle could not be written to stdout: {e}");
        return Err(match lease.release() {
            Ok(()) => CliError::usage(format!(
                "{msg}; the job was released to ready (attempt {attempt} used)"
            )),
            Err(r) => CliError {
                msg: format!("{msg}; releasing the job failed too: {r}"),
                code: 4,
            },
        });
    }
    let _ = lease.into_handle();
    Ok(0)
}

/// Extend a lease; print the new handle.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "renew",
    example = "h=$(steadq renew /var/lib/jobs \"$h\" --lease 5m)"
)]
pub struct Renew {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// lease handle printed by claim or renew
    #[argh(positional)]
    handle: String,
    /// new lease from now, 1s to 7d (default 30s)
    #[argh(option, default = "Duration::from_secs(30)", from_str_fn(lease_dur))]
    lease: Duration,
}

pub fn cmd_renew(a: Renew) -> Result<i32, CliError> {
    let q = open(&a.dir)?;
    let mut l = q.lease_from_handle(&a.handle)?;
    let r = l.renew(a.lease);
    // The lease belongs to the script that holds the handle, which still runs: a failed
    // renew must never release the job (dropping the Lease would), whatever the error.
    let handle = l.into_handle();
    if let Err(e) = r {
        let mut e = CliError::from(e);
        if e.code == 4 && handle != a.handle {
            e.msg += &format!(
                "; the lease may have been renewed: its handle is then {handle}, else still the old one"
            );
        } else if e.code == 2 {
            e.msg += "; the lease was kept as it was (not released): the old handle still holds it";
        }
        return Err(e);
    }
    stdout::note_done(
        format!("the lease WAS renewed; its new handle is {handle}"),
        "the handle",
    );
    out!("{handle}");
    Ok(0)
}

/// Ack a leased job: it becomes a receipt.
#[derive(FromArgs)]
#[argh(subcommand, name = "ack", example = "steadq ack /var/lib/jobs \"$h\"")]
pub struct Ack {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// lease handle
    #[argh(positional)]
    handle: String,
}

pub fn cmd_ack(a: Ack) -> Result<i32, CliError> {
    let q = open(&a.dir)?;
    let r = q.lease_from_handle(&a.handle)?.ack()?;
    stdout::note_done(format!("the job {} WAS acked", r.id), "its receipt name");
    out!("{}", r.name);
    Ok(0)
}

/// Nack a leased job: retry after --delay (dead-lettered when attempts are exhausted).
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "nack",
    example = "steadq nack /var/lib/jobs \"$h\" --delay 1m"
)]
pub struct Nack {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// lease handle
    #[argh(positional)]
    handle: String,
    /// retry after this long, e.g. 30s or 5m (default 0s: at once)
    #[argh(option, default = "Duration::ZERO", from_str_fn(dur))]
    delay: Duration,
}

pub fn cmd_nack(a: Nack) -> Result<i32, CliError> {
    let q = open(&a.dir)?;
    let n = q.lease_from_handle(&a.handle)?.nack(a.delay)?;
    stdout::note_done("the job WAS nacked", "its new state");
    match n {
        steadq::Nacked::Ready => out!("ready"),
        steadq::Nacked::Delayed(ns) => out!("delayed until unix {:.3}", ns as f64 / 1e9),
        steadq::Nacked::Dead => out!("dead (attempts exhausted)"),
    }
    Ok(0)
}

/// Dead-letter a leased job now.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "fail",
    example = "steadq fail /var/lib/jobs \"$h\" --reason badinput"
)]
pub struct Fail {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// lease handle
    #[argh(positional)]
    handle: String,
    /// reason: 1 to 16 characters of [a-z0-9] (default "failed")
    #[argh(option, default = "String::from(\"failed\")")]
    reason: String,
}

pub fn cmd_fail(a: Fail) -> Result<i32, CliError> {
    let reason = Reason::new(&a.reason).ok_or_else(|| {
        CliError::usage(format!(
            "bad --reason '{}': use 1 to 16 characters of [a-z0-9]",
            a.reason
        ))
    })?;
    let q = open(&a.dir)?;
    q.lease_from_handle(&a.handle)?.fail(reason)?;
    Ok(0)
}

/// Counts per state, bytes, oldest ready job's age, expired leases, dead jobs.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "status",
    example = "steadq status /var/lib/jobs",
    example = "steadq status /var/lib/jobs --prometheus > /var/lib/node_exporter/textfile/steadq.prom.$$ && mv /var/lib/node_exporter/textfile/steadq.prom.$$ /var/lib/node_exporter/textfile/steadq.prom"
)]
pub struct Status {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// print JSON
    #[argh(switch)]
    json: bool,
    /// print Prometheus text format (for node_exporter's textfile collector)
    #[argh(switch)]
    prometheus: bool,
}

const STATE_NAMES: [&str; 5] = ["ready", "leased", "delayed", "dead", "acked"];

pub fn cmd_status(a: Status) -> Result<i32, CliError> {
    if a.json && a.prometheus {
        return Err(CliError::usage("--json and --prometheus are exclusive"));
    }
    let q = open(&a.dir)?;
    let s = q.status()?;
    if a.json {
        status_json(&a, &q, &s);
    } else if a.prometheus {
        status_prometheus(&a, &s);
    } else {
        status_text(&a, &q, &s);
    }
    Ok(0)
}

fn status_counts(s: &steadq::Status) -> [u64; 5] {
    [s.ready, s.leased, s.delayed, s.dead, s.acked]
}

fn status_json(a: &Status, q: &Queue, s: &steadq::Status) {
    let (names, counts) = (STATE_NAMES, status_counts(s));
    let age_s = s.oldest_ready_age_ns.map(|n| n as f64 / 1e9);
    let mut o = String::from("{");
    o += &format!(
        "\"queue\":{},\"queue_id\":\"{:032x}\"",
        json_string(&a.dir.display().to_string()),
        q.id()
    );
    for (n, c) in names.iter().zip(counts) {
        o += &format!(",\"{n}\":{c}");
    }
    o += &format!(
        ",\"expired_leases\":{},\"foreign\":{}",
        s.expired_leases, s.foreign
    );
    o += ",\"bytes\":{";
    o += &names
        .iter()
        .zip(s.bytes)
        .map(|(n, b)| format!("\"{n}\":{b}"))
        .collect::<Vec<_>>()
        .join(",");
    o += "}";
    o += &format!(
        ",\"oldest_ready_age_seconds\":{}",
        age_s.map_or("null".into(), |a| format!("{a:.3}"))
    );
    o += "}";
    out!("{o}");
}

fn status_prometheus(a: &Status, s: &steadq::Status) {
    let (names, counts) = (STATE_NAMES, status_counts(s));
    let age_s = s.oldest_ready_age_ns.map(|n| n as f64 / 1e9);
    let ql = a
        .dir
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n"); // Prometheus label escaping
    out!("# HELP steadq_jobs Jobs in each state.\n# TYPE steadq_jobs gauge");
    for (n, c) in names.iter().zip(counts) {
        out!("steadq_jobs{{queue=\"{ql}\",state=\"{n}\"}} {c}");
    }
    out!("# HELP steadq_bytes Bytes of job files in each state.\n# TYPE steadq_bytes gauge");
    for (n, b) in names.iter().zip(s.bytes) {
        out!("steadq_bytes{{queue=\"{ql}\",state=\"{n}\"}} {b}");
    }
    out!("# HELP steadq_expired_leases Leases past their deadline, not yet recovered.\n# TYPE steadq_expired_leases gauge");
    out!(
        "steadq_expired_leases{{queue=\"{ql}\"}} {}",
        s.expired_leases
    );
    out!("# HELP steadq_foreign_entries Entries that are not valid jobs (see steadq fsck).\n# TYPE steadq_foreign_entries gauge");
    out!("steadq_foreign_entries{{queue=\"{ql}\"}} {}", s.foreign);
    out!("# HELP steadq_oldest_ready_age_seconds Age of the oldest ready job (0 when none).\n# TYPE steadq_oldest_ready_age_seconds gauge");
    out!(
        "steadq_oldest_ready_age_seconds{{queue=\"{ql}\"}} {:.3}",
        age_s.unwrap_or(0.0)
    );
}

fn status_text(a: &Status, q: &Queue, s: &steadq::Status) {
    let (names, counts) = (STATE_NAMES, status_counts(s));
    out!("queue    {} ({:032x})", a.dir.display(), q.id());
    for (i, (n, c)) in names.iter().zip(counts).enumerate() {
        out!("{n:<8} {c:>8}  {:>12} bytes", s.bytes[i]);
    }
    out!(
        "expired  {:>8}  leases past their deadline (run `steadq recover`)",
        s.expired_leases
    );
    if s.foreign > 0 {
        out!(
            "foreign  {:>8}  entries that are not jobs (run `steadq fsck`)",
            s.foreign
        );
    }
    out!(
        "oldest ready job: {}",
        s.oldest_ready_age_ns.map_or("-".into(), fmt_age)
    );
}

/// List jobs: state, id, attempts, deadlines or reasons, path.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "list",
    example = "steadq list /var/lib/jobs --state dead"
)]
pub struct List {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// only this state: ready, leased, delayed, dead or acked
    #[argh(option, from_str_fn(parse_state))]
    state: Option<State>,
}

fn describe(q: &Queue, k: &Kind) -> String {
    let now_wall = q.clock().wall_ns();
    let now_boot = q.clock().boot_ns();
    match k {
        Kind::Ready => String::new(),
        Kind::Leased(l) if l.boot_id != q.clock().boot_id() => {
            "lease from an earlier boot (expired)".into()
        }
        Kind::Leased(l) if l.boot_deadline_ns <= now_boot => format!(
            "lease expired {} ago",
            fmt_age(now_boot - l.boot_deadline_ns)
        ),
        Kind::Leased(l) => format!(
            "lease expires in {}",
            fmt_age(l.boot_deadline_ns - now_boot)
        ),
        k @ Kind::Delayed { .. } => {
            let boot = q.clock().boot_id();
            match steadq::due_wall_ns(k, boot, now_boot, now_wall) {
                _ if steadq::delay_due(k, boot, now_boot, now_wall) => "due now".into(),
                due => format!("due in {}", fmt_age(due.saturating_sub(now_wall))),
            }
        }
        Kind::Dead { reason } => format!("reason {reason}"),
        Kind::Receipt { token, .. } => format!("token {token:032x}"),
    }
}

pub fn cmd_list(a: List) -> Result<i32, CliError> {
    let q = open(&a.dir)?;
    for l in q.list(a.state)? {
        let n = &l.name;
        let line = format!(
            "{:<7} {} attempt {}/{} gen {} {} {}\n",
            state_name(l.state),
            n.id,
            n.attempt,
            n.max_attempts,
            n.generation,
            describe(&q, &n.kind),
            l.rel_path(q.id())
        );
        if !stdout::write(line.as_bytes()) {
            break; // a closed pipe (| head) is a clean exit; another error exits 2 in main
        }
    }
    Ok(0)
}

/// Show one job: state, name fields, header, digests and payload.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "show",
    example = "steadq show /var/lib/jobs 019d2f6a7c3e4b5a8d9e0f1a2b3c4d5e"
)]
pub struct Show {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// job id (32 hex digits) or any of its file names
    #[argh(positional)]
    job: String,
    /// print only the raw payload bytes
    #[argh(switch)]
    raw: bool,
}

pub fn cmd_show(a: Show) -> Result<i32, CliError> {
    let id = parse_job_id(&a.job)?;
    let q = open(&a.dir)?;
    let l = q.find(id).map_err(|e| match e.kind() {
        ErrorKind::NoSuchJob => CliError::usage(format!("{}: no job {id}", a.dir.display())),
        _ => e.into(),
    })?;
    let (h, payload) = match q.read_job(&l) {
        Ok(x) => x,
        // A corrupt file is shown by its name (which is verified on its own); its header and
        // payload cannot be trusted. `read_job` moves nothing.
        Err(e) if matches!(e.kind(), ErrorKind::Corrupt(_)) => return show_corrupt(&a, &q, &l, &e),
        Err(e) => return Err(e.into()),
    };
    if a.raw {
        stdout::write(&payload);
        return Ok(0);
    }
    show_name(&q, &l);
    out!("created   unix {:.3}", h.created_ns as f64 / 1e9);
    out!("bytes     {}", h.payload_len);
    out!("sha256    {}", steadq::format::hex32(&h.payload_sha256));
    out!("envelope  {}", steadq::format::hex32(&h.envelope_sha256));
    match std::str::from_utf8(&payload) {
        Ok(t) if t.len() <= 4096 => out!("payload   {t}"),
        Ok(_) => out!(
            "payload   ({} bytes of text; --raw prints it)",
            payload.len()
        ),
        Err(_) => out!(
            "payload   ({} bytes of binary; --raw prints it)",
            payload.len()
        ),
    }
    Ok(0)
}

/// The fields of a job's name: state, path, attempt, generation.
fn show_name(q: &Queue, l: &steadq::Listed) {
    let n = &l.name;
    out!("job       {}", n.id);
    out!("state     {} {}", state_name(l.state), describe(q, &n.kind));
    out!("path      {}", l.rel_path(q.id()));
    out!("attempt   {}/{}", n.attempt, n.max_attempts);
    out!("gen       {}", n.generation);
}

/// Show a job whose file fails verification. Dead-lettered already (reason corrupt): exit 0;
/// in any other state: exit 2 (a claim or `fsck` will dead-letter it).
fn show_corrupt(a: &Show, q: &Queue, l: &steadq::Listed, e: &Error) -> Result<i32, CliError> {
    let ErrorKind::Corrupt(c) = e.kind() else {
        unreachable!("show_corrupt is called for corrupt jobs only")
    };
    let path = a.dir.join(l.rel_path(q.id()));
    if a.raw {
        return Err(CliError::usage(format!(
            "{}: corrupt job file ({c}): its payload cannot be verified, so --raw prints nothing",
            path.display()
        )));
    }
    show_name(q, l);
    out!("file      corrupt ({c}): header and payload not shown");
    if l.state == State::Dead {
        return Ok(0);
    }
    Err(CliError::usage(format!(
        "{}: corrupt job file ({c}), not yet dead-lettered (a claim or `steadq fsck` will)",
        path.display()
    )))
}

/// Recover: expired leases back to ready (or dead), due delayed jobs to ready, temp files
/// of dead writers removed. It does all it can: an entry it cannot move (a full disk) is
/// reported and the rest are recovered (exit 2 or 4 then).
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "recover",
    example = "steadq recover /var/lib/jobs",
    example = "steadq recover /var/lib/jobs --due-now   # after the clock was set far ahead",
    error_code(2, "something could not be recovered, nothing was"),
    error_code(4, "something could not be recovered, the rest was")
)]
pub struct Recover {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// also make every delayed job ready now, whatever its not-before time (for delays set
    /// while the wall clock was wrong)
    #[argh(switch)]
    due_now: bool,
}

pub fn cmd_recover(a: Recover) -> Result<i32, CliError> {
    let q = open(&a.dir)?;
    let made_due = if a.due_now { q.make_due(None)? } else { 0 };
    let mut r = q.recover_report();
    let err = r.first_error.take();
    stdout::note_done("recovery WAS done", "its report");
    out!(
        "expired leases to ready {}, to dead {}; delayed jobs due {}; made due now {made_due}; temp files removed {}; foreign entries {}; failed {}",
        r.expired, r.expired_dead, r.due, r.temp_removed, r.foreign, r.failed
    );
    match err {
        None => Ok(0),
        Some(e) => {
            let e = CliError::from(e);
            eprintln!(
                "steadq: {} entries could not be recovered (the others were); first: {e}",
                r.failed
            );
            Ok(e.code())
        }
    }
}

/// Check every entry (name tag, digests, foreign entries); one line per problem.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "fsck",
    example = "steadq fsck /var/lib/jobs || steadq fsck /var/lib/jobs --quarantine",
    error_code(5, "problems found")
)]
pub struct Fsck {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// move bad entries to quarantine/ (keeping their paths)
    #[argh(switch)]
    quarantine: bool,
}

pub fn cmd_fsck(a: Fsck) -> Result<i32, CliError> {
    let q = open(&a.dir)?;
    let r = q.fsck(a.quarantine)?;
    if a.quarantine {
        stdout::note_done("fsck --quarantine WAS done", "its list of problems");
    }
    for p in &r.problems {
        out!("{p}");
    }
    eprintln!(
        "fsck {}: {} entries checked, {} job files verified, {} corrupt jobs already dead-lettered, {} problems",
        a.dir.display(),
        r.checked,
        r.verified,
        r.dead_corrupt,
        r.problems.len()
    );
    Ok(if r.clean() { 0 } else { 5 })
}

/// Dead jobs: list, requeue (JOB or --all; attempts reset), purge.
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "dead",
    example = "steadq dead /var/lib/jobs list",
    example = "steadq dead /var/lib/jobs requeue 019d2f6a7c3e4b5a8d9e0f1a2b3c4d5e",
    example = "steadq dead /var/lib/jobs requeue --all",
    example = "steadq dead /var/lib/jobs purge"
)]
pub struct Dead {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// list, requeue or purge
    #[argh(positional)]
    action: String,
    /// job id (for requeue)
    #[argh(positional)]
    job: Option<String>,
    /// requeue every dead job
    #[argh(switch)]
    all: bool,
}

pub fn cmd_dead(a: Dead) -> Result<i32, CliError> {
    match (a.action.as_str(), &a.job, a.all) {
        ("list", None, false) => cmd_list(List { dir: a.dir, state: Some(State::Dead) }),
        ("requeue", Some(j), false) => {
            let id = parse_job_id(j)?;
            let q = open(&a.dir)?;
            q.requeue_dead(Some(id)).map_err(|e| match e.kind() {
                ErrorKind::NoSuchJob => CliError::usage(format!("{}: no dead job {id}", a.dir.display())),
                _ => e.into(),
            })?;
            stdout::note_done(format!("the job {id} WAS requeued"), "the report");
            out!("requeued {id}");
            Ok(0)
        }
        ("requeue", None, true) => {
            let n = open(&a.dir)?.requeue_dead(None)?;
            stdout::note_done(format!("{n} jobs WERE requeued"), "the report");
            out!("requeued {n} jobs");
            Ok(0)
        }
        ("purge", None, false) => {
            let n = open(&a.dir)?.purge_dead()?;
            stdout::note_done(format!("{n} dead jobs WERE purged"), "the report");
            out!("purged {n} dead jobs");
            Ok(0)
        }
        ("requeue", _, _) => Err(CliError::usage("dead requeue needs a job id or --all (not both)")),
        (other, _, _) => Err(CliError::usage(format!("bad dead action '{other}' (or extra arguments): use list, requeue JOB, requeue --all or purge"))),
    }
}

/// Remove old receipts, keeping verifiable evidence in evidence.log (append-only, fsynced).
#[derive(FromArgs)]
#[argh(
    subcommand,
    name = "compact",
    example = "steadq compact /var/lib/jobs --older-than 7d"
)]
pub struct Compact {
    /// queue directory
    #[argh(positional)]
    dir: PathBuf,
    /// remove receipts acked longer ago than this (e.g. 7d)
    #[argh(option, from_str_fn(dur))]
    older_than: Duration,
}

pub fn cmd_compact(a: Compact) -> Result<i32, CliError> {
    let q = open(&a.dir)?;
    let r = q.compact(a.older_than)?;
    let n = r.removed;
    stdout::note_done(format!("{n} receipts WERE compacted"), "the report");
    out!(
        "compacted {n} receipts into {}",
        a.dir.join(steadq::EVIDENCE_FILE).display()
    );
    if r.cut > 0 {
        out!(
            "disk was full: cut {} receipts to their headers first, freeing {} bytes",
            r.cut,
            r.freed_bytes
        );
    }
    Ok(0)
}

pub use bench::Bench;
pub use demo::{Demo, DemoJob};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_controls() {
        assert_eq!(json_string("a\"b\\c\u{1}\n"), r#""a\"b\\c\u0001\u000a""#);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        for bad in ["", "x", "3x", "-1s", "s", "1e99d", "2", "0", "1.5"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
    }

    #[test]
    fn argh_parses_subcommands() {
        use crate::Top;
        let t = Top::from_args(
            &["steadq"],
            &["enqueue", "/q", "--delay", "10m", "--max-attempts", "3"],
        )
        .ok()
        .unwrap();
        let crate::Cmd::Enqueue(e) = t.cmd else {
            panic!()
        };
        assert_eq!(
            (e.delay, e.max_attempts),
            (Some(Duration::from_secs(600)), Some(3))
        );
        let err = Top::from_args(&["steadq"], &["enqueue", "/q", "--delay", "10x"])
            .err()
            .unwrap();
        assert!(err.output.contains("bad duration '10x'"), "{}", err.output);
        let t = Top::from_args(
            &["steadq"],
            &[
                "work",
                "/q",
                "--concurrency",
                "3",
                "--",
                "sh",
                "-c",
                "exit 0",
            ],
        )
        .ok()
        .unwrap();
        let crate::Cmd::Work(w) = t.cmd else { panic!() };
        assert_eq!(w.command, vec!["sh", "-c", "exit 0"]);
    }

    #[test]
    fn job_ids_from_names() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse_job_id(id).ok().unwrap().to_string(), id);
        assert!(parse_job_id(&format!(
            "ready/00/{id}.g0000000000000000.a00000000.m00000005.k0000000000000000.sqj"
        ))
        .is_ok());
        assert!(parse_job_id("xyz").is_err());
    }
}
