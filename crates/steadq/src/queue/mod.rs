//! The queue handle: [`Queue`], what its clones share, and what it tells of itself. Beside
//! it, one idea a file: `options.rs` (what a handle is opened with), `open.rs` (opening),
//! `create.rs` (creating), `identity_file.rs` (`steadq.queue`), `dirs.rs` (the directories
//! a handle holds), `open_dirs.rs` (opening them), `filesystem.rs` (what a filesystem must offer), `survey.rs` (what a
//! directory holds already), `foreign.rs` (entries that are not the queue's).
//!
//! The root layout:
//!
//! ```text
//! <root>/steadq.queue        identity (text, see Identity)
//! <root>/tmp/                named temp files (fallback publishing only)
//! <root>/ready/<shard>/      ready and leased jobs; shard = 2 hex digits
//! <root>/delayed/<bucket>/   delayed jobs; bucket = 16 hex of not_before_ns / bucket width
//! <root>/dead/<bucket>/      dead jobs; bucket = 16 hex of death time / 1 day
//! <root>/prio/<l>/<shard>/   ready and leased jobs of priority l (version 3; l = 0..=7 but
//!                            the default 3, whose jobs stay in ready/); made on the first
//!                            placement of a job at that level (see ops/levels.rs)
//! <root>/receipts/<shard>/   receipts of acked jobs
//! <root>/quarantine/...      foreign or corrupt entries moved by `fsck --quarantine`
//! <root>/evidence.log        digests of compacted receipts (append-only)
//! <root>/evidence.<hex16>.log rotated evidence (version 2; the suffix is the rotation time, unix ns)
//! ```

use crate::disk::clock::Clock;
pub use crate::disk::identity::Identity;
use crate::disk::sys::Sys;
use crate::error::Cause;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::OnceLock;

pub use crate::disk::identity::QUEUE_VERSION;
pub use crate::disk::layout::IDENTITY_FILE;

// rustdoc lists `Queue`'s methods in declaration order (rustfmt keeps these sorted): create,
// then open; the other files here hold no public method.
mod create;
mod dirs;
mod filesystem;
mod foreign;
mod identity_file;
mod open;
mod open_dirs;
mod options;
mod survey;

pub(crate) use dirs::*;
#[cfg(feature = "faults")]
pub use filesystem::publishes_named;
pub(crate) use filesystem::*;
use foreign::*;
pub(crate) use identity_file::*;
use open::*;
use open_dirs::*;
pub(crate) use options::*;
pub use options::{Durability, OpenMode, Options, DEFAULT_MAX_PAYLOAD, MAX_LEASE};
pub(crate) use survey::*;
pub use survey::{orphan_shards, OrphanShards};

/// An open queue: a cheap handle (an `Arc` inside). Clone it to share the queue between
/// threads; every clone uses the same directory handles, claim cursor and group-commit
/// state (concurrent operations of the clones share directory fsyncs). A [`crate::Lease`]
/// holds a clone, so it can outlive the handle it came from and move to another thread.
///
/// Do not keep using a queue in a child after `fork` without `exec`: random job ids and lease
/// tokens are drawn 16 at a time per thread, and a forked child would repeat its parent's.
#[derive(Debug, Clone)]
pub struct Queue {
    pub(crate) shared: std::sync::Arc<Shared>,
}

