//! Enqueue: write the whole job file unnamed, make it durable, then give it its name.
//!
//! Route (probed once, see [`crate::disk::sys::Sys::link_tmpfile`]): `O_TMPFILE` in the target
//! directory, write, fsync(file), `linkat` into place (the linearization point), fsync(file)
//! again (btrfs lost such data without it, see DESIGN.md; kept wherever a directory fsync
//! does not commit the whole journal), fsync(dir).
//! On btrfs (`queue::logs_fsync_per_inode`: another thread's fsync between the `linkat` and
//! the second fsync left torn jobs after a crash), and where `O_TMPFILE` or both `linkat`
//! forms are refused: a named file under `tmp/`, write,
//! fsync, `renameat2(RENAME_NOREPLACE)` into place (the linearization point), fsync(file)
//! again, fsync(tmp/) (not on btrfs: a name a crash leaves in tmp/ is recovery's,
//! `Shared::tmp_unsynced`), fsync(dir).
//! On xfs, journaled ext4 and f2fs the second fsync(file) and fsync(tmp/) are left out: the fsync of
//! the target directory commits the journal transaction holding the link or rename
//! (`ops/group.rs`, `one_barrier_per_rename`; DESIGN.md, Barriers).
//!
//! A payload read from an `io::Read` is written the same way, in chunks (ops/enqueue_stream.rs),
//! and published by the same code ([`Queue::publish_durably`]).
//!
//! Outcomes: any failure before the link/rename is not done (an unnamed file vanishes with its
//! fd; a named temp file is unlinked, or left for recovery to remove). A link/rename that
//! fails with `EIO` is indeterminate, any other errno not done. A failed barrier after it is
//! indeterminate.

use crate::disk::barrier::Barrier;
use crate::disk::format::encode_header;
use crate::disk::layout::{delayed_bucket, dir_rel, DELAYED_DIR, TMP_DIR};
use crate::disk::name::{JobId, JobName, Kind};
use crate::disk::state::{self, Op, State};
use crate::disk::sys::{Call, Errno, Publish};
use crate::error::{display_as, error_accessors, Cause, Error, ErrorKind, Outcome, Result};
use crate::queue::{Durability, Queue};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Per-job settings for [`Queue::enqueue_with`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// Claims allowed before the job is dead-lettered; `None` uses the queue's default.
    pub max_attempts: Option<u32>,
    /// Do not hand the job out before this much time has passed; `None` or zero: ready at
    /// once. The not-before time must fall before the year 2262 (else
    /// [`ErrorKind::InvalidArgument`], not done). Within this boot the delay runs on the
    /// boot clock (`CLOCK_BOOTTIME`), so a wall-clock jump does not move it; after a reboot
    /// the job is due at its wall-clock time (a version-1 queue: the wall clock always).
    pub delay: Option<Duration>,
    /// Idempotency key: at most one job per key. When the key is taken nothing is enqueued
    /// and [`Queue::enqueue_with`] returns [`crate::Enqueued::Duplicate`] with the job the
    /// key names. Works across processes and crashes (DESIGN.md, Keys).
    pub key: Option<crate::ops::keys::Key>,
    /// Priority `0..`[`crate::PRIORITY_LEVELS`] (0..=7): a claim takes the highest
    /// level's oldest ready job first. `None` is [`crate::DEFAULT_PRIORITY`] (3).
    /// A version-1 or version-2 queue takes only the default.
    pub priority: Option<u8>,
    /// When the queue is full ([`crate::Limits`]), wait up to this long for room: the
    /// enqueue sleeps on inotify (a job leaving `ready/`, or `steadq.limits` replaced) and
    /// tries again, no polling. `None`: a full queue refuses at once
    /// ([`ErrorKind::QueueFull`], not done).
    pub wait: Option<Duration>,
    /// Jobs this one waits for (its dependencies; at most [`crate::MAX_AFTER`], 64): it is
    /// not claimable until every one of them is acked, and is dead-lettered with reason
    /// `dependency` when one is dead-lettered. Empty (the default): none. Each must be in
    /// this queue when this job is enqueued (a job can only name jobs made before it, so
    /// no cycle can form). Not with `delay`, `key` or `wait` (DESIGN.md, Dependencies).
    pub after: Vec<JobId>,
    /// The job's group: at most the group's limit of its jobs are leased at once, across
    /// every process ([`crate::Queue::set_group_limit`]; no limit set: no effect but the
    /// name). Carried in the job's name (`.q<group>`); a version-1 or version-2 queue takes
    /// none ([`ErrorKind::InvalidArgument`] naming `group`, not done).
    pub group: Option<crate::GroupName>,
}

