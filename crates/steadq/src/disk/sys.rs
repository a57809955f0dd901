//! The syscall layer: every filesystem call SteadQ makes passes through [`Sys`].
//!
//! Each wrapper is a line or two over `rustix` and carries the man page it follows. A [`Sys`]
//! may hold a [`FaultPlan`], which tests and the crash lab use to fail the Nth call of a given
//! [`Call`] kind with a chosen errno, or to "stop" right after a call: every later call then
//! fails with `ESHUTDOWN`, the way a process that died at that instant would do nothing more.
//!
//! EINTR: reads, writes, opens and directory reads are retried on EINTR (they are idempotent).
//! Renames, links, unlinks and syncs are not: their EINTR is reported to the caller.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
pub use rustix::io::Errno;

pub use super::barrier::Barrier;
use super::fault::Decision;
pub use super::fault::FaultPlan;
#[cfg(feature = "faults")]
pub use super::fault::{Fault, FaultAction, TRACE_MAX};

/// The kinds of filesystem call, for fault injection and for error reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    /// `openat(2)`, `openat2(2)`, including `O_TMPFILE` and `O_CREAT`.
    Open,
    /// `mkdirat(2)`.
    Mkdir,
    /// `getdents64(2)`, one count per directory listing.
    ReadDir,
    /// `read(2)` / `pread(2)`, one count per call.
    Read,
    /// `write(2)`, one count per call.
    Write,
    /// `fsync(2)` of a file: a durability barrier for its data.
    Fsync,
    /// `fsync(2)` of a directory: a durability barrier for the names in it.
    FsyncDir,
    /// `syncfs(2)`: a durability barrier for a whole filesystem (batched enqueue).
    Syncfs,
    /// `sync_file_range(2)` of a whole job file (write out and wait): its data written, not
    /// committed; part of a barrier only where a journal commit follows in order (xfs,
    /// journaled ext4: `Sys::write_out`).
    WriteOut,
    /// `linkat(2)`: publishes an `O_TMPFILE` (a linearization point).
    Link,
    /// `renameat2(2)` with `RENAME_NOREPLACE` (a linearization point).
    Rename,
    /// `unlinkat(2)`, also with `AT_REMOVEDIR`.
    Unlink,
    /// `fstat(2)`, `fstatat(2)`, `fstatfs(2)`.
    Stat,
    /// `flock(2)` on a temp file (taken by its writer, tried by recovery). Over NFS it is
    /// served by the lock daemon and blocks while that daemon does not answer.
    Flock,
}

impl Call {
    /// Every kind, in declaration order.
    pub const ALL: [Call; 14] = [
        Call::Open,
        Call::Mkdir,
        Call::ReadDir,
        Call::Read,
        Call::Write,
        Call::Fsync,
        Call::FsyncDir,
        Call::Syncfs,
        Call::WriteOut,
        Call::Link,
        Call::Rename,
        Call::Unlink,
        Call::Stat,
        Call::Flock,
    ];

    /// The lowercase name used in messages, e.g. `"rename"`.
    pub fn name(self) -> &'static str {
        match self {
            Call::Open => "open",
            Call::Mkdir => "mkdir",
            Call::ReadDir => "readdir",
            Call::Read => "read",
            Call::Write => "write",
            Call::Fsync => "fsync",
            Call::FsyncDir => "fsync (directory)",
            Call::Syncfs => "syncfs",
            Call::WriteOut => "sync_file_range",
            Call::Link => "linkat",
            Call::Rename => "renameat2",
            Call::Unlink => "unlink",
            Call::Stat => "stat",
            Call::Flock => "flock",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// Mode of every file SteadQ creates, before the process umask (`umask(2)`) takes bits away.
const FILE_MODE: u32 = 0o666;
/// Mode of a file SteadQ creates outside the queue for a command (`claim --payload-out`),
/// before the umask: a payload is never readable by every user, whatever the umask (root's
/// usual 022 made it so in `/tmp`).
const OUTSIDE_FILE_MODE: u32 = 0o660;
/// Mode of every directory SteadQ creates, before the umask.
const DIR_MODE: u32 = 0o777;

/// How an `O_TMPFILE` gets its name; probed on first use, then remembered.
const PUBLISH_UNKNOWN: u8 = 0;
const PUBLISH_EMPTY_PATH: u8 = 1;
const PUBLISH_PROC: u8 = 2;
const PUBLISH_NAMED: u8 = 3;

/// How to publish a job file, as found by probing (see [`Sys::publish_mode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    /// `linkat(fd, "", dir, name, AT_EMPTY_PATH)` of an `O_TMPFILE`.
    EmptyPath,
    /// `linkat(AT_FDCWD, "/proc/self/fd/N", dir, name, AT_SYMLINK_FOLLOW)` of an `O_TMPFILE`.
    ProcFd,
    /// A named temp file under `tmp/`, published with `renameat2(RENAME_NOREPLACE)`.
    Named,
}

/// Parts one `writev(2)` of [`Sys::write_all_vectored`] takes (its iovec array is on the
/// stack); more are written by the next call of its loop.
pub const IOV_MAX_PARTS: usize = 8;

/// This boot's id, a UUID that changes at every boot (`random(4)`: "boot_id").
pub const BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";
/// The clock offsets of this process's time namespace (`time_namespaces(7)`, Linux 5.6+).
pub const TIMENS_FILE: &str = "/proc/self/timens_offsets";
/// The mounts the calling thread sees, their devices and options (`proc(5)`; a thread that
/// unshared its mount namespace sees other mounts than the process's `/proc/self`).
pub const MOUNTINFO_FILE: &str = "/proc/thread-self/mountinfo";

/// The syscall layer. Cheap to create; one per open queue.
#[derive(Debug, Default)]
pub struct Sys {
    plan: Option<Arc<FaultPlan>>,
    publish: AtomicU8,
    no_openat2: AtomicBool,
}

/// What [`Sys::stat_nofollow`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// File type (a symlink is reported as a symlink).
    pub file_type: FileType,
    /// Size, bytes.
    pub size: u64,
    /// Inode change time, unix ns (a rename sets it on Linux's local filesystems).
    pub ctime_ns: u64,
    /// Modification time, unix ns (for a directory: when an entry was last added or removed).
    pub mtime_ns: u64,
    /// Link count (`st_nlink`).
    pub links: u64,
    /// `(st_dev, st_ino)`: which file it is.
    pub file: (u64, u64),
    /// Bytes allocated to it (`st_blocks × 512`).
    pub allocated: u64,
}

impl Meta {
    /// The bytes it is counted for (status, byte limits): its size, or for a file
    /// [`sparse`] by far, what is allocated to it (a planted file declaring 100 GiB over a
    /// few blocks does not fill the queue's byte limit).
    pub fn counted_size(&self) -> u64 {
        match sparse(self.size, self.allocated) {
            true => self.allocated,
            false => self.size,
        }
    }
}

/// Sizes at or below this are never called sparse: allocation granularity and small
/// holes say nothing there.
pub const SPARSE_MIN: u64 = 1 << 20;

/// Whether a file of `size` bytes with `allocated` bytes on disk (`st_blocks × 512`) is
/// sparse by far: larger than [`SPARSE_MIN`] and less than an eighth of it allocated. SteadQ
/// writes every byte of a job file, so no job file it made is; a forged one (a header
/// declaring 100 GiB over a hole, `truncate -s`) is, and is reported corrupt unread. (A
/// filesystem that reports compressed usage in `st_blocks`, like ZFS with compression, can
/// make a highly compressible payload look sparse; SteadQ's tested filesystems, ext4, xfs,
/// btrfs and tmpfs, report the logical allocation.)
pub fn sparse(size: u64, allocated: u64) -> bool {
    size > SPARSE_MIN && allocated.saturating_mul(8) < size
}

