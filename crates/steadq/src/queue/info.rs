//! What a handle tells of itself and of its queue: root, identity, options, whether its
//! directory is still the queue's. Declared from lib.rs after the operations and the
//! administration (`#[path]`), so that rustdoc lists these methods after them: rustdoc lists
//! `Queue`'s methods in the order their modules are declared.

use super::queue::*;
use crate::disk::clock::Clock;
use crate::disk::identity::Identity;
use crate::disk::layout::{receipts_shard, DEAD_DIR, DELAYED_DIR, TMP_DIR};
use crate::disk::sys::Errno;
#[cfg(feature = "faults")]
use crate::disk::sys::Sys;
use crate::error::{Cause, ErrorKind};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// What a mount option found by [`Queue::barriers_voided_by`] means, as the open's warning and
/// `steadq status` say it after "the filesystem is <option>: ".
pub const BARRIERS_VOIDED: &str =
    "its fsyncs are no durability barriers, and a power cut can lose jobs reported done";

impl Queue {
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
    pub(crate) fn root_replaced(&self) -> Option<Cause> {
        let held = self.sys.file_id(self.dirs.root.as_fd()).ok()?;
        match self.sys.path_id(&self.root) {
            Ok(now) if now == held => None,
            Ok(_) | Err(Errno::NOENT | Errno::NOTDIR) => Some(Cause::not_done(
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
    #[doc(hidden)]
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The syscall layer (its fault plan, its publishing route; feature `faults`).
    #[cfg(feature = "faults")]
    #[doc(hidden)]
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

    /// The mount option under which this handle's durability barriers make nothing durable,
    /// as `"<fstype> mounted <option>"` (`f2fs mounted checkpoint=disable:0`, `ext4 mounted
    /// nobarrier`), read now from `/proc/thread-self/mountinfo`; `None` when the handle makes
    /// no barriers ([`Queue::barriers`]), when no such option is set, or when it cannot be
    /// told: no readable `/proc` (or one of another PID namespace), a kernel before 5.8 with
    /// a btrfs queue (no mount ID from `statx`, and btrfs's device numbers are not
    /// mountinfo's). Not seen either: a lower layer's options (a queue on overlayfs, or on a
    /// loop file whose own filesystem is mounted `nobarrier`). Under such an option a job reported done can still be lost at a power cut
    /// (`nobarrier`: when the device has a volatile write cache) or at any crash
    /// (`checkpoint=disable`). A read-write open logs it as a warning; `steadq status`
    /// shows it.
    pub fn barriers_voided_by(&self) -> Option<String> {
        if !self.barriers {
            return None;
        }
        let (id, dev) = self.sys.mount_of(self.dirs.root.as_fd()).ok()?;
        let mounts = crate::disk::sys::Sys::mountinfo()?;
        crate::queue::barrier_voiding_mount(&mounts, id, dev)
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
}
