//! `steadq work`: run a command once per job.

use super::args::Work;
use super::children::{is_stopped, reap_orphans, spawn_job, JobChild};
use super::exit::Exit;
use super::fixed;
use super::CliError;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use steadq::{backoff, Error, Lease, Nacked, PayloadReader, Reason, SettleError};

/// The command's "retry later" exit code (EX_TEMPFAIL, sysexits.h).
pub const EX_TEMPFAIL: i32 = 75;
/// The command's "bad input, never retry" exit code (EX_DATAERR, sysexits.h).
pub const EX_DATAERR: i32 = 65;

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores.
    SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// Whether a stop signal ([`STOP_SIGNALS`]) arrived (after [`install_handlers`]).
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// The signals that ask a worker to stop gracefully: SIGTERM (systemd, `kill`), SIGINT
/// (Ctrl-C), SIGHUP (its terminal closed) and SIGQUIT (Ctrl-\). Left at their default
/// action, SIGHUP and SIGQUIT ended `work` at once: no grace, no release, and the command's
/// children (in their own process group) ran on while the job ran again at its lease's end.
pub const STOP_SIGNALS: [libc::c_int; 4] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// Each of [`STOP_SIGNALS`] sets a flag ([`stop_requested`]) instead of ending the process.
/// Installed with `SA_RESTART` (what `signal(2)` gives on glibc and musl): a call the signal
/// lands in is restarted, and the worker's loop reads the flag.
pub fn install_handlers() {
    set_stop_handlers(libc::SA_RESTART);
}

