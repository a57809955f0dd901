//! Command handlers for the small commands: each parses nothing (args.rs did), calls the
//! library once or twice, and prints through `out!` with an encoder from encode.rs.

use super::args::*;
use super::encode;
use super::exit::Exit;
use super::fixed;
use super::payload_file::PayloadFile;
use super::progress::Progress;
use super::{open, stdout, CliError};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use steadq::{EnqueueOptions, ErrorKind, JobId, Options, Queue, Reason, State};

pub(super) fn parse_job_id(s: &str) -> Result<JobId, CliError> {
    // A bare id or any job file name (its first field is the id).
    super::args::job_ref(s).ok_or_else(|| {
        CliError::bad_usage(format!(
            "bad job id '{s}': expected 32 lowercase hex digits (see `steadq list`)"
        ))
    })
}

/// `enqueue --after`'s jobs, every occurrence's added up, checked against the command's own
/// values before stdin is read or the queue opened (bad usage, exit 1): at most
/// [`steadq::MAX_AFTER`], none named twice, and not with `--delay`, `--key` or `--wait`
/// (a waiting job has no due time, and neither a key nor room is checked for it).
fn after_ids(a: &Enqueue) -> Result<Vec<JobId>, CliError> {
    let ids: Vec<JobId> = a.after.iter().flatten().copied().collect();
    if ids.is_empty() {
        return Ok(ids);
    }
    let with: Vec<&str> = [
        (a.delay.is_some_and(|d| !d.is_zero()), "--delay"),
        (a.key.is_some(), "--key"),
        (a.wait.is_some(), "--wait"),
    ]
    .iter()
    .filter(|w| w.0)
    .map(|w| w.1)
    .collect();
    if !with.is_empty() {
        return Err(CliError::bad_usage(format!(
            "--after cannot go with {}: a job with dependencies has no delay, key or wait; nothing done",
            with.join(" or ")
        )));
    }
    if ids.len() > steadq::MAX_AFTER {
        return Err(CliError::bad_usage(format!(
            "--after names {} jobs: at most {} in all; nothing done",
            ids.len(),
            steadq::MAX_AFTER
        )));
    }
    if let Some(x) = ids
        .iter()
        .enumerate()
        .find_map(|(i, x)| ids[..i].contains(x).then_some(x))
    {
        return Err(CliError::bad_usage(format!(
            "--after names job {x} twice; nothing done"
        )));
    }
    Ok(ids)
}

/// An enqueue's error, naming the input (`what`) when reading it failed or it was too large.
fn name_input(e: steadq::EnqueueError, what: &str) -> CliError {
    match e.kind() {
        ErrorKind::PayloadTooLarge { limit, .. } => CliError::not_done(format!(
            "{what}: payload exceeds the limit of {limit} bytes (--max-payload); not done, nothing changed"
        )),
        ErrorKind::Input(msg) => CliError::not_done(format!(
            "{what}: reading the payload failed: {msg}; not done, nothing changed"
        )),
        _ => e.into(),
    }
}

/// What `dir` says of its shard count when its identity file is missing (`None`: it is
/// there, or `dir` cannot be read; the library then reports what it finds). Nothing is
/// followed: the identity file is looked at with `lstat`, the shard directories beneath.
fn shards_without_identity(dir: &std::path::Path) -> Option<steadq::OrphanShards> {
    if std::fs::symlink_metadata(dir.join("steadq.queue")).is_ok() {
        return None;
    }
    steadq::orphan_shards(dir).ok()
}

/// Counts as `a, b, c` (at most 8, then `...`).
fn counts_list(fits: &[u16]) -> String {
    let mut v: Vec<String> = fits.iter().take(8).map(|n| n.to_string()).collect();
    if fits.len() > 8 {
        v.push("...".into());
    }
    v.join(", ")
}

/// `init` of a queue whose identity file is missing: refused, before anything is made,
/// unless its shard count can be told (see below); `Ok` for a queue that has its identity.
fn check_orphan_shards(a: &Init) -> Result<(), CliError> {
    // A queue whose identity file is missing is restored with the shard count its layout
    // tells, or, where shard directories are missing too, the --shards given if every job
    // name fits it. Anything else is refused before anything is made: a wrong count strands
    // every job it misplaces (a restore that counted the directories left after a cleanup
    // had removed the empty ones made 3 of 8 shards and exited 0 with no job claimable).
    let (d, shown) = (a.dir.display(), a.dir.display());
    match (shards_without_identity(&a.dir), a.shards) {
        (Some(steadq::OrphanShards::Told(n)), Some(want)) if want != n => {
            return Err(CliError::not_done(format!(
                "{d}: the identity file steadq.queue is missing and ready/ holds {n} shards; \
                 --shards {want} cannot be applied (run `steadq init {shown}` without --shards \
                 to restore the queue's identity); nothing changed"
            )));
        }
        // One count alone fits: the queue's own (the library restores it).
        (Some(steadq::OrphanShards::Fits(fits)), None) if fits.len() == 1 => {}
        (Some(steadq::OrphanShards::Fits(fits)), want)
            if want.is_none_or(|w| !fits.contains(&w)) =>
        {
            let asked = match want {
                Some(w) => format!("--shards {w} does not fit them; "),
                None => String::new(),
            };
            let which = match fits.as_slice() {
                [] => "no count from 1 to 256 fits every job name".to_string(),
                [n] => format!("the job names fit only {n}"),
                f => format!("the job names fit {}", counts_list(f)),
            };
            return Err(CliError::not_done(format!(
                "{d}: the identity file steadq.queue is missing and so are shard directories \
                 of ready/: the shard count cannot be told from the layout; {which}; {asked}\
                 run `steadq init {shown} --shards N` with the count the queue was made with; \
                 nothing changed"
            )));
        }
        _ => {}
    }
    Ok(())
}

