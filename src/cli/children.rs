//! The processes `steadq work` is parent of: the commands it runs (one per job, each waited
//! for by its worker thread) and, as a child subreaper (prctl(2) `PR_SET_CHILD_SUBREAPER`),
//! every descendant orphaned on the way (a command's background children, left running when
//! it exited). Those are reaped here, so a worker that is a container's PID 1, or any
//! subreaper, does not collect zombies, and a command's grandchildren stay below the worker
//! instead of escaping to init.

use std::process::{Child, Command};
use std::sync::Mutex;

/// The pids of the commands running now, each waited for by its worker thread: never reaped
/// by [`reap_orphans`]. Held while a command is spawned, so a command that exits at once is
/// in the set before the reaper can see its exit.
static JOBS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn jobs() -> std::sync::MutexGuard<'static, Vec<i32>> {
    JOBS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Make this process a child subreaper: its descendants orphaned from now on become its
/// children (reaped by [`reap_orphans`]), not init's. A failure (a kernel before 3.4, a
/// seccomp filter) is logged: the worker runs on as before.
pub fn become_subreaper() {
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        log::warn!("cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER): {e}");
    }
}

/// A running command: its pid stays in the set of job pids until this is dropped, which its
/// worker thread does after reaping it (or giving up on it: then [`reap_orphans`] reaps it).
pub struct JobChild {
    /// The command's process.
    pub child: Child,
}

impl Drop for JobChild {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        jobs().retain(|&p| p != pid);
    }
}

/// Spawn `cmd` as a job's command, its pid recorded as a running job's before any reaper
/// may look at it.
///
/// # Errors
/// As [`Command::spawn`].
pub fn spawn_job(cmd: &mut Command) -> std::io::Result<JobChild> {
    let mut running = jobs();
    let child = cmd.spawn()?;
    running.push(child.id() as i32);
    Ok(JobChild { child })
}

/// At most this many orphans are reaped in one call (the rest at the next).
const REAP_MAX: usize = 1024;

/// Reap every exited child of this process that is not a running job's command (whose
/// status its worker thread waits for): orphaned descendants this subreaper inherited.
/// Stops at the first exited job command (its thread reaps it within milliseconds; the
/// orphans behind it are reaped at the next call). Returns how many were reaped.
pub fn reap_orphans() -> usize {
    let running = jobs();
    let mut reaped = 0;
    while reaped < REAP_MAX {
        let Some(pid) = peek_exited() else { break };
        if running.contains(&pid) {
            break;
        }
        let Some(p) = rustix::process::Pid::from_raw(pid) else {
            break;
        };
        match rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG) {
            Ok(Some(_)) => reaped += 1,
            _ => break,
        }
    }
    reaped
}

/// The pid of an exited child, left waitable (`waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)`,
/// waitid(2)); `None` when no child has exited (or there is none).
fn peek_exited() -> Option<i32> {
    // SAFETY: `info` is a zeroed siginfo_t that waitid(2) fills in (or leaves zeroed with
    // WNOHANG when no child exited); WNOWAIT leaves the child waitable; `si_pid` reads the
    // field waitid sets for the CLD_* codes it returns.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_ALL, 0, &mut info, flags) != 0 {
            return None;
        }
        let pid = info.si_pid();
        (pid > 0).then_some(pid)
    }
}

/// Whether process `pid` is stopped: by a signal (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU: state
/// `T` in `/proc/<pid>/stat`, proc(5)) or by a tracer (`t`). False when it cannot be read.
pub fn is_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the command name may hold any byte, `)` too: the state follows
    // the last `)`.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    matches!(stat.get(close + 2), Some(b'T' | b't'))
}