/// Install [`on_signal`] for each of [`STOP_SIGNALS`] with `sigaction(2)` flags `flags`. A
/// signal this process was started with ignored (`SIG_IGN`: SIGHUP under nohup(1), SIGINT
/// and SIGQUIT for a non-interactive shell's background job) stays ignored, as POSIX tools
/// leave it; except SIGTERM, always handled, so that a service manager's or `kill`'s stop
/// works whatever the worker inherited.
fn set_stop_handlers(flags: libc::c_int) {
    for sig in STOP_SIGNALS {
        if sig != libc::SIGTERM && ignored(sig) {
            continue;
        }
        // SAFETY: `sa` is fully initialised (zeroed, then its handler, an empty mask and
        // `flags`); `on_signal` only stores to atomics, which is async-signal-safe;
        // sigaction reads `sa` and writes nothing through the null old-action pointer.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = flags;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether signal `sig`'s disposition is `SIG_IGN` now (`sigaction(2)` with a null new
/// action only reads it). False when it cannot be read.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: a null new action makes sigaction(2) change nothing; it only writes the
    // current action into `old`, a zeroed sigaction that lives across the call.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// For a `claim` that holds a job it has not handed over yet (its payload still being
/// written to `--payload-out`): each of [`STOP_SIGNALS`] sets the flag instead of ending the
/// process, and, installed without `SA_RESTART` (sigaction(2)), interrupts a write blocked
/// on a slow pipe or disk (EINTR), so that the claim gives the job back with its attempt
/// instead of dying with it leased and an attempt used. `claim` installs them before it
/// claims (a signal during the claim is seen once it returns: the job is given back); a
/// `claim --wait` watches the flag and ends its wait within 250 ms.
pub fn install_interrupting_handlers() {
    set_stop_handlers(0);
}

/// The stop signal that arrived, if any (0: none).
pub fn stop_signal() -> libc::c_int {
    SIGNAL.load(Ordering::SeqCst)
}

/// Refuse a command that cannot be started before any job is claimed: a typo would otherwise
/// use up an attempt of each job it touches.
pub(super) fn check_command(cmd: &std::ffi::OsStr) -> Result<(), CliError> {
    if find_command(cmd).is_some() {
        Ok(())
    } else {
        Err(CliError::not_done(format!(
            "cannot run {cmd:?}: not found or not executable (no job was claimed)"
        )))
    }
}

/// The file exec(2) would run for `cmd`: itself when it has a `/`, else the first regular
/// file with an execute bit in a `PATH` directory (execvp(3)'s search).
fn find_command(cmd: &std::ffi::OsStr) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.as_bytes().contains(&b'/') {
        let p = std::path::PathBuf::from(cmd);
        return runnable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| runnable(p))
}

/// Why a command that [`check_command`] found could still not be started: exec(2) says
/// ENOENT for a script whose `#!` interpreter is missing (execve(2), "ENOENT ... the
/// interpreter of the script was not found"), most often a `#!` line ending in a carriage
/// return (a script saved with CRLF line endings). Empty when the file says nothing more.
pub(super) fn exec_hint(cmd: &std::ffi::OsStr, e: &std::io::Error) -> String {
    use std::io::Read;
    if e.kind() != std::io::ErrorKind::NotFound {
        return String::new();
    }
    let mut head = [0u8; 256];
    let n = find_command(cmd)
        .and_then(|p| std::fs::File::open(p).ok())
        .and_then(|mut f| f.read(&mut head).ok())
        .unwrap_or(0);
    let head = &head[..n];
    if !head.starts_with(b"#!") {
        return String::new();
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let shown = String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).into_owned();
    if line.ends_with(b"\r") {
        format!(" (its line {shown:?} ends in a carriage return: the script has CRLF line endings)")
    } else {
        format!(" (the interpreter its line {shown:?} names is missing)")
    }
}

enum JobEnd {
    Continue,
    /// The job was left unsettled (its settle, or the release after a failure, was not done,
    /// is indeterminate, or the lease was lost): the error says so with its exit code. A
    /// long-running worker logs it and goes on; `--once` exits with it.
    Unsettled(CliError),
    Fatal(CliError),
}

pub fn cmd_work(a: Work) -> Result<Exit, CliError> {
    check_work_args(&a)?;
    check_command(&super::rawargs::os(&a.command[0]))?;
    let q = super::open_with(
        &a.dir,
        steadq::Options {
            max_payload: a.max_payload,
            aging: a.aging,
            ..Default::default()
        },
    )?;
    install_handlers();
    // Orphaned descendants of its commands become its children, reaped by the queue
    // watcher (and after each job): as a container's PID 1 they would pile up as zombies.
    super::children::become_subreaper();
    if a.once {
        // Room for its one job's descriptors before it claims: at the limit, `--once` would
        // claim, fail to start the command, and give the job back.
        fit_concurrency(&a, 1)?;
        return work_once(&a, &q);
    }
    let fatal: std::sync::Mutex<Option<CliError>> = std::sync::Mutex::new(None);
    let busy = AtomicU32::new(0);
    if let Some(e) = q.recover().first_error {
        log::warn!("recover: {e}");
    }
    let concurrency = fit_concurrency(&a, a.concurrency)?;
    // Worker threads that started: a thread that cannot be started (RLIMIT_NPROC, memory)
    // is logged and the workers that started run on; a panic of the scope (exit 134) would
    // leave a job an earlier thread claimed leased, its attempt used.
    let started = AtomicU32::new(0);
    std::thread::scope(|s| {
        let watcher = std::thread::Builder::new()
            .spawn_scoped(s, || watch_queue(&a, &q, &started, &busy, &fatal));
        if let Err(e) = watcher {
            *fatal.lock().unwrap() = Some(CliError::not_done(format!(
                "cannot start a thread ({e}); nothing was claimed"
            )));
            return;
        }
        for _ in 0..concurrency {
            let worker =
                std::thread::Builder::new().spawn_scoped(s, || worker_loop(&a, &q, &busy, &fatal));
            match worker {
                Ok(_) => {
                    started.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => {
                    let n = started.load(Ordering::SeqCst);
                    if n == 0 {
                        *fatal.lock().unwrap() = Some(CliError::not_done(format!(
                            "cannot start a worker thread ({e}); nothing was claimed"
                        )));
                        STOP.store(true, Ordering::SeqCst);
                    } else {
                        eprintln!(
                            "steadq work: could start {n} of {concurrency} worker threads ({e}); running {n} job(s) at once"
                        );
                    }
                    break;
                }
            }
        }
    });
    if let Some(e) = fatal.into_inner().unwrap() {
        return Err(e);
    }
    let sig = SIGNAL.load(Ordering::SeqCst);
    if sig != 0 && !a.quiet {
        eprintln!("steadq work: stopped by signal {sig}");
    }
    Ok(Exit::Done)
}

/// `work`'s arguments that argh does not check: a command after `--` that names a program,
/// and `--backoff` not longer than `--max-backoff`.
fn check_work_args(a: &Work) -> Result<(), CliError> {
    if a.command.first().is_none_or(|c| c.is_empty()) {
        return Err(CliError::bad_usage(
            "work needs a command after --, e.g. steadq work DIR -- ./handle-job.sh (an empty one names no program)",
        ));
    }
    // --concurrency (1..=1024) and --lease (1s..=7d) were checked by argh (exit 1).
    if a.backoff > a.max_backoff {
        // The first retry would already wait past the cap: one of the two is a slip.
        return Err(CliError::bad_usage(format!(
            "--backoff ({:?}) is longer than --max-backoff ({:?}); raise --max-backoff or lower --backoff",
            a.backoff, a.max_backoff
        )));
    }
    Ok(())
}

/// One worker thread of `work`: claim and run jobs until [`STOP`]; a fatal job end is put in
/// `fatal` and stops every worker; `busy` counts the jobs running.
fn worker_loop(
    a: &Work,
    q: &steadq::Queue,
    busy: &AtomicU32,
    fatal: &std::sync::Mutex<Option<CliError>>,
) {
    // The job the last ack claimed under its barrier (`Lease::ack_and_claim`):
    // the next one to run, without a claim (and its barrier) of its own.
    let mut next: Option<Lease> = None;
    while !STOP.load(Ordering::SeqCst) {
        let claimed = match next.take() {
            Some(l) => Ok(Some(l)),
            None => q.claim_with(&steadq::ClaimOptions {
                lease: Some(a.lease),
                wait: Some(Duration::from_secs(3600)),
                stop: Some(&STOP),
            }),
        };
        match claimed {
            Ok(None) => {}
            Ok(Some(l)) => {
                busy.fetch_add(1, Ordering::SeqCst);
                let end = run_job(a, l, Some(&mut next));
                busy.fetch_sub(1, Ordering::SeqCst);
                match end {
                    JobEnd::Continue => {}
                    JobEnd::Unsettled(e) => eprintln!("steadq work: {e}"),
                    JobEnd::Fatal(e) => {
                        *fatal.lock().unwrap() = Some(e);
                        STOP.store(true, Ordering::SeqCst);
                    }
                }
            }
            Err(e) => {
                log::warn!("claim: {e}");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    // Stopped with a job claimed and never started: back to ready with its
    // attempt (left to its lease's end if that fails).
    if let Some(Err(e)) = next.map(Lease::release_undelivered) {
        log::warn!("giving back a job not started: {e}");
    }
}

/// `work --once`: claim at most one job and run it. Exit 0 when it was settled (or the claim
/// only dead-lettered jobs), 3 when no job was ready; a job left unsettled exits by its
/// error's outcome (2, 4 or 6).
fn work_once(a: &Work, q: &steadq::Queue) -> Result<Exit, CliError> {
    let before = q.claims_dead_lettered();
    match q.claim_with(&steadq::ClaimOptions {
        lease: Some(a.lease),
        ..Default::default()
    })? {
        // The claim handled jobs by dead-lettering them (logged with their reasons).
        None if q.claims_dead_lettered() > before => {
            let n = q.claims_dead_lettered() - before;
            eprintln!(
                "{n} job(s) dead-lettered (see above); no other job ready in {}",
                a.dir.display()
            );
            Ok(Exit::Done)
        }
        None => {
            let why = super::cmd::held_back(q);
            eprintln!("no job ready in {}{why}", a.dir.display());
            Ok(Exit::NoJob)
        }
        Some(l) => match run_job(a, l, None) {
            JobEnd::Continue => Ok(Exit::Done),
            JobEnd::Unsettled(e) | JobEnd::Fatal(e) => Err(e),
        },
    }
}

/// File descriptors one running job may hold at once in this process: its stdin pipe (both
/// ends while the child starts), std's exec-status pipe (both ends), and the job file when
/// its payload is streamed from it.
const FDS_PER_JOB: u64 = 5;

/// File descriptors kept aside beyond those open when [`fit_concurrency`] runs (after the
/// first recovery pass, which opened every ready slot that exists): a listing's directory,
/// the limits file, a level's slots made later, log files.
const FDS_SPARE: u64 = 8;

/// How many jobs `work` runs at once: `jobs` (`--concurrency`, 1 for `--once`), unless this process may not open
/// the descriptors that needs (`RLIMIT_NOFILE`, getrlimit(2)): those open now, [`FDS_SPARE`]
/// and [`FDS_PER_JOB`] per job. The soft limit is first raised
/// to the hard one (as far as needed); what still does not fit lowers the count, with a
/// warning. At `ulimit -n 32` and `--concurrency 1024` every spawn past the limit failed
/// with EMFILE and the worker stopped (exit 2), its jobs leased until their leases ran out.
///
/// # Errors
/// Not even one job fits: exit 2, nothing claimed.
fn fit_concurrency(a: &Work, jobs: u32) -> Result<u32, CliError> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    // Minus one: the descriptor read_dir itself holds while counting.
    let open = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64 - 1);
    let need = open + FDS_SPARE + FDS_PER_JOB * u64::from(jobs);
    let mut lim = getrlimit(Resource::Nofile);
    let soft = lim.current.unwrap_or(u64::MAX);
    if soft >= need {
        return Ok(jobs);
    }
    let hard = lim.maximum.unwrap_or(u64::MAX);
    if hard > soft {
        // The commands run with the limit this process was given (spawn_command).
        CHILD_NOFILE.store(soft, Ordering::SeqCst);
        lim.current = Some(need.min(hard));
        if let Err(e) = setrlimit(Resource::Nofile, lim) {
            log::warn!(
                "could not raise the open-file limit from {soft} to {}: {e}",
                need.min(hard)
            );
        }
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    if now >= need {
        return Ok(jobs);
    }
    let room = now.saturating_sub(open + FDS_SPARE) / FDS_PER_JOB;
    if room == 0 {
        return Err(CliError::new(
            Exit::NotDone,
            format!(
                "{}: this process may open {now} files (ulimit -n); it has {open} open and needs {FDS_SPARE} more to work the queue and {FDS_PER_JOB} per job: no room to run a job; raise the limit (nothing was claimed)",
                a.dir.display(),
            ),
        ));
    }
    let fit = room.min(u64::from(jobs)) as u32;
    eprintln!(
        "steadq work: --concurrency {jobs} needs about {need} open files but this process may open {now} (ulimit -n); running {fit} job(s) at once"
    );
    Ok(fit)
}

/// The soft RLIMIT_NOFILE `work` was started with, when [`fit_concurrency`] raised it
/// (`u64::MAX`: not raised): its commands get it back, so raising it for the worker's own
/// descriptors does not change the environment of the jobs it runs.
static CHILD_NOFILE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

thread_local! {
    /// Spawns in a row that failed for want of resources ([`spawn_short_of_resources`]) in
    /// this worker slot (each slot is a thread). Per slot, so that the slots of
    /// `--concurrency 3` do not double each other's waits (one counter for the process would
    /// give 1, 2 and 4 s within a millisecond, then 8, 16, 32, and once the shortage ends two
    /// slots would sleep on for 16 and 32 s).
    static SHORT_STREAK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// How long a worker slot waits after giving back a job whose command could not start for
/// want of resources: 1 s, doubling with every such spawn in a row in that slot, up to 64 s.
/// A lasting shortage then costs a claim and a give-back a minute, not one a second (each a
/// renamed job and its barriers, on StowQ a handful of billed requests). [`spawn_started`]
/// ends the slot's streak.
pub(super) fn short_pause() -> Duration {
    let n = SHORT_STREAK.with(|c| {
        let n = c.get();
        c.set(n.saturating_add(1));
        n.min(6)
    });
    Duration::from_secs(1 << n)
}

/// A command started in this slot: its next shortage waits 1 s again.
pub(super) fn spawn_started() {
    SHORT_STREAK.with(|c| c.set(0));
}

/// Sleep `d`, or less when a stop signal arrives (checked every 100 ms).
fn pause_unless_stopped(d: Duration) {
    let until = std::time::Instant::now() + d;
    while !STOP.load(Ordering::SeqCst) {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// Whether a failed spawn says this process or the system is out of something for now
/// (descriptors, memory, processes: `EMFILE`, `ENFILE`, `ENOMEM`, `EAGAIN`, fork(2),
/// pipe(2)) rather than that the command cannot run.
pub(super) fn spawn_short_of_resources(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EAGAIN)
    )
}

/// Once a second: stop (exit 2) when a directory of the queue was removed or replaced; while
/// every slot is busy, recover every half lease so a crashed worker's job comes back (an idle
/// slot's waiting claim does that itself, at the lease's deadline).
/// Not done (exit 2) when a directory of queue `q` at `dir` was removed or replaced while
/// `during` (an operator ran `rm -r` and `steadq init`): this handle holds the old
/// directories, which no job reaches any more ([`steadq::Queue::replaced_dir`]).
pub(super) fn queue_replaced(
    q: &steadq::Queue,
    dir: &std::path::Path,
    during: &str,
) -> Option<CliError> {
    q.replaced_dir().map(|rel| {
        CliError::not_done(format!(
            "{}: {rel} was removed or replaced while {during}; stopping (start it again to use the new layout)",
            dir.display()
        ))
    })
}

/// Every 250 ms, reap this subreaper's orphaned descendants ([`reap_orphans`]); once a
/// second, check the queue (see above).
fn watch_queue(
    a: &Work,
    q: &steadq::Queue,
    started: &AtomicU32,
    busy: &AtomicU32,
    fatal: &std::sync::Mutex<Option<CliError>>,
) {
    let every = (a.lease / 2).max(Duration::from_secs(1));
    let (mut last, mut last_recover) = (Instant::now(), Instant::now());
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(250));
        reap_orphans();
        if last.elapsed() < Duration::from_secs(1) {
            continue;
        }
        last = Instant::now();
        if let Some(e) = queue_replaced(q, &a.dir, "this worker ran") {
            *fatal.lock().unwrap() = Some(e);
            STOP.store(true, Ordering::SeqCst);
            break;
        }
        let all_busy = busy.load(Ordering::SeqCst) >= started.load(Ordering::SeqCst);
        if all_busy && last_recover.elapsed() >= every {
            last_recover = Instant::now();
            if let Some(e) = q.recover().first_error {
                log::warn!("recover: {e}");
            }
        }
    }
}

/// Bytes the feed reads from the payload at a time: a worker's memory for a job's payload.
const FEED_CHUNK: usize = 64 * 1024;

/// The payload on its way to the command's stdin, streamed from the lease's reader in chunks
/// of [`FEED_CHUNK`] (never the whole payload in memory): written from the watch loop through
/// a non-blocking pipe, so a command that stops reading (or leaves a background child holding
/// the pipe) never blocks the worker. The reader checks the payload's digest as it goes.
struct Feed {
    pipe: Option<ChildStdin>,
    /// `None` once the reader reached its verified end or failed.
    src: Option<PayloadReader>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The reader's error: the payload cannot be trusted (InvalidData: the file changed).
    failed: Option<std::io::Error>,
}

impl Feed {
    fn new(pipe: Option<ChildStdin>, src: PayloadReader, len: u64) -> Feed {
        let pipe = pipe.filter(|p| {
            let r = rustix::fs::fcntl_getfl(p)
                .and_then(|fl| rustix::fs::fcntl_setfl(p, fl | rustix::fs::OFlags::NONBLOCK));
            if let Err(e) = &r {
                log::warn!("cannot make the command's stdin non-blocking ({e}); closing it");
            }
            r.is_ok()
        });
        let size = usize::try_from(len).map_or(FEED_CHUNK, |l| l.clamp(1, FEED_CHUNK));
        let mut f = Feed {
            pipe,
            src: Some(src),
            buf: vec![0; size],
            start: 0,
            end: 0,
            failed: None,
        };
        if len == 0 {
            f.refill();
            f.close();
        }
        f
    }

    /// Read the next chunk into the empty buffer. Returns false at the end or on a failure
    /// (recorded in `failed`).
    fn refill(&mut self) -> bool {
        let Some(r) = self.src.as_mut() else {
            return false;
        };
        loop {
            match std::io::Read::read(r, &mut self.buf) {
                Ok(0) => {}
                Ok(n) => {
                    (self.start, self.end) = (0, n);
                    return true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => self.failed = Some(e),
            }
            self.src = None;
            return false;
        }
    }

    /// Write what the pipe takes now, reading the payload as it goes. Returns whether any
    /// byte went in. The pipe is closed once the whole payload is written and verified (the
    /// command sees end of file), when reading it failed, or when the command closed its end
    /// (EPIPE: it does not read stdin).
    fn pump(&mut self) -> bool {
        let mut progress = false;
        while self.pipe.is_some() {
            if self.start == self.end && !self.refill() {
                self.close();
                break;
            }
            let Some(p) = self.pipe.as_mut() else { break };
            match p.write(&self.buf[self.start..self.end]) {
                Ok(0) => self.close(),
                Ok(n) => {
                    progress = true;
                    self.start += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        log::warn!("writing the payload to the command's stdin: {e}");
                    }
                    self.close();
                }
            }
        }
        progress
    }

    /// Whether reading the payload failed (the command must not be trusted with it).
    fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Close the pipe and say whether the payload was sound: with `drain`, the part the
    /// command did not take is read to its end first, so everything it was given is checked
    /// against the digest (a job is acked only then).
    fn verdict(&mut self, drain: bool) -> Result<(), std::io::Error> {
        self.close();
        while drain && self.refill() {}
        self.failed.take().map_or(Ok(()), Err)
    }

    fn close(&mut self) {
        self.pipe = None;
    }
}

/// How watching a running command ended.
enum Watch {
    /// The command exited (None: waiting for it failed).
    Exited(Option<ExitStatus>),
    /// It ran past --timeout and was stopped.
    TimedOut,
    /// It was stopped by a signal (state `T`) and stayed so for a whole lease, which was not
    /// renewed meanwhile: it was ended.
    Hung,
    /// The worker was stopped and --grace ran out: the command was stopped.
    Stopped,
    /// The lease was lost: the command was stopped.
    LeaseLost(steadq::RenewError),
    /// Reading the payload failed (the job file changed since the claim, or a read error):
    /// the command was stopped.
    BadPayload,
}

/// The queue's path for `STEADQ_QUEUE`: absolute and tidy (no `.`, no trailing `/`;
/// symlinks not resolved), whatever was typed. With no working directory to make it
/// absolute against (it was removed: `getcwd(3)` fails with ENOENT), the kernel's name of
/// the queue directory itself, read from `/proc/self/fd` (proc(5)), with symlinks resolved;
/// as typed only when that fails too.
fn queue_path(dir: &std::path::Path) -> std::path::PathBuf {
    if let Ok(p) = std::path::absolute(dir) {
        return p.components().collect();
    }
    std::fs::File::open(dir)
        .and_then(|f| {
            use std::os::fd::AsRawFd;
            std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        })
        .ok()
        .filter(|p| p.is_absolute() && !p.to_string_lossy().ends_with(" (deleted)"))
        .unwrap_or_else(|| dir.to_path_buf())
}

/// Start the job's command in a session of its own (setsid(2)): it has no controlling
/// terminal, so one that opens `/dev/tty` gets ENXIO instead of being stopped by SIGTTIN
/// while the worker renews its lease for ever, and a terminal's Ctrl-C or hang-up reaches
/// steadq, which decides about the job. Being its session's (and process group's) leader,
/// its process group is the command's own: [`stop_child`] signals it whole.
fn spawn_command(a: &Work, lease: &Lease) -> std::io::Result<JobChild> {
    let parent = rustix::process::getpid();
    // Arguments that were not UTF-8 get their original bytes back.
    let mut cmd = Command::new(super::rawargs::os(&a.command[0]));
    cmd.args(a.command[1..].iter().map(|c| super::rawargs::os(c)))
        // Absolute and tidy (no `.`, no trailing `/`; symlinks not resolved), whatever was
        // typed: a command that changes directory and then calls `steadq enqueue
        // "$STEADQ_QUEUE"` found no queue at a relative path.
        .env("STEADQ_QUEUE", queue_path(&a.dir))
        .env("STEADQ_JOB_ID", lease.id().to_string())
        .env("STEADQ_ATTEMPT", lease.attempt().to_string())
        .env("STEADQ_MAX_ATTEMPTS", lease.max_attempts().to_string())
        .stdin(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec and only makes raw system
    // calls through rustix (setsid(2), prctl(2), getppid(2), prlimit(2) for
    // getrlimit/setrlimit) and libc's _exit(2), all async-signal-safe, and reads an atomic;
    // it allocates nothing and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            // A new session, without the worker's controlling terminal (a fresh child is no
            // process group leader, so setsid cannot fail with EPERM).
            rustix::process::setsid()?;
            // If this worker dies (SIGKILL, OOM), its job's lease will expire and the job will
            // run elsewhere: the orphaned command must not go on running beside it.
            use rustix::process::{getppid, set_parent_process_death_signal, Signal};
            set_parent_process_death_signal(Some(Signal::KILL))?;
            let soft = CHILD_NOFILE.load(Ordering::SeqCst);
            if soft != u64::MAX {
                use rustix::process::{getrlimit, setrlimit, Resource};
                let mut lim = getrlimit(Resource::Nofile);
                lim.current = Some(soft);
                setrlimit(Resource::Nofile, lim)?;
            }
            if getppid() != Some(parent) {
                // The worker (our parent) is gone before the command started: exit at once.
                // Not an error returned to std: it would report it on a pipe to the dead
                // parent, fail, and abort with "fatal runtime error" on the shared stderr.
                libc::_exit(EX_TEMPFAIL);
            }
            Ok(())
        });
    }
    spawn_job(&mut cmd)
}

/// Feed, renew and wait until the command exits, runs out of time, is stopped or loses its
/// lease. The stdin pipe is dropped as soon as the command exits.
fn watch(a: &Work, lease: &mut Lease, child: &mut Child, feed: &mut Feed) -> Watch {
    let started = Instant::now();
    let mut last_renew = Instant::now();
    let mut stop_deadline: Option<Instant> = None;
    let mut nap = Duration::from_micros(200);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Watch::Exited(Some(st)),
            Ok(None) => {}
            Err(e) => {
                log::warn!("waiting for job {}: {e}", lease.id());
                return Watch::Exited(None);
            }
        }
        if feed.pump() {
            nap = Duration::from_micros(200); // it reads: come back soon with more
        }
        if feed.failed() {
            // Its input cannot be trusted: stop it before it acts on more of it.
            stop_child(child);
            return Watch::BadPayload;
        }
        if a.timeout.is_some_and(|t| started.elapsed() >= t) {
            let _ = lease.renew(a.lease); // stopping takes up to 2 s
            feed.close();
            stop_child(child);
            return Watch::TimedOut;
        }
        if STOP.load(Ordering::SeqCst) {
            let d = *stop_deadline.get_or_insert_with(|| Instant::now() + a.grace);
            if Instant::now() >= d {
                feed.close();
                stop_child(child);
                return Watch::Stopped;
            }
        }
        // A command stopped by a signal makes no progress: its lease is not renewed while it
        // is stopped, and once a whole lease went by unrenewed it is ended as hung.
        let renew_due = last_renew.elapsed() >= a.lease / 3;
        if renew_due && is_stopped(child.id()) {
            if last_renew.elapsed() >= a.lease {
                feed.close();
                stop_child(child);
                return Watch::Hung;
            }
        } else if renew_due {
            match lease.renew(a.lease) {
                Ok(()) => last_renew = Instant::now(),
                Err(e) if e.is_lease_lost() => {
                    feed.close();
                    stop_child(child);
                    return Watch::LeaseLost(e);
                }
                Err(e) => log::warn!("job {}: renew failed: {e}", lease.id()),
            }
        }
        // Short jobs are noticed within a fraction of a millisecond, long ones cost little.
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Run one job's command and settle the job by its exit status. With `next`, a successful
/// command's ack also claims the worker's next job under the same barrier
/// (`Lease::ack_and_claim`) and leaves it there.
fn run_job(a: &Work, mut lease: Lease, next: Option<&mut Option<Lease>>) -> JobEnd {
    let started = Instant::now();
    let id = lease.id();
    let reader = match lease.reader() {
        Ok(r) => r,
        Err(e) => {
            // Nothing ran: give the job back (a lost lease is someone else's now).
            let msg = format!("job {id}: cannot read its payload ({e})");
            return match lease.release() {
                Ok(()) => {
                    eprintln!("{msg}; released to ready");
                    JobEnd::Continue
                }
                Err(r) if e.is_lease_lost() || r.is_lease_lost() => {
                    JobEnd::Unsettled(CliError::new(Exit::LeaseLost, format!("{msg}; lease lost")))
                }
                Err(r) => unsettled(r.into(), &format!("{msg}; releasing it failed too")),
            };
        }
    };
    let once = next.is_none();
    let mut child = match spawn_command(a, &lease) {
        Ok(c) => {
            spawn_started();
            c
        }
        Err(e) => return spawn_failed(a, lease, once, &e),
    };
    let mut feed = Feed::new(child.child.stdin.take(), reader, lease.payload_len());
    let watched = watch(a, &mut lease, &mut child.child, &mut feed);
    // Its background children that have exited since, orphaned to this subreaper.
    reap_orphans();
    let (status, what) = match watched {
        Watch::Exited(st) => {
            // Acking needs the whole payload checked, also the part the command left unread.
            let drain = st.and_then(|s| s.code()) == Some(0);
            if let Err(e) = feed.verdict(drain) {
                return settle_unread(a, lease, &e, started);
            }
            (st, None)
        }
        Watch::BadPayload => {
            return match feed.verdict(false) {
                Err(e) => settle_unread(a, lease, &e, started),
                Ok(()) => JobEnd::Continue,
            };
        }
        Watch::TimedOut => {
            let t = a.timeout.unwrap_or_default();
            (
                None,
                Some(format!("timed out after {t:?} (--timeout), stopped")),
            )
        }
        Watch::Hung => (
            None,
            Some(format!(
                "stopped by a signal (SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU) and not renewed for a whole lease ({:?}): hung, ended",
                a.lease
            )),
        ),
        Watch::Stopped => {
            let msg = format!("job {id}: stopped after the grace period");
            return match lease.release() {
                Ok(()) => {
                    eprintln!("{msg}; released to ready");
                    JobEnd::Continue
                }
                Err(e) => unsettled(e.into(), &format!("{msg}; release failed")),
            };
        }
        Watch::LeaseLost(e) => {
            let msg = format!("job {id}: lease lost while running ({e}); command stopped");
            return JobEnd::Unsettled(CliError::new(Exit::LeaseLost, msg));
        }
    };
    drop(feed);
    settle(a, lease, status, what, started, next)
}

/// Job `lease`'s command could not be started (`e`): the job goes back to ready with its
/// attempt. Short of resources for the moment (`once`: not done), the slot pauses and goes
/// on; any other failure stops the worker.
fn spawn_failed(a: &Work, lease: Lease, once: bool, e: &std::io::Error) -> JobEnd {
    let id = lease.id();
    match e {
        e if spawn_short_of_resources(e) => {
            // This process or the system is short of descriptors, memory or processes for
            // the moment: nothing about the job or the command. It goes back to ready (its
            // attempt given back) at once, and this slot waits (`short_pause`: 1 s, doubling
            // while the shortage lasts); other slots go on, and neither the worker nor the
            // job is held for the length of the shortage. `work --once` is not done (exit
            // 2), never exit 0 with the job ready.
            let msg = format!("job {id}: cannot start {:?} now: {e}", a.command[0]);
            match lease.release_undelivered() {
                Ok(()) if once => JobEnd::Unsettled(CliError::not_done(format!(
                    "{msg}; given back to ready with its attempt; not done"
                ))),
                Ok(()) => {
                    let wait = short_pause();
                    eprintln!(
                        "steadq work: {msg}; given back to ready with its attempt; trying again in {} s",
                        wait.as_secs()
                    );
                    pause_unless_stopped(wait);
                    JobEnd::Continue
                }
                Err(r) => unsettled(r.into(), &format!("{msg}; giving it back failed")),
            }
        }
        e => {
            // A command that cannot start would burn every job's attempts: stop instead. It
            // did not run, so the job goes back with its attempt given back: a timer retrying
            // `work --once` against a script whose interpreter is missing dead-lettered the
            // job as exhausted without ever running it.
            let hint = exec_hint(&super::rawargs::os(&a.command[0]), e);
            let msg = format!("cannot run {:?}: {e}{hint}", a.command[0]);
            match lease.release_undelivered() {
                Ok(()) => JobEnd::Fatal(CliError::not_done(format!(
                    "{msg}; job {id} given back to ready with its attempt; not done"
                ))),
                Err(r) => unsettled(r.into(), &format!("{msg}; giving job {id} back failed")),
            }
        }
    }
}

/// A job left unsettled by `e` (a failed settle or release; `what` says which): the exit
/// code follows the error's outcome (2 not done: the job stays leased until its lease
/// expires; 4 indeterminate; 6 lease lost).
fn unsettled(e: Error, what: &str) -> JobEnd {
    let exit = Exit::of(&e);
    let then = match exit {
        Exit::NotDone | Exit::Full => "; not done: the job stays leased until its lease expires",
        _ => "",
    };
    JobEnd::Unsettled(CliError::new(exit, format!("{what}: {e}{then}")))
}

/// Settle a job whose payload could not be read soundly, whatever its command did: never an
/// ack. A payload that no longer matches its digest (InvalidData: the job file changed since
/// the claim) is dead-lettered with reason `corrupt`; after another read error the job is
/// retried with backoff, as after a failed command.
fn settle_unread(a: &Work, lease: Lease, e: &std::io::Error, started: Instant) -> JobEnd {
    let (id, attempt, max) = (lease.id(), lease.attempt(), lease.max_attempts());
    let ms = started.elapsed().as_millis();
    let result = if e.kind() == std::io::ErrorKind::InvalidData {
        lease
            .fail(Reason::CORRUPT)
            .map(|()| "dead-lettered (reason corrupt)".to_string())
    } else {
        let delay = backoff(attempt, a.backoff, a.max_backoff);
        lease.nack(delay).map(|n| describe_nack(n, "failed"))
    };
    match result {
        Ok(msg) => {
            eprintln!(
                "job {id} attempt {attempt}/{max}: reading its payload failed ({e}); not acked, {msg} ({ms} ms)"
            );
            JobEnd::Continue
        }
        Err(s) => unsettled(
            s.into(),
            &format!(
                "job {id} attempt {attempt}/{max}: reading its payload failed ({e}); not acked, and settling failed"
            ),
        ),
    }
}

/// Settle by the command's exit status (None: timed out, killed or lost: a failure). An ack
/// with `next` claims the next job too (see [`ack_until_settled`]).
fn settle(
    a: &Work,
    lease: Lease,
    status: Option<ExitStatus>,
    what: Option<String>,
    started: Instant,
    next: Option<&mut Option<Lease>>,
) -> JobEnd {
    let (id, attempt, max) = (lease.id(), lease.attempt(), lease.max_attempts());
    let ms = started.elapsed().as_millis();
    let code = status.and_then(|s| s.code());
    let what = what.unwrap_or_else(|| match (code, status.and_then(|s| s.signal())) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "lost".into(),
    });
    let result = match code {
        Some(0) => ack_until_settled(a, lease, next),
        // A settle that is not done leaves the job leased until its deadline (the lease is
        // detached by the conversion into a Error, not released).
        Some(EX_DATAERR) => lease
            .fail(Reason::new("dataerr").expect("valid reason"))
            .map(|_| "dead-lettered (exit 65: bad input)".to_string())
            .map_err(SettleFailed::from),
        Some(EX_TEMPFAIL) => lease
            .nack(a.retry_delay)
            .map(|n| describe_nack(n, "retry later"))
            .map_err(SettleFailed::from),
        _ => {
            let delay = backoff(attempt, a.backoff, a.max_backoff);
            lease
                .nack(delay)
                .map(|n| describe_nack(n, "failed"))
                .map_err(SettleFailed::from)
        }
    };
    let failed = format!("job {id} attempt {attempt}/{max}: {what}, but settling failed");
    match result {
        Ok(msg) => {
            if !a.quiet {
                eprintln!("job {id} attempt {attempt}/{max}: {what}, {msg} ({ms} ms)");
            }
            JobEnd::Continue
        }
        Err(SettleFailed::Error(e)) => unsettled(e, &failed),
        Err(SettleFailed::CrossDevice(lease, e)) => give_back_cross_device(*lease, &e, &failed),
    }
}