impl EnqueueOptions {
    /// The priority these options give on queue `ident`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] (not done) naming `priority`: out of 0..=7, or not the
    /// default on a queue older than version 3; naming `group`: a group on such a queue.
    pub(crate) fn priority_on(&self, ident: &crate::Identity) -> Result<u8> {
        use crate::disk::name::{DEFAULT_PRIORITY, PRIORITY_LEVELS};
        let p = self.priority.unwrap_or(DEFAULT_PRIORITY);
        let bad = |what| Err(Cause::not_done(ErrorKind::InvalidArgument(what), None));
        if p >= PRIORITY_LEVELS {
            return bad("priority must be 0..=7 (7 is claimed first; the default is 3)");
        }
        if self.group.is_some() && ident.version < 3 {
            return bad(
                "group needs a version-3 queue (make a new queue with `steadq init` to use groups)",
            );
        }
        match ident.version {
            _ if ident.has_priority(p) => Ok(p),
            1 => bad("priority other than the default (3) needs a version-3 queue; this queue is version 1 (make a new queue with `steadq init` to use priorities)"),
            _ => bad("priority other than the default (3) needs a version-3 queue; this queue is version 2 (make a new queue with `steadq init` to use priorities)"),
        }
    }
}

/// A directory either held by the queue or opened for one operation (a bucket).
pub(crate) enum DirRef<'a> {
    Held(BorrowedFd<'a>),
    Opened(OwnedFd),
}

impl DirRef<'_> {
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            DirRef::Held(b) => *b,
            DirRef::Opened(o) => o.as_fd(),
        }
    }
}

/// A job ready to publish: its name, where it goes, its bytes.
pub(crate) struct Prepared<'a> {
    pub(crate) name: JobName,
    pub(crate) dir: DirRef<'a>,
    pub(crate) rel_dir: crate::disk::layout::DirRel,
    /// Wall-clock ns the header records as its creation time.
    pub(crate) created_ns: u64,
    pub(crate) body: Body<'a>,
}

impl Prepared<'_> {
    /// Whether the job goes to `waiting/` (it has dependencies) rather than a ready slot.
    pub(crate) fn waiting(&self) -> bool {
        self.rel_dir.as_str() == crate::disk::layout::WAITING_DIR
    }
}

/// What a job file holds: bytes in memory, or a payload streamed into the file.
pub(crate) enum Body<'a> {
    /// Header and payload, written with one `writev`.
    Bytes {
        header: [u8; crate::disk::format::HEADER_LEN],
        payload: &'a [u8],
    },
    /// Streamed into the file already (see ops/enqueue_stream.rs): `len` payload bytes.
    Streamed { len: u64 },
}

/// A written, not yet published job file.
pub(crate) enum Written {
    Unnamed(OwnedFd),
    Named(String, OwnedFd),
}

impl Written {
    /// The written file.
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Written::Unnamed(fd) | Written::Named(_, fd) => fd.as_fd(),
        }
    }
}

/// Why filling a job file failed: a call on it (the caller names the file), or any other
/// error (a payload over the limit, an input that could not be read).
pub(crate) enum FillError {
    Call(Call, Errno),
    Other(Cause),
}

impl From<(Call, Errno)> for FillError {
    fn from((c, e): (Call, Errno)) -> Self {
        FillError::Call(c, e)
    }
}

fn is_eio(e: Errno) -> Outcome {
    if e == Errno::IO {
        Outcome::Indeterminate
    } else {
        Outcome::NotDone
    }
}

