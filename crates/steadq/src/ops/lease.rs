//! The lease guard: renew, ack, nack, fail, release, and what a claim hands out.
//!
//! A claim renames a ready job, in its shard directory, to a leased name carrying this boot's
//! id, both deadlines and a fresh 128-bit lease token (attempt + 1), makes that durable, then
//! opens the file without following symlinks and verifies both digests before the payload is
//! handed out. Every later operation starts from the lease's exact name, so a lease that was
//! recovered, renewed elsewhere or settled gets [`ErrorKind::LeaseLost`] and changes nothing.
//!
//! The claim itself is in the files beside this one: which job a claim takes
//! (`lease/claim.rs`), the listing of one slot (`lease/sweep.rs`), taking one job
//! (`lease/take.rs`), jobs this user may not move (`lease/refusal.rs`) and the verification
//! of a leased file (`lease/verify.rs`).

mod claim;
mod refusal;
mod sweep;
mod take;
mod verify;

pub(crate) use refusal::{only_refused, UNREADABLE_RECHECK};

use crate::disk::barrier::Barrier;
use crate::disk::format::{Header, HEADER_LEN};
use crate::disk::name::{BootDue, JobId, JobName, Kind, Reason};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, Errno};
use crate::error::{display_as, error_accessors, Cause, Error, ErrorKind, Outcome, Result};
use crate::ops::payload::{Checked, PayloadReader, StreamFailed};
use crate::ops::recover::RecoverReport;
use crate::ops::transition::MoveFailed;
use crate::queue::Queue;
use std::os::fd::AsFd;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A claimed job. Settle it with [`Lease::ack`], [`Lease::nack`] or [`Lease::fail`];
/// dropping it unsettled releases the job back to ready at once (the attempt stays counted).
/// A settling call that fails never releases the job itself: not done, it hands this lease
/// back in [`SettleError::NotDone`] (settle it again, or drop it to release the job);
/// otherwise the job is gone from this lease (lost, or indeterminate: never released or
/// settled again by it, and a lease left in place expires and is recovered).
///
/// Memory: the claim verified the job file reading it in 64 KiB chunks, so a lease costs
/// O(64 KiB) whatever the payload's size, and holds no descriptor. A job file of up to
/// 64 KiB (header included) is kept from that one read; a larger payload is read again when
/// asked for: [`Lease::reader`] streams it (O(1) beyond the caller's buffer),
/// [`Lease::payload`] loads it once (its size) and keeps it.
#[derive(Debug)]
pub struct Lease {
    q: Queue,
    /// The ready slot (a level's shard directory) the job is leased in.
    shard: u16,
    name: JobName,
    /// The job file's header, verified at claim.
    raw: [u8; HEADER_LEN],
    header: Header,
    /// The whole job file, once in memory: from the claim's read when it fit one chunk, else
    /// from the first [`Lease::payload`].
    file: OnceLock<Arc<Vec<u8>>>,
    settled: bool,
}

/// What [`Lease::ack_and_claim`] did when its ack was done.
#[derive(Debug)]
pub struct AckedNext {
    /// The ack's receipt: the ack is done (its rename durable).
    pub receipt: Receipt,
    /// The next job, claimed under the same barrier as the ack (`Ok(None)`: none ready), or
    /// the claim's own error with its outcome (not done, or indeterminate: then the job is
    /// leased in this process's name and comes back when the lease expires).
    pub next: std::result::Result<Option<Lease>, Error>,
}

/// Where a nacked job went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nacked {
    /// Back to ready at once (delay zero).
    Ready,
    /// To `delayed/`, due at this wall-clock time (its bucket and name carry it in ns).
    Delayed(std::time::SystemTime),
    /// To `dead/` with reason `exhausted`: no attempt left.
    Dead,
}

/// Proof of an ack: the receipt's name (in `receipts/<shard>/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The job.
    pub id: JobId,
    /// The receipt file name (under [`crate::ReceiptPolicy::None`] the file is removed once
    /// its evidence line is durable; the name is in that line).
    pub name: String,
}

/// Exponential backoff for retry `attempt` (1-based): `base * 2^(attempt-1)`, capped at
/// `max`. Attempt 1 gives `base`.
pub fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1).min(31))
        .unwrap_or(u32::MAX);
    base.checked_mul(factor).unwrap_or(max).min(max)
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// How [`Queue::claim_with`] claims: the lease's length, and whether and how long to wait
/// for a job. `ClaimOptions::default()` is [`Queue::claim`]: the handle's lease, no wait.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClaimOptions<'a> {
    /// The lease (visibility timeout): a job not settled or renewed within it goes back to
    /// ready. `None`: the handle's [`Options::lease`](crate::Options::lease) (30 s unless
    /// opened with another). Zero, or longer than [`crate::MAX_LEASE`]:
    /// [`ErrorKind::InvalidArgument`], not done.
    pub lease: Option<Duration>,
    /// When no job is ready, wait up to this long for one (on inotify, no polling), making
    /// delayed jobs ready as they fall due and expired leases ready as they expire, so one
    /// waiting worker keeps a queue moving. `Ok(None)` at the end. `None`: answer at once.
    pub wait: Option<Duration>,
    /// A shutdown flag (set from a signal handler or another thread): the claim returns
    /// `Ok(None)` within 250 ms of it becoming true, and at once, claiming nothing, when it
    /// is true already, whatever is ready.
    pub stop: Option<&'a std::sync::atomic::AtomicBool>,
}

