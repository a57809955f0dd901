//! Group slot files: `<root>/groups/<group>/<k>` (k decimal, `0..limit`), one per leased job
//! of a group with a limit (DESIGN.md, Groups). The text, encoded and decoded side by side,
//! and the one rule that says when a slot is stale:
//!
//! ```text
//! steadq-slot
//! job=<id32>
//! token=<token32>
//! boot=<boot32>
//! boot_deadline=<16 hex, CLOCK_BOOTTIME ns>
//! wall_deadline=<16 hex, unix ns>
//! ```
//!
//! The lease fields are those of the job's leased name: a slot is stale exactly when that
//! lease would be expired ([`crate::disk::scan::lease_expired`]).

use crate::disk::name::{parse_hex, JobId, LeaseFields};

/// The directory of the group slots in the queue root (made on first use).
pub use crate::disk::layout::GROUPS_DIR;

/// What a slot says: whose lease holds it, and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The leased job.
    pub job: JobId,
    /// The lease's fields (boot, deadlines, token), as in its leased name.
    pub lease: LeaseFields,
}

impl Slot {
    /// The slot's text.
    pub fn encode(&self) -> String {
        format!(
            "steadq-slot\njob={}\ntoken={:032x}\nboot={:032x}\nboot_deadline={:016x}\nwall_deadline={:016x}\n",
            self.job,
            self.lease.token,
            self.lease.boot_id,
            self.lease.boot_deadline_ns,
            self.lease.wall_deadline_ns
        )
    }

    /// Parse a slot's text; `None` for anything else (empty, cut short, forged).
    pub fn decode(b: &[u8]) -> Option<Slot> {
        let text = core::str::from_utf8(b).ok()?;
        let mut l = text.strip_suffix('\n')?.split('\n');
        if l.next()? != "steadq-slot" {
            return None;
        }
        let mut field = |k: &str, width: usize| -> Option<u128> {
            let v = l.next()?.strip_prefix(k)?.strip_prefix('=')?;
            parse_hex(v.as_bytes(), width)
        };
        let job = JobId(field("job", 32)?);
        let token = field("token", 32)?;
        let boot_id = field("boot", 32)?;
        let boot_deadline_ns = field("boot_deadline", 16)? as u64;
        let wall_deadline_ns = field("wall_deadline", 16)? as u64;
        l.next().is_none().then_some(Slot {
            job,
            lease: LeaseFields {
                boot_id,
                boot_deadline_ns,
                wall_deadline_ns,
                token,
            },
        })
    }
}

/// The name of slot `k`: `k` in decimal.
pub fn slot_name(k: u32) -> heapless::String<10> {
    let mut s = heapless::String::new();
    let _ = core::fmt::Write::write_fmt(&mut s, format_args!("{k}"));
    s
}

/// The `k` of a slot's name: decimal without leading zeros (`0` alone), below `limit`.
pub fn parse_slot_name(name: &str) -> Option<u32> {
    if name.is_empty() || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    if !name.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// Whether a slot file is stale, so that a claim may take its place: its text decodes and
/// its lease is expired on boot `boot` at `now_ns` (`CLOCK_BOOTTIME`): another boot, a
/// deadline passed, or one beyond the lease cap; or its text does not decode. A slot is linked
/// only once its text is written, so text that does not decode was cut short by a power cut
/// (slots have no fsync: the name survived, the data did not) or was written by someone
/// else; either way it names no lease, and removing it (a regular file, never followed)
/// frees the slot. `fsck` reports the second kind ([`slot_cut_short`] tells them apart).
pub fn slot_stale(text: &[u8], boot: u128, now_ns: u64) -> bool {
    match Slot::decode(text) {
        Some(s) => crate::disk::scan::lease_expired(&s.lease, boot, now_ns),
        None => true,
    }
}

/// Whether slot text that does not decode is what a power cut leaves of a slot: nothing, or
/// zeros (its data blocks never written). Anything else was written by someone else.
pub fn slot_cut_short(text: &[u8]) -> bool {
    text.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Slot {
        Slot {
            job: JobId(0x0193_0000_0000_aaaa_bbbb_cccc_dddd_eeee),
            lease: LeaseFields {
                boot_id: 7,
                boot_deadline_ns: 5_000,
                wall_deadline_ns: 1_700_000_000_000_000_000,
                token: u128::MAX,
            },
        }
    }

    #[test]
    fn slots_round_trip_and_anything_else_is_refused() {
        let s = sample();
        let t = s.encode();
        assert_eq!(t.len(), 12 + 37 + 39 + 38 + 31 + 31);
        assert_eq!(Slot::decode(t.as_bytes()), Some(s));
        for bad in [
            String::new(),
            t[..t.len() - 1].to_string(),
            t[..40].to_string(),
            t.replace("steadq-slot", "steadq-slut"),
            t.replace("token=f", "token=F"),
            format!("{t}extra\n"),
        ] {
            assert_eq!(Slot::decode(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn a_slot_is_stale_when_its_lease_is_expired_or_its_text_does_not_decode() {
        let s = sample();
        let t = s.encode();
        let t = t.as_bytes();
        assert!(
            !slot_stale(t, 7, 4_999),
            "live: this boot, before its deadline"
        );
        assert!(slot_stale(t, 7, 5_000), "its deadline passed");
        assert!(slot_stale(t, 8, 0), "another boot's");
        for damaged in [&b""[..], &[0u8; 64][..], b"garbage"] {
            assert!(slot_stale(damaged, 7, 0), "{damaged:?}");
        }
        assert!(slot_cut_short(b"") && slot_cut_short(&[0u8; 64]));
        assert!(!slot_cut_short(b"garbage") && !slot_cut_short(&t[..20]));
    }

    #[test]
    fn slot_names_are_plain_decimal() {
        assert_eq!(slot_name(0).as_str(), "0");
        assert_eq!(slot_name(999).as_str(), "999");
        assert_eq!(parse_slot_name("12"), Some(12));
        for bad in ["", "01", "-1", "1a", " 1", "99999999999"] {
            assert_eq!(parse_slot_name(bad), None, "{bad:?}");
        }
    }
}
