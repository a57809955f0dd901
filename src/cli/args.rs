//! Argument definitions: every subcommand's flags, and the parsers for their values.
//! Nothing here touches a queue; `cmd.rs` runs the commands.

use argh::FromArgs;
use std::path::PathBuf;
use std::time::Duration;
use steadq::State;

/// SteadQ: a durable job queue in a directory. No daemon, no database.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[cfg_attr(not(feature = "appliance"), argh(example = "steadq demo"))]
#[argh(
    note = "Logging: RUST_LOG=info (or debug) on stderr. `steadq --version` prints the version."
)]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        error_code(2, "failed, not done: nothing changed"),
        error_code(3, "nothing to do: no job ready"),
        error_code(4, "indeterminate: the operation may have happened"),
        error_code(5, "fsck found problems"),
        error_code(6, "lease lost: the lease was recovered, renewed or settled elsewhere, or its job file changed and was moved to dead/ as corrupt"),
        error_code(7, "queue full: at its capacity limit, not done"),
        error_code(8, "done, but its output could not be written (see stderr)")
    )
)]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq init /var/lib/jobs && echo hello | steadq enqueue /var/lib/jobs",
        example = "steadq work /var/lib/jobs --concurrency 2 -- sh -c 'cat > /tmp/job.$STEADQ_JOB_ID'"
    )
)]
pub struct Top {
    #[argh(subcommand)]
    pub cmd: Cmd,
}

#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand)]
pub enum Cmd {
    Init(Init),
    Config(Config),
    Limit(Limit),
    Enqueue(Enqueue),
    Work(Work),
    Claim(Claim),
    Renew(Renew),
    Ack(Ack),
    Nack(Nack),
    Fail(Fail),
    Status(Status),
    // Not in the appliance build: 12.5 KB of the size-limited aarch64 binary (7.8 KB with
    // `Queue::list` instead of `list_each`, holding ~100 bytes a job).
    #[cfg(not(feature = "appliance"))]
    Top(TopView),
    List(List),
    // Not in the appliance build: about 7 KB of the size-limited aarch64 binary.
    #[cfg(not(feature = "appliance"))]
    Show(Show),
    Recover(Recover),
    Fsck(Fsck),
    Dead(Dead),
    Compact(Compact),
    // Not in the appliance build: 23.6 KB of the size-limited aarch64 binary (with
    // demo-job, its workers' command); the demo runs from a full build.
    #[cfg(not(feature = "appliance"))]
    Demo(Demo),
    Wait(super::drain::Wait),
    // Not in the appliance build (the Pis' binary): `bench` is about 20 KB of it, and the
    // stripped aarch64 binary must stay at or under 600,000 bytes.
    #[cfg(not(feature = "appliance"))]
    Bench(Bench),
    // Not in the appliance build either: its packages carry the scripts made by a full build.
    #[cfg(not(feature = "appliance"))]
    Completions(Completions),
    #[cfg(not(feature = "appliance"))]
    DemoJob(DemoJob),
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
    let unit_ns: u128 = match unit {
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return Err(bad()),
    };
    let ns = super::fixed::parse_scaled(num, unit_ns).ok_or_else(bad)?;
    // Named here, with the option: past this a `--delay` reached beyond the year 2262 (the
    // last one a u64 of wall-clock ns holds) and failed later as "invalid argument: delay
    // reaches past the year 2262", naming no option.
    if ns > u128::from(MAX_DURATION_DAYS) * 86_400_000_000_000 {
        return Err(format!(
            "bad duration '{s}': at most {MAX_DURATION_DAYS}d (100 years)"
        ));
    }
    // At most 36,500 days: 3.2e18 ns, inside a u64.
    Ok(Duration::from_nanos(ns as u64))
}

/// The longest duration any option takes, in days: 100 years.
const MAX_DURATION_DAYS: u64 = 36_500;

pub fn dur(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// `--max-attempts`: 1 or more claims (0 would dead-letter the job before any run).
pub fn max_attempts(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("--max-attempts must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "bad --max-attempts '{s}': a whole number 1..={}",
            u32::MAX
        )),
    }
}

/// `--max-payload`: a byte count of 1..=u64::MAX (0 was refused later, exit 2 instead of 1).
pub fn max_payload(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n @ 1..) => Ok(n),
        _ => Err(format!(
            "bad --max-payload '{s}': a byte count from 1 to {}",
            u64::MAX
        )),
    }
}