impl Queue {
    /// The receipt kind an ack writes now: with the ack time (unix ns) in a version-2 queue.
    pub(crate) fn receipt_kind(&self, token: u128) -> Kind {
        Kind::Receipt {
            token,
            acked_ns: (self.ident.version >= 2).then(|| self.clock.wall_ns()),
        }
    }

    /// The delayed kind for a delay of `delay` whose wall-clock not-before is `not_before_ns`
    /// (checked by `due_after`): in a version-2 queue it also carries this boot's id and
    /// boot-clock not-before (unless the boot id is unknown), so within this boot a wall-clock
    /// jump changes nothing ([`crate::delay_due`]).
    pub(crate) fn delayed_kind(&self, not_before_ns: u64, delay: Duration) -> Kind {
        let boot_id = self.clock.boot_id();
        let delay_ns = delay.as_nanos().min(u64::MAX as u128) as u64;
        Kind::Delayed {
            not_before_ns,
            boot: (self.ident.version >= 2 && boot_id != 0).then(|| BootDue {
                boot_id,
                not_before_boot_ns: self.clock.boot_ns().saturating_add(delay_ns),
            }),
        }
    }

    /// Ack several leases, sharing barriers: all renames first, then one fsync per receipts
    /// directory and per ready directory touched (grouped with other threads' fsyncs), so
    /// every ack is durable when this returns, under `Strict` as under `Batched`. Returns the
    /// receipts in order.
    ///
    /// # Errors
    /// As [`Lease::ack`]; once any ack of the batch was renamed the outcome is indeterminate
    /// for the batch. Leases not yet renamed when one fails are released as they drop.
    /// [`ErrorKind::InvalidArgument`] (not done, nothing renamed, every lease released as it
    /// drops) when a lease belongs to another queue (another queue id): the barriers are this
    /// queue's, so ack each queue's leases through its own handle.
    pub fn ack_batch(&self, leases: Vec<Lease>) -> Result<Vec<Receipt>, Error> {
        if let Some(l) = leases.iter().find(|l| l.q.ident.id != self.ident.id) {
            return Err(Cause::not_done(
                ErrorKind::InvalidArgument("a lease of another queue in ack_batch"),
                Some(l.q.root.clone()),
            )
            .into());
        }
        let _op = self.op();
        let mut out = Vec::with_capacity(leases.len());
        let mut shards: Vec<(u16, u16)> = Vec::new();
        let mut last = None;
        let mut leases = leases.into_iter();
        // Receipts the policy still has to cut or remove once the batch is durable.
        let mut after: Vec<(u16, JobName, Vec<u8>)> = Vec::new();
        while let Some(mut l) = leases.next() {
            let r = l.ack_rename().map(|(r, new)| {
                if self.ident.receipts != crate::disk::identity::ReceiptPolicy::Job {
                    after.push((l.receipt_shard(), new, l.raw.to_vec()));
                }
                r
            });
            match r {
                Ok(r) => {
                    out.push(r);
                    last = Some(l.receipt_shard());
                    if !shards.contains(&(l.receipt_shard(), l.shard)) {
                        shards.push((l.receipt_shard(), l.shard));
                    }
                }
                Err(e) => {
                    // The rest stay leased and are released by drop.
                    drop(leases);
                    return Err(if out.is_empty() {
                        e.into()
                    } else {
                        e.with_outcome(Outcome::Indeterminate).into()
                    });
                }
            }
        }
        // On xfs, journaled ext4 and f2fs the fsync of the last ack's receipts directory commits
        // every earlier ack of the batch too, in both of its directories.
        match last {
            Some(r)
                if self
                    .group
                    .one_barrier_per_rename(&self.sys, self.dirs.root.as_fd()) =>
            {
                self.sync_place(Barrier::AckDest, &self.place_receipts(r))?
            }
            _ => {
                for (r, s) in shards {
                    self.sync_moved(
                        Op::Ack,
                        &self.place_ready(s, State::Leased),
                        &self.place_receipts(r),
                    )?;
                }
            }
        }
        for (s, new, h) in after {
            self.after_ack(s, &new, &h);
        }
        for r in &out {
            self.dependency_acked(r.id); // ops/deps.rs: never fails the done acks
        }
        Ok(out)
    }
}

