//! The totals that only go up (`Status::acked_total`, `Status::dead_total`): what is in the
//! directories now plus what left them for good, counted in `steadq.counts`
//! ([`crate::disk::counts`] owns its bytes).
//!
//! Compaction, `requeue_dead` and `purge_dead` hold an exclusive `flock(2)` on a descriptor
//! of the queue root while they run, so two of them never count the same entries. Each adds
//! the entries it is about to remove *before* removing them (the file replaced whole:
//! temp file, fsync, rename, fsync of the root), and takes back those it then did not
//! remove (a requeue or purge that failed for some). A reader (`status`) lists the
//! directories first and reads the file after: an entry it saw is counted in the file
//! already or still present, so a total it reports never goes down. A crash after the
//! file was replaced and before every entry was removed counts the entries left twice, for
//! good: a total may run ahead by one batch per such crash, never behind.

use crate::disk::counts::Counts;
use crate::disk::layout::COUNTS_FILE;
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::queue::Queue;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// The longest compaction, `requeue_dead` and `purge_dead` wait for the counting lock
/// (5 s), then fail not done ([`ErrorKind::CountsBusy`]) naming the queue root. Another
/// of them running holds it for its whole run; so can any member, who may open the root.
pub const COUNTS_LOCK_WAIT: Duration = Duration::from_secs(5);

impl Queue {
    /// What compaction, requeue and purge removed for good (`steadq.counts`; all zero
    /// when the file is missing).
    ///
    /// # Errors
    /// Not done: [`ErrorKind::BadCounts`] when the file is damaged; [`ErrorKind::Io`] when
    /// it cannot be read.
    pub fn counts(&self) -> crate::Result<Counts> {
        Ok(self.read_counts()?)
    }

    pub(crate) fn read_counts(&self) -> Result<Counts> {
        let Some(text) = self.read_root_file(COUNTS_FILE)? else {
            return Ok(Counts::default());
        };
        Counts::decode(&text)
            .ok_or_else(|| Cause::not_done(ErrorKind::BadCounts, Some(self.path(COUNTS_FILE))))
    }

    /// The counting lock (see the module docs): an exclusive `flock(2)` on a new descriptor
    /// of the root, held until the returned descriptor is dropped. Tried without blocking
    /// every 1 to 50 ms for at most [`COUNTS_LOCK_WAIT`]: every member may open the root and
    /// lock it (they run `dead requeue`), so a wait without bound was a member's way to hang
    /// the owner's compaction and every requeue and purge for as long as she liked.
    ///
    /// # Errors
    /// Not done: [`ErrorKind::CountsBusy`] naming the root when the lock stayed held;
    /// [`ErrorKind::Io`] when the root cannot be opened or locked.
    pub(crate) fn counts_lock(&self) -> Result<OwnedFd> {
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.root.clone()));
        let fd = self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), ".")
            .map_err(|e| nd(Call::Open, e))?;
        let started = self.clock.boot_ns();
        let mut pause = Duration::from_millis(1);
        loop {
            if self
                .sys
                .try_lock_exclusive(fd.as_fd())
                .map_err(|e| nd(Call::Flock, e))?
            {
                return Ok(fd);
            }
            let waited = Duration::from_nanos(self.clock.boot_ns().saturating_sub(started));
            if waited >= COUNTS_LOCK_WAIT {
                let kind = ErrorKind::CountsBusy {
                    waited_ms: waited.as_millis() as u64,
                };
                return Err(Cause::not_done(kind, Some(self.root.clone())));
            }
            std::thread::sleep(pause.min(COUNTS_LOCK_WAIT - waited));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Count `acked` receipts and `dead` jobs about to be removed ([`Queue::add_counts`]),
    /// or, when the filesystem is full (`ENOSPC`, `EDQUOT` from making or writing the temp
    /// file: no inode or block for it), count nothing and return `true`: the caller counts
    /// them after the removal freed room (compaction and purge are how a full disk is cured,
    /// and must not need room first). A crash in between then never counts them. A failed
    /// barrier (an fsync, whatever its errno) is the caller's failure, not done: nothing was
    /// removed yet.
    pub(crate) fn count_ahead(&self, acked: i64, dead: i64) -> Result<bool> {
        let full = |e: &Cause| match e.kind() {
            crate::ErrorKind::Io { call, errno } => {
                matches!(call, Call::Open | Call::Write)
                    && (*errno == Errno::NOSPC.into() || *errno == Errno::DQUOT.into())
            }
            _ => false,
        };
        match self.add_counts(acked, dead) {
            Err(e) if full(&e) => Ok(true),
            r => r.map(|()| false),
        }
    }

    /// [`Queue::add_counts`] after the removal, its failure logged: the entries are gone
    /// and so is their count (`what` names them).
    pub(crate) fn count_after(&self, acked: i64, dead: i64, what: &str) {
        if let Err(e) = self.add_counts(acked, dead) {
            log::warn!("{e}: {what} not counted in steadq.counts");
        }
    }

    /// Add `acked` and `dead` (either may be negative: taken back) to `steadq.counts`, under
    /// [`Queue::counts_lock`] held by the caller. Errors as [`Queue::replace_root_file`],
    /// and as [`Queue::counts`] when the file cannot be read.
    pub(crate) fn add_counts(&self, acked: i64, dead: i64) -> Result<()> {
        if acked == 0 && dead == 0 {
            return Ok(());
        }
        let mut c = self.read_counts()?;
        c.acked = c.acked.saturating_add_signed(acked);
        c.dead = c.dead.saturating_add_signed(dead);
        self.replace_root_file(
            crate::disk::barrier::Barrier::Counts,
            COUNTS_FILE,
            c.encode().as_bytes(),
        )
    }
}
