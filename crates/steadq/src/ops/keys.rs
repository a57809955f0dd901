//! Idempotency keys: at most one job per key while the key lives.
//!
//! A key is 1..=128 bytes of `[A-Za-z0-9._:-]`. Its entry is the file
//! `keys/<64 hex>`, the hex being SHA-256(`"steadq-key-v1"`, `0x00`, queue id as 16 bytes
//! big-endian, the key). The entry is written unnamed (`O_TMPFILE` in `keys/`), fsynced, and
//! given its name with `linkat`, which never replaces: **`EEXIST` means the key is taken** and
//! the enqueue is a duplicate. It is made durable (fsync of the file and of `keys/`) *before*
//! the job is published, so a job with a key never exists without its key entry. Its text:
//!
//! ```text
//! steadq-key 1
//! key=<the key>
//! id=<32 hex: the job id chosen before publishing>
//! name=<the job's first name, relative to the root, or "-" for a delayed job>
//! creator=<boot id 32 hex> <pid> <pid namespace inode, 0 if unknown>
//! ```
//!
//! A duplicate finds the job by its first name (one `fstatat`), else by listing the queue,
//! else by its line in the evidence log (acked, and its receipt removed: receipt policy
//! `none`, or compaction). A key whose job does not exist was left by an enqueue that failed or died before
//! publishing, or is being published right now. While its creator process is alive (same boot
//! and pid namespace, `pidfd_open(2)` answers) and the key is younger than [`KEY_ORPHAN_AFTER`],
//! a duplicate waits on inotify for the job to appear (and on the creator's pidfd for its
//! exit), at most [`KEY_WAIT_MAX`] in all: then it fails not done naming the entry and the pid
//! it names (a user who may write `keys/` can plant an entry naming a live process of hers
//! and refresh its ctime; neither is trusted for longer than that). Once the creator is gone (or the key is older), the key is an **orphan**: it is
//! retired by renaming it, without replacing, to `keys/<64 hex>.<job id>.gone` (a tombstone;
//! of two processes retiring the same orphan exactly one rename succeeds, and a stale retire
//! of a newer key fails with `EEXIST` on the tombstone) and the enqueue starts again.
//!
//! Retention: [`Queue::compact_keys`] retires keys older than the retention window whose job
//! is no longer live (acked, dead or gone), retires orphans, and removes tombstones older than
//! an hour. So a key deduplicates from its enqueue until its job is settled *and* the
//! retention window has passed.

use crate::disk::barrier::Barrier;
use crate::disk::layout::{DELAYED_DIR, TMP_DIR};
use crate::disk::name::{JobId, JobName};
use crate::disk::state::State;
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::ops::enqueue::EnqueueError;
use crate::ops::enqueue::EnqueueOptions;
use crate::ops::enqueue_stream::Source;
use crate::ops::making::Origin;
use crate::queue::Queue;
use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// The directory of key entries in the queue root.
pub use crate::disk::layout::KEYS_DIR;
/// A key whose job never appeared is an orphan after this long even if its creator seems
/// alive (a reused pid): 10 minutes.
pub const KEY_ORPHAN_AFTER: Duration = Duration::from_secs(600);
/// The longest an enqueue with a key waits for the job of a key entry whose creator seems
/// alive (3 s), then fails not done ([`crate::ErrorKind::KeyPending`]) naming the entry.
/// The creator's liveness and the entry's age are what a user who may write `keys/` can
/// fake (a planted entry naming one of her live processes, its ctime refreshed by a rename):
/// without the bound every enqueue with that key waited up to [`KEY_ORPHAN_AFTER`], and
/// for ever while she refreshed it. An honest creator publishes its job within
/// milliseconds once it holds the key, unless it streams a large payload.
pub const KEY_WAIT_MAX: Duration = Duration::from_secs(3);
/// Tombstones of retired keys are kept this long (1 hour) before `compact_keys` removes them.
pub const TOMBSTONE_KEEP: Duration = Duration::from_secs(3600);

/// An idempotency key: 1..=128 bytes of `[A-Za-z0-9._:-]`. `Copy`, so
/// [`EnqueueOptions`] stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    len: u8,
    bytes: [u8; 128],
}

