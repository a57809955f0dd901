//! The queue root: identity file, layout, creating and opening.
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

use crate::admin::receipts::{EvidenceLimits, ReceiptPolicy};
use crate::disk::clock::Clock;
pub use crate::disk::identity::Identity;
use crate::disk::identity::IdentityError;
use crate::disk::layout::{
    receipts_shard, CREATED_DIRS, DEAD_DIR, DELAYED_DIR, READY_DIR, RECEIPTS_DIR, TMP_DIR,
};
use crate::disk::name::{shard_name, JobName};
use crate::disk::name::{TempKind, TempName};
#[cfg(feature = "faults")]
use crate::disk::sys::FaultPlan;
use crate::disk::sys::{fs_name, Barrier, Call, Errno, Sys};
use crate::error::{Error, ErrorKind, Outcome, Result};
use crate::ops::levels::SlotDir;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
#[cfg(feature = "faults")]
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::time::Duration;

pub use crate::disk::identity::QUEUE_VERSION;
pub use crate::disk::layout::IDENTITY_FILE;

/// Which durability barriers a queue issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every barrier on every operation, batch operations included (the default).
    #[default]
    Strict,
    /// Single operations as `Strict`; `enqueue_batch` and `ack_batch` share one barrier per
    /// directory (and one `syncfs` for file contents) across the batch.
    Batched,
    /// No fsync at all: for tests and throwaway queues. A crash can lose anything. (On tmpfs
    /// and ramfs every policy makes no fsync, as theirs does nothing: [`Queue::barriers`].)
    None,
}

/// Settings for opening or creating a queue.
#[derive(Clone, Debug)]
pub struct Options {
    /// Barrier policy. Default [`Durability::Strict`].
    pub durability: Durability,
    /// Largest payload this handle enqueues and claims, bytes (at least 1). Default 16 MiB
    /// ([`DEFAULT_MAX_PAYLOAD`]). Not stored in the queue: each handle has its own. An
    /// enqueue over it is refused ([`ErrorKind::PayloadTooLarge`], not done). A claim that
    /// meets a job over it (enqueued through a handle with a higher limit) does not hand it
    /// out: it dead-letters the job with reason `toolarge` ([`crate::Reason::TOO_LARGE`])
    /// and claims the next one, so give workers at least the producers' limit. Settling a
    /// lease taken over with [`Queue::lease_from_handle`] is not limited.
    pub max_payload: u64,
    /// Shards (1..=256) for a new queue; ignored when opening. Default 8.
    pub shards: u16,
    /// Delayed-bucket width for a new queue, ns; ignored when opening. Default 60 s.
    pub delayed_bucket_ns: u64,
    /// Claims allowed (1..) for a job this handle enqueues without
    /// [`EnqueueOptions::max_attempts`](crate::EnqueueOptions::max_attempts). Default 5.
    /// Not stored in the queue: each job carries its own in its name.
    pub max_attempts: u32,
    /// The lease (visibility timeout) of [`Queue::claim`] on this handle, more than zero and
    /// at most [`MAX_LEASE`]; the other claims take theirs as an argument. Default 30 s.
    pub lease: Duration,
    /// Fault injection for tests and the crash lab (feature `faults`).
    #[cfg(feature = "faults")]
    pub faults: Option<Arc<FaultPlan>>,
    /// Publish with a named temp file even where `O_TMPFILE` works (tests of the fallback;
    /// feature `faults`).
    #[cfg(feature = "faults")]
    pub force_named_publish: bool,
    /// Format version for a new queue (1, 2 or 3); ignored when opening. Default
    /// [`QUEUE_VERSION`]; 1 (2) makes a queue that SteadQ builds before version 2 (3) can
    /// open.
    pub format_version: u32,
    /// Aging for claims of this handle (the starvation rule): `Some(a)` raises a ready job's
    /// effective priority by one level per `a` of age (age = now minus the creation time in
    /// its id), up to the top level, where ties go to the older job. `None` (the default):
    /// strict priority, a lower level waits while any higher level has a ready job.
    pub aging: Option<Duration>,
    /// Receipt policy for a new version-2 queue; ignored when opening (see
    /// [`Queue::set_receipt_policy`]). Default [`ReceiptPolicy::Job`].
    pub receipts: ReceiptPolicy,
    /// Evidence log limits for a new version-2 queue; ignored when opening. Default 16 MiB,
    /// keep 3.
    pub evidence: EvidenceLimits,
}

/// The longest lease (visibility timeout) a claim or renew accepts: 7 days. A longer one
/// would keep a crashed worker's job hidden for weeks.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 86_400);
// Recovery treats a deadline further away than this as forged (`disk::scan::lease_expired`).
const _: () = assert!(MAX_LEASE.as_nanos() == crate::disk::scan::LEASE_CAP_NS as u128);

/// The latest not-before time a delay may reach, ns since the Unix epoch: `i64::MAX`
/// (2262-04-11T23:47:16Z), the end of the signed 64-bit nanosecond range that `SystemTime`
/// arithmetic and the other tools reading these names can hold.
pub(crate) const LATEST_DUE_NS: u64 = i64::MAX as u64;

fn invalid(what: &'static str) -> Error {
    Error::not_done(ErrorKind::InvalidArgument(what), None)
}

/// Check a lease: longer than zero, at most [`MAX_LEASE`].
pub(crate) fn check_lease(lease: Duration) -> Result<()> {
    if lease.is_zero() {
        return Err(invalid("lease must be longer than zero"));
    }
    if lease > MAX_LEASE {
        return Err(invalid("lease must be at most 7 days (MAX_LEASE)"));
    }
    Ok(())
}

/// The wall time `delay` after `now_ns`, refused past [`LATEST_DUE_NS`] (year 2262).
pub(crate) fn due_after(now_ns: u64, delay: Duration) -> Result<u64> {
    let d = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
    match now_ns.checked_add(d) {
        Some(t) if t <= LATEST_DUE_NS => Ok(t),
        _ => Err(invalid("delay reaches past the year 2262")),
    }
}

impl Options {
    /// Check every option, naming the one out of range. `Queue::create` and `Queue::open_with`
    /// call it first, so a bad option changes nothing.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] (not done): shards outside 1..=256, a zero delayed
    /// bucket width, zero max attempts, a zero payload limit, a lease that is zero or longer
    /// than [`MAX_LEASE`], a format version other than 1, 2 or 3, a zero evidence limit, or
    /// an aging interval under 1 ms.
    pub fn validate(&self) -> Result<()> {
        if !(1..=256).contains(&self.shards) {
            return Err(invalid("shards must be 1..=256"));
        }
        if self.delayed_bucket_ns == 0 {
            return Err(invalid("delayed bucket width must be > 0"));
        }
        if self.max_attempts == 0 {
            return Err(invalid("max attempts must be at least 1"));
        }
        if self.max_payload == 0 {
            return Err(invalid("max payload must be at least 1 byte"));
        }
        if !(1..=QUEUE_VERSION).contains(&self.format_version) {
            return Err(invalid("format version must be 1, 2 or 3"));
        }
        if self.aging.is_some_and(|a| a < Duration::from_millis(1)) {
            return Err(invalid("aging must be at least 1 ms"));
        }
        if self.evidence.max_bytes == 0 {
            return Err(invalid("the evidence limit must be > 0"));
        }
        check_lease(self.lease)
    }
}

/// The default payload limit: 16 MiB (16,777,216 bytes). `Options::max_payload` and the
/// CLI's `--max-payload` start from it.
pub const DEFAULT_MAX_PAYLOAD: u64 = 16 << 20;

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Strict,
            max_payload: DEFAULT_MAX_PAYLOAD,
            shards: 8,
            delayed_bucket_ns: 60_000_000_000,
            max_attempts: 5,
            lease: Duration::from_secs(30),
            #[cfg(feature = "faults")]
            faults: None,
            #[cfg(feature = "faults")]
            force_named_publish: false,
            format_version: QUEUE_VERSION,
            aging: None,
            receipts: ReceiptPolicy::Job,
            evidence: EvidenceLimits::default(),
        }
    }
}

/// Directory fds held open for the queue's lifetime.
#[derive(Debug)]
pub(crate) struct Dirs {
    pub root: OwnedFd,
    pub tmp: OwnedFd,
    /// Per ready slot: its directory, once this handle has opened it. Every `ready/<ss>` is
    /// opened with the queue; a `prio/<l>/<ss>` that does not exist yet is opened when it
    /// is first used (made by the first placement at its level: `ops/levels.rs`).
    pub ready: Vec<std::sync::OnceLock<OwnedFd>>,
    /// Stands for a ready slot not made yet (an `O_PATH` handle on the identity file, like a
    /// stand-in: every listing and `*at` call on it fails).
    pub absent: OwnedFd,
    /// Per ready slot: this handle has made the slot's entry and its parents' entries
    /// durable (`ops/levels.rs`, `Queue::ensure_slot`).
    pub placed: Vec<std::sync::atomic::AtomicBool>,
    /// Per ready slot, whether this user may make job files in it, as last found
    /// (`ops/levels.rs`, `Queue::slot_writable`): 0 not probed yet, 1 it may, else the
    /// monotonic ns (boot clock) until which enqueues avoid it.
    pub writable: Vec<std::sync::atomic::AtomicU64>,
    pub receipts: Vec<OwnedFd>,
    pub delayed: OwnedFd,
    pub dead: OwnedFd,
    /// The raw fds of `ready` and `receipts` that are stand-ins (see `open_dirs`), and
    /// `absent`'s.
    pub standins: Vec<std::os::fd::RawFd>,
    /// Per ready slot: `Some((owner uid, owner uid of ready/))` for a default-level shard
    /// owned by another user than `ready/` when the queue was opened (see `open_dirs`). It
    /// is held by the stand-in, and [`Queue::slot_dir`] calls it blocked: never listed by
    /// path, never placed into.
    pub foreign: Vec<Option<(u32, u32)>>,
    /// The entries `open_dirs` warned about (from the root), so that uses do not warn again.
    pub warned: Vec<String>,
}

impl Dirs {
    /// Whether held handle `fd` is a stand-in: it names no directory (see `open_dirs`).
    pub(crate) fn is_standin(&self, fd: BorrowedFd<'_>) -> bool {
        self.standins.contains(&fd.as_raw_fd())
    }
}

/// The claim cursor: per ready slot, the candidates its last listing kept, oldest last.
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    pub held: Vec<Vec<JobName>>,
}

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

impl core::ops::Deref for Queue {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// What every clone of a [`Queue`] shares (not nameable outside the crate).
#[derive(Debug)]
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
    pub(crate) refused: std::sync::Mutex<Vec<(u128, u64, Error)>>,
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

impl Queue {
    /// Open the queue at `root` with default [`Options`]. The filesystem is checked first, from
    /// one `fstatfs(2)` of the root (NFS is refused then, before any `flock` that its lock
    /// daemon could hold up), then `renameat2(RENAME_NOREPLACE)` is tried on a probe file in
    /// `tmp/` (made, renamed and removed: 14 KiB of journal writes on ext4 with 1 KiB blocks,
    /// 56 KiB with 4 KiB blocks). A handle that only reads is opened with
    /// [`Queue::open_read_only`], which writes nothing.
    ///
    /// # Errors
    /// Not done in every case (opening changes nothing but a probe file in `tmp/`):
    /// [`ErrorKind::NotAQueue`], [`ErrorKind::BadIdentity`], [`ErrorKind::UnsupportedVersion`],
    /// [`ErrorKind::Incomplete`], [`ErrorKind::UnsupportedFilesystem`], or [`ErrorKind::Io`]
    /// naming the path (`/proc/sys/kernel/random/boot_id` when this boot's id cannot be read
    /// for want of descriptors or memory: [`Clock::try_new`]).
    pub fn open(root: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_with(root, Options::default())
    }

