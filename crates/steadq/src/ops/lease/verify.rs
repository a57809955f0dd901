//! Verification of a leased job file before a lease is handed out: read once in 64 KiB
//! chunks, both digests checked, a corrupt file dead-lettered; and `lease_from_handle`,
//! which verifies the file of a lease taken over by its handle.

use super::Lease;
use crate::disk::format::{Corruption, HEADER_LEN};
use crate::disk::name::{JobName, Kind, NameError, Reason};
use crate::disk::state::{Op, State};
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Error, ErrorKind, Outcome, Result};
use crate::ops::payload::{check_file, check_whole, Checked, LoadFailed, CHUNK, PROBE};
use crate::queue::Queue;
use rustix::fs::FileType;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

impl Queue {
    /// Read job file `file` (named `name`) once, in chunks of 64 KiB, and verify both
    /// digests: a claim costs O(64 KiB) of memory whatever the payload's size. A file of up
    /// to one chunk is read with one `pread(2)` and kept. `Err(Ok(_))`: corrupt;
    /// `Err(Err((Read, EFBIG)))`: a consistent file larger than `Options::max_payload` allows.
    pub(super) fn load_verified(
        &self,
        file: OwnedFd,
        name: &JobName,
    ) -> core::result::Result<Checked, LoadFailed> {
        self.load_verified_up_to(file, name, self.opts.max_payload)
    }

    /// [`Queue::load_verified`] with payload limit `max_payload` (`u64::MAX`: none).
    fn load_verified_up_to(
        &self,
        file: OwnedFd,
        name: &JobName,
        max_payload: u64,
    ) -> core::result::Result<Checked, LoadFailed> {
        let fd = file.as_fd();
        // One `pread(2)` of up to PROBE bytes first. It comes back short only at the end of
        // a regular file, so a job file shorter than that is then read whole, and needs no
        // `fstat(2)` (a claim of a small job: one syscall fewer). A full probe, or the error
        // of a file that is not a regular file (a fifo's `ESPIPE`, `EISDIR`, a device's
        // `EINVAL`), takes the `fstat` path below; any other error is the read's.
        let mut probe = [0u8; PROBE];
        // The bytes of the probe that the fstat path may use: all of a full probe.
        let prefix = match self.sys.read_at(fd, &mut probe, 0) {
            Ok(n) if n < PROBE => {
                if n as u64 <= max_payload.saturating_add(HEADER_LEN as u64) {
                    return check_whole(probe[..n].to_vec(), name.id.0, self.ident.id);
                }
                0
            }
            Ok(n) => {
                // Full: the header says how long the file should be. Up to one chunk, one
                // more `pread(2)` with a byte of room past that end reads the rest and shows
                // the end (short by exactly that byte), so the file is whole without `fstat`.
                let declared = crate::disk::format::declared_len(&probe);
                let limit = max_payload.saturating_add(HEADER_LEN as u64);
                // Not shorter than the probe: a file longer than its header says (bytes
                // appended, a forged size) takes the `fstat` path, which finds it corrupt
                // (it indexed past the end of `buf` here and panicked the claim).
                let fits = |t: &u64| *t >= n as u64 && *t <= CHUNK as u64 && *t <= limit;
                if let Some(total) = declared.filter(fits) {
                    let total = total as usize;
                    let mut buf = vec![0u8; total + 1];
                    buf[..n].copy_from_slice(&probe);
                    let got = self
                        .sys
                        .read_at(fd, &mut buf[n..], n as u64)
                        .map_err(|e| Err((Call::Read, e)))?;
                    if n + got == total {
                        buf.truncate(total);
                        return check_whole(buf, name.id.0, self.ident.id);
                    }
                }
                n
            }
            Err(
                Errno::SPIPE
                | Errno::ISDIR
                | Errno::INVAL
                | Errno::NXIO
                | Errno::NODEV
                | Errno::AGAIN,
            ) => 0,
            Err(e) => return Err(Err((Call::Read, e))),
        };
        let size = self.regular_size(fd)?;
        if size > max_payload.saturating_add(HEADER_LEN as u64) {
            return Err(self.too_large(fd, size));
        }
        check_file(
            &self.sys,
            fd,
            size,
            &probe[..prefix],
            name.id.0,
            self.ident.id,
        )
    }

    /// The size of job file `fd` (`fstat`): corrupt if it is not a regular file or is
    /// sparse (fewer bytes allocated than its size says).
    fn regular_size(&self, fd: BorrowedFd<'_>) -> core::result::Result<u64, LoadFailed> {
        match self.sys.fstat_allocated(fd) {
            Ok((FileType::RegularFile, size, allocated))
                if crate::disk::sys::sparse(size, allocated) =>
            {
                Err(Ok(Corruption::Sparse {
                    declared: size,
                    allocated,
                }))
            }
            Ok((FileType::RegularFile, size, _)) => Ok(size),
            Ok(_) => Err(Ok(Corruption::NotRegular)),
            Err(e) => Err(Err((Call::Stat, e))),
        }
    }