pub fn cmd_init(a: Init) -> Result<Exit, CliError> {
    check_orphan_shards(&a)?;
    let defaults = Options::default();
    let q = Queue::create(
        &a.dir,
        Options {
            shards: a.shards.unwrap_or(defaults.shards),
            receipts: a.receipts.unwrap_or(defaults.receipts),
            evidence: steadq::EvidenceLimits {
                max_bytes: a.evidence_max.unwrap_or(defaults.evidence.max_bytes),
                keep: a.evidence_keep.unwrap_or(defaults.evidence.keep),
            },
            ..defaults
        },
    )?;
    // Like --shards: settings asked for that an existing queue does not have are not applied.
    let ident = q.identity();
    if a.receipts.is_some_and(|p| p != ident.receipts)
        || a.evidence_max
            .is_some_and(|m| m != ident.evidence.max_bytes)
        || a.evidence_keep.is_some_and(|k| k != ident.evidence.keep)
    {
        return Err(CliError::not_done(format!(
            "{}: queue exists with receipts {}, evidence max {} keep {}; use `steadq config` to change them",
            a.dir.display(),
            ident.receipts,
            ident.evidence.max_bytes,
            ident.evidence.keep
        )));
    }
    let have = q.identity().shards;
    // Without --shards (the systemd unit runs init before every start) any count is fine.
    if let Some(want) = a.shards.filter(|&w| w != have) {
        return Err(CliError::not_done(format!(
            "{}: queue exists with {have} shards; --shards {want} was not applied",
            a.dir.display()
        )));
    }
    // Capacity limits last, once nothing else can refuse: a flag not given keeps its value.
    if a.max_jobs.is_some() || a.max_bytes.is_some() {
        // A damaged file is replaced (`Queue::set_limits` names the group limits lost); a
        // flag not given then has no value to keep, and is said to be none now.
        let mut l = match q.limits() {
            Ok(l) => l,
            Err(e) if matches!(e.kind(), steadq::ErrorKind::BadLimits) => {
                for (flag, given) in [
                    ("--max-jobs", a.max_jobs.is_some()),
                    ("--max-bytes", a.max_bytes.is_some()),
                ] {
                    if !given {
                        log::warn!(
                            "{}: damaged, so its value for {flag} is lost: none now (set it \
                             again with `steadq init {} {flag} N`)",
                            e.path()
                                .map_or_else(String::new, |p| p.display().to_string()),
                            a.dir.display()
                        );
                    }
                }
                steadq::Limits::default()
            }
            Err(e) => return Err(e.into()),
        };
        l.max_jobs = a.max_jobs.unwrap_or(l.max_jobs);
        l.max_bytes = a.max_bytes.unwrap_or(l.max_bytes);
        q.set_limits(l)?;
        let show = |v: Option<u64>| v.map_or("none".to_string(), |n| n.to_string());
        eprintln!(
            "capacity limits set: max jobs {}, max bytes {}",
            show(l.max_jobs),
            show(l.max_bytes)
        );
        over_limits(&q, &a.dir);
    }
    stdout::note_done(
        format!(
            "the queue {} WAS created (or already existed)",
            a.dir.display()
        ),
        "its id",
    );
    out!("{:032x}", q.id());
    for w in super::access::check(&a.dir) {
        log::warn!("{w}");
    }
    eprintln!("queue {} ready: {have} shards", a.dir.display());
    Ok(Exit::Done)
}

/// Warn (stderr) when a queue already holds as many jobs or bytes as its new capacity limits
/// allow, or more: its enqueues are refused (exit 7) until jobs leave. The limits are set
/// either way; a count that fails is said too.
fn over_limits(q: &Queue, dir: &Path) {
    let u = match q.capacity_use() {
        Ok(u) => u,
        Err(e) => {
            eprintln!(
                "warning: {}: could not count its jobs against the new limits: {e}",
                dir.display()
            );
            return;
        }
    };
    let checks = [
        (u.jobs, u.limits.max_jobs, "jobs", "max jobs"),
        (u.bytes, u.limits.max_bytes, "bytes", "max bytes"),
    ];
    for (have, max, what, name) in checks {
        let Some(max) = max.filter(|&m| have >= m) else {
            continue;
        };
        let rel = if have > max { "over" } else { "at" };
        eprintln!(
            "warning: {} holds {have} {what} (ready, leased, delayed and waiting), {rel} its {name} {max}: enqueues are refused (exit 7) until jobs leave",
            dir.display()
        );
    }
}

pub fn cmd_config(a: Config) -> Result<Exit, CliError> {
    let q = open(&a.dir)?;
    let now = q.identity();
    if a.receipts.is_none() && a.evidence_max.is_none() && a.evidence_keep.is_none() {
        out!(
            "receipts {}\nevidence_max {}\nevidence_keep {}",
            now.receipts,
            now.evidence.max_bytes,
            now.evidence.keep
        );
        return Ok(Exit::Done);
    }
    let limits = steadq::EvidenceLimits {
        max_bytes: a.evidence_max.unwrap_or(now.evidence.max_bytes),
        keep: a.evidence_keep.unwrap_or(now.evidence.keep),
    };
    let new = q.set_receipt_policy(a.receipts.unwrap_or(now.receipts), Some(limits))?;
    stdout::note_done(
        format!("the settings of {} WERE changed", a.dir.display()),
        "the new settings",
    );
    out!(
        "receipts {}\nevidence_max {}\nevidence_keep {}",
        new.receipts,
        new.evidence.max_bytes,
        new.evidence.keep
    );
    Ok(Exit::Done)
}

