//! Options: what a handle is opened or a queue created with, and their checks.

use crate::admin::receipts::{EvidenceLimits, ReceiptPolicy};
#[cfg(feature = "faults")]
use crate::disk::sys::FaultPlan;
use crate::error::{Cause, ErrorKind, Result};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::disk::identity::QUEUE_VERSION;

/// Which durability barriers a queue issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every barrier on every operation, batch operations included (the default).
    #[default]
    Strict,
    /// Single operations as `Strict`; `enqueue_batch` and `ack_batch` share one barrier per
    /// directory (and one `syncfs` for file contents) across the batch.
    Batched,
    /// No fsync at all: for tests and throwaway queues. A crash can lose anything. (On tmpfs
    /// and ramfs every policy makes no fsync, as theirs does nothing: [`Queue::barriers`](crate::Queue::barriers).)
    None,
}

/// How [`Queue::open_with`](crate::Queue::open_with) opens a queue ([`Options::mode`]; `create` ignores it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OpenMode {
    /// To use it: enqueue, claim, settle (the default). Opening makes the rename probe of
    /// [`Queue::open`](crate::Queue::open) in `tmp/`.
    #[default]
    ReadWrite,
    /// To read it (`list`, `show`, [`Queue::list`](crate::Queue::list), [`Queue::find`](crate::Queue::find), [`Queue::open_job`](crate::Queue::open_job),
    /// [`Queue::status`](crate::Queue::status)): as `ReadWrite`, with the same refusals, except that opening
    /// writes nothing (no rename probe in `tmp/`), so a command that only looks, run every
    /// 30 s on an SD card, costs it no writes. A change made through this handle works as
    /// through a read-write one, except that a filesystem without
    /// `renameat2(RENAME_NOREPLACE)` (other than NFS, which is refused here too) is not
    /// refused in advance: its first rename fails with `EINVAL`, not done.
    ReadOnly,
    /// To check it ([`Queue::fsck`](crate::Queue::fsck), [`Queue::status`](crate::Queue::status)): a shard that is a symlink
    /// (`ready/03 -> /elsewhere`), a file, or a directory of another owner than `ready/`
    /// refuses no open: it is never followed nor listed, the handle holds no job there, a
    /// claim passes it over, an enqueue picks another shard, and `fsck` reports it. A layout
    /// split across filesystems is not refused (fsck reports it). Like `ReadOnly`, opening
    /// writes nothing; [`Queue::fsck_quarantine`](crate::Queue::fsck_quarantine) makes the rename probe before it moves
    /// anything.
    Check,
}

/// Settings for opening or creating a queue.
#[derive(Clone, Debug)]
pub struct Options {
    /// Barrier policy. Default [`Durability::Strict`].
    pub durability: Durability,
    /// How [`Queue::open_with`](crate::Queue::open_with) opens the queue: read-write (the default), read-only or to
    /// check it. Ignored by [`Queue::create`](crate::Queue::create).
    pub mode: OpenMode,
    /// Largest payload this handle enqueues and claims, bytes (at least 1). Default 16 MiB
    /// ([`DEFAULT_MAX_PAYLOAD`]). Not stored in the queue: each handle has its own. An
    /// enqueue over it is refused ([`ErrorKind::PayloadTooLarge`], not done). A claim that
    /// meets a job over it (enqueued through a handle with a higher limit) does not hand it
    /// out: it dead-letters the job with reason `toolarge` ([`crate::Reason::TOO_LARGE`])
    /// and claims the next one, so give workers at least the producers' limit. Settling a
    /// lease taken over with [`Queue::lease_from_handle`](crate::Queue::lease_from_handle) is not limited.
    pub max_payload: u64,
    /// Shards (1..=256) for a new queue; ignored when opening. Default 8.
    pub shards: u16,
    /// Delayed-bucket width for a new queue, ns; ignored when opening. Default 60 s.
    pub delayed_bucket_ns: u64,
    /// Claims allowed (1..) for a job this handle enqueues without
    /// [`EnqueueOptions::max_attempts`](crate::EnqueueOptions::max_attempts). Default 5.
    /// Not stored in the queue: each job carries its own in its name.
    pub max_attempts: u32,
    /// The lease (visibility timeout) of [`Queue::claim`](crate::Queue::claim) on this handle, more than zero and
    /// at most [`MAX_LEASE`]; the other claims take theirs as an argument. Default 30 s.
    pub lease: Duration,
    /// Fault injection for tests and the crash lab (feature `faults`).
    #[cfg(feature = "faults")]
    #[doc(hidden)]
    pub faults: Option<Arc<FaultPlan>>,
    /// Publish with a named temp file even where `O_TMPFILE` works (tests of the fallback;
    /// feature `faults`).
    #[cfg(feature = "faults")]
    #[doc(hidden)]
    pub force_named_publish: bool,
    /// Format version for a new queue (1, 2 or 3); ignored when opening. Default
    /// [`QUEUE_VERSION`]; 1 (2) makes a queue that SteadQ builds before version 2 (3) can
    /// open.
    pub format_version: u32,
    /// Aging for claims of this handle (the starvation rule): `Some(a)` raises a ready job's
    /// effective priority by one level per `a` of age (age = now minus the creation time in
    /// its id), up to the top level, where ties go to the older job. `None` (the default):
    /// strict priority, a lower level waits while any higher level has a ready job.
    pub aging: Option<Duration>,
    /// Receipt policy for a new version-2 queue; ignored when opening (see
    /// [`Queue::set_receipt_policy`](crate::Queue::set_receipt_policy)). Default [`ReceiptPolicy::Job`].
    pub receipts: ReceiptPolicy,
    /// Evidence log limits for a new version-2 queue; ignored when opening. Default 16 MiB,
    /// keep 3.
    pub evidence: EvidenceLimits,
    /// A progress counter for long calls on this handle, for a progress display: each
    /// directory entry a walk reads ([`Queue::fsck`](crate::Queue::fsck),
    /// [`Queue::status`](crate::Queue::status), [`Queue::list`](crate::Queue::list) and the
    /// listings of the batch calls) adds 1, and so does each job that
    /// [`Queue::requeue_dead`](crate::Queue::requeue_dead) then tries to move
    /// and each receipt that [`Queue::compact`](crate::Queue::compact) then looks at and
    /// removes. Only added to (relaxed), never reset or read by the library; share it with
    /// the thread that draws. `None` (the default): nothing is counted.
    pub progress: Option<Arc<AtomicU64>>,
}

