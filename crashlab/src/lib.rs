//! crashlab: block-level crash-state testing for SteadQ.
//!
//! - [`logwrites`]: reader for the dm-log-writes format (kernel dm-log-writes, QEMU blklogwrites);
//! - [`apply`]: applies log entries to an image, collecting in-band marks;
//! - [`marks`]: the in-band mark format, the marks file and the guest's mark writer;
//! - [`invariants`]: the crash invariants, shared by the soak and the rig's verifier;
//! - [`args`]: the binaries' command lines (argh, usage errors exit 2).
//!
//! - power-cut rig: [`record`] (the agent's wire records), [`diskmodel`] (the virtual board's
//!   disk at a cut), [`relay`] (GPIO relay via `gpioset`), [`chart`] (CSV, summary, SVG);
//! - [`invariants`]: the crash invariants, shared by the soak and both rigs; [`rng`].
//!
//! Binaries: `replay` (host), `steadq-workload` (guest), `steadq-verify` (host, per state),
//! `soak` (the kill soak), `powercut-agent` (device), `powercut` (controller).
pub mod apply;
pub mod args;
pub mod chart;
pub mod diskmodel;
pub mod invariants;
pub mod logwrites;
pub mod marks;
pub mod record;
pub mod relay;
pub mod rng;