/// A directory entry's type as `getdents64` reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryType {
    /// `DT_REG`.
    File,
    /// `DT_DIR`.
    Dir,
    /// `DT_UNKNOWN`: the caller must `fstatat` (without following symlinks) to learn more.
    Unknown,
    /// Anything else: symlink, fifo, socket, device.
    Other,
}

type R<T> = Result<T, Errno>;

/// Bytes of directory entries one `getdents64(2)` call may return (32 KiB: about 160 leased
/// names, 330 ready names).
pub const DIR_BUF: usize = 32 * 1024;

impl Sys {
    /// A syscall layer with no fault injection.
    pub fn new() -> Self {
        Sys::default()
    }

    /// A syscall layer that consults `plan` before every call.
    pub fn with_faults(plan: Arc<FaultPlan>) -> Self {
        Sys {
            plan: Some(plan),
            ..Default::default()
        }
    }

    /// The fault plan, if any.
    pub fn plan(&self) -> Option<&Arc<FaultPlan>> {
        self.plan.as_ref()
    }

    /// Run `f` as one call of kind `call`, consulting the fault plan.
    fn run<T>(&self, call: Call, f: impl FnOnce() -> R<T>) -> R<T> {
        match self.plan.as_ref().map(|p| (p, p.decide(call))) {
            None | Some((_, Decision::Proceed | Decision::Skip)) => f(),
            Some((_, Decision::Fail(e))) => Err(e),
            Some((p, Decision::ProceedThenStop)) => {
                let r = f();
                p.stopped.store(true, Ordering::SeqCst);
                r
            }
        }
    }

    /// Like [`Sys::run`], retrying on EINTR (for idempotent calls only).
    fn run_retry<T>(&self, call: Call, mut f: impl FnMut() -> R<T>) -> R<T> {
        loop {
            match self.run(call, &mut f) {
                Err(Errno::INTR) => continue,
                r => return r,
            }
        }
    }