/// `--evidence-max`: a byte count of 1..=u64::MAX (0 was refused later, exit 2 instead of 1).
pub fn evidence_max(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n @ 1..) => Ok(n),
        _ => Err(format!(
            "bad --evidence-max '{s}': a byte count from 1 to {}",
            u64::MAX
        )),
    }
}

/// `--concurrency`: 1 to 1024 jobs at once (each holds a child process and a lease).
pub fn concurrency(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n @ 1..=1024) => Ok(n),
        _ => Err(format!("bad --concurrency '{s}': 1..=1024")),
    }
}

/// A lease: 1 s to 7 days. Longer leases would keep a crashed worker's job hidden for weeks.
pub fn lease_dur(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_secs(1) || d > steadq::MAX_LEASE {
        return Err(format!("bad lease '{s}': use 1s to 7d"));
    }
    Ok(d)
}

fn parse_state(s: &str) -> Result<State, String> {
    Ok(match s {
        "ready" => State::Ready,
        "leased" => State::Leased,
        "delayed" => State::Delayed,
        "dead" => State::Dead,
        "acked" | "receipts" => State::Acked,
        "waiting" => State::Waiting,
        _ => {
            return Err(format!(
                "bad state '{s}': use ready, leased, delayed, dead, acked or waiting"
            ))
        }
    })
}

/// Create a queue (or complete an interrupted creation); print its id.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "init")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq init /var/lib/jobs --shards 16",
        example = "steadq init /var/lib/jobs --max-jobs 10000 --max-bytes 1073741824",
        example = "steadq init /var/lib/jobs --max-jobs none   # remove the job limit"
    )
)]
pub struct Init {
    /// queue directory (its parent must exist)
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// shards, 1..=256 (default 8); for an existing queue with another count, exit 2
    #[argh(option, from_str_fn(shards))]
    pub shards: Option<u16>,
    /// what an ack keeps, for a new queue: job (default), header or none; see `config`
    #[argh(option, from_str_fn(receipt_policy))]
    pub receipts: Option<steadq::ReceiptPolicy>,
    /// rotate evidence.log at this many bytes, for a new queue (default 16 MiB)
    #[argh(option, from_str_fn(evidence_max))]
    pub evidence_max: Option<u64>,
    /// rotated evidence files to keep, for a new queue (default 3)
    #[argh(option)]
    pub evidence_keep: Option<u32>,
    /// capacity: most ready+leased+delayed+waiting jobs, or "none"; also changes an existing queue
    #[argh(option, from_str_fn(limit))]
    pub max_jobs: Option<Option<u64>>,
    /// capacity: most bytes of ready+leased+delayed+waiting job files, or "none"
    #[argh(option, from_str_fn(limit))]
    pub max_bytes: Option<Option<u64>>,
}

/// A capacity limit: a number, or `none` for no limit.
pub fn limit(s: &str) -> Result<Option<u64>, String> {
    match s {
        "none" => Ok(None),
        _ => match s.parse() {
            // A limit of 0 refuses every enqueue: a slip, not a setting.
            Ok(0) => Err("a limit must be at least 1 (none lifts it)".into()),
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(format!("bad limit '{s}': a whole number, or none")),
        },
    }
}

/// Parse a priority level: 0..=7.
/// One digit only: `u8::from_str` would also take `+7` and `07`.
pub fn priority(s: &str) -> Result<u8, String> {
    match s.as_bytes() {
        [d @ b'0'..=b'9'] if d - b'0' < steadq::PRIORITY_LEVELS => Ok(d - b'0'),
        _ => Err("a priority is 0..=7 (7 is claimed first; the default is 3)".into()),
    }
}

/// Parse a shard count: 1..=256.
pub fn shards(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(n) if (1..=256).contains(&n) => Ok(n),
        _ => Err("a shard count is 1..=256".into()),
    }
}

/// A lease handle as typed: surrounding spaces, tabs and newlines are dropped (a handle
/// read back with `"$(cat handle.txt)"` or pasted with a trailing space names the same
/// lease); one inside it, or nothing at all, is refused with what was found.
pub fn handle(s: &str) -> Result<String, String> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    if t.is_empty() {
        return Err("the handle is empty: pass the line `claim` or `renew` printed".into());
    }
    if let Some(c) = t.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the handle holds {c:?} inside it: pass the one line `claim` or `renew` printed"
        ));
    }
    Ok(t.to_string())
}

