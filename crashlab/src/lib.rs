//! crashlab: block-level crash-state testing for SteadQ.
//!
//! - [`logwrites`]: reader for the dm-log-writes format (kernel dm-log-writes, QEMU blklogwrites);
//! - [`apply`]: applies log entries to an image, collecting in-band marks;
//! - [`marks`]: the in-band mark format, the marks file and the guest's mark writer;
//! - [`invariants`]: the crash invariants, shared by the soak and the rig's verifier;
//! - [`args`]: the binaries' command lines (argh, usage errors exit 2).
//!
//! Binaries: `replay` (host), `steadq-workload` (guest), `steadq-verify` (host, per state),
//! `soak` (the kill soak).
pub mod apply;
pub mod args;
pub mod invariants;
pub mod logwrites;
pub mod marks;