// The core calls first: rustdoc lists methods in the source order of the impl blocks.
impl Lease {
    /// The payload, verified against both digests, in memory.
    ///
    /// Memory: a job file of up to 64 KiB (header included) was kept from the claim's read,
    /// and this costs nothing more. A larger payload is read from the job file on the first
    /// call, checked against the payload digest the claim verified, and kept until the lease
    /// drops: the payload's size, once. To process a large payload without holding it, use
    /// [`Lease::reader`].
    ///
    /// # Errors
    /// Only on the first call for a payload larger than the claim kept, all not done (the job
    /// stays leased by this lease): [`ErrorKind::LeaseLost`] when its file is no longer under
    /// this lease's name (recovered after the lease expired, or settled);
    /// [`ErrorKind::Io`] for a failed `open(2)` or `pread(2)`, and with `EBADMSG` when the
    /// file no longer holds the payload the claim verified (changed or damaged since): fail
    /// the job ([`Reason::CORRUPT`]), or release it and the next claim dead-letters it.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-payload-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, steadq::Options::default())?;
    /// q.enqueue(b"resize photo 17")?;
    /// let lease = q.claim()?.expect("a job is ready");
    /// assert_eq!(lease.payload()?, b"resize photo 17");
    /// lease.ack()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), steadq::Error>(())
    /// ```
    pub fn payload(&self) -> crate::Result<&[u8]> {
        if let Some(f) = self.file.get() {
            return Ok(&f[HEADER_LEN..]);
        }
        let len = usize::try_from(self.header.payload_len)
            .ok()
            .and_then(|n| n.checked_add(HEADER_LEN))
            .ok_or_else(|| self.read_error(None, StreamFailed::Errno(Errno::FBIG)))?;
        let mut r = self.reader()?;
        let mut file = vec![0u8; len];
        file[..HEADER_LEN].copy_from_slice(&self.raw);
        let mut at = HEADER_LEN;
        loop {
            // The read that fills the buffer checks the digest; one more must return 0.
            match r.next(&mut file[at..]) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(e) => return Err(self.read_error(r.path(), e).into()),
            }
        }
        if at != len {
            return Err(self
                .read_error(r.path(), StreamFailed::Changed("short"))
                .into());
        }
        let f = self.file.get_or_init(|| Arc::new(file));
        Ok(&f[HEADER_LEN..])
    }

    /// The payload as a stream: a [`PayloadReader`] ([`std::io::Read`]) that does not borrow
    /// this lease (it may move to another thread while the lease is renewed).
    ///
    /// A payload in memory (a job file of up to 64 KiB, or one [`Lease::payload`] loaded) is
    /// read from there, with no I/O. A larger one is read from the job file (opened now under
    /// the lease's current name, `O_NOFOLLOW`) with its SHA-256 computed again as it goes:
    /// memory stays O(1) beyond the caller's buffer. If the file no longer holds the payload
    /// the claim verified, the read reaching its end fails with
    /// [`std::io::ErrorKind::InvalidData`] (and returns none of the last bytes); **read until
    /// a read returns `Ok(0)` before acting on the payload**, and do not ack a job whose
    /// stream failed: fail it ([`Reason::CORRUPT`]) or release it (the next claim verifies it
    /// again and dead-letters it if it is corrupt).
    ///
    /// # Errors
    /// Not done in every case, the job still leased by this lease:
    /// [`ErrorKind::LeaseLost`] when the job file is no longer under this lease's name;
    /// [`ErrorKind::Io`] when `open(2)` fails.
    ///
    /// # Examples
    /// ```
    /// use std::io::Read;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-reader-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, steadq::Options::default())?;
    /// q.enqueue(&vec![7u8; 1 << 20])?; // 1 MiB: streamed from the file, not kept
    /// let lease = q.claim()?.expect("a job is ready");
    /// let mut r = lease.reader()?;
    /// let (mut buf, mut sum) = ([0u8; 8192], 0u64);
    /// loop {
    ///     let n = r.read(&mut buf)?; // InvalidData if the file changed since the claim
    ///     if n == 0 {
    ///         break; // the whole payload was read and matched its digest
    ///     }
    ///     sum += buf[..n].iter().map(|&b| u64::from(b)).sum::<u64>();
    /// }
    /// assert_eq!(sum, 7 << 20);
    /// lease.ack()?;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reader(&self) -> crate::Result<PayloadReader> {
        if let Some(f) = self.file.get() {
            return Ok(PayloadReader::memory(f.clone()));
        }
        let here = self.here();
        let name = self.name.format(self.q.ident.id);
        let path = self.q.path(&format!("{}/{name}", here.rel));
        match self.q.sys.open_file_ro(here.dir.fd(), &name) {
            Ok(fd) => Ok(PayloadReader::file(self.q.clone(), fd, &self.header, path)),
            Err(Errno::NOENT) => Err(Cause::not_done(ErrorKind::LeaseLost, Some(path)).into()),
            Err(e) => Err(Cause::io(Call::Open, e, Outcome::NotDone, Some(path)).into()),
        }
    }

    /// Ack: rename the job into `receipts/<shard>/` and make that durable; then apply the
    /// queue's receipt policy ([`crate::ReceiptPolicy`]: cut the receipt to its header, or
    /// write its evidence line and remove it). The ack is done once the receipt is durable: a
    /// policy step that fails is logged and leaves a whole receipt. The file is not read
    /// again: it was verified once, at claim (a file corrupted while leased is not caught
    /// here).
    ///
    /// # Errors
    /// [`SettleError::LeaseLost`] (no receipt written); [`SettleError::NotDone`] with
    /// [`ErrorKind::Io`] when the rename failed cleanly (a full disk, an immutable
    /// directory): the job is still leased and the lease is handed back, to renew and ack
    /// again; [`SettleError::Indeterminate`] after the rename (its barrier failed, or the
    /// rename returned `EIO`).
    pub fn ack(self) -> Result<Receipt, SettleError> {
        self.ack_and_maybe_claim(None).map(|step| step.receipt)
    }

    /// Nack: retry after `delay`, counted as an enqueue's
    /// [`EnqueueOptions::delay`](crate::EnqueueOptions::delay) is (the boot clock within this
    /// boot). Zero goes straight back to ready; with no attempt left (this was claim
    /// `max_attempts`) the job is dead-lettered (reason `exhausted`) whatever the delay.
    ///
    /// # Errors
    /// As [`Lease::ack`], plus [`ErrorKind::InvalidArgument`] (not done) for a delay
    /// reaching past the year 2262. On any not-done error (a bucket directory that cannot be
    /// made on a full disk included) the job stays leased under its name and the lease is
    /// handed back ([`SettleError::NotDone`]): dropping it releases the job, converting the
    /// error into an [`Error`] leaves the job leased until its deadline.
    pub fn nack(mut self, delay: Duration) -> Result<Nacked, SettleError> {
        self.nack_in_place(delay)
            .map_err(|e| SettleError::new(e, self))
    }

    /// Fail: dead-letter the job now with `reason` ([`Reason::FAILED`] for a generic one).
    ///
    /// # Errors
    /// As [`Lease::nack`].
    pub fn fail(mut self, reason: Reason) -> Result<(), SettleError> {
        self.fail_in_place(reason)
            .map_err(|e| SettleError::new(e, self))
    }

    /// Extend the lease to `lease` from now (generation + 1, same token).
    ///
    /// # Errors
    /// [`RenewError::LeaseLost`] if the lease was recovered or settled elsewhere;
    /// [`RenewError::NotDone`] or [`RenewError::Indeterminate`] with [`ErrorKind::Io`]:
    /// not done before the rename; indeterminate when the barrier after
    /// the rename failed (the lease lives on under its new name, and this `Lease` uses it from
    /// now on) or the rename returned `EIO` (this `Lease` follows whichever name exists);
    /// [`ErrorKind::InvalidArgument`] ([`RenewError::NotDone`], the lease kept as it was) for
    /// a lease that is zero or longer than [`crate::MAX_LEASE`].
    pub fn renew(&mut self, lease: Duration) -> Result<(), RenewError> {
        crate::queue::check_lease(lease).map_err(RenewError::from_internal)?;
        let Kind::Leased(mut f) = self.name.kind else {
            unreachable!("a Lease always holds a leased name")
        };
        let was = f;
        f.boot_deadline_ns = self.q.clock.boot_ns().saturating_add(ns(lease));
        f.wall_deadline_ns = self.q.clock.wall_ns().saturating_add(ns(lease));
        let new = self.name.next(Kind::Leased(f), false);
        // A job of a group: its slot says the new deadlines before its name does, or, the
        // lease expired and its slot is no longer its own and none is free, the renewal is
        // lease lost with nothing changed.
        let slot = match self.name.group {
            Some(g) => {
                let (boot, now) = (self.q.clock.boot_id(), self.q.clock.boot_ns());
                let expired = crate::disk::scan::lease_expired(&was, boot, now);
                match self.q.renew_slot_first(&g, self.name.id, &f, expired) {
                    Ok(s) => Some((g, s)),
                    Err(e) => {
                        self.settled = e.is_lease_lost();
                        return Err(RenewError::from_internal(e));
                    }
                }
            }
            None => None,
        };
        let q = self.q.clone();
        let here = q.place_ready(self.shard, State::Leased);
        let moved = self.q.rename_job(&here, &self.name, &here, &new, Op::Renew);
        if let (Some((g, s)), Err(m @ MoveFailed::NotDone(_))) = (slot, &moved) {
            // Not renewed: a slot taken for it, or one whose lease is gone, is given up.
            if s == crate::ops::slots::SlotRenewal::Taken || m.is_lease_lost() {
                self.q.free_slot(&g, f.token);
            }
        }
        match moved {
            Ok(()) => {}
            Err(MoveFailed::Unknown(e)) => {
                // EIO from the rename: it may or may not have happened. Which name is live
                // now is a fact the directory shows; the next renew or settle must use it.
                let new_name = new.format(self.q.ident.id);
                if self.q.sys.stat_nofollow(here.dir.fd(), &new_name).is_ok() {
                    self.name = new;
                }
                return Err(RenewError::from_internal(e));
            }
            Err(m) => {
                // Not done: the old name stands (or, lost, belongs to someone else now).
                self.settled = m.is_lease_lost();
                return Err(RenewError::from_internal(m.into()));
            }
        }
        // Past the rename: the live name is the new one, whatever the barrier says.
        self.name = new;
        self.q
            .sync_place(Barrier::RenewDir, &here)
            .map_err(RenewError::from_internal)
    }
}

