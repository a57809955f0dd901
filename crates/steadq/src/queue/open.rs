//! Opening a queue: the checks before a handle exists, and the handle's assembly.

use super::*;
use crate::disk::clock::Clock;
use crate::disk::identity::Identity;
use crate::disk::sys::{Call, Sys};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::OnceLock;

impl Queue {
    /// Open the queue at `root` with default [`Options`] (read-write). The filesystem is
    /// checked first, from one `fstatfs(2)` of the root (NFS is refused then, before any
    /// `flock` that its lock daemon could hold up), then `renameat2(RENAME_NOREPLACE)` is
    /// tried on a probe file in `tmp/` (made, renamed and removed: 14 KiB of journal writes
    /// on ext4 with 1 KiB blocks, 56 KiB with 4 KiB blocks). A handle that only reads is
    /// opened with [`OpenMode::ReadOnly`], which writes nothing.
    ///
    /// # Errors
    /// Not done in every case (opening changes nothing but a probe file in `tmp/`):
    /// [`ErrorKind::NotAQueue`], [`ErrorKind::BadIdentity`], [`ErrorKind::UnsupportedVersion`],
    /// [`ErrorKind::Incomplete`], [`ErrorKind::UnsupportedFilesystem`], or [`ErrorKind::Io`]
    /// naming the path (`/proc/sys/kernel/random/boot_id` when this boot's id cannot be read
    /// for want of descriptors or memory).
    pub fn open(root: impl AsRef<Path>) -> crate::Result<Queue> {
        Queue::open_with(root, Options::default())
    }

    /// Open with explicit options; [`Options::mode`] says read-write (the default),
    /// [`OpenMode::ReadOnly`] or [`OpenMode::Check`].
    ///
    /// # Errors
    /// As [`Queue::open`], plus [`ErrorKind::InvalidArgument`] for an option out of range
    /// ([`Options::validate`]).
    pub fn open_with(root: impl AsRef<Path>, opts: Options) -> crate::Result<Queue> {
        let (check, probe) = match opts.mode {
            OpenMode::ReadWrite => (false, true),
            OpenMode::ReadOnly => (false, false),
            OpenMode::Check => (true, false),
        };
        Queue::open_checked(root.as_ref(), opts, check, probe)
    }

    pub(super) fn open_checked(
        root: &Path,
        opts: Options,
        check: bool,
        probe: bool,
    ) -> crate::Result<Queue> {
        Ok(Queue::open_internal(root, opts, check, probe)?)
    }

    pub(super) fn open_internal(
        root: &Path,
        opts: Options,
        check: bool,
        probe: bool,
    ) -> Result<Queue> {
        opts.check()?;
        let root = root.to_path_buf();
        let sys = make_sys(&opts);
        let rootfd = sys
            .open_queue_root(&root)
            .map_err(|e| Cause::io(Call::Open, e, Outcome::NotDone, Some(root.clone())))?;
        check_filesystem(&sys, rootfd.as_fd(), &root)?;
        let ident = read_identity(&sys, rootfd.as_fd(), &root)?;
        Queue::assemble(root, sys, rootfd, ident, opts, check, probe)
    }

    /// Make the rename probe of [`Queue::open`] now, for a handle opened without it
    /// ([`OpenMode::Check`]) that is about to move entries; nothing where the handle
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

    pub(super) fn assemble(
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
                return Err(Cause::not_done(kind, Some(root.join(rel))));
            }
        }
        let clock = Clock::try_new(&sys).map_err(|(file, e)| {
            Cause::io(Call::Open, e, Outcome::NotDone, Some(PathBuf::from(file)))
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
        let (barriers, tmp_unsynced) = barrier_policy(&sys, &dirs, &opts);
        let q = Queue {
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
                full_groups: Default::default(),
                evidence_lock: Mutex::new(()),
                cap: Default::default(),
            }),
        };
        if probe {
            if let Some(void) = q.barriers_voided_by() {
                log::warn!(
                    "{}: the filesystem is {void}: {}",
                    q.root.display(),
                    crate::BARRIERS_VOIDED
                );
            }
        }
        Ok(q)
    }
}

/// Whether the handle makes barriers, and whether `tmp/` goes unsynced (btrfs: then job
/// files and key entries are published through a named file in tmp/, never from an unnamed
/// `O_TMPFILE`, see `logs_fsync_per_inode`). A fault plan keeps every barrier call, so that
/// tests which fail or count them see the same calls on every filesystem.
fn barrier_policy(sys: &Sys, dirs: &Dirs, opts: &Options) -> (bool, bool) {
    let barriers = opts.durability != Durability::None
        && (sys.plan().is_some()
            || !(volatile_fs(sys, dirs.root.as_fd()) && volatile_fs(sys, dirs.tmp.as_fd())));
    let tmp_unsynced = barriers && logs_fsync_per_inode(sys, dirs.tmp.as_fd());
    if tmp_unsynced {
        sys.force_named_publish();
    }
    (barriers, tmp_unsynced)
}

#[cfg(feature = "faults")]
pub(super) fn make_sys(opts: &Options) -> Sys {
    match &opts.faults {
        Some(p) => Sys::with_faults(p.clone()),
        None => Sys::new(),
    }
}

#[cfg(not(feature = "faults"))]
pub(super) fn make_sys(_: &Options) -> Sys {
    Sys::new()
}