/// Parse a path argument: anything but the empty string (which names no file; it failed
/// later as ": No such file or directory", exit 2).
pub fn path(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() {
        return Err("an empty path: name a file or directory".into());
    }
    Ok(PathBuf::from(s))
}

/// Parse an aging interval: a duration of at least 1 ms.
pub fn aging(s: &str) -> Result<Duration, String> {
    match dur(s)? {
        d if d >= Duration::from_millis(1) => Ok(d),
        _ => Err("aging must be at least 1ms".into()),
    }
}

/// Parse a `work --timeout`: at least 1 ms. 0s would stop every command at once and use
/// up every job's attempts, and so would any time shorter than a process takes to start
/// (`--timeout 0.0001ms` was accepted); leave the option out for no limit.
pub fn timeout(s: &str) -> Result<Duration, String> {
    match dur(s)? {
        d if d >= Duration::from_millis(1) => Ok(d),
        _ => Err(format!(
            "bad --timeout '{s}': at least 1ms (leave --timeout out for no limit)"
        )),
    }
}

/// Parse a receipt policy: job, header or none.
pub fn receipt_policy(s: &str) -> Result<steadq::ReceiptPolicy, String> {
    s.parse().map_err(|e: &str| e.to_string())
}

/// Change a queue's settings: the receipt policy and the evidence log limits (queue format
/// version 2). Workers already running keep the old settings until they restart.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "config")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq config /var/lib/jobs --receipts header",
        example = "steadq config /var/lib/jobs --receipts none --evidence-max 4194304 --evidence-keep 2"
    )
)]
pub struct Config {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// what an ack keeps: job (the whole file), header (128 bytes) or none (an evidence line)
    #[argh(option, from_str_fn(receipt_policy))]
    pub receipts: Option<steadq::ReceiptPolicy>,
    /// rotate evidence.log at this many bytes (default 16 MiB)
    #[argh(option, from_str_fn(evidence_max))]
    pub evidence_max: Option<u64>,
    /// rotated evidence files to keep (default 3)
    #[argh(option)]
    pub evidence_keep: Option<u32>,
}

/// Show or set a group's concurrency limit: at most N jobs of the group leased at once,
/// across every worker process. Kept in steadq.limits (checked by fsck); workers see a change
/// at their next claim of a job of the group.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "limit")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq limit /var/lib/jobs --group ffmpeg --max-leased 2",
        example = "steadq limit /var/lib/jobs --group ffmpeg --max-leased none   # remove it",
        example = "steadq limit /var/lib/jobs   # list the group limits"
    )
)]
pub struct Limit {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// the group, 1 to 16 of a-z 0-9
    #[argh(option, from_str_fn(group))]
    pub group: Option<steadq::GroupName>,
    /// most jobs of the group leased at once, 1..=1000, or "none" to remove the limit
    #[argh(option, from_str_fn(max_leased))]
    pub max_leased: Option<Option<u32>>,
}

/// Parse a group name: 1 to 16 characters of a-z and 0-9.
pub fn group(s: &str) -> Result<steadq::GroupName, String> {
    steadq::GroupName::new(s)
        .ok_or_else(|| format!("bad group '{s}': 1 to 16 characters of a-z and 0-9"))
}

/// A group limit: 1..=1000, or `none` for no limit.
pub fn max_leased(s: &str) -> Result<Option<u32>, String> {
    match s {
        "none" => Ok(None),
        _ => match s.parse::<u32>() {
            Ok(n) if (1..=steadq::MAX_GROUP_LIMIT).contains(&n) => Ok(Some(n)),
            _ => Err(format!("bad limit '{s}': 1..=1000, or none")),
        },
    }
}

