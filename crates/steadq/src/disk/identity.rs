//! The identity file `steadq.queue`: its text, encoded and decoded side by side. Reading,
//! publishing and replacing the file are the queue's (`src/queue/identity_file.rs`); this module only turns
//! an [`Identity`] into bytes and back.

use crate::disk::name::{JobId, JobName};

/// The queue format version this build writes (and the newest it opens). Version 2 adds the
/// receipt policy and evidence limits to the identity file, the ack time to receipt names and
/// the boot clock to delayed names. Version 3 adds priorities: `prio/<l>/<ss>/` directories
/// for the levels other than the default (made when a job is first placed at that level) and
/// a `.p<l>` name field. Version-1 and version-2
/// queues open and keep their format (and refuse a non-default priority).
pub const QUEUE_VERSION: u32 = 3;

/// What an ack keeps (queue version 2; a version-1 queue always keeps the job).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReceiptPolicy {
    /// Keep the whole job file as the receipt (the default; what version 1 does).
    #[default]
    Job,
    /// Cut the receipt to its 128-byte header after the ack (the payload's blocks are freed;
    /// the header keeps both digests).
    Header,
    /// Append one evidence line and remove the receipt after the ack.
    None,
}

impl core::fmt::Display for ReceiptPolicy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ReceiptPolicy::Job => "job",
            ReceiptPolicy::Header => "header",
            ReceiptPolicy::None => "none",
        })
    }
}

impl core::str::FromStr for ReceiptPolicy {
    type Err = &'static str;
    /// `job`, `header` or `none`.
    fn from_str(s: &str) -> core::result::Result<Self, Self::Err> {
        match s {
            "job" => Ok(ReceiptPolicy::Job),
            "header" => Ok(ReceiptPolicy::Header),
            "none" => Ok(ReceiptPolicy::None),
            _ => Err("receipt policy must be job, header or none"),
        }
    }
}

/// How large the evidence log may grow (queue version 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvidenceLimits {
    /// Rotate `evidence.log` before an append would take it past this many bytes (> 0).
    pub max_bytes: u64,
    /// Rotated files kept; older ones are removed at rotation.
    pub keep: u32,
}

impl EvidenceLimits {
    /// What a version-1 queue has: one log that never rotates.
    pub const UNBOUNDED: EvidenceLimits = EvidenceLimits {
        max_bytes: u64::MAX,
        keep: 0,
    };
}

impl Default for EvidenceLimits {
    /// 16 MiB, keep 3: at most about 64 MiB of evidence.
    fn default() -> Self {
        EvidenceLimits {
            max_bytes: 16 << 20,
            keep: 3,
        }
    }
}

/// Why an identity file's text does not decode ([`Identity::decode`]); the queue handle
/// turns it into its error, naming the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IdentityError {
    /// Malformed, or its sum does not match.
    Bad,
    /// Written by a newer format than this build reads.
    Newer {
        /// Version found on disk.
        found: u32,
        /// Newest this build reads ([`QUEUE_VERSION`]).
        supported: u32,
    },
}

/// The identity of a queue, from `steadq.queue`:
///
/// ```text
/// steadq-queue
/// version=1
/// id=<32 hex: 128 random bits>
/// shards=<1..=256>
/// delayed_bucket_ns=<decimal ns>
/// receipts=<job|header|none>          (version 2 only)
/// evidence_max=<decimal bytes>        (version 2 only)
/// evidence_keep=<decimal count>       (version 2 only)
/// sum=<16 hex: first 8 bytes of SHA-256 of all the bytes before this line>
/// ```
///
/// The sum line is always written; a file without it (SteadQ 0.1 before the sum existed)
/// still opens. A sum that does not match is `IdentityError::Bad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Format version.
    pub version: u32,
    /// Queue id.
    pub id: u128,
    /// Shard count.
    pub shards: u16,
    /// Delayed-bucket width, ns.
    pub delayed_bucket_ns: u64,
    /// What an ack keeps (version 1: always [`ReceiptPolicy::Job`]).
    pub receipts: ReceiptPolicy,
    /// Evidence log rotation (version 1: one `evidence.log` that never rotates).
    pub evidence: EvidenceLimits,
}

/// The identity checksum: the first 8 bytes (big-endian) of SHA-256 of `body`.
fn identity_sum(body: &[u8]) -> u64 {
    use sha2::{Digest, Sha256};
    let d: [u8; 32] = Sha256::digest(body).into();
    let mut a = [0u8; 8];
    a.copy_from_slice(&d[..8]);
    u64::from_be_bytes(a)
}