// What the lease holds: the job's id, priority, attempts, name and handle.
impl Lease {
    /// The job id.
    pub fn id(&self) -> JobId {
        self.name.id
    }

    /// The job's priority (`0..`[`crate::PRIORITY_LEVELS`], higher first).
    pub fn priority(&self) -> u8 {
        self.name.priority
    }

    /// The payload's length, bytes (from the header the claim verified; no I/O).
    pub fn payload_len(&self) -> u64 {
        self.header.payload_len
    }

    /// This claim's attempt number (1 for the first claim).
    pub fn attempt(&self) -> u32 {
        self.name.attempt
    }

    /// Claims allowed in all.
    pub fn max_attempts(&self) -> u32 {
        self.name.max_attempts
    }

    /// The current leased name (generation, deadlines, token).
    pub fn name(&self) -> &JobName {
        &self.name
    }

    /// The lease token (128 bits).
    pub fn token(&self) -> u128 {
        match self.name.kind {
            Kind::Leased(l) => l.token,
            _ => 0,
        }
    }

    /// The leased file's path relative to the queue root: `<slot dir>/<handle>`, e.g.
    /// `ready/03/...` (or `prio/<l>/<ss>/...` for a level other than the default).
    pub fn rel_path(&self) -> String {
        let slot = self.q.ident.slot_of(&self.name);
        format!("{}/{}", self.q.ident.slot_rel(slot), self.handle())
    }

