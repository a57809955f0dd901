//! The filesystem under a queue: what is refused (NFS, short names, too few inodes, no
//! `renameat2(RENAME_NOREPLACE)`), what needs other barriers (btrfs, tmpfs), and a layout
//! split across mounts.

use super::*;
use crate::disk::identity::Identity;
use crate::disk::layout::{receipts_shard, CREATED_DIRS, DEAD_DIR, DELAYED_DIR, TMP_DIR};
use crate::disk::name::{TempKind, TempName};
use crate::disk::sys::{fs_name, Call, Errno, Sys};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

/// The first directory of the layout `dirs` holds that is on another filesystem than the
/// queue root (a mount under it, where every rename to or from it fails with `EXDEV`): its
/// path relative to the root, the topmost on the way that is on the other filesystem
/// (`receipts`, not `receipts/00`), its `st_dev` and the root's. Found from the `fstat` of
/// the directories already open (a stand-in is the identity file, on the root's); a
/// directory whose `fstat` fails is not counted. `None`: all on the root's filesystem.
pub(crate) fn other_filesystem(
    sys: &Sys,
    dirs: &Dirs,
    ident: &Identity,
) -> Option<(String, u64, u64)> {
    let root_dev = sys.file_id(dirs.root.as_fd()).ok()?.0;
    let named = [TMP_DIR, DELAYED_DIR, DEAD_DIR]
        .into_iter()
        .map(String::from)
        .zip([&dirs.tmp, &dirs.delayed, &dirs.dead]);
    let receipts = (0..ident.shards)
        .map(|s| receipts_shard(s).as_str().to_string())
        .zip(&dirs.receipts);
    let ready = (0..ident.slots()).filter_map(|s| {
        let fd = dirs.ready[s as usize].get()?;
        Some((ident.slot_rel(s).as_str().to_string(), fd))
    });
    for (rel, fd) in named.chain(receipts).chain(ready) {
        let Ok((dev, _)) = sys.file_id(fd.as_fd()) else {
            continue;
        };
        if dev == root_dev {
            continue;
        }
        let ends = rel.match_indices('/').map(|(i, _)| i).chain([rel.len()]);
        for end in ends {
            match sys.stat_nofollow(dirs.root.as_fd(), &rel[..end]) {
                Ok(m) if m.file.0 != root_dev => {
                    return Some((rel[..end].to_string(), m.file.0, root_dev))
                }
                _ => {}
            }
        }
        return Some((rel, dev, root_dev));
    }
    None
}

/// The directory `mkfs.ext4` (and `mkfs.ext2/3`) leaves at a filesystem's root for
/// `e2fsck`: the filesystem's own, not a foreign entry, where the queue root is that root.
pub(crate) const LOST_FOUND: &str = "lost+found";