// The handle's state is reached through `Deref` inside the crate (`self.sys`, `self.dirs`);
// `Shared` has no public field or method.
#[doc(hidden)]
impl core::ops::Deref for Queue {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// What every clone of a [`Queue`] shares (not nameable outside the crate).
#[derive(Debug)]
#[doc(hidden)]
pub struct Shared {
    pub(crate) root: PathBuf,
    pub(crate) sys: Sys,
    pub(crate) ident: Identity,
    pub(crate) dirs: Dirs,
    /// Serialises evidence appends and rotation within this process.
    pub(crate) evidence_lock: Mutex<()>,
    pub(crate) opts: Options,
    /// Whether this handle issues durability barriers: false under [`Durability::None`], and
    /// on a filesystem whose fsync does nothing ([`volatile_fs`]). See [`Queue::barriers`].
    pub(crate) barriers: bool,
    /// Whether an enqueue through `tmp/` leaves out the fsync of `tmp/` after its rename
    /// (btrfs: [`logs_fsync_per_inode`]). The old name's removal need not be durable: a name
    /// left in `tmp/` by a crash is an abandoned temp file that recovery unlinks, which
    /// leaves the job's name in place. The block rig checked it on btrfs (DESIGN.md).
    pub(crate) tmp_unsynced: bool,
    /// Whether this handle made the rename probe ([`probe_rename`]): at open, or later by
    /// [`Queue::probe_renames`]. A handle opened to read is opened without it.
    pub(crate) renames_probed: std::sync::atomic::AtomicBool,
    pub(crate) clock: Clock,
    pub(crate) cursor: Mutex<Cursor>,
    pub(crate) shards: crate::ops::shards::Shards,
    pub(crate) group: crate::ops::group::Group,
    pub(crate) warned_foreign: std::sync::atomic::AtomicBool,
    /// Jobs this handle's claims moved to dead (corrupt, too large, out of attempts).
    pub(crate) claim_dead: std::sync::atomic::AtomicU64,
    /// Boot-clock time (ns, 0: never) of this handle's last pass making due delayed jobs
    /// ready before a claim (`ops/lease.rs`, `claim_sweep_with`).
    pub(crate) promoted_at: std::sync::atomic::AtomicU64,
    /// What this handle's last reading of the delayed buckets later than the current
    /// wall-clock one found (`ops/recover.rs`).
    pub(crate) later_buckets: crate::ops::recover::LaterBuckets,
    /// Per ready shard: this handle could not read it at its last listing (`chmod 000`).
    pub(crate) unreadable: Vec<std::sync::atomic::AtomicBool>,
    /// Per ready shard: its unreadability was logged (once per handle).
    pub(crate) warned_unreadable: Vec<std::sync::atomic::AtomicBool>,
    /// Per ready shard: at its last listing it was refused by a directory changed within
    /// [`MAKING_WINDOW`](crate::ops::making::MAKING_WINDOW), taken to be still in its
    /// making ([`Queue::in_making`]): looked at again soon, not warned.
    pub(crate) in_making: Vec<std::sync::atomic::AtomicBool>,
    /// Paths warned about once per handle: an entry that is not a directory on the path to
    /// a slot, a job this user may not move (at most 256).
    pub(crate) warned_blocks: std::sync::Mutex<Vec<String>>,
    /// Directories found refusing this user the files of a ready slot, or the slot itself
    /// (`ops/levels.rs`, `Queue::avoid_slot`; at most 256).
    pub(crate) unwritable: std::sync::Mutex<Vec<String>>,
    /// The mode new job files and key entries are given (`fchmod`) so that every user who
    /// may read `ready/` may read them, whatever this process's umask; 0: the umask
    /// already allows it (`ops/making.rs`, `Queue::share_job_file`). Found at first use.
    pub(crate) job_mode: OnceLock<u32>,
    /// Jobs this user may not move or open that were warned about by this handle.
    pub(crate) warned_refused: std::sync::atomic::AtomicU32,
    /// Jobs a claim of this handle could not move (`EPERM`, `EACCES`), by id, each with the
    /// `CLOCK_BOOTTIME` ns until which listings pass it over, and the error it gave
    /// (`ops/lease.rs`, at most 4,096).
    pub(crate) refused: std::sync::Mutex<Vec<(u128, u64, Cause)>>,
    /// Groups a claim of this handle found full, and the slots its claims took
    /// (`ops/slots.rs`).
    pub(crate) full_groups: std::sync::Mutex<crate::ops::slots::GroupMemory>,
    /// Capacity tally and reservations (ops/capacity.rs).
    pub(crate) cap: crate::ops::capacity::CapState,
}

fn random_u128() -> u128 {
    let mut b = [0u8; 16];
    // getrandom only fails when the OS has no entropy source at all; there is no safe
    // fallback for a lease token or queue id, so that is fatal.
    getrandom::fill(&mut b).expect("getrandom: no OS entropy source");
    u128::from_ne_bytes(b)
}

/// Random values drawn per `getrandom(2)` call by [`random`].
const POOL: usize = 16;

thread_local! {
    /// Unused random values of this thread, drawn `POOL` at a time (one syscall per 16 job ids
    /// or lease tokens instead of one each). Not fork-safe: a child that forks without exec
    /// and keeps using a queue would repeat its parent's next values; SteadQ's own CLI never
    /// does that, and the crate docs say so.
    static RANDOM_POOL: core::cell::RefCell<([u128; POOL], usize)> =
        const { core::cell::RefCell::new(([0; POOL], POOL)) };
}

/// A fresh 128-bit random value (job ids, lease tokens, temp names) from the thread's pool.
pub(crate) fn random() -> u128 {
    RANDOM_POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.1 == POOL {
            let mut b = [0u8; 16 * POOL];
            getrandom::fill(&mut b).expect("getrandom: no OS entropy source");
            for (v, c) in p.0.iter_mut().zip(b.chunks_exact(16)) {
                *v = u128::from_ne_bytes(c.try_into().unwrap_or_default());
            }
            p.1 = 0;
        }
        let i = p.1;
        p.1 += 1;
        // Each value is used once; zero it so a core dump does not show future tokens.
        core::mem::take(&mut p.0[i])
    })
}