/// Enqueue one job (payload from --file or stdin); print its id.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "enqueue")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "echo 'resize img_001.jpg' | steadq enqueue /var/lib/jobs",
        example = "steadq enqueue /var/lib/jobs --file job.json --max-attempts 3 --delay 10m",
        example = "steadq enqueue /var/lib/jobs --key order-1234 --wait 30s < order.json",
        example = "steadq enqueue /var/lib/jobs --priority 7 < urgent.json"
    )
)]
pub struct Enqueue {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// read the payload from this file instead of stdin
    #[argh(option, from_str_fn(path))]
    pub file: Option<PathBuf>,
    /// claims allowed before the job is dead-lettered (default 5)
    #[argh(option, from_str_fn(max_attempts))]
    pub max_attempts: Option<u32>,
    /// do not run before this much time has passed (e.g. 30s, 10m)
    #[argh(option, from_str_fn(dur))]
    pub delay: Option<Duration>,
    /// largest payload accepted, bytes (default 16 MiB)
    #[argh(
        option,
        default = "steadq::DEFAULT_MAX_PAYLOAD",
        from_str_fn(max_payload)
    )]
    pub max_payload: u64,
    /// idempotency key (1..=128 of A-Z a-z 0-9 . _ : -): a duplicate prints the existing id
    #[argh(option)]
    pub key: Option<String>,
    /// when the queue is full, wait this long for room (inotify, no polling), e.g. 30s
    #[argh(option, from_str_fn(dur))]
    pub wait: Option<Duration>,
    /// priority 0..=7, the higher claimed first (default 3; other levels need a
    /// version-3 queue)
    #[argh(option, from_str_fn(priority))]
    pub priority: Option<u8>,
    /// run only after these jobs are acked: ID[,ID...], repeatable (at most 64 in all, each
    /// an id or job file name in this queue; not with --delay, --key or --wait); the job
    /// waits in waiting/ and is dead-lettered (dependency) if one is
    #[argh(option, from_str_fn(job_ids))]
    pub after: Vec<Vec<steadq::JobId>>,
    /// the job's group, 1 to 16 of a-z 0-9: at most the group's limit of its jobs are
    /// leased at once (see `limit`; needs a version-3 queue)
    #[argh(option, from_str_fn(group))]
    pub group: Option<steadq::GroupName>,
}

/// A job as the command line names it: its id (32 lowercase hex digits) or any of its file
/// names, with or without the directories before it (the name's first field is the id).
pub fn job_ref(s: &str) -> Option<steadq::JobId> {
    let name = s.rsplit('/').next().unwrap_or(s);
    steadq::JobId::parse(name.split('.').next().unwrap_or(""))
}

/// One `--after` value: a comma-separated list of jobs, each an id or a job file name
/// ([`job_ref`]), none empty.
fn job_ids(s: &str) -> Result<Vec<steadq::JobId>, String> {
    s.split(',')
        .map(|p| {
            job_ref(p.trim()).ok_or_else(|| {
                format!(
                    "bad job '{p}' in --after '{s}': use ID[,ID...], each 32 hex digits or a job file name"
                )
            })
        })
        .collect()
}

/// Claim one job; print its lease handle (for renew/ack/nack/fail).
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "claim")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        error_code(2, "not done: also when a ready shard cannot be read and no job was found elsewhere (named on stderr)"),
        error_code(3, "no job ready (within --wait) in any shard"),
        error_code(4, "indeterminate: the claim's barrier failed, or a claimed job whose handle or payload could not be delivered may still be leased (see stderr)")
    )
)]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "rc=0; h=$(steadq claim /var/lib/jobs --payload-out /tmp/p) || rc=$?; [ $rc = 3 ] && exit 0; [ $rc = 0 ] || exit $rc",
        example = "process /tmp/p && steadq ack /var/lib/jobs \"$h\""
    )
)]
pub struct Claim {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// lease (visibility timeout), 1s to 7d, e.g. 5m (default 30s)
    #[argh(option, default = "Duration::from_secs(30)", from_str_fn(lease_dur))]
    pub lease: Duration,
    /// wait up to this long for a job (default: do not wait)
    #[argh(option, from_str_fn(dur))]
    pub wait: Option<Duration>,
    /// write the verified payload to this file (a path: '-' is refused, as stdout carries
    /// the lease handle that `h=$(...)` captures)
    #[argh(option, from_str_fn(path))]
    pub payload_out: Option<PathBuf>,
    /// largest payload read, bytes (default 16 MiB); larger jobs go to dead/ (toolarge)
    #[argh(
        option,
        default = "steadq::DEFAULT_MAX_PAYLOAD",
        from_str_fn(max_payload)
    )]
    pub max_payload: u64,
    /// aging against starvation: a ready job ranks one priority level higher per this
    /// much age, e.g. 60s (default: strict priority)
    #[argh(option, from_str_fn(aging))]
    pub aging: Option<Duration>,
    /// print the claimed job as one JSON object (as `list --json`, with its "handle")
    /// instead of the bare handle
    #[argh(switch)]
    pub json: bool,
}

