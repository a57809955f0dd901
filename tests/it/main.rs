//! The integration suite, one binary (one link step). Every test works on real directories
//! under `$STEADQ_TEST_DIR` (default: the system temp dir), so the `filesystems` test can run
//! the whole suite again on loop-mounted ext4, xfs, btrfs and tmpfs.

mod access;
mod budget;
mod capacity;
mod cli;
mod clock_mounts;
mod common;
mod contention;
mod design;
mod enqueue_stream;
mod faults;
mod field;
mod filesystems;
mod group_stress;
mod hostile;
mod identity;
mod keys;
mod lifecycle;
mod payload_out;
mod perf;
mod priority;
mod readonly;
mod stream;
mod trust;
mod worker_process;
