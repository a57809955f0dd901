//! SteadQ: a durable, multi-process job queue where a directory is the queue.
//!
//! No daemon, no broker, no database: a job is one file, its name is its state, and every
//! state change is one `renameat2(RENAME_NOREPLACE)` (or a `linkat` of an `O_TMPFILE`)
//! followed by the fsyncs that make it durable. Producers and workers are plain processes on
//! one Linux machine pointing at one directory. Delivery is at-least-once.
//!
//! ```
//! use std::time::Duration;
//! use steadq::{ClaimOptions, EnqueueOptions, Options, Queue};
//! # let dir = std::env::temp_dir().join(format!("steadq-lib-doc-{}", std::process::id()));
//! let q = Queue::create(&dir, Options::default())?; // or Queue::open(&dir)
//! q.enqueue(b"transcode clip-42.mov")?;
//! let later = EnqueueOptions { delay: Some(Duration::from_secs(60)), ..Default::default() };
//! q.enqueue_with(b"send the digest", &later)?;
//! let o = ClaimOptions { lease: Some(Duration::from_secs(60)), ..Default::default() };
//! if let Some(lease) = q.claim_with(&o)? {
//!     assert_eq!(lease.payload()?, b"transcode clip-42.mov");
//!     lease.ack()?; // or lease.nack(delay), lease.fail(reason); dropping releases it
//! }
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), steadq::Error>(())
//! ```
//!
//! The core calls: [`Queue::create`], [`Queue::open`] ([`Queue::open_with`] and
//! [`Options`]), [`Queue::enqueue`] and [`Queue::enqueue_with`] ([`EnqueueOptions`]: delay,
//! priority, max attempts, idempotency key, wait for room), [`Queue::claim`] and
//! [`Queue::claim_with`] ([`ClaimOptions`]: lease, wait, stop flag), and on the [`Lease`]:
//! [`Lease::payload`], [`Lease::ack`], [`Lease::nack`], [`Lease::fail`], [`Lease::renew`].
//!
//! # Outcomes are types
//!
//! A mutating call returns `Ok` only when it is **done**. Its error type says what else it
//! can have been, one variant per outcome: **not done** (nothing changed), **indeterminate**
//! (it may have happened, or may not survive a crash: look before redoing it), and where an
//! operation has more to say, its own variants. A read-only call changed nothing: its error
//! is always [`Error::NotDone`]. Every variant holds a [`Cause`] (what, where, the errno).
//! `?` turns every per-operation type into an [`Error`], so a function that makes several
//! calls returns [`steadq::Result<T>`](Result), `Result<T, steadq::Error>`.
//!
//! | operation | error type | possible outcomes |
//! |---|---|---|
//! | `Queue::open`, `open_with`, `status`, `list`, `list_each`, `find`, `read_job`, `open_job`, `limits`, `capacity_use`, `live_keys`, `fsck`, `Options::validate` | [`Error`] | `NotDone` only: read-only |
//! | `enqueue`, `enqueue_with`, `enqueue_reader` (and `TypedQueue`, `AsyncQueue` enqueues) | [`EnqueueError`] | `NotDone` (no job made); `Indeterminate { id, .. }`: the job `id` may exist, [`Queue::find`] tells |
//! | `Lease::renew` | [`RenewError`] | `NotDone` (the lease is as it was); `LeaseLost`; `Indeterminate` (the lease follows whichever name exists) |
//! | `Lease::ack`, `nack`, `fail`, `release` (and `TypedLease`'s) | [`SettleError`] | `NotDone { lease, .. }`: the lease is handed back, still holding the job; `LeaseLost`; `Indeterminate` |
//! | `Queue::create`, `claim`, `claim_with`, `claim_batch`, `lease_from_handle` (it dead-letters a corrupt job), `ack_batch`, `enqueue_batch`, `recover` and `requeue_dead` (their report's `first_error`; `into_result()` for `?`), `make_due`, `purge_dead`, `fsck_quarantine`, `set_limits`, `set_receipt_policy`, `compact`, `compact_keys` | [`Error`] | `NotDone`; `Indeterminate` (a batch that failed after part of it was done included) |
//!
//! [`RecoverReport::first_error`] and [`RequeueReport::first_error`] are [`Error`]s too:
//! not done if nothing moved, indeterminate once anything did. What went wrong is the
//! [`ErrorKind`] of the cause inside (`kind()` on every type); a lost lease is
//! [`ErrorKind::LeaseLost`], always not done.
//!
//! Memory: a claim verifies a job file in 64 KiB chunks, so it costs O(64 KiB) whatever the
//! payload's size; [`Lease::payload`] costs the payload once (a job file of up to 64 KiB was
//! kept from the claim's one read); [`Lease::reader`] streams it, O(1) beyond the caller's
//! buffer, checking its digest again (read it to the end before acting).
//!
//! Where to look: names are parsed in `disk/name.rs` (and only in `disk/scan.rs` from
//! directory listings); the state table is `TRANSITIONS` in `disk/state.rs`; every rename
//! happens in
//! `ops/transition.rs` (`Queue::move_job`); every syscall, fsync included, goes through
//! `disk/sys.rs` (`Sys`). `DESIGN.md` documents the bytes, the table and the crash cases.
//!
//! The layers, one folder each (paths from `crates/steadq/`):
//!
//! ```text
//! src/lib.rs            the crate: layers, public re-exports
//! src/error.rs          Error (outcome-typed), Cause (what, where), ErrorKind, Outcome
//! src/queue/mod.rs      the queue handle (Queue) and what its clones share
//! src/queue/options.rs  Options, OpenMode, Durability and their checks
//! src/queue/create.rs   create: the layout's directories, then the identity, published last
//! src/queue/open.rs     open/open_with: the checks, then the handle's assembly
//! src/queue/identity_file.rs  steadq.queue read, and published through a temp file
//! src/queue/dirs.rs     the directories a handle holds, opened once
//! src/queue/filesystem.rs     what a filesystem must offer (NFS refused, rename probe, ...)
//! src/queue/survey.rs   what a directory holds already (jobs of another queue, orphan shards)
//! src/queue/foreign.rs  root entries that are not the queue's, refused at create
//! src/queue/info.rs     what a handle tells of itself (root, id, options, is_current)
//! src/disk/layout.rs    the root layout: every root name once; shard and bucket names
//! src/disk/identity.rs  the identity file's text (steadq.queue), encoded and decoded
//! src/disk/format.rs    the job envelope (128-byte header, SHA-256 digests, verify)
//! src/disk/name.rs      job names, parsed once into JobName; the delay due rule (delay_due)
//! src/disk/tempname.rs  names of the files in tmp/ (TempName), whose writer they name
//! src/disk/scan.rs      directory listings turned into typed entries; the lease expiry rule
//! src/disk/clock.rs     wall and boot clocks, the boot id
//! src/disk/outside.rs   a file outside the queue opened to write, its final name never followed
//! src/disk/sys.rs       every syscall, each through the fault plan when one is set
//! src/disk/counts.rs    the bytes of steadq.counts (the totals file)
//! src/disk/fault.rs     the fault plan that can fail, skip or stop after any call
//! src/disk/state.rs      the state table shared with DESIGN.md
//! src/ops/transition.rs where a rename happens (move_job) and its barriers
//! src/ops/group.rs      group commit: threads of a process share directory fsyncs
//! src/ops/enqueue.rs    enqueue, enqueue_with (EnqueueOptions, EnqueueError): O_TMPFILE +
//!                       linkat, or a named temp file + rename
//! src/ops/lease.rs      the lease guard (renew, ack, nack, fail, release; RenewError,
//!                       SettleError), ack_batch, ClaimOptions
//! src/ops/lease/claim.rs   claim, claim_with; scheduling: levels, candidates, pick, claim_batch
//! src/ops/lease/sweep.rs   the claim's listing of one slot, expiring its leases
//! src/ops/lease/take.rs    taking one candidate: rename, open, twin check, give back
//! src/ops/lease/refusal.rs jobs this user may not move, remembered and passed over
//! src/ops/lease/verify.rs  a leased file verified in 64 KiB chunks; lease_from_handle
//! src/ops/payload.rs    claim verification in 64 KiB chunks; PayloadReader (Lease::reader)
//! src/ops/recover.rs    recovery of expired leases, due delayed jobs, stale temp files
//! src/ops/shards.rs     which ready shards a handle knows empty (inotify), so claims skip them
//! src/ops/wait.rs       the blocking claim on inotify and timers
//! src/ops/capacity.rs   capacity limits (steadq.limits), the inotify tally, the wait for room
//! src/ops/keys.rs       idempotency keys (keys/<sha256>), compact_keys
//! src/admin/walk.rs     the walk over every entry of the job areas, each classified once
//! src/admin/view.rs     list, find, reading one job's file
//! src/admin/status.rs   status: counts, bytes and ages per state, in one shared pass
//! src/admin/dead.rs     requeue and purge of dead-letters, make_due of delayed jobs
//! src/admin/drain.rs    wait_empty: until no job is ready, leased or delayed (inotify)
//! src/admin/counts.rs   the totals that only go up (acked, dead), kept across compaction
//! src/admin/fsck.rs     fsck: the problems it reports, and the run
//! src/admin/fsck/jobs.rs       its check of the job files, duplicates, a wrong identity
//! src/admin/fsck/layout.rs     its check of the layout: root, shards, levels, tmp/, sharing
//! src/admin/fsck/side.rs       its check of the limits file, the evidence log and keys/
//! src/admin/fsck/quarantine.rs the report and --quarantine's moves
//! src/admin/receipts.rs receipt policy, evidence log and its rotation, compaction
//! src/typed.rs         TypedQueue<T>: serde values with postcard (feature `serde`)
//! src/asyncq.rs        AsyncQueue: async enqueue and claim on tokio's reactor (feature `tokio`)
//! ```
//!
//! Beside this crate (`crates/steadq`) in the repository: `crates/stowq` (StowQ, the same
//! lifecycle on S3-compatible object storage), the `steadq` binary (`src/`, package
//! `steadq-cli`), `crashlab/` and `bench/`.

