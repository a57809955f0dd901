//! Receipts and what they cost on disk: the receipt policy, the evidence log and its
//! rotation, and compaction.
//!
//! An ack renames the job into `receipts/<shard>/`; that rename is the ack. What happens next
//! is the queue's [`ReceiptPolicy`] (version 2; kept in the identity file): `job` keeps the
//! whole file, `header` cuts it to its 128-byte header, `none` appends one evidence line and
//! removes it. A cut receipt is still a receipt: its header names the job, the queue and the
//! digests of the payload it had ([`crate::format::verify_receipt`]).
//!
//! `evidence.log` holds one line per receipt removed:
//! `v1 <job id> <receipt name> <payload sha256> <envelope sha256> <ack unix ns>\n`. In a
//! version-2 queue it rotates to `evidence.<16 hex: unix ns>.log` when the next append would
//! pass [`EvidenceLimits::max_bytes`], and only the newest [`EvidenceLimits::keep`] rotated
//! files are kept.

use crate::disk::barrier::Barrier;
use crate::disk::format::{hex32, verify_receipt, Header, HEADER_LEN};
use crate::disk::layout::receipts_shard;
use crate::disk::name::{parse_hex, JobId, JobName, Kind};
use crate::disk::state::State;
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::queue::{publish_identity_replacing, Identity, Queue};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// The evidence file compaction appends to, in the queue root.
pub use crate::disk::layout::EVIDENCE_FILE;

pub use crate::disk::identity::{EvidenceLimits, ReceiptPolicy};

/// What [`Queue::compact`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Receipts removed (each has its evidence line).
    pub removed: u32,
    /// Receipts cut to their header first, because the evidence write found the disk full.
    pub cut: u32,
    /// Bytes of payload those cuts gave back (file sizes before minus after).
    pub freed_bytes: u64,
    /// Receipts that failed verification and were kept (logged).
    pub kept_corrupt: u32,
}

/// The name of the evidence file rotated at `unix_ns`: `evidence.<16 hex>.log`.
pub(crate) fn rotated_evidence_name(unix_ns: u64) -> String {
    format!("evidence.{unix_ns:016x}.log")
}

/// Whether `name` is a rotated evidence file, `evidence.<16 hex>.log`.
pub(crate) fn is_rotated_evidence(name: &str) -> bool {
    name.strip_prefix("evidence.")
        .and_then(|r| r.strip_suffix(".log"))
        .is_some_and(|h| parse_hex(h.as_bytes(), 16).is_some())
}

/// One line of the evidence log, encoded and decoded side by side:
/// `v1 <job id> <receipt name> <payload sha256> <envelope sha256> <ack unix ns>\n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvidenceLine {
    /// The job.
    pub id: JobId,
    /// The receipt's file name (in `receipts/<shard>/`).
    pub receipt: String,
    /// SHA-256 of the payload (from the receipt's header).
    pub payload_sha256: [u8; 32],
    /// SHA-256 of the envelope (from the receipt's header).
    pub envelope_sha256: [u8; 32],
    /// When the job was acked, unix ns.
    pub acked_ns: u64,
}

impl EvidenceLine {
    /// The line for receipt `raw` (parsed: `name`) with header `h`, acked at `acked_ns`.
    fn new(name: &JobName, raw: &str, h: &Header, acked_ns: u64) -> EvidenceLine {
        EvidenceLine {
            id: name.id,
            receipt: raw.to_string(),
            payload_sha256: h.payload_sha256,
            envelope_sha256: h.envelope_sha256,
            acked_ns,
        }
    }

    /// The line as written, newline included.
    pub fn encode(&self) -> String {
        format!(
            "v1 {} {} {} {} {}\n",
            self.id,
            self.receipt,
            hex32(&self.payload_sha256),
            hex32(&self.envelope_sha256),
            self.acked_ns
        )
    }