pub fn cmd_limit(a: Limit) -> Result<Exit, CliError> {
    let (group, max) = match (a.group, a.max_leased) {
        (None, None) => {
            let q = open(&a.dir)?;
            let limits = q.group_limits()?;
            // stdout stays `GROUP N` lines only (none for no limit), for scripts; a person
            // reads that there are none on stderr.
            if limits.is_empty() {
                eprintln!(
                    "no group limits in {} (set one with --group G --max-leased N)",
                    a.dir.display()
                );
            }
            for (g, n) in limits {
                out!("{g} {n}");
            }
            return Ok(Exit::Done);
        }
        (Some(g), Some(m)) => (g, m),
        (None, Some(_)) => return Err(CliError::bad_usage("--max-leased needs --group")),
        (Some(g), None) => {
            let q = open(&a.dir)?;
            let n = q.group_limits()?.into_iter().find(|(x, _)| *x == g);
            out!(
                "{g} {}",
                n.map_or("none".to_string(), |(_, n)| n.to_string())
            );
            return Ok(Exit::Done);
        }
    };
    let q = open(&a.dir)?;
    q.set_group_limit(&group, max)?;
    let shown = max.map_or("none".to_string(), |n| n.to_string());
    stdout::note_done(
        format!("the limit of group {group} WAS set to {shown}"),
        "the group and its limit",
    );
    out!("{group} {shown}");
    Ok(Exit::Done)
}

pub fn cmd_enqueue(a: Enqueue) -> Result<Exit, CliError> {
    let after = after_ids(&a)?;
    // The payload is streamed into the job file in 64 KiB chunks (memory does not grow with
    // it); a bad file, a failed read or a payload over the limit changes nothing.
    let (mut input, what): (Box<dyn Read>, String) = match &a.file {
        Some(f) => {
            let file = std::fs::File::open(f).map_err(|e| {
                CliError::not_done(format!("{}: {e}; not done, nothing changed", f.display()))
            })?;
            (Box::new(file), f.display().to_string())
        }
        // A closed stdin (`0<&-`) is not an empty payload: Rust's runtime put /dev/null there.
        None if super::std_fds::stdin_closed() => {
            return Err(CliError::not_done(
                "stdin is closed: no payload to read (give one on stdin or with --file); not done, nothing changed",
            ))
        }
        None => {
            let f = super::std_fds::stdin_file().map_err(|e| {
                CliError::not_done(format!("stdin: {e}; not done, nothing changed"))
            })?;
            (Box::new(f), "stdin".to_string())
        }
    };
    let q = super::open_with(
        &a.dir,
        Options {
            max_payload: a.max_payload,
            ..Options::default()
        },
    )?;
    let key = match a.key.as_deref() {
        Some(k) => Some(steadq::Key::new(k).ok_or_else(|| {
            CliError::bad_usage(format!(
                "bad --key '{k}': 1 to 128 bytes of A-Z a-z 0-9 . _ : -"
            ))
        })?),
        None => None,
    };
    let o = EnqueueOptions {
        max_attempts: a.max_attempts,
        delay: a.delay,
        key,
        priority: a.priority,
        wait: a.wait,
        after,
        group: a.group,
    };
    let r = q
        .enqueue_reader(&mut input, &o)
        .map_err(|e| waited(name_input(e, &what), a.wait))?;
    match r {
        steadq::Enqueued::New(id) => {
            stdout::note_done(format!("the job WAS enqueued as {id}"), "its id");
            out!("{id}");
        }
        steadq::Enqueued::Duplicate(id) => {
            eprintln!(
                "duplicate: key {} already names job {id}; nothing enqueued",
                a.key.as_deref().unwrap_or("")
            );
            // Nothing was done, but the id is what a caller's `$(...)` waits for: a closed,
            // read-only or unread stdout is a failed output (exit 2, as on a full one), never a
            // quiet exit 0 with an empty id.
            stdout::require_reader();
            out!("{id}");
        }
    }
    Ok(Exit::Done)
}

/// An `enqueue --wait` refused for a full queue says that it waited, and how long (its
/// message read as if it had not waited at all).
fn waited(mut e: CliError, wait: Option<Duration>) -> CliError {
    if let (Exit::Full, Some(w)) = (e.exit(), wait) {
        e.add(&format!(
            " (waited {}s for room, --wait)",
            fixed::secs(w.as_nanos(), 3)
        ));
    }
    e
}

/// What a claim that found no job adds to "no job ready in DIR": the ready jobs group
/// limits hold back (` (3 ready jobs held back: group ff at its limit 2)`), or nothing.
/// Nothing in the appliance build (4 KB of the size-limited aarch64 binary): `status`
/// gives the same figures there.
#[cfg(feature = "appliance")]
pub(super) fn held_back(_: &Queue) -> String {
    String::new()
}

/// See the appliance build's `held_back` above.
#[cfg(not(feature = "appliance"))]
pub(super) fn held_back(q: &Queue) -> String {
    let groups = match q.held_back() {
        Ok(g) if !g.is_empty() => g,
        Ok(_) => return String::new(),
        Err(e) => {
            log::debug!("counting the jobs held back by group limits: {e}");
            return String::new();
        }
    };
    let total: u64 = groups.iter().map(|h| h.ready).sum();
    let s = if total == 1 { "" } else { "s" };
    if groups.iter().all(|h| h.max_leased.is_none()) {
        // The limits file is damaged: every group's limit is unknown alike.
        let names: Vec<&str> = groups.iter().map(|h| h.group.as_str()).collect();
        let (of, are) = match names.len() {
            1 => ("limit of group", "is"),
            _ => ("limits of groups", "are"),
        };
        return format!(
            " ({total} ready job{s} held back: the {of} {} {are} not known, steadq.limits is \
             damaged; run `steadq fsck`)",
            names.join(", ")
        );
    }
    let one = groups.len() == 1;
    let parts: Vec<String> = groups
        .iter()
        .filter_map(|h| {
            let of = if one {
                String::new()
            } else {
                format!("{} of ", h.ready)
            };
            Some(format!(
                "{of}group {} at its limit {}",
                h.group, h.max_leased?
            ))
        })
        .collect();
    format!(" ({total} ready job{s} held back: {})", parts.join(", "))
}

