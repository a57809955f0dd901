//! fsck: check every entry of a queue (name, tag, place, file type, both digests) and report
//! one problem per bad entry; optionally move the bad ones to `quarantine/<same path>`.
//!
//! When the identity file is what is wrong (most job names fail the tag check and their
//! headers agree on another queue id), one problem names `steadq.queue` and nothing is
//! quarantined.
//!
//! Dead jobs with reason `corrupt` are where corrupt jobs belong: they are counted, not
//! reported.
//!
//! This file holds the report (what a problem is and how it reads) and the run; the checks
//! are beside it: the job files (`fsck/jobs.rs`), the layout (`fsck/layout.rs`), the files
//! beside the jobs (`fsck/side.rs`), the dependency directories (`fsck/deps.rs`), and the report with `--quarantine`
//! (`fsck/quarantine.rs`).

mod deps;
mod groups;
mod jobs;
mod layout;
mod quarantine;
mod side;

use crate::disk::format::Corruption;
use crate::disk::name::NameError;
use crate::disk::scan::Foreign;
use crate::error::Result;
use crate::queue::Queue;

/// What is wrong with an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// A foreign entry (see [`Foreign`]).
    Foreign(Foreign),
    /// A job file that fails verification.
    Corrupt(Corruption),
    /// The entry could not be read.
    Unreadable(crate::OsErrno),
    /// A directory of the layout this user may not open (`EACCES`, `EPERM`: a member's
    /// `needs/<id>` at mode 000): its entries are not checked. Never moved.
    UnreadableDir(crate::OsErrno),
    /// A valid job of this queue in a directory its name does not belong in (a level-5 job
    /// in level 2's shard, a job in another shard, a delayed job in another bucket, a
    /// receipt in another shard): the directory it belongs in, relative to the root.
    /// `--quarantine` moves it to `quarantine/` like any other problem, never to where it
    /// belongs: once the job was settled and its receipt removed (receipt policy `none`,
    /// compaction, a purged dead job), nothing on disk tells a stale copy from the only one,
    /// and moving a stale copy there would run a settled job again.
    Misplaced(String),
    /// The same job id also exists at this other path (never quarantined automatically:
    /// which copy is right is the operator's call). Two names of *one file* (link count 2)
    /// are a move between directories that a crash split (seen on btrfs); the next recovery
    /// (a claim that meets the lease, `recover`) keeps the newer generation and removes the
    /// older name (`ops/split.rs`), after which fsck no longer reports it.
    Duplicate(String),
    /// An entry that is not a regular file where none belongs: `"directory"` (one holding
    /// no job file of this queue), `"symlink"`, `"fifo"`, `"socket"` or `"device"`. Checked
    /// before the name, so a symlink with a job-like name is reported as a symlink.
    NotRegular(&'static str),
    /// A directory where none belongs holding this many job files of this queue (regular
    /// files whose names verify, up to three levels down). Never moved by `--quarantine`: the
    /// jobs would leave the queue unseen. The operator moves each where its name belongs
    /// (`--quarantine` moves them home once they are direct entries of a job directory).
    JobsInside(u64),
    /// Not a directory where the layout has one (a file or a symlink named `prio`, `tmp`,
    /// `dead`, `delayed` or `receipts` in the root, `5` in `prio/`, `03` in `ready/` or
    /// `receipts/`): what is behind it cannot be read or made (a symlink is never
    /// followed), so the jobs that belong there cannot be placed or taken until it is moved
    /// away. Everything else goes on. In the root it is never
    /// moved (`--quarantine` moves no root entry); in `prio/` or a shard parent it is
    /// quarantined like any stray.
    NotADirectory,
    /// A default-level ready shard owned by another user than `ready/` (`init` makes
    /// every shard as the owner of `ready/`): someone put their own directory in its place,
    /// and the owner's shard, with its jobs, may be elsewhere. No claim lists it and no job
    /// is placed there. Never moved by `--quarantine` (it may hold jobs): the owner moves it
    /// away and runs `steadq init`, which makes the shard again.
    ForeignOwner {
        /// The directory's owner (uid).
        owner: u32,
        /// The owner of `ready/` (uid).
        expected: u32,
    },
    /// A file that does not decode: `steadq.limits` (every enqueue fails while it is
    /// damaged; `--quarantine` moves it to `quarantine/`, leaving the queue without limits),
    /// or a live idempotency key entry in `keys/` (every enqueue with its key fails; never
    /// moved).
    Damaged(&'static str),
    /// An entry of `keys/` whose name is neither a key entry's nor a tombstone's.
    NotKeyName,
    /// An entry of `groups/` that is no group directory or no live slot (DESIGN.md, Groups):
    /// what is wrong. Claims skip it (never followed); `--quarantine` moves it aside.
    BadSlot(&'static str),
    /// An evidence file (`evidence.log` or a rotated one) with appends a crash cut short:
    /// `lines` lines that do not parse (a fragment the next append ended, a run of zeros),
    /// and a last line of `tail` bytes without its newline (0: none; the next ack ends it
    /// before appending). The acks those fragments recorded are not evidence. Never moved.
    TornEvidence {
        /// Lines that are not whole evidence lines.
        lines: u64,
        /// Bytes after the last newline.
        tail: u64,
    },
    /// A directory made on demand (`keys/`, `prio/`, a level or its shard, a delayed or dead
    /// bucket) that lacks a right the layout directory it is shared like (`like`: `ready`,
    /// `delayed` or `dead`) grants: a read, write or search bit, or setgid, or, under
    /// another group, a right the template's group has and others lack here. Its maker was killed between its `mkdirat`
    /// and the `fchown`/`fchmod` that share it (`ops/making.rs`), or someone changed it:
    /// other users of the queue may be refused there for good. `--quarantine` gives it the
    /// template's owner (root only), group and mode in place (`Problem::quarantined`), never
    /// moves it: it may hold jobs.
    NotShared {
        /// The layout directory it should be like, relative to the root.
        like: &'static str,
        /// Its permission bits (`st_mode & 0o7777`).
        mode: u32,
        /// Its group id.
        gid: u32,
        /// The template's permission bits.
        want_mode: u32,
        /// The template's group id.
        want_gid: u32,
    },
    /// A directory of the layout on another filesystem than the queue root (a mount under
    /// it): every rename between the two fails with `EXDEV`, so a job there can neither come
    /// nor go. Never moved.
    OtherFilesystem {
        /// Its `st_dev`.
        dev: u64,
        /// The queue root's `st_dev`.
        root_dev: u64,
    },
    /// `--quarantine` did not move this entry (its problem is `kind`) because its quarantine
    /// path `at` (relative to the root) already exists: a name planted there, or an entry
    /// quarantined before under the same name. Never replaced; the other entries are moved
    /// all the same. Move `at` away and run `steadq fsck --quarantine` again.
    QuarantineTaken {
        /// What is wrong with the entry itself.
        kind: Box<ProblemKind>,
        /// The quarantine path that is taken, relative to the root.
        at: String,
    },
    /// A lease of this boot whose deadline is further away than the longest lease
    /// ([`crate::MAX_LEASE`]): no claim or renewal wrote it, so its name was forged to hide
    /// the job. Recovery (`steadq recover`, any claim of its slot) treats it as expired and
    /// gives the job back; never moved by `--quarantine`.
    LeaseBeyondCap {
        /// How far away its deadline is, ns.
        deadline_in_ns: u64,
    },
    /// Reported once, on `steadq.queue`: most job names fail the tag check, and their headers
    /// all name one other queue id. The identity is what is wrong, not the jobs; nothing is
    /// quarantined.
    IdentityMismatch {
        /// The queue id in `steadq.queue`.
        identity: u128,
        /// The queue id the job headers agree on.
        jobs_id: u128,
        /// Job files whose names fail the tag check.
        jobs: u32,
    },
}

/// One problem found by [`Queue::fsck`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Path relative to the queue root.
    pub path: String,
    /// What is wrong.
    pub kind: ProblemKind,
    /// Whether `--quarantine` dealt with it: moved it to `quarantine/`, or, for
    /// [`ProblemKind::NotShared`], shared the directory in place.
    pub quarantined: bool,
}

impl core::fmt::Display for Problem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: ", self.path)?;
        describe(&self.kind, f)?;
        match (&self.kind, self.quarantined) {
            (ProblemKind::NotShared { .. }, false) => {
                f.write_str(" (`steadq fsck --quarantine` shares it in place)")?
            }
            (_, false) => {}
            (ProblemKind::NotShared { like, .. }, true) => write!(f, " (now shared like {like}/)")?,
            (_, true) => f.write_str(" (moved to quarantine/)")?,
        }
        Ok(())
    }
}