    /// The handle that [`Queue::lease_from_handle`] accepts: the leased file name.
    pub fn handle(&self) -> String {
        self.name.format(self.q.ident.id).to_string()
    }

    /// Detach: return the handle and do not release on drop (the lease then lives until it is
    /// settled through the handle or expires).
    pub fn into_handle(mut self) -> String {
        self.settled = true;
        self.handle()
    }
}

// The other ways to settle a lease.
impl Lease {
    /// Ack this job and claim the next one, both covered by one barrier: the worker loop's
    /// step (`steadq work` uses it between jobs). The ack's rename and the claim's rename
    /// are made first, then the barriers: on ext4 with a journal and on xfs one directory
    /// fsync, of the claim's directory, commits both (DESIGN.md, Barriers: "Ack and claim
    /// next"), so a worker makes one journal commit per job where `ack` then `claim_with`
    /// make two; elsewhere (btrfs, tmpfs, ext4 without a journal) each directory
    /// gets its own fsync, as the two calls would. Strict keeps its meaning: when this
    /// returns `Ok`, the ack is done (its receipt durable) and a returned lease is durable
    /// too.
    ///
    /// The claim is [`Queue::claim_with`]'s with lease `lease` (recovery of due and expired
    /// jobs included), but it does not wait for a level another user is making
    /// (`ops/making.rs`): then `next` is `Ok(None)` and a later claim finds the job.
    ///
    /// # Errors
    /// The outer `Err` is the ack's, as [`Lease::ack`]: [`SettleError::NotDone`] hands the
    /// lease back (nothing claimed), with [`ErrorKind::InvalidArgument`] also for a `lease`
    /// that is zero or longer than [`crate::MAX_LEASE`]; [`SettleError::LeaseLost`];
    /// [`SettleError::Indeterminate`] when the rename returned `EIO` or the shared barrier
    /// failed. After a failed barrier a job the claim took (indeterminate too) is given back
    /// to ready with its attempt, best effort; if that fails its lease expires as any other.
    ///
    /// The claim's own outcome is [`AckedNext::next`]: an error there (not done before its
    /// rename, indeterminate after it, as [`Queue::claim_with`]) leaves the ack done.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-next-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, steadq::Options::default())?;
    /// for p in [b"job a", b"job b"] {
    ///     q.enqueue(p)?;
    /// }
    /// let mut lease = q.claim()?.expect("a job is ready");
    /// let mut done = Vec::new();
    /// loop {
    ///     done.push(lease.payload()?.to_vec()); // the work
    ///     let step = lease.ack_and_claim(Duration::from_secs(30))?;
    ///     match step.next? {
    ///         Some(next) => lease = next,
    ///         None => break,
    ///     }
    /// }
    /// done.sort(); // two ids of one millisecond: either may be claimed first
    /// assert_eq!(done, [b"job a".to_vec(), b"job b".to_vec()]);
    /// assert_eq!(q.status()?.acked, 2);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ack_and_claim(self, lease: Duration) -> Result<AckedNext, SettleError> {
        self.ack_and_maybe_claim(Some(lease))
    }

    /// [`Lease::ack_and_claim`] with a lease of `next`, or [`Lease::ack`] without one (then
    /// [`AckedNext::next`] is `Ok(None)`): one call for a worker that claims on only while it
    /// is not stopping (`steadq work`).
    ///
    /// # Errors
    /// As [`Lease::ack_and_claim`], or as [`Lease::ack`] without `next`.
    pub fn ack_and_maybe_claim(mut self, next: Option<Duration>) -> Result<AckedNext, SettleError> {
        match self.ack_next(next) {
            Ok((receipt, next)) => Ok(AckedNext {
                receipt,
                next: next.unwrap_or(Ok(None)).map_err(Error::from),
            }),
            Err(e) => Err(SettleError::new(e, self)),
        }
    }

    /// Release the job back to ready now (what drop does, with the error reported).
    ///
    /// # Errors
    /// As [`Lease::nack`].
    pub fn release(mut self) -> Result<(), SettleError> {
        self.release_in_place()
            .map_err(|e| SettleError::new(e, self))
    }

    /// Release a lease whose job never reached what would run it, giving back the attempt
    /// its claim used (`Op::ClaimUndelivered`): for a claimer that could not
    /// write the payload or the lease handle out (a full disk under `steadq claim
    /// --payload-out`), which otherwise used up an attempt per try and dead-lettered jobs
    /// that never ran. Only for that: a job that may have run is released with
    /// [`Lease::release`] (attempts count claims, and never go down otherwise).
    ///
    /// # Errors
    /// As [`Lease::nack`]: not done (the lease is handed back), indeterminate, or lease lost.
    pub fn release_undelivered(mut self) -> Result<(), SettleError> {
        let q = self.q.clone();
        let to = q.place_ready(self.shard, State::Ready);
        let mut back = self.name.next(Kind::Ready, false);
        back.attempt = crate::disk::state::attempt_after(Op::ClaimUndelivered, self.name.attempt);
        self.settle(&to, back, Op::ClaimUndelivered)
            .map_err(|e| SettleError::new(e, self))
    }
}