    /// Parse one line (with or without its newline); `None` when it is not a whole `v1`
    /// line (a torn last line after a crash, say), or its receipt name is not printable
    /// ASCII (a forged one).
    pub fn parse(line: &str) -> Option<EvidenceLine> {
        let mut f = line.strip_suffix('\n').unwrap_or(line).split(' ');
        if f.next()? != "v1" {
            return None;
        }
        let id = JobId::parse(f.next()?)?;
        // Printable ASCII only, as every receipt name is: a forged line's terminal controls
        // never reach `show`.
        let receipt = f
            .next()
            .filter(|r| r.ends_with(".rct") && r.bytes().all(|b| b.is_ascii_graphic()))?
            .to_string();
        let payload_sha256 = unhex32(f.next()?)?;
        let envelope_sha256 = unhex32(f.next()?)?;
        let acked = f.next()?;
        let acked_ns = acked
            .parse()
            .ok()
            .filter(|_| acked.bytes().all(|b| b.is_ascii_digit()))?;
        if f.next().is_some() {
            return None;
        }
        Some(EvidenceLine {
            id,
            receipt,
            payload_sha256,
            envelope_sha256,
            acked_ns,
        })
    }
}

/// 64 lowercase hex digits as 32 bytes.
fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(s.as_bytes().chunks_exact(2)) {
        *o = parse_hex(pair, 2)? as u8;
    }
    Some(out)
}

/// The longest evidence line passed on whole (bytes); SteadQ writes lines of about 300.
pub(crate) const EVIDENCE_LINE_MAX: usize = 4096;

impl Queue {
    /// This handle's receipt policy (read from the identity file when it was opened).
    pub fn receipt_policy(&self) -> ReceiptPolicy {
        self.ident.receipts
    }

    /// Change the receipt policy and, when given, the evidence limits of this version-2 queue:
    /// the identity file is rewritten (temp file, fsync, rename over it, fsync of the root).
    /// Handles already open keep their settings until reopened. Returns the new identity.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] (not done) for a version-1 queue or a zero limit;
    /// [`ErrorKind::Io`]: not done before the rename, indeterminate after it.
    pub fn set_receipt_policy(
        &self,
        policy: ReceiptPolicy,
        evidence: Option<EvidenceLimits>,
    ) -> Result<Identity, crate::Error> {
        if self.ident.version < 2 {
            return Err(Cause::not_done(
                ErrorKind::InvalidArgument(
                    "receipt policies need queue version 2 (this queue is version 1)",
                ),
                Some(self.root.clone()),
            )
            .into());
        }
        let ident = Identity {
            receipts: policy,
            evidence: evidence.unwrap_or(self.ident.evidence),
            ..self.ident
        };
        if ident.evidence.max_bytes == 0 {
            return Err(Cause::not_done(
                ErrorKind::InvalidArgument("the evidence limit must be > 0"),
                None,
            )
            .into());
        }
        publish_identity_replacing(&self.sys, self.dirs.root.as_fd(), &self.root, &ident)?;
        Ok(ident)
    }

    /// After an ack renamed the job to receipt `receipt` in `receipts/<shard>/` and made it
    /// durable: apply the receipt policy. `header` is the job's 128-byte header. The ack is
    /// done whatever happens here; a step that fails leaves a whole receipt (logged), which
    /// compaction takes later.
    pub(crate) fn after_ack(&self, shard: u16, receipt: &JobName, header: &[u8]) {
        if self.ident.receipts == ReceiptPolicy::Job {
            return; // the receipt stays as the rename left it: nothing to format or do
        }
        let dir = self.dirs.receipts[shard as usize].as_fd();
        let raw = receipt.format(self.ident.id);
        let rel = format!("{}/{raw}", receipts_shard(shard));
        match self.ident.receipts {
            ReceiptPolicy::Job => {}
            ReceiptPolicy::Header => {
                // No fsync: cut or not, after a crash it is a valid receipt.
                if let Err((c, e)) = self.cut(dir, &raw, false) {
                    log::warn!("{rel}: could not cut the receipt to its header ({c:?}: {e}); it stays whole");
                }
            }
            ReceiptPolicy::None => {
                let h = match verify_receipt(header, receipt.id.0, self.ident.id) {
                    Ok(h) => h,
                    Err(c) => {
                        log::warn!("{rel}: header unreadable after the ack ({c}); receipt kept");
                        return;
                    }
                };
                let acked = match receipt.kind {
                    Kind::Receipt {
                        acked_ns: Some(a), ..
                    } => a,
                    _ => self.clock.wall_ns(),
                };
                // A split requeue's stale dead name would be visible once this receipt is
                // gone (DESIGN.md, "Moves split by a crash"): settle it first (one fstatat).
                match self.settle_split(&self.place_receipts(shard), receipt) {
                    Ok(false) => {}
                    Ok(true) => return, // the older half of a split: already removed
                    Err(e) => {
                        log::warn!("{rel}: receipt kept: {e}");
                        return;
                    }
                }
                let line = EvidenceLine::new(receipt, &raw, &h, acked).encode();
                if let Err(e) = self.append_evidence(&line, |_| Ok(false)) {
                    log::warn!("{rel}: receipt kept: {e}");
                    return;
                }
                if let Err(e) = self
                    .sys
                    .unlink(dir, &raw)
                    .and_then(|()| self.barrier(Barrier::ReceiptUnlink, dir))
                {
                    log::warn!("{rel}: evidence written, receipt not removed: {e}");
                }
            }
        }
    }