#![deny(missing_docs)]
// One `unsafe` block in the library: the `sync_file_range(2)` call of `Sys::write_out`
// (src/disk/sys.rs), which rustix does not wrap. Everything else is safe code.
#![deny(unsafe_code)]

// Declared in the order rustdoc lists `Queue`'s methods: opening it, then the operations
// (enqueue and claim first), then administration, then what a handle holds. Blank lines
// keep rustfmt from sorting them (it sorts only adjacent `mod` lines).
mod queue;

mod ops;

mod admin;

#[path = "queue/info.rs"]
mod queue_info;

#[cfg(feature = "tokio")]
mod asyncq;
mod disk;
mod error;
#[cfg(feature = "serde")]
mod typed;

pub use disk::{format, outside};
// Test hooks (feature `faults`, hidden from the docs): the on-disk layer's modules as the
// tests and the crash lab read them.
#[cfg(feature = "faults")]
#[doc(hidden)]
pub use disk::{layout, name, scan, state};
/// The syscall layer and its fault plan (feature `faults`: for tests and the crash lab), and
/// what a test needs to know of the filesystem under a directory.
#[cfg(feature = "faults")]
#[doc(hidden)]
pub mod sys {
    pub use crate::disk::sys::*;
    pub use crate::ops::group::{one_fsync_per_move, shared_barriers};
    pub use crate::queue::publishes_named;
}

