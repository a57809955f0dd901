//! Errors and the three outcomes.
//!
//! Every mutating call returns `Ok` only when it is **done**: past its linearization point
//! (the rename or link) and every durability barrier its policy asks for. An `Err` carries an
//! [`Outcome`]: **not done** (nothing changed that matters: the failure came before the
//! linearization point, or the rename itself failed cleanly) or **indeterminate** (the change
//! may or may not have happened, or may not survive a crash: a barrier failed after the
//! rename, or the rename failed with `EIO`). SteadQ never guesses and never retries an fsync
//! into "done".

use crate::disk::format::Corruption;
use crate::disk::sys::{Call, Errno};
use std::path::PathBuf;

/// An operating-system error number (errno), the way `std::io::Error` carries one: SteadQ's
/// errors name the errno of the call that failed without exposing the syscall crate's type.
///
/// The numbers are Linux's (`errno(3)`); compare with `raw_os_error()` or through
/// `std::io::Error::from`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OsErrno(i32);

impl OsErrno {
    /// The raw errno value, as `std::io::Error::raw_os_error` returns it.
    pub fn raw_os_error(self) -> i32 {
        self.0
    }

    /// `ENOSPC` (no space or no free inodes) or `EDQUOT` (quota exceeded).
    pub fn is_disk_full(self) -> bool {
        self == Errno::NOSPC.into() || self == Errno::DQUOT.into()
    }
}

impl From<Errno> for OsErrno {
    fn from(e: Errno) -> OsErrno {
        OsErrno(e.raw_os_error())
    }
}

impl From<OsErrno> for std::io::Error {
    fn from(e: OsErrno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

impl core::fmt::Debug for OsErrno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "OsErrno({}: {})", self.0, std::io::Error::from(*self))
    }
}

impl core::fmt::Display for OsErrno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&std::io::Error::from(*self), f)
    }
}

/// The outcome of a failed mutating call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing was changed (or what was changed is invisible to every reader, like an unnamed
    /// `O_TMPFILE`).
    NotDone,
    /// It may have happened. After a crash either state can be observed.
    Indeterminate,
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A system call failed.
    Io {
        /// Which call.
        call: Call,
        /// With which errno.
        errno: OsErrno,
    },
    /// The lease's exact name is gone: it expired and was recovered, renewed elsewhere, or
    /// settled already. Nothing was changed.
    LeaseLost,
    /// No `steadq.queue` identity file: the directory is not a queue.
    NotAQueue,
    /// The identity file is malformed or its checksum does not match: damaged.
    /// `Queue::create` (`steadq init`) restores it from the job headers.
    BadIdentity,
    /// The identity file is missing or damaged, and the directory holds job files whose
    /// headers do not agree on one queue id: `Queue::create` will not re-identify it.
    IdentityLost {
        /// Job files found.
        jobs: u32,
        /// Distinct queue ids among the readable job headers (0: none readable).
        ids: u32,
    },
    /// The queue was written by a newer SteadQ.
    UnsupportedVersion {
        /// Version found on disk.
        found: u32,
        /// Newest this build reads.
        supported: u32,
    },
    /// The filesystem rejects `renameat2(RENAME_NOREPLACE)`.
    UnsupportedFilesystem {
        /// Name from the `statfs` magic.
        fs_type: &'static str,
    },
    /// `renameat2` of a file SteadQ made was refused with `EPERM` or `ENOSYS`: the call is
    /// blocked (a seccomp profile, a sandbox), not unsupported by the filesystem.
    RenameRefused {
        /// The errno.
        errno: OsErrno,
    },
    /// The filesystem's longest name (`statfs(2)` `f_namelen`) is shorter than the longest
    /// name SteadQ writes.
    NamesTooLong {
        /// Bytes the filesystem allows.
        allowed: u64,
        /// Bytes SteadQ needs.
        needed: u64,
    },
    /// A directory the layout requires is missing (an interrupted `create`: run it again).
    Incomplete,
    /// The payload exceeds the queue's limit.
    PayloadTooLarge {
        /// Payload length, bytes.
        len: u64,
        /// Limit, bytes.
        limit: u64,
    },
    /// A job file failed verification; it was dead-lettered (reason `corrupt`).
    Corrupt(Corruption),
    /// No job with that id (or handle) in the expected state.
    NoSuchJob,
    /// An argument is out of range; the text says which.
    InvalidArgument(&'static str),
    /// The queue is at its capacity limit (`steadq.limits`): the enqueue was not done. The
    /// figures are what the check counted (ready + leased + delayed, and this handle's
    /// enqueues in flight).
    QueueFull {
        /// Jobs counted.
        jobs: u64,
        /// Bytes of job files counted (0 when no byte limit is set).
        bytes: u64,
        /// The job limit, if any.
        max_jobs: Option<u64>,
        /// The byte limit, if any.
        max_bytes: Option<u64>,
    },
    /// The limits file `steadq.limits` is damaged (syntax or checksum).
    BadLimits,
    /// An idempotency key entry in `keys/` is unreadable or names another key.
    BadKeyEntry,
    /// A typed payload could not be encoded, or a claimed one decoded (`TypedQueue`,
    /// feature `serde`); the text says why.
    Decode(String),
}