    /// Open a directory by an absolute or cwd-relative path, following symlinks (used only for
    /// the queue root and its parent, which lie outside the queue). `open(2)`.
    pub fn open_dir_path(&self, path: &std::path::Path) -> R<OwnedFd> {
        self.run_retry(Call::Open, || {
            rustix::fs::open(
                path,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
    }

    /// Open a queue's root directory by path. Every component but the last is followed as
    /// `open(2)` follows it (the operator's path). The last, which anyone who may write
    /// its parent directory can replace (a shared queue's members: the recipe's parent is
    /// 2770), is followed only when it is a symlink of root, of this user or of the
    /// parent's owner: a member's symlink there would point this user's command at another
    /// queue (a private one: its jobs claimed, its payloads written where the member reads
    /// them). The symlink is held by an `O_PATH | O_NOFOLLOW` descriptor while its owner
    /// and target are read (`fstat(2)`, `readlinkat(2)`), so the target read is the one
    /// checked. `ELOOP` for a symlink of another user; otherwise the errors of `open(2)`.
    pub fn open_queue_root(&self, path: &std::path::Path) -> R<OwnedFd> {
        let (parent, name) = match (path.parent(), path.file_name()) {
            (Some(p), Some(n)) => (
                if p.as_os_str().is_empty() {
                    std::path::Path::new(".")
                } else {
                    p
                },
                n,
            ),
            _ => return self.open_dir_path(path),
        };
        let pfd = self.open_dir_path(parent)?;
        let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match self.run_retry(Call::Open, || {
            rustix::fs::openat(&pfd, name, dir | OFlags::NOFOLLOW, Mode::empty())
        }) {
            // `O_DIRECTORY | O_NOFOLLOW` on a symlink: `ENOTDIR` (Linux), or `ELOOP`.
            Err(Errno::LOOP | Errno::NOTDIR) => {}
            r => return r,
        }
        let link = self.run_retry(Call::Open, || {
            rustix::fs::openat(
                &pfd,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })?;
        let st = self.run_retry(Call::Stat, || rustix::fs::fstat(&link))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
            return Err(Errno::NOTDIR);
        }
        let owner = st.st_uid;
        let parent_owner = self
            .run_retry(Call::Stat, || rustix::fs::fstat(&pfd))?
            .st_uid;
        let me = rustix::process::geteuid().as_raw();
        if owner != 0 && owner != me && owner != parent_owner {
            return Err(Errno::LOOP);
        }
        let target =
            self.run_retry(Call::Open, || rustix::fs::readlinkat(&link, "", Vec::new()))?;
        self.run_retry(Call::Open, || {
            rustix::fs::openat(&pfd, target.as_c_str(), dir, Mode::empty())
        })
    }

    /// Open directory `name` beneath `dir` without following any symlink: `openat2(2)` with
    /// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it (5.6+), otherwise
    /// `openat(2)` one component at a time with `O_NOFOLLOW`.
    pub fn open_dir_beneath(&self, dir: BorrowedFd<'_>, name: &str) -> R<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        self.open_dir_beneath_with(dir, name, flags)
    }

    /// [`Sys::open_dir_beneath`] with `O_PATH`: a handle that names the directory without
    /// needing read permission on it (a shard made unreadable by `chmod 000`). It serves as
    /// the directory of `*at` calls, which check their own permissions; listing it fails
    /// with `EBADF`.
    pub fn open_dir_path_only(&self, dir: BorrowedFd<'_>, name: &str) -> R<OwnedFd> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        self.open_dir_beneath_with(dir, name, flags)
    }

    /// An `O_PATH` handle on regular file `name` of `dir` (never followed): as the directory
    /// of an `*at` call it fails with `ENOTDIR`, and listing it fails with `EBADF`. It stands
    /// for a job directory this user cannot even name (a parent without search permission),
    /// so nothing is ever renamed into another directory by mistake.
    pub fn open_file_path_only(&self, dir: BorrowedFd<'_>, name: &str) -> R<OwnedFd> {
        let flags = OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        self.run_retry(Call::Open, || {
            rustix::fs::openat(dir, name, flags, Mode::empty())
        })
    }

    fn open_dir_beneath_with(&self, dir: BorrowedFd<'_>, name: &str, flags: OFlags) -> R<OwnedFd> {
        if !self.no_openat2.load(Ordering::Relaxed) {
            let how =
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            match self.run_retry(Call::Open, || {
                rustix::fs::openat2(dir, name, flags, Mode::empty(), how)
            }) {
                Err(Errno::NOSYS) | Err(Errno::PERM) => {
                    // ENOSYS: kernel older than 5.6; EPERM: a seccomp filter refusing it.
                    self.no_openat2.store(true, Ordering::Relaxed);
                }
                r => return r,
            }
        }
        let mut cur: Option<OwnedFd> = None;
        for part in name.split('/').filter(|p| !p.is_empty()) {
            if part == ".." {
                return Err(Errno::XDEV);
            }
            let base = cur.as_ref().map(|f| f.as_fd()).unwrap_or(dir);
            let next = self.run_retry(Call::Open, || {
                rustix::fs::openat(base, part, flags, Mode::empty())
            })?;
            cur = Some(next);
        }
        cur.ok_or(Errno::INVAL)
    }

    /// Open regular file `name` in `dir` read-only, never following a symlink and never
    /// blocking on a fifo (`O_NOFOLLOW | O_NONBLOCK`). The caller checks `fstat` for a regular
    /// file. `openat(2)`.
    pub fn open_file_ro(&self, dir: BorrowedFd<'_>, name: &str) -> R<OwnedFd> {
        let flags =
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
        self.run_retry(Call::Open, || {
            rustix::fs::openat(dir, name, flags, Mode::empty())
        })
    }

    /// [`Sys::open_file_ro`] of a file the queue keeps (its identity, limits, key entries,
    /// evidence), which must be a regular file: `O_NOCTTY` too, and `fstat(2)` of the fd
    /// inside the same counted call. `ENXIO` when it is a fifo, socket or device (see
    /// [`require_regular`]), `EISDIR` for a directory, `ELOOP` for a symlink (never followed).
    /// Never blocks: nothing is read.
    pub fn open_regular_ro(&self, dir: BorrowedFd<'_>, name: &str) -> R<OwnedFd> {
        self.open_checked(dir, name, OFlags::RDONLY, require_regular)
    }

    /// `openat(2)` of existing `name` in `dir` with `access` and `O_CLOEXEC | O_NOFOLLOW |
    /// O_NONBLOCK | O_NOCTTY`, then `check` on the descriptor (`fstat(2)`), in one counted
    /// call: what [`Sys::open_regular_ro`] and [`Sys::open_file_wo`] share.
    fn open_checked(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        access: OFlags,
        check: fn(BorrowedFd<'_>) -> R<()>,
    ) -> R<OwnedFd> {
        let flags = access | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
        self.run_retry(Call::Open, || {
            let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
            check(fd.as_fd())?;
            Ok(fd)
        })
    }

    /// Create a new file `name` in `dir` (`O_CREAT | O_EXCL | O_NOFOLLOW`), read-write (a
    /// streamed enqueue reads its payload back), mode 0666 less the umask (so a group-shared
    /// queue made with umask 002 stays shared; the group comes from a setgid parent, as
    /// `open(2)` describes). `openat(2)`.
    pub fn create_file(&self, dir: BorrowedFd<'_>, name: &str) -> R<OwnedFd> {
        let flags =
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let fd = self.run(Call::Open, || {
            rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(FILE_MODE))
        })?;
        // Held until the last descriptor closes (`flock(2)`): how recovery tells a writer
        // alive in another pid namespace, or dead with its pid reused, from one that is
        // gone ([`Sys::temp_held`]). Best effort: where it fails, the pid and age decide.
        let _ = self.run(Call::Flock, || {
            rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive)
        });
        Ok(fd)
    }

    /// Try an exclusive `flock(2)` on `fd` without waiting (`LOCK_EX | LOCK_NB`): `Ok(true)`
    /// when taken (held until the last descriptor of its open file description closes),
    /// `Ok(false)` when another open file description holds a lock on it (`EWOULDBLOCK`).
    /// Retried on `EINTR`.
    pub fn try_lock_exclusive(&self, fd: BorrowedFd<'_>) -> R<bool> {
        match self.run_retry(Call::Flock, || {
            rustix::fs::flock(fd, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        }) {
            Ok(()) => Ok(true),
            Err(Errno::WOULDBLOCK) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether a writer holds temp file `name` in `dir` (made by [`Sys::create_file`]):
    /// `flock(2)` `LOCK_SH | LOCK_NB` refused. True as well when the file cannot be opened
    /// (`O_NOFOLLOW | O_NONBLOCK`) or locked for another reason: unknown, so it is kept.
    pub fn temp_held(&self, dir: BorrowedFd<'_>, name: &str) -> bool {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        match rustix::fs::openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => self
                .run(Call::Flock, || {
                    rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockShared)
                })
                .is_err(),
            Err(_) => true,
        }
    }

    /// Open existing regular file `name` in `dir` write-only, never following a symlink or
    /// blocking on a fifo (`O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`): to cut a
    /// receipt. `openat(2)`, then `fstat(2)` in the same counted call: `ENXIO` for anything
    /// but a regular file (a fifo without a reader says so at the open), `EISDIR` for a
    /// directory, `ELOOP` for a symlink, `EMLINK` for a file with another name (see
    /// [`require_single_regular`]).
    pub fn open_file_wo(&self, dir: BorrowedFd<'_>, name: &str) -> R<OwnedFd> {
        self.open_checked(dir, name, OFlags::WRONLY, require_single_regular)
    }

    /// `ftruncate(2)` to `len` bytes; counted (and faulted) as a [`Call::Write`].
    pub fn truncate(&self, fd: BorrowedFd<'_>, len: u64) -> R<()> {
        self.run_retry(Call::Write, || rustix::fs::ftruncate(fd, len))
    }

    /// Open an unnamed file in `dir` (`O_TMPFILE`, Linux 3.11+), read-write (a streamed
    /// enqueue reads its payload back for the envelope digest). Fails with `EOPNOTSUPP` (or
    /// `EISDIR` on old kernels) where the filesystem lacks it. `open(2)`.
    pub fn open_tmpfile(&self, dir: BorrowedFd<'_>) -> R<OwnedFd> {
        let flags = OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC;
        self.run(Call::Open, || {
            rustix::fs::openat(dir, ".", flags, Mode::from_raw_mode(FILE_MODE))
        })
    }

    /// `mkdirat(2)`, mode 0777 less the umask; a setgid parent passes its group and its
    /// setgid bit on (`mkdir(2)`).
    pub fn mkdir(&self, dir: BorrowedFd<'_>, name: &str) -> R<()> {
        self.run(Call::Mkdir, || {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(DIR_MODE))
        })
    }

    /// Give directory `fd` the owner, group and permission bits (setgid included, the
    /// sticky bit not: `ready/` has it, the directories made like it hold entries of many
    /// users) of directory `template` in `dir`: `fstatat(2)`, then `fchown(2)` (owner and group when
    /// permitted, else the group alone, else neither: `EPERM` is not an error) and
    /// `fchmod(2)`. For directories made after init (a priority level's), so that a
    /// producer with another umask or user makes them as usable as `init` made the rest.
    /// Counted and faulted as [`Call::Mkdir`] (it completes one).
    pub fn copy_owner_and_mode(
        &self,
        fd: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        template: &str,
    ) -> R<()> {
        self.run(Call::Mkdir, || share_like(fd, dir, template, 0o6777))
    }

    /// Give file `fd` the owner and group of `template` in `dir` (as
    /// [`Sys::copy_owner_and_mode`]: `EPERM` from `fchown(2)` is not an error) and its
    /// read and write bits (`st_mode & 0o666`: no execute, setgid or sticky bit, so a
    /// directory's mode can be the template). For the files every user of a queue reads
    /// (`steadq.queue`, `steadq.limits`) or appends to (`evidence.log`), so that one made
    /// by a process at umask 077 does not lock the others out. A file this user does not
    /// own (`fstat(2)`) is left alone: its owner shares it. Counted and faulted as
    /// [`Call::Open`] (it completes one).
    pub fn share_file_like(
        &self,
        fd: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        template: &str,
    ) -> R<()> {
        self.run(Call::Open, || {
            if rustix::fs::fstat(fd)?.st_uid != rustix::process::geteuid().as_raw() {
                return Ok(());
            }
            share_like(fd, dir, template, 0o666)
        })
    }

    /// `fchmod(2)` of file `fd` to `mode` (permission bits). Counted and faulted as
    /// [`Call::Open`] (it completes the making of a file).
    pub fn fchmod(&self, fd: BorrowedFd<'_>, mode: u32) -> R<()> {
        self.run(Call::Open, || {
            rustix::fs::fchmod(fd, Mode::from_raw_mode(mode))
        })
    }

    /// The permission bits (`st_mode & 0o7777`) of `name` in `dir`, symlinks not followed.
    /// `fstatat(2)`, counted as a [`Call::Stat`].
    pub fn mode_nofollow(&self, dir: BorrowedFd<'_>, name: &str) -> R<u32> {
        self.owner_nofollow(dir, name)
            .map(|(_, _, mode)| mode & 0o7777)
    }

    /// `(uid, gid, st_mode)` of `name` in `dir` (the whole `st_mode`: type and permission
    /// bits), symlinks not followed. `fstatat(2)`, counted as a [`Call::Stat`].
    #[allow(clippy::unnecessary_cast)] // the stat fields' types differ between targets
    pub fn owner_nofollow(&self, dir: BorrowedFd<'_>, name: &str) -> R<(u32, u32, u32)> {
        self.run_retry(Call::Stat, || {
            rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| (st.st_uid as u32, st.st_gid as u32, st.st_mode as u32))
        })
    }

    /// `(uid, gid, st_mode)` of open `fd` (`fstat(2)`; an `O_PATH` descriptor works too).
    #[allow(clippy::unnecessary_cast)] // stat field types differ between 64- and 32-bit targets
    pub fn owner_mode_of(&self, fd: BorrowedFd<'_>) -> R<(u32, u32, u32)> {
        self.run_retry(Call::Stat, || {
            rustix::fs::fstat(fd).map(|st| (st.st_uid as u32, st.st_gid as u32, st.st_mode as u32))
        })
    }

    /// The owner (`st_uid`) of open file or directory `fd`. `fstat(2)`, counted as a
    /// [`Call::Stat`].
    pub fn owner_of(&self, fd: BorrowedFd<'_>) -> R<u32> {
        self.owner_mode_of(fd).map(|(uid, _, _)| uid)
    }

    /// Set the sticky bit (`S_ISVTX`) on directory `fd` when this user owns it and it lacks
    /// the bit: `fstat(2)`, then `fchmod(2)`. `Ok(true)` when it was set now, `Ok(false)`
    /// when it had it or belongs to another user (who alone may set it). Counted and
    /// faulted as [`Call::Open`].
    pub fn make_sticky(&self, fd: BorrowedFd<'_>) -> R<bool> {
        self.run(Call::Open, || {
            let st = rustix::fs::fstat(fd)?;
            #[allow(clippy::unnecessary_cast)] // st_mode's type differs between targets
            let mode = st.st_mode as u32;
            if st.st_uid != rustix::process::geteuid().as_raw() || mode & 0o1000 != 0 {
                return Ok(false);
            }
            rustix::fs::fchmod(fd, Mode::from_raw_mode((mode & 0o7777) | 0o1000))?;
            Ok(true)
        })
    }

    /// This process's umask, from the `Umask:` line of `/proc/self/status` (`proc(5)`,
    /// Linux 4.7 and later): `umask(2)` can only read it by setting it, which races with
    /// the other threads of a library user. `None` where `/proc` does not say.
    pub fn umask() -> Option<u32> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(line.trim(), 8).ok()
    }