impl Queue {
    /// Enqueue `payload` as a new job with the queue's default max attempts. Returns its id
    /// once the job is durable (under [`Durability::Strict`]).
    ///
    /// Memory: the payload is the caller's (written with one `writev`, nothing copied); a
    /// payload too large to hold goes through [`Queue::enqueue_reader`], which needs about
    /// 64 KiB whatever its size.
    ///
    /// # Errors
    /// [`ErrorKind::PayloadTooLarge`] (not done); [`ErrorKind::Io`] naming the file, not done
    /// before the linearization point, indeterminate after it (see the module docs);
    /// [`ErrorKind::Replaced`] (not done) when the job file cannot be made because the
    /// queue's directory was removed (or replaced) since this handle opened it.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, Default::default())?;
    /// let id = q.enqueue(b"resize photo 17")?;
    /// let lease = q.claim()?.expect("one job is ready");
    /// assert_eq!((lease.id(), lease.payload()?), (id, &b"resize photo 17"[..]));
    /// lease.ack()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), steadq::Error>(())
    /// ```
    pub fn enqueue(&self, payload: &[u8]) -> Result<JobId, EnqueueError> {
        self.enqueue_with(payload, &EnqueueOptions::default())
            .map(|e| e.id())
    }

    /// Enqueue with per-job options ([`EnqueueOptions`]: delay, priority, max attempts,
    /// idempotency key, wait for room). Returns [`crate::Enqueued::New`] with the new job's
    /// id, or, when the key is taken, [`crate::Enqueued::Duplicate`] with the job the key
    /// names (nothing enqueued). [`crate::Enqueued::id`] is the id either way.
    ///
    /// A delayed job lands in `delayed/` and becomes ready when [`Queue::recover`] or a
    /// claim finds it due (a claiming handle looks for due delayed jobs at most every 100 ms
    /// before it claims, and whenever it finds nothing ready; a waiting claim wakes for it).
    /// A keyed duplicate whose first enqueue is still publishing (another process between
    /// its key and its job) waits for it, on inotify, for as long as that process lives (at
    /// most [`crate::KEY_ORPHAN_AFTER`]).
    ///
    /// # Errors
    /// As [`Queue::enqueue`], plus [`ErrorKind::InvalidArgument`] (not done) for zero max
    /// attempts, a delay reaching past the year 2262, or a priority out of 0..=7 (or other
    /// than the default on a version-1 or version-2 queue); [`ErrorKind::QueueFull`] (not
    /// done) when there was no room within [`EnqueueOptions::wait`]. With a key: a duplicate
    /// is answered even when the queue is full; a not-done error leaves no key behind that
    /// blocks a retry; indeterminate means the job may exist, and a retry with the same key
    /// answers which.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use steadq::{EnqueueOptions, Enqueued, Key, Options, Queue};
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-delay-{}", std::process::id()));
    /// let q = Queue::create(&dir, Options::default())?;
    /// let later = EnqueueOptions { delay: Some(Duration::from_secs(600)), max_attempts: Some(3), ..Default::default() };
    /// q.enqueue_with(b"send the daily report", &later)?;
    /// assert!(q.claim()?.is_none(), "not due for ten minutes");
    /// assert_eq!(q.status()?.delayed, 1);
    ///
    /// // At most one job per key:
    /// let once = EnqueueOptions { key: Key::new("order-1234"), ..Default::default() };
    /// let first = q.enqueue_with(b"charge order 1234", &once)?;
    /// let again = q.enqueue_with(b"charge order 1234", &once)?;
    /// assert_eq!(again, Enqueued::Duplicate(first.id()));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), steadq::Error>(())
    /// ```
    pub fn enqueue_with(
        &self,
        payload: &[u8],
        o: &EnqueueOptions,
    ) -> Result<crate::Enqueued, EnqueueError> {
        // Hook (ops/keys.rs, ops/capacity.rs): keys, the capacity check and its wait.
        o.priority_on(&self.ident)
            .map_err(EnqueueError::from_internal)?;
        if !o.after.is_empty() {
            return self.enqueue_after(payload, o); // ops/deps.rs
        }
        if let Some(timeout) = o.wait {
            return self.enqueue_wait(payload, o, timeout);
        }
        if o.key.is_some() {
            return self.enqueue_unique(payload, o);
        }
        let _room = self
            .admit(1, payload.len() as u64)
            .map_err(EnqueueError::from_internal)?;
        self.enqueue_as(None, payload, o)
            .map(crate::Enqueued::New)
            .map_err(EnqueueError::from_internal)
    }

