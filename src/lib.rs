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
//! Where to look: names are parsed in [`name`] (and only in [`scan`] from directory
//! listings); the state table is [`state::TRANSITIONS`]; every rename happens in
//! `transition.rs` (`Queue::move_job`); every syscall, fsync included, goes through
//! [`sys::Sys`]. `DESIGN.md` documents the bytes, the table and the crash cases.

#![deny(missing_docs)]

mod admin;
mod clock;
mod enqueue;
mod error;
pub mod format;
mod fsck;
mod lease;
pub mod name;
mod queue;
mod recover;
pub mod scan;
pub mod state;
pub mod sys;
mod transition;
mod wait;

pub use admin::{Listed, Status, EVIDENCE_FILE};
pub use clock::Clock;
pub use enqueue::EnqueueOptions;
pub use error::{Error, ErrorKind, Outcome, Result};
pub use fsck::{FsckReport, Problem, ProblemKind};
pub use lease::{backoff, Lease, Nacked, Receipt};
pub use name::{JobId, JobName, Kind, Reason};
pub use queue::{Durability, Identity, Options, Queue, IDENTITY_FILE, QUEUE_VERSION};
pub use recover::RecoverReport;
pub use state::State;