/// A claim that found no job: exit 3 only when it could look at every ready shard. With a
/// shard this user cannot read, "no job ready" is not known: exit 2 naming the shards.
fn no_job(q: &Queue, dir: &std::path::Path) -> Result<Exit, CliError> {
    let unreadable = q.unreadable_ready_dirs();
    if unreadable.is_empty() {
        // Jobs this claim dead-lettered (their attempts used up, corrupt, too large) are
        // named in the warnings above; the last line says so, as `work --once` does.
        let why = held_back(q);
        match q.claims_dead_lettered() {
            0 => eprintln!("no job ready in {}{why}", dir.display()),
            n => eprintln!(
                "{n} job(s) dead-lettered (see above); no other job ready in {}{why}",
                dir.display()
            ),
        }
        return Ok(Exit::NoJob);
    }
    let names: Vec<String> = unreadable
        .iter()
        .map(|d| dir.join(d).display().to_string())
        .collect();
    let readable = q.ready_slots() > unreadable.len();
    Err(CliError::new(
        Exit::NotDone,
        format!(
            "cannot read {} ready {} ({}: Permission denied){}; not done",
            names.len(),
            if names.len() == 1 { "shard" } else { "shards" },
            names.join(", "),
            if readable {
                ", and no job is ready in the others"
            } else {
                ", which is every ready shard"
            }
        ),
    ))
}

/// Refuse, before anything changes, a command whose stdout carries a lease handle (`claim`,
/// `renew`) when stdout was closed at start (`>&-`): the runtime gave it /dev/null, so the
/// handle would be lost without an error and the job held until its lease expired.
///
/// A stdout open for reading only (`1</dev/null`) is refused alike. And from here on a
/// reader that went away (EPIPE) counts as a failed write, not as the reader's choice
/// ([`stdout::require_reader`]): the handle reached nobody.
pub(super) fn handle_needs_stdout(what: &str) -> Result<(), CliError> {
    // A write past `ulimit -f` raises SIGXFSZ, whose default action would end the process
    // after the claim or renew with the handle half written. Ignored, the write fails with
    // EFBIG instead, and the output-failure paths give the job back or say so.
    // Only here: `work` does not ignore it, so its commands do not inherit the ignoring.
    // SAFETY: signal(2) with SIG_IGN has no preconditions and installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let why = if super::std_fds::stdout_closed() {
        "stdout is closed"
    } else if super::std_fds::stdout_read_only() {
        "stdout is open for reading only"
    } else {
        stdout::require_reader();
        return Ok(());
    };
    Err(CliError::not_done(format!(
        "{why}: the lease handle {what} prints would be lost; nothing done \
         (redirect it to a file or a pipe)"
    )))
}

/// `claim --payload-out`'s file, opened before the claim (`None` without the option):
/// refused for `-` (stdout carries the lease handle) and for a path inside the queue
/// directory, or one that may be a file of the queue; nothing done then.
fn payload_out_file(a: &Claim) -> Result<Option<PayloadFile>, CliError> {
    if a.payload_out
        .as_deref()
        .is_some_and(|p| p.as_os_str() == "-")
    {
        return Err(CliError::bad_usage(
            "--payload-out -: stdout carries the lease handle, so the payload needs a file path (e.g. --payload-out /tmp/payload)",
        ));
    }
    if let Some(p) = a.payload_out.as_deref().filter(|p| inside(p, &a.dir)) {
        return Err(CliError::not_done(format!(
            "--payload-out {}: inside the queue directory, where it would overwrite the \
             queue's own files (a job, the identity); nothing done",
            p.display()
        )));
    }
    // Open the payload file before claiming, so a bad path changes nothing, but cut it only
    // once a job is claimed: without a job an existing file keeps its bytes and a new one
    // is removed again. A path outside the queue may still be one of its files: a hard
    // link to it, or a bind mount of it or of the queue (the identity, the evidence log, a
    // ready job), and cutting it would wipe that file. Refused before the claim,
    // as a symlink at the path, a FIFO with no reader or the claim's own stdout are
    // ([`PayloadFile::open`]).
    let file = match &a.payload_out {
        Some(p) => Some(PayloadFile::open(p, |f| {
            queue_file(f, p, &a.dir).map(|why| {
                format!(
                    "{why}, which may be one of the queue's own files (a job, the \
                     identity, the evidence log); write to a new path"
                )
            })
        })?),
        None => None,
    };
    Ok(file)
}

pub fn cmd_claim(a: Claim) -> Result<Exit, CliError> {
    handle_needs_stdout("claim")?;
    // From here a stop signal sets a flag instead of ending the process: one that comes
    // between the claim's rename and the handlers (a large payload is checked first) would
    // kill it with the job leased, an attempt used. Installed before the
    // payload file is made, so a stop before the claim leaves none; a waiting claim ends
    // within 250 ms of it, nothing claimed; a job claimed meanwhile is given back.
    super::work::install_interrupting_handlers();
    let mut file = payload_out_file(&a)?;
    let made_file = |f: &Option<PayloadFile>| {
        if let Some(f) = f {
            f.remove_if_made();
        }
    };
    let q = super::open_with(
        &a.dir,
        Options {
            max_payload: a.max_payload,
            aging: a.aging,
            ..Options::default()
        },
    )
    .inspect_err(|_| made_file(&file))?;
    if let sig @ 1.. = super::work::stop_signal() {
        made_file(&file);
        return Err(CliError::not_done(format!(
            "stopped by signal {sig}; no job was claimed"
        )));
    }
    let lease = match a.wait {
        Some(w) => claim_waiting(&q, &a.dir, a.lease, w),
        None => q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(a.lease),
                ..Default::default()
            })
            .map_err(CliError::from),
    };
    let lease = lease.inspect_err(|_| made_file(&file))?;
    let Some(lease) = lease else {
        made_file(&file);
        return match super::work::stop_signal() {
            0 => no_job(&q, &a.dir),
            sig => Err(CliError::not_done(format!(
                "stopped by signal {sig} while waiting; no job was claimed"
            ))),
        };
    };
    if let (sig @ 1.., None) = (super::work::stop_signal(), &a.payload_out) {
        let msg = format!("stopped by signal {sig} before the lease handle was printed");
        return Err(give_back(lease, msg));
    }
    if let (Some(f), Some(p)) = (file.as_mut(), &a.payload_out) {
        // A stop signal interrupts the delivery (its writes too: no SA_RESTART), and the
        // job is given back. Only a regular file is cut and fsynced: /dev/null, a FIFO or
        // a terminal takes the bytes as they come (set_len and fsync fail there with
        // EINVAL, which used up the attempt of a job that never ran).
        let sync = f.regular();
        let cut = f.cut().map_err(PayloadOut::Failed);
        match cut.and_then(|()| write_payload(&lease, f.file_mut(), sync)) {
            Ok(()) => {}
            Err(PayloadOut::Corrupt(e)) => return Err(claimed_corrupt(lease, f.file(), p, &e)),
            Err(PayloadOut::Failed(e)) => {
                let left = f.discard_partial();
                return Err(give_back(lease, format!("{}: {e}{left}", p.display())));
            }
        }
    }
    print_handle(lease, a.json.then(|| now(&q)))
}

