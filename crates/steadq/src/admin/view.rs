//! Looking at jobs: list, find, and reading one job's file (verified).
//!
//! The walk they share is `walk.rs`; status is `status.rs`; requeue, make-due and purge of
//! dead and delayed jobs are `dead.rs` (compaction lives with the receipt policy in
//! [`crate::admin::receipts`]).

use crate::disk::format::{
    interrupted_cut, verify, verify_receipt, Corruption, CUT_BLOCK, HEADER_LEN,
};
use crate::disk::name::{JobId, JobName};
use crate::disk::scan::state_of;
use crate::disk::state::State;
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub use super::dead::RequeueReport;
pub use super::groups::{GroupUse, HeldBack};
pub use super::status::{StateBytes, Status, StatusOptions};

/// One job found by [`Queue::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its state.
    pub state: State,
    /// Its directory relative to the root, e.g. `ready/03`.
    pub dir: String,
    /// Its parsed name.
    pub name: JobName,
}

impl Listed {
    /// Path relative to the queue root.
    pub fn rel_path(&self, queue_id: u128) -> String {
        format!("{}/{}", self.dir, self.name.format(queue_id))
    }
}

/// Why [`Queue::load_job`] could not hand out a verified job.
pub(crate) enum Load {
    /// The name is gone (moved or removed meanwhile).
    Missing,
    /// Not a regular file, or it fails verification.
    Corrupt(crate::disk::format::Corruption),
    /// A call failed.
    Io(Call, Errno),
}

impl Queue {
    /// Every job, or those in `state`, oldest first within each directory. Foreign entries
    /// are skipped (see [`Queue::fsck`]). On a live queue each job is listed once, as
    /// [`Queue::status`] counts it.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (not done) naming the directory that could not be read.
    pub fn list(&self, state: Option<State>) -> crate::Result<Vec<Listed>> {
        let mut unreadable = Vec::new();
        let out = self.list_noting(state, &mut unreadable)?;
        self.warn_unreadable(unreadable);
        Ok(out)
    }