/// A SteadQ error: what, where (a path when there is one) and the [`Outcome`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(Box<Inner>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Inner {
    kind: ErrorKind,
    outcome: Outcome,
    path: Option<PathBuf>,
}

impl Error {
    /// A new error.
    pub fn new(kind: ErrorKind, outcome: Outcome, path: Option<PathBuf>) -> Error {
        Error(Box::new(Inner {
            kind,
            outcome,
            path,
        }))
    }

    /// A "not done" error.
    pub fn not_done(kind: ErrorKind, path: Option<PathBuf>) -> Error {
        Error::new(kind, Outcome::NotDone, path)
    }

    /// A failed system call.
    pub(crate) fn io(call: Call, errno: Errno, outcome: Outcome, path: Option<PathBuf>) -> Error {
        let errno = errno.into();
        Error::new(ErrorKind::Io { call, errno }, outcome, path)
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    /// Not done, or indeterminate.
    pub fn outcome(&self) -> Outcome {
        self.0.outcome
    }

    /// The file or directory involved, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.0.path.as_deref()
    }

    /// The errno, for [`ErrorKind::Io`].
    pub fn errno(&self) -> Option<OsErrno> {
        match self.0.kind {
            ErrorKind::Io { errno, .. } => Some(errno),
            _ => None,
        }
    }

    /// True for [`ErrorKind::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        self.0.kind == ErrorKind::LeaseLost
    }

    pub(crate) fn with_outcome(mut self, outcome: Outcome) -> Error {
        self.0.outcome = outcome;
        self
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if let Some(p) = &self.0.path {
            write!(f, "{}: ", p.display())?;
        }
        match &self.0.kind {
            ErrorKind::Io { call, errno } => fmt_io(f, *call, *errno, self.0.outcome)?,
            ErrorKind::IdentityLost { jobs, ids } => fmt_identity_lost(f, *jobs, *ids)?,
            ErrorKind::QueueFull {
                jobs,
                bytes,
                max_jobs,
                max_bytes,
            } => {
                write!(f, "queue full: {jobs} jobs")?;
                if let Some(m) = max_jobs {
                    write!(f, " (limit {m})")?;
                }
                if let Some(m) = max_bytes {
                    write!(f, ", {bytes} bytes (limit {m})")?;
                }
                f.write_str("; not done, nothing changed")?;
            }
            kind => fmt_message(f, kind)?,
        }
        if self.0.outcome == Outcome::Indeterminate {
            f.write_str(" [outcome indeterminate: the operation may have happened]")?;
        }
        Ok(())
    }
}