pub use admin::fsck::{FsckReport, Problem, ProblemKind};
pub use admin::receipts::{CompactReport, EvidenceLimits, EvidenceLine, ReceiptPolicy};
pub use admin::view::{
    GroupUse, HeldBack, Listed, RequeueReport, StateBytes, Status, StatusOptions,
};
#[cfg(feature = "tokio")]
pub use asyncq::AsyncQueue;
#[doc(hidden)]
pub use disk::clock::Clock;
pub use disk::layout::{EVIDENCE_FILE, IDENTITY_FILE, KEYS_DIR, LIMITS_FILE};
pub use disk::name::{delay_due, due_wall_ns, BootDue, GroupName, JobId, JobName, Kind, Reason};
pub use disk::name::{DEFAULT_PRIORITY, PRIORITY_LEVELS};
pub use disk::scan::Foreign;
pub use disk::state::State;
pub use disk::sys::Call;
pub use error::{Cause, Error, ErrorKind, OsErrno, Outcome};
/// `Result<T>` is `Result<T, steadq::Error>`: what every call returns but the enqueues (their
/// [`EnqueueError`]) and a lease's renew and settling calls ([`RenewError`], [`SettleError`]),
/// all of which `?` turns into an [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;
pub use admin::counts::COUNTS_LOCK_WAIT;
pub use ops::capacity::{CapacityUse, Limits, MAX_GROUP_LIMIT};
pub use ops::deps::MAX_AFTER;
pub use ops::enqueue::{EnqueueError, EnqueueOptions};
pub use ops::keys::{Enqueued, Key, KEY_ORPHAN_AFTER, KEY_WAIT_MAX, TOMBSTONE_KEEP};
pub use ops::lease::{
    backoff, AckedNext, ClaimOptions, Lease, Nacked, Receipt, RenewError, SettleError,
};
pub use ops::payload::PayloadReader;
pub use ops::recover::RecoverReport;
pub use queue::{
    orphan_shards, Durability, Identity, OpenMode, Options, OrphanShards, Queue,
    DEFAULT_MAX_PAYLOAD, MAX_LEASE, QUEUE_VERSION,
};
pub use queue_info::BARRIERS_VOIDED;
#[cfg(feature = "serde")]
pub use typed::{TypedLease, TypedQueue};
