//! Clocks and the boot id.
//!
//! Lease expiry uses the boot id plus `CLOCK_BOOTTIME` (monotonic, counts suspend, cannot be
//! set; `clock_gettime(2)`), so NTP jumps and RTC-less boards (Raspberry Pi before the Pi 5
//! restores a saved time at boot, then NTP jumps it) never expire or extend a lease. Delays in
//! a version-2 queue follow the same clock within one boot (see [`crate::delay_due`]). Wall
//! time (`CLOCK_REALTIME`) is used where another boot or a person needs it: the wall-clock
//! not-before of a delay (which picks its bucket and decides on another boot, or in a
//! version-1 queue), the `w` deadline in leased names, dead-letter buckets, ack times.

use crate::disk::sys::Sys;
use rustix::time::{clock_gettime, ClockId};
use std::sync::atomic::{AtomicI64, Ordering};

/// The clocks a queue reads. Offsets exist so tests can move time without sleeping.
#[derive(Debug)]
pub struct Clock {
    boot_id: u128,
    boot_offset_ns: AtomicI64,
    wall_offset_ns: AtomicI64,
}

fn ts_ns(id: ClockId) -> u64 {
    let t = clock_gettime(id);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}

fn add(ns: u64, off: i64) -> u64 {
    (ns as i128 + off as i128).clamp(0, u64::MAX as i128) as u64
}

/// A clock whose boot id could not be read (`e`): boot id 0, with the warning that says
/// what that costs.
fn no_boot_id(e: crate::disk::sys::Errno) -> Clock {
    log::warn!(
        "cannot read {} ({e}); leases from earlier boots will expire by time only",
        crate::disk::sys::BOOT_ID_FILE
    );
    Clock::with_boot_id(0)
}

impl Clock {
    /// Read the boot id from `/proc/sys/kernel/random/boot_id` (see `random(4)`). Without
    /// `/proc`, the boot id is 0: leases then all look like this boot's and expire by
    /// `CLOCK_BOOTTIME` only (a warning is logged).
    pub fn new(sys: &Sys) -> Clock {
        Clock::try_new(sys).unwrap_or_else(no_boot_id)
    }

    /// As [`Clock::new`], but a boot id that cannot be read *for now* is an error, not a
    /// boot id of 0: out of descriptors or memory (`EMFILE`, `ENFILE`, `ENOMEM`,
    /// `ENOBUFS`). A handle whose leases carried boot id 0 on a machine with `/proc` would
    /// take every other handle's leases for an earlier boot's (breaker finding: at a low
    /// `ulimit -n` the warning came first, then the queue's own EMFILE). Without `/proc`, or
    /// with an unreadable or malformed file, the boot id is 0 and a warning is logged.
    ///
    /// # Errors
    /// The errno of the open or read of `/proc/sys/kernel/random/boot_id`, for the errnos above.
    pub fn try_new(sys: &Sys) -> Result<Clock, crate::disk::sys::Errno> {
        use crate::disk::sys::Errno;
        match sys.boot_id() {
            Ok(id) => Ok(Clock::with_boot_id(id)),
            Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOMEM | Errno::NOBUFS)) => Err(e),
            Err(e) => Ok(no_boot_id(e)),
        }
    }

    fn with_boot_id(boot_id: u128) -> Clock {
        let shift = test_shift_ns();
        Clock {
            boot_id,
            boot_offset_ns: AtomicI64::new(shift),
            wall_offset_ns: AtomicI64::new(shift),
        }
    }

    /// This boot's id (128 bits).
    pub fn boot_id(&self) -> u128 {
        self.boot_id
    }

    /// `CLOCK_BOOTTIME` now, ns.
    pub fn boot_ns(&self) -> u64 {
        add(
            ts_ns(ClockId::Boottime),
            self.boot_offset_ns.load(Ordering::Relaxed),
        )
    }

    /// `CLOCK_REALTIME` now, unix ns.
    pub fn wall_ns(&self) -> u64 {
        add(
            ts_ns(ClockId::Realtime),
            self.wall_offset_ns.load(Ordering::Relaxed),
        )
    }

    /// Move this queue's view of `CLOCK_BOOTTIME` by `ns` (tests: expire a lease without
    /// waiting; feature `faults`).
    #[cfg(feature = "faults")]
    pub fn shift_boot(&self, ns: i64) {
        self.boot_offset_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Move this queue's view of `CLOCK_REALTIME` by `ns` (tests: wall-clock jumps; feature
    /// `faults`).
    #[cfg(feature = "faults")]
    pub fn shift_wall(&self, ns: i64) {
        self.wall_offset_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// The tests' clock for a whole process (the `steadq` binary they run): both clocks of every
/// queue it opens start `STEADQ_TEST_CLOCK_SHIFT_S` seconds (an integer, may be negative)
/// ahead, so a lease or a delay is past without sleeping. Only with feature `faults`; any
/// other build reads no such variable.
#[cfg(feature = "faults")]
fn test_shift_ns() -> i64 {
    std::env::var("STEADQ_TEST_CLOCK_SHIFT_S")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .map_or(0, |s| s.saturating_mul(1_000_000_000))
}

#[cfg(not(feature = "faults"))]
fn test_shift_ns() -> i64 {
    0
}

/// Parse a boot id as the kernel prints it (`8-4-4-4-12` hex digits) into 128 bits.
pub fn parse_boot_id(text: &str) -> Option<u128> {
    let t = text.trim();
    if t.len() != 36 {
        return None;
    }
    let mut v: u128 = 0;
    let mut digits = 0;
    for (i, c) in t.bytes().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if c != b'-' {
                return None;
            }
            continue;
        }
        let d = (c as char).to_digit(16)?;
        v = v << 4 | d as u128;
        digits += 1;
    }
    (digits == 32).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_id_parses() {
        assert_eq!(
            parse_boot_id("01234567-89ab-cdef-0123-456789abcdef\n"),
            Some(0x0123456789abcdef0123456789abcdef)
        );
        assert_eq!(parse_boot_id("0123456789abcdef0123456789abcdef"), None);
        assert_eq!(parse_boot_id("01234567-89ab-cdef-0123-456789abcdeg"), None);
    }

    #[test]
    fn real_boot_id_and_clocks() {
        let c = Clock::new(&Sys::new());
        assert_ne!(c.boot_id(), 0, "this test machine has /proc");
        let (b, w) = (c.boot_ns(), c.wall_ns());
        c.shift_boot(1_000_000_000);
        assert!(c.boot_ns() >= b + 1_000_000_000);
        assert!(w > 1_600_000_000_000_000_000);
    }
}