/// What `kind` says of an entry's content or name; the kinds about where an entry is and
/// what it is (a directory, its owner, its sharing, its filesystem) are [`describe_place`]'s.
fn describe(kind: &ProblemKind, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
    match kind {
        ProblemKind::Foreign(x) => write!(f, "{x}"),
        ProblemKind::Corrupt(c) => write!(f, "corrupt: {c}"),
        ProblemKind::Duplicate(other) => write!(f, "the same job id is also at {other}"),
        ProblemKind::NotRegular(what) => write!(f, "foreign: {what}"),
        ProblemKind::Damaged(what) => write!(f, "damaged: {what}"),
        ProblemKind::BadSlot(what) => write!(f, "group slot: {what}"),
        ProblemKind::TornEvidence { lines, tail } => write!(
            f,
            "torn evidence (an append cut short by a crash): {lines} line(s) that are not \
             evidence, a last line of {tail} byte(s) without its newline"
        ),
        ProblemKind::NotKeyName => {
            f.write_str("foreign: not a key entry (<64 hex>) or tombstone (<64 hex>.<32 hex>.gone)")
        }
        ProblemKind::IdentityMismatch {
            identity,
            jobs_id,
            jobs,
        } => write!(
            f,
            "the identity file names queue id {identity:032x}, but {jobs} job files \
             carry queue id {jobs_id:032x} in their headers and fail the name tag \
             check: the identity file is wrong, not the jobs (restore it from a backup, \
             or remove it and run `steadq init`, which restores it from the headers)"
        ),
        ProblemKind::Unreadable(e) => write!(
            f,
            "unreadable: {} (not verified; left for a user who may read it)",
            std::io::Error::from_raw_os_error(e.raw_os_error())
        ),
        ProblemKind::UnreadableDir(e) => write!(
            f,
            "unreadable directory: {} (its entries are not checked; left for a user who may \
             read it, or for its owner or root to share again)",
            std::io::Error::from_raw_os_error(e.raw_os_error())
        ),
        ProblemKind::LeaseBeyondCap { deadline_in_ns } => write!(
            f,
            "lease deadline {} days away, past the 7-day lease cap: forged; it counts as \
             expired (`steadq recover` gives the job back)",
            deadline_in_ns / 86_400_000_000_000
        ),
        ProblemKind::QuarantineTaken { kind, at } => {
            let inner = Problem {
                path: String::new(),
                kind: (**kind).clone(),
                quarantined: false,
            }
            .to_string();
            write!(
                f,
                "{}; not moved: its quarantine path {at} already exists (never replaced: \
                 move {at} away and run `steadq fsck --quarantine` again)",
                inner.trim_start_matches(": ")
            )
        }
        _ => describe_place(kind, f),
    }
}