// Internals of the calls above.
impl Lease {
    /// The guard for leased job `name` in `shard`, whose file the claim checked (`None`: the
    /// check failed; the guard only releases or dead-letters it then).
    fn new(q: Queue, shard: u16, name: JobName, checked: Option<&Checked>) -> Lease {
        let (raw, header, file) = match checked {
            Some(c) => (c.raw, c.header, c.file.clone()),
            None => ([0; HEADER_LEN], Header::default(), None),
        };
        let lease = Lease {
            q,
            shard,
            name,
            raw,
            header,
            file: OnceLock::new(),
            settled: false,
        };
        if let Some(f) = file {
            let _ = lease.file.set(f);
        }
        lease
    }

    /// Rename into receipts without barriers (for [`Queue::ack_batch`]).
    fn ack_rename(&mut self) -> Result<(Receipt, JobName)> {
        self.settled = true;
        let new = self.name.next(self.q.receipt_kind(self.token()), false);
        self.q.rename_job(
            &self.here(),
            &self.name,
            &self.q.place_receipts(self.receipt_shard()),
            &new,
            Op::Ack,
        )?;
        let r = Receipt {
            id: self.name.id,
            name: new.format(self.q.ident.id).to_string(),
        };
        Ok((r, new))
    }

    /// The `receipts/<ss>` shard of this job (its id's shard; every level shares them).
    fn receipt_shard(&self) -> u16 {
        self.name.id.shard(self.q.ident.shards)
    }

    /// A failed read of the payload as an error (not done): `EBADMSG` when the file changed.
    fn read_error(&self, path: Option<&std::path::Path>, e: StreamFailed) -> Cause {
        let errno = match e {
            StreamFailed::Errno(e) => e,
            StreamFailed::Changed(why) => {
                log::warn!(
                    "job {}: payload changed since its claim ({why})",
                    self.name.id
                );
                Errno::BADMSG
            }
        };
        Cause::io(
            Call::Read,
            errno,
            Outcome::NotDone,
            path.map(|p| p.to_path_buf()),
        )
    }

    /// Make this guard release its job on drop again (a settling call that was not done
    /// hands it back through [`crate::SettleError::NotDone`]).
    pub(crate) fn rearm(&mut self) {
        self.settled = false;
    }