/// How settling a job failed.
enum SettleFailed {
    /// As the failure says; a lease handed back was detached (the job stays leased until
    /// its lease expires).
    Error(Error),
    /// Cleanly not done with `EXDEV`: the move crossed filesystems (a mount appeared under
    /// the queue after this worker opened it). The lease is handed back, the job still ours.
    CrossDevice(Box<Lease>, steadq::Cause),
}

impl From<Error> for SettleFailed {
    fn from(e: Error) -> SettleFailed {
        SettleFailed::Error(e)
    }
}

impl From<SettleError> for SettleFailed {
    fn from(e: SettleError) -> SettleFailed {
        match e {
            SettleError::NotDone { lease, error } if crosses_filesystems(&error) => {
                SettleFailed::CrossDevice(lease, error)
            }
            e => SettleFailed::Error(e.into()),
        }
    }
}

/// Whether `e` is a move refused with `EXDEV` (rename(2): the two directories are on
/// different mounts).
fn crosses_filesystems(e: &steadq::Cause) -> bool {
    e.errno().is_some_and(|n| n.raw_os_error() == libc::EXDEV)
}

/// A job whose settle was refused with `EXDEV` (`e`; `what` says which job and how it
/// ended): no settle can work while the queue spans filesystems, so it is not retried. The
/// job goes back to ready with its attempt given back (it is to run again once the queue is
/// whole; an operator unmounts what was mounted under it) and the worker stops: exit 2
/// naming the directory, or by the give-back's outcome when that fails too.
fn give_back_cross_device(lease: Lease, e: &steadq::Cause, what: &str) -> JobEnd {
    let id = lease.id();
    let from = e.path().and_then(|p| p.parent());
    let dirs = match (e.into_dir(), from) {
        (Some(into), Some(from)) => {
            format!(
                "{} and {} are on different filesystems",
                into.display(),
                from.display()
            )
        }
        (Some(d), None) | (None, Some(d)) => format!("{} is on another filesystem", d.display()),
        (None, None) => "a directory of the queue is on another filesystem".to_string(),
    };
    let msg = format!(
        "{what}: {e}; the queue spans filesystems: {dirs} (a mount under the queue appeared after this worker opened it), so no job can be settled there; stopping (unmount it and start the worker again)"
    );
    match lease.release_undelivered() {
        Ok(()) => JobEnd::Fatal(CliError::not_done(format!(
            "{msg}; job {id} given back to ready with its attempt; not done"
        ))),
        Err(r) => match unsettled(r.into(), &format!("{msg}; giving job {id} back failed")) {
            JobEnd::Unsettled(e) | JobEnd::Fatal(e) => JobEnd::Fatal(e),
            JobEnd::Continue => JobEnd::Continue,
        },
    }
}