    /// Open with explicit options.
    ///
    /// # Errors
    /// As [`Queue::open`], plus [`ErrorKind::InvalidArgument`] for an option out of range
    /// ([`Options::validate`]).
    pub fn open_with(root: impl AsRef<Path>, opts: Options) -> Result<Queue> {
        Queue::open_checked(root.as_ref(), opts, false, true)
    }

    /// Open the queue at `root` to read it (`list`, `show`, [`Queue::list`], [`Queue::find`],
    /// [`Queue::open_job`], [`Queue::status`]): as [`Queue::open`], with the same refusals,
    /// except that opening writes nothing (no rename probe in `tmp/`), so a command that only
    /// looks, run every 30 s on an SD card, costs it no writes. A change made through this
    /// handle works as through [`Queue::open`], except that a filesystem without
    /// `renameat2(RENAME_NOREPLACE)` (other than NFS, which is refused here too) is not
    /// refused in advance: its first rename fails with `EINVAL`, not done.
    ///
    /// # Errors
    /// As [`Queue::open`].
    pub fn open_read_only(root: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_read_only_with(root, Options::default())
    }

    /// [`Queue::open_read_only`] with explicit options.
    ///
    /// # Errors
    /// As [`Queue::open_with`].
    pub fn open_read_only_with(root: impl AsRef<Path>, opts: Options) -> Result<Queue> {
        Queue::open_checked(root.as_ref(), opts, false, false)
    }

    /// Open the queue at `root` to check it ([`Queue::fsck`], [`Queue::status`]): the same
    /// as [`Queue::open`]. A shard that is a symlink (`ready/03 -> /elsewhere`), a file, or
    /// a directory of another owner than `ready/` refuses no open: it is never followed
    /// nor listed, the handle holds no job there, a claim passes it over, an enqueue picks
    /// another shard, and `fsck` reports it. Unlike [`Queue::open`], a layout split across
    /// filesystems is not refused (fsck reports it). Like [`Queue::open_read_only`], opening
    /// writes nothing; [`Queue::fsck_quarantine`] makes the rename probe before it moves
    /// anything.
    ///
    /// # Errors
    /// As [`Queue::open`].
    pub fn open_for_check(root: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_for_check_with(root, Options::default())
    }

    /// [`Queue::open_for_check`] with explicit options.
    ///
    /// # Errors
    /// As [`Queue::open_with`].
    pub fn open_for_check_with(root: impl AsRef<Path>, opts: Options) -> Result<Queue> {
        Queue::open_checked(root.as_ref(), opts, true, false)
    }

    /// Open: `check` as [`Queue::open_for_check`]; `probe`: make the rename probe.
    fn open_checked(root: &Path, opts: Options, check: bool, probe: bool) -> Result<Queue> {
        opts.validate()?;
        let root = root.to_path_buf();
        let sys = make_sys(&opts);
        let rootfd = sys
            .open_queue_root(&root)
            .map_err(|e| Error::io(Call::Open, e, Outcome::NotDone, Some(root.clone())))?;
        check_filesystem(&sys, rootfd.as_fd(), &root)?;
        let ident = read_identity(&sys, rootfd.as_fd(), &root)?;
        Queue::assemble(root, sys, rootfd, ident, opts, check, probe)
    }

    /// Make the rename probe of [`Queue::open`] now, for a handle opened without it
    /// ([`Queue::open_for_check`]) that is about to move entries; nothing where the handle
    /// made it already.
    ///
    /// # Errors
    /// As the probe at [`Queue::open`]: [`ErrorKind::UnsupportedFilesystem`],
    /// [`ErrorKind::RenameRefused`] or [`ErrorKind::Io`] naming the probe file, not done.
    pub(crate) fn probe_renames(&self) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.renames_probed.load(Relaxed) {
            return Ok(());
        }
        probe_rename(
            &self.sys,
            self.dirs.tmp.as_fd(),
            &self.root,
            self.clock.boot_id(),
        )?;
        self.renames_probed.store(true, Relaxed);
        Ok(())
    }