    /// `mkdir(2)` of a path outside any queue (the queue root itself).
    pub fn mkdir_path(&self, path: &std::path::Path) -> R<()> {
        self.run(Call::Mkdir, || {
            rustix::fs::mkdir(path, Mode::from_raw_mode(DIR_MODE))
        })
    }

    /// Read all of `fd` from offset 0 into `buf` (cleared first), at most `limit` bytes; more
    /// than that is `EFBIG`, with the first `limit` bytes left in `buf`. `pread(2)` in a loop.
    pub fn read_all(&self, fd: BorrowedFd<'_>, limit: u64, buf: &mut Vec<u8>) -> R<()> {
        buf.clear();
        let mut chunk = [0u8; 16384];
        loop {
            let off = buf.len() as u64;
            let n = self.run_retry(Call::Read, || rustix::io::pread(fd, &mut chunk[..], off))?;
            if n == 0 {
                return Ok(());
            }
            if off + n as u64 > limit {
                // Keep the first `limit` bytes: enough for a caller to read a header.
                buf.extend_from_slice(&chunk[..(limit - off) as usize]);
                return Err(Errno::FBIG);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Write all of `parts`, in order, at the current offset: `writev(2)` in a loop (one call
    /// for a job file's header and payload, [`IOV_MAX_PARTS`] parts a call at most); a
    /// zero-length write is `EIO`.
    pub fn write_all_vectored(&self, fd: BorrowedFd<'_>, parts: &[&[u8]]) -> R<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut done = 0usize;
        while done < total {
            let mut skip = done;
            // The parts left, on the stack (a job is its header and its payload: two).
            let mut iov = [std::io::IoSlice::new(&[]); IOV_MAX_PARTS];
            let mut used = 0;
            for p in parts {
                if skip >= p.len() {
                    skip -= p.len();
                    continue;
                }
                if used == IOV_MAX_PARTS {
                    break; // the rest go in the next writev
                }
                iov[used] = std::io::IoSlice::new(&p[skip..]);
                used += 1;
                skip = 0;
            }
            let n = self.run_retry(Call::Write, || rustix::io::writev(fd, &iov[..used]))?;
            if n == 0 {
                return Err(Errno::IO);
            }
            done += n;
        }
        Ok(())
    }

    /// Read exactly `buf.len()` bytes from offset 0 of `fd`: `pread(2)` in a loop (one call
    /// for a job file whose size `fstat` gave). A file shorter than `buf` is `ENODATA`.
    pub fn read_exact_at0(&self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> R<()> {
        self.read_exact_at(fd, buf, 0)
    }

    /// Read exactly `buf.len()` bytes from byte `offset` of `fd`: `pread(2)` in a loop (one
    /// call for a regular file that holds them). Ending before `buf` is full is `ENODATA`.
    pub fn read_exact_at(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> R<()> {
        let mut off = 0usize;
        while off < buf.len() {
            let n = self.read_at(fd, &mut buf[off..], offset + off as u64)?;
            if n == 0 {
                return Err(Errno::NODATA);
            }
            off += n;
        }
        Ok(())
    }

    /// One `pread(2)` into `buf` from byte `offset` of `fd` (retried on `EINTR`): the bytes
    /// read, 0 at end of file.
    pub fn read_at(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> R<usize> {
        self.run_retry(Call::Read, || rustix::io::pread(fd, &mut *buf, offset))
    }

    /// Write all of `data` at byte `offset` of `fd`, leaving the file offset alone: `pwrite(2)`
    /// in a loop (one call for a regular file); a zero-length write is `EIO`.
    pub fn write_all_at(&self, fd: BorrowedFd<'_>, mut data: &[u8], mut offset: u64) -> R<()> {
        while !data.is_empty() {
            let n = self.run_retry(Call::Write, || rustix::io::pwrite(fd, data, offset))?;
            if n == 0 {
                return Err(Errno::IO);
            }
            data = &data[n..];
            offset += n as u64;
        }
        Ok(())
    }

    /// Write all of `data` at the current offset. `write(2)` in a loop; a zero-length write is
    /// `EIO`.
    pub fn write_all(&self, fd: BorrowedFd<'_>, mut data: &[u8]) -> R<()> {
        while !data.is_empty() {
            let n = self.run_retry(Call::Write, || rustix::io::write(fd, data))?;
            if n == 0 {
                return Err(Errno::IO);
            }
            data = &data[n..];
        }
        Ok(())
    }

    /// `fsync(2)`: a durability barrier. Never retried: after a failed fsync the kernel may have
    /// dropped the dirty pages and a second fsync can succeed falsely (PostgreSQL "fsyncgate",
    /// 2018; see `fsync(2)` NOTES).
    pub fn fsync(&self, b: Barrier, fd: BorrowedFd<'_>) -> R<()> {
        self.run_barrier(Call::Fsync, b, || rustix::fs::fsync(fd))
    }

    /// `fsync(2)` of a directory: makes the names created, renamed or removed in it durable.
    /// Never retried, as [`Sys::fsync`].
    ///
    /// A directory held by name only (`O_PATH`: a ready shard that was unreadable when the
    /// queue was opened, see [`Sys::open_dir_path_only`]) cannot be fsynced itself (`EBADF`):
    /// then `.` is opened through it (it is readable again, or the rename before this would
    /// have been its only use) and that descriptor is fsynced; the same inode, the same barrier.
    pub fn fsync_dir(&self, b: Barrier, fd: BorrowedFd<'_>) -> R<()> {
        self.run_barrier(Call::FsyncDir, b, || match rustix::fs::fsync(fd) {
            Err(Errno::BADF) => {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
                let dir = rustix::fs::openat(fd, ".", flags, Mode::empty())?;
                rustix::fs::fsync(dir)
            }
            r => r,
        })
    }

    /// Whether the fault plan removes barrier `b` ([`FaultPlan::skip_barrier`]); counts it.
    /// A caller that would share the barrier with other threads (group commit) asks first,
    /// so that the skipped site neither makes nor waits for an fsync.
    pub fn skips_barrier(&self, b: Barrier) -> bool {
        self.plan.as_ref().is_some_and(|p| p.skips(b))
    }

    /// Like [`Sys::run`] for barrier `b`, which a [`FaultAction::Skip`] or
    /// [`FaultPlan::skip_barrier`] may skip.
    fn run_barrier(&self, call: Call, b: Barrier, f: impl FnOnce() -> R<()>) -> R<()> {
        match self.plan.as_ref().map(|p| (p, p.decide(call))) {
            None => f(),
            Some((p, Decision::Proceed)) if p.skips(b) => Ok(()),
            Some((_, Decision::Proceed)) => f(),
            Some((_, Decision::Skip)) => Ok(()),
            Some((_, Decision::Fail(e))) => Err(e),
            Some((p, Decision::ProceedThenStop)) => {
                let r = f();
                p.stopped.store(true, Ordering::SeqCst);
                r
            }
        }
    }

    /// `sync_file_range(2)` over the whole file with `SYNC_FILE_RANGE_WAIT_BEFORE | WRITE |
    /// WAIT_AFTER`: writes the file's dirty pages out and waits for those writes, so its
    /// blocks are allocated (in the journal transaction running now) and its data is on the
    /// device, but commits no metadata and flushes no device cache. Alone it is no barrier
    /// (sync_file_range(2): "there are no guarantees that the data will be available after a
    /// crash"). SteadQ calls it, instead of an fsync, only before a link or rename whose
    /// directory fsync then commits the journal in order, flush first (xfs and journaled
    /// ext4; DESIGN.md, Barriers: one commit per enqueue). Reports the file's writeback
    /// errors (`EIO`). A [`FaultAction::Skip`] skips it like a barrier.
    pub fn write_out(&self, b: Barrier, fd: BorrowedFd<'_>) -> R<()> {
        self.sync_range(
            b,
            fd,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    }

    /// `sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE` alone: starts the writes of the
    /// file's dirty pages and returns without waiting, so that a batch's files are written
    /// in parallel before [`Sys::write_out`] waits for each. Counted (and skipped by a
    /// [`FaultAction::Skip`]) as [`Call::WriteOut`].
    pub fn start_write_out(&self, b: Barrier, fd: BorrowedFd<'_>) -> R<()> {
        self.sync_range(b, fd, libc::SYNC_FILE_RANGE_WRITE)
    }

    #[allow(unsafe_code)]
    fn sync_range(&self, b: Barrier, fd: BorrowedFd<'_>, flags: libc::c_uint) -> R<()> {
        self.run_barrier(Call::WriteOut, b, || {
            use std::os::fd::AsRawFd;
            // SAFETY: sync_file_range(2) takes a descriptor that `fd` keeps open for the call
            // and plain integers; it reads and writes no memory of this process.
            let r = unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, flags) };
            match r {
                0 => Ok(()),
                _ => {
                    Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO))
                }
            }
        })
    }

    /// `syncfs(2)`: writes back the whole filesystem holding `fd`. Linux 5.8+ reports writeback
    /// errors here; older kernels always return 0.
    pub fn syncfs(&self, b: Barrier, fd: BorrowedFd<'_>) -> R<()> {
        self.run_barrier(Call::Syncfs, b, || rustix::fs::syncfs(fd))
    }

    /// `renameat2(2)` with `RENAME_NOREPLACE`: fails with `EEXIST` if `to` exists, `ENOENT` if
    /// `from` does not; of two racing renames of one source exactly one succeeds.
    pub fn rename(
        &self,
        from_dir: BorrowedFd<'_>,
        from: &str,
        to_dir: BorrowedFd<'_>,
        to: &str,
    ) -> R<()> {
        self.rename_bytes(from_dir, from.as_bytes(), to_dir, to.as_bytes())
    }

    /// [`Sys::rename`] of names given as bytes (a name that is not UTF-8, moved aside by
    /// `fsck --quarantine`): `renameat2(2)` with `RENAME_NOREPLACE`.
    pub fn rename_bytes(
        &self,
        from_dir: BorrowedFd<'_>,
        from: &[u8],
        to_dir: BorrowedFd<'_>,
        to: &[u8],
    ) -> R<()> {
        self.run(Call::Rename, || {
            rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE)
        })
    }

    /// `renameat2(2)` *without* `RENAME_NOREPLACE`: replaces `to` atomically. Only for the
    /// settings files (`steadq.queue` on a settings change, `steadq.limits`), never for a job.
    pub fn rename_replace(
        &self,
        from_dir: BorrowedFd<'_>,
        from: &str,
        to_dir: BorrowedFd<'_>,
        to: &str,
    ) -> R<()> {
        self.run(Call::Rename, || {
            rustix::fs::renameat(from_dir, from, to_dir, to)
        })
    }

    /// `renameat2(2)` with `RENAME_EXCHANGE`: swaps the entries `from` and `to` atomically
    /// (both must exist; `ENOENT` otherwise). `EINVAL` where the filesystem cannot exchange.
    /// Only for group slots (`ops/slots.rs`): a renewal swaps its new slot text in and then
    /// looks at what it took out, so it never replaces another holder's slot unseen.
    pub fn rename_exchange(
        &self,
        from_dir: BorrowedFd<'_>,
        from: &str,
        to_dir: BorrowedFd<'_>,
        to: &str,
    ) -> R<()> {
        self.run(Call::Rename, || {
            rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::EXCHANGE)
        })
    }

    /// Give the `O_TMPFILE` `file` the name `to` in `dir`. `linkat(2)` never replaces: `EEXIST`
    /// if `to` exists. Tries `AT_EMPTY_PATH` (needs `CAP_DAC_READ_SEARCH` before Linux 6.10),
    /// then `/proc/self/fd/N` with `AT_SYMLINK_FOLLOW`, and remembers which worked. `ENOTSUP`
    /// means neither works: use [`Publish::Named`].
    pub fn link_tmpfile(&self, file: BorrowedFd<'_>, dir: BorrowedFd<'_>, to: &str) -> R<()> {
        let mode = self.publish.load(Ordering::Relaxed);
        if mode == PUBLISH_UNKNOWN || mode == PUBLISH_EMPTY_PATH {
            match self.run(Call::Link, || {
                rustix::fs::linkat(file, "", dir, to, AtFlags::EMPTY_PATH)
            }) {
                Ok(()) => {
                    self.publish.store(PUBLISH_EMPTY_PATH, Ordering::Relaxed);
                    return Ok(());
                }
                // ENOENT: no CAP_DAC_READ_SEARCH on this kernel; EPERM/EINVAL: refused.
                Err(Errno::NOENT | Errno::PERM | Errno::INVAL) if mode == PUBLISH_UNKNOWN => {}
                Err(e) => return Err(e),
            }
        }
        if mode != PUBLISH_NAMED {
            use std::os::fd::AsRawFd;
            let mut path: heapless::String<40> = heapless::String::new();
            let _ = core::fmt::Write::write_fmt(
                &mut path,
                format_args!("/proc/self/fd/{}", file.as_raw_fd()),
            );
            match self.run(Call::Link, || {
                rustix::fs::linkat(
                    rustix::fs::CWD,
                    path.as_str(),
                    dir,
                    to,
                    AtFlags::SYMLINK_FOLLOW,
                )
            }) {
                Ok(()) => {
                    self.publish.store(PUBLISH_PROC, Ordering::Relaxed);
                    return Ok(());
                }
                Err(Errno::NOENT) if mode == PUBLISH_UNKNOWN => {
                    // /proc is not mounted.
                    self.publish.store(PUBLISH_NAMED, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        Err(Errno::NOTSUP)
    }

    /// The publishing route found so far (`None` before the first enqueue).
    pub fn publish_mode(&self) -> Option<Publish> {
        match self.publish.load(Ordering::Relaxed) {
            PUBLISH_EMPTY_PATH => Some(Publish::EmptyPath),
            PUBLISH_PROC => Some(Publish::ProcFd),
            PUBLISH_NAMED => Some(Publish::Named),
            _ => None,
        }
    }

    /// Force the named-temp-file route (tests of the fallback, and filesystems without
    /// `O_TMPFILE`).
    pub fn force_named_publish(&self) {
        self.publish.store(PUBLISH_NAMED, Ordering::Relaxed);
    }

    /// This boot's id from [`BOOT_ID_FILE`] (`random(4)`) as 128 bits, with the errno when
    /// it cannot be read (`EINVAL`: it was read but is not a UUID).
    pub fn boot_id(&self) -> R<u128> {
        let fd = self.run_retry(Call::Open, || {
            rustix::fs::open(
                BOOT_ID_FILE,
                OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })?;
        let mut buf = Vec::with_capacity(64);
        self.read_all(fd.as_fd(), 64, &mut buf)?;
        std::str::from_utf8(&buf)
            .ok()
            .and_then(crate::disk::clock::parse_boot_id)
            .ok_or(Errno::INVAL)
    }

    /// The `CLOCK_BOOTTIME` offset of this process's time namespace from [`TIMENS_FILE`],
    /// in ns (0 outside a time namespace), with the errno when it cannot be read (`ENOENT`:
    /// a kernel without time namespaces, or no `/proc`; `EINVAL`: read but not understood).
    pub fn timens_boot_offset(&self) -> R<i64> {
        let fd = self.run_retry(Call::Open, || {
            rustix::fs::open(TIMENS_FILE, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        })?;
        let mut buf = Vec::with_capacity(128);
        self.read_all(fd.as_fd(), 256, &mut buf)?;
        std::str::from_utf8(&buf)
            .ok()
            .and_then(crate::disk::clock::parse_timens_boottime)
            .ok_or(Errno::INVAL)
    }

    /// How many CPUs this thread may run on (`sched_getaffinity(2)`), at least 1; 1 when the
    /// call fails. Unlike `std::thread::available_parallelism` it reads no cgroup CPU quota
    /// (std's reading of `/proc/self/mountinfo` and the cgroup files, about 2 KB of the
    /// appliance binary): for sharing a listing among a few threads the affinity is enough.
    pub fn cpus() -> usize {
        rustix::thread::sched_getaffinity(None).map_or(1, |s| s.count().max(1) as usize)
    }

    /// The text of [`MOUNTINFO_FILE`], bytes that are not UTF-8 replaced (the kernel escapes
    /// only space, tab, newline and backslash in a path: any user who can mount, through
    /// FUSE, can put other bytes there); `None` where it cannot be read (no `/proc`, or a
    /// `/proc` of another PID namespace).
    pub fn mountinfo() -> Option<String> {
        let text = std::fs::read(MOUNTINFO_FILE).ok()?;
        Some(String::from_utf8_lossy(&text).into_owned())
    }

    /// Where an open file is mounted: its mount ID (`statx(2)` `STATX_MNT_ID`, Linux 5.8:
    /// the first field of [`MOUNTINFO_FILE`]; `None` where the kernel does not give it) and
    /// its device as `(major, minor)`. One [`Call::Stat`]; a second, `fstat(2)` for the device
    /// alone, where `statx` fails with `ENOSYS` (kernels before 4.11) or `EPERM` (a seccomp
    /// filter older than `statx`, as container runtimes before libseccomp 2.3.3 had).
    pub fn mount_of(&self, fd: BorrowedFd<'_>) -> R<(Option<u64>, (u32, u32))> {
        use rustix::fs::StatxFlags;
        let st = self.run_retry(Call::Stat, || {
            rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID)
        });
        match st {
            Ok(st) => {
                let has_id = StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::MNT_ID);
                Ok((
                    has_id.then_some(st.stx_mnt_id),
                    (st.stx_dev_major, st.stx_dev_minor),
                ))
            }
            Err(Errno::NOSYS | Errno::PERM) => {
                let (dev, _) = self.file_id(fd)?;
                let dev = dev as rustix::fs::Dev;
                Ok((None, (rustix::fs::major(dev), rustix::fs::minor(dev))))
            }
            Err(e) => Err(e),
        }
    }

    /// `unlinkat(2)` of a file.
    pub fn unlink(&self, dir: BorrowedFd<'_>, name: &str) -> R<()> {
        self.run(Call::Unlink, || {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())
        })
    }

    /// `unlinkat(2)` with `AT_REMOVEDIR`: `ENOTEMPTY` if the directory has entries.
    pub fn rmdir(&self, dir: BorrowedFd<'_>, name: &str) -> R<()> {
        self.run(Call::Unlink, || {
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
        })
    }

    /// Whether this user may make a file in directory `dir` (`faccessat2(2)` of `"."` with
    /// `W_OK | X_OK` and `AT_EACCESS`: the effective ids, as `open(2)` checks them).
    /// `Err(EACCES)`, `Err(EPERM)`: it may not; counted as a [`Call::Stat`].
    pub fn may_create_in(&self, dir: BorrowedFd<'_>) -> R<()> {
        use rustix::fs::Access;
        self.run(Call::Stat, || {
            rustix::fs::accessat(
                dir,
                ".",
                Access::WRITE_OK | Access::EXEC_OK,
                AtFlags::EACCESS,
            )
        })
    }

    /// `statx(2)` of `name` under `dir`, symlinks not followed: its file type, when it was
    /// made (its birth time, `STATX_BTIME`, unix ns), or, on a filesystem that does not
    /// keep one (the reply's mask lacks `STATX_BTIME`, or `statx` is missing: `ENOSYS`), its
    /// inode change time, and its owner's uid. Counted as a [`Call::Stat`].
    #[allow(clippy::unnecessary_cast)] // the stat fields' types differ between targets
    pub fn made_nofollow(&self, dir: BorrowedFd<'_>, name: &str) -> R<(FileType, u64, u32)> {
        use rustix::fs::StatxFlags;
        let ns = |t: rustix::fs::StatxTimestamp| {
            (t.tv_sec.max(0) as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
        };
        let mask = StatxFlags::TYPE | StatxFlags::BTIME | StatxFlags::CTIME | StatxFlags::UID;
        match self.run_retry(Call::Stat, || {
            rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, mask)
        }) {
            Ok(st) => {
                let kind = FileType::from_raw_mode(st.stx_mode as _);
                match StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME) {
                    true => Ok((kind, ns(st.stx_btime), st.stx_uid)),
                    false => Ok((kind, ns(st.stx_ctime), st.stx_uid)),
                }
            }
            Err(Errno::NOSYS) => self.run_retry(Call::Stat, || {
                rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map(|st| {
                    let ctime = (st.st_ctime as u64).saturating_mul(1_000_000_000)
                        + st.st_ctime_nsec as u64;
                    (FileType::from_raw_mode(st.st_mode), ctime, st.st_uid)
                })
            }),
            Err(e) => Err(e),
        }
    }

    /// `fstat(2)`: `(file type, size in bytes)`.
    pub fn fstat(&self, fd: BorrowedFd<'_>) -> R<(FileType, u64)> {
        self.run_retry(Call::Stat, || {
            rustix::fs::fstat(fd).map(|st| (FileType::from_raw_mode(st.st_mode), st.st_size as u64))
        })
    }

    /// `fstat(2)`: `(file type, size in bytes, bytes allocated: st_blocks × 512)`.
    #[allow(clippy::unnecessary_cast)] // st_blocks is i64 or u64 by target
    pub fn fstat_allocated(&self, fd: BorrowedFd<'_>) -> R<(FileType, u64, u64)> {
        self.run_retry(Call::Stat, || {
            rustix::fs::fstat(fd).map(|st| {
                (
                    FileType::from_raw_mode(st.st_mode),
                    st.st_size as u64,
                    (st.st_blocks as u64).saturating_mul(512),
                )
            })
        })
    }

    /// `fstat(2)`: the link count (0 once the file was unlinked while open).
    #[allow(clippy::unnecessary_cast)] // st_nlink is u32 on some targets
    pub fn nlink(&self, fd: BorrowedFd<'_>) -> R<u64> {
        self.run_retry(Call::Stat, || {
            rustix::fs::fstat(fd).map(|st| st.st_nlink as u64)
        })
    }

    /// `fstatat(2)` with `AT_SYMLINK_NOFOLLOW`.
    #[allow(clippy::unnecessary_cast)] // stat field types differ between 64- and 32-bit targets
    pub fn stat_nofollow(&self, dir: BorrowedFd<'_>, name: &str) -> R<Meta> {
        self.run_retry(Call::Stat, || {
            rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map(|st| Meta {
                file_type: FileType::from_raw_mode(st.st_mode),
                size: st.st_size as u64,
                ctime_ns: (st.st_ctime as u64).saturating_mul(1_000_000_000)
                    + st.st_ctime_nsec as u64,
                mtime_ns: (st.st_mtime as u64).saturating_mul(1_000_000_000)
                    + st.st_mtime_nsec as u64,
                links: st.st_nlink as u64,
                file: (st.st_dev as u64, st.st_ino as u64),
                allocated: (st.st_blocks as u64).saturating_mul(512),
            })
        })
    }

    /// Open (creating, mode 0666 less the umask) regular file `name` in `dir` for appending,
    /// and reading (a torn last line is looked for before appending), never following a
    /// symlink (`ELOOP`) and never blocking on a fifo: `openat(2)` with `O_RDWR | O_APPEND |
    /// O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, then `fstat(2)` in the same counted
    /// call. A fifo, socket or device is `ENXIO`, a directory `EISDIR`, a file with more
    /// than one link `EMLINK` (see [`require_single_regular`]); nothing is written to any.
    pub fn open_append(&self, dir: BorrowedFd<'_>, name: &str) -> R<OwnedFd> {
        let flags = OFlags::RDWR
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::CLOEXEC
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY;
        self.run(Call::Open, || {
            let fd = rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(FILE_MODE))?;
            require_single_regular(fd.as_fd())?;
            Ok(fd)
        })
    }

    /// Open directory `path` (a path outside any queue, symlinks followed as `open(2)`
    /// follows them) as an `O_PATH | O_DIRECTORY` handle: it needs no read permission on
    /// the directory and serves as the directory of the `*_outside` calls below, which
    /// never follow a symlink in their final component. `open(2)`.
    pub fn open_dir_handle_path(&self, path: &std::path::Path) -> R<OwnedFd> {
        self.run_retry(Call::Open, || {
            rustix::fs::open(
                path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
    }

    /// Create a new file `name` in `dir` for writing only: `openat(2)` with `O_WRONLY |
    /// O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, mode 0660 less the umask (as
    /// a shell's `>` makes it, without the bits for every other user: a payload is for the
    /// queue's users only). Anything already at `name`, a symlink included (even a
    /// dangling one: `O_EXCL` never follows it, `open(2)`), fails with `EEXIST`. For a file
    /// outside the queue that a command writes (`claim --payload-out`).
    pub fn create_new_outside(&self, dir: BorrowedFd<'_>, name: &std::path::Path) -> R<OwnedFd> {
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        self.run(Call::Open, || {
            rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(OUTSIDE_FILE_MODE))
        })
    }

    /// Open existing `name` in `dir` for writing only, without following a symlink there,
    /// blocking or taking a controlling terminal: `openat(2)` with `O_WRONLY | O_NOFOLLOW |
    /// O_NONBLOCK | O_NOCTTY`. Nothing is cut. Errors as `open(2)` gives them: `ELOOP` for a
    /// symlink (magic links such as `/proc/self/fd/1` included), `ENXIO` for a FIFO with
    /// no reader or a socket, `EISDIR` for a directory, `ENOENT` when nothing is there. The
    /// caller checks the file type and links with [`Sys::fstat_meta`] before writing.
    pub fn open_existing_outside(&self, dir: BorrowedFd<'_>, name: &std::path::Path) -> R<OwnedFd> {
        let flags =
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        self.run_retry(Call::Open, || {
            rustix::fs::openat(dir, name, flags, Mode::empty())
        })
    }

    /// Clear `O_NONBLOCK` on `fd` (`fcntl(2)` `F_GETFL`, `F_SETFL`), once the checks made
    /// after an `O_NONBLOCK` open passed: writes to a FIFO or a terminal then wait for room
    /// (a signal still interrupts them). Counted as a [`Call::Open`] (it completes one).
    pub fn set_blocking(&self, fd: BorrowedFd<'_>) -> R<()> {
        self.run_retry(Call::Open, || {
            let flags = rustix::fs::fcntl_getfl(fd)?;
            rustix::fs::fcntl_setfl(fd, flags - OFlags::NONBLOCK)
        })
    }

    /// `fstat(2)` of an open fd as a [`Meta`]: its type, size, times, links and `(st_dev,
    /// st_ino)`, for checks made on the descriptor that is written, not on a path.
    pub fn fstat_meta(&self, fd: BorrowedFd<'_>) -> R<Meta> {
        self.run_retry(Call::Stat, || rustix::fs::fstat(fd).map(|st| meta_of(&st)))
    }

    /// `fstatat(2)` with `AT_SYMLINK_NOFOLLOW` of `name` in `dir`, a name outside any queue
    /// (any bytes, not only UTF-8).
    pub fn stat_outside(&self, dir: BorrowedFd<'_>, name: &std::path::Path) -> R<Meta> {
        self.run_retry(Call::Stat, || {
            rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map(|st| meta_of(&st))
        })
    }

    /// `unlinkat(2)` of file `name` in `dir`, a name outside any queue (the final component
    /// is removed, never followed: `unlink(2)`).
    pub fn unlink_outside(&self, dir: BorrowedFd<'_>, name: &std::path::Path) -> R<()> {
        self.run(Call::Unlink, || {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())
        })
    }

    /// `(st_dev, st_ino)` of an open fd (`fstat(2)`), to tell whether a path still names it.
    #[allow(clippy::unnecessary_cast)] // stat field types differ between 64- and 32-bit targets
    pub fn file_id(&self, fd: BorrowedFd<'_>) -> R<(u64, u64)> {
        self.run_retry(Call::Stat, || {
            rustix::fs::fstat(fd).map(|st| (st.st_dev as u64, st.st_ino as u64))
        })
    }

    /// `(st_dev, st_ino)` of a path outside the queue (`stat(2)`, following symlinks as the
    /// queue root's open did).
    #[allow(clippy::unnecessary_cast)] // as above
    pub fn path_id(&self, path: &std::path::Path) -> R<(u64, u64)> {
        self.run_retry(Call::Stat, || {
            rustix::fs::stat(path).map(|st| (st.st_dev as u64, st.st_ino as u64))
        })
    }

    /// `fstatfs(2)`, one [`Call::Stat`]; `f_type` as the fault plan pretends, if it does
    /// ([`FaultPlan::pretend_fs_magic`]).
    #[allow(clippy::unnecessary_cast)] // f_type is i32 on 32-bit ARM
    fn statfs(&self, fd: BorrowedFd<'_>) -> R<rustix::fs::StatFs> {
        let mut st = self.run_retry(Call::Stat, || rustix::fs::fstatfs(fd))?;
        let pretend = self
            .plan
            .as_ref()
            .map(|p| p.fs_magic.load(Ordering::SeqCst));
        if let Some(m) = pretend.filter(|m| *m != 0) {
            st.f_type = m as _;
        }
        Ok(st)
    }

    /// `fstatfs(2)`: the filesystem magic (`f_type`), see `statfs(2)` and `linux/magic.h`.
    #[allow(clippy::unnecessary_cast)] // f_type is i32 on 32-bit ARM
    pub fn fs_magic(&self, fd: BorrowedFd<'_>) -> R<i64> {
        self.statfs(fd).map(|s| s.f_type as i64)
    }

    /// `fstatfs(2)`, one call: the filesystem magic (`f_type`) and its longest name in bytes
    /// (`f_namelen`; 0 or less where it does not say).
    #[allow(clippy::unnecessary_cast)] // the fields' types differ between targets
    pub fn fs_type_and_name_max(&self, fd: BorrowedFd<'_>) -> R<(i64, i64)> {
        self.statfs(fd)
            .map(|s| (s.f_type as i64, s.f_namelen as i64))
    }

    /// `fstatfs(2)`: the filesystem's inodes as `(total, free)` (`f_files`, `f_ffree`). A
    /// total of 0 means the filesystem does not count them (btrfs makes inodes as it goes).
    #[allow(clippy::unnecessary_cast)] // the fields' types differ between targets
    pub fn fs_inodes(&self, fd: BorrowedFd<'_>) -> R<(u64, u64)> {
        self.statfs(fd)
            .map(|s| (s.f_files as u64, s.f_ffree as u64))
    }

    /// List `dir` with `getdents64(2)`, calling `f(name, type)` for each entry except `.` and
    /// `..`. Names that are not UTF-8, or hold a control character (an escape sequence, `\r`,
    /// a newline: what a member would print to an operator's terminal), are passed as `None`
    /// (foreign by definition: no SteadQ name holds one), to be shown escaped
    /// ([`crate::disk::name::escape_name`]).
    pub fn read_dir(
        &self,
        dir: BorrowedFd<'_>,
        mut f: impl FnMut(Option<&str>, &CStr, EntryType),
    ) -> R<()> {
        self.read_dir_while(dir, |n, raw, t| {
            f(n, raw, t);
            true
        })
    }

    /// [`Sys::read_dir`] that stops as soon as `f` returns false (a claim that has enough
    /// candidates reads no further: one `getdents64` of [`DIR_BUF`] bytes at most).
    pub fn read_dir_while(
        &self,
        dir: BorrowedFd<'_>,
        mut f: impl FnMut(Option<&str>, &CStr, EntryType) -> bool,
    ) -> R<()> {
        // A fresh descriptor for its own offset (threads list the same directory at once),
        // opened with known flags: no fcntl(F_GETFL) as rustix's Dir::read_from makes.
        let own = self.run_retry(Call::ReadDir, || {
            rustix::fs::openat(
                dir,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })?;
        let mut buf = vec![core::mem::MaybeUninit::<u8>::uninit(); DIR_BUF];
        let mut d = rustix::fs::RawDir::new(&own, &mut buf);
        while let Some(e) = d.next() {
            let e = e?;
            let raw = e.file_name();
            let bytes = raw.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let t = match e.file_type() {
                FileType::RegularFile => EntryType::File,
                FileType::Directory => EntryType::Dir,
                FileType::Unknown => EntryType::Unknown,
                _ => EntryType::Other,
            };
            if !f(printable_name(bytes), raw, t) {
                break;
            }
        }
        Ok(())
    }
}

/// `bytes` as text when it is UTF-8 without a control character (`char::is_control`: C0,
/// DEL, C1), else `None`: see [`Sys::read_dir`].
fn printable_name(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| !s.chars().any(char::is_control))
}

/// A human name for a filesystem magic number (`statfs(2)`, `linux/magic.h`).
pub fn fs_name(magic: i64) -> &'static str {
    match magic as u32 {
        0xEF53 => "ext2/3/4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x6969 => "nfs",
        0xFF53_4D42 | 0xFE53_4D42 => "cifs/smb",
        0x6573_5546 => "fuse",
        0x4d44 => "vfat/msdos",
        0x2011_BAB0 => "exfat",
        0x794C_7630 => "overlayfs",
        0xF2F5_2010 => "f2fs",
        0x2FC1_2FC1 => "zfs",
        0x7275 => "romfs",
        0x7371_7368 => "squashfs",
        0x2468 | 0x2478 => "ubifs/jffs2",
        0x6165_676C => "pstore",
        _ => "unknown",
    }
}

/// `fchown(2)` `fd` like `template` in `dir` (owner and group when permitted, else the group
/// alone, else neither: `EPERM` is not an error), then `fchmod(2)` it to the template's
/// `st_mode & bits`. One `fstatat(2)`; the caller counts the whole as one call.
/// `Ok` when open `fd` is a regular file (`fstat(2)`); `EISDIR` for a directory and `ENXIO`
/// for anything else (a fifo, socket or device: the errno `open(2)` gives a fifo opened for
/// writing without a reader, or a socket), which the error text reads as "not a regular
/// file".
pub fn require_regular(fd: BorrowedFd<'_>) -> R<()> {
    match FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode) {
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(Errno::ISDIR),
        _ => Err(Errno::NXIO),
    }
}

/// [`require_regular`], and `EMLINK` when the file has more than one link (`st_nlink`): a
/// hard link a member of the queue's group made to a file outside the queue, which a write,
/// cut or `fchown` meant for the queue's own file would change. For the files the queue
/// writes in place (`evidence.log`, a receipt being cut); a queue never links them twice.
pub fn require_single_regular(fd: BorrowedFd<'_>) -> R<()> {
    let st = rustix::fs::fstat(fd)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile if st.st_nlink > 1 => Err(Errno::MLINK),
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(Errno::ISDIR),
        _ => Err(Errno::NXIO),
    }
}

fn share_like(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, template: &str, bits: u32) -> R<()> {
    let st = rustix::fs::statat(dir, template, AtFlags::SYMLINK_NOFOLLOW)?;
    // Only a real directory (or, for a file's read and write bits, a regular file) is a
    // template: a symlink at `ready` (its lstat mode 777) would give every level directory
    // `fsck --quarantine` makes mode 777, and a file there (0644) would make new level
    // directories nobody can search. Without one, what was made stays as made.
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    let usable = kind == rustix::fs::FileType::Directory
        || (bits == 0o666 && kind == rustix::fs::FileType::RegularFile);
    if !usable {
        return Ok(());
    }
    let (uid, gid) = (
        rustix::process::Uid::from_raw(st.st_uid),
        rustix::process::Gid::from_raw(st.st_gid),
    );
    match rustix::fs::fchown(fd, Some(uid), Some(gid)) {
        Err(Errno::PERM) => match rustix::fs::fchown(fd, None, Some(gid)) {
            Ok(()) | Err(Errno::PERM) => {}
            Err(e) => return Err(e),
        },
        r => r?,
    }
    #[allow(clippy::unnecessary_cast)] // st_mode's type differs between targets
    rustix::fs::fchmod(fd, Mode::from_raw_mode(st.st_mode as u32 & bits))
}

/// A `stat` as a [`Meta`].
#[allow(clippy::unnecessary_cast)] // stat field types differ between 64- and 32-bit targets
fn meta_of(st: &rustix::fs::Stat) -> Meta {
    Meta {
        file_type: FileType::from_raw_mode(st.st_mode as _),
        size: st.st_size as u64,
        ctime_ns: (st.st_ctime as u64).saturating_mul(1_000_000_000) + st.st_ctime_nsec as u64,
        mtime_ns: (st.st_mtime as u64).saturating_mul(1_000_000_000) + st.st_mtime_nsec as u64,
        links: st.st_nlink as u64,
        file: (st.st_dev as u64, st.st_ino as u64),
        allocated: (st.st_blocks as u64).saturating_mul(512),
    }
}
