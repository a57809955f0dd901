//! The integration suite, one binary (one link step). Every test works on real directories
//! under `$STEADQ_TEST_DIR` (default: the system temp dir), so the `filesystems` test can run
//! the whole suite again on loop-mounted ext4, xfs, btrfs and tmpfs.

mod access;
mod arguments;
mod budget;
mod capacity;
mod claim;
mod cli_reference;
mod clock_mounts;
mod common;
mod completions;
mod contention;
mod delays_and_clocks;
mod deps;
mod design;
mod directories;
mod enqueue_stream;
mod faults;
mod filesystems;
mod fsck;
mod full_disk;
mod group_stress;
mod groups;
mod hostile;
mod identity;
mod init;
mod keys;
mod leases;
mod levels;
mod lifecycle;
mod open_file_limit;
mod payload_out;
mod perf;
mod priority;
mod reach;
mod readonly;
mod refused_jobs;
mod stdio;
mod stream;
mod terminal;
mod trust;
mod unreadable;
mod users;
mod worker;
mod worker_process;
mod worker_settle;