    fn here(&self) -> crate::ops::transition::Place<'_> {
        self.q.place_ready(self.shard, State::Leased)
    }

    /// Run a settling move. Whatever the result, drop will not release afterwards: a failed
    /// ack, nack, fail or release reports its own outcome, and a lease it left in place
    /// expires and is recovered like any other (unless a not-done failure hands the lease
    /// back, re-armed: `SettleError::new`).
    fn settle(
        &mut self,
        to: &crate::ops::transition::Place<'_>,
        new: JobName,
        op: Op,
    ) -> Result<()> {
        self.settled = true;
        let q = self.q.clone();
        let _op = q.op();
        Ok(q.move_job(&self.here(), &self.name, to, &new, op)?)
    }

    /// The ack's rename, then with `next` the claim of the next job with that lease (its
    /// rename without its barrier), then the barriers that cover both, then the receipt
    /// policy: [`Lease::ack`] and [`Lease::ack_and_claim`] (the claim's result is `Some`
    /// exactly when `next` is). `settled` is set unless the ack's rename was cleanly not
    /// done.
    #[allow(clippy::type_complexity)]
    fn ack_next(
        &mut self,
        next: Option<Duration>,
    ) -> Result<(Receipt, Option<Result<Option<Lease>>>)> {
        if let Some(lease) = next {
            crate::queue::check_lease(lease)?;
        }
        let new = self.name.next(self.q.receipt_kind(self.token()), false);
        let q = self.q.clone();
        let _op = q.op();
        let to = q.place_receipts(self.receipt_shard());
        match q.rename_job(&self.here(), &self.name, &to, &new, Op::Ack) {
            Ok(()) => self.settled = true,
            // Cleanly not done: still ours, unless the name was gone.
            Err(MoveFailed::NotDone(e)) => {
                self.settled = e.is_lease_lost();
                return Err(e);
            }
            // It may have moved: never release it or ack it again.
            Err(m) => {
                self.settled = true;
                return Err(m.into());
            }
        }
        // The claim's rename without its barrier: the one below covers it.
        let claimed = next.map(|l| q.claim_sweep_with(l, &mut RecoverReport::default(), false));
        let from = self.here();
        let barriers = match &claimed {
            Some(Ok(Some(l))) => {
                let leased = q.place_ready(l.shard, State::Leased);
                if q.group.one_barrier_per_rename(&q.sys, to.dir.fd()) {
                    // The claim's directory changed last in this thread: its fsync forces
                    // the log past the ack (xfs), or commits the whole journal (ext4).
                    q.sync_place(Barrier::ClaimDest, &leased)
                } else {
                    q.sync_moved(Op::Ack, &from, &to).and_then(|()| {
                        if leased.rel == from.rel {
                            Ok(()) // the fsync of `from` came after the claim's rename
                        } else {
                            q.sync_place(Barrier::ClaimDest, &leased)
                        }
                    })
                }
            }
            _ => q.sync_moved(Op::Ack, &from, &to),
        };
        if let Err(e) = barriers {
            if let Some(Ok(Some(l))) = claimed {
                // Never handed out: back to ready with its attempt, or left to expire.
                if let Err(r) = l.release_undelivered() {
                    log::warn!("giving back a claim whose barrier failed: {r}");
                }
            }
            return Err(e);
        }
        q.after_ack(self.receipt_shard(), &new, &self.raw);
        q.dependency_acked(self.name.id); // ops/deps.rs: never fails the done ack
        let receipt = Receipt {
            id: self.name.id,
            name: new.format(q.ident.id).to_string(),
        };
        Ok((receipt, claimed))
    }

    /// [`Lease::nack`] with the crate's error; the caller hands the lease back on failure.
    fn nack_in_place(&mut self, delay: Duration) -> Result<Nacked> {
        // Whatever fails from here (a bucket that cannot be made on a full disk, a bad delay,
        // the rename) leaves the job leased under its name until its deadline: a failed nack
        // that reports "not done" must not have released the job on drop.
        self.settled = true;
        if self.name.exhausted() {
            let q = self.q.clone();
            let dead = q.place_dead()?;
            self.settle(
                &dead,
                self.name.next(
                    Kind::Dead {
                        reason: Reason::EXHAUSTED,
                    },
                    false,
                ),
                Op::NackExhausted,
            )?;
            return Ok(Nacked::Dead);
        }
        if delay.is_zero() {
            let q = self.q.clone();
            let to = q.place_ready(self.shard, State::Ready);
            self.settle(&to, self.name.next(Kind::Ready, false), Op::Release)?;
            return Ok(Nacked::Ready);
        }
        let nb = match crate::queue::due_after(self.q.clock.wall_ns(), delay) {
            Ok(nb) => nb,
            Err(e) => {
                // A bad argument moves nothing: the job stays leased under its name until its
                // deadline (dropping this guard must not release it either).
                self.settled = true;
                return Err(e);
            }
        };
        let q = self.q.clone();
        let to = q.place_delayed(nb)?;
        self.settle(
            &to,
            self.name.next(self.q.delayed_kind(nb, delay), false),
            Op::Nack,
        )?;
        Ok(Nacked::Delayed(
            std::time::UNIX_EPOCH + Duration::from_nanos(nb),
        ))
    }

    /// [`Lease::fail`] with the crate's error; the caller hands the lease back on failure.
    fn fail_in_place(&mut self, reason: Reason) -> Result<()> {
        // As in `nack`: a failure leaves the job leased, never released by drop.
        self.settled = true;
        let q = self.q.clone();
        let dead = q.place_dead()?;
        self.settle(
            &dead,
            self.name.next(Kind::Dead { reason }, false),
            Op::Fail,
        )
    }

    /// [`Lease::release`] with the crate's error; the caller hands the lease back on failure.
    fn release_in_place(&mut self) -> Result<()> {
        let q = self.q.clone();
        let to = q.place_ready(self.shard, State::Ready);
        self.settle(&to, self.name.next(Kind::Ready, false), Op::Release)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.settled = true;
        let q = self.q.clone();
        let to = q.place_ready(self.shard, State::Ready);
        if let Err(e) = self.q.move_job(
            &self.here(),
            &self.name,
            &to,
            &self.name.next(Kind::Ready, false),
            Op::Release,
        ) {
            if !e.is_lease_lost() {
                log::warn!("releasing an unsettled lease of job {}: {e}", self.name.id);
            }
        }
    }
}

/// How [`Lease::renew`] failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenewError {
    /// Not done: the lease keeps its old deadline and stays usable (a bad duration, or the
    /// rename failed cleanly).
    NotDone(Cause),
    /// The lease's exact name was gone: it expired and was recovered, or was settled or
    /// renewed elsewhere. Nothing changed; the job is no longer this lease's.
    LeaseLost(Cause),
    /// Indeterminate: the rename happened but its barrier failed (the lease holds its new
    /// name, which may not survive a crash), or the rename returned `EIO` (the lease follows
    /// whichever name exists). The lease stays usable: a next renew or settle says more.
    Indeterminate(Cause),
}

impl RenewError {
    /// At the public boundary: a renew's internal error.
    pub(crate) fn from_internal(e: Cause) -> RenewError {
        match e.outcome() {
            _ if e.is_lease_lost() => RenewError::LeaseLost(e),
            Outcome::NotDone => RenewError::NotDone(e),
            Outcome::Indeterminate => RenewError::Indeterminate(e),
        }
    }

