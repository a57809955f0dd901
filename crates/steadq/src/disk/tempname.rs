//! Names of the files in `tmp/`: `<boot32>.<pid8>.<rand32>.tmp|probe`, whose writer they
//! name, so recovery removes the files of writers that are gone. Job names are `name.rs`.

use crate::disk::name::parse_hex;
use core::fmt::Write as _;

/// What a file in `tmp/` is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TempKind {
    /// A job being written by the named-temp-file publishing route (`.tmp`).
    Job,
    /// The open-time check that `renameat2(RENAME_NOREPLACE)` works (`.probe`).
    Probe,
}

/// A name in `tmp/`: `<boot32>.<pid8>.<rand32>.tmp|probe` (80 bytes for a probe). The boot id
/// and pid say whose it is, so recovery removes the files of writers that are gone (another
/// boot, or a pid that no longer exists). Encoded and decoded here only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TempName {
    /// Boot id of the writer (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: u128,
    /// Process id of the writer.
    pub pid: u32,
    /// Random, so two names of one process never collide.
    pub rand: u128,
    /// Job or probe.
    pub kind: TempKind,
}

impl TempName {
    /// A new name for this process.
    pub fn new(boot_id: u128, kind: TempKind, rand: u128) -> TempName {
        TempName {
            boot_id,
            pid: std::process::id(),
            rand,
            kind,
        }
    }

    /// The file name.
    pub fn format(&self) -> heapless::String<96> {
        let mut s = heapless::String::new();
        let ext = match self.kind {
            TempKind::Job => "tmp",
            TempKind::Probe => "probe",
        };
        // 32 + 1 + 8 + 1 + 32 + 1 + 5 = 80 bytes: always fits.
        let _ = write!(
            s,
            "{:032x}.{:08x}.{:032x}.{ext}",
            self.boot_id, self.pid, self.rand
        );
        s
    }

    /// Parse a `tmp/` entry name; `None` for anything else.
    pub fn parse(name: &str) -> Option<TempName> {
        let mut f = name.split('.');
        let (b, p, r, ext) = (f.next()?, f.next()?, f.next()?, f.next()?);
        if f.next().is_some() {
            return None;
        }
        let kind = match ext {
            "tmp" => TempKind::Job,
            "probe" => TempKind::Probe,
            _ => return None,
        };
        Some(TempName {
            boot_id: parse_hex(b.as_bytes(), 32)?,
            pid: parse_hex(p.as_bytes(), 8)? as u32,
            rand: parse_hex(r.as_bytes(), 32)?,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_round_trip_and_reject_others() {
        for kind in [TempKind::Job, TempKind::Probe] {
            let t = TempName {
                boot_id: u128::MAX - 1,
                pid: 4242,
                rand: 7,
                kind,
            };
            let s = t.format();
            assert_eq!(TempName::parse(&s), Some(t), "{s}");
        }
        let probe = TempName::new(1, TempKind::Probe, 2).format();
        assert_eq!(probe.len(), 80);
        for bad in [
            "x.tmp",
            "a.b.c.tmp",
            &format!("{probe}.x"),
            &probe.replace("probe", "job"),
        ] {
            assert_eq!(TempName::parse(bad), None, "{bad}");
        }
    }
}
