//! `s3://bucket/prefix` queues in steadq's own subcommands (feature `s3`): the dispatch on
//! the queue argument, and the handlers, which call `stowq` (StowQ). Without the
//! feature an `s3://` queue argument is refused with an error naming it.
//!
//! Exit codes are steadq's: 0 done, 2 not done, 3 no job ready, 4 indeterminate, 6 lease
//! lost.

use super::args::Cmd;
#[cfg(not(feature = "s3"))]
use super::CliError;
use std::path::Path;

/// The queue argument of `cmd`, if it is an `s3://` URL.
pub fn s3_queue(cmd: &Cmd) -> Option<&str> {
    use super::args::DeadAction;
    let dir: &Path = match cmd {
        Cmd::Init(a) => &a.dir,
        Cmd::Config(a) => &a.dir,
        Cmd::Limit(a) => &a.dir,
        Cmd::Enqueue(a) => &a.dir,
        Cmd::Work(a) => &a.dir,
        Cmd::Claim(a) => &a.dir,
        Cmd::Renew(a) => &a.dir,
        Cmd::Ack(a) => &a.dir,
        Cmd::Nack(a) => &a.dir,
        Cmd::Fail(a) => &a.dir,
        Cmd::Status(a) => &a.dir,
        #[cfg(not(feature = "appliance"))]
        Cmd::Top(a) => &a.dir,
        Cmd::List(a) => &a.dir,
        #[cfg(not(feature = "appliance"))]
        Cmd::Show(a) => &a.dir,
        Cmd::Recover(a) => &a.dir,
        Cmd::Fsck(a) => &a.dir,
        Cmd::Dead(d) => match &d.action {
            DeadAction::List(a) => &a.dir,
            DeadAction::Requeue(a) => &a.dir,
            DeadAction::Purge(a) => &a.dir,
        },
        Cmd::Compact(a) => &a.dir,
        Cmd::Wait(a) => &a.dir,
        #[cfg(not(feature = "appliance"))]
        Cmd::Demo(_) | Cmd::DemoJob(_) | Cmd::Bench(_) | Cmd::Completions(_) => return None,
    };
    dir.to_str().filter(|s| s.starts_with("s3://"))
}

/// Run `cmd` on its `s3://` queue; its exit code.
///
/// # Errors
/// A [`CliError`] with the exit code of the outcome.
#[cfg(not(feature = "s3"))]
pub fn run(cmd: Cmd) -> Result<i32, CliError> {
    let url = s3_queue(&cmd).unwrap_or("s3://");
    Err(CliError::not_done(format!(
        "queue {url:?}: this steadq was built without s3:// queues (cargo build --features s3)"
    )))
}

#[cfg(feature = "s3")]
pub use with_s3::run;

#[cfg(feature = "s3")]
mod with_s3 {
    use super::super::args::{self, Cmd, DeadAction};
    use super::super::exit::Exit;
    use super::super::fixed;
    use super::super::payload_file::PayloadFile;
    use super::super::stdout::note_done;
    use super::super::CliError;
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use stowq::Client;
    use stowq::{Config, Error, ErrorKind, Lease, Nacked, Options, Outcome, Queue, State};

    impl From<Error> for CliError {
        fn from(e: Error) -> CliError {
            let exit = match (&e.kind, e.outcome) {
                (ErrorKind::LeaseLost, _) => Exit::LeaseLost,
                (_, Outcome::Indeterminate) => Exit::Indeterminate,
                (_, Outcome::NotDone) => Exit::NotDone,
            };
            CliError::new(exit, e.to_string())
        }
    }

    /// An option or command `what` refused on an `s3://` queue, saying `why` (the reasons of
    /// DESIGN-S3.md, "Options still refused"): not done, exit 2.
    fn refused(what: &str, why: &str) -> CliError {
        CliError::not_done(format!(
            "{what}: not supported on s3:// queues ({why}); not done, nothing changed"
        ))
    }

    fn url(dir: &std::path::Path) -> String {
        dir.to_string_lossy().into_owned()
    }

    fn open_with(url: &str, options: Options, create: bool) -> Result<Queue, CliError> {
        let (bucket, prefix) = stowq::parse_s3_url(url).map_err(CliError::not_done)?;
        let config =
            Config::from_env().map_err(|m| CliError::not_done(format!("queue {url}: {m}")))?;
        let client = Client::new(config, &bucket);
        if create {
            client.create_bucket()?;
            return Ok(Queue::create(client, &prefix, options)?);
        }
        Ok(Queue::open(client, &prefix, options)?)
    }

    fn open(url: &str) -> Result<Queue, CliError> {
        open_with(url, Options::default(), false)
    }

    /// `id.gen.token`: what a later command needs to take the lease up again.
    fn handle(l: &Lease) -> String {
        format!("{:032x}.{:x}.{}", l.id, l.generation(), l.token)
    }

    fn parse_handle(q: &Queue, h: &str) -> Result<Lease, CliError> {
        let bad = || {
            CliError::bad_usage(format!(
                "handle {}: not a lease handle from claim or renew",
                crate::cli::cmd::clipped(h)
            ))
        };
        let f: Vec<&str> = h.trim().split('.').collect();
        if f.len() != 3 {
            return Err(bad());
        }
        let id = u128::from_str_radix(f[0], 16).map_err(|_| bad())?;
        let gen = u64::from_str_radix(f[1], 16).map_err(|_| bad())?;
        Ok(q.resume_lease(id, gen, f[2])?)
    }

    fn ms(d: Duration) -> i64 {
        d.as_millis().min(i64::MAX as u128) as i64
    }

    /// Run `cmd` on its `s3://` queue; its exit code.
    ///
    /// # Errors
    /// A [`CliError`] with the exit code of the outcome.
    pub fn run(cmd: Cmd) -> Result<i32, CliError> {
        let e = match cmd {
            Cmd::Compact(a) if a.keys_older_than.is_some() => Err(refused(
                "compact --keys-older-than",
                "compaction does not know a job's key, so keys are kept as long as the queue",
            )),
            Cmd::Dead(d) if matches!(&d.action, args::DeadAction::Requeue(r) if r.reason.is_some()) => {
                Err(refused(
                    "dead requeue --reason",
                    "the requeue record's reason is fixed, `requeued`",
                ))
            }
            Cmd::Init(a) => init(a),
            Cmd::Enqueue(a) => enqueue(a),
            Cmd::Work(a) => work(a),
            Cmd::Claim(a) => claim(a),
            Cmd::Renew(a) => renew(a),
            Cmd::Ack(a) => ack(a),
            Cmd::Nack(a) => nack(a),
            Cmd::Fail(a) => fail(a),
            Cmd::Status(a) => status(a),
            Cmd::List(a) => list(a),
            Cmd::Recover(a) => recover(a),
            Cmd::Dead(d) => dead(d.action),
            Cmd::Compact(a) => compact(a),
            Cmd::Config(_) => Err(refused(
                "config",
                "an s3:// queue has no stored settings: lease and attempts are per handle",
            )),
            Cmd::Limit(a) => Err(refused(
                if a.group.is_some() {
                    "limit --group"
                } else {
                    "limit"
                },
                "s3:// queues have no groups, so no group limits",
            )),
            #[cfg(not(feature = "appliance"))]
            Cmd::Show(a) => show(a),
            Cmd::Wait(_) => Err(refused("wait", "S3 has no notifications to wait on")),
            #[cfg(not(feature = "appliance"))]
            Cmd::Top(_) => Err(refused(
                "top",
                "its live view is of a local queue's directories",
            )),
            Cmd::Fsck(a) => fsck(a),
            #[cfg(not(feature = "appliance"))]
            Cmd::Demo(_) | Cmd::DemoJob(_) | Cmd::Bench(_) | Cmd::Completions(_) => {
                Err(refused("this command", "it runs on a local queue only"))
            }
        }?;
        Ok(e.code())
    }