/// `claim --wait`: [`Queue::claim_wait`] that stops within about a second, not done (exit
/// 2), when a directory of the queue is removed or replaced while it waits (it waited out
/// its timeout on directories no job reaches and exited 3 "no job ready"), as `work` does.
fn claim_waiting(
    q: &Queue,
    dir: &Path,
    lease: Duration,
    wait: Duration,
) -> Result<Option<steadq::Lease>, CliError> {
    let (stop, done) = (AtomicBool::new(false), AtomicBool::new(false));
    let gone = std::sync::Mutex::new(None);
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            // Ends within 250 ms of the claim; checks the layout once a second.
            let mut tick = 0u32;
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(250));
                if super::work::stop_signal() != 0 {
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
                tick += 1;
                if !tick.is_multiple_of(4) {
                    continue;
                }
                if let Some(e) = super::work::queue_replaced(q, dir, "this claim waited") {
                    *gone.lock().unwrap() = Some(e);
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
            }
        });
        let got = q.claim_with(&steadq::ClaimOptions {
            lease: Some(lease),
            wait: Some(wait),
            stop: Some(&stop),
        });
        done.store(true, Ordering::SeqCst);
        got
    });
    match gone.into_inner().unwrap() {
        // A job claimed just before the check saw the change is still a claim.
        Some(e) if !matches!(got, Ok(Some(_))) => Err(e),
        // The wait saw the queue's directory go first (`ErrorKind::Replaced`): the same
        // message as when this thread's check does.
        _ => got.map_err(|e| {
            let gone = matches!(e.kind(), steadq::ErrorKind::Replaced);
            match gone.then(|| super::work::queue_replaced(q, dir, "this claim waited")) {
                Some(Some(e)) => e,
                _ => CliError::from(e),
            }
        }),
    }
}

/// Why open payload file `f` may be one of the queue `dir`'s own files, if it may: only a
/// regular file on the queue's filesystem (same `st_dev`, which a bind mount keeps) can
/// be. It may when it has more than one hard link, when it is the same inode as an entry
/// of the queue's root (the identity, the evidence log and its rotations, the limits), or
/// when it starts with a job file's magic (`STEADQJ\0`: a job or a receipt; `crates/steadq/src/disk/
/// format.rs`). One `fstat`, one listing of the root, one 8-byte read.
fn queue_file(f: &std::fs::File, path: &std::path::Path, dir: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
    let m = f.metadata().ok()?;
    let queue = std::fs::metadata(dir).ok()?;
    if !m.is_file() || m.dev() != queue.dev() {
        return None;
    }
    if m.nlink() > 1 {
        return Some(format!(
            "a file with {} hard links on the queue's filesystem",
            m.nlink()
        ));
    }
    let root_entry = std::fs::read_dir(dir).ok()?.flatten().find(|e| {
        std::fs::symlink_metadata(e.path()).is_ok_and(|x| x.dev() == m.dev() && x.ino() == m.ino())
    });
    if let Some(e) = root_entry {
        return Some(format!(
            "the queue's own {} (the same file, by device and inode)",
            e.file_name().to_string_lossy()
        ));
    }
    // `f` is open for writing only: the magic is read through a second handle, opened
    // without following a final symlink (`inside` already refused one into the queue), and
    // only if it is the same file.
    let mut magic = [0u8; 8];
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        )
        .open(path)
        .ok()
        .filter(|r| {
            r.metadata()
                .is_ok_and(|x| x.dev() == m.dev() && x.ino() == m.ino())
        });
    if reader.is_some_and(|r| r.read_at(&mut magic, 0).is_ok_and(|n| n == 8))
        && magic == steadq::format::MAGIC
    {
        return Some("a SteadQ job file (it starts with the job header's magic)".into());
    }
    None
}

/// Whether `path` (which may not exist yet: its directory is resolved) lies inside the
/// directory `dir`, symlinks resolved on both sides (`claim --payload-out` into the queue
/// would overwrite a job or the identity file). False when either cannot be
/// resolved (the open that follows reports a bad path).
fn inside(path: &std::path::Path, dir: &std::path::Path) -> bool {
    let Ok(root) = std::fs::canonicalize(dir) else {
        return false;
    };
    let resolved = std::fs::canonicalize(path).or_else(|_| {
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        std::fs::canonicalize(parent).map(|p| p.join(path.file_name().unwrap_or_default()))
    });
    resolved.is_ok_and(|p| p.starts_with(&root))
}

