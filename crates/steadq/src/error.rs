//! Errors and the three outcomes.
//!
//! Every mutating call returns `Ok` only when it is **done**: past its linearization point
//! (the rename or link) and every durability barrier its policy asks for. Its `Err` is a type
//! whose variants are the outcomes it can have: **not done** (nothing changed that matters:
//! the failure came before the linearization point, or the rename itself failed cleanly) or
//! **indeterminate** (the change may or may not have happened, or may not survive a crash: a
//! barrier failed after the rename, or the rename failed with `EIO`), and where an operation
//! has more to say, its own variants ([`Error`], [`EnqueueError`](crate::EnqueueError), [`RenewError`](crate::RenewError),
//! [`SettleError`](crate::SettleError)). A read-only call changed nothing: its error is always
//! [`Error::NotDone`]. Every variant holds a [`Cause`]: what went wrong and where. SteadQ
//! never guesses and never retries an fsync into "done".

use crate::disk::format::Corruption;
use crate::disk::name::JobId;
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

/// The outcome of a failed mutating call, as [`Error::outcome`] and the other outcome
/// types' `outcome()` give it.
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
    /// settled already; or, for a renewal of a job of a group with a limit, the lease
    /// expired and a claim took its slot, and no slot is free (DESIGN.md, Groups). Nothing
    /// was changed.
    LeaseLost,
    /// No `steadq.queue` identity file: the directory is not a queue.
    NotAQueue,
    /// `Queue::create` (`steadq init`) on a directory that is neither a queue nor empty: it
    /// holds `entry` (the first, by name, that no queue holds), so a typo (`steadq init
    /// /var/lib`) does not make a queue among someone's files. `lost+found` (at a filesystem root) and SteadQ's own
    /// entries (an interrupted `init`) are allowed. Not done, nothing changed.
    NotEmpty {
        /// The first foreign entry, by name.
        entry: String,
    },
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
    /// The identity file is missing or damaged, shard directories are missing too, and the
    /// job names fit more than one shard count (or none), none of them the one asked for:
    /// restoring with a wrong count would strand the jobs it misplaces. Not done; `steadq
    /// init DIR --shards N` with the count the queue was made with restores it.
    ShardsUnknown {
        /// The counts every job name fits, ascending (at most 256 entries; empty: none).
        fits: Vec<u16>,
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
    /// A directory of the queue's layout (named by the error's path) is on another
    /// filesystem than the queue root (a mount under it): a rename between the two fails
    /// with `EXDEV`, so no job could cross. Not done.
    OtherFilesystem {
        /// Its `st_dev`.
        dev: u64,
        /// The queue root's `st_dev`.
        root_dev: u64,
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
    /// The filesystem has fewer free inodes (`statfs(2)` `f_ffree`) than a new queue's
    /// layout takes (`2 × shards + 8`: its directories, the queue's own directory included
    /// when `create` makes it, the identity and the evidence log). Not done: `create`
    /// refused before making anything (and removed the directory it made).
    TooFewInodes {
        /// Inodes the new queue takes.
        needed: u64,
        /// Inodes free on the filesystem.
        free: u64,
    },
    /// A directory the layout requires is missing (an interrupted `create`: run it again).
    Incomplete,
    /// The queue's directory was removed, or removed and made again, since this handle
    /// opened it (`rm -r`, then perhaps `steadq init`): no job reaches the directory this
    /// handle holds any more. The path is the queue's root. Not done: open the queue again.
    /// A waiting claim (`Queue::claim_with`, `AsyncQueue::claim_with` with a wait) returns it within
    /// about a second instead of waiting out its timeout on a queue nobody else sees.
    Replaced,
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
    /// A dependency named by an enqueue (`EnqueueOptions::after`, `enqueue --after`) cannot
    /// be waited for: `problem` says why (not in this queue, named twice, dead-lettered).
    /// Not done, nothing written.
    BadDependency {
        /// The dependency's id.
        id: crate::disk::name::JobId,
        /// Why it was refused.
        problem: &'static str,
    },
    /// The queue is at its capacity limit (`steadq.limits`): the enqueue was not done. The
    /// figures are what the check counted (ready + leased + delayed + waiting, and this handle's
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
        /// Jobs the refused enqueue would have added (1, or a batch's count).
        adding_jobs: u64,
        /// Bytes of job files it would have added (headers included).
        adding_bytes: u64,
    },
    /// An enqueue found no shard of the job's priority level that this user may make files
    /// in: each refused on its own (`EACCES` or `EPERM` from `faccessat2(2)` or `open(2)`),
    /// so no job was made. The path is the level's directory (`ready`, `prio/<l>`). Not done.
    NoWritableShard {
        /// Shards of the level, each refused.
        shards: u16,
        /// The errno of the refusals.
        errno: OsErrno,
    },
    /// The limits file `steadq.limits` is damaged (syntax or checksum).
    BadLimits,
    /// The counts file `steadq.counts` is damaged (syntax or checksum). Not done.
    BadCounts,
    /// The counting lock (an exclusive `flock(2)` on the queue root, held by compaction,
    /// dead requeue and dead purge while they run) was held by another process for all of
    /// [`crate::COUNTS_LOCK_WAIT`]. The path is the queue root. Not done, nothing changed.
    CountsBusy {
        /// How long this process waited, in ms.
        waited_ms: u64,
    },
    /// A ready shard (the path) is a directory owned by another user than `ready/`: not
    /// the one `init` made (someone moved it away and made their own). It is never listed
    /// nor placed into. Not done.
    ForeignDir {
        /// The directory's owner (uid).
        owner: u32,
        /// The owner of `ready/` (uid).
        expected: u32,
    },
    /// An idempotency key entry in `keys/` is unreadable or names another key.
    BadKeyEntry,
    /// An enqueue with an idempotency key found the key's entry (the path) held by a
    /// process that seems alive and has not published its job, and stopped waiting after
    /// [`crate::KEY_WAIT_MAX`]: an enqueue with the same key still in progress (a large
    /// streamed payload), or an entry planted by a user of the queue, whose creator pid,
    /// liveness and age (ctime) are not to be trusted. Not done, nothing enqueued.
    KeyPending {
        /// The creator pid the entry names.
        pid: i32,
        /// The entry's owner (uid).
        owner: u32,
        /// How long this enqueue waited, ms.
        waited_ms: u64,
    },
    /// A typed payload could not be encoded, or a claimed one decoded (`TypedQueue`,
    /// feature `serde`); the text says why.
    Decode(String),
    /// Reading the payload of a streamed enqueue (`Queue::enqueue_reader`) failed: not done;
    /// the text is the reader's error (the caller knows what it was reading).
    Input(String),
}