    /// Create the queue at `root` (the last path component is created if missing), or open it
    /// if it exists. Crash-safe and idempotent: the identity is published with one
    /// no-replace rename, so two processes creating at once end up with the same queue; a
    /// crash part-way is completed by running `create` again. `opts.shards` and
    /// `opts.delayed_bucket_ns` apply only to a new queue.
    ///
    ///
    /// A directory whose identity is missing or damaged but which holds job files is never
    /// given a new identity: the queue id is read from the job headers and the identity is
    /// published again with it (shards: the count of `ready/<ss>` directories; delayed bucket
    /// width: `opts.delayed_bucket_ns`, as it cannot be read back), with a warning. A damaged
    /// file is first moved aside to `.steadq.queue.damaged.<32 hex>`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for an option out of range (see [`Options::validate`]);
    /// [`ErrorKind::IdentityLost`] (not done) when the identity is missing or damaged and the
    /// job headers do not agree on one queue id; otherwise as [`Queue::open`]. Outcome:
    /// indeterminate once anything was created.
    pub fn create(root: impl AsRef<Path>, opts: Options) -> Result<Queue, crate::Failure> {
        opts.validate()?;
        let root = root.as_ref().to_path_buf();
        let sys = make_sys(&opts);
        let ind =
            |call, e, p: &Path| Error::io(call, e, Outcome::Indeterminate, Some(p.to_path_buf()));
        // The directory made here, as its parent and name: removed again when the new
        // queue is refused for want of inodes, so that a refusal changes nothing.
        let mut made = None;
        match sys.mkdir_path(&root) {
            Ok(()) => {
                let parent = root
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                let pfd = sys
                    .open_dir_path(parent)
                    .map_err(|e| ind(Call::Open, e, parent))?;
                sys.fsync_dir(Barrier::Create, pfd.as_fd())
                    .map_err(|e| ind(Call::FsyncDir, e, parent))?;
                made = root.file_name().and_then(|n| n.to_str()).map(|n| (pfd, n));
            }
            Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io(Call::Mkdir, e, Outcome::NotDone, Some(root)).into()),
        }
        let rootfd = sys
            .open_queue_root(&root)
            .map_err(|e| Error::io(Call::Open, e, Outcome::NotDone, Some(root.clone())))?;
        if let Err(e) = check_filesystem(&sys, rootfd.as_fd(), &root) {
            if let Some((pfd, name)) = &made {
                // Empty and made by this call: best effort, as for `check_inodes` below.
                if sys.rmdir(pfd.as_fd(), name).is_ok() {
                    let _ = sys.fsync_dir(Barrier::Create, pfd.as_fd());
                }
            }
            return Err(e.into());
        }
        // Whether this call changed anything yet: a later failure is indeterminate once it
        // did, not done before (a `mkdir` that failed did not happen).
        let mut changed = made.is_some();
        let ident = match read_identity(&sys, rootfd.as_fd(), &root) {
            Ok(i) => i,
            Err(e) if matches!(e.kind(), ErrorKind::NotAQueue | ErrorKind::BadIdentity) => {
                let damaged = *e.kind() == ErrorKind::BadIdentity;
                if !damaged {
                    refuse_foreign_entries(&sys, rootfd.as_fd(), &root)?;
                    let mk = made.is_some();
                    if let Err(e) = check_inodes(&sys, rootfd.as_fd(), &root, opts.shards, mk) {
                        if let Some((pfd, name)) = &made {
                            // Empty and made by this call: best effort, the error says
                            // what was refused either way.
                            if sys.rmdir(pfd.as_fd(), name).is_ok() {
                                let _ = sys.fsync_dir(Barrier::Create, pfd.as_fd());
                            }
                        }
                        return Err(e.into());
                    }
                }
                changed = true;
                establish_identity(&sys, rootfd.as_fd(), &root, &opts, damaged)?
            }
            Err(e) => return Err(e.into()),
        };
        // Make every directory (idempotent), each made durable in its parent. The priority
        // levels' `prio/<l>/<ss>/` are made by the first job placed at their level.
        for d in CREATED_DIRS {
            ensure_dir(&sys, rootfd.as_fd(), d, &root, &mut changed)?;
        }
        for parent in [READY_DIR, RECEIPTS_DIR] {
            let pfd = sys
                .open_dir_beneath(rootfd.as_fd(), parent)
                .map_err(|e| ind(Call::Open, e, &root.join(parent)))?;
            // The sticky bit: the shard directories in it are the owner's, and a member of
            // the queue's group (who may write here) may then neither rename nor remove them
            // (replace `ready/03` by a symlink or her own directory). Not on the shards: their
            // entries are the jobs of every user, moved by every user. An existing queue gets
            // it at its owner's next `init`. Best effort: without it such a swap is found
            // and skipped when the queue is opened (`open_dirs`).
            match sys.make_sticky(pfd.as_fd()) {
                Ok(set) => changed |= set,
                Err(e) => log::warn!(
                    "{}: could not set the sticky bit ({}); a member of the queue's group may \
                     move its shard directories",
                    root.join(parent).display(),
                    std::io::Error::from(e)
                ),
            }
            for s in 0..ident.shards {
                let name = shard_name(s);
                let at = root.join(parent);
                match ensure_dir(&sys, pfd.as_fd(), name.as_str(), &at, &mut changed) {
                    // A symlink or a file in a shard's place (never followed): reported
                    // when the queue is opened below and by fsck; the other shards work, so
                    // `init` (a unit's `ExecStartPre`) does not fail for it.
                    Err(e)
                        if e.errno().is_some_and(|x| {
                            [Errno::LOOP, Errno::NOTDIR]
                                .iter()
                                .any(|n| n.raw_os_error() == x.raw_os_error())
                        }) => {}
                    r => r?,
                }
            }
        }
        // `evidence.log`, empty, made now while inodes are free: on a filesystem out of
        // inodes, compaction (which frees them, a receipt at a time) could not make it, and
        // failed "disk full" before removing anything. Shared like `ready/`: every user's
        // ack appends to it. Best effort: the first append makes it otherwise.
        match sys.open_append(rootfd.as_fd(), crate::disk::layout::EVIDENCE_FILE) {
            Ok(fd) => {
                if let Err(e) = sys.share_file_like(fd.as_fd(), rootfd.as_fd(), READY_DIR) {
                    log::warn!(
                        "{}: could not share it like ready/ ({})",
                        root.join(crate::disk::layout::EVIDENCE_FILE).display(),
                        std::io::Error::from(e)
                    );
                }
            }
            // Something not a regular file is there (a fifo, socket, device, directory or
            // symlink planted by a member of the queue's group), or a hard link: never
            // written, named.
            Err(e @ (Errno::NXIO | Errno::ISDIR | Errno::LOOP | Errno::MLINK)) => log::warn!(
                "{}: {}",
                root.join(crate::disk::layout::EVIDENCE_FILE).display(),
                Error::io(Call::Open, e, Outcome::NotDone, None)
            ),
            // It exists (an `init` of an existing queue by a user who may not write it):
            // nothing to make, nothing to say.
            Err(_)
                if sys
                    .stat_nofollow(rootfd.as_fd(), crate::disk::layout::EVIDENCE_FILE)
                    .is_ok() => {}
            Err(e) => log::warn!(
                "{}: not made now ({}); the first compaction makes it",
                root.join(crate::disk::layout::EVIDENCE_FILE).display(),
                std::io::Error::from(e)
            ),
        }
        sys.fsync_dir(Barrier::Create, rootfd.as_fd())
            .map_err(|e| ind(Call::FsyncDir, e, &root))?;
        Ok(Queue::assemble(
            root, sys, rootfd, ident, opts, false, true,
        )?)
    }

    fn assemble(
        root: PathBuf,
        sys: Sys,
        rootfd: OwnedFd,
        ident: Identity,
        opts: Options,
        check: bool,
        probe: bool,
    ) -> Result<Queue> {
        let dirs = open_dirs(&sys, rootfd, &root, &ident)?;
        // Split across filesystems, every move between the two parts would fail (`EXDEV`):
        // a job would run and never be acked. Refused, except to the commands that look
        // (`check`): fsck reports it.
        if !check {
            if let Some((rel, dev, root_dev)) = other_filesystem(&sys, &dirs, &ident) {
                let kind = ErrorKind::OtherFilesystem { dev, root_dev };
                return Err(Error::not_done(kind, Some(root.join(rel))));
            }
        }
        let clock = Clock::try_new(&sys).map_err(|(file, e)| {
            Error::io(Call::Open, e, Outcome::NotDone, Some(PathBuf::from(file)))
        })?;
        if probe {
            probe_rename(&sys, dirs.tmp.as_fd(), &root, clock.boot_id())?;
        }
        #[cfg(feature = "faults")]
        if opts.force_named_publish {
            sys.force_named_publish();
        }
        let group = crate::ops::group::Group::new(
            [&dirs.tmp]
                .into_iter()
                .chain(dirs.ready.iter().filter_map(|c| c.get()))
                .chain(&dirs.receipts)
                .map(|f| f.as_raw_fd()),
        );
        let flags = || (0..ident.slots()).map(|_| Default::default()).collect();
        let warned = dirs.warned.clone();
        // A fault plan keeps every barrier call, so that tests which fail or count them see
        // the same calls on every filesystem.
        let barriers = opts.durability != Durability::None
            && (sys.plan().is_some()
                || !(volatile_fs(&sys, dirs.root.as_fd()) && volatile_fs(&sys, dirs.tmp.as_fd())));
        let tmp_unsynced = barriers && logs_fsync_per_inode(&sys, dirs.tmp.as_fd());
        if tmp_unsynced {
            // btrfs: job files and key entries are published through a named file in tmp/,
            // never from an unnamed `O_TMPFILE` (see `logs_fsync_per_inode`).
            sys.force_named_publish();
        }
        Ok(Queue {
            shared: std::sync::Arc::new(Shared {
                root,
                sys,
                ident,
                dirs,
                opts,
                barriers,
                tmp_unsynced,
                renames_probed: probe.into(),
                clock,
                cursor: Mutex::new(Cursor {
                    held: vec![Vec::new(); ident.slots() as usize],
                }),
                shards: Default::default(),
                group,
                warned_foreign: Default::default(),
                claim_dead: Default::default(),
                promoted_at: Default::default(),
                later_buckets: Default::default(),
                unreadable: flags(),
                warned_unreadable: flags(),
                in_making: flags(),
                warned_blocks: std::sync::Mutex::new(warned),
                unwritable: Default::default(),
                job_mode: OnceLock::new(),
                warned_refused: Default::default(),
                refused: Default::default(),
                evidence_lock: Mutex::new(()),
                cap: Default::default(),
            }),
        })
    }

    /// Whether the root path still names the directory this handle opened. False once the
    /// queue was removed or replaced (say `rm -rf` and `steadq init` again): this handle
    /// then works on a directory nobody else sees, and should be reopened.
    /// [`Queue::replaced_dir`] also checks every directory of the layout.
    ///
    /// # Errors
    /// None: an unreadable path counts as replaced.
    pub fn is_current(&self) -> bool {
        self.replaced_dir().is_none()
    }

    /// The first directory of the layout (the root, `tmp`, `delayed`, `dead`, each
    /// `ready/<ss>`, each `prio/<l>/<ss>` this handle has opened, and `receipts/<ss>`) whose
    /// path no longer names the directory this handle holds open, relative to the root (`"."` for the root itself); `None` when all are
    /// current. An operator who removed `ready/07` and ran `steadq init` made a new
    /// directory that this handle does not see: reopen the queue. Costs two `stat` calls per
    /// directory it holds (at most 2 × (4 + (levels + 1) × shards)).
    pub fn replaced_dir(&self) -> Option<String> {
        let same = |fd: &OwnedFd, rel: &str| match (
            self.sys.file_id(fd.as_fd()),
            self.sys.path_id(&self.root.join(rel)),
        ) {
            // A stand-in (see `open_dirs`) never was its directory, so it cannot tell whether
            // the directory was replaced, also once this user can name it again (permissions
            // given back): each use opens it by path then (`held_dir`, `list_held`).
            (Ok(_), _) if self.dirs.is_standin(fd.as_fd()) => true,
            (Ok(a), Ok(b)) => a == b,
            // A directory this user cannot name (a parent it cannot search) cannot be told
            // replaced: it is held by a stand-in (see `open_dirs`).
            (Ok(_), Err(Errno::ACCESS | Errno::PERM)) => true,
            _ => false,
        };
        let d = &self.dirs;
        let mut held: Vec<(&OwnedFd, String)> = vec![
            (&d.root, ".".into()),
            (&d.tmp, TMP_DIR.into()),
            (&d.delayed, DELAYED_DIR.into()),
            (&d.dead, DEAD_DIR.into()),
        ];
        for s in 0..self.ident.slots() {
            if let Some(fd) = d.ready[s as usize].get() {
                held.push((fd, self.ident.slot_rel(s)));
            }
        }
        for s in 0..self.ident.shards {
            held.push((
                &d.receipts[s as usize],
                receipts_shard(s).as_str().to_owned(),
            ));
        }
        held.into_iter()
            .find(|(fd, rel)| !same(fd, rel))
            .map(|(_, rel)| rel)
    }

    /// Whether the root path no longer names the directory this handle holds (the queue
    /// was removed, or removed and made again): then [`ErrorKind::Replaced`] (not done)
    /// naming the root. Two `stat` calls; a failed `stat` other than a missing path says
    /// nothing (`None`).
    pub(crate) fn root_replaced(&self) -> Option<Error> {
        let held = self.sys.file_id(self.dirs.root.as_fd()).ok()?;
        match self.sys.path_id(&self.root) {
            Ok(now) if now == held => None,
            Ok(_) | Err(Errno::NOENT | Errno::NOTDIR) => Some(Error::not_done(
                ErrorKind::Replaced,
                Some(self.root.clone()),
            )),
            Err(_) => None,
        }
    }

    /// The queue's root path as given.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The identity read from `steadq.queue`.
    pub fn identity(&self) -> Identity {
        self.ident
    }

    /// The queue id (128 bits).
    pub fn id(&self) -> u128 {
        self.ident.id
    }

    /// Jobs the claims of this handle (and its clones) moved to dead since it was opened,
    /// instead of handing them out: corrupt, larger than [`Options::max_payload`] (reason
    /// `toolarge`) or out of attempts, also an expired lease with no attempt left that its
    /// sweep found (each is logged at warn level, naming the job). A claim that returns `Ok(None)` after such a move did
    /// handle a job: `steadq work --once` exits 0 then, not 3.
    pub fn claims_dead_lettered(&self) -> u64 {
        self.claim_dead.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The clocks (tests shift them to expire leases without sleeping).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The syscall layer (its fault plan, its publishing route; feature `faults`).
    #[cfg(feature = "faults")]
    pub fn sys(&self) -> &Sys {
        &self.sys
    }

    /// Whether this handle issues durability barriers (`fsync`, `syncfs`). False under
    /// [`Durability::None`], and on tmpfs and ramfs, whose `fsync` and `syncfs` do nothing:
    /// `noop_fsync` is their files' and directories' `fsync` (mm/shmem.c
    /// `shmem_file_operations`, `shmem_dir_operations`; fs/ramfs/file-mmu.c; fs/libfs.c
    /// `simple_dir_operations`), and they have no writeback and no `sync_fs`. A job there
    /// is as durable as it can be once its rename or link has returned, so Strict and
    /// Batched make no barrier calls (about 6 syscalls a job fewer) and mean what they mean
    /// elsewhere: done is past the linearization point and every barrier the filesystem
    /// has. A queue opened with a fault plan (feature `faults`) keeps every call.
    pub fn barriers(&self) -> bool {
        self.barriers
    }

    /// `root/rel`, for error messages.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The error (not done) for directory `rel` that a pass could not read, with the real
    /// reason: a file (or a symlink, never followed) standing where the directory or one of
    /// its parents belongs is `ENOTDIR` naming that entry, anything else `EACCES` naming the
    /// directory. (`EACCES` was hard-coded and sent users to chmod a file.)
    pub(crate) fn unreadable_dir_error(&self, rel: &str) -> crate::Error {
        let (errno, at) = match self.not_a_directory_on(rel) {
            Some(entry) => (Errno::NOTDIR, entry),
            None => (Errno::ACCESS, rel.to_string()),
        };
        crate::Error::io(
            crate::disk::sys::Call::Open,
            errno,
            crate::Outcome::NotDone,
            Some(self.path(&at)),
        )
    }

    /// Count the calling thread as inside an operation that will ask for a barrier, until
    /// the guard drops (`ops/group.rs`, [`crate::ops::group::Gather`]): a barrier's leader
    /// waits briefly for such threads so one fsync covers them all. `None` when the handle
    /// issues no barriers.
    pub(crate) fn op(&self) -> Option<crate::ops::group::Op<'_>> {
        self.barriers.then(|| self.group.gather.op())
    }

    /// fsync directory `dir` unless the policy is `None` (or see [`Queue::barriers`]), after a rename or link in it that
    /// has returned. A directory the handle holds shares the fsync with other threads of
    /// this process (group commit, `ops/group.rs`): it returns once an fsync that started
    /// after this call began has completed.
    /// `b` names the barrier (a fault plan may remove it: then this thread neither makes
    /// nor waits for an fsync).
    pub(crate) fn dir_barrier(
        &self,
        b: Barrier,
        dir: &crate::ops::enqueue::DirRef<'_>,
    ) -> core::result::Result<(), Errno> {
        if !self.barriers || self.sys.skips_barrier(b) {
            return Ok(());
        }
        let fd = dir.fd();
        match dir {
            crate::ops::enqueue::DirRef::Held(h) => match self.group.get(&self.sys, *h) {
                Some(g) => g.barrier(&self.group.gather, || self.sys.fsync_dir(b, fd)),
                None => self.sys.fsync_dir(b, fd),
            },
            crate::ops::enqueue::DirRef::Opened(_) => self.sys.fsync_dir(b, fd),
        }
    }

    /// Run `list` on the directory of ready shard `s`: `Ok(None)` when this user cannot read
    /// it (`EACCES`, `EPERM`; a shard made unreadable by `chmod 000`); `Err(ENOENT)` when it
    /// is a priority level's slot not made yet, which holds no job; `Err(ENOTDIR)` when an
    /// entry that is not a directory stands on its path (a file named `prio`, a symlink),
    /// so that it holds no job either (warned once per entry, [`Queue::not_a_directory_on`]
    /// names it). A shard whose held
    /// handle cannot list it (`O_PATH`, see `assemble`) is opened again each time, so a
    /// repaired permission is seen at once. The first unreadable listing of each shard is
    /// logged as a warning (once per handle), unless the refusal is a directory in its
    /// making ([`Queue::in_making`]); [`Queue::status`] counts the shards that were
    /// unreadable at their last listing.
    ///
    /// # Errors
    /// Any other errno of the listing or of the second open.
    pub(crate) fn list_ready_shard<T>(
        &self,
        s: u16,
        list: impl FnMut(BorrowedFd<'_>) -> core::result::Result<T, Errno>,
    ) -> core::result::Result<Option<T>, Errno> {
        use std::sync::atomic::Ordering::Relaxed;
        let i = s as usize;
        let rel = self.ident.slot_rel(s);
        let fd = match self.slot_dir(s) {
            SlotDir::Held(fd) => fd,
            SlotDir::Missing => {
                self.unreadable[i].store(false, Relaxed);
                return Err(Errno::NOENT);
            }
            SlotDir::Blocked(block) => {
                self.unreadable[i].store(false, Relaxed);
                self.warn_block(&block);
                return Err(Errno::NOTDIR);
            }
        };
        let r = self.list_held(fd, &rel, list)?;
        if r.is_none() {
            // A slot held by the stand-in because a file stood in its way at open.
            if let Some(block) = self.not_a_directory_on(&rel) {
                self.unreadable[i].store(false, Relaxed);
                self.warn_block(&block);
                return Err(Errno::NOTDIR);
            }
        }
        self.unreadable[i].store(r.is_none(), Relaxed);
        // Refused by a level (or shard) another user is making right now, before it gets
        // the owner and mode of `ready/` (`ops/levels.rs`): not warned; looked at again soon.
        let making = r.is_none() && self.in_making(&rel);
        self.in_making[i].store(making, Relaxed);
        if r.is_none() && !making && !self.warned_unreadable[i].swap(true, Relaxed) {
            log::warn!(
                "{}: cannot read this shard (Permission denied); its jobs are skipped until it \
                 is readable again (status counts it)",
                self.path(&rel).display()
            );
        }
        Ok(r)
    }

    /// Warn once per handle about `block` (from the root), an entry that is not a directory
    /// where the layout has one: it stands before every slot of a level, or of every level,
    /// so it is named once, not once per slot behind it.
    pub(crate) fn warn_block(&self, block: &str) {
        let mut warned = self.warned_blocks.lock().unwrap_or_else(|p| p.into_inner());
        if warned.iter().any(|w| w == block) {
            return;
        }
        let slot = (0..self.ident.slots()).find(|&s| self.ident.slot_rel(s) == block);
        if let Some((owner, expected)) = slot.and_then(|s| self.foreign_slot(s)) {
            log::warn!(
                "{}: owned by uid {owner}, not by the owner of ready/ (uid {expected}): its \
                 jobs are not taken and no job is placed there (fsck names it)",
                self.path(block).display()
            );
        } else {
            log::warn!(
                "{}: not a directory where the queue keeps ready jobs (a file, or a symlink, \
                 never followed); no job can be in the slots behind it and none can be placed \
                 there until it is moved away (fsck names it)",
                self.path(block).display()
            );
        }
        warned.push(block.to_string());
    }

    /// The first component of path `rel` (from the root) that exists and is not a directory
    /// (`fstatat`, symlinks not followed), e.g. `prio` for `prio/5/03` when `prio` is a file.
    pub(crate) fn not_a_directory_on(&self, rel: &str) -> Option<String> {
        let (end, _) = first_non_directory(&self.sys, self.dirs.root.as_fd(), rel)?;
        Some(rel[..end].to_string())
    }

    /// Run `list` on held directory `fd` (`rel` from the root): `Ok(None)` when this user
    /// cannot read it (`EACCES`, `EPERM`). A handle that cannot list (held by name only,
    /// `O_PATH`: the directory was unreadable when the queue was opened) is opened again by
    /// its path each time, so a repaired permission is seen at once.
    ///
    /// # Errors
    /// Any other errno of the listing or of the second open.
    pub(crate) fn list_held<T>(
        &self,
        fd: BorrowedFd<'_>,
        rel: &str,
        mut list: impl FnMut(BorrowedFd<'_>) -> core::result::Result<T, Errno>,
    ) -> core::result::Result<Option<T>, Errno> {
        match list(fd) {
            // EBADF: an `O_PATH` handle; ENOTDIR: the stand-in of `open_dirs`.
            Err(Errno::BADF | Errno::ACCESS | Errno::NOTDIR) => {}
            r => return r.map(Some),
        }
        match self.sys.open_dir_beneath(self.dirs.root.as_fd(), rel) {
            Ok(fd) => list(fd.as_fd()).map(Some),
            // ENOTDIR: something that is not a directory stands on the path (a file named
            // `prio` in the root): the slot cannot be read, as with a permission, and fsck
            // names the entry. Only this slot's jobs wait; every other slot goes on.
            // ELOOP: a symlink on the path, never followed; the same.
            Err(Errno::ACCESS | Errno::PERM | Errno::NOTDIR | Errno::LOOP) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Held directory `fd` (`rel` from the root) for a job operation: a stand-in (see
    /// `open_dirs`) is replaced by the directory opened by path when this user can open it
    /// now (permissions given back since the queue was opened); otherwise `fd` itself.
    pub(crate) fn held_dir<'a>(
        &self,
        fd: BorrowedFd<'a>,
        rel: &str,
    ) -> crate::ops::enqueue::DirRef<'a> {
        use crate::ops::enqueue::DirRef;
        if !self.dirs.is_standin(fd) {
            return DirRef::Held(fd);
        }
        match self.sys.open_dir_beneath(self.dirs.root.as_fd(), rel) {
            Ok(o) => DirRef::Opened(o),
            Err(_) => DirRef::Held(fd),
        }
    }

    /// The errno to report for `e` from a call on held directory `fd`: a stand-in (see
    /// `open_dirs`) refuses with `ENOTDIR`, which is `EACCES` to the user (the directory's
    /// parent is not searchable).
    pub(crate) fn dir_errno(&self, fd: BorrowedFd<'_>, e: Errno) -> Errno {
        if e == Errno::NOTDIR && self.dirs.is_standin(fd) {
            Errno::ACCESS
        } else {
            e
        }
    }

    /// How many ready slots (`ready/<ss>`, `prio/<l>/<ss>`) the queue has: shards × levels.
    pub fn ready_slots(&self) -> usize {
        self.ident.slots() as usize
    }

    /// The ready slots (`ready/<ss>`, `prio/<l>/<ss>`) this handle could not read at their
    /// last listing, relative to the root.
    pub fn unreadable_ready_dirs(&self) -> Vec<String> {
        let n = self.unreadable.iter().enumerate();
        n.filter(|(_, f)| f.load(std::sync::atomic::Ordering::Relaxed))
            .map(|(s, _)| self.ident.slot_rel(s as u16))
            .collect()
    }

    /// Ready shards that could not be read at their last listing by this handle.
    pub(crate) fn unreadable_shards(&self) -> u64 {
        let n = self.unreadable.iter();
        n.filter(|f| f.load(std::sync::atomic::Ordering::Relaxed))
            .count() as u64
    }

    /// fsync directory `fd` unless the policy is `None` (or see [`Queue::barriers`]).
    /// `b` names the barrier.
    pub(crate) fn barrier(
        &self,
        b: Barrier,
        fd: BorrowedFd<'_>,
    ) -> core::result::Result<(), Errno> {
        if !self.barriers {
            return Ok(());
        }
        self.sys.fsync_dir(b, fd)
    }

    /// fsync file `fd` unless the policy is `None` (or see [`Queue::barriers`]).
    /// `b` names the barrier.
    pub(crate) fn barrier_file(
        &self,
        b: Barrier,
        fd: BorrowedFd<'_>,
    ) -> core::result::Result<(), Errno> {
        if !self.barriers {
            return Ok(());
        }
        self.sys.fsync(b, fd)
    }

    /// Open (creating if needed) bucket directory `name` under `parent` (`delayed` or `dead`).
    /// A new bucket is made durable in its parent before use. One made by another user
    /// this moment, which refuses this user until it is shared ([`Queue::in_making`]), is
    /// waited for, up to 1 s.
    pub(crate) fn bucket_dir(
        &self,
        parent_is_dead: bool,
        name: &str,
    ) -> core::result::Result<OwnedFd, (Call, Errno)> {
        let (parent, template) = if parent_is_dead {
            (&self.dirs.dead, DEAD_DIR)
        } else {
            (&self.dirs.delayed, DELAYED_DIR)
        };
        let rel = format!("{template}/{name}");
        let (fd, origin) = self.made_dir(parent.as_fd(), name, &rel)?;
        if origin == crate::ops::making::Origin::MadeHere {
            self.share_like(fd.as_fd(), template, &rel);
            self.barrier(Barrier::BucketDir, parent.as_fd())
                .map_err(|e| (Call::FsyncDir, e))?;
        }
        Ok(fd)
    }
}

/// The first component of path `rel` beneath `root` that exists and is not a directory
/// (`fstatat`, symlinks not followed): the length of the path up to it, and its type.
fn first_non_directory(
    sys: &Sys,
    root: BorrowedFd<'_>,
    rel: &str,
) -> Option<(usize, rustix::fs::FileType)> {
    let mut end = 0;
    for part in rel.split('/') {
        end += part.len();
        match sys.stat_nofollow(root, &rel[..end]) {
            Ok(m) if m.file_type != rustix::fs::FileType::Directory => {
                return Some((end, m.file_type))
            }
            Ok(_) => end += 1,
            Err(_) => return None,
        }
    }
    None
}

/// Open every directory of the layout beneath `rootfd` (which the result holds as `root`).
///
/// # Errors
/// Not done: [`ErrorKind::Incomplete`] for a missing directory (an interrupted create), or
/// [`ErrorKind::Io`] naming it.
fn open_dirs(sys: &Sys, rootfd: OwnedFd, root: &Path, ident: &Identity) -> Result<Dirs> {
    let shards = ident.shards;
    let open_failed = |rel: &str, e: Errno| {
        let kind = if e == Errno::NOENT {
            ErrorKind::Incomplete
        } else {
            ErrorKind::Io {
                call: Call::Open,
                errno: e.into(),
            }
        };
        Error::not_done(kind, Some(root.join(rel)))
    };
    let open = |rel: &str| {
        sys.open_dir_beneath(rootfd.as_fd(), rel)
            .map_err(|e| open_failed(rel, e))
    };
    // A job directory this user cannot read (a ready or receipt shard, `delayed/`, `dead/`)
    // is held by name only (`O_PATH`): claims skip it, status and fsck report it
    // (`Queue::list_held`) instead of refusing the whole queue. One whose parent this user
    // cannot search (`prio/6`, `ready/` or `receipts/` at mode 700 of another user) cannot
    // be named at all: it is held by a stand-in, an `O_PATH` handle on the identity file,
    // which every listing and `*at` call refuses (`EBADF`, `ENOTDIR`).
    let held = |rel: &str| match sys.open_dir_beneath(rootfd.as_fd(), rel) {
        Err(Errno::ACCESS) => match sys.open_dir_path_only(rootfd.as_fd(), rel) {
            Err(Errno::ACCESS | Errno::PERM) => sys
                .open_file_path_only(rootfd.as_fd(), IDENTITY_FILE)
                .or_else(|_| open(rel)),
            r => r.or_else(|_| open(rel)),
        },
        // Opened once: each directory was opened, closed and opened again (1,400 `openat2`
        // calls to open a queue of 64 shards at 8 levels).
        r => r.map_err(|e| open_failed(rel, e)),
    };
    // A level whose directory (`prio/<l>`) does not exist holds no slot yet: its slots are
    // not opened one by one (448 failed opens of a 64-shard queue with no level made).
    let lazy_levels = (0..ident.slots()).any(|s| ident.slot_is_lazy(s));
    let level_missing: Vec<bool> = (0..crate::disk::name::PRIORITY_LEVELS)
        .map(|l| {
            let rel = format!("{}/{l}", crate::disk::layout::PRIO_DIR);
            lazy_levels
                && l != crate::disk::name::DEFAULT_PRIORITY
                && matches!(
                    sys.open_dir_beneath(rootfd.as_fd(), &rel),
                    Err(Errno::NOENT)
                )
        })
        .collect();
    // A priority level's slot that does not exist yet is opened on first use.
    // A slot behind something that is not a directory (a file named `prio` in the root, a
    // file or a symlink in place of `ready/03`) holds no job: its level's slot is left
    // unopened like one not made yet (`Queue::slot_dir` names the entry at each use), a
    // default-level shard is held by the stand-in. Every other slot goes on, and fsck
    // names the entry. A symlink is never followed (`ready/03 -> /elsewhere`: an attempt
    // to keep jobs outside the queue, or to stop it): it refused the whole queue, so one
    // member of the queue's group stopped every worker, enqueue and `init`.
    let blocked = |e: &Error, rel: &str| {
        let errno = |n: Errno| {
            e.errno()
                .is_some_and(|x| x.raw_os_error() == n.raw_os_error())
        };
        if !errno(Errno::NOTDIR) && !errno(Errno::LOOP) {
            return None;
        }
        let (end, _) = first_non_directory(sys, rootfd.as_fd(), rel)?;
        Some(rel[..end].to_string())
    };
    // A default-level shard is made by `init`, as the owner of `ready/`: one owned by
    // another user (root excepted) was put there by someone else (a member of the queue's group who moved
    // the owner's shard away, its jobs with it, and made her own). Its jobs are not the
    // queue's to run, and new jobs must not go there: it is held by the stand-in like a
    // blocked shard, named in a warning, and fsck reports it.
    let ready_owner = sys
        .owner_nofollow(rootfd.as_fd(), READY_DIR)
        .ok()
        .filter(|(_, _, mode)| {
            rustix::fs::FileType::from_raw_mode(*mode) == rustix::fs::FileType::Directory
        })
        .map(|(uid, _, _)| uid);
    let mut foreign = vec![None; ident.slots() as usize];
    let mut warned: Vec<String> = Vec::new();
    let mut slot = |s: u16| {
        let rel = ident.slot_rel(s);
        let lazy = ident.slot_is_lazy(s);
        if lazy && level_missing[ident.slot_parts(s).0 as usize] {
            return Ok(None);
        }
        let standin = || sys.open_file_path_only(rootfd.as_fd(), IDENTITY_FILE);
        match held(&rel) {
            Err(e) if *e.kind() == ErrorKind::Incomplete && lazy => Ok(None),
            Err(e) => match blocked(&e, &rel) {
                Some(_) if lazy => Ok(None),
                Some(block) => {
                    if !warned.contains(&block) {
                        log::warn!(
                            "{}: not a directory where the queue keeps ready jobs (a file, or \
                             a symlink, never followed); no job can be in the shards behind it \
                             and none is placed there until it is moved away (fsck names it)",
                            root.join(&block).display()
                        );
                        warned.push(block);
                    }
                    standin().map(Some).map_err(|_| e)
                }
                None => Err(e),
            },
            Ok(fd) if !lazy => {
                // Not the stand-in of a shard this user cannot name: the identity file's
                // owner says nothing about the shard.
                let dir = sys
                    .fstat(fd.as_fd())
                    .is_ok_and(|(t, _)| t == rustix::fs::FileType::Directory);
                let owner = sys.owner_of(fd.as_fd()).ok().filter(|_| dir);
                match (owner, ready_owner) {
                    // A shard of root's is not a member's plant: only root could make it.
                    (Some(o), Some(r)) if o != r && o != 0 => {
                        foreign[s as usize] = Some((o, r));
                        log::warn!(
                            "{}: owned by uid {o}, not by the owner of {READY_DIR}/ (uid {r}): \
                             not the shard `init` made; its jobs are not taken and no job is \
                             placed there (fsck names it; move it away and run `steadq init` \
                             as uid {r})",
                            root.join(&rel).display()
                        );
                        warned.push(rel.clone());
                        standin().map(Some).map_err(|e| open_failed(&rel, e))
                    }
                    _ => Ok(Some(fd)),
                }
            }
            r => r.map(Some),
        }
    };
    let ready = (0..ident.slots())
        .map(|s| slot(s).map(|fd| fd.map(std::sync::OnceLock::from).unwrap_or_default()))
        .collect::<Result<Vec<_>>>()?;
    let absent = sys
        .open_file_path_only(rootfd.as_fd(), IDENTITY_FILE)
        .or_else(|_| open(IDENTITY_FILE))?;
    // `tmp/`, `delayed/`, `dead/` or a receipt shard that is not a directory (a file, or a
    // symlink, never followed) stopped every command with "Not a directory", `fsck`
    // included. It is held by the stand-in now: the commands that need it fail naming it,
    // the others go on, and fsck names it.
    let other = |rel: &str| match held(rel) {
        Err(e) => match blocked(&e, rel) {
            Some(block) => {
                log::warn!(
                    "{}: not a directory where the queue has one (a file, or a symlink, never \
                     followed); what belongs there can be neither placed nor taken until it \
                     is moved away (fsck names it)",
                    root.join(block).display()
                );
                sys.open_file_path_only(rootfd.as_fd(), IDENTITY_FILE)
                    .map_err(|_| e)
            }
            None => Err(e),
        },
        r => r,
    };
    let dirs = Dirs {
        // Unreadable, it is held by name only too: the commands that look (status, list,
        // show) work; those that need it fail naming it, and recover reports it unreadable.
        tmp: other(TMP_DIR)?,
        placed: (0..ident.slots()).map(|_| Default::default()).collect(),
        writable: (0..ident.slots()).map(|_| Default::default()).collect(),
        ready,
        absent,
        receipts: (0..shards)
            .map(|s| other(&receipts_shard(s)))
            .collect::<Result<_>>()?,
        delayed: other(DELAYED_DIR)?,
        dead: other(DEAD_DIR)?,
        root: rootfd,
        standins: Vec::new(),
        foreign,
        warned,
    };
    let standins = dirs.ready.iter().filter_map(|c| c.get());
    let standins = standins.chain(&dirs.receipts).chain([&dirs.absent]);
    let standins = standins.chain([&dirs.tmp, &dirs.delayed, &dirs.dead]);
    let standins = standins.filter(|fd| {
        rustix::fs::fstat(fd).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
        })
    });
    let dirs = Dirs {
        standins: standins.map(|fd| fd.as_raw_fd()).collect(),
        ..dirs
    };
    Ok(dirs)
}