/// Extend a lease; print the new handle.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "renew")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(example = "h=$(steadq renew /var/lib/jobs \"$h\" --lease 5m)")
)]
pub struct Renew {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// lease handle printed by claim or renew (surrounding whitespace is ignored)
    #[argh(positional, from_str_fn(handle))]
    pub handle: String,
    /// new lease from now, 1s to 7d (default 30s)
    #[argh(option, default = "Duration::from_secs(30)", from_str_fn(lease_dur))]
    pub lease: Duration,
}

/// Ack a leased job: it becomes a receipt.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "ack", example = "steadq ack /var/lib/jobs \"$h\"")]
pub struct Ack {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// lease handle printed by claim or renew (surrounding whitespace is ignored)
    #[argh(positional, from_str_fn(handle))]
    pub handle: String,
}

/// Nack a leased job: retry after --delay (dead-lettered when attempts are exhausted).
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "nack")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(example = "steadq nack /var/lib/jobs \"$h\" --delay 1m")
)]
pub struct Nack {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// lease handle printed by claim or renew (surrounding whitespace is ignored)
    #[argh(positional, from_str_fn(handle))]
    pub handle: String,
    /// retry after this long, e.g. 30s or 5m (default 0s: at once)
    #[argh(option, default = "Duration::ZERO", from_str_fn(dur))]
    pub delay: Duration,
}

/// Dead-letter a leased job now.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "fail")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(example = "steadq fail /var/lib/jobs \"$h\" --reason badinput")
)]
pub struct Fail {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// lease handle printed by claim or renew (surrounding whitespace is ignored)
    #[argh(positional, from_str_fn(handle))]
    pub handle: String,
    /// reason: 1 to 16 characters of [a-z0-9] (default "failed")
    #[argh(option, default = "String::from(\"failed\")")]
    pub reason: String,
}

/// Counts per state, oldest ready job's age, expired leases, dead jobs; bytes with --bytes.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "status")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq status /var/lib/jobs",
        example = "steadq status /var/lib/jobs --prometheus > /var/lib/node_exporter/textfile/steadq.prom.$$ && mv /var/lib/node_exporter/textfile/steadq.prom.$$ /var/lib/node_exporter/textfile/steadq.prom"
    )
)]
pub struct Status {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// print JSON
    #[argh(switch)]
    pub json: bool,
    /// print Prometheus text format (for node_exporter's textfile collector)
    #[argh(switch)]
    pub prometheus: bool,
    /// count bytes per state too (a stat of every job: about 3 times slower on a deep
    /// queue); always counted when the queue has a byte limit
    #[argh(switch)]
    pub bytes: bool,
}

/// A live view: depth per state and priority, claims and acks per second, the oldest ready
/// job, dead jobs by reason, leases by holder (the claimer's boot). Redrawn when the queue's
/// directories change (inotify) and every second; q or Ctrl-C quits. When stdout is not a
/// terminal it prints one snapshot (no rates) and exits.
#[cfg(not(feature = "appliance"))]
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "top")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq top /var/lib/jobs",
        example = "steadq top /var/lib/jobs | cat   # one snapshot"
    )
)]
pub struct TopView {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
}

/// List jobs: state, id, attempts, deadlines or reasons, path.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "list")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(example = "steadq list /var/lib/jobs --state dead")
)]
pub struct List {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// only this state: ready, leased, delayed, dead, acked or waiting
    #[argh(option, from_str_fn(parse_state))]
    pub state: Option<State>,
    /// do not remember the ids printed (flat memory at any depth); a job that moves while
    /// the directories are read may then be printed twice
    #[argh(switch)]
    pub stream: bool,
    /// print one JSON object per job and line: id, state, attempt, max, priority, gen,
    /// deadline (unix seconds), reason, path
    #[argh(switch)]
    pub json: bool,
}

/// Show one job: state, name fields, header, digests and payload.
#[cfg(not(feature = "appliance"))]
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "show")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(example = "steadq show /var/lib/jobs 019d2f6a7c3e4b5a8d9e0f1a2b3c4d5e")
)]
pub struct Show {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// job id (32 hex digits) or any of its file names
    #[argh(positional)]
    pub job: String,
    /// print only the raw payload bytes
    #[argh(switch)]
    pub raw: bool,
}

