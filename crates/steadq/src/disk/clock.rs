//! Clocks and the boot id.
//!
//! Lease expiry uses the boot id plus `CLOCK_BOOTTIME` (monotonic, counts suspend, cannot be
//! set; `clock_gettime(2)`), so NTP jumps and RTC-less boards (Raspberry Pi before the Pi 5
//! restores a saved time at boot, then NTP jumps it) never expire or extend a lease. Delays in
//! a version-2 queue follow the same clock within one boot (see [`crate::delay_due`]). Wall
//! time (`CLOCK_REALTIME`) is used where another boot or a person needs it: the wall-clock
//! not-before of a delay (which picks its bucket and decides on another boot, or in a
//! version-1 queue), the `w` deadline in leased names, dead-letter buckets, ack times.
//!
//! A process in a time namespace (`unshare --time`, CRIU's restore; `time_namespaces(7)`)
//! shares the host's boot id but reads `CLOCK_BOOTTIME` shifted by its namespace's offset.
//! The offset is read once from `/proc/self/timens_offsets` and taken off, so every process
//! that opens the queue reads the same boot clock and a lease means the same to all of them.

use crate::disk::sys::Sys;
use rustix::time::{clock_gettime, ClockId};
use std::sync::atomic::{AtomicI64, Ordering};

/// The clocks a queue reads. Offsets exist so tests can move time without sleeping.
#[derive(Debug)]
pub struct Clock {
    boot_id: u128,
    /// This process's time namespace's `CLOCK_BOOTTIME` offset, ns (subtracted).
    timens_ns: i64,
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
    no_clock_file(crate::disk::sys::BOOT_ID_FILE, e)
}

/// A clock of boot id 0 and no namespace offset, for a `file` that could not be read.
fn no_clock_file(file: &str, e: crate::disk::sys::Errno) -> Clock {
    log::warn!("cannot read {file} ({e}); leases from earlier boots will expire by time only");
    Clock::with_boot_id(0)
}

impl Clock {
    /// Read the boot id from `/proc/sys/kernel/random/boot_id` (see `random(4)`). Without
    /// `/proc`, the boot id is 0: leases then all look like this boot's and expire by
    /// `CLOCK_BOOTTIME` only (a warning is logged).
    pub fn new(sys: &Sys) -> Clock {
        Clock::try_new(sys).unwrap_or_else(|(file, e)| no_clock_file(file, e))
    }

    /// As [`Clock::new`], but a boot id that cannot be read *for now* is an error, not a
    /// boot id of 0: out of descriptors or memory (`EMFILE`, `ENFILE`, `ENOMEM`,
    /// `ENOBUFS`). A handle whose leases carried boot id 0 on a machine with `/proc` would
    /// take every other handle's leases for an earlier boot's (at a low `ulimit -n` the
    /// boot id is the first file a handle reads). Without `/proc`, or
    /// with an unreadable or malformed file, the boot id is 0 and a warning is logged.
    ///
    /// The time namespace's boot-clock offset is read from `/proc/self/timens_offsets`;
    /// without that file (`ENOENT`: a kernel without time namespaces, or no `/proc`) it is 0.
    ///
    /// # Errors
    /// The file and the errno: `/proc/sys/kernel/random/boot_id` for the errnos above;
    /// `/proc/self/timens_offsets` when it exists but cannot be read or parsed (`EINVAL`):
    /// this process's boot clock could then be shifted from every other's, so its leases
    /// would not mean the same to them.
    pub fn try_new(sys: &Sys) -> Result<Clock, (&'static str, crate::disk::sys::Errno)> {
        use crate::disk::sys::{Errno, BOOT_ID_FILE, TIMENS_FILE};
        let mut clock = match sys.boot_id() {
            Ok(id) => Clock::with_boot_id(id),
            Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOMEM | Errno::NOBUFS)) => {
                return Err((BOOT_ID_FILE, e))
            }
            Err(e) => no_boot_id(e),
        };
        clock.timens_ns = match sys.timens_boot_offset() {
            Ok(ns) => ns,
            Err(Errno::NOENT) => 0,
            Err(e) => return Err((TIMENS_FILE, e)),
        };
        Ok(clock)
    }

    fn with_boot_id(boot_id: u128) -> Clock {
        let shift = test_shift_ns();
        Clock {
            boot_id,
            timens_ns: 0,
            boot_offset_ns: AtomicI64::new(shift),
            wall_offset_ns: AtomicI64::new(shift),
        }
    }

    /// This boot's id (128 bits).
    pub fn boot_id(&self) -> u128 {
        self.boot_id
    }

    /// `CLOCK_BOOTTIME` now as the host reads it (this process's time namespace offset
    /// taken off), ns.
    pub fn boot_ns(&self) -> u64 {
        let off = self.boot_offset_ns.load(Ordering::Relaxed);
        add(ts_ns(ClockId::Boottime), off.saturating_sub(self.timens_ns))
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

/// The `boottime` line of `/proc/PID/timens_offsets` (`boottime <secs> <nanosecs>`, see
/// `time_namespaces(7)`) as ns; a file without that line has offset 0.
pub fn parse_timens_boottime(text: &str) -> Option<i64> {
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(clock) = f.next() else { continue };
        if clock != "boottime" && clock != "7" {
            continue;
        }
        let secs: i64 = f.next()?.parse().ok()?;
        let nanos: i64 = f.next()?.parse().ok()?;
        if f.next().is_some() || !(0..1_000_000_000).contains(&nanos) {
            return None;
        }
        return secs.checked_mul(1_000_000_000)?.checked_add(nanos);
    }
    Some(0)
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
    fn timens_offsets_parse() {
        let host = "monotonic           0         0\nboottime            0         0\n";
        assert_eq!(parse_timens_boottime(host), Some(0));
        let shifted = "monotonic         100         0\nboottime        -2460    500000\n";
        assert_eq!(parse_timens_boottime(shifted), Some(-2_459_999_500_000));
        assert_eq!(parse_timens_boottime("boottime 1\n"), None);
        assert_eq!(parse_timens_boottime("boottime x 0\n"), None);
        assert_eq!(parse_timens_boottime("boottime 1 1000000000\n"), None);
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
