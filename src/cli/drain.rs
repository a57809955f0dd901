//! `steadq wait` and `list` (and `--json`): what a script reaches for around a queue it does
//! not own (waiting for it to drain, reading its jobs as data).

use super::args::List;
use super::exit::Exit;
use super::{cmd, encode, stdout, CliError};
use argh::FromArgs;
use std::path::PathBuf;
use std::time::Duration;

/// Wait until the queue is drained: no job ready, leased, delayed or waiting (dead jobs and
/// receipts do not count). Waits on inotify, not by polling; changes nothing.
#[derive(FromArgs)]
#[cfg_attr(not(feature = "appliance"), derive(argh::ArgsInfo))]
#[argh(
    subcommand,
    name = "wait",
    example = "steadq wait /var/lib/jobs --empty --timeout 10m && echo drained",
    error_code(2, "not done: the queue could not be read, or its directory was removed or replaced while waiting"),
    error_code(3, "timeout: jobs were still ready, leased, delayed or waiting")
)]
pub struct Wait {
    /// queue directory
    #[argh(positional, from_str_fn(super::args::path))]
    pub dir: PathBuf,
    /// wait until no job is ready, leased, delayed or waiting (required: the one condition so far)
    #[argh(switch)]
    pub empty: bool,
    /// give up after this long, exit 3 (default: wait for good)
    #[argh(option, from_str_fn(super::args::dur))]
    pub timeout: Option<Duration>,
}

pub fn cmd_wait(a: Wait) -> Result<Exit, CliError> {
    if !a.empty {
        return Err(CliError::bad_usage("wait needs a condition: --empty"));
    }
    let q = super::open_read_only(&a.dir)?;
    if q.wait_empty(a.timeout)? {
        return Ok(Exit::Done);
    }
    let waited = a.timeout.unwrap_or_default();
    eprintln!(
        "{}: waited {}s: jobs are still ready, leased, delayed or waiting",
        a.dir.display(),
        super::fixed::secs(waited.as_nanos(), 3)
    );
    Ok(Exit::NoJob)
}

/// `list`, as text or with `--json` one object per line ([`encode::job_json`]).
pub fn cmd_list(a: List) -> Result<Exit, CliError> {
    let q = super::open_read_only(&a.dir)?;
    let now = cmd::now(&q);
    q.list_each(a.state, !a.stream, |l| {
        let n = &l.name;
        let path = l.rel_path(q.id());
        let line = if a.json {
            encode::job_json(&now, n, l.state, &path, None)
        } else {
            // A job of a group says so after its priority; other lines are as they were.
            let group = n.group.map_or(String::new(), |g| format!(" group {g}"));
            format!(
                "{:<7} {} attempt {}/{} gen {} prio {}{group} {} {path}\n",
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