/// The longest lease (visibility timeout) a claim or renew accepts: 7 days. A longer one
/// would keep a crashed worker's job hidden for weeks.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 86_400);

// Recovery treats a deadline further away than this as forged (`disk::scan::lease_expired`).
const _: () = assert!(MAX_LEASE.as_nanos() == crate::disk::scan::LEASE_CAP_NS as u128);

/// The latest not-before time a delay may reach, ns since the Unix epoch: `i64::MAX`
/// (2262-04-11T23:47:16Z), the end of the signed 64-bit nanosecond range that `SystemTime`
/// arithmetic and the other tools reading these names can hold.
pub(crate) const LATEST_DUE_NS: u64 = i64::MAX as u64;

pub(super) fn invalid(what: &'static str) -> Cause {
    Cause::not_done(ErrorKind::InvalidArgument(what), None)
}

/// Check a lease: longer than zero, at most [`MAX_LEASE`].
pub(crate) fn check_lease(lease: Duration) -> Result<()> {
    if lease.is_zero() {
        return Err(invalid("lease must be longer than zero"));
    }
    if lease > MAX_LEASE {
        return Err(invalid("lease must be at most 7 days (MAX_LEASE)"));
    }
    Ok(())
}

/// The wall time `delay` after `now_ns`, refused past [`LATEST_DUE_NS`] (year 2262).
pub(crate) fn due_after(now_ns: u64, delay: Duration) -> Result<u64> {
    let d = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
    match now_ns.checked_add(d) {
        Some(t) if t <= LATEST_DUE_NS => Ok(t),
        _ => Err(invalid("delay reaches past the year 2262")),
    }
}

impl Options {
    /// Check every option, naming the one out of range. `Queue::create` and `Queue::open_with`
    /// call it first, so a bad option changes nothing.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] (not done): shards outside 1..=256, a zero delayed
    /// bucket width, zero max attempts, a zero payload limit, a lease that is zero or longer
    /// than [`MAX_LEASE`], a format version other than 1, 2 or 3, a zero evidence limit, or
    /// an aging interval under 1 ms.
    pub fn validate(&self) -> crate::Result<()> {
        Ok(self.check()?)
    }

    /// [`Options::validate`] inside the crate.
    pub(crate) fn check(&self) -> Result<()> {
        if !(1..=256).contains(&self.shards) {
            return Err(invalid("shards must be 1..=256"));
        }
        if self.delayed_bucket_ns == 0 {
            return Err(invalid("delayed bucket width must be > 0"));
        }
        if self.max_attempts == 0 {
            return Err(invalid("max attempts must be at least 1"));
        }
        if self.max_payload == 0 {
            return Err(invalid("max payload must be at least 1 byte"));
        }
        if !(1..=QUEUE_VERSION).contains(&self.format_version) {
            return Err(invalid("format version must be 1, 2 or 3"));
        }
        if self.aging.is_some_and(|a| a < Duration::from_millis(1)) {
            return Err(invalid("aging must be at least 1 ms"));
        }
        if self.evidence.max_bytes == 0 {
            return Err(invalid("the evidence limit must be > 0"));
        }
        check_lease(self.lease)
    }
}

/// The default payload limit: 16 MiB (16,777,216 bytes). `Options::max_payload` and the
/// CLI's `--max-payload` start from it.
pub const DEFAULT_MAX_PAYLOAD: u64 = 16 << 20;

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Strict,
            mode: OpenMode::ReadWrite,
            max_payload: DEFAULT_MAX_PAYLOAD,
            shards: 8,
            delayed_bucket_ns: 60_000_000_000,
            max_attempts: 5,
            lease: Duration::from_secs(30),
            #[cfg(feature = "faults")]
            faults: None,
            #[cfg(feature = "faults")]
            force_named_publish: false,
            format_version: QUEUE_VERSION,
            aging: None,
            receipts: ReceiptPolicy::Job,
            evidence: EvidenceLimits::default(),
            progress: None,
        }
    }
}
