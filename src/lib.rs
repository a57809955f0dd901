//! SteadQ: a durable, multi-process job queue where a directory is the queue.
//!
//! No daemon, no broker, no database: a job is one file, its name is its state, and every
//! state change is one `renameat2(RENAME_NOREPLACE)` (or a `linkat` of an `O_TMPFILE`)
//! followed by the fsyncs that make it durable. Producers and workers are plain processes on
//! one Linux machine pointing at one directory. Delivery is at-least-once.
//!
//! ```
//! use std::time::Duration;
//! # let dir = std::env::temp_dir().join(format!("steadq-lib-doc-{}", std::process::id()));
//! let q = steadq::Queue::create(&dir, steadq::Options::default())?;
//! q.enqueue(b"transcode clip-42.mov")?;
//! if let Some(lease) = q.claim_for(Duration::from_secs(60))? {
//!     assert_eq!(lease.payload(), b"transcode clip-42.mov");
//!     lease.ack()?; // or lease.nack(delay), lease.fail(reason); dropping releases it
//! }
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), steadq::Error>(())
//! ```
//!
//! Where to look: names are parsed in [`name`] (and only in `disk/scan.rs` from directory
//! listings); the state table is [`state::TRANSITIONS`]; every rename happens in
//! `ops/transition.rs` (`Queue::move_job`); every syscall, fsync included, goes through
//! `disk/sys.rs` (`Sys`). `DESIGN.md` documents the bytes, the table and the crash cases.
//!
//! The layers, one folder each:
//!
//! ```text
//! src/lib.rs            the crate: layers, public re-exports
//! src/error.rs          errors and the three outcomes (done, not done, indeterminate)
//! src/queue.rs          the queue handle, identity file, layout, create/open
//! src/disk/format.rs    the job envelope (128-byte header, SHA-256 digests, verify)
//! src/disk/name.rs      job names, parsed once into JobName; the delay due rule (delay_due)
//! src/disk/scan.rs      directory listings turned into typed entries; the lease expiry rule
//! src/disk/clock.rs     wall and boot clocks, the boot id
//! src/disk/sys.rs       every syscall, and the fault plan that can fail any of them
//! src/ops/state.rs      the state table shared with DESIGN.md
//! src/ops/transition.rs where a rename happens (move_job) and its barriers
//! src/ops/group.rs      group commit: threads of a process share directory fsyncs
//! src/ops/enqueue.rs    enqueue (O_TMPFILE + linkat, or a named temp file + rename)
//! src/ops/lease.rs      claim and the lease guard (renew, ack, nack, fail, release)
//! src/ops/recover.rs    recovery of expired leases, due delayed jobs, stale temp files
//! src/ops/shards.rs     which ready shards a handle knows empty (inotify), so claims skip them
//! src/ops/wait.rs       the blocking claim on inotify and timers
//! src/ops/capacity.rs   capacity limits (steadq.limits), the inotify tally, enqueue_wait
//! src/ops/keys.rs       idempotency keys (keys/<sha256>), enqueue_unique, compact_keys
//! src/admin/view.rs     list, status, find, requeue and purge of dead-letters
//! src/admin/fsck.rs     fsck and quarantine
//! src/admin/receipts.rs receipt policy, evidence log and its rotation, compaction
//! src/typed.rs         TypedQueue<T>: serde values with postcard (feature `serde`)
//! src/asyncq.rs        AsyncQueue: async enqueue and claim on tokio's reactor (feature `tokio`)
//! src/s3/               StowQ: the lifecycle on S3-compatible object storage (feature `s3`)
//! src/cli/              the `steadq` binary (feature `cli`; `s3://` queues with `s3`)
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod admin;
#[cfg(feature = "tokio")]
mod asyncq;
mod disk;
mod error;
mod ops;
mod queue;
#[cfg(feature = "s3")]
pub mod s3;
#[cfg(feature = "serde")]
mod typed;

pub use disk::{format, name};
#[cfg(feature = "faults")]
pub use disk::{scan, sys};
pub use ops::state;

pub use admin::fsck::{FsckReport, Problem, ProblemKind};
pub use admin::receipts::{CompactReport, EvidenceLimits, ReceiptPolicy, EVIDENCE_FILE};
pub use admin::view::{Listed, StateBytes, Status};
#[cfg(feature = "tokio")]
pub use asyncq::AsyncQueue;
pub use disk::clock::Clock;
pub use disk::name::{delay_due, due_wall_ns, BootDue, JobId, JobName, Kind, Reason};
pub use disk::scan::Foreign;
pub use disk::sys::Call;
pub use error::{Error, ErrorKind, OsErrno, Outcome, Result};
pub use ops::capacity::{CapacityUse, Limits, LIMITS_FILE};
pub use ops::enqueue::EnqueueOptions;
pub use ops::keys::{Enqueued, Key, KEYS_DIR, KEY_ORPHAN_AFTER, TOMBSTONE_KEEP};
pub use ops::lease::{backoff, Lease, Nacked, Receipt};
pub use ops::recover::RecoverReport;
pub use ops::state::State;
pub use queue::{
    Durability, Identity, Options, Queue, DEFAULT_MAX_PAYLOAD, IDENTITY_FILE, MAX_LEASE,
    QUEUE_VERSION,
};
#[cfg(feature = "serde")]
pub use typed::{TypedLease, TypedQueue};