    /// [`Queue::enqueue_with`] without key or capacity check, with the id `id` when given.
    pub(crate) fn enqueue_as(
        &self,
        id: Option<JobId>,
        payload: &[u8],
        o: &EnqueueOptions,
    ) -> Result<JobId> {
        let _op = self.op();
        let p = self.prepare(Some(payload), o, id)?;
        let w = self.write_job(&p, true)?;
        self.publish_durably(&p, w)
    }

    /// Publish the written job `w` and make its name durable (Strict and Batched; the
    /// durability policy decides): the linearization point and the barriers after it.
    pub(crate) fn publish_durably(&self, p: &Prepared<'_>, w: Written) -> Result<JobId> {
        // From the link on, a failure names the job it may have made. Where one directory
        // fsync commits the whole journal (xfs, journaled ext4, f2fs: `one_barrier_per_rename`), the
        // target directory's fsync below also commits the link and the file's new link count,
        // so the file's second fsync (for btrfs) and the named route's tmp/ fsync are left out.
        let durable = self.barriers;
        let resync = durable && !self.group.one_barrier_per_rename(&self.sys, p.dir.fd());
        self.publish(p, w, resync)
            .map_err(|e| e.with_job(p.name.id))?;
        self.dir_barrier(Barrier::EnqueueDir, &p.dir).map_err(|e| {
            Cause::io(
                Call::FsyncDir,
                e,
                Outcome::Indeterminate,
                Some(self.path(&p.rel_dir)),
            )
            .with_job(p.name.id)
        })?;
        Ok(p.name.id)
    }

    /// Enqueue several payloads. Under [`Durability::Batched`] the batch shares its barriers:
    /// one `syncfs` for all file contents, then all links, then one more `syncfs` for the
    /// names. On xfs, journaled ext4 and f2fs it is one commit instead: every file written out
    /// (`sync_file_range`), the links, then one fsync of the last link's directory, which
    /// commits every earlier link and the files' blocks in order (DESIGN.md, Barriers).
    /// Under `Strict` each job gets its own barriers. Returns the ids in order.
    ///
    /// # Errors
    /// As [`Queue::enqueue`]; once any job of the batch was published the outcome is
    /// indeterminate for the batch (each job is either fully present or absent).
    pub fn enqueue_batch(&self, payloads: &[&[u8]]) -> Result<Vec<JobId>, Error> {
        let _op = self.op();
        let total: u64 = payloads.iter().map(|p| p.len() as u64).sum();
        let _room = self.admit(payloads.len() as u64, total)?; // hook: ops/capacity.rs
        if self.opts.durability != Durability::Batched {
            return Ok(self.enqueue_each(payloads)?);
        }
        let o = EnqueueOptions::default();
        let prepared: Vec<Prepared<'_>> = payloads
            .iter()
            .map(|p| self.prepare(Some(p), &o, None))
            .collect::<Result<_>>()?;
        let mut written = Vec::with_capacity(prepared.len());
        for p in &prepared {
            written.push(self.write_job(p, false)?);
        }
        // The contents. Where the directory fsync after the links commits the journal in
        // order, flush first (xfs, journaled ext4, f2fs), writing every file out is enough: all
        // writes are started, then each is waited for, and that one commit makes data,
        // blocks and names durable together (DESIGN.md, Barriers). Elsewhere one syncfs.
        let one_commit = self.barriers
            && prepared
                .first()
                .is_some_and(|p| self.group.one_barrier_per_rename(&self.sys, p.dir.fd()));
        if one_commit {
            let nd = |e| Cause::io(Call::WriteOut, e, Outcome::NotDone, Some(self.root.clone()));
            for w in &written {
                self.sys
                    .start_write_out(Barrier::EnqueueBatchData, w.fd())
                    .map_err(nd)?;
            }
            for w in &written {
                self.sys
                    .write_out(Barrier::EnqueueBatchData, w.fd())
                    .map_err(nd)?;
            }
        } else if self.barriers {
            self.sys
                .syncfs(Barrier::EnqueueBatchData, self.dirs.root.as_fd())
                .map_err(|e| {
                    Cause::io(Call::Syncfs, e, Outcome::NotDone, Some(self.root.clone()))
                })?;
        }
        for (i, (p, w)) in prepared.iter().zip(written).enumerate() {
            self.publish(p, w, false).map_err(|e| {
                if i > 0 {
                    e.with_outcome(Outcome::Indeterminate)
                } else {
                    e
                }
            })?;
        }
        // The names. Where one directory fsync commits the whole journal (xfs, journaled
        // ext4: `one_barrier_per_rename`), the fsync of the last link's directory commits the
        // transaction holding that link, and commits are in order, so every earlier link of
        // the batch is durable with it (DESIGN.md, Barriers: batches). Elsewhere one more
        // syncfs makes every new name durable with its data (see `publish` for why a
        // directory fsync alone is not enough on btrfs).
        let last = prepared.last().filter(|_| self.barriers);
        if let Some(p) = last.filter(|_| one_commit) {
            self.dir_barrier(Barrier::EnqueueBatchNames, &p.dir)
                .map_err(|e| {
                    Cause::io(
                        Call::FsyncDir,
                        e,
                        Outcome::Indeterminate,
                        Some(self.path(&p.rel_dir)),
                    )
                })?;
        } else if last.is_some() {
            self.sys
                .syncfs(Barrier::EnqueueBatchNames, self.dirs.root.as_fd())
                .map_err(|e| {
                    Cause::io(
                        Call::Syncfs,
                        e,
                        Outcome::Indeterminate,
                        Some(self.root.clone()),
                    )
                })?;
        }
        Ok(prepared.iter().map(|p| p.name.id).collect())
    }