    /// Not done (a lost lease included), or indeterminate.
    pub fn outcome(&self) -> Outcome {
        match self {
            RenewError::NotDone(_) | RenewError::LeaseLost(_) => Outcome::NotDone,
            RenewError::Indeterminate(_) => Outcome::Indeterminate,
        }
    }

    /// The cause: what went wrong, and where.
    pub fn cause(&self) -> &Cause {
        match self {
            RenewError::NotDone(e) | RenewError::LeaseLost(e) | RenewError::Indeterminate(e) => e,
        }
    }

    /// True for [`RenewError::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, RenewError::LeaseLost(_))
    }

    fn into_parts(self) -> (Outcome, Cause) {
        let o = self.outcome();
        match self {
            RenewError::NotDone(e) | RenewError::LeaseLost(e) | RenewError::Indeterminate(e) => {
                (o, e)
            }
        }
    }

    error_accessors!();
}

impl From<RenewError> for Error {
    fn from(e: RenewError) -> Error {
        match e.into_parts() {
            (Outcome::NotDone, e) => Error::NotDone(e),
            (Outcome::Indeterminate, e) => Error::Indeterminate(e),
        }
    }
}

impl core::fmt::Display for RenewError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        display_as(self.cause(), self.outcome(), f)
    }
}

impl std::error::Error for RenewError {}

/// How a settling call of a lease failed: [`Lease::ack`], [`Lease::nack`], [`Lease::fail`],
/// [`Lease::release`] (and `TypedLease`'s, with the `serde` feature).
#[derive(Debug)]
pub enum SettleError {
    /// Not done: the job is still leased by this lease, under its name, and the lease is
    /// handed back: settle it again (a second `ack` after the disk has room), renew it, or
    /// drop it (which releases the job to ready, as dropping any lease does). Converting
    /// this variant into an [`Error`] (`?`) keeps the job leased until its deadline
    /// instead, as [`Lease::into_handle`] does.
    NotDone {
        /// The lease, still holding the job (boxed: a lease is large, an error should not be).
        lease: Box<Lease>,
        /// What went wrong, and where.
        error: Cause,
    },
    /// The lease's exact name was gone: it expired and was recovered, or was settled or
    /// renewed elsewhere. Nothing changed.
    LeaseLost(Cause),
    /// Indeterminate: the rename happened but a barrier after it failed, or the rename
    /// returned `EIO`. The job may be settled; it is never released or settled again by
    /// this lease.
    Indeterminate(Cause),
}

impl SettleError {
    /// At the public boundary: a settling call's internal error, with the lease it was made
    /// on. Not done (and not lost) hands the lease back as a live guard.
    pub(crate) fn new(e: Cause, mut lease: Lease) -> SettleError {
        match e.outcome() {
            _ if e.is_lease_lost() => SettleError::LeaseLost(e),
            Outcome::NotDone => {
                lease.rearm();
                SettleError::NotDone {
                    lease: Box::new(lease),
                    error: e,
                }
            }
            Outcome::Indeterminate => SettleError::Indeterminate(e),
        }
    }

    /// Not done (a lost lease included), or indeterminate.
    pub fn outcome(&self) -> Outcome {
        match self {
            SettleError::NotDone { .. } | SettleError::LeaseLost(_) => Outcome::NotDone,
            SettleError::Indeterminate(_) => Outcome::Indeterminate,
        }
    }

    /// The cause: what went wrong, and where.
    pub fn cause(&self) -> &Cause {
        match self {
            SettleError::NotDone { error: e, .. }
            | SettleError::LeaseLost(e)
            | SettleError::Indeterminate(e) => e,
        }
    }

    /// True for [`SettleError::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, SettleError::LeaseLost(_))
    }

    /// The lease handed back by [`SettleError::NotDone`] (`None` for the other variants).
    pub fn into_lease(self) -> Option<Lease> {
        match self {
            SettleError::NotDone { lease, .. } => Some(*lease),
            _ => None,
        }
    }

    /// The outcome and the error; a lease handed back is detached (the job stays leased
    /// until its deadline).
    fn into_parts(self) -> (Outcome, Cause) {
        let o = self.outcome();
        match self {
            SettleError::NotDone { lease, error } => {
                let _ = lease.into_handle();
                (o, error)
            }
            SettleError::LeaseLost(e) | SettleError::Indeterminate(e) => (o, e),
        }
    }

    error_accessors!();
}

impl From<SettleError> for Error {
    /// A lease handed back by [`SettleError::NotDone`] is detached, not released: the job
    /// stays leased under its name until its deadline, so the conversion changes nothing.
    fn from(e: SettleError) -> Error {
        match e.into_parts() {
            (Outcome::NotDone, e) => Error::NotDone(e),
            (Outcome::Indeterminate, e) => Error::Indeterminate(e),
        }
    }
}

impl core::fmt::Display for SettleError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        display_as(self.cause(), self.outcome(), f)
    }
}

impl std::error::Error for SettleError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let (b, m) = (Duration::from_secs(5), Duration::from_secs(60));
        let got: Vec<u64> = (1..=6).map(|a| backoff(a, b, m).as_secs()).collect();
        assert_eq!(got, vec![5, 10, 20, 40, 60, 60]);
        assert_eq!(backoff(u32::MAX, b, m), m);
    }
}