/// What `kind` says of where an entry is or what it is (see [`describe`]).
fn describe_place(kind: &ProblemKind, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
    match kind {
        ProblemKind::NotADirectory => f.write_str(
            "not a directory where the queue keeps jobs (a file, or a symlink, never \
             followed): jobs that belong behind it can be neither placed nor taken \
             until it is moved away",
        ),
        ProblemKind::ForeignOwner { owner, expected } => write!(
            f,
            "owned by uid {owner}, not by the owner of ready/ (uid {expected}): not the \
             shard init made; its jobs are not taken and no job is placed there (move it \
             away and run `steadq init` as uid {expected})"
        ),
        ProblemKind::NotShared {
            like,
            mode,
            gid,
            want_mode,
            want_gid,
        } => write!(
            f,
            "not shared like {like}/: mode {mode:o} group {gid}, where {like}/ has mode \
             {want_mode:o} group {want_gid}; other users of the queue may be refused here"
        ),
        ProblemKind::OtherFilesystem { dev, root_dev } => write!(
            f,
            "on another filesystem (st_dev {dev}, the queue root is {root_dev}); a queue \
             must be on one filesystem so that its renames are atomic (every command but \
             fsck and status refuses the queue)"
        ),
        ProblemKind::JobsInside(n) => write!(
            f,
            "foreign: directory holding {n} job file{} of this queue, left in place \
             (move each job to where its name belongs)",
            if *n == 1 { "" } else { "s" }
        ),
        ProblemKind::Misplaced(home) => write!(
            f,
            "misplaced: its name belongs in {home}/ (fsck never moves it there: a copy of a \
             job settled since would run again; move it by hand if it is the only one)"
        ),
        ProblemKind::Foreign(_)
        | ProblemKind::Corrupt(_)
        | ProblemKind::Duplicate(_)
        | ProblemKind::NotRegular(_)
        | ProblemKind::Damaged(_)
        | ProblemKind::TornEvidence { .. }
        | ProblemKind::NotKeyName
        | ProblemKind::BadSlot(_)
        | ProblemKind::IdentityMismatch { .. }
        | ProblemKind::Unreadable(_)
        | ProblemKind::UnreadableDir(_)
        | ProblemKind::LeaseBeyondCap { .. }
        | ProblemKind::QuarantineTaken { .. } => describe(kind, f),
    }
}