/// What went wrong and where (a path when there is one), with the errno of a failed system
/// call: what every variant of [`Error`] and of the per-operation error types holds (their
/// `cause()`), without the outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause(Box<Inner>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Inner {
    kind: ErrorKind,
    /// Inside the crate, the outcome travels with the error until the public boundary turns
    /// it into a variant of the operation's error type.
    outcome: Outcome,
    path: Option<PathBuf>,
    /// The job an indeterminate enqueue may have made ([`EnqueueError::Indeterminate`](crate::EnqueueError::Indeterminate)).
    job: Option<JobId>,
    /// For a failed move: the directory it was moving into (a rename fails for either side).
    into: Option<PathBuf>,
}

impl Cause {
    /// A new cause: `kind`, about `path`. It has no outcome; converted into an [`Error`]
    /// (`?`) it is [`Error::NotDone`] unless wrapped as [`Error::Indeterminate`].
    pub fn new(kind: ErrorKind, path: Option<PathBuf>) -> Cause {
        Cause(Box::new(Inner {
            kind,
            outcome: Outcome::NotDone,
            path,
            job: None,
            into: None,
        }))
    }

    /// A "not done" error.
    pub(crate) fn not_done(kind: ErrorKind, path: Option<PathBuf>) -> Cause {
        Cause::new(kind, path)
    }