/// The first directory of the layout `dirs` holds that is on another filesystem than the
/// queue root (a mount under it, where every rename to or from it fails with `EXDEV`): its
/// path relative to the root, the topmost on the way that is on the other filesystem
/// (`receipts`, not `receipts/00`), its `st_dev` and the root's. Found from the `fstat` of
/// the directories already open (a stand-in is the identity file, on the root's); a
/// directory whose `fstat` fails is not counted. `None`: all on the root's filesystem.
pub(crate) fn other_filesystem(
    sys: &Sys,
    dirs: &Dirs,
    ident: &Identity,
) -> Option<(String, u64, u64)> {
    let root_dev = sys.file_id(dirs.root.as_fd()).ok()?.0;
    let named = [TMP_DIR, DELAYED_DIR, DEAD_DIR]
        .into_iter()
        .map(String::from)
        .zip([&dirs.tmp, &dirs.delayed, &dirs.dead]);
    let receipts = (0..ident.shards)
        .map(|s| receipts_shard(s).as_str().to_string())
        .zip(&dirs.receipts);
    let ready = (0..ident.slots()).filter_map(|s| {
        let fd = dirs.ready[s as usize].get()?;
        Some((ident.slot_rel(s).as_str().to_string(), fd))
    });
    for (rel, fd) in named.chain(receipts).chain(ready) {
        let Ok((dev, _)) = sys.file_id(fd.as_fd()) else {
            continue;
        };
        if dev == root_dev {
            continue;
        }
        let ends = rel.match_indices('/').map(|(i, _)| i).chain([rel.len()]);
        for end in ends {
            match sys.stat_nofollow(dirs.root.as_fd(), &rel[..end]) {
                Ok(m) if m.file.0 != root_dev => {
                    return Some((rel[..end].to_string(), m.file.0, root_dev))
                }
                _ => {}
            }
        }
        return Some((rel, dev, root_dev));
    }
    None
}