/// Split `text` into the body and the value of its last line when that is `sum=<16 hex>`;
/// `None` for a file without a sum line (written by SteadQ 0.1 before the sum existed).
fn split_sum(text: &str) -> Option<(&str, Option<u64>)> {
    let trimmed = text.strip_suffix('\n')?;
    let start = trimmed.rfind('\n').map_or(0, |i| i + 1);
    let Some(hex) = trimmed[start..].strip_prefix("sum=") else {
        return Some((text, None));
    };
    let ok = hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let sum = u64::from_str_radix(hex, 16).ok().filter(|_| ok);
    // A malformed sum line is damage: report it as a sum that cannot match.
    Some((
        &text[..start],
        Some(sum.unwrap_or(!identity_sum(&text.as_bytes()[..start]))),
    ))
}

impl Identity {
    /// Priority levels this queue's layout has: [`crate::PRIORITY_LEVELS`] from
    /// version 3 on, before that only the default.
    pub fn levels(&self) -> u8 {
        if self.version >= 3 {
            crate::disk::name::PRIORITY_LEVELS
        } else {
            1
        }
    }

    /// Whether this queue can hold jobs of priority `priority`.
    pub fn has_priority(&self, priority: u8) -> bool {
        priority == crate::disk::name::DEFAULT_PRIORITY
            || (self.version >= 3 && priority < crate::disk::name::PRIORITY_LEVELS)
    }

    /// Ready directories ("slots"): one per level and shard.
    pub(crate) fn slots(&self) -> u16 {
        self.levels() as u16 * self.shards
    }

    /// The slot of `priority`'s shard `shard` (version 3: `priority * shards + shard`;
    /// before: the shard).
    pub(crate) fn slot(&self, priority: u8, shard: u16) -> u16 {
        if self.version >= 3 {
            priority as u16 * self.shards + shard
        } else {
            shard
        }
    }

    /// The slot a job's ready and leased names live in.
    pub(crate) fn slot_of(&self, n: &JobName) -> u16 {
        self.slot(n.priority, n.id.shard(self.shards))
    }

    /// `(priority, shard)` of a slot.
    pub(crate) fn slot_parts(&self, slot: u16) -> (u8, u16) {
        if self.version >= 3 {
            ((slot / self.shards) as u8, slot % self.shards)
        } else {
            (crate::disk::name::DEFAULT_PRIORITY, slot)
        }
    }

    /// Whether slot `slot` is a priority level's (`prio/<l>/<ss>`), whose directory is made
    /// when the first job is placed at its level rather than with the queue.
    pub(crate) fn slot_is_lazy(&self, slot: u16) -> bool {
        self.slot_parts(slot).0 != crate::disk::name::DEFAULT_PRIORITY
    }

    /// A slot's directory relative to the root: `ready/<ss>` for the default level,
    /// `prio/<l>/<ss>` for the others.
    pub(crate) fn slot_rel(&self, slot: u16) -> String {
        self.slot_dir_rel(slot).as_str().to_owned()
    }

    /// [`Identity::slot_rel`] without a heap allocation, for the paths every job takes.
    pub(crate) fn slot_dir_rel(&self, slot: u16) -> crate::disk::layout::DirRel {
        use crate::disk::layout::{dir_rel, ready_shard, shard_name, PRIO_DIR};
        let (p, s) = self.slot_parts(slot);
        if p == crate::disk::name::DEFAULT_PRIORITY {
            ready_shard(s)
        } else {
            dir_rel(format_args!("{PRIO_DIR}/{p}/{}", shard_name(s)))
        }
    }

    /// A version-1 identity cannot carry a policy: it acts as `job` with one unrotated log.
    pub(crate) fn settled(mut self) -> Identity {
        if self.version < 2 {
            self.receipts = ReceiptPolicy::Job;
            self.evidence = EvidenceLimits::UNBOUNDED;
        }
        self
    }

    /// The file's text, sum line included.
    pub(crate) fn encode(&self) -> String {
        let mut body = format!(
            "steadq-queue\nversion={}\nid={:032x}\nshards={}\ndelayed_bucket_ns={}\n",
            self.version, self.id, self.shards, self.delayed_bucket_ns
        );
        if self.version >= 2 {
            body.push_str(&format!(
                "receipts={}\nevidence_max={}\nevidence_keep={}\n",
                self.receipts, self.evidence.max_bytes, self.evidence.keep
            ));
        }
        let sum = identity_sum(body.as_bytes());
        format!("{body}sum={sum:016x}\n")
    }

    /// Parse the file's text (with or without its sum line).
    ///
    /// # Errors
    /// `IdentityError::Bad` for anything malformed or a sum that does not match;
    /// [`IdentityError::Newer`] for a newer format.
    pub(crate) fn decode(text: &str) -> core::result::Result<Identity, IdentityError> {
        let (body, sum) = split_sum(text).ok_or(IdentityError::Bad)?;
        let ident = Identity::decode_body(body);
        // A newer format may sum differently: say "upgrade", not "damaged".
        if matches!(ident, Err(IdentityError::Newer { .. })) {
            return ident;
        }
        if sum.is_some_and(|s| s != identity_sum(body.as_bytes())) {
            return Err(IdentityError::Bad);
        }
        ident
    }