    /// [`Queue::enqueue_batch`] under `Strict`: each job with its own barriers; once one
    /// was published a failure is indeterminate.
    fn enqueue_each(&self, payloads: &[&[u8]]) -> Result<Vec<JobId>> {
        let mut ids = Vec::with_capacity(payloads.len());
        for (i, p) in payloads.iter().enumerate() {
            match self.enqueue_as(None, p, &EnqueueOptions::default()) {
                Ok(id) => ids.push(id),
                Err(e) if i > 0 => return Err(e.with_outcome(Outcome::Indeterminate)),
                Err(e) => return Err(e),
            }
        }
        Ok(ids)
    }

    /// Name and place a job of `payload` (`None`: a payload to be streamed; its header is
    /// written with it).
    pub(crate) fn prepare<'a>(
        &'a self,
        payload: Option<&'a [u8]>,
        o: &EnqueueOptions,
        id: Option<JobId>,
    ) -> Result<Prepared<'a>> {
        let limit = self.opts.max_payload;
        if let Some(len) = payload.map(|p| p.len() as u64).filter(|&l| l > limit) {
            return Err(Cause::not_done(
                ErrorKind::PayloadTooLarge { len, limit },
                None,
            ));
        }
        let max = o.max_attempts.unwrap_or(self.opts.max_attempts);
        if max == 0 {
            return Err(Cause::not_done(
                ErrorKind::InvalidArgument("max attempts must be at least 1"),
                None,
            ));
        }
        let now = self.clock.wall_ns();
        let priority = o.priority_on(&self.ident)?;
        let id = match id {
            Some(id) => id,
            None => self.fresh_id(priority, now / 1_000_000)?,
        };
        let body = match payload {
            Some(payload) => Body::Bytes {
                header: encode_header(id.0, self.ident.id, now, payload),
                payload,
            },
            None => Body::Streamed { len: 0 },
        };
        let mut name = JobName::new_ready(id, max)
            .with_priority(priority)
            .with_group(o.group);
        let (dir, rel_dir) = match o.delay.filter(|d| !d.is_zero()) {
            None if !o.after.is_empty() => {
                state::check(None, Op::EnqueueWaiting, State::Waiting);
                let p = self.place_waiting(true)?.expect("made");
                (p.dir, p.rel)
            }
            None => {
                state::check(None, Op::Enqueue, State::Ready);
                let p = self.place_ready_new(self.ident.slot_of(&name))?;
                (p.dir, p.rel)
            }
            Some(d) => {
                state::check(None, Op::EnqueueDelayed, State::Delayed);
                let nb = crate::queue::due_after(now, d)?;
                name.kind = self.delayed_kind(nb, d);
                let b = delayed_bucket(nb, self.ident.delayed_bucket_ns);
                let rel = dir_rel(format_args!("{DELAYED_DIR}/{b}"));
                let fd = self
                    .bucket_dir(false, &b)
                    .map_err(|(c, e)| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel))))?;
                (DirRef::Opened(fd), rel)
            }
        };
        Ok(Prepared {
            name,
            dir,
            rel_dir,
            created_ns: now,
            body,
        })
    }

    /// Write the job file (fsync'd when `sync` and the policy asks) without publishing it.
    pub(crate) fn write_job(&self, p: &Prepared<'_>, sync: bool) -> Result<Written> {
        match p.body {
            Body::Bytes { header, payload } => self.write_with(p, sync, &mut |fd| {
                self.sys
                    .write_all_vectored(fd, &[&header, payload])
                    .map_err(|e| FillError::Call(Call::Write, e))
            }),
            // Only a publication redone through tmp/ gets here: copy the written file.
            Body::Streamed { .. } => Err(Cause::not_done(
                ErrorKind::InvalidArgument("a streamed job is written by its stream"),
                None,
            )),
        }
    }

    /// Make the job file unnamed in its directory (or named in `tmp/` where `O_TMPFILE` is
    /// refused), let `fill` write it, fsync it when `sync` and the policy asks. Any failure
    /// is not done and leaves nothing behind (an unnamed file vanishes with its fd, a named
    /// one is unlinked).
    pub(crate) fn write_with(
        &self,
        p: &Prepared<'_>,
        sync: bool,
        fill: &mut dyn FnMut(BorrowedFd<'_>) -> core::result::Result<(), FillError>,
    ) -> Result<Written> {
        let nd = |c, e, rel: &str| Cause::io(c, e, Outcome::NotDone, Some(self.path(rel)));
        let sync = sync && self.barriers;
        // Where the target directory's fsync after the link commits the journal in order,
        // flushing the device first (xfs, journaled ext4, f2fs: `one_barrier_per_rename`), writing
        // the data out is enough before the link: that one commit makes the data, its
        // blocks and the name durable together (DESIGN.md, Barriers: one commit per
        // enqueue). Elsewhere the file is fsynced before it is named.
        let one_commit = sync && self.group.one_barrier_per_rename(&self.sys, p.dir.fd());
        let mut fill = |fd: BorrowedFd<'_>, rel: &str| {
            fill(fd)
                .and_then(|()| match (sync, one_commit) {
                    (true, true) => self
                        .sys
                        .write_out(Barrier::EnqueueData, fd)
                        .map_err(|e| (Call::WriteOut, e).into()),
                    (true, false) => self
                        .sys
                        .fsync(Barrier::EnqueueData, fd)
                        .map_err(|e| (Call::Fsync, e).into()),
                    (false, _) => Ok(()),
                })
                .map_err(|f| match f {
                    FillError::Call(c, e) => nd(c, e, rel),
                    FillError::Other(e) => e,
                })
        };
        if self.sys.publish_mode() != Some(Publish::Named) {
            // A bucket or level another user is making refuses this user for a moment.
            match self.retry_making(&p.rel_dir, || self.sys.open_tmpfile(p.dir.fd())) {
                Ok(fd) => {
                    self.share_job_file(fd.as_fd());
                    fill(fd.as_fd(), &p.rel_dir)?;
                    return Ok(Written::Unnamed(fd));
                }
                Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {
                    log::info!(
                        "O_TMPFILE refused in {}; publishing through tmp/",
                        self.path(&p.rel_dir).display()
                    );
                    self.sys.force_named_publish();
                }
                Err(e) => return Err(self.tmpfile_failed(p, e)),
            }
        }
        let tmp = self.fresh_temp_name();
        let rel = format!("{TMP_DIR}/{tmp}");
        let fd = self
            .sys
            .create_file(self.dirs.tmp.as_fd(), &tmp)
            .map_err(|e| {
                self.root_replaced()
                    .unwrap_or_else(|| nd(Call::Open, e, &rel))
            })?;
        self.share_job_file(fd.as_fd());
        if let Err(e) = fill(fd.as_fd(), &rel) {
            let _ = self.sys.unlink(self.dirs.tmp.as_fd(), &tmp);
            return Err(e);
        }
        Ok(Written::Named(tmp, fd))
    }

    /// The error of an `O_TMPFILE` open in `p`'s directory that failed with `e` (not the
    /// refusals that fall back to `tmp/`). A removed directory refuses new files (`EPERM`
    /// from `O_TMPFILE`, `ENOENT`): not a permission, and no slot to avoid. A ready slot that
    /// is not writable after all (the probe raced a chmod, or an LSM said no) is avoided by
    /// the next enqueues. Not done.
    fn tmpfile_failed(&self, p: &Prepared<'_>, e: Errno) -> Cause {
        if let Some(gone) = self.root_replaced() {
            return gone;
        }
        let e = self.dir_errno(p.dir.fd(), e);
        if matches!(e, Errno::ACCESS | Errno::PERM)
            && p.name.kind == crate::disk::name::Kind::Ready
            && !p.waiting()
        {
            let s = self.ident.slot_of(&p.name);
            self.avoid_slot(s, &p.rel_dir);
            self.warn_unwritable(s, e, &p.rel_dir);
        }
        Cause::io(Call::Open, e, Outcome::NotDone, Some(self.path(&p.rel_dir)))
    }

    /// The linearization point: give the written file its job name.
    ///
    /// With `resync`, the file is fsynced once more after it has its name (and, for the named
    /// route, `tmp/` is fsynced): btrfs was seen by the crash lab to lose the data of an
    /// `O_TMPFILE` fsynced before `linkat` when only the directory was fsynced after it
    /// (zero-length jobs after a crash). The caller leaves `resync` off on xfs and journaled
    /// ext4, where the target directory's fsync commits the journal transaction holding the
    /// link (DESIGN.md, Barriers), and under Batched, whose `syncfs` follows.
    fn publish(&self, p: &Prepared<'_>, w: Written, resync: bool) -> Result<()> {
        let name = p.name.format(self.ident.id);
        // The job's path, for messages only: made when one is (not a heap string per job).
        let rel = || format!("{}/{}", p.rel_dir, name);
        if p.name.kind == Kind::Ready && !p.waiting() {
            // A regular file this handle wrote: its claim need not check it (ops/shards.rs).
            self.shards
                .linking(self.ident.slot_of(&p.name), &name, &p.name);
        }
        match w {
            Written::Unnamed(fd) => match self.sys.link_tmpfile(fd.as_fd(), p.dir.fd(), &name) {
                Ok(()) if resync => self
                    .barrier_file(Barrier::EnqueueRelink, fd.as_fd())
                    .map_err(|e| {
                        Cause::io(
                            Call::Fsync,
                            e,
                            Outcome::Indeterminate,
                            Some(self.path(&rel())),
                        )
                    }),
                Ok(()) => Ok(()),
                Err(Errno::NOTSUP) => {
                    // Neither linkat route works here: redo through tmp/ (a streamed job is
                    // copied from the unnamed file: its input is read once).
                    self.sys.force_named_publish();
                    let sync = self.barriers;
                    let w = match p.body {
                        Body::Streamed { len } => self.copy_job(p, fd.as_fd(), len, sync)?,
                        Body::Bytes { .. } => self.write_job(p, sync)?,
                    };
                    self.publish(p, w, resync)
                }
                Err(e) => {
                    // Not done, in a removed directory (tmpfs lets `O_TMPFILE` through there
                    // and refuses the link with `ENOENT`): say so, as `write_with` does.
                    if let Some(gone) = (e != Errno::IO).then(|| self.root_replaced()).flatten() {
                        return Err(gone);
                    }
                    let e = self.dir_errno(p.dir.fd(), e);
                    Err(Cause::io(Call::Link, e, is_eio(e), Some(self.path(&rel()))))
                }
            },
            Written::Named(tmp, fd) => self.publish_named(p, &tmp, fd.as_fd(), &name, resync),
        }
    }
    /// [`Queue::publish`] of a job written in `tmp/` as `tmp` (open as `fd`): renamed to its
    /// job name `name` (a failure not `EIO` removes it from `tmp/`), then with `resync` the
    /// file and `tmp/` fsynced.
    fn publish_named(
        &self,
        p: &Prepared<'_>,
        tmp: &str,
        fd: BorrowedFd<'_>,
        name: &str,
        resync: bool,
    ) -> Result<()> {
        let rel = || format!("{}/{}", p.rel_dir, name);
        let t = self.dirs.tmp.as_fd();
        let into = || self.sys.rename(t, tmp, p.dir.fd(), name);
        if let Err(e) = self.retry_making(&p.rel_dir, into) {
            if e != Errno::IO {
                let _ = self.sys.unlink(self.dirs.tmp.as_fd(), tmp);
                if let Some(gone) = self.root_replaced() {
                    return Err(gone);
                }
            }
            let e = self.dir_errno(p.dir.fd(), e);
            return Err(Cause::io(
                Call::Rename,
                e,
                is_eio(e),
                Some(self.path(&rel())),
            ));
        }
        if !resync {
            // No barrier here: none asked (policy None, a batch's syncfs), or the
            // target directory's fsync commits the rename out of tmp/ as well.
            return Ok(());
        }
        self.barrier_file(Barrier::EnqueueRelink, fd).map_err(|e| {
            Cause::io(
                Call::Fsync,
                e,
                Outcome::Indeterminate,
                Some(self.path(&rel())),
            )
        })?;
        if self.tmp_unsynced {
            return Ok(()); // btrfs: a stale name in tmp/ is recovery's (`Shared::tmp_unsynced`)
        }
        self.dir_barrier(Barrier::EnqueueTmpDir, &DirRef::Held(self.dirs.tmp.as_fd()))
            .map_err(|e| {
                Cause::io(
                    Call::FsyncDir,
                    e,
                    Outcome::Indeterminate,
                    Some(self.path(TMP_DIR)),
                )
            })
    }
}