    /// Why job file `fd` of `size` bytes, over the payload limit, is not loaded: too large
    /// for this worker (`EFBIG`) if its header agrees with its size, corrupt otherwise.
    fn too_large(&self, fd: BorrowedFd<'_>, size: u64) -> LoadFailed {
        let mut h = [0u8; HEADER_LEN];
        if let Err(e) = self.sys.read_exact_at0(fd, &mut h) {
            return Err((Call::Read, e));
        }
        let consistent = h[..8] == crate::disk::format::MAGIC
            && u64::from_le_bytes(h[56..64].try_into().unwrap_or_default())
                .checked_add(HEADER_LEN as u64)
                == Some(size);
        if consistent {
            Err((Call::Read, Errno::FBIG))
        } else {
            Ok(Corruption::Length)
        }
    }

    /// Move leased job `name` in `shard` to `dead/` with `reason`.
    pub(super) fn dead_letter(
        &self,
        shard: u16,
        name: JobName,
        reason: Reason,
        op: Op,
    ) -> Result<()> {
        let from = self.place_ready(shard, State::Leased);
        let dead = self.place_dead()?;
        self.move_job(
            &from,
            &name,
            &dead,
            &name.next(Kind::Dead { reason }, false),
            op,
        )?;
        self.claim_dead
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Take over a lease by its handle (the leased file name, as [`Lease::handle`] gives),
    /// for tools that claim in one process and settle in another.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] (naming the queue's directory) if `handle` is not a
    /// leased name of this queue ("a lease handle of another queue (or an altered one)"
    /// when its tag does not match this queue's);
    /// [`ErrorKind::LeaseLost`] if that exact lease no longer exists; [`ErrorKind::Corrupt`]
    /// if its file fails verification (it is then dead-lettered). Not done in every case.
    ///
    /// The file is read and verified in 64 KiB chunks, whatever its size:
    /// [`Options::max_payload`](crate::Options::max_payload) limits what is claimed, not
    /// the settling of a lease already held.
    pub fn lease_from_handle(&self, handle: &str) -> Result<Lease, Error> {
        // Named in the message: the queue the handle was given to (a handle of another queue
        // is the common mistake: two queues, one script).
        let refuse =
            |why| Cause::not_done(ErrorKind::InvalidArgument(why), Some(self.root.clone()));
        let name = match JobName::parse(handle, self.ident.id) {
            Ok(n) if matches!(n.kind, Kind::Leased(_)) && self.ident.has_priority(n.priority) => n,
            Err(NameError::Tag) => {
                return Err(refuse("a lease handle of another queue (or an altered one)").into())
            }
            _ => return Err(refuse("not a lease handle of this queue").into()),
        };
        let shard = self.ident.slot_of(&name);
        let rel = format!("{}/{handle}", self.ident.slot_rel(shard));
        // The lease's slot as it is now: one not made (a level's directory removed since
        // the claim) cannot hold the lease; one behind a file or a symlink is named. Both
        // were "open failed: Permission denied", from the stand-in that held the slot.
        let fd = match self.slot_dir(shard) {
            crate::ops::levels::SlotDir::Held(fd) => fd,
            crate::ops::levels::SlotDir::Missing => {
                return Err(Cause::not_done(ErrorKind::LeaseLost, Some(self.path(&rel))).into())
            }
            crate::ops::levels::SlotDir::Blocked(_) if self.foreign_slot(shard).is_some() => {
                let e = self.foreign_slot_error(shard);
                return Err(e.expect("a foreign slot").into());
            }
            crate::ops::levels::SlotDir::Blocked(b) => {
                let e = match self.sys.stat_nofollow(self.dirs.root.as_fd(), &b) {
                    Ok(m) if m.file_type == rustix::fs::FileType::Symlink => Errno::LOOP,
                    _ => Errno::NOTDIR,
                };
                let path = Some(self.path(&b));
                return Err(Cause::io(Call::Open, e, Outcome::NotDone, path).into());
            }
        };
        let dir = self.held_dir(fd, &self.ident.slot_rel(shard));
        let file = match self.sys.open_file_ro(dir.fd(), handle) {
            Ok(f) => f,
            Err(Errno::NOENT) => {
                return Err(Cause::not_done(ErrorKind::LeaseLost, Some(self.path(&rel))).into())
            }
            Err(e) => {
                let e = self.dir_errno(dir.fd(), e);
                return Err(
                    Cause::io(Call::Open, e, Outcome::NotDone, Some(self.path(&rel))).into(),
                );
            }
        };
        // Verified (in 64 KiB chunks) for the header the lease keeps (the payload's length
        // and digest for `reader`, the raw header for the ack's receipt policy), but with no
        // payload limit: `Options::max_payload` decides what a worker claims, and this job
        // was claimed already. Its handle must settle it whatever its size.
        match self.load_verified_up_to(file, &name, u64::MAX) {
            Ok(c) => Ok(Lease::new(self.clone(), shard, name, Some(&c))),
            Err(Ok(c)) => {
                self.dead_letter(shard, name, Reason::CORRUPT, Op::ClaimCorrupt)?;
                let dead = self.path(crate::disk::layout::DEAD_DIR);
                Err(
                    Cause::not_done(ErrorKind::Corrupt(c), Some(self.path(&rel)))
                        .moving_into(dead)
                        .into(),
                )
            }
            Err(Err((c, e))) => {
                Err(Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel))).into())
            }
        }
    }
}