/// Recover: expired leases back to ready (or dead), due delayed jobs to ready, temp files
/// of dead writers removed. It does all it can: an entry it cannot move (a full disk) or a
/// directory it cannot read (say `chmod 000 ready/03`: named on stderr) is reported and the
/// rest are recovered (exit 2 if nothing was changed, 4 if something was).
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "recover")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        error_code(2, "something could not be recovered, nothing was"),
        error_code(4, "something could not be recovered, the rest was")
    )
)]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq recover /var/lib/jobs",
        example = "steadq recover /var/lib/jobs --due-now   # after the clock was set far ahead"
    )
)]
pub struct Recover {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// also make every delayed job ready now, whatever its not-before time (for delays set
    /// while the wall clock was wrong)
    #[argh(switch)]
    pub due_now: bool,
}

/// Check every entry (name tag, digests, foreign entries, jobs in the wrong directory,
/// directories this user cannot read); one line per problem. --quarantine moves each bad
/// entry to quarantine/ and each misplaced job to the directory its name belongs in, and
/// says so on its line; it exits 0 when it moved every problem it found, 5 when problems
/// are left (an unreadable directory, a duplicate job, a wrong identity file, a move that
/// would replace a file).
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "fsck")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(error_code(
        5,
        "problems found (with --quarantine: problems left that it did not move)"
    ))
)]
#[cfg_attr(
    not(feature = "appliance"),
    argh(example = "steadq fsck /var/lib/jobs || steadq fsck /var/lib/jobs --quarantine")
)]
pub struct Fsck {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// move bad entries to quarantine/ (keeping their paths)
    #[argh(switch)]
    pub quarantine: bool,
}

/// Dead-letters: list, requeue (JOB or --all; attempts reset), purge.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "dead")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq dead list /var/lib/jobs",
        example = "steadq dead requeue /var/lib/jobs 019d2f6a7c3e4b5a8d9e0f1a2b3c4d5e",
        example = "steadq dead requeue /var/lib/jobs --all",
        example = "steadq dead requeue /var/lib/jobs --reason timeout",
        example = "steadq dead purge /var/lib/jobs"
    )
)]
pub struct Dead {
    #[argh(subcommand)]
    pub action: DeadAction,
}

/// What `dead` does.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand)]
pub enum DeadAction {
    List(DeadList),
    Requeue(DeadRequeue),
    Purge(DeadPurge),
}

/// List dead-lettered jobs with their reasons.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "list")]
pub struct DeadList {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
}

/// Requeue dead jobs to ready with their attempts reset: one JOB, or --all.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "requeue")]
pub struct DeadRequeue {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// job id (32 hex digits) or any of its file names
    #[argh(positional)]
    pub job: Option<String>,
    /// requeue every dead job
    #[argh(switch)]
    pub all: bool,
    /// requeue only the dead jobs with this reason (with --all, or alone: every dead job
    /// with it; with JOB: that job, if it has it)
    #[argh(option)]
    pub reason: Option<String>,
}

/// Delete every dead job (they are gone for good).
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "purge")]
pub struct DeadPurge {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
}

/// Remove old receipts, keeping verifiable evidence in evidence.log (append-only, fsynced);
/// also expire idempotency keys older than --older-than whose job is settled.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "compact")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq compact /var/lib/jobs --older-than 7d",
        example = "steadq compact /var/lib/jobs --older-than 1d --keys-older-than 30d"
    )
)]
pub struct Compact {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// remove receipts acked (and keys made, without --keys-older-than) longer ago than
    /// this (e.g. 7d)
    #[argh(option, from_str_fn(dur))]
    pub older_than: Duration,
    /// expire idempotency keys made longer ago than this instead (e.g. 30d), whose job is
    /// settled: key retention apart from receipts
    #[argh(option, from_str_fn(dur))]
    pub keys_older_than: Option<Duration>,
}