/// First wait between ack attempts that were not done; it doubles up to [`ACK_RETRY_MAX`].
const ACK_RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between ack attempts.
const ACK_RETRY_MAX: Duration = Duration::from_secs(30);
/// Ack attempts of `work --once` (waits of 1, 2 and 4 s between them: about 7 s) before it
/// gives up and exits 2, the job left leased until its lease expires.
const ACK_TRIES_ONCE: u32 = 4;

/// Ack a job whose command succeeded. An ack that is cleanly not done (a full disk, an
/// immutable directory) does not let the job run again: the lease is kept and renewed, and the
/// ack retried after 1 s, doubling to 30 s, until it is done, the lease is lost, or the worker
/// was stopped --grace ago (then the lease is left to expire, as after any failed ack; a stop
/// does not give up at once, which would run the job again although its command succeeded).
/// It gives up after
/// [`ACK_TRIES_ONCE`] tries with `--once`, and once retrying has taken one --lease otherwise:
/// the job is then left leased until its lease expires (exit 2 with `--once`; a running
/// worker logs it and goes on with other jobs).
///
/// An ack refused with `EXDEV` (a mount under the queue: it would fail every time) is not
/// retried: [`SettleFailed::CrossDevice`] hands the lease back (see [`give_back_cross_device`]).
///
/// With `next` (a running worker, not stopping) each try is [`Lease::ack_and_claim`]: the
/// job it claims under the ack's barrier is left in `next` for the worker to run; a claim
/// that failed there is logged, and the worker's own waiting claim takes over.
fn ack_until_settled(
    a: &Work,
    lease: Lease,
    mut next: Option<&mut Option<Lease>>,
) -> Result<String, SettleFailed> {
    let mut wait = ACK_RETRY_FIRST;
    let mut tries = 1u32;
    let mut lease = lease;
    let (first, id) = (Instant::now(), lease.id());
    // When a stop was first seen here: retries go on until --grace after it.
    let mut stop_by: Option<Instant> = None;
    loop {
        let more = if a.once {
            tries < ACK_TRIES_ONCE
        } else {
            first.elapsed() < a.lease
        } && stop_deadline(a, &mut stop_by).is_none_or(|d| Instant::now() < d);
        let claim_next = (next.is_some() && !stop_requested()).then_some(a.lease);
        let acked = lease
            .ack_and_maybe_claim(claim_next)
            .map(|step| match step.next {
                Ok(l) => {
                    if let Some(slot) = next.as_deref_mut() {
                        *slot = l;
                    }
                }
                Err(e) => log::warn!("claim after the ack of job {id}: {e}"),
            });
        let e = match acked {
            Ok(()) if tries == 1 => return Ok("acked".to_string()),
            Ok(()) => return Ok(format!("acked (on try {tries})")),
            // A move across filesystems fails the same way every time: not retried.
            Err(SettleError::NotDone { lease: l, error }) if crosses_filesystems(&error) => {
                return Err(SettleFailed::CrossDevice(l, error));
            }
            // Cleanly not done: the ack hands the lease back; keep it and try again.
            Err(SettleError::NotDone { lease: l, error })
                if more && !matches!(error.kind(), steadq::ErrorKind::Corrupt(_)) =>
            {
                lease = *l;
                error
            }
            // Lost, indeterminate, stopping, or out of tries: a lease handed back is detached
            // (left to expire) by the conversion, never released.
            Err(e) => {
                if tries > 1 {
                    eprintln!("job {id}: ack not done after {tries} tries; giving up");
                }
                return Err(SettleFailed::Error(e.into()));
            }
        };
        eprintln!(
            "job {}: ack not done ({e}); keeping the lease, trying again in {}s",
            lease.id(),
            wait.as_secs()
        );
        wait_renewing(a, &mut lease, wait, &mut stop_by)?;
        wait = (wait * 2).min(ACK_RETRY_MAX);
        tries += 1;
    }
}