/// The directory `mkfs.ext4` (and `mkfs.ext2/3`) leaves at a filesystem's root for
/// `e2fsck`: the filesystem's own, not a foreign entry, where the queue root is that root.
pub(crate) const LOST_FOUND: &str = "lost+found";

/// Whether the queue root (`root`, opened from `path`) is the root of its filesystem: its
/// `..` is on another device (a mount point) or is itself (`/`). False when either `stat`
/// fails.
pub(crate) fn is_fs_root(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> bool {
    match (sys.file_id(root), sys.path_id(&path.join(".."))) {
        (Ok(me), Ok(up)) => me.0 != up.0 || me == up,
        _ => false,
    }
}

/// Whether the filesystem of `fd` keeps nothing across a power cut and makes `fsync` a
/// no-op: tmpfs (`TMPFS_MAGIC` 0x01021994) or ramfs (`RAMFS_MAGIC` 0x858458f6), from
/// `statfs(2)` and include/uapi/linux/magic.h. False when `statfs` fails.
pub(crate) fn volatile_fs(sys: &Sys, fd: BorrowedFd<'_>) -> bool {
    matches!(
        sys.fs_magic(fd).map(|m| m as u32),
        Ok(0x0102_1994 | 0x8584_58f6)
    )
}

/// Whether the filesystem of `fd` is btrfs (`BTRFS_SUPER_MAGIC` 0x9123683E, `statfs(2)`,
/// include/uapi/linux/magic.h), whose fsync writes the inode (and what it names) to a log
/// tree replayed at mount. There a job file is published from a *named* temporary file in
/// `tmp/`, never from an unnamed `O_TMPFILE`: the block rig (crashlab, Debian 6.1 kernel)
/// found a job file shorter than its header in `ready/` after a crash when another thread's
/// directory fsync came between an `O_TMPFILE`'s `linkat` and its second fsync (2 of 540
/// crash states; DESIGN.md, What the crash lab found). False when `statfs` fails.
pub(crate) fn logs_fsync_per_inode(sys: &Sys, fd: BorrowedFd<'_>) -> bool {
    matches!(sys.fs_magic(fd).map(|m| m as u32), Ok(0x9123_683E))
}

#[cfg(feature = "faults")]
fn make_sys(opts: &Options) -> Sys {
    match &opts.faults {
        Some(p) => Sys::with_faults(p.clone()),
        None => Sys::new(),
    }
}

#[cfg(not(feature = "faults"))]
fn make_sys(_: &Options) -> Sys {
    Sys::new()
}

pub(crate) fn read_identity(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> Result<Identity> {
    let p = path.join(IDENTITY_FILE);
    let fd = match sys.open_regular_ro(root, IDENTITY_FILE) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => {
            return Err(Error::not_done(
                ErrorKind::NotAQueue,
                Some(path.to_path_buf()),
            ))
        }
        Err(e) => return Err(Error::io(Call::Open, e, Outcome::NotDone, Some(p))),
    };
    let mut buf = Vec::new();
    sys.read_all(fd.as_fd(), 4096, &mut buf)
        .map_err(|e| Error::io(Call::Read, e, Outcome::NotDone, Some(p.clone())))?;
    let text = std::str::from_utf8(&buf)
        .map_err(|_| Error::not_done(ErrorKind::BadIdentity, Some(p.clone())))?;
    Identity::decode(text).map_err(|e| {
        let kind = match e {
            IdentityError::Bad => ErrorKind::BadIdentity,
            IdentityError::Newer { found, supported } => {
                ErrorKind::UnsupportedVersion { found, supported }
            }
        };
        Error::not_done(kind, Some(p))
    })
}

/// `.steadq.queue.<32 hex>` in the root holding `ident`, written and fsynced, about to be
/// renamed over (or onto) `steadq.queue`; its name. On failure it is removed: not done.
/// With `keep`, the file gets the owner, group and mode of the `steadq.queue` it replaces
/// (best effort: logged): `config` run at umask 077 made it 600, and every other user of the
/// queue was refused it.
fn identity_temp_file(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    ident: &Identity,
    keep: bool,
) -> Result<String> {
    let tmp = format!(".{IDENTITY_FILE}.{:032x}", random_u128());
    let nd = |call, e| Error::io(call, e, Outcome::NotDone, Some(path.join(&tmp)));
    let fd = sys.create_file(root, &tmp).map_err(|e| nd(Call::Open, e))?;
    if keep {
        if let Err(e) = sys.share_file_like(fd.as_fd(), root, IDENTITY_FILE) {
            log::warn!(
                "{}: could not keep the owner and mode of the file it replaces ({}); other \
                 users may not be able to read it",
                path.join(IDENTITY_FILE).display(),
                std::io::Error::from(e)
            );
        }
    }
    let written = sys
        .write_all(fd.as_fd(), ident.encode().as_bytes())
        .map_err(|e| nd(Call::Write, e))
        .and_then(|()| {
            let b = if keep {
                Barrier::Identity
            } else {
                Barrier::Create
            };
            sys.fsync(b, fd.as_fd()).map_err(|e| nd(Call::Fsync, e))
        });
    if let Err(e) = written {
        let _ = sys.unlink(root, &tmp);
        return Err(e);
    }
    Ok(tmp)
}

pub(crate) fn publish_identity(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    ident: &Identity,
) -> Result<()> {
    let tmp = identity_temp_file(sys, root, path, ident, false)?;
    let nd = |call, e| Error::io(call, e, Outcome::NotDone, Some(path.join(&tmp)));
    let cleanup = |e: Error| {
        let _ = sys.unlink(root, &tmp);
        e
    };
    match sys.rename(root, &tmp, root, IDENTITY_FILE) {
        Ok(()) => {}
        Err(Errno::EXIST) => {
            // Another creator won; theirs is the queue.
            let _ = sys.unlink(root, &tmp);
        }
        Err(Errno::INVAL) => {
            let _ = sys.unlink(root, &tmp);
            let fs_type = sys.fs_magic(root).map(fs_name).unwrap_or("unknown");
            return Err(Error::not_done(
                ErrorKind::UnsupportedFilesystem { fs_type },
                Some(path.to_path_buf()),
            ));
        }
        Err(e @ (Errno::PERM | Errno::NOSYS)) => return Err(cleanup(rename_refused(e, path))),
        Err(e) => return Err(cleanup(nd(Call::Rename, e))),
    }
    sys.fsync_dir(Barrier::Create, root).map_err(|e| {
        Error::io(
            Call::FsyncDir,
            e,
            Outcome::Indeterminate,
            Some(path.to_path_buf()),
        )
    })
}

/// Replace the identity file with `ident` (a settings change): a temp file, fsync, a rename
/// over the old file, fsync of the root.
///
/// # Errors
/// [`ErrorKind::Io`]: not done before the rename (the temp file is removed); indeterminate
/// if the rename itself fails with `EIO` (it may have happened) or the root's fsync fails.
pub(crate) fn publish_identity_replacing(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    ident: &Identity,
) -> Result<()> {
    let tmp = identity_temp_file(sys, root, path, ident, true)?;
    if let Err(e) = sys.rename_replace(root, &tmp, root, IDENTITY_FILE) {
        // Removing the temp name is safe either way: a rename that happened took it away.
        let _ = sys.unlink(root, &tmp);
        return Err(if e == Errno::IO {
            // EIO from the rename itself: the new identity may be in place.
            let at = Some(path.join(IDENTITY_FILE));
            Error::io(Call::Rename, e, Outcome::Indeterminate, at)
        } else {
            Error::io(Call::Rename, e, Outcome::NotDone, Some(path.join(&tmp)))
        });
    }
    sys.fsync_dir(Barrier::Identity, root).map_err(|e| {
        Error::io(
            Call::FsyncDir,
            e,
            Outcome::Indeterminate,
            Some(path.join(IDENTITY_FILE)),
        )
    })
}

/// What the job files of a directory without a usable identity say about its queue.
#[derive(Debug, PartialEq, Eq)]
enum Survey {
    /// No job file at all: a new identity is safe.
    Empty,
    /// Every readable header names this queue id.
    Agreed {
        /// The queue id.
        id: u128,
        /// Headers read.
        headers: u32,
    },
    /// Job files whose headers are unreadable or name more than one queue (`ids` distinct
    /// ids; 0 when none was readable).
    Lost {
        /// Job files found.
        jobs: u32,
        /// Distinct queue ids among the readable headers.
        ids: u32,
    },
}

/// Byte offset of the queue id in a job header (see the layout in `src/format.rs`).
const HEADER_QUEUE_OFF: usize = 32;

/// The queue id in the header of job file `name` in `dir`: only the 128 header bytes are
/// read, and magic, version and header length must be right. `None` when unreadable.
pub(crate) fn header_queue_id(dir: BorrowedFd<'_>, name: &str, sys: &Sys) -> Option<u128> {
    use crate::disk::format::{HEADER_LEN, MAGIC, VERSION};
    let fd = sys.open_regular_ro(dir, name).ok()?;
    let mut h = [0u8; HEADER_LEN];
    let n = rustix::io::pread(fd.as_fd(), &mut h[..], 0).ok()?;
    let version = u16::from_le_bytes([h[8], h[9]]);
    let hlen = u16::from_le_bytes([h[10], h[11]]);
    if n < HEADER_LEN || h[..8] != MAGIC || version != VERSION || hlen as usize != HEADER_LEN {
        return None;
    }
    let mut q = [0u8; 16];
    q.copy_from_slice(&h[HEADER_QUEUE_OFF..HEADER_QUEUE_OFF + 16]);
    Some(u128::from_be_bytes(q))
}

/// Names of the entries of `dir` accepted by `keep`.
fn list_names(sys: &Sys, dir: BorrowedFd<'_>, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let _ = sys.read_dir(dir, |name, _, _| {
        if let Some(n) = name.filter(|n| keep(n)) {
            out.push(n.to_string());
        }
    });
    out
}