    /// The five lines (version 1) or eight (version 2) before the optional sum line; nothing
    /// else may follow them.
    fn decode_body(body: &str) -> core::result::Result<Identity, IdentityError> {
        let mut lines = body.lines();
        if lines.next() != Some("steadq-queue") {
            return Err(IdentityError::Bad);
        }
        let mut field = |key: &str| -> core::result::Result<&str, IdentityError> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(key))
                .and_then(|l| l.strip_prefix('='))
                .ok_or(IdentityError::Bad)
        };
        let version: u32 = field("version")?.parse().map_err(|_| IdentityError::Bad)?;
        if version == 0 {
            return Err(IdentityError::Bad);
        }
        if version > QUEUE_VERSION {
            return Err(IdentityError::Newer {
                found: version,
                supported: QUEUE_VERSION,
            });
        }
        let id = JobId::parse(field("id")?).ok_or(IdentityError::Bad)?.0;
        let shards: u16 = field("shards")?.parse().map_err(|_| IdentityError::Bad)?;
        let delayed_bucket_ns: u64 = field("delayed_bucket_ns")?
            .parse()
            .map_err(|_| IdentityError::Bad)?;
        let (mut receipts, mut evidence) = (ReceiptPolicy::Job, EvidenceLimits::UNBOUNDED);
        if version >= 2 {
            receipts = field("receipts")?.parse().map_err(|_| IdentityError::Bad)?;
            evidence.max_bytes = field("evidence_max")?
                .parse()
                .map_err(|_| IdentityError::Bad)?;
            evidence.keep = field("evidence_keep")?
                .parse()
                .map_err(|_| IdentityError::Bad)?;
        }
        if !(1..=256).contains(&shards)
            || delayed_bucket_ns == 0
            || evidence.max_bytes == 0
            || lines.next().is_some()
        {
            return Err(IdentityError::Bad);
        }
        Ok(Identity {
            version,
            id,
            shards,
            delayed_bucket_ns,
            receipts,
            evidence,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips_and_rejects_newer() {
        let i = Identity {
            version: 1,
            id: 0xabc,
            shards: 16,
            delayed_bucket_ns: 60_000_000_000,
            receipts: ReceiptPolicy::Job,
            evidence: EvidenceLimits::UNBOUNDED,
        };
        assert_eq!(Identity::decode(&i.encode()), Ok(i));
        let v2 = Identity {
            version: 2,
            receipts: ReceiptPolicy::Header,
            evidence: EvidenceLimits {
                max_bytes: 4096,
                keep: 2,
            },
            ..i
        };
        assert!(v2
            .encode()
            .contains("\nreceipts=header\nevidence_max=4096\nevidence_keep=2\n"));
        assert_eq!(Identity::decode(&v2.encode()), Ok(v2));
        // A version-2 identity without its extra lines is damaged.
        let short = i.encode().replace("version=1", "version=2");
        assert_eq!(Identity::decode(&short), Err(IdentityError::Bad));
        let newer = i.encode().replace("version=1", "version=4");
        assert_eq!(
            Identity::decode(&newer),
            Err(IdentityError::Newer {
                found: 4,
                supported: 3
            })
        );
        assert_eq!(Identity::decode("steadq-queue\n"), Err(IdentityError::Bad));
        let v0 = i.encode().replace("version=1", "version=0");
        assert_eq!(Identity::decode(&v0), Err(IdentityError::Bad));
        let zero = i.encode().replace("shards=16", "shards=0");
        assert_eq!(Identity::decode(&zero), Err(IdentityError::Bad));
    }

    #[test]
    fn identity_sum_is_checked_and_optional() {
        let i = Identity {
            version: 1,
            id: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
            shards: 8,
            delayed_bucket_ns: 60_000_000_000,
            receipts: ReceiptPolicy::Job,
            evidence: EvidenceLimits::UNBOUNDED,
        };
        let text = i.encode();
        let (body, sum) = split_sum(&text).unwrap();
        assert_eq!(sum, Some(identity_sum(body.as_bytes())));
        assert_eq!(body.lines().count(), 5);
        // Legacy: the body alone.
        assert_eq!(Identity::decode(body), Ok(i));
        // One changed hex digit of the id: only the sum tells.
        let flipped = text.replace("id=1234", "id=1235");
        assert_eq!(Identity::decode(&flipped), Err(IdentityError::Bad));
        // A malformed sum line, a sum of the wrong length, junk after the fields.
        for bad in [
            text.replace("sum=", "sum=x"),
            text.replace("\nsum=", "\nsum=0"),
            text.replace("\nsum=", "\nsun="),
            format!("{body}junk\n"),
        ] {
            assert_eq!(Identity::decode(&bad), Err(IdentityError::Bad), "{bad}");
        }
    }
}
