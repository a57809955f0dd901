//! crashlab: block-level crash-state testing for SteadQ.
//!
//! - [`logwrites`]: reader for the dm-log-writes format (kernel dm-log-writes, QEMU blklogwrites);
//! - [`apply`]: applies log entries to an image, collecting in-band marks;
//! - [`marks`]: the in-band mark format and the workload/verifier command-line interface;
//! - [`placeholder`]: the placeholder queue workload's shared definitions (job content, layout).
//!
//! Binaries: `replay` (host), `crashlab-workload` (guest), `crashlab-verify` (host, per state).
pub mod apply;
pub mod invariants;
pub mod logwrites;
pub mod marks;
pub mod placeholder;