/// Read the queue id from every job file (`*.sqj`, `*.rct`) under `ready/*/`, `receipts/*/`,
/// `delayed/*/`, `dead/*/` and `prio/<l>/*/`. Directories that are missing or unreadable are skipped.
fn survey_jobs(sys: &Sys, root: BorrowedFd<'_>) -> Survey {
    let mut jobs = 0u32;
    let mut ids: std::collections::BTreeMap<u128, u32> = Default::default();
    // The priority levels' slots too (`prio/<l>/<ss>`): a restore said "from 5 job
    // headers" of a queue of 6 jobs, one at priority 6 (breaker finding).
    let mut parents: Vec<String> = [READY_DIR, RECEIPTS_DIR, DELAYED_DIR, DEAD_DIR]
        .map(String::from)
        .to_vec();
    if let Ok(prio) = sys.open_dir_beneath(root, crate::disk::layout::PRIO_DIR) {
        let level = |n: &str| n.len() == 1 && n.as_bytes()[0].is_ascii_digit();
        for l in list_names(sys, prio.as_fd(), level) {
            parents.push(format!("{}/{l}", crate::disk::layout::PRIO_DIR));
        }
    }
    for parent in &parents {
        let Ok(pfd) = sys.open_dir_beneath(root, parent) else {
            continue;
        };
        for sub in list_names(sys, pfd.as_fd(), |_| true) {
            let Ok(dfd) = sys.open_dir_beneath(pfd.as_fd(), &sub) else {
                continue;
            };
            let is_job = |n: &str| n.ends_with(".sqj") || n.ends_with(".rct");
            for name in list_names(sys, dfd.as_fd(), is_job) {
                jobs += 1;
                if let Some(id) = header_queue_id(dfd.as_fd(), &name, sys) {
                    *ids.entry(id).or_default() += 1;
                }
            }
        }
    }
    match (jobs, ids.len()) {
        (0, _) => Survey::Empty,
        (_, 1) => {
            let (&id, &headers) = ids.iter().next().expect("one entry");
            Survey::Agreed { id, headers }
        }
        (jobs, n) => Survey::Lost {
            jobs,
            ids: n as u32,
        },
    }
}

/// What the layout and job names of a queue directory without a usable identity file say
/// of its shard count ([`orphan_shards`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrphanShards {
    /// No job name in any shard directory, and the `ready/` shard directories (if any) not
    /// a complete `00` to `<n-1>`: nothing to go by (the options' count is taken).
    Unknown,
    /// The layout tells: `ready/00` to `ready/<n-1>` (hex) and `receipts/00` to
    /// `receipts/<n-1>` are all there and nothing above, and every job name in a shard
    /// directory (`ready/`, `receipts/`, `prio/<l>/`) fits `n` (a job's shard is its id's
    /// low 64 bits modulo the count).
    Told(u16),
    /// Shard directories are missing (an empty one removed by a cleanup, say): the counts,
    /// ascending, from the highest shard directory's index + 1 up to 256 that every job
    /// name found fits. The queue's own count is always among them (unless job files were
    /// moved by hand), so one count alone is that count. Empty: none fits.
    Fits(Vec<u16>),
}

/// Read what directory `dir` (whose identity file is missing or damaged) says of its shard
/// count: see [`OrphanShards`]. Nothing is changed or followed (`openat2` with
/// `RESOLVE_NO_SYMLINKS`); unreadable directories are skipped. Reads every name under the
/// shard directories (one listing each; 1,000,000 jobs: about a second).
///
/// # Errors
/// `dir` cannot be opened (not done, nothing changed).
pub fn orphan_shards(dir: &Path) -> Result<OrphanShards> {
    let sys = Sys::new();
    let root = sys
        .open_dir_path(dir)
        .map_err(|e| Error::io(Call::Open, e, Outcome::NotDone, Some(dir.to_path_buf())))?;
    Ok(shard_evidence(&sys, root.as_fd()))
}