    fn init(a: args::Init) -> Result<Exit, CliError> {
        if a.shards.is_some() || a.receipts.is_some() || a.max_jobs.is_some() {
            return Err(refused(
                "init --shards, --receipts, --max-jobs",
                "a local queue's layout and capacity; a bucket has no shards or capacity",
            ));
        }
        if a.max_bytes.is_some() || a.evidence_max.is_some() || a.evidence_keep.is_some() {
            return Err(refused("init --max-bytes, --evidence-max, --evidence-keep", "a local queue's capacity and evidence files; an s3:// queue keeps receipts as chains"));
        }
        let q = open_with(&url(&a.dir), Options::default(), true)?;
        note_done(
            format!("the queue {} WAS created (or already existed)", url(&a.dir)),
            "its id",
        );
        out!("{:032x}", q.queue_id());
        Ok(Exit::Done)
    }

    fn enqueue(a: args::Enqueue) -> Result<Exit, CliError> {
        // Each refused by name with its reason (DESIGN-S3.md, "Options still refused").
        let not_here = [
            (a.max_attempts.is_some(), "enqueue --max-attempts", "max attempts are a handle option on s3://, not stored per job"),
            (a.wait.is_some(), "enqueue --wait", "an s3:// queue has no capacity limit to wait for"),
            (!a.after.is_empty(), "enqueue --after", "s3:// queues have no dependencies between jobs"),
            (a.group.is_some(), "enqueue --group", "s3:// queues have no groups"),
            (
                a.delay.is_some_and(|d| !d.is_zero()) && a.key.is_some(),
                "enqueue --delay with --key",
                "a keyed enqueue tells a compacted job from a new one by its generation 0, which a delayed job's record precedes",
            ),
            (
                a.priority.is_some_and(|p| p != stowq::DEFAULT_LEVEL) && a.key.is_some(),
                "enqueue --priority with --key",
                "a job of another level has a record before its generation 0, as a delayed one, which a keyed enqueue takes for a compacted job's",
            ),
        ];
        if let Some((_, what, why)) = not_here.iter().find(|r| r.0) {
            return Err(refused(what, why));
        }
        if a.file.is_none() && crate::cli::std_fds::stdin_closed() {
            return Err(CliError::not_done(
                "stdin is closed: no payload to read (give one on stdin or with --file); not done, nothing changed",
            ));
        }
        let payload = read_payload(a.file.as_deref(), a.max_payload)?;
        let q = open(&url(&a.dir))?;
        let Some(key) = a.key.as_deref() else {
            let level = a.priority.unwrap_or(stowq::DEFAULT_LEVEL);
            let id = q.enqueue_with(&payload, a.delay.unwrap_or_default(), level)?;
            note_done(format!("the job WAS enqueued as {id:032x}"), "its id");
            out!("{id:032x}");
            return Ok(Exit::Done);
        };
        match q.enqueue_keyed(&payload, key)? {
            (id, true) => {
                note_done(format!("the job WAS enqueued as {id:032x}"), "its id");
                out!("{id:032x}");
            }
            (id, false) => {
                eprintln!("duplicate: key {key} already names job {id:032x}; nothing enqueued");
                // As on a local queue: the id is what a caller's `$(...)` waits for.
                super::super::stdout::require_reader();
                out!("{id:032x}");
            }
        }
        Ok(Exit::Done)
    }

    /// The payload from `file` or stdin, at most `max` bytes, read before the queue is opened:
    /// an error names the input, and a payload over `max` is refused after reading `max + 1`
    /// bytes, not the whole input into memory.
    fn read_payload(file: Option<&std::path::Path>, max: u64) -> Result<Vec<u8>, CliError> {
        let what = file.map_or("stdin".into(), |f| f.display().to_string());
        let input: std::io::Result<Box<dyn Read>> = match file {
            Some(f) => std::fs::File::open(f).map(|h| Box::new(h) as Box<dyn Read>),
            None => crate::cli::std_fds::stdin_file().map(|h| Box::new(h) as Box<dyn Read>),
        };
        let mut payload = Vec::new();
        input
            .and_then(|h| h.take(max.saturating_add(1)).read_to_end(&mut payload))
            .map_err(|e| CliError::not_done(format!("{what}: {e}; not done, nothing changed")))?;
        if payload.len() as u64 > max {
            return Err(CliError::not_done(format!(
                "{what}: payload over --max-payload ({max} bytes); not done, nothing changed"
            )));
        }
        Ok(payload)
    }

    fn claim(a: args::Claim) -> Result<Exit, CliError> {
        if a.aging.is_some() {
            return Err(refused(
                "claim --aging",
                "claims on s3:// take the highest level strictly; aging is not written for them",
            ));
        }
        // A closed stdout would lose the handle with the job leased: refused before the claim.
        super::super::cmd::handle_needs_stdout("claim")?;
        if a.payload_out
            .as_deref()
            .is_some_and(|p| p.as_os_str() == "-")
        {
            return Err(CliError::bad_usage(
                "--payload-out -: stdout carries the lease handle, so the payload needs a file path (e.g. --payload-out /tmp/payload)",
            ));
        }
        // As on a local queue: the payload file is opened before the claim, so a path that
        // cannot be written changes nothing (it claimed the job, then exited 4 with it
        // leased and an attempt used), and cut only once a job is claimed; without one an
        // existing file keeps its bytes and a new one is removed again. A symlink at the
        // path, a FIFO with no reader or the claim's own stdout is refused before the claim
        // ([`PayloadFile::open`]).
        let mut file = match &a.payload_out {
            Some(p) => Some(PayloadFile::open(p, |_| None)?),
            None => None,
        };
        let made_file = || {
            if let Some(f) = &file {
                f.remove_if_made();
            }
        };
        let opts = Options {
            lease_ms: ms(a.lease),
            ..Options::default()
        };
        let q = open_with(&url(&a.dir), opts, false).inspect_err(|_| made_file())?;
        // As on a local queue: from here a stop signal sets a flag, and a job claimed
        // meanwhile is given back (one that came during the claim's requests killed it
        // with the job leased, an attempt used).
        super::super::work::install_interrupting_handlers();
        let l = claim_waiting(&q, a.wait).inspect_err(|_| made_file())?;
        if let (sig @ 1.., None) = (super::super::work::stop_signal(), &a.payload_out) {
            let msg = format!("stopped by signal {sig} before the lease handle was printed");
            return Err(give_back(&q, &l, "handle not delivered", msg));
        }
        if let (Some(f), Some(p)) = (file.as_mut(), &a.payload_out) {
            // A stop signal interrupts the delivery, and the job is given back.
            if let Err(e) = write_payload(f, &l.payload) {
                let left = f.discard_partial();
                let msg = format!("{}: {e}{left}", p.display());
                return Err(give_back(&q, &l, "payload not delivered", msg));
            }
        }
        // As on a local queue: nobody got the handle, so the job goes back rather than stay
        // leased and hidden until its lease expires (it exited 8 with the job leased).
        let text = if a.json {
            let listed = stowq::Listed {
                id: l.id,
                state: State::Leased,
                gen: l.generation(),
                attempt: l.attempt,
                sort_ms: l.deadline_ms,
                priority: l.priority,
            };
            job_json(&q, &listed, 0, Some(&handle(&l)))? + "\n"
        } else {
            format!("{}\n", handle(&l))
        }
        .into_bytes();
        if let (false, Some(e)) = (
            super::super::stdout::write(&text),
            super::super::stdout::take_error(),
        ) {
            let msg = format!("the job's lease handle could not be written to stdout: {e}");
            return Err(give_back(&q, &l, "handle not delivered", msg));
        }
        Ok(Exit::Done)
    }

