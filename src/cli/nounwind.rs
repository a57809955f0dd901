//! The Pi builds' stand-in for the unwinder (feature `appliance`, which `.ci/cross` turns
//! on for the aarch64 and ARM release builds only).
//!
//! With `panic = "abort"` nothing unwinds; the one user of LLVM's libunwind left in the
//! binary is std's backtrace printer (`RUST_BACKTRACE=1` after a panic), which in a stripped
//! binary could only print addresses. Defining the two entry points it calls here keeps the
//! linker from pulling libunwind's archive members, and with them musl's `printf` family
//! that libunwind's logging uses: about 20 KB of the 600 KB limit. A panic still prints its
//! message; its backtrace is empty.
//!
//! The entry points are those of the Itanium C++ ABI's level 1 API (`unwind.h`), which
//! aarch64 and x86_64 use. 32-bit ARM unwinds by its own ABI (EHABI, other symbols), so the
//! module is not built there. Should std start calling another of them, the link fails with
//! a duplicate symbol, which `.ci/cross` shows.

use core::ffi::{c_int, c_void};

/// `_URC_END_OF_STACK` (`unwind.h`, the Itanium C++ ABI's level 1 unwinding API).
const END_OF_STACK: c_int = 5;

/// `_Unwind_Backtrace(3)`: reports the end of the stack at once, without calling `trace`.
#[no_mangle]
pub extern "C" fn _Unwind_Backtrace(
    _trace: extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    _arg: *mut c_void,
) -> c_int {
    END_OF_STACK
}

/// `_Unwind_GetIP`: never called, since [`_Unwind_Backtrace`] calls no trace function.
#[no_mangle]
pub extern "C" fn _Unwind_GetIP(_context: *mut c_void) -> usize {
    0
}

// The rest are what std's personality routine (`rust_eh_personality`) calls. Only an
// unwinder calls a personality routine, and this binary has none, so they are never reached;
// they exist so that the linker finds no reference to libunwind's members (the personality
// routine is collected as unused only after the archives were searched).

/// Never reached (see above): aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetIPInfo(_context: *mut c_void, _before: *mut c_int) -> usize {
    std::process::abort()
}

/// Never reached (see above): aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetLanguageSpecificData(_context: *mut c_void) -> *mut c_void {
    std::process::abort()
}

/// Never reached (see above): aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetRegionStart(_context: *mut c_void) -> usize {
    std::process::abort()
}

/// Never reached (see above): aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetDataRelBase(_context: *mut c_void) -> usize {
    std::process::abort()
}

/// Never reached (see above): aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetTextRelBase(_context: *mut c_void) -> usize {
    std::process::abort()
}

/// Never reached (see above): aborts.
#[no_mangle]
pub extern "C" fn _Unwind_SetGR(_context: *mut c_void, _index: c_int, _value: usize) {
    std::process::abort()
}

/// Never reached (see above): aborts.
#[no_mangle]
pub extern "C" fn _Unwind_SetIP(_context: *mut c_void, _value: usize) {
    std::process::abort()
}
