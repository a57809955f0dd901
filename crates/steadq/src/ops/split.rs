//! A move between directories that a crash split in two: both names survived, as two links
//! of one file.
//!
//! SteadQ never gives a job file a second name: every transition is a `renameat2`, which the
//! running kernel makes atomic. A crash can still leave both names of a move between two
//! directories: the block rig (crashlab, btrfs on the Debian 6.1 kernel, three threads of one
//! handle) found, in 1 of 1,825 crash states, a lease in `ready/01` and its receipt in
//! `receipts/01`, one file with link count 2, after an ack that had not returned (log replay
//! kept the receipt's new entry and the lease's old one; DESIGN.md, "Moves split by a
//! crash"). Left alone, the lease would be recovered and its job run again beside a receipt
//! that says it was acked, and the two names would stay.
//!
//! So recovery (a lease's expiry, a delayed job's promotion: the moves made on behalf of a
//! caller that is gone) looks at the link count of the name it is about to move. Above 1, it
//! looks for the job's other names, same device and inode, in every place a job name belongs
//! (one walk of the queue, `Queue::names_of`: a name in a directory its kind does not belong
//! in is foreign, never the state a move reached; buckets are opened one at a time). The
//! newest generation is the state the split move reached: it is kept, and every older name
//! is unlinked. The split move had not returned to its caller (its outcome was
//! indeterminate); it is taken as done. A second link found nowhere there (a hard link
//! someone made) changes nothing: the move goes on (no warning: the appliance size limit).

use crate::disk::barrier::Barrier;
use crate::disk::name::JobName;
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::ops::enqueue::DirRef;
use crate::ops::transition::Place;
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd};

impl Queue {
    /// Settle a split move before recovery moves `n` out of `from`. `Ok(true)`: `n` was the
    /// older half of a split and is gone (nothing more to move); `Ok(false)`: move it as
    /// usual (any older halves found elsewhere were removed).
    ///
    /// # Errors
    /// [`crate::ErrorKind::Io`], not done, when the walk, an open or an unlink fails, or a
    /// directory could not be read (it may hold the newer name); the split stays for the next
    /// recovery. Indeterminate when only a barrier after an unlink failed.
    pub(crate) fn settle_split(&self, from: &Place<'_>, n: &JobName) -> Result<bool> {
        let name = n.format(self.ident.id);
        let Ok(m) = self.sys.stat_nofollow(from.dir.fd(), &name) else {
            return Ok(false); // gone meanwhile: the move says so
        };
        if m.links < 2 {
            return Ok(false);
        }
        let nd = |c, e, rel: &str| Cause::io(c, e, Outcome::NotDone, Some(self.path(rel)));
        let (names, unreadable) = self.names_of(n.id)?;
        if let Some(rel) = unreadable.first() {
            return Err(nd(Call::ReadDir, Errno::ACCESS, rel));
        }
        // The other names of this file: (directory, its path, entry, generation).
        let mut others = Vec::new();
        for l in names {
            let raw = l.name.format(self.ident.id);
            if l.dir == from.rel.as_str() && raw == name {
                continue;
            }
            let root = self.dirs.root.as_fd();
            let dir = self
                .sys
                .open_dir_beneath(root, &l.dir)
                .map_err(|e| nd(Call::Open, e, &l.dir))?;
            if self
                .sys
                .stat_nofollow(dir.as_fd(), &raw)
                .is_ok_and(|o| o.file == m.file)
            {
                others.push((dir, l.dir, raw.to_string(), l.name.generation));
            }
        }
        let Some((dir, rel, newest, generation)) = others.iter().max_by_key(|o| o.3) else {
            return Ok(false); // a link someone made elsewhere: recovered as usual
        };
        if *generation > n.generation {
            // The newer name was there when the filesystem was mounted: make sure it stays
            // before the older one goes.
            self.dir_barrier(Barrier::SplitDir, &DirRef::Held(dir.as_fd()))
                .map_err(|e| nd(Call::FsyncDir, e, rel))?;
            self.unlink_split(from.dir.fd(), &from.rel, &name, rel, newest)?;
            return Ok(true);
        }
        for (dir, rel, other, _) in &others {
            self.unlink_split(dir.as_fd(), rel, other, &from.rel, &name)?;
        }
        Ok(false)
    }

    /// Unlink `name` in `dir` (at `rel`), the older half of a split whose newer half is
    /// `kept` at `kept_rel`, and say so.
    fn unlink_split(
        &self,
        dir: BorrowedFd<'_>,
        rel: &str,
        name: &str,
        kept_rel: &str,
        kept: &str,
    ) -> Result<()> {
        let path = format!("{rel}/{name}");
        // Not done if the unlink fails; indeterminate if only its barrier does.
        let r = match self.sys.unlink(dir, name) {
            Ok(()) | Err(Errno::NOENT) => self
                .dir_barrier(Barrier::SplitDir, &DirRef::Held(dir))
                .map_err(|e| (Call::FsyncDir, e, Outcome::Indeterminate)),
            Err(e) => Err((Call::Unlink, e, Outcome::NotDone)),
        };
        r.map_err(|(c, e, o)| Cause::io(c, e, o, Some(self.path(&path))))?;
        log::warn!("{path}: split move; kept {kept_rel}/{kept}");
        Ok(())
    }
}
