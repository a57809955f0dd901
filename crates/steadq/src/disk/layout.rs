//! The root layout: the name of every entry SteadQ makes in a queue's root, defined once, and
//! the names of the directories under them (shards, time buckets), encoded and decoded side by
//! side. DESIGN.md's Layout block lists the same names; `tests/it/design.rs` checks both ways.
//!
//! ```text
//! <root>/steadq.queue        IDENTITY_FILE (src/disk/identity.rs)
//! <root>/tmp/                TMP_DIR
//! <root>/ready/<ss>/         READY_DIR, shard_name
//! <root>/prio/<l>/<ss>/      PRIO_DIR (version 3): made by the first job placed in that slot,
//!                            not by Queue::create (src/ops/levels.rs)
//! <root>/delayed/<bbbb16>/   DELAYED_DIR, delayed_bucket: not_before_ns / bucket width
//! <root>/dead/<bbbb16>/      DEAD_DIR, dead_bucket: death time / DEAD_BUCKET_NS (1 day)
//! <root>/receipts/<ss>/      RECEIPTS_DIR
//! <root>/quarantine/...      QUARANTINE_DIR
//! <root>/evidence.log        EVIDENCE_FILE (rotated: evidence.<hex16>.log)
//! <root>/steadq.limits       LIMITS_FILE
//! <root>/steadq.counts       COUNTS_FILE (src/disk/counts.rs)
//! <root>/keys/               KEYS_DIR
//! <root>/waiting/            WAITING_DIR: jobs waiting for others, ready names (first use)
//! <root>/needs/<D>/<X>       NEEDS_DIR: empty marker, "D waits for X" (first use)
//! <root>/after/<X>/<D>       AFTER_DIR: empty marker, "D waits for X" by X (first use)
//! <root>/groups/<group>/<k>  GROUPS_DIR: group slots (src/disk/slot.rs), made on first use
//! ```

use core::fmt::Write as _;

/// The identity file's name in the queue root.
pub const IDENTITY_FILE: &str = "steadq.queue";
/// The capacity limits file (optional).
pub const LIMITS_FILE: &str = "steadq.limits";
/// The totals that only go up: what compaction, requeue and purge removed (optional;
/// `src/disk/counts.rs`).
pub const COUNTS_FILE: &str = "steadq.counts";
/// The evidence log (one line per compacted receipt); rotated ones are `evidence.<hex16>.log`.
pub const EVIDENCE_FILE: &str = "evidence.log";
/// Named temp files (fallback publishing) and rename probes.
pub const TMP_DIR: &str = "tmp";
/// Ready and leased jobs, one subdirectory per shard.
pub const READY_DIR: &str = "ready";
/// Ready jobs of the levels other than the default (version 3): `prio/<l>/<ss>/`, made when
/// the first job is placed in that slot (`src/ops/levels.rs`), not by `Queue::create`.
pub const PRIO_DIR: &str = "prio";
/// Delayed jobs, one subdirectory per time bucket.
pub const DELAYED_DIR: &str = "delayed";
/// Dead jobs, one subdirectory per day.
pub const DEAD_DIR: &str = "dead";
/// Receipts of acked jobs, one subdirectory per shard.
pub const RECEIPTS_DIR: &str = "receipts";
/// Entries moved aside by `fsck --quarantine`, under their original path.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Idempotency key entries (made on first use).
pub const KEYS_DIR: &str = "keys";
/// Group slots: `groups/<group>/<k>`, one per leased job of a group with a limit (made on
/// first use; `src/disk/slot.rs`).
pub const GROUPS_DIR: &str = "groups";

/// Jobs waiting for other jobs (`EnqueueOptions::after`), flat, under their ready names
/// (made on first use; `src/ops/deps.rs`).
pub const WAITING_DIR: &str = "waiting";
/// `needs/<D-id32>/<X-id32>`: empty marker, job D waits for job X (made on first use).
pub const NEEDS_DIR: &str = "needs";
/// `after/<X-id32>/<D-id32>`: empty marker, the reverse index: D waits for X (made on
/// first use).
pub const AFTER_DIR: &str = "after";

/// The directories `Queue::create` makes in the root (each shard directory under the two
/// sharded ones too). `prio/` is not one: it is made on first use.
pub(crate) const CREATED_DIRS: [&str; 5] =
    [DEAD_DIR, DELAYED_DIR, READY_DIR, RECEIPTS_DIR, TMP_DIR];

/// Every fixed name the root may hold (rotated evidence and the identity's temp and damaged
/// names come on top; see `fsck`).
pub const ROOT_ENTRIES: [&str; 15] = [
    IDENTITY_FILE,
    TMP_DIR,
    READY_DIR,
    DELAYED_DIR,
    DEAD_DIR,
    RECEIPTS_DIR,
    QUARANTINE_DIR,
    EVIDENCE_FILE,
    KEYS_DIR,
    LIMITS_FILE,
    COUNTS_FILE,
    WAITING_DIR,
    NEEDS_DIR,
    AFTER_DIR,
    GROUPS_DIR,
];