    /// Cut receipt `raw` in `dir` to its header; with `sync`, fsync it so the blocks are given
    /// back before the caller goes on. Returns the bytes freed.
    fn cut(
        &self,
        dir: BorrowedFd<'_>,
        raw: &str,
        sync: bool,
    ) -> core::result::Result<u64, (Call, Errno)> {
        let fd = self
            .sys
            .open_file_wo(dir, raw)
            .map_err(|e| (Call::Open, e))?;
        let (_, size) = self.sys.fstat(fd.as_fd()).map_err(|e| (Call::Stat, e))?;
        if size <= HEADER_LEN as u64 {
            return Ok(0);
        }
        self.sys
            .truncate(fd.as_fd(), HEADER_LEN as u64)
            .map_err(|e| (Call::Write, e))?;
        if sync {
            self.barrier_file(Barrier::ReceiptCut, fd.as_fd())
                .map_err(|e| (Call::Fsync, e))?;
        }
        Ok(size - HEADER_LEN as u64)
    }

    /// Append `lines` to `evidence.log` (rotating first when the queue's limit would be
    /// passed) and fsync it. When the write finds the disk full (`ENOSPC`, `EDQUOT`), the
    /// file is put back to its length before the write, `free()` is called, and if it
    /// returns `true` (it freed space) the write is retried once. Only a write is retried;
    /// a failed fsync is final.
    ///
    /// # Errors
    /// Not done: the lines are not durable (they may be partly present after a failed fsync).
    fn append_evidence(
        &self,
        lines: &str,
        mut free: impl FnMut(&Queue) -> Result<bool>,
    ) -> Result<()> {
        self.append_evidence_once(lines, &mut free, true)
    }