impl Key {
    /// The longest key, bytes.
    pub const MAX_LEN: usize = 128;

    /// A key, or `None` when `s` is empty, longer than 128 bytes, or has a byte outside
    /// `[A-Za-z0-9._:-]`.
    pub fn new(s: &str) -> Option<Key> {
        let b = s.as_bytes();
        let ok = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-');
        if b.is_empty() || b.len() > Key::MAX_LEN || !b.iter().all(ok) {
            return None;
        }
        let mut bytes = [0u8; 128];
        bytes[..b.len()].copy_from_slice(b);
        Some(Key {
            len: b.len() as u8,
            bytes,
        })
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).expect("checked ASCII")
    }

    /// The entry name for this key in queue `queue_id`: 64 lowercase hex digits of SHA-256.
    pub fn entry_name(&self, queue_id: u128) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"steadq-key-v1\0");
        h.update(queue_id.to_be_bytes());
        h.update(self.as_str().as_bytes());
        let d: [u8; 32] = h.finalize().into();
        crate::disk::format::hex32(&d).as_str().to_string()
    }
}

impl core::fmt::Debug for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Key({:?})", self.as_str())
    }
}

impl core::fmt::Display for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an enqueue with a key did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// A new job was enqueued (done).
    New(JobId),
    /// The key was taken: nothing was enqueued; this is the job the key names (live, or
    /// settled within the retention window).
    Duplicate(JobId),
}

impl Enqueued {
    /// The job id, new or existing.
    pub fn id(self) -> JobId {
        match self {
            Enqueued::New(i) | Enqueued::Duplicate(i) => i,
        }
    }

    /// True for [`Enqueued::Duplicate`].
    pub fn is_duplicate(self) -> bool {
        matches!(self, Enqueued::Duplicate(_))
    }
}

/// A key entry as read back.
#[derive(Debug)]
struct Entry {
    key: String,
    id: JobId,
    name: Option<String>,
    boot: u128,
    pid: i32,
    pidns: u64,
    /// ctime of the entry, unix ns.
    ctime_ns: u64,
}

impl Entry {
    fn decode(text: &str, ctime_ns: u64) -> Option<Entry> {
        let mut l = text.lines();
        if l.next()? != "steadq-key 1" {
            return None;
        }
        let key = l.next()?.strip_prefix("key=")?.to_string();
        let id = JobId::parse(l.next()?.strip_prefix("id=")?)?;
        let name = match l.next()?.strip_prefix("name=")? {
            "-" => None,
            n => Some(n.to_string()),
        };
        let mut c = l.next()?.strip_prefix("creator=")?.split(' ');
        let boot = u128::from_str_radix(c.next()?, 16).ok()?;
        let pid = c.next()?.parse().ok()?;
        let pidns = c.next()?.parse().ok()?;
        Some(Entry {
            key,
            id,
            name,
            boot,
            pid,
            pidns,
            ctime_ns,
        })
    }
}