/// Whether the queue root (`root`, opened from `path`) is the root of its filesystem: its
/// `..` is on another device (a mount point) or is itself (`/`). False when either `stat`
/// fails.
pub(crate) fn is_fs_root(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> bool {
    match (sys.file_id(root), sys.path_id(&path.join(".."))) {
        (Ok(me), Ok(up)) => me.0 != up.0 || me == up,
        _ => false,
    }
}

/// Whether the filesystem of `fd` keeps nothing across a power cut and makes `fsync` a
/// no-op: tmpfs (`TMPFS_MAGIC` 0x01021994) or ramfs (`RAMFS_MAGIC` 0x858458f6), from
/// `statfs(2)` and include/uapi/linux/magic.h. False when `statfs` fails.
pub(crate) fn volatile_fs(sys: &Sys, fd: BorrowedFd<'_>) -> bool {
    matches!(
        sys.fs_magic(fd).map(|m| m as u32),
        Ok(0x0102_1994 | 0x8584_58f6)
    )
}

/// Whether the filesystem of `fd` is btrfs (`BTRFS_SUPER_MAGIC` 0x9123683E, `statfs(2)`,
/// include/uapi/linux/magic.h), whose fsync writes the inode (and what it names) to a log
/// tree replayed at mount. There a job file is published from a *named* temporary file in
/// `tmp/`, never from an unnamed `O_TMPFILE`: the block rig (crashlab, Debian 6.1 kernel)
/// found a job file shorter than its header in `ready/` after a crash when another thread's
/// directory fsync came between an `O_TMPFILE`'s `linkat` and its second fsync (2 of 540
/// crash states; DESIGN.md, What the crash lab found). False when `statfs` fails.
pub(crate) fn logs_fsync_per_inode(sys: &Sys, fd: BorrowedFd<'_>) -> bool {
    matches!(sys.fs_magic(fd).map(|m| m as u32), Ok(0x9123_683E))
}

/// The mount option that voids every durability barrier on the filesystem holding a queue,
/// as `"<fstype> mounted <option>"`, found in `mountinfo` (the text of
/// `/proc/self/mountinfo`, `proc(5)`) on the line of mount ID `mount_id` (the root's, from
/// `statx`), or, where the kernel gives none (before Linux 5.8), on the line of device
/// `dev` (the root's `(major, minor)`: not a btrfs subvolume's, which has a device of its
/// own). `None`: no such option, or no such line.
///
/// The options, from the kernel's documentation (Documentation/filesystems/ext4.rst,
/// f2fs.rst, btrfs(5)):
/// - `nobarrier` or `barrier=0` (ext4, btrfs, f2fs): a commit is not preceded by a cache
///   flush nor written with FUA, so a device with a volatile write cache can lose it at a
///   power cut;
/// - `fsync_mode=nobarrier` (f2fs): the same for the `fsync` of a regular file;
/// - `checkpoint=disable` (f2fs, shown as `checkpoint=disable:<cap>`, fs/f2fs/super.c
///   `f2fs_show_options`): `fsync` makes no checkpoint, and nothing written since the last
///   one survives a crash.
pub(crate) fn barrier_voiding_mount(
    mountinfo: &str,
    mount_id: Option<u64>,
    dev: (u32, u32),
) -> Option<String> {
    // A line is `<id> <parent> <major:minor> <root> <point> <options> [optional fields] -
    // <fstype> <source> <superblock options>`; the last line of a device wins (the newest
    // mount; every mount of a superblock shows its options).
    let mut found = None;
    for line in mountinfo.lines() {
        let Some((mount, sb)) = line.split_once(" - ") else {
            continue;
        };
        let mut f = mount.split(' ');
        let hit = match mount_id {
            Some(id) => f.next().and_then(|i| i.parse().ok()) == Some(id),
            None => f
                .nth(2)
                .and_then(|d| d.split_once(':'))
                .is_some_and(|(major, minor)| {
                    major.parse() == Ok(dev.0) && minor.parse() == Ok(dev.1)
                }),
        };
        if hit {
            found = Some(sb);
        }
    }
    let mut sb = found?.split(' ');
    let (fs, opts) = (sb.next()?, sb.nth(1)?);
    let void = opts.split(',').find(|o| {
        matches!(*o, "nobarrier" | "barrier=0" | "fsync_mode=nobarrier")
            || o.starts_with("checkpoint=disable")
    })?;
    Some(format!("{fs} mounted {void}"))
}

/// `EPERM` or `ENOSYS` from `renameat2` of a file SteadQ just made: the call is blocked (a
/// seccomp profile, a sandbox), which is not the filesystem's doing.
pub(super) fn rename_refused(errno: Errno, path: &Path) -> Cause {
    Cause::not_done(
        ErrorKind::RenameRefused {
            errno: errno.into(),
        },
        Some(path.to_path_buf()),
    )
}

/// The longest name SteadQ writes: a leased job name with a priority field and a group field
/// of 16 characters (`.q<group>`, 18 bytes), 217 bytes. Temp and probe names
/// (`<boot32>.<pid8>.<rand32>.probe`, 80 bytes) and the identity's temp and damaged names
/// (at most 54 bytes) are shorter.
pub(super) const LONGEST_NAME: u64 = crate::disk::scan::LEASED_PRIO_NAME_LEN as u64 + 18;

/// Check the filesystem's longest name (`statfs(2)` `f_namelen`; 0 or less: not reported)
/// against [`LONGEST_NAME`].
pub(super) fn check_name_limit(f_namelen: i64) -> core::result::Result<(), ErrorKind> {
    match u64::try_from(f_namelen) {
        Ok(allowed) if allowed > 0 && allowed < LONGEST_NAME => Err(ErrorKind::NamesTooLong {
            allowed,
            needed: LONGEST_NAME,
        }),
        _ => Ok(()),
    }
}

/// The name of a filesystem refused from its `statfs(2)` magic (`f_type`) alone, `None` for
/// any other. NFS (`NFS_SUPER_MAGIC` 0x6969, every version): its `rename` takes no flags, so
/// `renameat2(RENAME_NOREPLACE)` fails with `EINVAL` (`rename(2)`), and its `flock` goes to
/// the lock daemon and waits as long as that does not answer. Other filesystems are judged by
/// the rename probe ([`probe_rename`]).
pub(crate) fn refused_filesystem(magic: i64) -> Option<&'static str> {
    match magic as u32 {
        0x6969 => Some(fs_name(magic)),
        _ => None,
    }
}