/// The result of [`Queue::fsck`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Entries checked.
    pub checked: u64,
    /// Job files whose digests were verified.
    pub verified: u64,
    /// Dead jobs with reason `corrupt` (expected, not problems).
    pub dead_corrupt: u64,
    /// Problems, one per bad entry.
    pub problems: Vec<Problem>,
}

impl FsckReport {
    /// True when there is no problem.
    pub fn clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Queue {
    /// Check every entry, changing nothing ([`Queue::fsck_quarantine`] also moves the bad
    /// ones aside).
    ///
    /// # Errors
    /// [`crate::ErrorKind::Io`] if a directory cannot be listed. Nothing was changed.
    pub fn fsck(&self) -> crate::Result<FsckReport> {
        Ok(self.fsck_with(false)?)
    }

    /// Check every entry and move each bad entry to `quarantine/<its path>` (renamed without
    /// replacing; never followed).
    ///
    /// # Errors
    /// [`crate::ErrorKind::Io`] if a directory cannot be listed (not done), or a quarantine
    /// move fails: not done, or indeterminate when the move may have happened or moves
    /// before it are done (they stay done). First the rename probe of [`Queue::open`] (a
    /// handle opened with [`crate::OpenMode::Check`] was opened without it): its refusal
    /// ([`crate::ErrorKind::UnsupportedFilesystem`], ...) moves nothing.
    pub fn fsck_quarantine(&self) -> Result<FsckReport, crate::Error> {
        self.probe_renames()?;
        Ok(self.fsck_with(true)?)
    }

    /// [`Queue::fsck`], and with `quarantine` [`Queue::fsck_quarantine`], with the crate's
    /// error.
    pub(crate) fn fsck_with(&self, quarantine: bool) -> Result<FsckReport> {
        let mut rep = FsckReport::default();
        let mut bad = Bad::new();
        let v3 = self.ident.version >= 3;
        if let Some((path, dev, root_dev)) =
            crate::queue::other_filesystem(&self.sys, &self.dirs, &self.ident)
        {
            rep.problems.push(Problem {
                path,
                kind: ProblemKind::OtherFilesystem { dev, root_dev },
                quarantined: false,
            });
        }
        self.check_root(v3, &mut rep, &mut bad)?;
        self.check_shard_parents(v3, &mut rep, &mut bad)?;
        self.check_tmp(&mut rep, &mut bad)?;
        self.check_limits(&mut rep, quarantine)?;
        self.check_evidence(&mut rep);
        self.check_keys(&mut rep, &mut bad)?;
        self.check_groups(&mut rep, &mut bad)?;
        let jobs_seen = self.check_jobs(&mut rep, &mut bad)?;
        self.check_deps(&mut rep, &mut bad)?;
        self.check_shared(&mut rep, &mut bad);
        self.report_bad(&mut rep, bad, jobs_seen, quarantine)?;
        Ok(rep)
    }
}

impl Queue {}

/// Bad entries found so far: (directory relative to the root, name, what is wrong).
type Bad = Vec<(String, String, ProblemKind)>;

fn is_tag_mismatch(k: &ProblemKind) -> bool {
    *k == ProblemKind::Foreign(Foreign::Name(NameError::Tag))
}

/// List `name` (as listed: `None` when not UTF-8, `raw` its bytes) among the odd entries of
/// a directory: `odd` when it is UTF-8, `wild` (escaped, `disk::name::escape_name`) when not.
fn push_odd(
    odd: &mut Vec<String>,
    wild: &mut Vec<String>,
    name: Option<&str>,
    raw: &std::ffi::CStr,
) {
    match name {
        Some(n) => odd.push(n.to_string()),
        None => wild.push(crate::disk::name::escape_name(raw.to_bytes())),
    }
}

/// A problem for each entry of `dir` (relative to the root) whose name is not UTF-8
/// (`wild`, escaped): [`Foreign::NotUtf8`], which `--quarantine` moves by its bytes.
fn not_utf8(bad: &mut Bad, dir: &str, wild: Vec<String>) {
    for name in wild {
        bad.push((
            dir.to_string(),
            name,
            ProblemKind::Foreign(Foreign::NotUtf8),
        ));
    }
}