/// Run CMD once per job: payload on stdin; STEADQ_JOB_ID, STEADQ_ATTEMPT,
/// STEADQ_MAX_ATTEMPTS and STEADQ_QUEUE in its environment. Exit 0 acks; 75 (EX_TEMPFAIL)
/// retries after --retry-delay without backoff growth; 65 (EX_DATAERR) dead-letters at once
/// (reason dataerr); anything else (or a signal) retries with exponential backoff; when
/// attempts are exhausted the job goes to dead/.
// The rest is left out of the appliance build (the size-limited aarch64 binary); docs/cli.md
// has it.
#[cfg_attr(
    not(feature = "appliance"),
    doc = " The lease is renewed while CMD runs; its exit"
)]
#[cfg_attr(
    not(feature = "appliance"),
    doc = " status settles the job even if it did not read all of stdin. --timeout: stop CMD (SIGTERM,"
)]
#[cfg_attr(
    not(feature = "appliance"),
    doc = " SIGKILL 2 s later) and retry with backoff. An ack that was not done (full disk) is retried"
)]
#[cfg_attr(
    not(feature = "appliance"),
    doc = " (1 s, doubling to 30 s) with the lease kept: --once gives up after 4 tries, about 7 s"
)]
#[cfg_attr(
    not(feature = "appliance"),
    doc = " (exit 2), a running worker after one --lease; the job stays leased until it expires. SIGTERM,"
)]
#[cfg_attr(
    not(feature = "appliance"),
    doc = " SIGINT, SIGHUP or SIGQUIT: stop taking jobs, let running ones finish within --grace, then stop them and"
)]
#[cfg_attr(
    not(feature = "appliance"),
    doc = " release their jobs. An empty queue is waited on with inotify, not polled."
)]
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "work")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        error_code(2, "cannot run CMD, or the queue failed; --once: settling the job was not done (it stays leased until its lease expires)"),
        error_code(3, "--once: no job was ready"),
        error_code(4, "--once: settling the job is indeterminate (it may have happened)"),
        error_code(6, "--once: the lease was lost before the job was settled")
    )
)]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq work /var/lib/jobs -- ./process-job.sh",
        example = "steadq work /var/lib/jobs --concurrency 4 --lease 2m -- ffmpeg-wrapper",
        example = "steadq work /var/lib/jobs --once -- sh -c 'cat >> /tmp/out'"
    )
)]
pub struct Work {
    /// queue directory
    #[argh(positional, from_str_fn(path))]
    pub dir: PathBuf,
    /// lease (visibility timeout), 1s to 7d, renewed every third of it while CMD runs
    /// (default 30s)
    #[argh(option, default = "Duration::from_secs(30)", from_str_fn(lease_dur))]
    pub lease: Duration,
    /// jobs to run at once, 1 to 1024 (default 1)
    #[argh(option, default = "1", from_str_fn(concurrency))]
    pub concurrency: u32,
    /// handle at most one job, do not wait; exit 3 if none is ready
    #[argh(switch)]
    pub once: bool,
    /// on SIGTERM, SIGINT, SIGHUP or SIGQUIT, time running jobs get to finish (default 30s)
    #[argh(option, default = "Duration::from_secs(30)", from_str_fn(dur))]
    pub grace: Duration,
    /// first retry delay after a failure; doubles per attempt (default 10s)
    #[argh(option, default = "Duration::from_secs(10)", from_str_fn(dur))]
    pub backoff: Duration,
    /// longest retry delay (default 1h)
    #[argh(option, default = "Duration::from_secs(3600)", from_str_fn(dur))]
    pub max_backoff: Duration,
    /// retry delay after exit code 75 (default 60s)
    #[argh(option, default = "Duration::from_secs(60)", from_str_fn(dur))]
    pub retry_delay: Duration,
    /// stop a command running longer than this (SIGTERM to its process group, SIGKILL
    /// 2 s later) and retry the job with backoff, like a failure; at least 1ms (default:
    /// no limit; 0s is refused)
    #[argh(option, from_str_fn(timeout))]
    pub timeout: Option<Duration>,
    /// print nothing per job
    #[argh(switch, short = 'q')]
    pub quiet: bool,
    /// largest payload this worker reads, bytes (default 16 MiB); larger jobs go to dead/
    /// with reason toolarge, for a worker with a higher limit to requeue
    #[argh(
        option,
        default = "steadq::DEFAULT_MAX_PAYLOAD",
        from_str_fn(max_payload)
    )]
    pub max_payload: u64,
    /// aging against starvation: a ready job ranks one priority level higher per this
    /// much age, e.g. 60s (default: strict priority, higher levels always first)
    #[argh(option, from_str_fn(aging))]
    pub aging: Option<Duration>,
    /// the command and its arguments (after --)
    #[argh(positional, greedy)]
    pub command: Vec<String>,
}

/// Demo: hash a few thousand files of this machine through a queue with several worker
/// processes, SIGKILL one of them mid-job, and show that every job is acked and fsck is clean.
#[cfg(not(feature = "appliance"))]
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "demo")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq demo",
        example = "steadq demo /tmp/q --jobs 500 --keep"
    )
)]
pub struct Demo {
    /// queue directory (default: a new directory under the temp dir, removed afterwards)
    #[argh(positional, from_str_fn(path))]
    pub dir: Option<PathBuf>,
    /// jobs to enqueue, at most (default 3000)
    #[argh(option, default = "3000")]
    pub jobs: usize,
    /// worker processes (default 4)
    #[argh(option, default = "4")]
    pub workers: usize,
    /// keep the queue directory afterwards
    #[argh(switch)]
    pub keep: bool,
}

