//! Every byte `steadq` prints on stdout goes through [`write`]: it flushes and checks, so
//! output that could not be written is never reported as success. A closed pipe (EPIPE:
//! `steadq list | head`) stays quiet, unless the command's output must reach a reader
//! ([`require_reader`]: a lease handle) or reports something done ([`note_done`]: a job id);
//! any other error (ENOSPC on a full disk, EIO) makes the
//! command exit 8 with a message on stderr that says what was done all the same when it was
//! done (it noted so with [`note_done`]), or exit 2 when it changed nothing.

use std::io::Write;
use std::sync::Mutex;

struct State {
    /// The reader went away (EPIPE): print nothing more, quietly.
    closed: bool,
    /// EPIPE is a failure like any other write error ([`require_reader`]).
    need_reader: bool,
    /// The first write error other than EPIPE.
    failed: Option<std::io::Error>,
    /// What the command did, for the message if its output is lost: e.g.
    /// ("the job WAS enqueued as ID", "its id").
    done: Option<(String, String)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    closed: false,
    need_reader: false,
    failed: None,
    done: None,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Write `bytes` to stdout and flush. Returns whether output still reaches a reader (false
/// after EPIPE or an error, which is remembered for [`failure`]).
pub fn write(bytes: &[u8]) -> bool {
    let mut st = state();
    if st.closed || st.failed.is_some() {
        return false;
    }
    // A closed fd 1 (Rust's runtime puts /dev/null there) or one open for reading only
    // (Rust's `Stdout` reports EBADF as success) loses every byte without an error. For a
    // result the caller needs (a command that noted it was done, or a lease handle) that is
    // a failed write: `enqueue >&-` exited 0 with the job's id dropped.
    if st.done.is_some() || st.need_reader {
        let why = if super::std_fds::stdout_closed() {
            Some("stdout is closed")
        } else if super::std_fds::stdout_read_only() {
            Some("stdout is open for reading only")
        } else {
            None
        };
        if let Some(why) = why {
            st.failed = Some(std::io::Error::other(why));
            return false;
        }
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => true,
        // A reader that went away is a quiet end only for output nobody depends on (`list |
        // head`): a command that noted it was done (`enqueue`, `ack`) exited 0 with the id
        // lost when its stdout was a pipe nobody read.
        Err(e)
            if e.kind() == std::io::ErrorKind::BrokenPipe
                && !st.need_reader
                && st.done.is_none() =>
        {
            st.closed = true;
            false
        }
        Err(e) => {
            st.failed = Some(e);
            false
        }
    }
}

/// From now on a reader that went away (EPIPE) is a failed write like ENOSPC, not a quiet
/// end: for output that must reach someone, a lease handle (`claim`, `renew`), where a
/// quiet exit 0 would leave the job hidden until its lease expires.
pub fn require_reader() {
    state().need_reader = true;
}

/// Write one line (a newline is appended).
pub fn line(args: std::fmt::Arguments<'_>) -> bool {
    let mut s = std::fmt::format(args);
    s.push('\n');
    write(s.as_bytes())
}

/// Record what the command has done, for the error message if its output (`what`, e.g.
/// "its id") cannot be written afterwards.
pub fn note_done(done: impl Into<String>, what: impl Into<String>) {
    state().done = Some((done.into(), what.into()));
}

/// The message for a failed stdout, if any write failed.
pub fn failure() -> Option<String> {
    let st = state();
    let e = st.failed.as_ref()?;
    Some(match &st.done {
        Some((done, what)) => format!("{done} but {what} could not be written to stdout: {e}"),
        None => format!("the output could not be written to stdout: {e}"),
    })
}

/// Whether the command recorded that it was done ([`note_done`]): a lost output then exits
/// 8, not 2 ("not done" would invite a retry that does it twice).
pub fn was_done() -> bool {
    state().done.is_some()
}

/// Take the write error (the caller reports it; `main` then does not).
pub fn take_error() -> Option<std::io::Error> {
    state().failed.take()
}