/// A claimed job whose handle cannot be handed out (`msg` says why): release it with its
/// attempt given back (nothing ran it: a cron `claim` beside a full disk used up an attempt
/// per run and dead-lettered jobs that never ran). Released, the claim is not done (exit 2:
/// the job is ready again); a release that was cleanly not done leaves the job leased until
/// its deadline, then it is ready again (exit 2 too, said so); only a release whose outcome
/// is unknown exits 4.
fn give_back(lease: steadq::Lease, msg: String) -> CliError {
    match lease.release_undelivered() {
        Ok(()) => CliError::not_done(format!(
            "{msg}; the job was released to ready, its attempt given back; not done"
        )),
        Err(r) => {
            let r = CliError::from(r);
            let exit = match r.exit() {
                Exit::Indeterminate => Exit::Indeterminate,
                _ => Exit::NotDone,
            };
            let then = if exit == Exit::Indeterminate {
                "the job may still be leased until its lease expires"
            } else {
                "the job stays leased until its lease expires, then it is ready again; not done"
            };
            CliError::new(
                exit,
                format!("{msg}; releasing the job failed too: {r}; {then}"),
            )
        }
    }
}

/// Why `claim --payload-out` could not write the payload.
enum PayloadOut {
    /// The job file no longer matches the digest the claim verified (InvalidData).
    Corrupt(std::io::Error),
    /// Reading, writing or syncing failed otherwise (the error names which).
    Failed(String),
}

/// Stream the lease's payload into `f` in 64 KiB chunks (never the whole payload in memory),
/// checking its digest as it goes, and fsync `f` (with `sync`: not a character device or a
/// FIFO, which have nothing to sync).
fn write_payload(
    lease: &steadq::Lease,
    f: &mut std::fs::File,
    sync: bool,
) -> Result<(), PayloadOut> {
    let mut r = lease
        .reader()
        .map_err(|e| PayloadOut::Failed(e.to_string()))?;
    let mut buf = vec![0u8; (lease.payload_len() as usize).clamp(1, 64 * 1024)];
    loop {
        let n = match std::io::Read::read(&mut r, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(PayloadOut::Corrupt(e))
            }
            Err(e) => return Err(PayloadOut::Failed(format!("reading the payload: {e}"))),
        };
        let mut left = &buf[..n];
        while !left.is_empty() {
            match f.write(left) {
                Ok(0) => return Err(PayloadOut::Failed("wrote 0 bytes".into())),
                Ok(w) => left = &left[w..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(PayloadOut::Failed(e.to_string())),
            }
            stopped()?;
        }
    }
    stopped()?;
    if !sync {
        return Ok(());
    }
    f.sync_all().map_err(|e| PayloadOut::Failed(e.to_string()))
}

/// Whether a stop signal arrived while the payload was delivered: the caller is being
/// stopped and will not run the job, so it is given back.
fn stopped() -> Result<(), PayloadOut> {
    match super::work::stop_signal() {
        0 => Ok(()),
        sig => Err(PayloadOut::Failed(format!(
            "stopped by signal {sig} while the payload was written"
        ))),
    }
}

/// The payload stream of a claimed job failed its digest: empty the payload file (it holds
/// bytes that cannot be trusted), dead-letter the job (reason `corrupt`) and say so. No lease
/// is handed out.
fn claimed_corrupt(
    lease: steadq::Lease,
    f: &std::fs::File,
    p: &std::path::Path,
    e: &std::io::Error,
) -> CliError {
    let id = lease.id();
    let emptied = match f.set_len(0) {
        Ok(()) => "emptied".to_string(),
        Err(t) => format!("emptying it failed ({t}): do not use it"),
    };
    let (exit, what) = match lease.fail(steadq::Reason::CORRUPT) {
        Ok(()) => (Exit::NotDone, "dead-lettered (reason corrupt)".to_string()),
        Err(r) => {
            let what = format!("dead-lettering it failed: {r}");
            (CliError::from(r).exit(), what)
        }
    };
    CliError::new(
        exit,
        format!(
            "job {id}: its payload failed verification while copied to {} ({e}); that file {emptied}; the job was {what}; no lease handed out",
            p.display()
        ),
    )
}

/// Print a claimed lease's handle (with `json`: the job as JSON, [`encode::job_json`], the
/// handle in it) and keep the lease (release it when nobody got the handle).
fn print_handle(lease: steadq::Lease, json: Option<encode::Now>) -> Result<Exit, CliError> {
    let handle = lease.handle();
    let text = match json {
        Some(now) => {
            let path = lease.rel_path();
            encode::job_json(&now, lease.name(), State::Leased, &path, Some(&handle))
        }
        None => format!("{handle}\n"),
    }
    .into_bytes();
    if let (false, Some(e)) = (stdout::write(&text), stdout::take_error()) {
        // Nobody got the handle: give the job back rather than leave it hidden for a lease.
        let msg = format!("the job's lease handle could not be written to stdout: {e}");
        return Err(give_back(lease, msg));
    }
    let _ = lease.into_handle();
    Ok(Exit::Done)
}

/// Refuse a handle that is no lease name at all (exit 1, before the queue is opened). Its
/// fields are checked, not its queue: whether it belongs to the queue named is the queue's
/// to say (exit 2, `Queue::lease_from_handle`). Local queues only: a StowQ handle has
/// another form (`cli/s3.rs`).
fn lease_name(h: &str) -> Result<(), CliError> {
    match steadq::JobName::parse_any_queue(h) {
        Ok(n) if matches!(n.kind, steadq::Kind::Leased(_)) => Ok(()),
        Ok(_) => Err(CliError::bad_usage(format!(
            "handle {} names a job that is not leased: pass the one line `claim` or `renew` printed",
            clipped(h)
        ))),
        Err(_) => Err(CliError::bad_usage(format!(
            "handle {} is not a lease handle: pass the one line `claim` or `renew` printed",
            clipped(h)
        ))),
    }
}

/// A handle argument as a message shows it: quoted, and cut after 256 bytes with its
/// length said (a real handle is under 256 bytes; a whole file passed by mistake was
/// echoed in full, 100 KB on the terminal).
pub(super) fn clipped(h: &str) -> String {
    const SHOWN: usize = 256;
    if h.len() <= SHOWN {
        return format!("{h:?}");
    }
    let mut end = SHOWN;
    while !h.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &h[..end], h.len())
}