/// Check the filesystem holding `root` (at `path`) with one `fstatfs(2)`, the first call
/// after the root's open and before anything that could block there (a `flock`, the probe):
/// [`refused_filesystem`], then [`check_name_limit`]. A failing `fstatfs` is not a refusal:
/// the probe or the first long rename will say what is wrong.
///
/// # Errors
/// Not done: [`ErrorKind::UnsupportedFilesystem`] naming the filesystem, or
/// [`ErrorKind::NamesTooLong`], with `path`.
pub(super) fn check_filesystem(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let Ok((magic, name_max)) = sys.fs_type_and_name_max(root) else {
        return Ok(());
    };
    let refuse = |kind| Err(Cause::not_done(kind, Some(path.to_path_buf())));
    if let Some(fs_type) = refused_filesystem(magic) {
        return refuse(ErrorKind::UnsupportedFilesystem { fs_type });
    }
    match check_name_limit(name_max) {
        Err(kind) => refuse(kind),
        Ok(()) => Ok(()),
    }
}

/// Refuse a new queue of `shards` shards where the filesystem of `root` has fewer free inodes
/// than its layout takes: its directories (5 and two per shard), the identity and
/// `evidence.log`, and `root` itself when this call made it (`made`: it is counted on both
/// sides, as the user saw the inodes before `init`). The rename probe's temp file needs
/// none: the probe is skipped when the filesystem is full. Without this `init` on a
/// filesystem out of inodes published the identity, then failed part-way through the
/// directories (indeterminate, an incomplete queue). A filesystem that does not count
/// inodes, or a failing `fstatfs`, is not refused: a `mkdir` that finds none says so.
pub(super) fn check_inodes(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    shards: u16,
    made: bool,
) -> Result<()> {
    let needed = CREATED_DIRS.len() as u64 + 2 * u64::from(shards) + 2 + u64::from(made);
    match sys.fs_inodes(root) {
        Ok((total, free)) if total > 0 && free + u64::from(made) < needed => Err(Cause::not_done(
            ErrorKind::TooFewInodes {
                needed,
                free: free + u64::from(made),
            },
            Some(path.to_path_buf()),
        )),
        _ => Ok(()),
    }
}

