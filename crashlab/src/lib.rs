//! crashlab: block-level crash-state testing for SteadQ.
//!
//! - [`logwrites`]: reader for the dm-log-writes format (kernel dm-log-writes, QEMU blklogwrites);
//! - [`apply`]: applies log entries to an image, collecting in-band marks;
//! - [`marks`]: the in-band mark format and the workload/verifier command-line interface;
//! - [`placeholder`]: the placeholder queue workload's shared definitions (job content, layout).
//!
//! - power-cut rig: [`record`] (the agent's wire records), [`diskmodel`] (the virtual board's
//!   disk at a cut), [`relay`] (GPIO relay via `gpioset`), [`chart`] (CSV, summary, SVG);
//! - [`invariants`]: the crash invariants, shared by the soak and both rigs; [`rng`].
//!
//! Binaries: `replay` (host), `crashlab-workload` (guest), `crashlab-verify` (host, per state),
//! `powercut-agent` (device), `powercut` (controller).
pub mod apply;
pub mod chart;
pub mod diskmodel;
pub mod invariants;
pub mod logwrites;
pub mod marks;
pub mod placeholder;
pub mod record;
pub mod relay;
pub mod rng;