/// When a stop seen by [`ack_until_settled`] ends its retries: `--grace` after the stop was
/// first seen (kept in `stop_by`); `None` while no stop was asked for.
fn stop_deadline(a: &Work, stop_by: &mut Option<Instant>) -> Option<Instant> {
    if stop_requested() && stop_by.is_none() {
        *stop_by = Some(Instant::now() + a.grace);
    }
    *stop_by
}

/// Wait `wait` between two acks of `lease`, in steps, renewing it every third of the lease
/// and once at the end, so the job stays ours; a stop cuts the wait to its grace.
fn wait_renewing(
    a: &Work,
    lease: &mut Lease,
    wait: Duration,
    stop_by: &mut Option<Instant>,
) -> Result<(), Error> {
    let until = Instant::now() + wait;
    let mut renewed = Instant::now();
    loop {
        let end = stop_deadline(a, stop_by).map_or(until, |d| d.min(until));
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(Duration::from_millis(100).min(end - now));
        if renewed.elapsed() >= a.lease / 3 {
            lease.renew(a.lease)?;
            renewed = Instant::now();
        }
    }
    lease.renew(a.lease)?;
    Ok(())
}

fn describe_nack(n: Nacked, why: &str) -> String {
    match n {
        Nacked::Ready => format!("{why}: back to ready"),
        Nacked::Delayed(t) => {
            let wait = t
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            format!("{why}: retry in {}s", fixed::secs(wait.as_nanos(), 0))
        }
        Nacked::Dead => format!("{why}: attempts exhausted, dead-lettered"),
    }
}

