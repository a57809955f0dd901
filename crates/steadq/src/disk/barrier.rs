//! The name of every durability barrier in the code: each call of [`Sys::fsync`],
//! [`Sys::fsync_dir`], [`Sys::syncfs`] and [`Sys::write_out`] says which one it is, so that a
//! fault plan can remove exactly one of them ([`FaultPlan::skip_barrier`]) and the crash rigs
//! can show, barrier by barrier, that its removal is caught (DESIGN.md, "Barriers and
//! outcomes": the barrier table).
//!
//! [`Sys::fsync`]: super::sys::Sys::fsync
//! [`Sys::fsync_dir`]: super::sys::Sys::fsync_dir
//! [`Sys::syncfs`]: super::sys::Sys::syncfs
//! [`Sys::write_out`]: super::sys::Sys::write_out
//! [`FaultPlan::skip_barrier`]: super::fault::FaultPlan::skip_barrier

use super::state::Op;

macro_rules! barriers {
    ($($(#[$doc:meta])* $v:ident = $name:literal,)*) => {
        /// One barrier site (or one family of sites that make the same thing durable for
        /// the same operation). Its stable kebab-case [`Barrier::name`] is what
        /// `powercut.sh --break NAME` and `rig.sh --break NAME` take.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Barrier {
            $($(#[$doc])* $v,)*
        }

        impl Barrier {
            /// Every barrier, in declaration order.
            pub const ALL: &'static [Barrier] = &[$(Barrier::$v,)*];

            /// The stable kebab-case name (`enqueue-dir`, `ack-dest`, ...).
            pub fn name(self) -> &'static str {
                match self {
                    $(Barrier::$v => $name,)*
                }
            }
        }
    };
}

barriers! {
    /// Enqueue: the job file's data before its link (fsync; `write_out` where one journal
    /// commit follows in order).
    EnqueueData = "enqueue-data",
    /// Enqueue: the job file again after its `linkat` or rename out of `tmp/` (btrfs, and
    /// wherever a directory fsync does not commit the link count).
    EnqueueRelink = "enqueue-relink",
    /// Enqueue (named route): `tmp/` after the rename out of it.
    EnqueueTmpDir = "enqueue-tmp-dir",
    /// Enqueue: the target directory (`ready/<ss>/`, `delayed/<b>/`, a level's shard) after
    /// the link: the job's name.
    EnqueueDir = "enqueue-dir",
    /// Batched enqueue: every file's data before the links (`write_out` or one `syncfs`).
    EnqueueBatchData = "enqueue-batch-data",
    /// Batched enqueue: every name after the links (the last directory's fsync or `syncfs`).
    EnqueueBatchNames = "enqueue-batch-names",
    /// Claim (ready -> leased, or dead when exhausted or corrupt): the target directory.
    ClaimDest = "claim-dest",
    /// Claim: the source directory, where it differs from the target.
    ClaimSource = "claim-source",
    /// Renew: the leased job's directory after its rename to the new deadlines.
    RenewDir = "renew-dir",
    /// Ack: the receipts shard after the rename into it.
    AckDest = "ack-dest",
    /// Ack: the leased job's directory it left.
    AckSource = "ack-source",
    /// Nack or release: the target (`delayed/<b>/`, ready, or dead when exhausted).
    NackDest = "nack-dest",
    /// Nack or release: the directory the leased job left.
    NackSource = "nack-source",
    /// Fail: the `dead/<b>/` bucket after the rename into it.
    FailDest = "fail-dest",
    /// Fail: the directory the leased job left.
    FailSource = "fail-source",
    /// Recovery (an expired lease back to ready or dead; a delayed job due): the target.
    RecoverDest = "recover-dest",
    /// Recovery: the source directory.
    RecoverSource = "recover-source",
    /// Requeue of a dead job: the ready directory it goes to.
    RequeueDest = "requeue-dest",
    /// Requeue: the dead bucket it left.
    RequeueSource = "requeue-source",
    /// A new `delayed/<b>/` or `dead/<b>/` bucket, in its parent.
    BucketDir = "bucket-dir",
    /// A new priority level's directories (`prio/<l>/<ss>/`), in their parents and the root.
    LevelDir = "level-dir",
    /// Recovery of a move split by a crash: the newer name's directory before the older
    /// name is unlinked, and the directory of the unlinked name.
    SplitDir = "split-dir",
    /// Ack: the receipt cut to its header (receipt policy `header`).
    ReceiptCut = "receipt-cut",
    /// Ack (receipt policy `none`): the receipts shard after the receipt's unlink.
    ReceiptUnlink = "receipt-unlink",
    /// The evidence log after lines are appended (ack under receipt policy `none`, compaction).
    EvidenceFile = "evidence-file",
    /// The root after the evidence log is appended to (its name when it was made).
    EvidenceDir = "evidence-dir",
    /// The root after old rotated evidence logs are removed.
    EvidenceRotate = "evidence-rotate",
    /// Compaction: each receipts shard after its receipts are unlinked.
    CompactReceiptsDir = "compact-receipts-dir",
    /// Purge of dead jobs: each bucket and `dead/`.
    PurgeDead = "purge-dead",
    /// Keyed enqueue: the root after `keys/` is made.
    KeysDirMade = "keys-dir-made",
    /// Keyed enqueue: a key entry's file (before and after its link).
    KeyFile = "key-file",
    /// Keyed enqueue: `keys/` after a key entry is linked, renamed or retired.
    KeysDir = "keys-dir",
    /// Capacity limits: the limits file and the root after its rename.
    Limits = "limits",
    /// The totals file (`steadq.counts`): the new file and the root after its rename.
    Counts = "counts",
    /// Create and open: the directories made, the identity file, the root and its parent.
    Create = "create",
    /// A settings change: the new identity file and the root after its rename.
    Identity = "identity",
    /// `fsck --quarantine`: the quarantined file, its new and old directories.
    Quarantine = "quarantine",
    /// Dependencies: `needs/<D>/`, `after/<X>/` and their parents after markers are made
    /// or removed (before a waiting job is linked).
    DepsMarker = "deps-marker",
    /// Dependencies: the target of a waiting job's move (ready when its dependencies are
    /// met, dead when one died, `waiting/` on requeue).
    DepsDest = "deps-dest",
    /// Dependencies: the directory the waiting job left (`waiting/`, or the dead bucket).
    DepsSource = "deps-source",
}

impl Barrier {
    /// The barrier [`Barrier::name`] names; `None` for an unknown name.
    pub fn parse(name: &str) -> Option<Barrier> {
        Barrier::ALL.iter().copied().find(|b| b.name() == name)
    }

    /// Its index in [`Barrier::ALL`] (below 64: the fault plan keeps a bit per barrier).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The barrier on the target directory of a move by `op`.
    pub fn dest(op: Op) -> Barrier {
        Barrier::of_move(op).0
    }

    /// The barrier on the source directory of a move by `op` (where it differs).
    pub fn source(op: Op) -> Barrier {
        Barrier::of_move(op).1
    }

    fn of_move(op: Op) -> (Barrier, Barrier) {
        use Barrier as B;
        match op {
            Op::Enqueue | Op::EnqueueDelayed | Op::EnqueueWaiting => (B::EnqueueDir, B::EnqueueDir),
            Op::DependenciesMet | Op::DependencyDead | Op::RequeueWaiting => {
                (B::DepsDest, B::DepsSource)
            }
            Op::Claim
            | Op::ClaimExhausted
            | Op::ClaimCorrupt
            | Op::ClaimUnreadable
            | Op::ClaimUndelivered => (B::ClaimDest, B::ClaimSource),
            Op::Renew => (B::RenewDir, B::RenewDir),
            Op::Ack | Op::AckCorrupt => (B::AckDest, B::AckSource),
            Op::Nack | Op::Release | Op::NackExhausted => (B::NackDest, B::NackSource),
            Op::Fail => (B::FailDest, B::FailSource),
            Op::Expire | Op::ExpireExhausted | Op::Due => (B::RecoverDest, B::RecoverSource),
            Op::Requeue => (B::RequeueDest, B::RequeueSource),
        }
    }
}

impl core::fmt::Display for Barrier {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_kebab_case_and_parse_back() {
        assert!(Barrier::ALL.len() <= 64);
        for (i, b) in Barrier::ALL.iter().enumerate() {
            assert_eq!(b.index(), i);
            assert_eq!(Barrier::parse(b.name()), Some(*b));
            assert!(b
                .name()
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c == b'-'));
        }
        assert_eq!(Barrier::parse("ack-barriers"), None);
        assert_eq!(Barrier::dest(Op::Ack).name(), "ack-dest");
        assert_eq!(Barrier::source(Op::Release).name(), "nack-source");
    }
}