/// How an enqueue failed (`Queue::enqueue`, `enqueue_with`, `enqueue_reader`, and their
/// typed and async forms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnqueueError {
    /// Not done: no job was made ([`ErrorKind::QueueFull`], [`ErrorKind::PayloadTooLarge`],
    /// a bad argument, or a failure before the job got its name). A retry is safe.
    NotDone(Cause),
    /// Indeterminate: the job `id` may exist (its name was linked, or the link returned
    /// `EIO`, and a barrier after it failed): [`crate::Queue::find`] with `id` tells whether
    /// it is there now, and a job that is there may still not survive a crash. With a key,
    /// enqueueing again with the same key answers which.
    Indeterminate {
        /// The id of the job this enqueue may have made.
        id: JobId,
        /// What went wrong, and where.
        error: Cause,
    },
}

impl EnqueueError {
    /// At the public boundary: an enqueue's internal error. Only the publish step of
    /// `enqueue_as` is indeterminate, and it names its job.
    pub(crate) fn from_internal(e: Cause) -> EnqueueError {
        match (e.outcome(), e.job()) {
            (Outcome::NotDone, _) => EnqueueError::NotDone(e),
            (Outcome::Indeterminate, Some(id)) => EnqueueError::Indeterminate { id, error: e },
            (Outcome::Indeterminate, None) => {
                unreachable!("an indeterminate enqueue names its job (ops/enqueue.rs enqueue_as)")
            }
        }
    }