pub fn cmd_renew(a: Renew) -> Result<Exit, CliError> {
    // The handle first: a malformed one is exit 1 whatever stdout is.
    lease_name(&a.handle)?;
    handle_needs_stdout("renew")?;
    let q = open(&a.dir)?;
    let mut l = q.lease_from_handle(&a.handle)?;
    let r = l.renew(a.lease);
    // The lease belongs to the script that holds the handle, which still runs: a failed
    // renew must never release the job (dropping the Lease would), whatever the error.
    let handle = l.into_handle();
    if let Err(e) = r {
        let mut e = CliError::from(e);
        if e.exit() == Exit::Indeterminate && handle != a.handle {
            e.add(&format!(
                "; the lease may have been renewed: its handle is then {handle}, else still the old one"
            ));
        } else if e.exit() == Exit::NotDone {
            e.add("; the lease was kept as it was (not released): the old handle still holds it");
        }
        return Err(e);
    }
    stdout::note_done(
        format!("the lease WAS renewed; its new handle is {handle}"),
        "the handle",
    );
    out!("{handle}");
    Ok(Exit::Done)
}

pub fn cmd_ack(a: Ack) -> Result<Exit, CliError> {
    lease_name(&a.handle)?;
    let q = open(&a.dir)?;
    let r = q.lease_from_handle(&a.handle)?.ack()?;
    stdout::note_done(format!("the job {} WAS acked", r.id), "its receipt name");
    out!("{}", r.name);
    Ok(Exit::Done)
}

pub fn cmd_nack(a: Nack) -> Result<Exit, CliError> {
    lease_name(&a.handle)?;
    let q = open(&a.dir)?;
    let lease = q.lease_from_handle(&a.handle)?;
    let id = lease.id();
    let state = match lease.nack(a.delay)? {
        steadq::Nacked::Ready => "ready".to_string(),
        steadq::Nacked::Delayed(t) => fixed::delayed_until(
            t.duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        ),
        steadq::Nacked::Dead => "dead (attempts exhausted)".to_string(),
    };
    // Named with its job and new state, as an ack names its job, if stdout fails.
    stdout::note_done(
        format!("the job {id} WAS nacked ({state})"),
        "its new state",
    );
    out!("{state}");
    Ok(Exit::Done)
}

/// A `--reason` as typed: 1 to 16 characters of `[a-z0-9]`, else bad usage.
fn parse_reason(r: &str) -> Result<Reason, CliError> {
    Reason::new(r).ok_or_else(|| {
        CliError::bad_usage(format!(
            "bad --reason '{r}': use 1 to 16 characters of [a-z0-9]"
        ))
    })
}

pub fn cmd_fail(a: Fail) -> Result<Exit, CliError> {
    let reason = parse_reason(&a.reason)?;
    lease_name(&a.handle)?;
    let q = open(&a.dir)?;
    q.lease_from_handle(&a.handle)?.fail(reason)?;
    Ok(Exit::Done)
}

pub fn cmd_status(a: Status) -> Result<Exit, CliError> {
    if a.json && a.prometheus {
        return Err(CliError::bad_usage("--json and --prometheus are exclusive"));
    }
    // A symlinked shard is reported, never followed (it refuses the queue to every command
    // that moves jobs).
    let p = Progress::start(format!("status {}", a.dir.display()), "entries", None);
    let q = p.open(&a.dir, steadq::OpenMode::Check)?;
    let s = q.status_with(&steadq::StatusOptions { bytes: a.bytes })?;
    drop(p);
    // Prometheus: the canonical absolute path, so that `status q` and `status /abs/q`
    // (a cron job and a unit with another working directory) make one series, not two.
    let dir = match a.prometheus {
        true => std::fs::canonicalize(&a.dir).unwrap_or_else(|_| a.dir.clone()),
        false => a.dir.clone(),
    };
    let dir = dir.display().to_string();
    let label = encode::QueueLabel {
        dir: &dir,
        id: q.id(),
    };
    let text = if a.json {
        encode::status_json(&label, &s) + "\n"
    } else if a.prometheus {
        encode::status_prometheus(&label, &s)
    } else {
        encode::status_text(&label, &s)
    };
    stdout::write(text.as_bytes());
    Ok(Exit::Done)
}

/// The queue's clocks now, for [`encode::describe`].
pub(super) fn now(q: &Queue) -> encode::Now {
    let c = q.clock();
    encode::Now {
        wall_ns: c.wall_ns(),
        boot_ns: c.boot_ns(),
        boot_id: c.boot_id(),
    }
}

pub fn cmd_recover(a: Recover) -> Result<Exit, CliError> {
    let q = open(&a.dir)?;
    let made_due = if a.due_now { q.make_due(None)? } else { 0 };
    let mut r = q.recover();
    let err = r.first_error.take();
    stdout::note_done("recovery WAS done", "its report");
    out!(
        "expired leases to ready {}, to dead {}; delayed jobs due {}; made due now {made_due}; temp files removed {}; split moves settled {}; foreign entries {}; failed {}; unreadable directories {}",
        r.expired, r.expired_dead, r.due, r.temp_removed, r.split, r.foreign, r.failed, r.unreadable.len()
    );
    // A directory it could not read was not examined: named, and not exit 0 (2 or 4 by the
    // batch rule, as a failed entry).
    for d in &r.unreadable {
        eprintln!(
            "steadq: {}: cannot read this directory, or it is not one; its jobs were not examined",
            a.dir.join(d).display()
        );
    }
    match err {
        None => Ok(Exit::Done),
        Some(e) => {
            let e = CliError::from(e);
            if r.failed > 0 {
                eprintln!(
                    "steadq: {} entries could not be recovered (any others were); first: {e}",
                    r.failed
                );
            } else {
                eprintln!(
                    "steadq: {} directories could not be read, the rest was recovered; first: {e}",
                    r.unreadable.len()
                );
            }
            Ok(e.exit())
        }
    }
}