/// [`ErrorKind::Io`]: the call and errno; a full disk says so in words, with the outcome.
fn fmt_io(
    f: &mut core::fmt::Formatter<'_>,
    call: crate::disk::sys::Call,
    errno: OsErrno,
    outcome: Outcome,
) -> core::fmt::Result {
    if !errno.is_disk_full() {
        return write!(f, "{} failed: {errno}", call.name());
    }
    let what = if errno == Errno::NOSPC.into() {
        "no space or no free inodes"
    } else {
        "quota exceeded"
    };
    write!(f, "{} failed: disk full ({what}); ", call.name())?;
    f.write_str(match outcome {
        Outcome::NotDone => "not done, nothing changed",
        Outcome::Indeterminate => "it may have happened",
    })
}

/// [`ErrorKind::IdentityLost`].
fn fmt_identity_lost(f: &mut core::fmt::Formatter<'_>, jobs: u32, ids: u32) -> core::fmt::Result {
    write!(
        f,
        "the identity file steadq.queue is missing or damaged and the {jobs} job files "
    )?;
    match ids {
        0 => f.write_str("have no readable header")?,
        n => write!(f, "name {n} different queue ids")?,
    }
    f.write_str(
        "; init will not re-identify a queue that holds jobs (restore steadq.queue \
         from a backup, or move the foreign jobs out)",
    )
}

/// Every kind whose message needs no more than its own fields (those with more are written by
/// `Error::fmt` itself).
fn fmt_message(f: &mut core::fmt::Formatter<'_>, kind: &ErrorKind) -> core::fmt::Result {
    match kind {
        ErrorKind::Io { .. } | ErrorKind::IdentityLost { .. } | ErrorKind::QueueFull { .. } => {
            Ok(())
        }
        ErrorKind::UnsupportedVersion { found, supported } => write!(
            f,
            "queue format version {found} is newer than this steadq supports \
             ({supported}); upgrade steadq"
        ),
        ErrorKind::UnsupportedFilesystem { fs_type } => write!(
            f,
            "filesystem {fs_type} does not support renameat2(RENAME_NOREPLACE); SteadQ \
             needs a local filesystem such as ext4, xfs, btrfs or tmpfs"
        ),
        ErrorKind::RenameRefused { errno } => write!(
            f,
            "renameat2(RENAME_NOREPLACE) was refused by the system ({errno}): the call is \
             blocked (a seccomp profile or sandbox?), not unsupported by the filesystem; \
             allow renameat2"
        ),
        ErrorKind::NamesTooLong { allowed, needed } => write!(
            f,
            "filesystem allows names of {allowed} bytes; SteadQ needs {needed}"
        ),
        ErrorKind::PayloadTooLarge { len, limit } => write!(
            f,
            "payload of {len} bytes exceeds the limit of {limit} bytes"
        ),
        ErrorKind::Corrupt(c) => write!(f, "corrupt job file ({c}); moved to dead/"),
        ErrorKind::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
        ErrorKind::LeaseLost => f.write_str(LEASE_LOST),
        ErrorKind::NotAQueue => f.write_str(NOT_A_QUEUE),
        ErrorKind::BadIdentity => f.write_str(BAD_IDENTITY),
        ErrorKind::Incomplete => f.write_str(INCOMPLETE),
        ErrorKind::NoSuchJob => f.write_str("no such job"),
        ErrorKind::BadLimits => f.write_str(
            "the limits file steadq.limits is damaged (malformed, or its sum= line does not \
             match); set the limits again",
        ),
        ErrorKind::Decode(what) => write!(f, "typed payload: {what}"),
        ErrorKind::BadKeyEntry => {
            f.write_str("idempotency key entry is damaged or names another key")
        }
    }
}

const LEASE_LOST: &str =
    "lease lost (expired and recovered, renewed elsewhere, or already settled)";
const NOT_A_QUEUE: &str = "not a SteadQ queue (no steadq.queue file; run `steadq init`)";
const BAD_IDENTITY: &str = "the identity file steadq.queue is damaged (malformed, or its sum= \
    line does not match); run `steadq init` on the queue directory to restore it from the job \
    headers";
const INCOMPLETE: &str = "queue layout incomplete (an interrupted init?); run `steadq init` again";

impl std::error::Error for Error {}

/// Shorthand.
pub type Result<T> = core::result::Result<T, Error>;