/// This process's pid namespace inode (`/proc/self/ns/pid`), 0 if unknown.
fn pidns() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| {
            let s = p.to_string_lossy().into_owned();
            s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

/// (queue id, job id) of the keyed enqueues of this process between key and job.
fn in_flight() -> std::sync::MutexGuard<'static, std::collections::HashSet<(u128, u128)>> {
    static SET: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<(u128, u128)>>> =
        std::sync::OnceLock::new();
    SET.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Marks a keyed enqueue of this process as in flight until dropped.
struct InFlight(u128, u128);

impl InFlight {
    fn new(queue: u128, id: JobId) -> InFlight {
        in_flight().insert((queue, id.0));
        InFlight(queue, id.0)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        in_flight().remove(&(self.0, self.1));
    }
}

/// What a taken key tells.
enum Taken {
    /// Its job exists (or existed): a duplicate.
    Job(JobId),
    /// No job, and the creator may still publish it: wait.
    Pending(Entry),
    /// No job and no creator: retire it.
    Orphan(Entry),
    /// The entry vanished meanwhile: try again.
    Gone,
}

fn ind(c: Call, e: Errno, p: std::path::PathBuf) -> Cause {
    Cause::io(c, e, Outcome::Indeterminate, Some(p))
}

impl Queue {
    /// Enqueue with an idempotency key ([`EnqueueOptions::key`]): a new job, or, when the key
    /// is taken, the job it names without enqueueing anything. Works across processes and
    /// crashes; see the module docs of `ops/keys.rs` (and DESIGN.md) for the rules. Without a
    /// key it is [`Queue::enqueue_with`] returning [`Enqueued::New`].
    ///
    /// A duplicate whose first enqueue is still publishing (another process between its key
    /// and its job) waits for it, on inotify, for as long as that process lives (at most
    /// [`KEY_ORPHAN_AFTER`]).
    ///
    /// # Errors
    /// As [`Queue::enqueue_with`] ([`ErrorKind::QueueFull`] included: a duplicate is
    /// answered even when the queue is full). A not-done error leaves no key behind that
    /// blocks a retry (an entry left by a failed cleanup is an orphan, retired by the retry).
    /// Indeterminate: the job may exist; a retry with the same key answers which.
    pub(crate) fn enqueue_unique(
        &self,
        payload: &[u8],
        o: &EnqueueOptions,
    ) -> Result<Enqueued, EnqueueError> {
        self.enqueue_unique_source(&mut Source::Bytes(payload), o)
            .map_err(EnqueueError::from_internal)
    }

    /// Publish `src`: write it (bytes) or publish its file (staged) with the id `id`.
    fn commit(&self, id: Option<JobId>, src: &mut Source<'_>, o: &EnqueueOptions) -> Result<JobId> {
        match src {
            Source::Bytes(b) => self.enqueue_as(id, b, o),
            Source::Staged(s) => s.publish(),
        }
    }

    /// [`Queue::enqueue_unique`] of bytes or of a streamed job, with the crate's error (its
    /// outcome not yet a type). A staged job keeps its id, chosen when it was written.
    pub(crate) fn enqueue_unique_source(
        &self,
        src: &mut Source<'_>,
        o: &EnqueueOptions,
    ) -> Result<Enqueued> {
        let priority = o.priority_on(&self.ident)?;
        let Some(key) = o.key else {
            let _room = self.admit(1, src.len())?;
            return self.commit(None, src, o).map(Enqueued::New);
        };
        // Drawn before anything is made: a level behind a file refuses here, leaving
        // nothing (it left `keys/` and a tombstone of the key).
        let fresh = match src.id() {
            Some(id) => id,
            None => self.fresh_id(priority, self.clock.wall_ns() / 1_000_000)?,
        };
        let entry = key.entry_name(self.ident.id);
        let keys = self.keys_dir()?;
        let started = self.clock.boot_ns();
        loop {
            match self.key_taken(keys.as_fd(), &entry, &key)? {
                None => {}
                Some(Taken::Job(id)) => return Ok(Enqueued::Duplicate(id)),
                Some(Taken::Gone) => continue,
                Some(Taken::Pending(e)) => {
                    let waited = self.clock.boot_ns().saturating_sub(started);
                    let left = (KEY_WAIT_MAX.as_nanos() as u64).saturating_sub(waited);
                    if left == 0 {
                        let owner = self.sys.owner_nofollow(keys.as_fd(), &entry);
                        let kind = ErrorKind::KeyPending {
                            pid: e.pid,
                            owner: owner.map_or(u32::MAX, |o| o.0),
                            waited_ms: waited / 1_000_000,
                        };
                        let at = self.path(&format!("{KEYS_DIR}/{entry}"));
                        return Err(Cause::not_done(kind, Some(at)));
                    }
                    self.wait_for_job(&e, left);
                    continue;
                }
                Some(Taken::Orphan(e)) => {
                    if !self.retire_key(keys.as_fd(), &entry, e.id)? {
                        // Its tombstone is taken: it cannot be retired, nor the key used.
                        let at = self.path(&format!("{KEYS_DIR}/{entry}"));
                        return Err(Cause::io(
                            Call::Rename,
                            Errno::EXIST,
                            Outcome::NotDone,
                            Some(at),
                        ));
                    }
                    continue;
                }
            }
            let _room = self.admit(1, src.len())?;
            let id = fresh;
            let text = self.key_text(&key, id, priority, o);
            let _flight = InFlight::new(self.ident.id, id);
            if !self.link_key(keys.as_fd(), &entry, text.as_bytes())? {
                continue; // EEXIST: taken meanwhile; look at it
            }
            let o2 = EnqueueOptions {
                key: None,
                ..o.clone()
            };
            return match self.commit(Some(id), src, &o2) {
                Ok(id) => Ok(Enqueued::New(id)),
                Err(e) if e.outcome() == Outcome::NotDone => {
                    // No job: take the key back (a failure leaves an orphan, retired later).
                    let _ = self.retire_key(keys.as_fd(), &entry, id);
                    Err(e)
                }
                Err(e) => Err(e),
            };
        }
    }

    /// The text of key entry `key` for job `id` at `priority`: the key, the id, the job's
    /// first name (`-` for a delayed job) and its creator (boot id, pid, pid namespace).
    fn key_text(&self, key: &Key, id: JobId, priority: u8, o: &EnqueueOptions) -> String {
        let max = o.max_attempts.unwrap_or(self.opts.max_attempts);
        let first = match o.delay.filter(|d| !d.is_zero()) {
            None => {
                let n = JobName::new_ready(id, max)
                    .with_priority(priority)
                    .with_group(o.group);
                let rel = self.ident.slot_rel(self.ident.slot_of(&n));
                format!("{rel}/{}", n.format(self.ident.id))
            }
            Some(_) => "-".to_string(),
        };
        format!(
            "steadq-key 1\nkey={key}\nid={id}\nname={first}\ncreator={:032x} {} {}\n",
            self.clock.boot_id(),
            std::process::id(),
            pidns()
        )
    }

    /// `keys/`, made (and made durable in the root) on first use.
    fn keys_dir(&self) -> Result<OwnedFd> {
        let root = self.dirs.root.as_fd();
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(KEYS_DIR)));
        let (fd, origin) = self
            .made_dir(root, KEYS_DIR, KEYS_DIR)
            .map_err(|(c, e)| nd(c, e))?;
        if origin == Origin::Found {
            return Ok(fd);
        }
        if origin == Origin::MadeHere {
            // Shared like `ready/`: made 700 at umask 077 it refused every other user's
            // keyed enqueue for good.
            self.share_like(fd.as_fd(), crate::disk::layout::READY_DIR, KEYS_DIR);
        }
        // Until the root is synced the directory may vanish in a crash, with any key in it:
        // no job has been published yet, so that is still "not done". (Made by another
        // process just now: that one may not have synced the root yet.)
        self.barrier(Barrier::KeysDirMade, root)
            .map_err(|e| nd(Call::FsyncDir, e))?;
        Ok(fd)
    }

    /// Publish a key entry. `Ok(false)`: the name is taken (`EEXIST`). Every failure is not
    /// done for the enqueue (no job was published), even after the link: an entry that
    /// survives without a job is an orphan.
    fn link_key(
        &self,
        keys: std::os::fd::BorrowedFd<'_>,
        entry: &str,
        text: &[u8],
    ) -> Result<bool> {
        let rel = format!("{KEYS_DIR}/{entry}");
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel)));
        // The named route where the handle publishes jobs through tmp/ (btrfs, or no
        // `O_TMPFILE`): `Queue::assemble`, `logs_fsync_per_inode`.
        let named = self.sys.publish_mode() == Some(crate::disk::sys::Publish::Named);
        let fd = match (!named).then(|| self.retry_making(KEYS_DIR, || self.sys.open_tmpfile(keys)))
        {
            None | Some(Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL)) => None,
            Some(Ok(fd)) => Some(fd),
            Some(Err(e)) => return Err(nd(Call::Open, e)),
        };
        let linked = match fd {
            Some(fd) => {
                // Read by every user's enqueue of the same key.
                self.share_job_file(fd.as_fd());
                self.sys
                    .write_all(fd.as_fd(), text)
                    .map_err(|e| nd(Call::Write, e))?;
                self.barrier_file(Barrier::KeyFile, fd.as_fd())
                    .map_err(|e| nd(Call::Fsync, e))?;
                match self.sys.link_tmpfile(fd.as_fd(), keys, entry) {
                    Ok(()) => {
                        self.barrier_file(Barrier::KeyFile, fd.as_fd())
                            .map_err(|e| self.unlink_key(keys, entry, nd(Call::Fsync, e)))?;
                        true
                    }
                    Err(Errno::EXIST) => false,
                    Err(Errno::NOTSUP) => self.link_key_named(keys, entry, text)?,
                    Err(e) => return Err(nd(Call::Link, e)),
                }
            }
            None => self.link_key_named(keys, entry, text)?,
        };
        if linked {
            self.barrier(Barrier::KeysDir, keys)
                .map_err(|e| self.unlink_key(keys, entry, nd(Call::FsyncDir, e)))?;
        }
        Ok(linked)
    }

    /// Best-effort removal of our own key entry after a failure before the job existed.
    fn unlink_key(&self, keys: std::os::fd::BorrowedFd<'_>, entry: &str, e: Cause) -> Cause {
        let _ = self.sys.unlink(keys, entry);
        e
    }

    /// The fallback route: a named temp file in `tmp/`, renamed without replacing.
    fn link_key_named(
        &self,
        keys: std::os::fd::BorrowedFd<'_>,
        entry: &str,
        text: &[u8],
    ) -> Result<bool> {
        let tmp = self.durable_temp_file(Barrier::KeyFile, text, None)?;
        let rel = format!("{TMP_DIR}/{tmp}");
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel)));
        let t = self.dirs.tmp.as_fd();
        let r = match self.retry_making(KEYS_DIR, || self.sys.rename(t, &tmp, keys, entry)) {
            Ok(()) => Ok(true),
            Err(Errno::EXIST) => Ok(false),
            Err(e) => Err(nd(Call::Rename, e)),
        };
        if !matches!(r, Ok(true)) {
            let _ = self.sys.unlink(t, &tmp);
        }
        r
    }

    /// Read the entry `entry`; `None` when there is none.
    fn key_taken(
        &self,
        keys: std::os::fd::BorrowedFd<'_>,
        entry: &str,
        key: &Key,
    ) -> Result<Option<Taken>> {
        let rel = format!("{KEYS_DIR}/{entry}");
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel)));
        let fd = match self.sys.open_regular_ro(keys, entry) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(nd(Call::Open, e)),
        };
        let meta = self
            .sys
            .stat_nofollow(keys, entry)
            .map_err(|e| nd(Call::Stat, e))?;
        let mut buf = Vec::new();
        self.sys
            .read_all(fd.as_fd(), 4096, &mut buf)
            .map_err(|e| nd(Call::Read, e))?;
        let e = std::str::from_utf8(&buf)
            .ok()
            .and_then(|t| Entry::decode(t, meta.ctime_ns))
            .filter(|e| e.key == key.as_str())
            .ok_or_else(|| Cause::not_done(ErrorKind::BadKeyEntry, Some(self.path(&rel))))?;
        if self.job_exists(&e)? {
            return Ok(Some(Taken::Job(e.id)));
        }
        // No job. Look again: the entry may have been retired and replaced meanwhile.
        match self.sys.stat_nofollow(keys, entry) {
            Err(Errno::NOENT) => return Ok(Some(Taken::Gone)),
            Ok(m) if m.ctime_ns != meta.ctime_ns => return Ok(Some(Taken::Gone)),
            _ => {}
        }
        let age = self.clock.wall_ns().saturating_sub(e.ctime_ns);
        if age < KEY_ORPHAN_AFTER.as_nanos() as u64 && self.creator_alive(&e) {
            Ok(Some(Taken::Pending(e)))
        } else {
            Ok(Some(Taken::Orphan(e)))
        }
    }

    /// Is the creator of `e` a live process of this boot and pid namespace, still enqueueing
    /// with this key? (This process counts only while one of its enqueues holds the key.)
    fn creator_alive(&self, e: &Entry) -> bool {
        if e.boot != self.clock.boot_id() || e.pidns == 0 || e.pidns != pidns() {
            return false;
        }
        if e.pid as u32 == std::process::id() {
            return in_flight().contains(&(self.ident.id, e.id.0));
        }
        let Some(pid) = rustix::process::Pid::from_raw(e.pid) else {
            return false;
        };
        !matches!(rustix::process::test_kill_process(pid), Err(Errno::SRCH))
    }

    /// Does the job of `e` exist in any state (receipts included), or was it acked and its
    /// receipt removed (a line in the evidence log: receipt policy `none`, compaction)?
    /// Without the evidence, a key whose job was acked under policy `none` looked like an
    /// orphan: it was retired and the same key enqueued a second job, which ran again.
    fn job_exists(&self, e: &Entry) -> Result<bool> {
        if let Some(n) = &e.name {
            if self.sys.stat_nofollow(self.dirs.root.as_fd(), n).is_ok() {
                return Ok(true);
            }
        }
        match self.find(e.id).map_err(crate::Error::into_internal) {
            Ok(_) => Ok(true),
            Err(err) if *err.kind() == ErrorKind::NoSuchJob => self.acked_in_evidence(e.id),
            Err(err) => Err(err),
        }
    }

    /// Wait for the job of a pending key: inotify on its first directory (any name starting
    /// with its id) and the creator's pidfd (its exit), up to the orphan age and at most
    /// `max_ns`. One wake-up and the caller looks again.
    fn wait_for_job(&self, e: &Entry, max_ns: u64) {
        use rustix::event::{poll, PollFd, PollFlags};
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        let age = self.clock.wall_ns().saturating_sub(e.ctime_ns);
        let left = (KEY_ORPHAN_AFTER.as_nanos() as u64)
            .saturating_sub(age)
            .min(max_ns);
        let dir = e
            .name
            .as_deref()
            .and_then(|n| n.rsplit_once('/'))
            .map(|(d, _)| d);
        let ino = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok();
        if let (Some(fd), Some(d)) = (&ino, dir) {
            let _ = inotify::add_watch(
                fd,
                self.root.join(d),
                WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR,
            );
        } else if let Some(fd) = &ino {
            let _ = inotify::add_watch(
                fd,
                self.root.join(DELAYED_DIR),
                WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR,
            );
        }
        // The job may have appeared before the watch: check once more.
        if self.job_exists(e).unwrap_or(true) {
            return;
        }
        let pidfd = rustix::process::Pid::from_raw(e.pid).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        // Without a pidfd (old kernel), look at the creator again every second.
        let cap = if pidfd.is_some() {
            left
        } else {
            left.min(1_000_000_000)
        };
        let ts = rustix::time::Timespec {
            tv_sec: (cap / 1_000_000_000) as _,
            tv_nsec: (cap % 1_000_000_000) as _,
        };
        let mut fds: Vec<PollFd<'_>> = Vec::new();
        if let Some(fd) = &ino {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        if let Some(p) = &pidfd {
            fds.push(PollFd::new(p, PollFlags::IN));
        }
        let _ = poll(&mut fds, Some(&ts));
    }

    /// Retire the entry `entry` whose job is `id`: rename it, without replacing, to its
    /// tombstone `keys/<entry>.<id>.gone`, then fsync `keys/`. `Ok(true)` also when someone
    /// else retired it first (the entry is gone). `Ok(false)` when the tombstone's name is
    /// taken and the entry is still there (a member planted both: retiring it again would
    /// never end); the entry stays, named in a warning.
    fn retire_key(
        &self,
        keys: std::os::fd::BorrowedFd<'_>,
        entry: &str,
        id: JobId,
    ) -> Result<bool> {
        let tomb = format!("{entry}.{id}.gone");
        match self.sys.rename(keys, entry, keys, &tomb) {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(true),
            Err(Errno::EXIST) => {
                if let Err(Errno::NOENT) = self.sys.stat_nofollow(keys, entry) {
                    return Ok(true);
                }
                log::warn!(
                    "{}: an orphan key entry whose tombstone {tomb} already exists; left in \
                     place (move one of them away)",
                    self.path(&format!("{KEYS_DIR}/{entry}")).display()
                );
                return Ok(false);
            }
            Err(e) => {
                return Err(Cause::io(
                    Call::Rename,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&format!("{KEYS_DIR}/{entry}"))),
                ))
            }
        }
        self.barrier(Barrier::KeysDir, keys)
            .map_err(|e| ind(Call::FsyncDir, e, self.path(KEYS_DIR)))
            .map(|()| true)
    }

    /// Live keys: entries of `keys/` that are 64 hex digits (tombstones excluded). 0 when the
    /// queue has no `keys/`.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (not done) if `keys/` cannot be listed.
    pub fn live_keys(&self) -> crate::Result<u64> {
        let Ok(keys) = self.sys.open_dir_beneath(self.dirs.root.as_fd(), KEYS_DIR) else {
            return Ok(0);
        };
        let mut n = 0;
        self.sys
            .read_dir(keys.as_fd(), |name, _, _| {
                if name.is_some_and(is_entry_name) {
                    n += 1;
                }
            })
            .map_err(|e| self.read_dir_error(e, KEYS_DIR))?;
        Ok(n)
    }

    /// Expire keys: retire every key older than `retention` whose job is no longer live
    /// (acked, dead or gone), retire orphans (no job, creator gone), and remove tombstones
    /// older than [`TOMBSTONE_KEEP`]. Lists the whole queue once. Returns the keys retired.
    ///
    /// # Errors
    /// [`ErrorKind::Io`]: not done if nothing was removed yet, indeterminate after.
    pub fn compact_keys(&self, retention: Duration) -> Result<u32, crate::Error> {
        let Ok(keys) = self.sys.open_dir_beneath(self.dirs.root.as_fd(), KEYS_DIR) else {
            return Ok(0);
        };
        let (live, all) = self.job_ids()?;
        let names = self.key_names(keys.as_fd())?;
        let now = self.clock.wall_ns();
        let mut retired = 0u32;
        let mut removed_any = false;
        for n in names {
            let Ok(meta) = self.sys.stat_nofollow(keys.as_fd(), &n) else {
                continue;
            };
            let age = now.saturating_sub(meta.ctime_ns);
            if is_entry_name(&n) {
                let e = match self.load_key_entry(keys.as_fd(), &n, meta.ctime_ns) {
                    Ok(Some(e)) => e,
                    Ok(None) | Err(Errno::NOENT) => continue,
                    Err(err) => {
                        // A fifo, socket or directory planted here: never read, named.
                        let p = self.path(&format!("{KEYS_DIR}/{n}"));
                        log::warn!(
                            "{}; skipped",
                            Cause::io(Call::Open, err, Outcome::NotDone, Some(p))
                        );
                        continue;
                    }
                };
                let expired = age >= retention.as_nanos() as u64 && !live.contains(&e.id);
                let orphan = !all.contains(&e.id)
                    && (age >= KEY_ORPHAN_AFTER.as_nanos() as u64 || !self.creator_alive(&e))
                    && !self.job_exists(&e).unwrap_or(true);
                if expired || orphan {
                    let done = self.retire_key(keys.as_fd(), &n, e.id).map_err(|err| {
                        if removed_any {
                            err.with_outcome(Outcome::Indeterminate)
                        } else {
                            err
                        }
                    })?;
                    if done {
                        removed_any = true;
                        retired += 1;
                    }
                }
            } else if n.ends_with(".gone") && age >= TOMBSTONE_KEEP.as_nanos() as u64 {
                match self.sys.unlink(keys.as_fd(), &n) {
                    Ok(()) | Err(Errno::NOENT) => removed_any = true,
                    Err(e) => {
                        let o = if removed_any {
                            Outcome::Indeterminate
                        } else {
                            Outcome::NotDone
                        };
                        return Err(Cause::io(
                            Call::Unlink,
                            e,
                            o,
                            Some(self.path(&format!("{KEYS_DIR}/{n}"))),
                        )
                        .into());
                    }
                }
            }
        }
        if removed_any {
            self.barrier(Barrier::KeysDir, keys.as_fd())
                .map_err(|e| ind(Call::FsyncDir, e, self.path(KEYS_DIR)))?;
        }
        Ok(retired)
    }

    /// The ids of every job (`all`), and of those that are ready, leased or delayed
    /// (`live`): (live, all).
    fn job_ids(&self) -> Result<(HashSet<JobId>, HashSet<JobId>)> {
        let (mut live, mut all) = (HashSet::new(), HashSet::new());
        for l in self.list(None).map_err(crate::Error::into_internal)? {
            all.insert(l.name.id);
            if matches!(l.state, State::Ready | State::Leased | State::Delayed) {
                live.insert(l.name.id);
            }
        }
        Ok((live, all))
    }

    /// The names in `keys/` (UTF-8 ones; SteadQ writes no other).
    fn key_names(&self, keys: BorrowedFd<'_>) -> Result<Vec<String>> {
        let mut names = Vec::new();
        self.sys
            .read_dir(keys, |n, _, _| names.extend(n.map(str::to_string)))
            .map_err(|e| {
                let at = Some(self.path(KEYS_DIR));
                Cause::io(Call::ReadDir, e, Outcome::NotDone, at)
            })?;
        Ok(names)
    }

    /// Key entry `name` of `keys/` (changed at `ctime_ns`): `Err` when it cannot be read,
    /// `Ok(None)` when it reads but does not decode.
    fn load_key_entry(
        &self,
        keys: BorrowedFd<'_>,
        name: &str,
        ctime_ns: u64,
    ) -> core::result::Result<Option<Entry>, Errno> {
        let mut buf = Vec::new();
        self.sys
            .open_regular_ro(keys, name)
            .and_then(|fd| self.sys.read_all(fd.as_fd(), 4096, &mut buf))?;
        Ok(std::str::from_utf8(&buf)
            .ok()
            .and_then(|t| Entry::decode(t, ctime_ns)))
    }

    /// Whether live key entry `name` (64 hex) of `keys/` is damaged: it reads, but does not
    /// decode or names a key that does not hash to `name`. Every enqueue with its key then
    /// fails (`BadKeyEntry`) until the operator removes it, which lets the key's job be
    /// enqueued again: their call, so fsck only reports it. `false` when it reads and
    /// decodes, or cannot be read (vanished, no right), which says nothing of its content.
    pub(crate) fn key_entry_damaged(&self, keys: BorrowedFd<'_>, name: &str) -> bool {
        match self.load_key_entry(keys, name, 0) {
            Err(_) => false,
            Ok(entry) => entry
                .and_then(|e| Key::new(&e.key))
                .is_none_or(|k| k.entry_name(self.ident.id) != name),
        }
    }
}

