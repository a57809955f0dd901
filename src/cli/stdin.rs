//! Whether `steadq` started with its stdin closed (`steadq enqueue DIR 0<&-`). Rust's runtime
//! opens /dev/null on a closed fd 0 before `main`, so `main` cannot tell a closed stdin from
//! an empty one: a function in `.init_array`, which runs before the runtime's set-up, looks
//! first.

use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

extern "C" fn look() {
    // SAFETY: fcntl(F_GETFD) on fd 0 only reads its descriptor flags; it fails with EBADF
    // when fd 0 is not open, and touches no memory.
    let r = unsafe { libc::fcntl(0, libc::F_GETFD) };
    CLOSED.store(r == -1, Ordering::Relaxed);
}

#[used]
#[link_section = ".init_array"]
static LOOK: extern "C" fn() = look;

/// Whether fd 0 was closed when the process started.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}