    /// `claim --wait D`: S3 has nothing to wait on, so an empty claim is tried again after
    /// the idle worker's pause (100 ms doubling, jittered, [`stowq::idle_pause`]), cut to what
    /// is left of `D` (`None`: one try); a stop signal ends the wait. No job: exit 3.
    fn claim_waiting(q: &Queue, wait: Option<Duration>) -> Result<stowq::Lease, CliError> {
        let until = wait.map(|w| Instant::now() + w);
        let mut idle = 0u32;
        loop {
            if let Some(l) = q.claim()? {
                return Ok(l);
            }
            let left = until.map_or(Duration::ZERO, |u| {
                u.saturating_duration_since(Instant::now())
            });
            if left.is_zero() || super::super::work::stop_signal() != 0 {
                return Err(CliError::new(Exit::NoJob, no_job(q, 0)));
            }
            idle = idle.saturating_add(1);
            let wake = Instant::now() + stowq::idle_pause(idle).min(left);
            while super::super::work::stop_signal() == 0 {
                let rest = wake.saturating_duration_since(Instant::now());
                if rest.is_zero() {
                    break;
                }
                std::thread::sleep(rest.min(Duration::from_millis(100)));
            }
        }
    }

    /// Write a claimed job's payload to `f` for `claim --payload-out`, as on a local queue:
    /// only a regular file is cut and fsynced (/dev/null, a FIFO or a terminal takes the
    /// bytes as they come); a stop signal ends the delivery.
    fn write_payload(f: &mut PayloadFile, payload: &[u8]) -> Result<(), String> {
        let sync = f.regular();
        f.cut()?;
        let stopped = || match super::super::work::stop_signal() {
            0 => Ok(()),
            sig => Err(format!(
                "stopped by signal {sig} while the payload was written"
            )),
        };
        let mut left = payload;
        while !left.is_empty() {
            match f.file_mut().write(left) {
                Ok(0) => return Err("wrote 0 bytes".into()),
                Ok(n) => left = &left[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
            stopped()?;
        }
        stopped()?;
        if sync {
            f.file_mut().sync_all().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A claimed job that was not handed over (`msg` says why: its payload not delivered,
    /// its command not started) goes back to ready with its attempt given back (`reason`
    /// recorded): not done (exit 2). If that fails the job stays leased until its
    /// lease expires (exit 2), or may (exit 4): its handle is named either way.
    fn give_back(q: &Queue, l: &Lease, reason: &str, msg: String) -> CliError {
        let id = l.id;
        match q.release_undelivered(l, reason) {
            Ok(()) => CliError::not_done(format!(
                "{msg}; the job {id:032x} was released to ready, its attempt given back; not done"
            )),
            Err(e) => {
                let exit = match CliError::from(e.clone()).exit() {
                    Exit::Indeterminate => Exit::Indeterminate,
                    _ => Exit::NotDone,
                };
                let then = if exit == Exit::Indeterminate {
                    "it may still be leased until its lease expires"
                } else {
                    "it stays leased until its lease expires, then it is ready again; not done"
                };
                CliError::new(
                    exit,
                    format!(
                        "{msg}; releasing the job {id:032x} failed too: {e}; {then} (its lease handle is {})",
                        handle(l)
                    ),
                )
            }
        }
    }

    /// What a claim that found no job says: "no job ready", naming the jobs it dead-lettered
    /// (counted from `before`) as corrupt if any (each named in a warning above).
    fn no_job(q: &Queue, before: u64) -> String {
        match q.claims_dead_lettered() - before {
            0 => "no job ready".into(),
            n => format!("{n} job(s) dead-lettered as corrupt (see above); no other job ready"),
        }
    }

    fn renew(a: args::Renew) -> Result<Exit, CliError> {
        super::super::cmd::handle_needs_stdout("renew")?;
        let q = open(&url(&a.dir))?;
        let mut l = parse_handle(&q, &a.handle)?;
        if let Err(e) = q.renew(&mut l, ms(a.lease)) {
            return Err(renew_failed(&l, e));
        }
        note_done(
            format!("the lease WAS renewed; its new handle is {}", handle(&l)),
            "the handle",
        );
        out!("{}", handle(&l));
        Ok(Exit::Done)
    }

    /// A renew of `l` that was not done: what the caller holds now, as on a local queue. An
    /// indeterminate renew may have moved the lease to its next generation, whose handle is
    /// known in advance; a renew not done leaves the old handle holding it.
    fn renew_failed(l: &Lease, e: Error) -> CliError {
        let mut c = CliError::from(e);
        match c.exit() {
            Exit::Indeterminate => c.add(&format!(
                "; the lease may have been renewed: its handle is then {:032x}.{:x}.{}, else still the old one",
                l.id,
                l.generation() + 1,
                l.token
            )),
            Exit::NotDone => c.add("; the lease was kept as it was: the old handle still holds it"),
            _ => {}
        }
        c
    }

    fn ack(a: args::Ack) -> Result<Exit, CliError> {
        let q = open(&url(&a.dir))?;
        let l = parse_handle(&q, &a.handle)?;
        let r = q.ack(&l)?;
        note_done(format!("the job {:032x} WAS acked", r.id), "its receipt");
        out!(
            "{:032x} done generation {} attempt {}",
            r.id,
            r.gen,
            r.attempt
        );
        Ok(Exit::Done)
    }

    fn nack(a: args::Nack) -> Result<Exit, CliError> {
        let q = open(&url(&a.dir))?;
        let l = parse_handle(&q, &a.handle)?;
        let state = nacked_state(q.nack(&l, a.delay, "nacked")?, a.delay);
        note_done(
            format!("the job {:032x} WAS nacked ({state})", l.id),
            "its new state",
        );
        out!("{state}");
        Ok(Exit::Done)
    }

    /// A nack's outcome as `nack` prints it on a local queue: `ready`, `delayed until
    /// <UTC> (unix SECS.mmm)` (the service's clock, [`fixed::delayed_until`]) or `dead
    /// (attempts exhausted)`.
    fn nacked_state(n: Nacked, delay: Duration) -> String {
        match n {
            Nacked::Ready(_) if delay.is_zero() => "ready".into(),
            Nacked::Ready(due) => fixed::delayed_until(due.max(0) as u128 * 1_000_000),
            Nacked::Dead => "dead (attempts exhausted)".into(),
        }
    }

    /// What `work` says of a job it nacked (`why`: its command's outcome) after `delay`, as
    /// on a local queue: `back to ready`, `retry in Ns` or `attempts exhausted,
    /// dead-lettered`.
    fn describe_nack(n: Nacked, delay: Duration, why: &str) -> String {
        match n {
            Nacked::Ready(_) if delay.is_zero() => format!("{why}: back to ready"),
            Nacked::Ready(_) => format!("{why}: retry in {}s", fixed::secs(delay.as_nanos(), 0)),
            Nacked::Dead => format!("{why}: attempts exhausted, dead-lettered"),
        }
    }

    fn fail(a: args::Fail) -> Result<Exit, CliError> {
        let q = open(&url(&a.dir))?;
        let l = parse_handle(&q, &a.handle)?;
        q.fail(&l, &a.reason)?;
        Ok(Exit::Done)
    }

    fn status(a: args::Status) -> Result<Exit, CliError> {
        if a.json && a.prometheus {
            return Err(CliError::bad_usage("--json and --prometheus are exclusive"));
        }
        let u = url(&a.dir);
        let q = open(&u)?;
        let s = q.status()?;
        // The local queue's names: `acked` for done, `expired_leases` for leases past their
        // deadline (counted in `leased` too). Byte counts, limits and priorities have no
        // StowQ counterpart and are left out.
        let rows = [
            ("ready", s.ready),
            ("leased", s.leased),
            ("delayed", s.delayed),
            ("dead", s.dead),
            ("acked", s.done),
        ];
        if a.json {
            let mut o = format!(
                "{{\"queue\":{},\"queue_id\":\"{:032x}\"",
                super::super::encode::json_string(&u),
                q.queue_id()
            );
            for (n, c) in rows {
                o += &format!(",\"{n}\":{c}");
            }
            let by: Vec<String> = s.ready_by_priority.iter().map(u64::to_string).collect();
            out!(
                "{o},\"expired_leases\":{},\"ready_by_priority\":[{}]}}",
                s.expired,
                by.join(",")
            );
            return Ok(Exit::Done);
        }
        if a.prometheus {
            let ql = u
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            let mut o =
                String::from("# HELP steadq_jobs Jobs in each state.\n# TYPE steadq_jobs gauge\n");
            for (n, c) in rows {
                o += &format!("steadq_jobs{{queue=\"{ql}\",state=\"{n}\"}} {c}\n");
            }
            o += "# HELP steadq_expired_leases Leases past their deadline, not yet recovered.\n\
                  # TYPE steadq_expired_leases gauge\n";
            o += &format!("steadq_expired_leases{{queue=\"{ql}\"}} {}\n", s.expired);
            o += "# HELP steadq_ready_by_priority Ready jobs per priority level (7 is claimed first).\n\
                  # TYPE steadq_ready_by_priority gauge\n";
            for (p, n) in s.ready_by_priority.iter().enumerate() {
                o += &format!("steadq_ready_by_priority{{queue=\"{ql}\",priority=\"{p}\"}} {n}\n");
            }
            let o = o.trim_end();
            out!("{o}");
            return Ok(Exit::Done);
        }
        out!(
            "ready {}\ndelayed {}\nleased {}\nexpired {}\ndone {}\ndead {}",
            s.ready,
            s.delayed,
            s.leased,
            s.expired,
            s.done,
            s.dead
        );
        // As a local status: ready jobs per level, highest first, once any is not at the
        // default level (StowQ's default level is steadq's).
        if let Some(levels) = super::super::encode::ready_by_priority(&s.ready_by_priority) {
            out!("ready by priority  {levels}");
        }
        Ok(Exit::Done)
    }

    fn list(a: args::List) -> Result<Exit, CliError> {
        let q = open(&url(&a.dir))?;
        let jobs = q.list()?;
        // Due as `status` and a claim decide it: by the upper bound of the service's time.
        let due_by = q.client.clock.upper_ms();
        for l in jobs.iter().filter(|l| listed_as(l, a.state, due_by)) {
            if a.json {
                out!("{}", job_json(&q, l, due_by, None)?);
                continue;
            }
            // A ready job not yet due is `delayed`, as a local queue's `list` names it.
            let s = match l.state {
                State::Ready if l.sort_ms > due_by => "delayed",
                s => s.as_str(),
            };
            out!("{:032x} {s} {} {} {}", l.id, l.gen, l.attempt, l.sort_ms);
        }
        Ok(Exit::Done)
    }

    /// A job as `list --json` prints it on a local queue (`encode::job_json`), one object on
    /// one line, with the local names and units: `id`, `state` (`acked` for done, `delayed`
    /// for a ready job not yet due by `due_by`), `attempt`, `priority`, `gen`, `deadline`
    /// (unix seconds with milliseconds, service clock: a lease's expiry, a delayed job's due
    /// time, an ack's time; `null` for a due ready job and a dead one), `reason` (a dead
    /// job's, read from its record: one GET per dead job; else `null`), `path` (the newest
    /// generation's key, as `show` prints it) and, from `claim --json`, `handle`. The local
    /// `max` is left out: an s3:// queue's attempts are a handle option, not stored per job.
    ///
    /// # Errors
    /// Not done: the dead job's record could not be read.
    fn job_json(
        q: &Queue,
        l: &stowq::Listed,
        due_by: i64,
        handle: Option<&str>,
    ) -> Result<String, CliError> {
        use super::super::encode::json_string;
        let delayed = l.state == State::Ready && l.sort_ms > due_by;
        let state = match l.state {
            State::Ready if delayed => "delayed",
            State::Done => "acked",
            s => s.as_str(),
        };
        let deadline = match l.state {
            State::Leased | State::Done => Some(l.sort_ms),
            State::Ready if delayed => Some(l.sort_ms),
            _ => None,
        };
        let deadline = deadline.map_or("null".into(), |ms| {
            fixed::secs(ms.max(0) as u128 * 1_000_000, 3)
        });
        let reason = match l.state {
            State::Dead => q
                .record(l.id, l.gen)?
                .map_or("null".into(), |r| json_string(&r.reason)),
            _ => "null".into(),
        };
        let mut o = format!(
            "{{\"id\":\"{:032x}\",\"state\":\"{state}\",\"attempt\":{},\"priority\":{},\"gen\":{},\"deadline\":{deadline},\"reason\":{reason},\"path\":{}",
            l.id,
            l.attempt,
            l.priority,
            l.gen,
            json_string(&q.keys().gen(l.id, l.gen)),
        );
        if let Some(h) = handle {
            o += &format!(",\"handle\":{}", json_string(h));
        }
        o.push('}');
        Ok(o)
    }

    /// Whether `list --state want` shows `l`: a ready job is `delayed` until it is due
    /// (`due_by`), as `status` counts it; both were listed for either state.
    fn listed_as(l: &stowq::Listed, want: Option<steadq::State>, due_by: i64) -> bool {
        match want {
            None => true,
            Some(steadq::State::Ready) => l.state == State::Ready && l.sort_ms <= due_by,
            Some(steadq::State::Delayed) => l.state == State::Ready && l.sort_ms > due_by,
            Some(steadq::State::Leased) => l.state == State::Leased,
            Some(steadq::State::Acked) => l.state == State::Done,
            Some(steadq::State::Dead) => l.state == State::Dead,
            // StowQ has no dependencies: no job of it waits.
            Some(steadq::State::Waiting) => false,
        }
    }

    /// Expired leases back to ready (or dead), then the index made to agree with the chains
    /// after crash windows (StowQ's `repair`).
    fn recover(a: args::Recover) -> Result<Exit, CliError> {
        if a.due_now {
            return Err(refused(
                "recover --due-now",
                "not written yet: each delayed job would step to ready now",
            ));
        }
        let q = open(&url(&a.dir))?;
        let r = q.recover()?;
        note_done("recovery WAS done", "its report");
        out!("ready {} dead {} stale {}", r.ready, r.dead, r.stale);
        let p = q.repair()?;
        out!(
            "index: put {} deleted {} foreign {}",
            p.put,
            p.deleted,
            p.foreign
        );
        Ok(Exit::Done)
    }

    fn dead(action: DeadAction) -> Result<Exit, CliError> {
        match action {
            DeadAction::List(a) => {
                for l in open(&url(&a.dir))?.list()? {
                    if l.state == State::Dead {
                        out!("{:032x} dead {} {} {}", l.id, l.gen, l.attempt, l.sort_ms);
                    }
                }
            }
            DeadAction::Requeue(a) => {
                let only = match (&a.job, a.all) {
                    (Some(j), false) => Some(job_id(j)?),
                    (None, true) => None,
                    _ => return Err(CliError::bad_usage("dead requeue: give one JOB or --all")),
                };
                let n = open(&url(&a.dir))?.requeue(only)?;
                note_done(format!("{n} jobs WERE requeued"), "the report");
                out!("{n}");
            }
            DeadAction::Purge(_) => {
                return Err(refused(
                    "dead purge",
                    "deleting dead chains needs a compaction fenced against `dead requeue`",
                ))
            }
        }
        Ok(Exit::Done)
    }

    /// A job id as `list` prints it: 32 lowercase hex digits; else bad usage (exit 1), as on
    /// a local queue.
    fn job_id(j: &str) -> Result<u128, CliError> {
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        (j.len() == 32 && j.bytes().all(hex))
            .then(|| u128::from_str_radix(j, 16).ok())
            .flatten()
            .ok_or_else(|| {
                CliError::bad_usage(format!(
                    "bad job id '{j}': expected 32 lowercase hex digits (see `steadq list`)"
                ))
            })
    }

    /// `show JOB`: the job's true state (its chain's newest generation, [`Queue::inspect`])
    /// and its envelope's header, in the fields a local queue's `show` prints (`path` is the
    /// newest generation's key); `--raw` prints the payload alone. One LIST, a GET of the
    /// newest record (unless it is generation 0) and a GET of the envelope. A malformed id is
    /// bad usage (exit 1), an unknown one not done (exit 2), both named, as locally; so is an
    /// envelope that fails verification, unless its job is dead already (exit 0).
    fn show(a: args::Show) -> Result<Exit, CliError> {
        let u = url(&a.dir);
        let id = job_id(&a.job)?;
        let q = open(&u)?;
        let Some((gen, rec)) = q.inspect(id)? else {
            return Err(CliError::not_done(format!("{u}: no job {id:032x}")));
        };
        let key0 = q.keys().gen(id, 0);
        let file = q.envelope(id)?;
        let header = file
            .as_deref()
            .map(|f| steadq::format::verify(f, id, q.queue_id()));
        let payload = || {
            file.as_deref()
                .map_or(&[][..], |f| &f[steadq::format::HEADER_LEN..])
        };
        match (&header, a.raw) {
            (Some(Ok(_)), true) => {
                super::super::stdout::write(payload());
                return Ok(Exit::Done);
            }
            (None, true) => {
                return Err(CliError::not_done(format!(
                    "{u}: job {id:032x} was acked and its chain compacted to its receipt: its payload was not kept"
                )))
            }
            (Some(Err(c)), true) => {
                return Err(CliError::not_done(format!(
                    "{u}: {key0}: corrupt envelope ({c}): its payload cannot be verified, so --raw prints nothing"
                )))
            }
            _ => {}
        }
        let due_by = q.client.clock.upper_ms();
        let now = q.client.clock.now_ms();
        let age = |ms: i64| super::super::encode::fmt_age(ms.max(0) as u64 * 1_000_000);
        let (state, detail) = match rec.state {
            State::Ready if rec.due_ms > due_by => {
                ("delayed", format!("due in {}", age(rec.due_ms - now)))
            }
            State::Ready => ("ready", String::new()),
            State::Leased if rec.due_ms <= now => (
                "leased",
                format!("lease expired {} ago", age(now - rec.due_ms)),
            ),
            State::Leased => (
                "leased",
                format!("lease expires in {}", age(rec.due_ms - now)),
            ),
            State::Dead => ("dead", format!("reason {}", rec.reason)),
            State::Done => ("acked", format!("token {}", rec.token)),
        };
        out!("job       {id:032x}");
        out!("state     {state} {detail}");
        out!("path      {}", q.keys().gen(id, gen));
        out!("attempt   {}/{}", rec.attempt, q.options.max_attempts);
        out!("gen       {gen}");
        out!("priority  {}", rec.level);
        let h = match header {
            Some(Ok(h)) => h,
            None => {
                out!("envelope  (not kept: the chain was compacted to its receipt)");
                return Ok(Exit::Done);
            }
            Some(Err(c)) => {
                out!("file      corrupt ({c}): header and payload not shown");
                if rec.state == State::Dead {
                    return Ok(Exit::Done);
                }
                return Err(CliError::not_done(format!(
                    "{u}: {key0}: corrupt envelope ({c}), not yet dead-lettered: the next claim that reaches it dead-letters it"
                )));
            }
        };
        super::super::show::header_lines(&h, &mut payload())?;
        Ok(Exit::Done)
    }

    /// `fsck URL`: the index checked against the chains, changing nothing ([`Queue::check`],
    /// what `recover`'s repair would do): one line per problem on stdout (a job's missing
    /// marker, a stale marker, a marker of no job, a foreign object), a summary on stderr;
    /// exit 5 when it found any, as a local fsck. Envelopes are not read (a claim verifies
    /// each one it hands out). `--quarantine` is refused: `recover` repairs the index, and
    /// foreign objects are left where they are.
    fn fsck(a: args::Fsck) -> Result<Exit, CliError> {
        if a.quarantine {
            return Err(refused(
                "fsck --quarantine",
                "an s3:// queue has no quarantine; `recover` repairs the index and leaves foreign objects as they are",
            ));
        }
        let u = url(&a.dir);
        let r = open(&u)?.check()?;
        for (id, gen, state, key) in &r.missing {
            out!(
                "missing marker: job {id:032x} generation {gen} ({}) is not indexed; repair puts {key}",
                state.as_str()
            );
        }
        for (key, id, gen) in &r.stale {
            out!("stale marker: {key}: job {id:032x} is at generation {gen}");
        }
        for key in &r.orphans {
            out!("marker of no job: {key}");
        }
        for key in &r.foreign {
            out!("foreign object: {key}: not a StowQ generation, record or index marker");
        }
        let n = r.problems();
        let then = if n > 0 {
            " (`steadq recover` repairs the index; foreign objects are left as they are)"
        } else {
            ""
        };
        eprintln!(
            "fsck {u}: {} chains and {} index markers read, envelopes not read; {n} problems{then}",
            r.chains, r.markers
        );
        Ok(if n == 0 { Exit::Done } else { Exit::Problems })
    }

    fn compact(a: args::Compact) -> Result<Exit, CliError> {
        let r = open(&url(&a.dir))?.compact(a.older_than)?;
        note_done(format!("{} chains WERE compacted", r.chains), "the report");
        out!(
            "compacted {} chains, {} objects deleted",
            r.chains,
            r.objects
        );
        Ok(Exit::Done)
    }

    /// Keep renewing `lease` every third of `lease_ms` until `stop`; the newest lease is
    /// shared.
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
                if let Err(e) = q.renew(&mut l, q.options.lease_ms) {
                    if take_up_own_renewal(&q, &mut l) {
                        // Renew the generation taken up at once: it is a round old.
                        last = Instant::now().checked_sub(every).unwrap_or(last);
                    } else {
                        eprintln!("steadq work: renew {:032x}: {e}", l.id);
                    }
                }
            }
        })
    }

    /// Our own renewal may have been applied with its answer lost (a renew that was
    /// indeterminate, or met as "lease lost" by the next one): when the lease's next
    /// generation is leased under its token, take it up (true).
    fn take_up_own_renewal(q: &Queue, l: &mut Lease) -> bool {
        match q.resume_lease(l.id, l.generation() + 1, &l.token) {
            Ok(mut n) => {
                n.payload = std::mem::take(&mut l.payload);
                *l = n;
                true
            }
            Err(_) => false,
        }
    }

    /// Run `cmd` on the payload of `l`; settle the job by its exit status. Returns what was
    /// done, to print (empty when it was printed already: a command that could not start for
    /// want of resources, its job given back).
    ///
    /// # Errors
    /// The command cannot be run (the worker stops), or, for `--once`, the job was not
    /// settled or given back.
    fn run_job(q: &Arc<Queue>, l: Lease, a: &args::Work, feed: &Feed) -> Result<String, CliError> {
        let id = format!("{:032x}", l.id);
        // Arguments that were not UTF-8 get their original bytes back (they were passed as
        // the placeholders `rawargs` stands them in with), as on a local queue.
        let raw = super::super::rawargs::os;
        let spawned = Command::new(raw(&a.command[0]))
            .args(a.command[1..].iter().map(|c| raw(c)))
            .env("STEADQ_JOB_ID", &id)
            .env("STEADQ_ATTEMPT", l.attempt.to_string())
            .env("STEADQ_MAX_ATTEMPTS", q.options.max_attempts.to_string())
            .env("STEADQ_QUEUE", url(&a.dir))
            .stdin(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(c) => {
                super::super::work::spawn_started();
                c
            }
            Err(e) if super::super::work::spawn_short_of_resources(&e) => {
                // This process or the system is short of descriptors, memory or processes
                // for the moment (EMFILE, ENFILE, ENOMEM, EAGAIN): nothing about the job or
                // the command. It goes back to ready with its attempt; a long-running worker
                // waits (1 s, doubling while the shortage lasts, as on a local queue) and
                // carries on (it stopped, exit 2, a whole worker lost to a moment's
                // shortage; then it took the job again every second, each time a handful of
                // billed requests). `--once` is not done (exit 2).
                let msg = format!("job {id}: cannot start {:?} now: {e}", a.command[0]);
                let err = give_back(q, &l, "command could not start for want of resources", msg);
                if a.once {
                    return Err(err);
                }
                let wait = super::super::work::short_pause();
                eprintln!("steadq work: {err}; trying again in {} s", wait.as_secs());
                pause(wait);
                return Ok(String::new());
            }
            Err(e) => {
                // The job is not at fault and did not run: give it back at once with its
                // attempt, then stop, as on a local queue. It was nacked, which used up an
                // attempt each time (and dead-lettered the job at its last one) without it
                // ever running, and the nack's own failure went unsaid.
                let cmd = super::super::rawargs::os(&a.command[0]);
                let hint = super::super::work::exec_hint(&cmd, &e);
                let msg = format!("cannot run {:?}: {e}{hint}", a.command[0]);
                return Err(give_back(q, &l, "command could not start", msg));
            }
        };
        let payload = l.payload.clone();
        let lease = Arc::new(Mutex::new(l));
        let stop = Arc::new(AtomicBool::new(false));
        let r = renewer(q.clone(), lease.clone(), stop.clone());
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&payload); // a command may exit without reading it all
        }
        let status = child
            .wait()
            .map_err(|e| CliError::not_done(format!("wait: {e}")));
        stop.store(true, Ordering::Relaxed);
        let _ = r.join();
        let status = status?;
        let mut l = lease.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let backoff = steadq::backoff(l.attempt, a.backoff, a.max_backoff);
        let outcome = match status.code() {
            Some(0) => {
                // The first try joins the acks other threads make at the same moment (one
                // done marker for them all); a retry acks alone.
                let first = std::cell::Cell::new(true);
                settle(q, &mut l, a, State::Done, |l| {
                    if first.replace(false) {
                        feed.acks.ack(q, l, &feed.running)
                    } else {
                        q.ack(l).map(|_| ())
                    }
                })
                .map(|()| format!("acked (generation {})", l.generation() + 1))
            }
            Some(65) => settle(q, &mut l, a, State::Dead, |l| q.fail(l, "dataerr"))
                .map(|()| "dead-lettered".into()),
            Some(75) => q
                .nack(&l, a.retry_delay, "tempfail")
                .map(|n| describe_nack(n, a.retry_delay, "exit 75, retry later")),
            _ => q
                .nack(&l, backoff, &format!("command: {status}"))
                .map(|n| describe_nack(n, backoff, &format!("{status}, failed"))),
        };
        match outcome {
            Ok(what) => Ok(format!("{id} {what}")),
            Err(e) if a.once => Err(unsettled(&id, e)),
            Err(e) => Ok(format!("{id}: {e}")),
        }
    }

    /// Waits between tries of a settle that met a server error (then 8 s, 16 s and 30 s for a
    /// long-running worker, until one `--lease` has passed).
    const SETTLE_WAITS: [Duration; 3] = [
        Duration::from_secs(1),
        Duration::from_secs(2),
        Duration::from_secs(4),
    ];

    /// Ack or dead-letter (`to`) the job of `l` with `op`, retrying through server errors
    /// (not a lost lease): `work --once` tries 4 times (about 7 s), a long-running worker
    /// until one `--lease` has passed. The job's command ran, so giving up at the first outage
    /// had it run again once its lease expired. After an indeterminate try the next one may
    /// meet our own earlier create (412, lease lost): the lease's next generation is read,
    /// and holding `to` under our token it was ours, so done. A lease lost to our own
    /// renewal, applied with its answer lost, is taken up and the settle made from it.
    fn settle(
        q: &Queue,
        l: &mut Lease,
        a: &args::Work,
        to: State,
        op: impl Fn(&Lease) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let t0 = Instant::now();
        let mut maybe = false;
        let mut i = 0;
        loop {
            let e = match op(l) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if e.kind == ErrorKind::LeaseLost {
                if maybe && settled_by_us(q, l, to) {
                    return Ok(());
                }
                if take_up_own_renewal(q, l) {
                    continue;
                }
            }
            let wait = SETTLE_WAITS.get(i).copied().unwrap_or_else(|| {
                let later = Duration::from_secs(8 << (i - SETTLE_WAITS.len()).min(2));
                later.min(Duration::from_secs(30))
            });
            let budget = Duration::from_millis(q.options.lease_ms.max(0) as u64);
            let more = if a.once {
                i < SETTLE_WAITS.len()
            } else {
                t0.elapsed() + wait < budget.max(Duration::from_secs(7))
            };
            let retryable = match &e.kind {
                ErrorKind::Transport(_) => true,
                ErrorKind::Status { status, .. } => *status >= 500 || *status == 409,
                _ => false,
            };
            if !retryable || !more {
                return Err(e);
            }
            maybe |= e.outcome == Outcome::Indeterminate;
            eprintln!(
                "steadq work: {:032x}: {e}; trying again in {} s",
                l.id,
                wait.as_secs()
            );
            std::thread::sleep(wait);
            i += 1;
        }
    }

    /// Whether the lease's next generation holds `to` under its token: our own settle.
    fn settled_by_us(q: &Queue, l: &Lease, to: State) -> bool {
        let key = q.keys().gen(l.id, l.generation() + 1);
        let rec = q.client.get(&key).ok().filter(|r| r.status == 200);
        let rec = rec.and_then(|r| stowq::keys::Record::decode(&r.body));
        rec.is_some_and(|r| r.state == to && r.token == l.token)
    }

    /// `work --once` could not settle job `id`: it exits by the settle's outcome (2, 4 when
    /// unknown, 6 when the lease was lost), never 0, so a cron job sees it.
    fn unsettled(id: &str, e: Error) -> CliError {
        let exit = CliError::from(e.clone()).exit();
        let left = if exit == Exit::LeaseLost {
            ""
        } else {
            "; it stays leased until its lease expires"
        };
        CliError::new(exit, format!("job {id} not settled: {e}{left}"))
    }

    /// `work` on an `s3://` queue: `--concurrency` threads, each running one job at a time;
    /// above one thread they claim in batches, one job per thread holding no lease
    /// ([`Feed`], `claim_batch`: one leased marker and one multi-object delete per batch),
    /// and each job is acked on its own. An empty claim backs off ([`stowq::idle_pause`]: 100 ms doubling to
    /// 10 s, jittered; reset by a claim), as S3 has nothing to wait on. SIGTERM or SIGINT:
    /// no new claims; running commands finish (their leases renewed meanwhile).
    fn work(a: args::Work) -> Result<Exit, CliError> {
        if a.command.first().is_none_or(|c| c.is_empty()) {
            return Err(CliError::bad_usage(
                "work: no command after -- (or an empty one)",
            ));
        }
        if a.timeout.is_some() || a.aging.is_some() {
            return Err(refused(
                "work --timeout, --aging",
                "the s3:// worker has no command timer, and its claims take the highest level strictly (aging is not written for them)",
            ));
        }
        // A command that cannot be started is refused before any job is claimed, as on a
        // local queue: a typo would otherwise use up an attempt of each job it touches.
        super::super::work::check_command(&super::super::rawargs::os(&a.command[0]))?;
        let opts = Options {
            lease_ms: ms(a.lease),
            ..Options::default()
        };
        let q = Arc::new(open_with(&url(&a.dir), opts, false)?);
        super::super::work::install_handlers();
        let a = Arc::new(a);
        // `--once` handles at most one job, whatever `--concurrency` says.
        let threads = if a.once { 1 } else { a.concurrency.max(1) };
        let feed = Arc::new(Feed {
            threads: threads as usize,
            ..Feed::default()
        });
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (q, a, feed) = (q.clone(), a.clone(), feed.clone());
                std::thread::spawn(move || work_loop(&q, &a, &feed))
            })
            .collect();
        let mut end = Ok(Exit::Done);
        for t in handles {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(CliError::not_done("work: a worker thread panicked")));
            if end.is_ok() {
                end = r;
            }
        }
        // Leases claimed for threads that stopped before taking them: back to ready, their
        // attempts given back.
        let left: Vec<Lease> = feed
            .pool
            .lock()
            .map(|mut p| p.drain(..).collect())
            .unwrap_or_default();
        for l in left {
            if let Err(e) = q.release_undelivered(&l, "worker stopped before running it") {
                eprintln!(
                    "steadq work: giving back {:032x}: {e}; it stays leased until its lease expires",
                    l.id
                );
            }
        }
        end
    }

    /// The jobs a worker's threads share: with `--concurrency` above 1, a thread that finds
    /// no lease waiting claims a batch (`claim_batch`) of one job per thread not running a
    /// command, keeps the first and leaves the rest here for the others, which take them at
    /// once (an idle thread's pause ends when one is waiting).
    #[derive(Default)]
    struct Feed {
        threads: usize,
        /// Threads holding a lease (from taking it to settling its job).
        running: std::sync::atomic::AtomicUsize,
        /// Claimed leases no thread has taken yet.
        pool: Mutex<std::collections::VecDeque<Lease>>,
        /// Held while a thread claims, so that threads do not claim batches for each other.
        claiming: Mutex<()>,
        /// The acks of jobs that finish together, made as one `ack_batch`.
        acks: Acks,
    }

    thread_local! {
        /// This thread's lease was counted out of [`Feed::running`] by its ack's batch
        /// ([`Acks::ack`]): its [`Feed::done`] is already made.
        static RELEASED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// How long the first of several threads acking at once waits at most for the others'
    /// acks to join its `ack_batch` (not at all when no other thread holds a lease; less
    /// when every one that does has joined).
    const ACK_WINDOW: Duration = Duration::from_millis(100);

    /// Group acks: a thread that acks while no `ack_batch` is being gathered leads one; it
    /// waits until every thread holding a lease has joined, at most [`ACK_WINDOW`], then acks
    /// every lease submitted meanwhile with one `ack_batch` (a create per job, one done marker;
    /// a lone lease with `ack`) and hands each thread its own job's outcome.
    #[derive(Default)]
    struct Acks {
        state: Mutex<AckState>,
        ready: std::sync::Condvar,
    }

    #[derive(Default)]
    struct AckState {
        next: u64,
        pending: Vec<(u64, Lease)>,
        results: std::collections::HashMap<u64, Result<(), Error>>,
        gathering: bool,
    }

    impl Acks {
        /// Ack `l`, with the acks of other threads that come within the window. `running`
        /// counts the threads holding leases: gathering ends when all of them have joined
        /// (at once when this is the only one), and each thread of the batch is counted out of it (and marked [`RELEASED`]) as the
        /// batch ends, all at once, so that they claim their next jobs together, in one batch.
        fn ack(
            &self,
            q: &Queue,
            l: &Lease,
            running: &std::sync::atomic::AtomicUsize,
        ) -> Result<(), Error> {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let ticket = s.next;
            s.next += 1;
            s.pending.push((ticket, l.clone()));
            // A gathering batch may be waiting for this one.
            self.ready.notify_all();
            loop {
                if let Some(r) = s.results.remove(&ticket) {
                    RELEASED.with(|c| c.set(true));
                    return r;
                }
                if s.gathering {
                    s = self.ready.wait(s).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                s.gathering = true;
                // Gather until every thread holding a lease has joined, or the window ends.
                let t0 = Instant::now();
                while s.pending.len() < running.load(Ordering::Relaxed) {
                    let Some(left) = ACK_WINDOW.checked_sub(t0.elapsed()) else {
                        break;
                    };
                    s = self
                        .ready
                        .wait_timeout(s, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                let batch = std::mem::take(&mut s.pending);
                drop(s);
                let leases: Vec<Lease> = batch.iter().map(|(_, l)| l.clone()).collect();
                // One alone is acked as a single job is (its own done marker).
                let rs = if let [one] = leases.as_slice() {
                    vec![q.ack(one)]
                } else {
                    q.ack_batch(&leases)
                };
                s = self.state.lock().unwrap_or_else(|p| p.into_inner());
                running.fetch_sub(batch.len(), Ordering::Relaxed);
                for ((t, _), r) in batch.into_iter().zip(rs) {
                    s.results.insert(t, r.map(|_| ()));
                }
                s.gathering = false;
                self.ready.notify_all();
            }
        }
    }

    impl Feed {
        /// A waiting lease, counted as held.
        fn take(&self) -> Option<Lease> {
            let l = self.pool.lock().ok()?.pop_front()?;
            self.running.fetch_add(1, Ordering::Relaxed);
            Some(l)
        }

        fn waiting(&self) -> bool {
            self.pool.lock().is_ok_and(|p| !p.is_empty())
        }

        /// The next lease for this thread: one left by another thread's batch, or one of a
        /// batch claimed now for every thread holding none (a single `claim` when that is
        /// one thread). A lease returned is counted as held until [`Feed::done`].
        fn next(&self, q: &Queue) -> Result<Option<Lease>, Error> {
            if let Some(l) = self.take() {
                return Ok(Some(l));
            }
            let _g = self.claiming.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(l) = self.take() {
                return Ok(Some(l));
            }
            let k = self
                .threads
                .saturating_sub(self.running.load(Ordering::Relaxed))
                .max(1);
            let first = if k == 1 {
                q.claim()?
            } else {
                let mut ls = q.claim_batch(k)?.into_iter();
                let first = ls.next();
                if let Ok(mut p) = self.pool.lock() {
                    p.extend(ls);
                }
                first
            };
            if first.is_some() {
                self.running.fetch_add(1, Ordering::Relaxed);
            }
            Ok(first)
        }

        /// The job of a lease from [`Feed::next`] is settled (or given back); nothing when
        /// its ack's batch counted it out already.
        fn done(&self) {
            if !RELEASED.with(|c| c.replace(false)) {
                self.running.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// One worker thread: claim, run, settle; back off while idle.
    fn work_loop(q: &Arc<Queue>, a: &args::Work, feed: &Feed) -> Result<Exit, CliError> {
        let mut idle = 0u32;
        while !stopping() {
            let before = q.claims_dead_lettered();
            let claimed = match feed.next(q) {
                Ok(c) => c,
                // A long-running worker outlives an outage: log, back off, look again.
                Err(e) if !a.once => {
                    eprintln!("steadq work: claim: {e}");
                    None
                }
                Err(e) => return Err(e.into()),
            };
            let Some(l) = claimed else {
                // `--once` that dead-lettered corrupt jobs handled them: exit 0, as locally.
                if a.once && q.claims_dead_lettered() > before {
                    eprintln!("steadq work: {}", no_job(q, before));
                    return Ok(Exit::Done);
                }
                if a.once {
                    return Err(CliError::new(Exit::NoJob, "no job ready"));
                }
                idle = idle.saturating_add(1);
                pause_unless(stowq::idle_pause(idle), || feed.waiting());
                continue;
            };
            idle = 0;
            let what = run_job(q, l, a, feed);
            feed.done();
            let what = what.inspect_err(|_| FAILED.store(true, Ordering::Relaxed))?;
            // Empty: the job was given back and that was said already.
            if !a.quiet && !what.is_empty() {
                eprintln!("steadq work: {what}");
            }
            if a.once {
                break;
            }
        }
        Ok(Exit::Done)
    }

    /// A worker thread could not run its command: the others stop too.
    static FAILED: AtomicBool = AtomicBool::new(false);

    /// SIGTERM or SIGINT arrived, or a worker thread failed.
    fn stopping() -> bool {
        super::super::work::stop_requested() || FAILED.load(Ordering::Relaxed)
    }

    /// Sleep `d`, waking early when [`stopping`].
    fn pause(d: Duration) {
        pause_unless(d, || false);
    }

    /// Sleep `d`, waking early when [`stopping`] or when `wake` says so (checked every 100
    /// ms).
    fn pause_unless(d: Duration, wake: impl Fn() -> bool) {
        let until = Instant::now() + d;
        while !stopping() && !wake() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}

#[cfg(all(test, not(feature = "s3")))]
mod tests {
    use super::super::args::{self, Cmd};
    use super::super::exit::Exit;
    use super::*;

    fn status(dir: &str) -> Cmd {
        Cmd::Status(args::Status {
            dir: dir.into(),
            json: false,
            prometheus: false,
            bytes: false,
        })
    }

    #[test]
    fn an_s3_queue_is_refused_by_name_without_the_feature() {
        assert_eq!(s3_queue(&status("/var/lib/jobs")), None);
        assert_eq!(s3_queue(&status("s3:relative")), None);
        let cmd = status("s3://bucket/jobs");
        assert_eq!(s3_queue(&cmd), Some("s3://bucket/jobs"));
        let e = run(cmd).unwrap_err();
        assert_eq!(e.exit(), Exit::NotDone);
        assert!(e.to_string().contains("\"s3://bucket/jobs\""), "{e}");
        assert!(e.to_string().contains("--features s3"), "{e}");
    }
}