/// Width of a dead-letter bucket: one day, in ns.
pub const DEAD_BUCKET_NS: u64 = 86_400 * 1_000_000_000;

/// The 2-hex name of shard directory `shard` (shards are 1..=256).
pub fn shard_name(shard: u16) -> heapless::String<4> {
    // By hand, not `write!(s, "{:02x}")`: core::fmt was 6% of a tmpfs lifecycle's user CPU
    // (every claim, ack and enqueue names its shard directory for its messages).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = match shard {
        0..=0xff => 2,
        0x100..=0xfff => 3,
        _ => 4,
    };
    let mut s = heapless::String::new();
    for i in (0..digits).rev() {
        let _ = s.push(HEX[usize::from((shard >> (4 * i)) & 0xf)] as char);
    }
    s
}

/// `<dir>/<shard name>` as a [`DirRel`], without core::fmt (see [`shard_name`]).
fn shard_under(dir: &str, shard: u16) -> DirRel {
    let mut s = DirRel::new();
    let _ = s.push_str(dir);
    let _ = s.push('/');
    let _ = s.push_str(&shard_name(shard));
    s
}

/// A directory's path relative to the root, inline (no heap): a fixed directory, `/`, and
/// one name of at most 255 bytes (`NAME_MAX`, a foreign bucket's included) always fit. Ops
/// build one per step for their messages, so a `String` here was a heap allocation per job
/// and directory.
pub(crate) type DirRel = heapless::String<272>;

/// `args` as a [`DirRel`]; cut short (never for the paths above) rather than fail.
pub(crate) fn dir_rel(args: core::fmt::Arguments<'_>) -> DirRel {
    let mut s = DirRel::new();
    let _ = s.write_fmt(args);
    s
}

/// `ready/<ss>`, relative to the root.
pub(crate) fn ready_shard(shard: u16) -> DirRel {
    shard_under(READY_DIR, shard)
}

/// `receipts/<ss>`, relative to the root.
pub(crate) fn receipts_shard(shard: u16) -> DirRel {
    shard_under(RECEIPTS_DIR, shard)
}

/// The 16-hex name of a time bucket directory: `index = unix_ns / width_ns`.
pub fn bucket_name(unix_ns: u64, width_ns: u64) -> heapless::String<16> {
    bucket_dir(unix_ns / width_ns.max(1))
}

/// The 16-hex name of the time bucket directory with index `index`.
pub(crate) fn bucket_dir(index: u64) -> heapless::String<16> {
    let mut s = heapless::String::new();
    let _ = write!(s, "{index:016x}");
    s
}

/// The index of time bucket directory `name` (16 lowercase hex digits), or `None` for any
/// other name.
pub(crate) fn parse_bucket(name: &str) -> Option<u64> {
    crate::disk::name::parse_hex(name.as_bytes(), 16).map(|b| b as u64)
}

/// The delayed bucket of a job due at `not_before_ns` (unix ns) in a queue whose buckets are
/// `width_ns` wide.
pub(crate) fn delayed_bucket(not_before_ns: u64, width_ns: u64) -> heapless::String<16> {
    bucket_name(not_before_ns, width_ns)
}

/// The dead bucket of a job that died at `unix_ns`.
pub(crate) fn dead_bucket(unix_ns: u64) -> heapless::String<16> {
    bucket_name(unix_ns, DEAD_BUCKET_NS)
}

/// The first unix ns covered by bucket `index` of width `width_ns`.
pub(crate) fn bucket_start(index: u64, width_ns: u64) -> u64 {
    index.saturating_mul(width_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_are_two_or_more_lowercase_hex_digits() {
        for shard in (0..=300u16).chain([0xfff, 0x1000, 0xabcd, u16::MAX]) {
            let want = format!("{shard:02x}");
            assert_eq!(shard_name(shard).as_str(), want);
            assert_eq!(ready_shard(shard).as_str(), format!("{READY_DIR}/{want}"));
            assert_eq!(
                receipts_shard(shard).as_str(),
                format!("{RECEIPTS_DIR}/{want}")
            );
        }
    }

    #[test]
    fn bucket_names_round_trip() {
        let w = 60_000_000_000;
        let b = delayed_bucket(3 * w + 5, w);
        assert_eq!(b.as_str(), "0000000000000003");
        assert_eq!(parse_bucket(&b), Some(3));
        assert_eq!(bucket_start(3, w), 3 * w);
        let d = dead_bucket(2 * DEAD_BUCKET_NS + 1);
        assert_eq!(parse_bucket(&d), Some(2));
        assert_eq!(parse_bucket(&bucket_dir(u64::MAX)), Some(u64::MAX));
        for bad in [
            "000000000000003",
            "00000000000000003",
            "000000000000000G",
            "ready",
        ] {
            assert_eq!(parse_bucket(bad), None, "{bad}");
        }
        assert_eq!(ready_shard(10), "ready/0a");
        assert_eq!(receipts_shard(255), "receipts/ff");
    }
}
