//! `steadq wait`, `list --json` and `dead requeue --reason`: the commands a script reaches
//! for around a queue it does not own (waiting for it to drain, reading its jobs as data,
//! requeueing one kind of failure).

use super::args::{DeadRequeue, List};
use super::exit::Exit;
use super::{cmd, encode, open, stdout, CliError};
use argh::FromArgs;
use std::path::PathBuf;
use std::time::Duration;
use steadq::{Kind, Queue, Reason, State};

/// Wait until the queue is drained: no job ready, leased or delayed (dead jobs and
/// receipts do not count). Waits on inotify, not by polling; changes nothing.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(
    subcommand,
    name = "wait",
    example = "steadq wait /var/lib/jobs --empty --timeout 10m && echo drained",
    error_code(2, "not done: the queue could not be read, or its directory was removed or replaced while waiting"),
    error_code(3, "timeout: jobs were still ready, leased or delayed")
)]
pub struct Wait {
    /// queue directory
    #[argh(positional, from_str_fn(super::args::path))]
    pub dir: PathBuf,
    /// wait until no job is ready, leased or delayed (required: the one condition so far)
    #[argh(switch)]
    pub empty: bool,
    /// give up after this long, exit 3 (default: wait for good)
    #[argh(option, from_str_fn(super::args::dur))]
    pub timeout: Option<Duration>,
}

/// A queue opened to read only (no rename probe in `tmp/`).
fn open_ro(dir: &std::path::Path) -> Result<Queue, CliError> {
    let o = steadq::Options {
        mode: steadq::OpenMode::ReadOnly,
        ..Default::default()
    };
    Ok(Queue::open_with(dir, o)?)
}

pub fn cmd_wait(a: Wait) -> Result<Exit, CliError> {
    if !a.empty {
        return Err(CliError::bad_usage("wait needs a condition: --empty"));
    }
    let q = open_ro(&a.dir)?;
    if q.wait_empty(a.timeout)? {
        return Ok(Exit::Done);
    }
    let waited = a.timeout.unwrap_or_default();
    eprintln!(
        "{}: waited {}s: jobs are still ready, leased or delayed",
        a.dir.display(),
        super::fixed::secs(waited.as_nanos(), 3)
    );
    Ok(Exit::NoJob)
}

/// `list`, as text or with `--json` one object per line ([`encode::job_json`]).
pub fn cmd_list(a: List) -> Result<Exit, CliError> {
    let q = open_ro(&a.dir)?;
    let now = cmd::now(&q);
    q.list_each(a.state, !a.stream, |l| {
        let n = &l.name;
        let path = l.rel_path(q.id());
        let line = if a.json {
            encode::job_json(&now, n, l.state, &path, None)
        } else {
            format!(
                "{:<7} {} attempt {}/{} gen {} prio {} {} {path}\n",
                encode::state_name(l.state),
                n.id,
                n.attempt,
                n.max_attempts,
                n.generation,
                n.priority,
                encode::describe(&now, &n.kind),
            )
        };
        // A closed pipe (| head) is a clean exit; another error exits 2 in main.
        stdout::write(line.as_bytes())
    })?;
    Ok(Exit::Done)
}

/// `dead requeue --reason R`: every dead job with reason `R` (or job JOB, if it has it),
/// each requeued on its own; a failure is reported and the rest are tried (exit 2 if none
/// moved, 4 if some did).
pub fn requeue_by_reason(a: &DeadRequeue, r: &str) -> Result<Exit, CliError> {
    let reason = Reason::new(r).ok_or_else(|| {
        CliError::bad_usage(format!(
            "bad --reason '{r}': use 1 to 16 characters of [a-z0-9]"
        ))
    })?;
    let only = a.job.as_deref().map(cmd::parse_job_id).transpose()?;
    let q = open(&a.dir)?;
    let mut ids = Vec::new();
    q.list_each(Some(State::Dead), true, |l| {
        if matches!(l.name.kind, Kind::Dead { reason: x } if x == reason)
            && only.is_none_or(|j| j == l.name.id)
        {
            ids.push(l.name.id);
        }
        true
    })?;
    if let (Some(j), true) = (only, ids.is_empty()) {
        return Err(CliError::not_done(format!(
            "{}: no dead job {j} with reason {reason}; nothing changed",
            a.dir.display()
        )));
    }
    let (mut n, mut first) = (0u32, None);
    for id in &ids {
        match q.requeue_dead(Some(*id)) {
            Ok(_) => n += 1,
            Err(e) => {
                first.get_or_insert(CliError::from(e));
            }
        }
    }
    if n > 0 || first.is_none() {
        stdout::note_done(format!("{n} jobs WERE requeued"), "the report");
        out!("requeued {n} jobs with reason {reason}");
    }
    Ok(match first {
        None => Exit::Done,
        Some(e) => {
            eprintln!(
                "steadq: {} dead jobs with reason {reason} could not be requeued ({n} others were); first: {e}",
                ids.len() as u32 - n
            );
            if n > 0 { Exit::Indeterminate } else { e.exit() }
        }
    })
}