/// Check once per open that `renameat2(RENAME_NOREPLACE)` works here: a probe file in `tmp/`
/// is renamed and removed. NFS and old FUSE answer `EINVAL` (see `rename(2)`).
pub(super) fn probe_rename(
    sys: &Sys,
    tmp: BorrowedFd<'_>,
    root: &Path,
    boot_id: u128,
) -> Result<()> {
    let probe = || TempName::new(boot_id, TempKind::Probe, random_u128()).format();
    let (a, b) = (probe(), probe());
    let nd = |call, e| {
        Cause::io(
            call,
            e,
            Outcome::NotDone,
            Some(root.join(TMP_DIR).join(a.as_str())),
        )
    };
    match sys.create_file(tmp, &a) {
        Ok(fd) => drop(fd),
        // A reader without write access (a monitoring user), or a read-only mount: it cannot
        // change the queue anyway, so it may still look. Writers fail later, naming the path.
        // A full disk (no blocks or no inodes) must not lock out the commands that look and
        // repair (status, list, fsck, recover, dead purge, compact); a writer on a full disk
        // fails at its own write, with "disk full".
        // ENOTDIR: `tmp/` is not a directory, held by the stand-in (`open_dirs` warned).
        Err(
            e @ (Errno::ACCESS
            | Errno::PERM
            | Errno::ROFS
            | Errno::NOSPC
            | Errno::DQUOT
            | Errno::NOTDIR),
        ) => {
            log::debug!(
                "{}: rename probe skipped ({e})",
                root.join(TMP_DIR).display()
            );
            return Ok(());
        }
        Err(e) => return Err(nd(Call::Open, e)),
    }
    let r = sys.rename(tmp, &a, tmp, &b);
    let leftover = if r.is_ok() { &b } else { &a };
    let _ = sys.unlink(tmp, leftover);
    match r {
        Ok(()) => Ok(()),
        Err(Errno::INVAL) => {
            let fs_type = sys.fs_magic(tmp).map(fs_name).unwrap_or("unknown");
            Err(Cause::not_done(
                ErrorKind::UnsupportedFilesystem { fs_type },
                Some(root.to_path_buf()),
            ))
        }
        Err(e @ (Errno::PERM | Errno::NOSYS)) => Err(rename_refused(e, root)),
        Err(e) => Err(nd(Call::Rename, e)),
    }
}

