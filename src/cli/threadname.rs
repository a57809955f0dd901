//! The Pi builds' own `pthread_setname_np(3)` (feature `appliance`, aarch64 only, like
//! `nounwind.rs`).
//!
//! std calls it from every thread it starts that has a name. musl's version builds the path
//! `/proc/self/task/<tid>/comm` with `snprintf`, and that one call links musl's whole `printf`
//! (about 7.6 KB of the 600 KB limit). Defining the symbol here keeps the linker from pulling
//! that archive member. A thread names itself with `prctl(PR_SET_NAME)` (`prctl(2)`), which is
//! how std calls it (from the new thread, for itself); another thread's name is not set
//! (`ENOTSUP`), which std ignores.

use core::ffi::{c_char, c_int};

/// `pthread_setname_np(3)` for the calling thread only: `prctl(PR_SET_NAME, name)`.
#[no_mangle]
pub extern "C" fn pthread_setname_np(thread: libc::pthread_t, name: *const c_char) -> c_int {
    // SAFETY: pthread_self has no preconditions.
    if thread != unsafe { libc::pthread_self() } {
        return libc::ENOTSUP;
    }
    // SAFETY: `name` is the NUL-terminated name std passes; the kernel copies at most 16
    // bytes of it (TASK_COMM_LEN) and reads nothing else.
    match unsafe { libc::prctl(libc::PR_SET_NAME, name as libc::c_ulong, 0, 0, 0) } {
        0 => 0,
        _ => std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL),
    }
}