    /// A failed system call.
    pub(crate) fn io(call: Call, errno: Errno, outcome: Outcome, path: Option<PathBuf>) -> Cause {
        let errno = errno.into();
        Cause::new(ErrorKind::Io { call, errno }, path).with_outcome(outcome)
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    /// Not done, or indeterminate (inside the crate; the public types say it by variant).
    pub(crate) fn outcome(&self) -> Outcome {
        self.0.outcome
    }

    /// The file or directory involved, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.0.path.as_deref()
    }

    /// For a failed move between directories (`renameat2`), the directory it was moving
    /// into: `rename(2)` fails with `EACCES` when either directory is not writable, so
    /// [`Cause::path`] (the source) alone may point at the wrong one. For
    /// [`ErrorKind::Corrupt`], the directory the corrupt job was moved to (`dead/`), or
    /// `None` when it was left where it is.
    pub fn into_dir(&self) -> Option<&std::path::Path> {
        self.0.into.as_deref()
    }

    /// The same error, naming `dir` as the directory its move was going into.
    pub(crate) fn moving_into(mut self, dir: PathBuf) -> Cause {
        self.0.into = Some(dir);
        self
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

    pub(crate) fn with_outcome(mut self, outcome: Outcome) -> Cause {
        self.0.outcome = outcome;
        self
    }

    /// The job an indeterminate enqueue may have made, if named ([`Cause::with_job`]).
    pub(crate) fn job(&self) -> Option<JobId> {
        self.0.job
    }

    /// Name the job an indeterminate enqueue may have made.
    pub(crate) fn with_job(mut self, id: JobId) -> Cause {
        self.0.job = Some(id);
        self
    }
}

impl core::fmt::Display for Cause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if let Some(p) = &self.0.path {
            write!(f, "{}: ", p.display())?;
        }
        match &self.0.kind {
            ErrorKind::Io { call, errno } => {
                if let Some(into) = &self.0.into {
                    write!(f, "moving it into {}/: ", into.display())?;
                }
                fmt_io(f, *call, *errno, self.0.outcome)?
            }
            ErrorKind::Corrupt(c) => {
                write!(f, "corrupt job file ({c})")?;
                match &self.0.into {
                    Some(into) => write!(f, "; moved to {}/", into.display())?,
                    None => f.write_str("; left where it is")?,
                }
            }
            ErrorKind::IdentityLost { jobs, ids } => fmt_identity_lost(f, *jobs, *ids)?,
            ErrorKind::ShardsUnknown { fits } => fmt_shards_unknown(f, fits)?,
            ErrorKind::QueueFull {
                jobs,
                bytes,
                max_jobs,
                max_bytes,
                adding_jobs,
                adding_bytes,
            } => {
                write!(f, "queue full: {jobs} jobs")?;
                if let Some(m) = max_jobs {
                    write!(f, " (limit {m})")?;
                }
                if let Some(m) = max_bytes {
                    write!(f, ", {bytes} bytes (limit {m})")?;
                }
                let s = if *adding_jobs == 1 { "" } else { "s" };
                write!(f, "; this enqueue adds {adding_jobs} job{s}")?;
                if max_bytes.is_some() {
                    write!(f, " of {adding_bytes} bytes")?;
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
    if errno == Errno::LOOP.into() && call == crate::disk::sys::Call::Open {
        // `openat2(RESOLVE_NO_SYMLINKS)` answers ELOOP for any symlink on the path.
        return write!(
            f,
            "{} failed: a symlink ({errno}); SteadQ never follows a symlink inside a queue, \
             nor another user's at the queue's own path: move it away (`steadq fsck` names \
             one inside)",
            call.name()
        );
    }
    if (errno == Errno::NXIO.into() || errno == Errno::ISDIR.into())
        && call == crate::disk::sys::Call::Open
    {
        // `Sys` opens a queue's own files only when they are regular files: a fifo, socket
        // or device is `ENXIO`, a directory `EISDIR` (`sys::require_regular`).
        let what = match errno == Errno::ISDIR.into() {
            true => "a directory",
            false => "a fifo, socket or device",
        };
        return write!(
            f,
            "{} failed: not a regular file ({what}: {errno}); SteadQ opens only regular \
             files inside a queue and never reads or writes this one: move it away \
             (`steadq fsck` names it)",
            call.name()
        );
    }
    if errno == Errno::MLINK.into() && call == crate::disk::sys::Call::Open {
        // `Sys` writes a queue's own files in place only when they have one name
        // (`sys::require_single_regular`): another is a hard link, maybe to a file outside.
        return write!(
            f,
            "{} failed: the file has more than one link ({errno}); another name may be a \
             file outside the queue, so SteadQ never writes this one: move it away",
            call.name()
        );
    }
    if errno == Errno::MFILE.into() {
        // Seen first at a queue's open under a low `ulimit -n` (a handle holds every ready
        // and receipt shard open: 2 per shard and a few more): say which limit and what to do.
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let soft = soft.map_or("unlimited".to_string(), |n| n.to_string());
        return write!(
            f,
            "{} failed: {errno}: the process's open-file limit (RLIMIT_NOFILE, now {soft}) is \
             reached; a queue handle holds 2 directories per shard open and a few more: raise \
             `ulimit -n`",
            call.name()
        );
    }
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

/// [`ErrorKind::ShardsUnknown`].
fn fmt_shards_unknown(f: &mut core::fmt::Formatter<'_>, fits: &[u16]) -> core::fmt::Result {
    write!(
        f,
        "the identity file {} is missing and so are shard directories: the shard count \
         cannot be told from the layout",
        crate::disk::layout::IDENTITY_FILE
    )?;
    match fits {
        [] => write!(f, ", and no count from 1 to 256 fits every job name"),
        [n] => write!(
            f,
            "; the job names fit only {n} (run `steadq init DIR --shards {n}`)"
        ),
        _ => {
            let shown: Vec<String> = fits.iter().take(8).map(|n| n.to_string()).collect();
            let more = if fits.len() > 8 { ", ..." } else { "" };
            write!(
                f,
                "; the job names fit {}{more}: run `steadq init DIR --shards N` with the count it was made with",
                shown.join(", ")
            )
        }
    }
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
/// `Cause::fmt` itself).
fn fmt_message(f: &mut core::fmt::Formatter<'_>, kind: &ErrorKind) -> core::fmt::Result {
    match kind {
        ErrorKind::Io { .. }
        | ErrorKind::IdentityLost { .. }
        | ErrorKind::ShardsUnknown { .. }
        | ErrorKind::QueueFull { .. } => Ok(()),
        ErrorKind::PayloadTooLarge { len, limit } => write!(
            f,
            "payload of {len} bytes exceeds the limit of {limit} bytes"
        ),
        // Whether it was moved is the error's `into` (see `Display for Cause`).
        ErrorKind::Corrupt(c) => write!(f, "corrupt job file ({c})"),
        ErrorKind::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
        ErrorKind::BadDependency { id, problem } => {
            write!(f, "invalid argument: dependency {id} {problem}")
        }
        ErrorKind::LeaseLost => f.write_str(LEASE_LOST),
        ErrorKind::NoSuchJob => f.write_str("no such job"),
        ErrorKind::Decode(what) => write!(f, "typed payload: {what}"),
        ErrorKind::Input(what) => write!(f, "reading the payload failed: {what}"),
        ErrorKind::KeyPending {
            pid,
            owner,
            waited_ms,
        } => write!(
            f,
            "idempotency key entry held by pid {pid} (entry owned by uid {owner}), whose job \
             did not appear in {waited_ms} ms: not done, nothing enqueued (try again; if no \
             enqueue with this key is running, remove the entry)"
        ),
        ErrorKind::CountsBusy { waited_ms } => write!(
            f,
            "another process held the counting lock (flock of the queue directory: a \
             compact, dead requeue or dead purge running, or a member's process holding it) \
             for all of {waited_ms} ms: not done, nothing changed (try again; fuser or lsof \
             on the directory names the holder)"
        ),
        ErrorKind::BadKeyEntry => {
            f.write_str("idempotency key entry is damaged or names another key")
        }
        ErrorKind::UnsupportedVersion { .. }
        | ErrorKind::UnsupportedFilesystem { .. }
        | ErrorKind::OtherFilesystem { .. }
        | ErrorKind::RenameRefused { .. }
        | ErrorKind::TooFewInodes { .. }
        | ErrorKind::NamesTooLong { .. }
        | ErrorKind::NotAQueue
        | ErrorKind::NotEmpty { .. }
        | ErrorKind::BadIdentity
        | ErrorKind::Incomplete
        | ErrorKind::Replaced
        | ErrorKind::NoWritableShard { .. }
        | ErrorKind::ForeignDir { .. }
        | ErrorKind::BadLimits
        | ErrorKind::BadCounts => fmt_layout_message(f, kind),
    }
}

/// The kinds about the queue's layout and filesystem, for [`fmt_message`].
fn fmt_layout_message(f: &mut core::fmt::Formatter<'_>, kind: &ErrorKind) -> core::fmt::Result {
    match kind {
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
        ErrorKind::OtherFilesystem { dev, root_dev } => write!(
            f,
            "on another filesystem (st_dev {dev}, the queue root is {root_dev}); a queue must \
             be on one filesystem so that its renames are atomic"
        ),
        ErrorKind::RenameRefused { errno } => write!(
            f,
            "renameat2(RENAME_NOREPLACE) was refused by the system ({errno}): the call is \
             blocked (a seccomp profile or sandbox?), not unsupported by the filesystem; \
             allow renameat2"
        ),
        ErrorKind::TooFewInodes { needed, free } => write!(
            f,
            "a new queue takes {needed} inodes and the filesystem has {free} free (remove files, or give the filesystem more inodes: mkfs.ext4 -N, tmpfs nr_inodes=)"
        ),
        ErrorKind::NamesTooLong { allowed, needed } => write!(
            f,
            "filesystem allows names of {allowed} bytes; SteadQ needs {needed}"
        ),
        ErrorKind::NotAQueue => f.write_str(NOT_A_QUEUE),
        ErrorKind::NotEmpty { entry } => write!(
            f,
            "not a queue, and not empty (it holds {entry:?}): `init` makes a queue only in a \
             new or empty directory, or completes one whose creation was interrupted; not \
             done, nothing changed"
        ),
        ErrorKind::BadIdentity => f.write_str(BAD_IDENTITY),
        ErrorKind::Incomplete => f.write_str(INCOMPLETE),
        ErrorKind::Replaced => f.write_str(
            "removed or replaced since this queue handle opened it (no job reaches the \
             directory the handle holds); not done: open the queue again",
        ),
        ErrorKind::NoWritableShard { shards, errno } => write!(
            f,
            "this user may not make job files in any of its {shards} shards ({errno}); not \
             done, nothing changed: give the shards the owner and mode of the queue's other \
             directories, or enqueue as a user who may"
        ),
        ErrorKind::BadCounts => f.write_str(
            "the counts file steadq.counts is damaged (malformed, or its sum= line does not \
             match); not done: remove it to count again from the entries present (the \
             totals then restart lower)",
        ),
        ErrorKind::BadLimits => f.write_str(
            "the limits file steadq.limits is damaged (malformed, or its sum= line does not \
             match); set the limits again",
        ),
        ErrorKind::ForeignDir { owner, expected } => write!(
            f,
            "a directory of uid {owner} where the queue's shard (owned by uid {expected}, the \
             owner of ready/) belongs: never used; not done (move it away and run `steadq \
             init` as uid {expected})"
        ),
        _ => Ok(()),
    }
}

const LEASE_LOST: &str = "lease lost (expired and recovered, or expired with its group slot \
     taken by another lease; renewed elsewhere, or already settled)";
const NOT_A_QUEUE: &str = "not a SteadQ queue (no steadq.queue file; run `steadq init`)";
const BAD_IDENTITY: &str = "the identity file steadq.queue is damaged (malformed, or its sum= \
    line does not match); run `steadq init` on the queue directory to restore it from the job \
    headers";
const INCOMPLETE: &str = "queue layout incomplete (an interrupted init?); run `steadq init` again";

impl std::error::Error for Cause {}

/// Inside the crate: `Result<T>` carries a [`Cause`] (with its outcome) until the public
/// boundary turns it into the operation's error type.
pub(crate) type Result<T, E = Cause> = core::result::Result<T, E>;

/// Display `e` as the failure of outcome `o` (the indeterminate note follows the variant,
/// also for a variant built outside the crate).
pub(crate) fn display_as(
    e: &Cause,
    o: Outcome,
    f: &mut core::fmt::Formatter<'_>,
) -> core::fmt::Result {
    if e.outcome() == o {
        core::fmt::Display::fmt(e, f)
    } else {
        core::fmt::Display::fmt(&e.clone().with_outcome(o), f)
    }
}

/// The accessors every outcome type shares: the [`Cause`] inside and what it says.
macro_rules! error_accessors {
    () => {
        /// What went wrong ([`Cause::kind`] of the error inside).
        pub fn kind(&self) -> &$crate::ErrorKind {
            self.cause().kind()
        }

        /// The file or directory involved, if any.
        pub fn path(&self) -> Option<&std::path::Path> {
            self.cause().path()
        }

        /// The errno, for [`ErrorKind::Io`].
        pub fn errno(&self) -> Option<$crate::OsErrno> {
            self.cause().errno()
        }

        /// The cause inside, without its outcome.
        pub fn into_cause(self) -> $crate::Cause {
            self.into_parts().1
        }
    };
}
pub(crate) use error_accessors;

/// A SteadQ error, outcome-typed: what a function making several SteadQ calls returns
/// (`steadq::Result<T>`). The calls whose only outcomes are the two, not done or
/// indeterminate (`create`, claims, `recover`, `set_limits`, the dead-letter and receipt
/// administration, `fsck_quarantine`), return it directly; a read-only call (`open`,
/// `status`, `list`, `fsck`, ...) returns it as [`Error::NotDone`], always. `?` turns every
/// per-operation error type ([`EnqueueError`](crate::EnqueueError), [`RenewError`](crate::RenewError), [`SettleError`](crate::SettleError)) into an
/// `Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Not done: nothing changed that matters (the failure came before the linearization
    /// point, or the rename itself failed cleanly).
    NotDone(Cause),
    /// Indeterminate: it may have happened, or may not survive a crash (a barrier failed
    /// after the rename, the rename returned `EIO`, or a batch failed after part of it was
    /// done). Look at the queue to learn which.
    Indeterminate(Cause),
}

impl Error {
    /// Not done, or indeterminate.
    pub fn outcome(&self) -> Outcome {
        match self {
            Error::NotDone(_) => Outcome::NotDone,
            Error::Indeterminate(_) => Outcome::Indeterminate,
        }
    }

    /// The cause: what went wrong, and where.
    pub fn cause(&self) -> &Cause {
        match self {
            Error::NotDone(e) | Error::Indeterminate(e) => e,
        }
    }

    /// True for [`ErrorKind::LeaseLost`] (always not done).
    pub fn is_lease_lost(&self) -> bool {
        self.cause().is_lease_lost()
    }

    fn into_parts(self) -> (Outcome, Cause) {
        match self {
            Error::NotDone(e) => (Outcome::NotDone, e),
            Error::Indeterminate(e) => (Outcome::Indeterminate, e),
        }
    }

    error_accessors!();

    /// Back inside the crate: the cause, carrying this error's outcome.
    pub(crate) fn into_internal(self) -> Cause {
        let (o, c) = self.into_parts();
        c.with_outcome(o)
    }
}

impl From<Cause> for Error {
    /// The outcome the error carries inside the crate; an error of a read-only call is
    /// always [`Error::NotDone`].
    fn from(e: Cause) -> Error {
        match e.outcome() {
            Outcome::NotDone => Error::NotDone(e),
            Outcome::Indeterminate => Error::Indeterminate(e),
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        display_as(self.cause(), self.outcome(), f)
    }
}

impl std::error::Error for Error {}