fn shard_evidence(sys: &Sys, root: BorrowedFd<'_>) -> OrphanShards {
    let is_shard =
        |n: &str| n.len() == 2 && crate::disk::name::parse_hex(n.as_bytes(), 2).is_some();
    let index = |n: &str| crate::disk::name::parse_hex(n.as_bytes(), 2).map_or(0, |v| v as u16);
    let is_job = |n: &str| n.len() > 33 && n.as_bytes()[32] == b'.';
    // (id's low 64 bits, the shard directory it was found in)
    let mut found: Vec<(u64, u16)> = Vec::new();
    let mut highest: Option<u16> = None;
    // The shard parents, each with the shard directories listed in it: `ready/` (0),
    // `receipts/` (1), then each `prio/<l>/` (2).
    let mut parents: Vec<(OwnedFd, u8)> = Vec::new();
    for (p, kind) in [(READY_DIR, 0u8), (RECEIPTS_DIR, 1)] {
        if let Ok(fd) = sys.open_dir_beneath(root, p) {
            parents.push((fd, kind));
        }
    }
    if let Ok(prio) = sys.open_dir_beneath(root, crate::disk::layout::PRIO_DIR) {
        for l in list_names(sys, prio.as_fd(), |_| true) {
            if let Ok(fd) = sys.open_dir_beneath(prio.as_fd(), &l) {
                parents.push((fd, 2));
            }
        }
    }
    let (mut ready, mut receipts): (Vec<u16>, Vec<u16>) = (Vec::new(), Vec::new());
    for (pfd, kind) in &parents {
        for sub in list_names(sys, pfd.as_fd(), is_shard) {
            let Ok(dfd) = sys.open_dir_beneath(pfd.as_fd(), &sub) else {
                continue;
            };
            let s = index(&sub);
            highest = Some(highest.map_or(s, |h| h.max(s)));
            match kind {
                0 => ready.push(s),
                1 => receipts.push(s),
                _ => {}
            }
            for name in list_names(sys, dfd.as_fd(), is_job) {
                if let Some(id) = crate::disk::name::JobId::parse(&name[..32]) {
                    found.push((id.0 as u64, s));
                }
            }
        }
    }
    let Some(highest) = highest else {
        return OrphanShards::Unknown;
    };
    let fits = |n: u16| found.iter().all(|(id, s)| id % n as u64 == *s as u64);
    // Told only when `ready/` and `receipts/` both hold every shard directory of one count
    // (`init` makes them all): a cleanup that removed the empty ones leaves a layout that
    // no longer tells (`ready/00`..`03` left of 8 restored 4 shards, breaker finding).
    let complete = |v: &mut Vec<u16>| {
        v.sort_unstable();
        v.iter().enumerate().all(|(i, s)| i as u16 == *s)
    };
    let n = ready.len() as u16;
    if complete(&mut ready)
        && complete(&mut receipts)
        && receipts.len() == ready.len()
        && n == highest + 1
        && fits(n)
    {
        return OrphanShards::Told(n);
    }
    if found.is_empty() {
        return OrphanShards::Unknown;
    }
    OrphanShards::Fits((highest + 1..=256).filter(|&n| fits(n)).collect())
}

/// Publish an identity for a directory whose identity file is missing or (`damaged`)
/// unusable: the one the job headers agree on, a new one if there are no jobs, or refuse.
fn establish_identity(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    opts: &Options,
    damaged: bool,
) -> Result<Identity> {
    // What a restored identity takes from the options, not from the queue: said, so that
    // settings the old file held (`steadq config`) are not reset without a word.
    let from_options = format!(
        "receipt policy {}, evidence log limit {} bytes x {} rotated files, delayed bucket \
         width {} ns from the options (pass them to `init`, or run `steadq config`, if the \
         queue had others)",
        opts.receipts, opts.evidence.max_bytes, opts.evidence.keep, opts.delayed_bucket_ns
    );
    let mine = match survey_jobs(sys, root) {
        Survey::Empty => {
            let id = random_u128();
            // A missing identity beside a queue's layout (a `--receipts none` queue whose
            // jobs were all acked keeps no job file) is a queue that had an id too: said,
            // as for a damaged one (it was made anew without a word).
            let had_layout = sys.open_dir_beneath(root, READY_DIR).is_ok();
            if damaged || had_layout {
                log::warn!(
                    "{}: identity file {IDENTITY_FILE} was {} and no job file names a \
                     queue id: this is a NEW queue id {id:032x}, not the old one (receipts, \
                     evidence lines and lease handles of the old id do not match it); \
                     {from_options}",
                    path.display(),
                    if damaged { "damaged" } else { "missing" },
                );
            }
            // No job to go by, but the layout may still tell (a queue whose every shard
            // directory is there): 16 shards were restored as 8, with `ready/08`..`0f`
            // then foreign (breaker finding).
            let shards = match shard_evidence(sys, root) {
                OrphanShards::Told(n) => n,
                _ => opts.shards,
            };
            Identity {
                version: opts.format_version,
                id,
                shards,
                delayed_bucket_ns: opts.delayed_bucket_ns,
                receipts: opts.receipts,
                evidence: opts.evidence,
            }
            .settled()
        }
        Survey::Agreed { id, headers } => {
            // The shard count: what the layout tells, else the options' count if every job
            // name fits it (the caller's word: `steadq init` passes it only from --shards),
            // else refused: a count that does not fit strands the jobs it misplaces.
            let (shards, how) = match shard_evidence(sys, root) {
                OrphanShards::Told(n) => (n, "from ready/"),
                OrphanShards::Unknown => (opts.shards, "from the options: no job name in ready/"),
                // Only one count fits: the queue's own always fits, so it is that one.
                OrphanShards::Fits(f) if f.len() == 1 => (f[0], "from the job names: only it fits"),
                OrphanShards::Fits(f) if f.contains(&opts.shards) => {
                    (opts.shards, "from the options: the job names fit it")
                }
                OrphanShards::Fits(fits) => {
                    return Err(Error::not_done(
                        ErrorKind::ShardsUnknown { fits },
                        Some(path.to_path_buf()),
                    ))
                }
            };
            log::warn!(
                "{}: identity file {IDENTITY_FILE} was {}; restored queue id {id:032x} from \
                 {headers} job headers ({shards} shards {how}; {from_options})",
                path.display(),
                if damaged { "damaged" } else { "missing" },
            );
            Identity {
                version: opts.format_version,
                id,
                shards,
                delayed_bucket_ns: opts.delayed_bucket_ns,
                receipts: opts.receipts,
                evidence: opts.evidence,
            }
            .settled()
        }
        Survey::Lost { jobs, ids } => {
            return Err(Error::not_done(
                ErrorKind::IdentityLost { jobs, ids },
                Some(path.to_path_buf()),
            ))
        }
    };
    if damaged {
        set_aside_damaged(sys, root, path)?;
    }
    publish_identity(sys, root, path, &mine)?;
    read_identity(sys, root, path)
}

/// Move a damaged identity file to `.steadq.queue.damaged.<32 hex>` (kept as evidence) so a
/// new one can be published without replacing anything. If what was moved turns out to be a
/// good identity (another creator published it meanwhile), it is moved back.
fn set_aside_damaged(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let aside = format!(".{IDENTITY_FILE}.damaged.{:032x}", random_u128());
    let nd = |call, e| Error::io(call, e, Outcome::NotDone, Some(path.join(IDENTITY_FILE)));
    match sys.rename(root, IDENTITY_FILE, root, &aside) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(nd(Call::Rename, e)),
    }
    let mut buf = Vec::new();
    let good = sys
        .open_regular_ro(root, &aside)
        .and_then(|fd| sys.read_all(fd.as_fd(), 4096, &mut buf))
        .is_ok()
        && std::str::from_utf8(&buf).is_ok_and(|t| Identity::decode(t).is_ok());
    if good {
        match sys.rename(root, &aside, root, IDENTITY_FILE) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(nd(Call::Rename, e)),
        }
    }
    log::warn!("{}: damaged identity file kept as {aside}", path.display());
    Ok(())
}

/// `EPERM` or `ENOSYS` from `renameat2` of a file SteadQ just made: the call is blocked (a
/// seccomp profile, a sandbox), which is not the filesystem's doing.
fn rename_refused(errno: Errno, path: &Path) -> Error {
    Error::not_done(
        ErrorKind::RenameRefused {
            errno: errno.into(),
        },
        Some(path.to_path_buf()),
    )
}

/// The longest name SteadQ writes: a leased job name. Temp and probe names
/// (`<boot32>.<pid8>.<rand32>.probe`, 80 bytes) and the identity's temp and damaged names
/// (at most 54 bytes) are shorter.
const LONGEST_NAME: u64 = crate::disk::scan::LEASED_PRIO_NAME_LEN as u64;

/// Check the filesystem's longest name (`statfs(2)` `f_namelen`; 0 or less: not reported)
/// against [`LONGEST_NAME`].
fn check_name_limit(f_namelen: i64) -> core::result::Result<(), ErrorKind> {
    match u64::try_from(f_namelen) {
        Ok(allowed) if allowed > 0 && allowed < LONGEST_NAME => Err(ErrorKind::NamesTooLong {
            allowed,
            needed: LONGEST_NAME,
        }),
        _ => Ok(()),
    }
}

/// The name of a filesystem refused from its `statfs(2)` magic (`f_type`) alone, `None` for
/// any other. NFS (`NFS_SUPER_MAGIC` 0x6969, every version): its `rename` takes no flags, so
/// `renameat2(RENAME_NOREPLACE)` fails with `EINVAL` (`rename(2)`), and its `flock` goes to
/// the lock daemon and waits as long as that does not answer. Other filesystems are judged by
/// the rename probe ([`probe_rename`]).
pub(crate) fn refused_filesystem(magic: i64) -> Option<&'static str> {
    match magic as u32 {
        0x6969 => Some(fs_name(magic)),
        _ => None,
    }
}

/// Check the filesystem holding `root` (at `path`) with one `fstatfs(2)`, the first call
/// after the root's open and before anything that could block there (a `flock`, the probe):
/// [`refused_filesystem`], then [`check_name_limit`]. A failing `fstatfs` is not a refusal:
/// the probe or the first long rename will say what is wrong.
///
/// # Errors
/// Not done: [`ErrorKind::UnsupportedFilesystem`] naming the filesystem, or
/// [`ErrorKind::NamesTooLong`], with `path`.
fn check_filesystem(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let Ok((magic, name_max)) = sys.fs_type_and_name_max(root) else {
        return Ok(());
    };
    let refuse = |kind| Err(Error::not_done(kind, Some(path.to_path_buf())));
    if let Some(fs_type) = refused_filesystem(magic) {
        return refuse(ErrorKind::UnsupportedFilesystem { fs_type });
    }
    match check_name_limit(name_max) {
        Err(kind) => refuse(kind),
        Ok(()) => Ok(()),
    }
}

/// Refuse a new queue of `shards` shards where the filesystem of `root` has fewer free inodes
/// than its layout takes: its directories (5 and two per shard), the identity and
/// `evidence.log`, and `root` itself when this call made it (`made`: it is counted on both
/// sides, as the user saw the inodes before `init`). The rename probe's temp file needs
/// none: the probe is skipped when the filesystem is full. Without this `init` on a
/// filesystem out of inodes published the identity, then failed part-way through the
/// directories (indeterminate, an incomplete queue). A filesystem that does not count
/// inodes, or a failing `fstatfs`, is not refused: a `mkdir` that finds none says so.
fn check_inodes(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    shards: u16,
    made: bool,
) -> Result<()> {
    let needed = CREATED_DIRS.len() as u64 + 2 * u64::from(shards) + 2 + u64::from(made);
    match sys.fs_inodes(root) {
        Ok((total, free)) if total > 0 && free + u64::from(made) < needed => Err(Error::not_done(
            ErrorKind::TooFewInodes {
                needed,
                free: free + u64::from(made),
            },
            Some(path.to_path_buf()),
        )),
        _ => Ok(()),
    }
}

/// Make directory `name` in `parent` (at `ppath`) unless it is there, and make it durable.
/// `changed` says whether the calling `create` changed anything yet, and is set when this
/// makes the directory. Errors: indeterminate once something changed (the barrier after
/// this `mkdir` included); a `mkdir` or check that fails before then is not done (it
/// reported an incomplete queue out of inodes as "it may have happened": helper's finding).
fn ensure_dir(
    sys: &Sys,
    parent: BorrowedFd<'_>,
    name: &str,
    ppath: &Path,
    changed: &mut bool,
) -> Result<()> {
    let r = match sys.mkdir(parent, name) {
        Ok(()) => {
            *changed = true;
            sys.fsync_dir(Barrier::Create, parent)
                .map_err(|e| (Call::FsyncDir, e, ppath.to_path_buf()))
        }
        // Must be a real directory, not a symlink or file planted under the name.
        Err(Errno::EXIST) => sys
            .open_dir_beneath(parent, name)
            .map(drop)
            .map_err(|e| (Call::Open, e, ppath.join(name))),
        Err(e) => Err((Call::Mkdir, e, ppath.join(name))),
    };
    let o = match changed {
        true => Outcome::Indeterminate,
        false => Outcome::NotDone,
    };
    r.map_err(|(c, e, at)| Error::io(c, e, o, Some(at)))
}