    /// Not done, or indeterminate.
    pub fn outcome(&self) -> Outcome {
        match self {
            EnqueueError::NotDone(_) => Outcome::NotDone,
            EnqueueError::Indeterminate { .. } => Outcome::Indeterminate,
        }
    }

    /// The cause: what went wrong, and where.
    pub fn cause(&self) -> &Cause {
        match self {
            EnqueueError::NotDone(e) | EnqueueError::Indeterminate { error: e, .. } => e,
        }
    }

    /// The id of the job an indeterminate enqueue may have made; `None` when not done.
    pub fn id(&self) -> Option<JobId> {
        match self {
            EnqueueError::NotDone(_) => None,
            EnqueueError::Indeterminate { id, .. } => Some(*id),
        }
    }

    fn into_parts(self) -> (Outcome, Cause) {
        match self {
            EnqueueError::NotDone(e) => (Outcome::NotDone, e),
            EnqueueError::Indeterminate { error, .. } => (Outcome::Indeterminate, error),
        }
    }

    error_accessors!();
}

impl From<EnqueueError> for Error {
    fn from(e: EnqueueError) -> Error {
        match e {
            EnqueueError::NotDone(e) => Error::NotDone(e),
            EnqueueError::Indeterminate { error, .. } => Error::Indeterminate(error),
        }
    }
}

impl core::fmt::Display for EnqueueError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        display_as(self.cause(), self.outcome(), f)?;
        match self {
            EnqueueError::Indeterminate { id, .. } => write!(f, " (job {id})"),
            EnqueueError::NotDone(_) => Ok(()),
        }
    }
}

impl std::error::Error for EnqueueError {}