/// (used by demo) read a file path on stdin, append "sha256  path" to RESULTS.
#[cfg(not(feature = "appliance"))]
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "demo-job")]
pub struct DemoJob {
    /// results file to append to
    #[argh(positional, from_str_fn(path))]
    pub results: PathBuf,
}

/// Benchmark the full job lifecycle (enqueue, claim, verify, ack): jobs/s and p50/p99
/// latency per durability mode and worker count (threads sharing one queue handle).
#[cfg(not(feature = "appliance"))]
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "bench")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq bench /mnt/ssd/benchdir --duration 5s --workers 1,8 --modes strict,batched"
    )
)]
pub struct Bench {
    /// directory to benchmark in (default: the temp dir); on the filesystem you care about
    #[argh(positional, from_str_fn(path))]
    pub dir: Option<PathBuf>,
    /// run each case this long (default 3s)
    #[argh(option, default = "Duration::from_secs(3)", from_str_fn(dur))]
    pub duration: Duration,
    /// stop each case after this many jobs instead (0: use --duration)
    #[argh(option, default = "0")]
    pub jobs: usize,
    /// worker counts, comma-separated (default 1,2,4,8)
    #[argh(option, default = "String::from(\"1,2,4,8\")")]
    pub workers: String,
    /// modes, comma-separated: strict, batched, none (default all three)
    #[argh(option, default = "String::from(\"strict,batched,none\")")]
    pub modes: String,
    /// jobs per batch in batched mode (default 64)
    #[argh(option, default = "64")]
    pub batch: usize,
    /// ready jobs to put in the queue before timing, kept at that depth (default 0)
    #[argh(option, default = "0")]
    pub depth: usize,
    /// payload size, bytes (default 64)
    #[argh(option, default = "64")]
    pub payload: usize,
}

/// Print the shell completion script for bash, zsh or fish.
#[cfg(not(feature = "appliance"))]
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(subcommand, name = "completions")]
#[cfg_attr(
    not(feature = "appliance"),
    argh(
        example = "steadq completions bash > /etc/bash_completion.d/steadq",
        example = "steadq completions zsh > /usr/local/share/zsh/site-functions/_steadq",
        example = "steadq completions fish > ~/.config/fish/completions/steadq.fish"
    )
)]
pub struct Completions {
    /// the shell: bash, zsh or fish
    #[argh(positional, from_str_fn(shell))]
    pub shell: Shell,
}

/// A shell that `steadq completions` writes a script for.
#[cfg(not(feature = "appliance"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[cfg(not(feature = "appliance"))]
fn shell(s: &str) -> Result<Shell, String> {
    match s {
        "bash" => Ok(Shell::Bash),
        "zsh" => Ok(Shell::Zsh),
        "fish" => Ok(Shell::Fish),
        _ => Err(format!("unknown shell '{s}': use bash, zsh or fish")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.1s"), Ok(Duration::from_millis(1100)));
        assert_eq!(parse_duration("2.5ms"), Ok(Duration::from_micros(2500)));
        assert_eq!(parse_duration(".5h"), Ok(Duration::from_secs(1800)));
        assert_eq!(
            parse_duration("36500d"),
            Ok(Duration::from_secs(36_500 * 86400))
        );
        let e = parse_duration("999999d").unwrap_err();
        assert!(
            e.contains("'999999d'") && e.contains("at most 36500d"),
            "{e}"
        );
        for bad in [
            "", "x", "3x", "-1s", "s", "1e99d", "2", "0", "1.5", "36501d", ".s", "1.2.3s",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
    }

    #[test]
    fn argh_parses_subcommands() {
        use Top;
        let t = Top::from_args(
            &["steadq"],
            &["enqueue", "/q", "--delay", "10m", "--max-attempts", "3"],
        )
        .ok()
        .unwrap();
        let Cmd::Enqueue(e) = t.cmd else { panic!() };
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
        let Cmd::Work(w) = t.cmd else { panic!() };
        assert_eq!(w.command, vec!["sh", "-c", "exit 0"]);
    }
}