    /// [`Queue::append_evidence`]; with `again`, one more try when the lines landed in a
    /// file that was removed meanwhile.
    fn append_evidence_once(
        &self,
        lines: &str,
        free: &mut dyn FnMut(&Queue) -> Result<bool>,
        again: bool,
    ) -> Result<()> {
        let _guard = self.evidence_lock.lock().unwrap_or_else(|p| p.into_inner());
        let ev = self.path(EVIDENCE_FILE);
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(ev.clone()));
        let root = self.dirs.root.as_fd();
        let mut fd = self
            .sys
            .open_append(root, EVIDENCE_FILE)
            .map_err(|e| nd(Call::Open, e))?;
        let (_, mut size) = self.sys.fstat(fd.as_fd()).map_err(|e| nd(Call::Stat, e))?;
        let limits = self.ident.evidence;
        if size > 0 && size.saturating_add(lines.len() as u64) > limits.max_bytes {
            self.rotate_evidence()?;
            fd = self
                .sys
                .open_append(root, EVIDENCE_FILE)
                .map_err(|e| nd(Call::Open, e))?;
            size = self.sys.fstat(fd.as_fd()).map_err(|e| nd(Call::Stat, e))?.1;
        }
        // A last line without its newline is a torn append (a crash mid-write, or zeros a
        // filesystem exposed past the data that reached the disk): end it first, so the new
        // lines start a line of their own and stay evidence. fsck reports the fragment.
        let mut last = [0u8; 1];
        let torn = size > 0
            && self
                .sys
                .read_at(fd.as_fd(), &mut last, size - 1)
                .map_err(|e| nd(Call::Read, e))?
                == 1
            && last[0] != b'\n';
        let owned;
        let lines = if torn {
            log::warn!(
                "{}: its last line is torn (no newline); ended before appending",
                ev.display()
            );
            owned = format!("\n{lines}");
            owned.as_str()
        } else {
            lines
        };
        if size == 0 {
            // New (or just rotated): every user's ack appends here, so it is shared like
            // `ready/` (its read and write bits), whatever this process's umask: made 600 at
            // umask 077, every other user's ack kept its receipt instead, with a warning.
            self.share_file(fd.as_fd(), crate::disk::layout::READY_DIR, EVIDENCE_FILE);
        }
        self.write_evidence(fd.as_fd(), size, lines, free)?;
        self.barrier_file(Barrier::EvidenceFile, fd.as_fd())
            .map_err(|e| nd(Call::Fsync, e))?;
        // Another process may have rotated this file and removed it (keep = 0) between our
        // open and write: lines in an unlinked file are lost, so write them again, once.
        if self.sys.nlink(fd.as_fd()).map_err(|e| nd(Call::Stat, e))? == 0 {
            if !again {
                return Err(nd(Call::Write, Errno::NOENT));
            }
            drop(_guard);
            return self.append_evidence_once(lines, &mut |_| Ok(false), false);
        }
        self.barrier(Barrier::EvidenceDir, root)
            .map_err(|e| nd(Call::FsyncDir, e))
    }

    /// Write `lines` at the end of the evidence log `fd`, `size` bytes long before: on a
    /// full filesystem (`ENOSPC`, `EDQUOT`) the file is put back as it was, `free` is asked
    /// to make room, and the lines are written once more; a failed write never leaves half
    /// a line. Not done on error.
    fn write_evidence(
        &self,
        fd: BorrowedFd<'_>,
        size: u64,
        lines: &str,
        free: &mut dyn FnMut(&Queue) -> Result<bool>,
    ) -> Result<()> {
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(EVIDENCE_FILE)));
        match self.sys.write_all(fd, lines.as_bytes()) {
            Ok(()) => {}
            Err(e @ (Errno::NOSPC | Errno::DQUOT)) => {
                // Never leave half a line: put the file back as it was, then make room.
                self.sys
                    .truncate(fd, size)
                    .map_err(|e| nd(Call::Write, e))?;
                if !free(self)? {
                    return Err(nd(Call::Write, e));
                }
                if let Err(e) = self.sys.write_all(fd, lines.as_bytes()) {
                    let _ = self.sys.truncate(fd, size);
                    return Err(nd(Call::Write, e));
                }
            }
            Err(e) => {
                let _ = self.sys.truncate(fd, size);
                return Err(nd(Call::Write, e));
            }
        }
        Ok(())
    }

    /// Rename `evidence.log` to `evidence.<16 hex: unix ns>.log` (no-replace), make it
    /// durable, then remove all but the newest `keep` rotated files.
    fn rotate_evidence(&self) -> Result<()> {
        let root = self.dirs.root.as_fd();
        let to = rotated_evidence_name(self.clock.wall_ns());
        match self.sys.rename(root, EVIDENCE_FILE, root, &to) {
            // Another process rotated it first (or the same nanosecond is taken): fine.
            Ok(()) | Err(Errno::NOENT) | Err(Errno::EXIST) => {}
            Err(e) => {
                return Err(Cause::io(
                    Call::Rename,
                    e,
                    Outcome::NotDone,
                    Some(self.path(EVIDENCE_FILE)),
                ))
            }
        }
        let mut rotated = self.rotated_evidence()?;
        rotated.sort_unstable();
        let excess = rotated
            .len()
            .saturating_sub(self.ident.evidence.keep as usize);
        for old in &rotated[..excess] {
            if let Err(e) = self.sys.unlink(root, old) {
                log::warn!("could not remove old evidence {old}: {e}");
            }
        }
        self.barrier(Barrier::EvidenceRotate, root)
            .map_err(|e| Cause::io(Call::FsyncDir, e, Outcome::NotDone, Some(self.root.clone())))
    }

    /// Whether job `id` has a line in `evidence.log` or a rotated evidence file: it was
    /// acked and its receipt removed since (receipt policy `none`, or compaction). Reads
    /// each file in 64 KiB chunks (memory stays flat; a 16 MiB log costs about 256 reads),
    /// newest first, and stops at the first match. Evidence files dropped by rotation
    /// (`EvidenceLimits::keep`) no longer answer.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (not done) when the root cannot be listed or an evidence file
    /// cannot be opened or read: the caller cannot tell, and must not guess.
    pub(crate) fn acked_in_evidence(&self, id: JobId) -> Result<bool> {
        Ok(self.evidence_line(id)?.is_some())
    }

    /// The evidence line of job `id`, when it has one that parses (see
    /// `Queue::acked_in_evidence` for where it is looked for and what it costs): the
    /// record of a receipt removed by compaction or by receipt policy `none`. Reads only.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (not done) when the root cannot be listed or an evidence file
    /// cannot be opened or read.
    pub fn evidence_of(&self, id: JobId) -> crate::Result<Option<EvidenceLine>> {
        let line = self.evidence_line(id)?;
        Ok(line.as_deref().and_then(EvidenceLine::parse))
    }

    /// The first line of job `id` in the evidence files, newest file first.
    fn evidence_line(&self, id: JobId) -> Result<Option<String>> {
        let mut names = self.rotated_evidence()?;
        names.sort_unstable_by(|a, b| b.cmp(a));
        names.insert(0, EVIDENCE_FILE.to_string());
        let needle = format!("v1 {id} ");
        let root = self.dirs.root.as_fd();
        for name in names {
            let at = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(&name)));
            let fd = match self.sys.open_regular_ro(root, &name) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(at(Call::Open, e)),
            };
            let mut found = None;
            self.evidence_lines(fd.as_fd(), &mut |l| {
                if l.starts_with(needle.as_bytes()) {
                    found = Some(String::from_utf8_lossy(l).into_owned());
                }
                found.is_none()
            })
            .map_err(|e| at(Call::Read, e))?;
            if found.is_some() {
                return Ok(found);
            }
            // A last line without its newline (torn by a crash) is no evidence.
        }
        Ok(None)
    }

    /// Call `each` with every whole line of the evidence file `fd` (without its newline), in
    /// order, until it returns `false`; returns the length of a last line that has no newline
    /// (0 when the file ends with one). Reads 64 KiB at a time (`pread(2)`). A line longer
    /// than [`EVIDENCE_LINE_MAX`] (SteadQ writes lines of about 300 bytes) is passed on cut
    /// to that length, the rest of it skipped: memory stays flat whatever a member wrote.
    ///
    /// # Errors
    /// `EFBIG` for a file sparse by far ([`crate::disk::sys::sparse`]: a member's
    /// `truncate -s 1T evidence.log`), unread; a read's errno.
    pub(crate) fn evidence_lines(
        &self,
        fd: BorrowedFd<'_>,
        each: &mut dyn FnMut(&[u8]) -> bool,
    ) -> core::result::Result<u64, Errno> {
        let (_, size, allocated) = self.sys.fstat_allocated(fd)?;
        if crate::disk::sys::sparse(size, allocated) {
            return Err(Errno::FBIG);
        }
        // Whole lines of each chunk; a line cut at the chunk's end is carried over.
        let mut buf = vec![0u8; 64 * 1024];
        let (mut carried, mut offset) = (Vec::new(), 0u64);
        // Bytes of an overlong line skipped since it was passed on (its length counts on).
        let mut skipped = 0u64;
        loop {
            let n = self.sys.read_at(fd, &mut buf, offset)?;
            if n == 0 {
                return Ok(carried.len() as u64 + skipped);
            }
            offset += n as u64;
            let chunk = &buf[..n];
            // Only the new bytes are searched: the carried ones hold no newline.
            let Some(last) = chunk.iter().rposition(|&b| b == b'\n') else {
                if skipped > 0 {
                    skipped += n as u64;
                    continue;
                }
                carried.extend_from_slice(chunk);
                if carried.len() > EVIDENCE_LINE_MAX {
                    if !each(&carried[..EVIDENCE_LINE_MAX]) {
                        return Ok(0);
                    }
                    skipped = carried.len() as u64;
                    carried.clear();
                }
                continue;
            };
            let mut lines = chunk[..last].split(|&b| b == b'\n');
            let first = lines.next().unwrap_or_default();
            let go_on = if skipped > 0 {
                // The end of an overlong line already passed on.
                skipped = 0;
                true
            } else {
                carried.extend_from_slice(first);
                let whole = &carried[..carried.len().min(EVIDENCE_LINE_MAX)];
                each(whole)
            };
            if !go_on || !lines.all(|l| each(&l[..l.len().min(EVIDENCE_LINE_MAX)])) {
                return Ok(0);
            }
            carried.clear();
            carried.extend_from_slice(&chunk[last + 1..]);
        }
    }

    /// Names of the rotated evidence files in the root (`evidence.<16 hex>.log`).
    pub(crate) fn rotated_evidence(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        self.sys
            .read_dir(self.dirs.root.as_fd(), |name, _, _| {
                if let Some(n) = name.filter(|n| is_rotated_evidence(n)) {
                    out.push(n.to_string());
                }
            })
            .map_err(|e| Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.root.clone())))?;
        Ok(out)
    }

    /// Remove receipts acked more than `older_than` ago, first appending one line of evidence
    /// per receipt to `evidence.log` and fsyncing it (see the module docs for the line). The
    /// ack time is the one in a version-2 receipt's name; a version-1 receipt has none, and
    /// its inode change time (which the rename into `receipts/` set) is used. A receipt that
    /// fails verification is kept and reported in the log.
    ///
    /// On a full disk compaction frees before it appends: when the evidence write finds no
    /// space, the receipts being compacted are cut to their headers (a cut receipt is still a
    /// receipt) and synced, then the write is tried once more.
    ///
    /// Before each unlink the receipt's link count is read (one `fstatat`): a second name
    /// of the job left by a crash that split a move (a stale dead name) is unlinked first, so
    /// that `dead requeue` cannot run the acked job again (DESIGN.md, "Moves split by a
    /// crash").
    ///
    /// # Errors
    /// Not done if the evidence could not be written and synced, or `steadq.counts` could
    /// not be read ([`ErrorKind::BadCounts`]) or replaced (nothing removed; receipts may
    /// have been cut); indeterminate if an unlink or the final directory fsync failed
    /// (evidence is durable; a receipt may remain, and compacting again adds a second line
    /// for it), or, with the outcome it reports, if settling such a split failed.
    pub fn compact(&self, older_than: Duration) -> Result<CompactReport, crate::Error> {
        // One compaction at a time counts (admin/counts.rs): held to the end.
        let _counting = self.counts_lock()?;
        let cutoff = self
            .clock
            .wall_ns()
            .saturating_sub(older_than.as_nanos().min(u64::MAX as u128) as u64);
        let mut report = CompactReport::default();
        let mut lines = String::new();
        let mut victims: Vec<(u16, JobName)> = Vec::new();
        for l in self.list(Some(State::Acked))? {
            self.count_progress();
            let shard = l.name.id.shard(self.ident.shards);
            let name = l.name.format(self.ident.id);
            let acked = match l.name.kind {
                Kind::Receipt {
                    acked_ns: Some(a), ..
                } => a,
                _ => match self
                    .sys
                    .stat_nofollow(self.dirs.receipts[shard as usize].as_fd(), &name)
                {
                    Ok(m) => m.ctime_ns,
                    Err(_) => continue,
                },
            };
            if acked > cutoff {
                continue;
            }
            // Verified in chunks; the payload is not read into memory.
            match self.open_job(&l) {
                Ok((h, _)) => {
                    lines.push_str(&EvidenceLine::new(&l.name, &name, &h, acked).encode());
                    victims.push((shard, l.name));
                }
                Err(e) if matches!(e.kind(), ErrorKind::Corrupt(_)) => {
                    report.kept_corrupt += 1;
                    // Kept for `fsck` to report (and `--quarantine` to move): its evidence
                    // line could not be trusted.
                    log::warn!("not compacting it: {e} (`steadq fsck` reports it)")
                }
                Err(e) if e.is_lease_lost() => {} // removed meanwhile by another compactor
                Err(e) => return Err(e),
            }
        }
        if victims.is_empty() {
            return Ok(report);
        }
        self.append_evidence(&lines, |q| {
            for (s, n) in &victims {
                let raw = n.format(q.ident.id);
                match q.cut(q.dirs.receipts[*s as usize].as_fd(), &raw, true) {
                    Ok(0) => {}
                    Ok(freed) => {
                        report.cut += 1;
                        report.freed_bytes += freed;
                    }
                    Err((_, Errno::NOENT)) => {}
                    Err((c, e)) => {
                        let rel = format!("{}/{raw}", receipts_shard(*s));
                        return Err(Cause::io(c, e, Outcome::NotDone, Some(q.path(&rel))));
                    }
                }
            }
            Ok(report.cut > 0)
        })?;
        // Counted before they are removed: a total never goes down (admin/counts.rs); on a
        // full filesystem after.
        let n = victims.len() as i64;
        let later = self.count_ahead(n, 0)?;
        self.remove_receipts(&victims, &mut report)?;
        if later {
            self.count_after(n, 0, "compacted receipts");
        }
        Ok(report)
    }

    /// Unlink compacted receipts and fsync their directories (indeterminate on failure).
    fn remove_receipts(
        &self,
        victims: &[(u16, JobName)],
        report: &mut CompactReport,
    ) -> Result<()> {
        let mut shards: Vec<u16> = Vec::new();
        for (s, n) in victims {
            self.count_progress();
            // Settle a split first, as `after_ack` does under the `none` policy.
            if self.settle_split(&self.place_receipts(*s), n)? {
                continue; // the older half of a split: already removed
            }
            let raw = n.format(self.ident.id);
            let dir: &OwnedFd = &self.dirs.receipts[*s as usize];
            match self.sys.unlink(dir.as_fd(), &raw) {
                Ok(()) => report.removed += 1,
                Err(Errno::NOENT) => {} // another compactor removed it
                Err(e) => {
                    let rel = format!("{}/{raw}", receipts_shard(*s));
                    return Err(Cause::io(
                        Call::Unlink,
                        e,
                        Outcome::Indeterminate,
                        Some(self.path(&rel)),
                    ));
                }
            }
            if !shards.contains(s) {
                shards.push(*s);
            }
        }
        for s in shards {
            self.barrier(
                Barrier::CompactReceiptsDir,
                self.dirs.receipts[s as usize].as_fd(),
            )
            .map_err(|e| {
                Cause::io(
                    Call::FsyncDir,
                    e,
                    Outcome::Indeterminate,
                    Some(self.path(&receipts_shard(s))),
                )
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_lines_and_rotated_names_round_trip() {
        let e = EvidenceLine {
            id: JobId(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            receipt: "r.rct".into(),
            payload_sha256: [0xab; 32],
            envelope_sha256: [7; 32],
            acked_ns: 1_700_000_000_123_456_789,
        };
        let line = e.encode();
        assert!(line.starts_with("v1 0123456789abcdef0011223344556677 r.rct abab"));
        assert!(line.ends_with(" 1700000000123456789\n"));
        assert_eq!(EvidenceLine::parse(&line), Some(e.clone()));
        assert_eq!(EvidenceLine::parse(line.trim_end()), Some(e));
        // A torn line, another version, junk after the fields, a bad digest.
        for bad in [
            &line[..line.len() / 2],
            &line.replacen("v1", "v2", 1),
            &line.replace('\n', " x\n"),
            &line.replacen("abab", "abaX", 1),
        ] {
            assert_eq!(EvidenceLine::parse(bad), None, "{bad}");
        }
        let name = rotated_evidence_name(0x1234);
        assert_eq!(name, "evidence.0000000000001234.log");
        assert!(is_rotated_evidence(&name));
        assert!(!is_rotated_evidence("evidence.log"));
    }
}