/// Check once per open that `renameat2(RENAME_NOREPLACE)` works here: a probe file in `tmp/`
/// is renamed and removed. NFS and old FUSE answer `EINVAL` (see `rename(2)`).
fn probe_rename(sys: &Sys, tmp: BorrowedFd<'_>, root: &Path, boot_id: u128) -> Result<()> {
    let probe = || TempName::new(boot_id, TempKind::Probe, random_u128()).format();
    let (a, b) = (probe(), probe());
    let nd = |call, e| {
        Error::io(
            call,
            e,
            Outcome::NotDone,
            Some(root.join(TMP_DIR).join(a.as_str())),
        )
    };
    match sys.create_file(tmp, &a) {
        Ok(fd) => drop(fd),
        // A reader without write access (a monitoring user), or a read-only mount: it cannot
        // change the queue anyway, so it may still look. Writers fail later, naming the path.
        // A full disk (no blocks or no inodes) must not lock out the commands that look and
        // repair (status, list, fsck, recover, dead purge, compact); a writer on a full disk
        // fails at its own write, with "disk full".
        // ENOTDIR: `tmp/` is not a directory, held by the stand-in (`open_dirs` warned).
        Err(
            e @ (Errno::ACCESS
            | Errno::PERM
            | Errno::ROFS
            | Errno::NOSPC
            | Errno::DQUOT
            | Errno::NOTDIR),
        ) => {
            log::debug!(
                "{}: rename probe skipped ({e})",
                root.join(TMP_DIR).display()
            );
            return Ok(());
        }
        Err(e) => return Err(nd(Call::Open, e)),
    }
    let r = sys.rename(tmp, &a, tmp, &b);
    let leftover = if r.is_ok() { &b } else { &a };
    let _ = sys.unlink(tmp, leftover);
    match r {
        Ok(()) => Ok(()),
        Err(Errno::INVAL) => {
            let fs_type = sys.fs_magic(tmp).map(fs_name).unwrap_or("unknown");
            Err(Error::not_done(
                ErrorKind::UnsupportedFilesystem { fs_type },
                Some(root.to_path_buf()),
            ))
        }
        Err(e @ (Errno::PERM | Errno::NOSYS)) => Err(rename_refused(e, root)),
        Err(e) => Err(nd(Call::Rename, e)),
    }
}

/// [`ErrorKind::NotEmpty`] when `root` (no identity file in it) holds an entry that is not
/// one of a queue's root entries (an interrupted `init` leaves only those), its identity
/// file's temp names, a rotated evidence file, or `lost+found` (a filesystem's root).
fn refuse_foreign_entries(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> Result<()> {
    use crate::disk::name::parse_hex;
    use crate::disk::sys::EntryType;
    let mut foreign: Option<String> = None;
    let mut note = |n: String| {
        if foreign.as_ref().is_none_or(|f| n < *f) {
            foreign = Some(n);
        }
    };
    let read_err = |e, at: &str| Error::io(Call::ReadDir, e, Outcome::NotDone, Some(path.join(at)));
    let fs_root = is_fs_root(sys, root, path);
    sys.read_dir(root, |name, raw, t| {
        let ours = name.is_some_and(|n| {
            crate::disk::layout::ROOT_ENTRIES.contains(&n)
                || n == crate::disk::layout::PRIO_DIR
                || (n == LOST_FOUND && fs_root && t != EntryType::File && t != EntryType::Other)
                || n.starts_with(&format!(".{IDENTITY_FILE}."))
                || crate::admin::receipts::is_rotated_evidence(n)
        });
        if !ours {
            note(name.map_or_else(|| raw.to_string_lossy().into_owned(), str::to_string));
        }
    })
    .map_err(|e| read_err(e, "."))?;
    // Down through what a queue holds: an interrupted `init` leaves its directories empty or
    // holding only what a queue puts there (shard and bucket directories, temp and job files
    // in tmp/), and a queue that lost its identity holds job files one level deeper, in its
    // shards and buckets, and maybe `keys/` and `prio/<l>/<ss>/`. Anything else there, or
    // one of them that is not a directory (a symlink `ready -> /etc`), is someone's:
    // refused before anything is made. Job names are checked for their shape only (no
    // identity, so no tag); their contents are fsck's.
    #[derive(Clone, Copy, PartialEq)]
    enum Holds {
        Temps,
        Shards,
        Buckets,
        Levels,
        Keys,
        Jobs,
    }
    let mut todo: Vec<(String, Holds)> = vec![
        (TMP_DIR.into(), Holds::Temps),
        (READY_DIR.into(), Holds::Shards),
        (RECEIPTS_DIR.into(), Holds::Shards),
        (DEAD_DIR.into(), Holds::Buckets),
        (DELAYED_DIR.into(), Holds::Buckets),
        (crate::disk::layout::PRIO_DIR.into(), Holds::Levels),
        (crate::disk::layout::KEYS_DIR.into(), Holds::Keys),
    ];
    while let Some((d, holds)) = todo.pop() {
        let fd = match sys.open_dir_beneath(root, &d) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => continue,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                note(format!("{d} (not a directory)"));
                continue;
            }
            Err(e) => {
                return Err(Error::io(
                    Call::Open,
                    e,
                    Outcome::NotDone,
                    Some(path.join(&d)),
                ))
            }
        };
        let mut deeper = Vec::new();
        sys.read_dir(fd.as_fd(), |name, raw, t| {
            let dir = matches!(t, EntryType::Dir | EntryType::Unknown);
            let file = matches!(t, EntryType::File | EntryType::Unknown);
            let job = |n: &str| file && JobName::parse_untagged(n).is_ok();
            let next = name.and_then(|n| match holds {
                Holds::Temps => (file && TempName::parse(n).is_some() || job(n)).then_some(None),
                Holds::Jobs => job(n).then_some(None),
                Holds::Keys => (file && crate::ops::keys::is_key_name(n)).then_some(None),
                Holds::Shards => {
                    (dir && parse_hex(n.as_bytes(), 2).is_some()).then_some(Some(Holds::Jobs))
                }
                Holds::Buckets => {
                    (dir && parse_hex(n.as_bytes(), 16).is_some()).then_some(Some(Holds::Jobs))
                }
                Holds::Levels => (dir && n.len() == 1 && matches!(n.as_bytes()[0], b'0'..=b'7'))
                    .then_some(Some(Holds::Shards)),
            });
            match (next, name) {
                (Some(Some(h)), Some(n)) => deeper.push((format!("{d}/{n}"), h)),
                (Some(None), _) => {}
                _ => {
                    let n = name.map_or_else(|| raw.to_string_lossy().into_owned(), str::to_string);
                    note(format!("{d}/{n}"));
                }
            }
        })
        .map_err(|e| read_err(e, &d))?;
        todo.extend(deeper);
    }
    match foreign {
        Some(entry) => Err(Error::not_done(
            ErrorKind::NotEmpty { entry },
            Some(path.to_path_buf()),
        )),
        None => Ok(()),
    }
}

/// Whether a queue in directory `dir` publishes job files and key entries through a named
/// file in `tmp/` rather than an `O_TMPFILE` (btrfs with barriers on: `Queue::assemble`,
/// `logs_fsync_per_inode`; DESIGN.md, Barriers), false elsewhere or when `dir` cannot be
/// opened. For tests (feature `faults`, as the module's export).
#[cfg(feature = "faults")]
pub fn publishes_named(dir: &std::path::Path) -> bool {
    let sys = crate::disk::sys::Sys::new();
    sys.open_dir_path(dir)
        .is_ok_and(|fd| logs_fsync_per_inode(&sys, fd.as_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with `ready/<ss>` for each of `dirs`, each holding a job-like name for
    /// each id of `jobs` placed there (only the names are read).
    fn layout(tag: &str, dirs: &[u16], jobs: &[(u128, u16)]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sq-evidence-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for s in dirs {
            std::fs::create_dir_all(d.join(format!("ready/{s:02x}"))).unwrap();
            std::fs::create_dir_all(d.join(format!("receipts/{s:02x}"))).unwrap();
        }
        for (id, s) in jobs {
            std::fs::write(d.join(format!("ready/{s:02x}/{id:032x}.g0.sqj")), b"").unwrap();
        }
        d
    }

    #[test]
    fn shard_evidence_tells_fits_or_says_it_cannot() {
        // Every shard directory there: the layout tells.
        let d = layout("told", &[0, 1, 2, 3], &[(5, 1), (7, 3)]);
        assert_eq!(orphan_shards(&d).unwrap(), OrphanShards::Told(4));
        // A receipt shard gone (a cleanup of empty directories): the layout no longer tells.
        std::fs::remove_dir(d.join("receipts/03")).unwrap();
        let OrphanShards::Fits(f) = orphan_shards(&d).unwrap() else {
            panic!("told without receipts/03")
        };
        assert_eq!(f, vec![4]); // 5 % 4 = 1 and 7 % 4 = 3; no other count from 4 on fits
                                // Directories missing: the counts from the highest index + 1 that fit every name.
        let d2 = layout("fits", &[5, 6], &[(21, 5), (13, 5), (6, 6)]);
        let OrphanShards::Fits(f) = orphan_shards(&d2).unwrap() else {
            panic!("told")
        };
        // 8 fits (21%8=5, 13%8=5, 6%8=6); 16 does not (13%16=13); 7 does not (21%7=0).
        assert!(f.contains(&8), "{f:?}");
        assert!(!f.contains(&16) && !f.contains(&7), "{f:?}");
        assert!(f
            .iter()
            .all(|&n| n >= 7 && [21u128, 13].iter().all(|i| i % n as u128 == 5)));
        // One count alone fits: every id is 7 modulo 12 and the ids minus 7 have 12 as
        // their greatest common divisor, so of 8..=256 only 12 fits.
        let only: Vec<(u128, u16)> = (0..40u128).map(|k| (12 * (k * 7919 + 3) + 7, 7)).collect();
        let d3 = layout("one", &[7], &only);
        let OrphanShards::Fits(f) = orphan_shards(&d3).unwrap() else {
            panic!("told")
        };
        assert_eq!(f, vec![12]);
        // No shard directory at all: nothing to go by.
        let d4 = layout("none", &[], &[]);
        std::fs::create_dir_all(d4.join("ready")).unwrap();
        assert_eq!(orphan_shards(&d4).unwrap(), OrphanShards::Unknown);
        for d in [d, d2, d3, d4] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn only_nfs_is_refused_by_its_magic() {
        assert_eq!(refused_filesystem(0x6969), Some("nfs"));
        // ext4, xfs, btrfs, tmpfs, fuse, cifs, overlayfs, f2fs: judged by the rename probe.
        for ok in [
            0xEF53_i64,
            0x5846_5342,
            0x9123_683E,
            0x0102_1994,
            0x6573_5546,
            0xFF53_4D42,
            0x794C_7630,
            0xF2F5_2010,
        ] {
            assert_eq!(refused_filesystem(ok), None, "{ok:#x}");
        }
    }

    #[test]
    fn name_limit_is_checked() {
        assert_eq!(
            check_name_limit(143),
            Err(ErrorKind::NamesTooLong {
                allowed: 143,
                needed: 199
            })
        );
        assert!(check_name_limit(198).is_err());
        for ok in [199, 255, 1024, 0, -1] {
            assert_eq!(check_name_limit(ok), Ok(()), "{ok}");
        }
        // The real filesystem the tests run on allows 196-byte names.
        let here = std::env::temp_dir();
        let fd = Sys::new().open_dir_path(&here).unwrap();
        assert_eq!(check_filesystem(&Sys::new(), fd.as_fd(), &here), Ok(()));
    }
}