/// `n` job files, "1 job file" for one.
pub(super) fn job_files(n: u64) -> String {
    match n {
        1 => "1 job file".into(),
        n => format!("{n} job files"),
    }
}

pub fn cmd_fsck(a: Fsck) -> Result<Exit, CliError> {
    let p = Progress::start(format!("fsck {}", a.dir.display()), "entries", None);
    let q = p.open(&a.dir, steadq::OpenMode::Check)?;
    let r = if a.quarantine {
        q.fsck_quarantine()?
    } else {
        q.fsck()?
    };
    drop(p);
    if a.quarantine {
        stdout::note_done("fsck --quarantine WAS done", "its list of problems");
    }
    for p in &r.problems {
        out!("{p}");
    }
    let moved = r.problems.iter().filter(|p| p.quarantined).count();
    let left = r.problems.len() - moved;
    eprintln!(
        "fsck {}: {} entries checked, {} verified, {} corrupt jobs already dead-lettered, {} problems{}",
        a.dir.display(),
        r.checked,
        job_files(r.verified),
        r.dead_corrupt,
        r.problems.len(),
        if a.quarantine {
            format!(", {moved} dealt with (moved to quarantine/, or a directory shared in place), {left} left")
        } else {
            String::new()
        }
    );
    // With --quarantine, exit 5 only for problems it left in place (it could not or would
    // not move them: unreadable directories, duplicates, a wrong identity): 0 when it moved
    // every problem it found.
    Ok(if left == 0 {
        Exit::Done
    } else {
        Exit::Problems
    })
}

pub fn cmd_dead(a: Dead) -> Result<Exit, CliError> {
    match a.action {
        DeadAction::List(l) => super::drain::cmd_list(List {
            dir: l.dir,
            state: Some(State::Dead),
            stream: false,
            json: false,
        }),
        DeadAction::Requeue(r) => dead_requeue(r),
        DeadAction::Purge(p) => {
            let n = open(&p.dir)?.purge_dead()?;
            stdout::note_done(format!("{n} dead jobs WERE purged"), "the report");
            out!("purged {n} dead jobs");
            Ok(Exit::Done)
        }
    }
}

fn dead_requeue(a: DeadRequeue) -> Result<Exit, CliError> {
    let reason = a.reason.as_deref().map(parse_reason).transpose()?;
    // --reason alone stands for --all with that reason.
    let id = match (&a.job, a.all || reason.is_some()) {
        (Some(j), _) if !a.all => Some(parse_job_id(j)?),
        (None, true) => None,
        _ => {
            return Err(CliError::bad_usage(
                "dead requeue needs a job id or --all (not both)",
            ))
        }
    };
    let p = Progress::start(format!("dead requeue {}", a.dir.display()), "steps", None);
    let q = p.open(&a.dir, steadq::OpenMode::ReadWrite)?;
    let with = reason.map_or(String::new(), |r| format!(" with reason {r}"));
    let no_such = |e: steadq::Error| match (e.kind(), id) {
        (ErrorKind::NoSuchJob, Some(id)) => CliError::not_done(format!(
            "{}: no dead job {id}{with}; nothing changed",
            a.dir.display()
        )),
        _ => e.into(),
    };
    let Some(id) = id else {
        // --all: every dead job is tried; a part-way failure says how many moved.
        let mut r = q.requeue_dead_with(None, reason);
        drop(p);
        let n = r.requeued;
        if r.failed == 0 && r.unreadable.is_empty() {
            // Stopped before any move (the listing failed: not done), or all moved.
            r = r.into_result().map_err(no_such)?;
        }
        if n > 0 || r.first_error.is_none() {
            stdout::note_done(format!("{n} jobs WERE requeued"), "the report");
            out!("requeued {n} jobs");
        }
        if let Some((d, x)) = r.held_by {
            eprintln!(
                "steadq: {} dead jobs left dead: each waits for a job still dead (first: {d} waits for {x}); requeue that job first",
                r.held
            );
        }
        return Ok(match r.first_error.take() {
            None if n == 0 && r.held > 0 => Exit::NotDone,
            None => Exit::Done,
            Some(e) => {
                let e = CliError::from(e);
                for d in &r.unreadable {
                    eprintln!(
                        "steadq: {}: cannot read this directory, or it is not one; its dead jobs were not requeued",
                        a.dir.join(d).display()
                    );
                }
                if r.failed > 0 {
                    eprintln!(
                        "steadq: {} dead jobs could not be requeued ({n} others were); first: {e}",
                        r.failed
                    );
                } else {
                    eprintln!(
                        "steadq: {} directories of dead jobs could not be read ({n} jobs were requeued); first: {e}",
                        r.unreadable.len()
                    );
                }
                e.exit()
            }
        });
    };
    q.requeue_dead_with(Some(id), reason)
        .into_result()
        .map_err(no_such)?;
    stdout::note_done(format!("the job {id} WAS requeued"), "the report");
    out!("requeued {id}");
    Ok(Exit::Done)
}

pub fn cmd_compact(a: Compact) -> Result<Exit, CliError> {
    let p = Progress::start(format!("compact {}", a.dir.display()), "steps", None);
    let q = p.open(&a.dir, steadq::OpenMode::ReadWrite)?;
    let r = q.compact(a.older_than)?;
    let n = r.removed;
    // Expired idempotency keys: their own retention when given.
    let k = q.compact_keys(a.keys_older_than.unwrap_or(a.older_than))?;
    drop(p);
    if k > 0 {
        eprintln!("{k} idempotency keys expired");
    }
    stdout::note_done(format!("{n} receipts WERE compacted"), "the report");
    out!(
        "compacted {n} receipts into {}",
        a.dir.join(steadq::EVIDENCE_FILE).display()
    );
    if r.cut > 0 {
        out!(
            "the disk was full: first cut {} receipts to their headers, freeing {} bytes",
            r.cut,
            r.freed_bytes
        );
    }
    Ok(Exit::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

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
