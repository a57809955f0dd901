//! StowQ (feature `s3`) against a real S3-compatible server started by the tests on 127.0.0.1
//! (`common`): moto's server mode, or SeaweedFS with `STOWQ_SERVER=seaweedfs` (`weed` from
//! `STOWQ_WEED` or PATH). `cargo test --features s3 --test s3`; without the server the tests
//! print SKIPPED, unless `STEADQ_REQUIRE_S3=1` (CI) makes that a failure.

mod batch;
mod bench;
mod cli;
mod clock;
mod cluster;

mod common;
mod compact;

mod faults;
mod foreign;
mod harness;
mod lifecycle;
mod priority;
mod race;
mod scale;
mod sigkill;
#[cfg(feature = "tls")]
mod tls;