/// A live key entry's name: 64 lowercase hex digits.
pub(crate) fn is_entry_name(n: &str) -> bool {
    n.len() == 64 && n.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `n` is a name `keys/` may hold: a live entry, or a tombstone
/// `<entry>.<job id, 32 hex>.gone`.
pub(crate) fn is_key_name(n: &str) -> bool {
    let tomb = n.strip_suffix(".gone").and_then(|t| t.split_once('.'));
    is_entry_name(n)
        || tomb.is_some_and(|(e, id)| {
            is_entry_name(e)
                && id.len() == 32
                && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_and_hashed() {
        assert!(Key::new("").is_none());
        assert!(Key::new(&"a".repeat(129)).is_none());
        assert!(Key::new("a b").is_none());
        assert!(Key::new("order/1").is_none());
        let k = Key::new(&"Az09._:-".repeat(16)).unwrap();
        assert_eq!(k.as_str().len(), 128);
        let a = Key::new("order-1").unwrap();
        assert_eq!(a.entry_name(1).len(), 64);
        assert_ne!(a.entry_name(1), a.entry_name(2));
        assert!(is_entry_name(&a.entry_name(1)));
        let text = "steadq-key 1\nkey=k\nid=0123456789abcdef0123456789abcdef\nname=-\ncreator=ff 12 4026531836\n";
        let e = Entry::decode(text, 5).unwrap();
        assert_eq!((e.key.as_str(), e.pid, e.name), ("k", 12, None));
    }
}