/// SIGTERM (and SIGCONT) the command's process group, then SIGKILL after 2 s.
fn stop_child(child: &mut std::process::Child) {
    use rustix::process::{kill_process_group, Pid, Signal};
    let Some(pg) = Pid::from_raw(child.id() as i32) else {
        return;
    };
    let _ = kill_process_group(pg, Signal::TERM);
    // A stopped process takes its SIGTERM only once continued.
    let _ = kill_process_group(pg, Signal::CONT);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = kill_process_group(pg, Signal::KILL);
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use argh::FromArgs;
    use std::os::unix::process::ExitStatusExt;
    use steadq::sys::{Call, Errno, Fault, FaultAction, FaultPlan};

    /// A queue at a new directory with one job ready, reopened with a fault plan (disarmed)
    /// that fails the first rename after `arm()` with EXDEV, as a move into a directory on
    /// another mount does; the job claimed through it; and `work --once`'s arguments.
    fn claimed_with_exdev(tag: &str) -> (std::path::PathBuf, Lease, Work) {
        let dir = std::env::temp_dir().join(format!("steadq-xdev-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        steadq::Queue::create(&dir, steadq::Options::default())
            .unwrap()
            .enqueue(b"job")
            .unwrap();
        let plan = FaultPlan::disarmed(vec![Fault {
            call: Call::Rename,
            nth: 1,
            action: FaultAction::Fail(Errno::XDEV),
        }]);
        let o = steadq::Options {
            faults: Some(plan.clone()),
            ..Default::default()
        };
        let q = steadq::Queue::open_with(&dir, o).unwrap();
        let lease = q.claim().unwrap().expect("a job is ready");
        assert_eq!(lease.attempt(), 1);
        plan.arm();
        let d = dir.to_str().unwrap();
        let a = Work::from_args(&["work"], &[d, "--once", "--", "true"]).unwrap();
        (dir, lease, a)
    }

    /// After the give-back: the job is ready again with its attempt restored (its next claim
    /// is attempt 1 again), nothing leased.
    fn assert_given_back(dir: &std::path::Path) {
        let q = steadq::Queue::open(dir).unwrap();
        let st = q.status().unwrap();
        assert_eq!((st.ready, st.leased, st.delayed, st.acked), (1, 0, 0, 0));
        assert_eq!(q.claim().unwrap().expect("ready").attempt(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An ack refused with EXDEV (the queue spans filesystems) is not retried: the job goes
    /// back to ready with its attempt and the worker stops, exit 2, naming the directories
    /// and saying the queue spans filesystems. Retrying (about 7 s with `--once`, a whole
    /// lease for a running worker) would leave the job leased, its attempt used.
    #[test]
    fn an_ack_across_filesystems_gives_the_job_back_and_stops() {
        let (dir, lease, a) = claimed_with_exdev("ack");
        let t = Instant::now();
        let end = settle(&a, lease, Some(ExitStatus::from_raw(0)), None, t, None);
        let took = t.elapsed();
        let JobEnd::Fatal(e) = end else {
            panic!("not a stop");
        };
        let msg = e.to_string();
        assert_eq!(e.exit(), Exit::NotDone, "{msg}");
        assert!(msg.contains("spans filesystems"), "{msg}");
        assert!(msg.contains("receipts/"), "{msg}");
        assert!(
            msg.contains("given back to ready with its attempt"),
            "{msg}"
        );
        assert!(took < Duration::from_millis(900), "took {took:?}: {msg}");
        assert_given_back(&dir);
    }

    /// The same for a nack (a failed command's settle).
    #[test]
    fn a_nack_across_filesystems_gives_the_job_back_and_stops() {
        let (dir, lease, a) = claimed_with_exdev("nack");
        let t = Instant::now();
        let end = settle(&a, lease, Some(ExitStatus::from_raw(1 << 8)), None, t, None);
        let JobEnd::Fatal(e) = end else {
            panic!("not a stop");
        };
        let msg = e.to_string();
        assert_eq!(e.exit(), Exit::NotDone, "{msg}");
        assert!(
            msg.contains("spans filesystems") && msg.contains("exit 1"),
            "{msg}"
        );
        assert_given_back(&dir);
    }
}
