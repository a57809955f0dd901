//! Whether `steadq` started with its stdin or stdout closed (`steadq enqueue DIR 0<&-`,
//! `steadq claim DIR >&-`). Rust's runtime opens /dev/null on a closed fd 0, 1 or 2 before
//! `main` (so a file opened later cannot take its number), and then `main` cannot tell a
//! closed stdin from an empty one, nor a closed stdout from /dev/null: a function in
//! `.init_array`, which runs before the runtime's set-up, looks first.
//!
//! It also notes an fd 1 open for reading only (`steadq claim 1</dev/null`): every write to
//! it fails with EBADF, which Rust's `Stdout` reports as success (it treats EBADF as a closed
//! stdout, see `std::io::stdio::handle_ebadf`), so a lease handle written there is lost
//! without an error too.

use std::sync::atomic::{AtomicBool, Ordering};

static STDIN_CLOSED: AtomicBool = AtomicBool::new(false);
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDOUT_READ_ONLY: AtomicBool = AtomicBool::new(false);

extern "C" fn look() {
    // SAFETY: fcntl(F_GETFD) and fcntl(F_GETFL) on fds 0 and 1 only read their descriptor
    // and file status flags; they fail with EBADF when the fd is not open, and touch no
    // memory.
    let (r0, r1, fl1) = unsafe {
        (
            libc::fcntl(0, libc::F_GETFD),
            libc::fcntl(1, libc::F_GETFD),
            libc::fcntl(1, libc::F_GETFL),
        )
    };
    STDIN_CLOSED.store(r0 == -1, Ordering::Relaxed);
    STDOUT_CLOSED.store(r1 == -1, Ordering::Relaxed);
    STDOUT_READ_ONLY.store(
        fl1 != -1 && fl1 & libc::O_ACCMODE == libc::O_RDONLY,
        Ordering::Relaxed,
    );
}

#[used]
#[link_section = ".init_array"]
static LOOK: extern "C" fn() = look;

/// Whether fd 0 was closed when the process started.
pub fn stdin_closed() -> bool {
    STDIN_CLOSED.load(Ordering::Relaxed)
}

/// Whether fd 1 was closed when the process started: output that must reach the caller (a
/// lease handle) would be lost without an error.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Whether fd 1 was open for reading only when the process started (`1</dev/null`): no
/// write to it can succeed, and Rust's `Stdout` would report each one as done.
pub fn stdout_read_only() -> bool {
    STDOUT_READ_ONLY.load(Ordering::Relaxed)
}

/// Fd 0 for reading a payload, read directly: `std::io::stdin()` reports `EBADF` (a stdin
/// open for writing only, `0>>file`) as the end of input, and the command would enqueue an
/// empty payload and say done. Read this way the error reaches the caller.
///
/// # Errors
/// `dup(2)`'s errno when fd 0 cannot be duplicated (`EMFILE`).
pub fn stdin_file() -> std::io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    Ok(std::fs::File::from(
        std::io::stdin().as_fd().try_clone_to_owned()?,
    ))
}