/// Whether a queue in directory `dir` publishes job files and key entries through a named
/// file in `tmp/` rather than an `O_TMPFILE` (btrfs with barriers on: `Queue::assemble`,
/// `logs_fsync_per_inode`; DESIGN.md, Barriers), false elsewhere or when `dir` cannot be
/// opened. For tests (feature `faults`, as the module's export).
#[cfg(feature = "faults")]
pub fn publishes_named(dir: &std::path::Path) -> bool {
    let sys = crate::disk::sys::Sys::new();
    sys.open_dir_path(dir)
        .is_ok_and(|fd| logs_fsync_per_inode(&sys, fd.as_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as this host's kernel (6.18) writes them, and an f2fs line as f2fs_show_options
    /// (fs/f2fs/super.c) writes one with `checkpoint=disable`.
    const MOUNTS: &str = "\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw,errors=remount-ro
46 22 7:0 / /mnt/nb rw,relatime - ext4 /dev/loop0 rw,nobarrier
47 22 0:41 / /mnt/b\\040tr rw,relatime - btrfs /dev/loop1 rw,nobarrier,space_cache=v2,subvolid=5,subvol=/
48 22 259:2 / /data rw,relatime - f2fs /dev/mmcblk0p2 rw,lazytime,flush_merge,extent_cache,mode=adaptive,active_logs=6,alloc_mode=default,checkpoint=disable:0,checkpoint_merge,fsync_mode=posix
49 22 259:3 / /fm rw - f2fs /dev/mmcblk0p3 rw,checkpoint_merge,fsync_mode=nobarrier
50 22 7:2 / /ok rw - xfs /dev/loop2 rw,attr2,inode64,noquota
";

    #[test]
    fn the_mount_options_that_void_barriers_are_found_by_mount_id() {
        let void = |id| barrier_voiding_mount(MOUNTS, Some(id), (0, 0));
        assert_eq!(void(46).as_deref(), Some("ext4 mounted nobarrier"));
        assert_eq!(
            void(48).as_deref(),
            Some("f2fs mounted checkpoint=disable:0")
        );
        assert_eq!(
            void(49).as_deref(),
            Some("f2fs mounted fsync_mode=nobarrier")
        );
        // btrfs: found by its mount ID, whatever device its subvolume's files show.
        assert_eq!(void(47).as_deref(), Some("btrfs mounted nobarrier"));
        // Options that only resemble them (`checkpoint_merge`, `fsync_mode=posix`), a plain
        // mount, the root, and a mount ID not listed are not voiding.
        assert_eq!(void(50), None);
        assert_eq!(void(22), None);
        assert_eq!(void(4), None);
    }

    #[test]
    fn without_a_mount_id_the_device_decides() {
        let void = |d| barrier_voiding_mount(MOUNTS, None, d);
        assert_eq!(void((7, 0)).as_deref(), Some("ext4 mounted nobarrier"));
        assert_eq!(
            void((259, 2)).as_deref(),
            Some("f2fs mounted checkpoint=disable:0")
        );
        assert_eq!(void((259, 1)), None);
        assert_eq!(void((7, 9)), None);
        assert_eq!(barrier_voiding_mount("garbage\n\n1 2", None, (7, 0)), None);
    }

    /// Where `statx` is refused (a seccomp filter older than it: `EPERM`; a kernel before
    /// 4.11: `ENOSYS`), the device still comes from `fstat`, so the check falls back to the
    /// device match instead of seeing nothing.
    #[test]
    fn a_refused_statx_falls_back_to_fstat_for_the_device() {
        use crate::disk::fault::{Fault, FaultAction, FaultPlan};
        use std::os::unix::fs::MetadataExt;
        let here = std::env::temp_dir();
        let fd = Sys::new().open_dir_path(&here).unwrap();
        let dev = std::fs::metadata(&here).unwrap().dev();
        let want = (rustix::fs::major(dev), rustix::fs::minor(dev));
        let (id, plain) = Sys::new().mount_of(fd.as_fd()).unwrap();
        assert!(id.is_some(), "this host's kernel gives STATX_MNT_ID");
        assert_eq!(plain, want);
        // A syscall layer whose first stat call (the `statx`) fails with `e`.
        let first_stat_fails = |e| {
            Sys::with_faults(FaultPlan::new(vec![Fault {
                call: Call::Stat,
                nth: 1,
                action: FaultAction::Fail(e),
            }]))
        };
        for refused in [Errno::NOSYS, Errno::PERM] {
            let sys = first_stat_fails(refused);
            assert_eq!(sys.mount_of(fd.as_fd()), Ok((None, want)), "{refused:?}");
        }
        // Any other failure is the caller's to see.
        let sys = first_stat_fails(Errno::IO);
        assert_eq!(sys.mount_of(fd.as_fd()), Err(Errno::IO));
    }

    #[test]
    fn only_nfs_is_refused_by_its_magic() {
        assert_eq!(refused_filesystem(0x6969), Some("nfs"));
        // ext4, xfs, btrfs, tmpfs, fuse, cifs, overlayfs, f2fs: judged by the rename probe.
        for ok in [
            0xEF53_i64,
            0x5846_5342,
            0x9123_683E,
            0x0102_1994,
            0x6573_5546,
            0xFF53_4D42,
            0x794C_7630,
            0xF2F5_2010,
        ] {
            assert_eq!(refused_filesystem(ok), None, "{ok:#x}");
        }
    }

    #[test]
    fn name_limit_is_checked() {
        assert_eq!(
            check_name_limit(143),
            Err(ErrorKind::NamesTooLong {
                allowed: 143,
                needed: 217
            })
        );
        assert!(check_name_limit(216).is_err());
        for ok in [217, 255, 1024, 0, -1] {
            assert_eq!(check_name_limit(ok), Ok(()), "{ok}");
        }
        // The real filesystem the tests run on allows 196-byte names.
        let here = std::env::temp_dir();
        let fd = Sys::new().open_dir_path(&here).unwrap();
        assert_eq!(check_filesystem(&Sys::new(), fd.as_fd(), &here), Ok(()));
    }
}