    /// [`Queue::list`] that adds the directories this user cannot read to `unreadable`
    /// (as [`Queue::walk_noting`]) instead of warning about them.
    pub(crate) fn list_noting(
        &self,
        state: Option<State>,
        unreadable: &mut Vec<String>,
    ) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        let mut seen = IdSet::default();
        self.walk_noting(unreadable, |s| {
            if let Some(n) = s.parsed.ok().filter(|n| seen.insert(n.id)) {
                let st = state_of(&n.kind);
                if state.is_none_or(|w| w == st) {
                    out.push(Listed {
                        state: st,
                        dir: s.dir_rel.to_string(),
                        name: n,
                    });
                }
            }
            true
        })?;
        if state.is_none_or(|w| w == State::Waiting) {
            out.extend(
                self.waiting_listed()?
                    .into_iter()
                    .filter(|l| seen.insert(l.name.id)),
            );
        }
        out.sort_by(|a, b| (&a.dir, a.name.id).cmp(&(&b.dir, b.name.id)));
        Ok(out)
    }

    /// Visit jobs as the directories are read (no sorting, nothing held but, with `once`,
    /// the ids seen: 16 bytes a job), calling `f` per job in `state` (or every state) until
    /// it returns false. With `once` each job is visited once even if it moves during the
    /// pass; without it memory stays flat at any depth and a job that moves may be visited
    /// twice. The first job is visited after reading one directory chunk.
    ///
    /// # Errors
    /// As [`Queue::list`].
    pub fn list_each(
        &self,
        state: Option<State>,
        once: bool,
        mut f: impl FnMut(Listed) -> bool,
    ) -> crate::Result<()> {
        let mut seen = IdSet::default();
        let mut going = true;
        self.walk_while(|s| {
            if let Some(n) = s.parsed.ok().filter(|n| !once || seen.insert(n.id)) {
                let st = state_of(&n.kind);
                if going && state.is_none_or(|w| w == st) {
                    going = f(Listed {
                        state: st,
                        dir: s.dir_rel.to_string(),
                        name: n,
                    });
                }
            }
            going
        })?;
        if going && state.is_none_or(|w| w == State::Waiting) {
            for l in self.waiting_listed()? {
                if (!once || seen.insert(l.name.id)) && !f(l) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The waiting jobs (`waiting/`, ops/deps.rs) as listed jobs. A `waiting/` this user
    /// cannot read (a member's, made first at mode 700) is skipped with a warning, as the
    /// walk skips an unreadable bucket.
    fn waiting_listed(&self) -> Result<Vec<Listed>> {
        let waiting = match self.waiting_jobs() {
            Ok(w) => w,
            Err(e) => match self.unreadable_rel(&e) {
                Some(rel) => {
                    self.warn_unreadable(vec![rel]);
                    Vec::new()
                }
                None => return Err(e),
            },
        };
        Ok(waiting
            .into_iter()
            .map(|name| Listed {
                state: State::Waiting,
                dir: crate::disk::layout::WAITING_DIR.to_string(),
                name,
            })
            .collect())
    }

    /// The jobs job `id` still waits for: its dependency markers (`needs/<id>/`, DESIGN.md,
    /// Dependencies), oldest id first; empty for a job that waits for none (or no longer:
    /// a marker goes when its job is acked). Hostile entries are skipped, never followed.
    ///
    /// # Errors
    /// A directory that cannot be opened or read (not done: nothing changes).
    pub fn waiting_for(&self, id: JobId) -> crate::Result<Vec<JobId>> {
        let mut m = self.markers(crate::disk::layout::NEEDS_DIR, id)?;
        m.sort();
        Ok(m)
    }

    /// Find job `id` in any state.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchJob`] (not done), or as [`Queue::list`].
    pub fn find(&self, id: JobId) -> crate::Result<Listed> {
        let (found, unreadable) = self.names_of(id)?;
        self.warn_unreadable(unreadable);
        let found = found.into_iter().last();
        Ok(found.ok_or_else(|| Cause::not_done(ErrorKind::NoSuchJob, None))?)
    }

    /// Every name of job `id` in a place it belongs (ready and receipt shards, delayed and
    /// dead buckets; a misplaced name is foreign, not listed), in walk order, and the
    /// directories this user could not read (relative to the root): one walk of the queue.
    /// For [`Queue::find`] and for a move split by a crash (`ops/split.rs`).
    pub(crate) fn names_of(&self, id: JobId) -> Result<(Vec<Listed>, Vec<String>)> {
        let (mut found, mut unreadable) = (Vec::new(), Vec::new());
        self.walk_noting(&mut unreadable, |s| {
            match s.parsed {
                Ok(n) if n.id == id => found.push(Listed {
                    state: state_of(&n.kind),
                    dir: s.dir_rel.to_string(),
                    name: n,
                }),
                _ => {}
            }
            true
        })?;
        // Only names with its id are parsed (a prefix test), at any depth of waiting/.
        if let Some(name) = self.waiting_name(id)? {
            found.push(Listed {
                state: State::Waiting,
                dir: crate::disk::layout::WAITING_DIR.to_string(),
                name,
            });
        }
        Ok((found, unreadable))
    }

    /// Read and verify the job file of `job`, returning (header, payload).
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] if it fails verification (nothing is moved);
    /// [`ErrorKind::LeaseLost`] if it moved meanwhile; [`ErrorKind::Io`]. Not done.
    pub fn read_job(&self, job: &Listed) -> crate::Result<(crate::disk::format::Header, Vec<u8>)> {
        let rel = job.rel_path(self.ident.id);
        let dir = self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), &job.dir)
            .map_err(|e| Cause::io(Call::Open, e, Outcome::NotDone, Some(self.path(&job.dir))))?;
        let name = job.name.format(self.ident.id);
        let path = Some(self.path(&rel));
        match self.load_job(dir.as_fd(), &name, job.name.id.0) {
            Ok(x) => Ok(x),
            Err(Load::Missing) => Err(Cause::not_done(ErrorKind::LeaseLost, path).into()),
            Err(Load::Corrupt(c)) => Err(Cause::not_done(ErrorKind::Corrupt(c), path).into()),
            Err(Load::Io(call, e)) => Err(Cause::io(call, e, Outcome::NotDone, path).into()),
        }
    }

    /// Verify the job file of `job` in 64 KiB chunks, as a claim does (memory does not grow
    /// with the payload), and return its header and its payload as a stream: kept in memory
    /// when the file fits one chunk, otherwise read from the file again as it is read, its
    /// SHA-256 checked at the end (see [`crate::PayloadReader`]). What `steadq show` uses.
    ///
    /// # Errors
    /// As [`Queue::read_job`].
    pub fn open_job(
        &self,
        job: &Listed,
    ) -> crate::Result<(crate::disk::format::Header, crate::PayloadReader)> {
        let rel = job.rel_path(self.ident.id);
        let path = Some(self.path(&rel));
        let opened = self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), &job.dir)
            .map_err(|e| Load::Io(Call::Open, e))
            .and_then(|dir| {
                let name = job.name.format(self.ident.id);
                self.check_job(dir.as_fd(), &name, job.name.id.0)
            });
        match opened {
            Ok((h, fd, Some(file))) => {
                drop(fd);
                Ok((h, crate::PayloadReader::memory(file)))
            }
            Ok((h, fd, None)) => {
                let path = self.path(&rel);
                Ok((h, crate::PayloadReader::file(self.clone(), fd, &h, path)))
            }
            Err(Load::Missing) => Err(Cause::not_done(ErrorKind::LeaseLost, path).into()),
            Err(Load::Corrupt(c)) => Err(Cause::not_done(ErrorKind::Corrupt(c), path).into()),
            Err(Load::Io(call, e)) => Err(Cause::io(call, e, Outcome::NotDone, path).into()),
        }
    }

    /// Open `name` in `dir` without following symlinks or blocking on a fifo, check it is a
    /// regular file and verify it as job `id` in 64 KiB chunks
    /// ([`crate::ops::payload::check_file`], the claim's verifier); a receipt cut to its
    /// header is checked as [`verify_receipt`] does. Returns the header, the open file, and
    /// the whole file when it fit one chunk. Used by `fsck` and [`Queue::open_job`].
    #[allow(clippy::type_complexity)]
    pub(crate) fn check_job(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        id: u128,
    ) -> core::result::Result<
        (
            crate::disk::format::Header,
            OwnedFd,
            Option<std::sync::Arc<Vec<u8>>>,
        ),
        Load,
    > {
        let fd = self.sys.open_file_ro(dir, name).map_err(|e| match e {
            Errno::NOENT => Load::Missing,
            Errno::LOOP | Errno::NXIO => Load::Corrupt(crate::disk::format::Corruption::NotRegular),
            e => Load::Io(Call::Open, e),
        })?;
        let size = match self.sys.fstat_allocated(fd.as_fd()) {
            Ok((rustix::fs::FileType::RegularFile, size, allocated))
                if crate::disk::sys::sparse(size, allocated) =>
            {
                return Err(Load::Corrupt(crate::disk::format::Corruption::Sparse {
                    declared: size,
                    allocated,
                }))
            }
            Ok((rustix::fs::FileType::RegularFile, size, _)) => size,
            Ok(_) => return Err(Load::Corrupt(crate::disk::format::Corruption::NotRegular)),
            Err(e) => return Err(Load::Io(Call::Stat, e)),
        };
        if name.ends_with(".rct") && size == HEADER_LEN as u64 {
            let mut head = vec![0u8; HEADER_LEN];
            self.sys
                .read_exact_at(fd.as_fd(), &mut head, 0)
                .map_err(|e| Load::Io(Call::Read, e))?;
            let h = verify_receipt(&head, id, self.ident.id).map_err(Load::Corrupt)?;
            return Ok((h, fd, Some(std::sync::Arc::new(head))));
        }
        match crate::ops::payload::check_file(&self.sys, fd.as_fd(), size, &[], id, self.ident.id) {
            Ok(c) => Ok((c.header, fd, c.file)),
            Err(Ok(c @ (Corruption::PayloadDigest | Corruption::EnvelopeDigest)))
                if name.ends_with(".rct") =>
            {
                // A cut to the header that a crash interrupted reads as the cut receipt.
                let mut head = vec![0u8; (size as usize).min(CUT_BLOCK)];
                self.sys
                    .read_exact_at(fd.as_fd(), &mut head, 0)
                    .map_err(|e| Load::Io(Call::Read, e))?;
                match interrupted_cut(&head, size, id, self.ident.id) {
                    Some(h) => {
                        head.truncate(HEADER_LEN);
                        Ok((h, fd, Some(std::sync::Arc::new(head))))
                    }
                    None => Err(Load::Corrupt(c)),
                }
            }
            Err(Ok(c)) => Err(Load::Corrupt(c)),
            Err(Err((call, e))) => Err(Load::Io(call, e)),
        }
    }

    /// Open `name` in `dir` without following symlinks or blocking on a fifo, check it is a
    /// regular file, read it (up to max(max_payload, 1 GiB) + header) and verify it as job `id`.
    /// Returns the header and the payload. Used by `read_job`.
    pub(crate) fn load_job(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        id: u128,
    ) -> core::result::Result<(crate::disk::format::Header, Vec<u8>), Load> {
        let fd = self.sys.open_file_ro(dir, name).map_err(|e| match e {
            Errno::NOENT => Load::Missing,
            Errno::LOOP | Errno::NXIO => Load::Corrupt(crate::disk::format::Corruption::NotRegular),
            e => Load::Io(Call::Open, e),
        })?;
        match self.sys.fstat(fd.as_fd()) {
            Ok((rustix::fs::FileType::RegularFile, _)) => {}
            Ok(_) => return Err(Load::Corrupt(crate::disk::format::Corruption::NotRegular)),
            Err(e) => return Err(Load::Io(Call::Stat, e)),
        }
        let mut buf = Vec::new();
        let limit = self
            .opts
            .max_payload
            .max(1 << 30)
            .saturating_add(HEADER_LEN as u64);
        self.sys
            .read_all(fd.as_fd(), limit, &mut buf)
            .map_err(|e| Load::Io(Call::Read, e))?;
        // A receipt may have been cut to its header (receipt policy or compaction), or its
        // cut interrupted by a crash (then it reads as cut).
        let h = if name.ends_with(".rct") {
            match verify_receipt(&buf, id, self.ident.id) {
                Err(c @ (Corruption::PayloadDigest | Corruption::EnvelopeDigest)) => {
                    let h = interrupted_cut(&buf, buf.len() as u64, id, self.ident.id);
                    buf.truncate(HEADER_LEN);
                    h.ok_or(c)
                }
                r => r,
            }
        } else {
            verify(&buf, id, self.ident.id)
        }
        .map_err(Load::Corrupt)?;
        buf.drain(..HEADER_LEN);
        Ok((h, buf))
    }
}

/// A hasher for job ids: their low 80 bits are random, so a multiply of the low 64 spreads
/// them (SipHash's resistance to chosen keys buys nothing against names in one's own queue).
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl core::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = (v as u64 ^ (v >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A set of job ids (the ids seen in one pass).
pub(super) type IdSet = std::collections::HashSet<JobId, core::hash::BuildHasherDefault<IdHasher>>;
