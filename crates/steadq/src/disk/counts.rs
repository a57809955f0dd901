//! `steadq.counts`: the totals that only go up, the bytes of the file.
//!
//! The file counts what left the queue's directories for good: receipts removed by
//! compaction (`acked`) and dead jobs requeued or purged (`dead`). A total is that count plus
//! the entries present (`Status::acked_total`, `Status::dead_total`). The file is replaced
//! whole (temp file, fsync, rename over it, fsync of the root), never written in place:
//!
//! ```text
//! steadq-counts
//! version=1
//! acked=<decimal>
//! dead=<decimal>
//! sum=<16 hex: the first 8 bytes of SHA-256 of the lines above, big-endian>
//! ```

use sha2::{Digest, Sha256};

/// What left the directories for good (see the module docs). A missing file is all zeros.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Receipts removed by compaction.
    pub acked: u64,
    /// Dead jobs requeued or purged.
    pub dead: u64,
}

fn sum(body: &[u8]) -> u64 {
    let d: [u8; 32] = Sha256::digest(body).into();
    u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

impl Counts {
    /// The file's bytes.
    pub fn encode(&self) -> String {
        let body = format!(
            "steadq-counts\nversion=1\nacked={}\ndead={}\n",
            self.acked, self.dead
        );
        format!("{body}sum={:016x}\n", sum(body.as_bytes()))
    }

    /// Parse the file; `None` when it is damaged (syntax, or its `sum=` does not match).
    pub fn decode(text: &str) -> Option<Counts> {
        let at = text.find("sum=")?;
        let (body, s) = text.split_at(at);
        let s = s.strip_prefix("sum=")?.strip_suffix('\n')?;
        if s.len() != 16 || u64::from_str_radix(s, 16).ok()? != sum(body.as_bytes()) {
            return None;
        }
        let mut l = body.lines();
        if l.next()? != "steadq-counts" || l.next()? != "version=1" {
            return None;
        }
        let mut val = |k: &str| l.next()?.strip_prefix(k)?.parse().ok();
        let c = Counts {
            acked: val("acked=")?,
            dead: val("dead=")?,
        };
        l.next().is_none().then_some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_trip_and_damage_is_caught() {
        let c = Counts { acked: 12, dead: 3 };
        let t = c.encode();
        assert!(t.starts_with("steadq-counts\nversion=1\nacked=12\ndead=3\nsum="));
        assert_eq!(Counts::decode(&t), Some(c));
        assert_eq!(Counts::decode(&t.replace("acked=12", "acked=13")), None);
        assert_eq!(Counts::decode(&t[..t.len() - 1]), None);
    }
}
