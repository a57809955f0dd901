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
        errno: Errno,
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
        errno: Errno,
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
    pub fn io(call: Call, errno: Errno, outcome: Outcome, path: Option<PathBuf>) -> Error {
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
    pub fn errno(&self) -> Option<Errno> {
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
            ErrorKind::Io { call, errno } if matches!(*errno, Errno::NOSPC | Errno::DQUOT) => {
                let what = if *errno == Errno::NOSPC { "no space or no free inodes" } else { "quota exceeded" };
                write!(f, "{} failed: disk full ({what}); ", call.name())?;
                f.write_str(match self.0.outcome {
                    Outcome::NotDone => "not done, nothing changed",
                    Outcome::Indeterminate => "it may have happened",
                })?;
            }
            ErrorKind::Io { call, errno } => write!(f, "{} failed: {}", call.name(), std::io::Error::from_raw_os_error(errno.raw_os_error()))?,
            ErrorKind::LeaseLost => f.write_str("lease lost (expired and recovered, renewed elsewhere, or already settled)")?,
            ErrorKind::NotAQueue => f.write_str("not a SteadQ queue (no steadq.queue file; run `steadq init`)")?,
            ErrorKind::BadIdentity => f.write_str("the identity file steadq.queue is damaged (malformed, or its sum= line does not match); run `steadq init` on the queue directory to restore it from the job headers")?,
            ErrorKind::IdentityLost { jobs, ids } => write!(f, "the identity file steadq.queue is missing or damaged and the {jobs} job files {}; init will not re-identify a queue that holds jobs (restore steadq.queue from a backup, or move the foreign jobs out)", if *ids == 0 { "have no readable header".to_string() } else { format!("name {ids} different queue ids") })?,
            ErrorKind::UnsupportedVersion { found, supported } => write!(f, "queue format version {found} is newer than this steadq supports ({supported}); upgrade steadq")?,
            ErrorKind::UnsupportedFilesystem { fs_type } => write!(f, "filesystem {fs_type} does not support renameat2(RENAME_NOREPLACE); SteadQ needs a local filesystem such as ext4, xfs, btrfs or tmpfs")?,
            ErrorKind::RenameRefused { errno } => write!(f, "renameat2(RENAME_NOREPLACE) was refused by the system ({}): the call is blocked (a seccomp profile or sandbox?), not unsupported by the filesystem; allow renameat2", std::io::Error::from_raw_os_error(errno.raw_os_error()))?,
            ErrorKind::NamesTooLong { allowed, needed } => write!(f, "filesystem allows names of {allowed} bytes; SteadQ needs {needed}")?,
            ErrorKind::Incomplete => f.write_str("queue layout incomplete (an interrupted init?); run `steadq init` again")?,
            ErrorKind::PayloadTooLarge { len, limit } => write!(f, "payload of {len} bytes exceeds the limit of {limit} bytes")?,
            ErrorKind::Corrupt(c) => write!(f, "corrupt job file ({c}); moved to dead/")?,
            ErrorKind::NoSuchJob => f.write_str("no such job")?,
            ErrorKind::InvalidArgument(what) => write!(f, "invalid argument: {what}")?,
        }
        if self.0.outcome == Outcome::Indeterminate {
            f.write_str(" [outcome indeterminate: the operation may have happened]")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Shorthand.
pub type Result<T> = core::result::Result<T, Error>;
