//! The command line, split as ripgrep splits its own: argument definitions (`args`),
//! command handlers (`cmd`, plus `work`, `demo` and `bench` in their own files), output
//! encoders (`encode`) and the exit-code table (`exit`). The queue logic is all in the library.

pub mod access;
pub mod args;
#[cfg(not(feature = "appliance"))]
pub mod bench;
pub mod children;
pub mod cmd;
#[cfg(not(feature = "appliance"))]
pub mod completions;
#[cfg(not(feature = "appliance"))]
pub mod demo;
pub mod drain;
pub mod encode;
pub mod exit;
pub mod fixed;
#[cfg(all(feature = "appliance", not(target_arch = "arm")))]
pub mod nounwind;
pub mod payload_file;
pub mod progress;
pub mod rawargs;
pub mod s3;
#[cfg(not(feature = "appliance"))]
pub mod show;
pub mod std_fds;
pub mod stdout;
#[cfg(all(feature = "appliance", target_env = "musl"))]
pub mod threadname;
#[cfg(not(feature = "appliance"))]
pub mod top;
pub mod work;

use args::Cmd;
use exit::Exit;
use std::path::Path;
use steadq::{EnqueueError, Error, Queue, RenewError, SettleError};

/// An error for the command line: a message and an exit code.
pub struct CliError {
    msg: String,
    exit: Exit,
}

impl CliError {
    /// Exit code 2 (not done) with a message.
    pub fn not_done(msg: impl Into<String>) -> CliError {
        CliError::new(Exit::NotDone, msg)
    }
    /// Exit code 1 (bad usage) with a message: a check of the command line's own values
    /// (a malformed job id, options that exclude each other) that argh cannot make, before
    /// anything was read or changed.
    pub fn bad_usage(msg: impl Into<String>) -> CliError {
        CliError::new(Exit::Usage, msg)
    }
    /// An error with its exit code.
    pub fn new(exit: Exit, msg: impl Into<String>) -> CliError {
        CliError {
            msg: msg.into(),
            exit,
        }
    }
    /// The exit code.
    pub fn exit(&self) -> Exit {
        self.exit
    }
    /// Add to the message.
    pub fn add(&mut self, more: &str) {
        self.msg += more;
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> CliError {
        CliError::new(Exit::of(&e), e.to_string())
    }
}

impl From<EnqueueError> for CliError {
    fn from(e: EnqueueError) -> CliError {
        Error::from(e).into()
    }
}

impl From<RenewError> for CliError {
    fn from(e: RenewError) -> CliError {
        Error::from(e).into()
    }
}

/// A not-done settle keeps the job leased under its handle (the lease is detached, not
/// released), so the command's "not done" stays true and the handle still works.
impl From<SettleError> for CliError {
    fn from(e: SettleError) -> CliError {
        Error::from(e).into()
    }
}

/// Open an existing queue, with an error that says which path.
pub fn open(dir: &Path) -> Result<Queue, CliError> {
    open_with(dir, steadq::Options::default())
}

/// Open an existing queue with options `o`, with an error that says which path (and, for a
/// directory that does not exist, how to make one).
pub fn open_with(dir: &Path, o: steadq::Options) -> Result<Queue, CliError> {
    Queue::open_with(dir, o).map_err(|e| missing_dir_hint(dir, e))
}

/// The error of opening `dir`; when `dir` itself does not exist (`ENOENT` on the path given),
/// it says so and how to make a queue there, instead of the bare `open failed`.
fn missing_dir_hint(dir: &Path, e: Error) -> CliError {
    let enoent = e.errno().is_some_and(|n| n.raw_os_error() == 2);
    if enoent && e.path() == Some(dir) {
        return CliError::not_done(format!(
            "{}: no such directory (make a queue there with `steadq init {}`); not done, \
             nothing changed",
            dir.display(),
            dir.display()
        ));
    }
    e.into()
}

/// Open an existing queue to read only: no rename probe in `tmp/`, nothing written.
pub fn open_read_only(dir: &Path) -> Result<Queue, CliError> {
    let o = steadq::Options {
        mode: steadq::OpenMode::ReadOnly,
        ..Default::default()
    };
    open_with(dir, o)
}

/// Run one parsed command; its exit code.
pub fn run(mut cmd: Cmd) -> Result<i32, CliError> {
    rawargs::restore(&mut cmd);
    if s3::s3_queue(&cmd).is_some() {
        return s3::run(cmd);
    }
    let e = match cmd {
        Cmd::Init(a) => cmd::cmd_init(a),
        Cmd::Config(a) => cmd::cmd_config(a),
        Cmd::Limit(a) => cmd::cmd_limit(a),
        Cmd::Enqueue(a) => cmd::cmd_enqueue(a),
        Cmd::Work(a) => work::cmd_work(a),
        Cmd::Claim(a) => cmd::cmd_claim(a),
        Cmd::Renew(a) => cmd::cmd_renew(a),
        Cmd::Ack(a) => cmd::cmd_ack(a),
        Cmd::Nack(a) => cmd::cmd_nack(a),
        Cmd::Fail(a) => cmd::cmd_fail(a),
        Cmd::Status(a) => cmd::cmd_status(a),
        #[cfg(not(feature = "appliance"))]
        Cmd::Top(a) => top::cmd_top(a),
        Cmd::List(a) => drain::cmd_list(a),
        #[cfg(not(feature = "appliance"))]
        Cmd::Show(a) => show::cmd_show(a),
        Cmd::Recover(a) => cmd::cmd_recover(a),
        Cmd::Fsck(a) => cmd::cmd_fsck(a),
        Cmd::Dead(a) => cmd::cmd_dead(a),
        Cmd::Compact(a) => cmd::cmd_compact(a),
        #[cfg(not(feature = "appliance"))]
        Cmd::Demo(a) => demo::cmd_demo(a),
        Cmd::Wait(a) => drain::cmd_wait(a),
        #[cfg(not(feature = "appliance"))]
        Cmd::Bench(a) => bench::cmd_bench(a),
        #[cfg(not(feature = "appliance"))]
        Cmd::Completions(a) => completions::cmd_completions(a),
        // The demo's job command speaks the worker's protocol (sysexits codes), not ours.
        #[cfg(not(feature = "appliance"))]
        Cmd::DemoJob(a) => return demo::cmd_demo_job(a),
    }?;
    Ok(e.code())
}
