//! fsck: check every entry of a queue (name, tag, place, file type, both digests) and report
//! one problem per bad entry; optionally move the bad ones to `quarantine/<same path>`.
//!
//! When the identity file is what is wrong (most job names fail the tag check and their
//! headers agree on another queue id), one problem names `steadq.queue` and nothing is
//! quarantined.
//!
//! Dead jobs with reason `corrupt` are where corrupt jobs belong: they are counted, not
//! reported.

use crate::admin::receipts::is_rotated_evidence;
use crate::admin::view::Load;
use crate::disk::format::Corruption;
use crate::disk::layout::{
    PRIO_DIR, QUARANTINE_DIR, READY_DIR, RECEIPTS_DIR, ROOT_ENTRIES, TMP_DIR,
};
use crate::disk::name::NameError;
use crate::disk::name::{JobName, Kind, Reason};
use crate::disk::scan::Foreign;
use crate::disk::sys::{Call, EntryType, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::queue::{header_queue_id, Queue, IDENTITY_FILE};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// What is wrong with an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// A foreign entry (see [`Foreign`]).
    Foreign(Foreign),
    /// A job file that fails verification.
    Corrupt(Corruption),
    /// The entry could not be read.
    Unreadable(crate::OsErrno),
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
    /// damaged), or a live idempotency key entry in `keys/` (every enqueue with its key
    /// fails). Reported, never moved.
    Damaged(&'static str),
    /// An entry of `keys/` whose name is neither a key entry's nor a tombstone's.
    NotKeyName,
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
        match &self.kind {
            ProblemKind::Foreign(x) => write!(f, "{x}")?,
            ProblemKind::Corrupt(c) => write!(f, "corrupt: {c}")?,
            ProblemKind::Duplicate(other) => write!(f, "the same job id is also at {other}")?,
            ProblemKind::NotRegular(what) => write!(f, "foreign: {what}")?,
            ProblemKind::Damaged(what) => write!(f, "damaged: {what}")?,
            ProblemKind::TornEvidence { lines, tail } => write!(
                f,
                "torn evidence (an append cut short by a crash): {lines} line(s) that are not \
                 evidence, a last line of {tail} byte(s) without its newline"
            )?,
            ProblemKind::NotADirectory => f.write_str(
                "not a directory where the queue keeps jobs (a file, or a symlink, never \
                 followed): jobs that belong behind it can be neither placed nor taken \
                 until it is moved away",
            )?,
            ProblemKind::ForeignOwner { owner, expected } => write!(
                f,
                "owned by uid {owner}, not by the owner of ready/ (uid {expected}): not the \
                 shard init made; its jobs are not taken and no job is placed there (move it \
                 away and run `steadq init` as uid {expected})"
            )?,
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
            )?,
            ProblemKind::OtherFilesystem { dev, root_dev } => write!(
                f,
                "on another filesystem (st_dev {dev}, the queue root is {root_dev}); a queue \
                 must be on one filesystem so that its renames are atomic (every command but \
                 fsck and status refuses the queue)"
            )?,
            ProblemKind::NotKeyName => f.write_str(
                "foreign: not a key entry (<64 hex>) or tombstone (<64 hex>.<32 hex>.gone)",
            )?,
            ProblemKind::JobsInside(n) => write!(
                f,
                "foreign: directory holding {n} job file{} of this queue, left in place \
                 (move each job to where its name belongs)",
                if *n == 1 { "" } else { "s" }
            )?,
            ProblemKind::Misplaced(home) => write!(
                f,
                "misplaced: its name belongs in {home}/ (fsck never moves it there: a copy of a \
                 job settled since would run again; move it by hand if it is the only one)"
            )?,
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
            )?,
            ProblemKind::Unreadable(e) => write!(
                f,
                "unreadable: {} (not verified; left for a user who may read it)",
                std::io::Error::from_raw_os_error(e.raw_os_error())
            )?,
            ProblemKind::LeaseBeyondCap { deadline_in_ns } => write!(
                f,
                "lease deadline {} days away, past the 7-day lease cap: forged; it counts as \
                 expired (`steadq recover` gives the job back)",
                deadline_in_ns / 86_400_000_000_000
            )?,
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
                )?
            }
        }
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
        self.check_limits(&mut rep);
        self.check_evidence(&mut rep);
        self.check_keys(&mut rep, &mut bad)?;
        let jobs_seen = self.check_jobs(&mut rep, &mut bad)?;
        self.check_shared(&mut rep, &mut bad);
        self.report_bad(&mut rep, bad, jobs_seen, quarantine)?;
        Ok(rep)
    }

    /// Temp files: only `<boot32>.<pid8>.<rand32>.tmp|probe` regular files belong in tmp/.
    /// A job file of this queue there is misplaced (see [`Queue::stray`]).
    fn check_tmp(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        let (mut odd, mut wild) = (Vec::new(), Vec::new());
        let listed = self
            .list_held(self.dirs.tmp.as_fd(), TMP_DIR, |fd| {
                odd.clear();
                wild.clear();
                self.sys.read_dir(fd, |name, raw, t| {
                    rep.checked += 1;
                    let named = name.and_then(crate::disk::name::TempName::parse).is_some();
                    let file = matches!(
                        t,
                        crate::disk::sys::EntryType::File | crate::disk::sys::EntryType::Unknown
                    );
                    if !named || !file {
                        push_odd(&mut odd, &mut wild, name, raw);
                    }
                })
            })
            .map_err(|e| self.read_dir_error(e, TMP_DIR))?;
        if listed.is_none() {
            if self.not_a_directory_on(TMP_DIR).is_some() {
                return Ok(()); // a file or a symlink: reported in the root
            }
            // This user cannot read tmp/: a problem to report, not a reason to check nothing.
            rep.problems.push(Problem {
                path: TMP_DIR.into(),
                kind: ProblemKind::Unreadable(Errno::ACCESS.into()),
                quarantined: false,
            });
            return Ok(());
        }
        for name in odd {
            if let Some(kind) = self.stray(rep, self.dirs.tmp.as_fd(), &name) {
                bad.push((TMP_DIR.into(), name, kind));
            }
        }
        not_utf8(bad, TMP_DIR, wild);
        Ok(())
    }

    /// Every entry of the job areas: name, place, file type and digests; one job id in two
    /// places (say, a hard link planted in another state's directory) is a duplicate. Returns
    /// the entries seen.
    fn check_jobs(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<u64> {
        let mut seen: std::collections::HashMap<u128, String> = std::collections::HashMap::new();
        // Job files found misplaced outside the job areas (tmp/, a shard parent) count too.
        for (dir, name, kind) in bad.iter() {
            if let (ProblemKind::Misplaced(_), Ok(n)) = (kind, JobName::parse(name, self.ident.id))
            {
                seen.insert(n.id.0, format!("{dir}/{name}"));
            }
        }
        let mut dups: Vec<(String, String)> = Vec::new();
        let mut jobs_seen = 0u64;
        let mut unreadable = Vec::new();
        let (boot, now_boot) = (self.clock.boot_id(), self.clock.boot_ns());
        self.walk_noting(&mut unreadable, |s| {
            rep.checked += 1;
            jobs_seen += 1;
            if let Ok(JobName {
                kind: Kind::Leased(l),
                ..
            }) = &s.parsed
            {
                if l.boot_id == boot && crate::disk::scan::lease_beyond_cap(l, now_boot) {
                    rep.problems.push(Problem {
                        path: format!("{}/{}", s.dir_rel, s.raw),
                        kind: ProblemKind::LeaseBeyondCap {
                            deadline_in_ns: l.boot_deadline_ns - now_boot,
                        },
                        quarantined: false,
                    });
                }
            }
            // A misplaced job counts too: a stale copy of a job that lives (or was acked)
            // elsewhere is reported as its duplicate and left in place.
            let id = match &s.parsed {
                Ok(n) => Some(n.id.0),
                Err(Foreign::WrongPlace) if self.home_of(s.raw).is_some() => {
                    JobName::parse(s.raw, self.ident.id).ok().map(|n| n.id.0)
                }
                Err(_) => None,
            };
            if let Some(id) = id {
                let here = format!("{}/{}", s.dir_rel, s.raw);
                match seen.get(&id) {
                    Some(first) => dups.push((here, first.clone())),
                    None => {
                        seen.insert(id, here);
                    }
                }
            }
            let at = || (s.dir_rel.to_string(), s.raw.to_string());
            match s.parsed {
                Err(Foreign::WrongPlace) if self.home_of(s.raw).is_some() => {
                    let n = JobName::parse(s.raw, self.ident.id).ok();
                    let home = self.home_of(s.raw).unwrap_or_default();
                    match n.map(|n| self.check_file(s.dir, s.raw, &n)) {
                        Some(Ok(true)) => {
                            rep.verified += 1;
                            bad.push((at().0, at().1, ProblemKind::Misplaced(home)));
                        }
                        Some(Err(k)) => bad.push((at().0, at().1, self.typed(s.dir, s.raw, k))),
                        _ => {}
                    }
                }
                Err(f) => {
                    let k = self.typed(s.dir, s.raw, ProblemKind::Foreign(f));
                    bad.push((at().0, at().1, k))
                }
                Ok(n) => match self.check_file(s.dir, s.raw, &n) {
                    Ok(true) => rep.verified += 1,
                    Ok(false) => {}
                    Err(ProblemKind::Corrupt(_))
                        if matches!(n.kind, Kind::Dead { reason } if reason == Reason::CORRUPT) =>
                    {
                        rep.dead_corrupt += 1
                    }
                    Err(k) => bad.push((at().0, at().1, self.typed(s.dir, s.raw, k))),
                },
            }
            true
        })?;
        // A directory this user cannot read was skipped by the walk: say so, unless an entry
        // that is not a directory stands on its path (reported once, above).
        let blocked: Vec<String> = bad
            .iter()
            .filter(|b| b.2 == ProblemKind::NotADirectory)
            .map(|(dir, name, _)| match dir.is_empty() {
                true => name.clone(),
                false => format!("{dir}/{name}"),
            })
            .collect();
        for path in unreadable {
            let behind = |b: &String| {
                path == *b
                    || path
                        .strip_prefix(b.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            };
            if blocked.iter().any(behind) {
                continue;
            }
            rep.problems.push(Problem {
                path,
                kind: ProblemKind::Unreadable(Errno::ACCESS.into()),
                quarantined: false,
            });
        }
        self.report_dups(rep, bad, dups);
        Ok(jobs_seen)
    }

    /// Report each job id seen at two paths. A misplaced copy whose id is also elsewhere is
    /// the duplicate (left in place: which copy is right is the operator's call), so its
    /// [`ProblemKind::Misplaced`] entry is taken out of `bad` before anything is moved.
    fn report_dups(&self, rep: &mut FsckReport, bad: &mut Bad, dups: Vec<(String, String)>) {
        use std::collections::HashSet;
        let root = self.dirs.root.as_fd();
        let exists = |p: &str| self.sys.stat_nofollow(root, p).is_ok();
        // Looked up once per duplicate: sets, not a walk of `bad` and `rep.problems` each
        // time (a member's tens of thousands of forged names of one id made that n²).
        let mut misplaced: HashSet<String> = bad
            .iter()
            .filter(|b| matches!(b.2, ProblemKind::Misplaced(_)))
            .map(|b| format!("{}/{}", b.0, b.1))
            .collect();
        let mut reported: HashSet<String> = rep.problems.iter().map(|p| p.path.clone()).collect();
        let mut stays: HashSet<String> = HashSet::new();
        for (later, first) in dups {
            let (path, other) = match (misplaced.contains(&later), misplaced.contains(&first)) {
                (false, true) => (first, later),
                _ => (later, first),
            };
            if misplaced.remove(&path) {
                // Out of `bad` (below): not moved, and not misplaced for the next pair.
                stays.insert(path.clone());
                // Whether or not the other copy moved on meanwhile, this one stays where it is.
                if !exists(&path) {
                    continue;
                }
            } else if !exists(&path) || !exists(&other) {
                // On a live queue a job can be listed in one directory and then, renamed, in
                // the next: a duplicate counts only if both names still exist.
                continue;
            }
            if !reported.insert(path.clone()) {
                continue;
            }
            rep.problems.push(Problem {
                path,
                kind: ProblemKind::Duplicate(other),
                quarantined: false,
            });
        }
        if !stays.is_empty() {
            bad.retain(|b| !stays.contains(&format!("{}/{}", b.0, b.1)));
        }
    }

    /// Add the bad entries to `rep`, quarantining them if asked; one problem on the identity
    /// file instead when it is the identity that is wrong (then nothing is moved).
    fn report_bad(
        &self,
        rep: &mut FsckReport,
        mut bad: Vec<(String, String, ProblemKind)>,
        jobs_seen: u64,
        quarantine: bool,
    ) -> Result<()> {
        let mismatch = self.identity_mismatch(&bad, jobs_seen);
        if let Some(kind) = mismatch.clone() {
            bad.retain(|b| !is_tag_mismatch(&b.2));
            rep.problems.push(Problem {
                path: IDENTITY_FILE.to_string(),
                kind,
                quarantined: false,
            });
        }
        // With a wrong identity every check is suspect: move nothing. Nor with a file or a
        // symlink at `quarantine` (never followed): every move would fail, and the first
        // failure stopped the run with "Not a directory", listing nothing.
        let blocked = bad
            .iter()
            .any(|b| b.0.is_empty() && b.1 == QUARANTINE_DIR && b.2 == ProblemKind::NotADirectory);
        if quarantine && blocked {
            log::warn!(
                "{}: not a directory (a file or a symlink, never followed): nothing was moved; \
                 move it away to quarantine",
                self.path(QUARANTINE_DIR).display()
            );
        }
        let quarantine = quarantine && mismatch.is_none() && !blocked;
        // Whether an entry was moved already: kept as the loop goes (looking it up in
        // `rep.problems` for every entry made a run over n bad entries cost n² steps).
        let mut moved = rep.problems.iter().any(|p| p.quarantined);
        for (dir, name, kind) in bad {
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            // The batch rule: once an entry was moved, a failure is indeterminate.
            // Not moved: a root entry; a directory holding jobs; a default-level or receipt
            // shard that is not a directory (moved away, the queue would be incomplete: the
            // operator replaces it, `steadq init` remakes it).
            let shard_entry = kind == ProblemKind::NotADirectory
                && (dir == crate::disk::layout::READY_DIR
                    || dir == crate::disk::layout::RECEIPTS_DIR);
            // Nor an entry this user cannot read: it is not known to be bad (a valid job of
            // another user at mode 600 was moved out of the queue, and nothing ran it).
            let quarantined = quarantine
                && (!dir.is_empty() || matches!(kind, ProblemKind::NotShared { .. }))
                && !shard_entry
                && !matches!(
                    kind,
                    ProblemKind::JobsInside(_) | ProblemKind::Unreadable(_)
                )
                && match match kind {
                    ProblemKind::NotShared { like, .. } => self.share_made(&path, like),
                    ProblemKind::Foreign(Foreign::NotUtf8) => self.quarantine(&dir, &name, true),
                    _ => self.quarantine(&dir, &name, false),
                } {
                    Ok(q) => q,
                    // Its quarantine name is taken (renamed without replacing): nothing
                    // moved, nothing else affected; reported with both paths, and the run
                    // goes on with the other entries.
                    Err(e)
                        if e.outcome() == crate::Outcome::NotDone
                            && e.errno() == Some(Errno::EXIST.into()) =>
                    {
                        let at = format!("{QUARANTINE_DIR}/{path}");
                        rep.problems.push(Problem {
                            path,
                            kind: ProblemKind::QuarantineTaken {
                                kind: Box::new(kind),
                                at,
                            },
                            quarantined: false,
                        });
                        continue;
                    }
                    // A move this user may not make did not happen: the entry is left, and
                    // reported (it failed the whole run as indeterminate, printing nothing).
                    Err(e) if crate::ops::lease::only_refused(&e) => {
                        log::warn!("{e}; left in place");
                        false
                    }
                    Err(e) if moved => return Err(e.with_outcome(crate::Outcome::Indeterminate)),
                    Err(e) => return Err(e),
                };
            rep.problems.push(Problem {
                path,
                kind,
                quarantined,
            });
            moved |= quarantined;
        }
        Ok(())
    }

    /// [`ProblemKind::IdentityMismatch`] when every one of the `jobs_seen` job entries, and
    /// at least two, fails the tag check and the headers of all of them that are readable
    /// name one queue id other than the identity's.
    fn identity_mismatch(
        &self,
        bad: &[(String, String, ProblemKind)],
        jobs_seen: u64,
    ) -> Option<ProblemKind> {
        let tagged: Vec<_> = bad.iter().filter(|b| is_tag_mismatch(&b.2)).collect();
        // One stray job in an empty queue is a foreign job (as a copied-in file looks), not
        // evidence against the identity: at least two are needed.
        // And every job must fail it: one job that passes shows the identity is this
        // queue's, and the others are foreign (two jobs copied in from another queue beside
        // one of its own were blamed on the identity, with advice to remove it that would
        // have made `init` adopt the other queue's id: breaker finding).
        if tagged.len() < 2 || tagged.len() as u64 != jobs_seen {
            return None;
        }
        let mut ids = std::collections::BTreeSet::new();
        for (dir, name, _) in &tagged {
            let Ok(fd) = self.sys.open_dir_beneath(self.dirs.root.as_fd(), dir) else {
                continue;
            };
            if let Some(id) = header_queue_id(fd.as_fd(), name, &self.sys) {
                ids.insert(id);
            }
        }
        let mut it = ids.into_iter();
        match (it.next(), it.next()) {
            (Some(jobs_id), None) if jobs_id != self.ident.id => {
                Some(ProblemKind::IdentityMismatch {
                    identity: self.ident.id,
                    jobs_id,
                    jobs: tagged.len() as u32,
                })
            }
            _ => None,
        }
    }

    /// Root level: only the known names belong (`prio/` from version 3 on).
    fn check_root(&self, v3: bool, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        let known = ROOT_ENTRIES;
        let (mut odd, mut blocked, mut wild) = (Vec::new(), Vec::new(), Vec::new());
        let fs_root = crate::queue::is_fs_root(&self.sys, self.dirs.root.as_fd(), &self.root);
        self.sys
            .read_dir(self.dirs.root.as_fd(), |name, raw, t| {
                rep.checked += 1;
                match name {
                    // A queue at a filesystem's root (`init` takes one with only this).
                    Some(crate::queue::LOST_FOUND)
                        if fs_root
                            && self.is_dir_entry(
                                self.dirs.root.as_fd(),
                                crate::queue::LOST_FOUND,
                                t,
                            ) => {}
                    // Only a directory: a file named `prio` (a script's `echo 5 > $Q/prio`)
                    // is foreign, and every level behind it waits until it is moved away.
                    // `tmp`, `ready`, `delayed`, `dead` or `receipts` as a file or a
                    // symlink (never followed): what belongs there waits until it is
                    // moved away (every command stopped on it, fsck too).
                    Some(n)
                        if (crate::disk::layout::CREATED_DIRS.contains(&n)
                            || n == crate::disk::layout::KEYS_DIR
                            || n == QUARANTINE_DIR)
                            && !self.is_dir_entry(self.dirs.root.as_fd(), n, t) =>
                    {
                        blocked.push(n.to_string())
                    }
                    Some(PRIO_DIR) if v3 => {
                        if !self.is_dir_entry(self.dirs.root.as_fd(), PRIO_DIR, t) {
                            blocked.push(PRIO_DIR.to_string());
                        }
                    }
                    Some(n)
                        if known.contains(&n)
                            || n.starts_with(&format!(".{IDENTITY_FILE}."))
                            || is_rotated_evidence(n) => {}
                    _ => push_odd(&mut odd, &mut wild, name, raw),
                }
            })
            .map_err(|e| Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.root.clone())))?;
        // Named by type (a `prio/` holding jobs on a version-2 queue says how many); root
        // entries are never moved.
        for name in odd {
            let kind = ProblemKind::Foreign(Foreign::Name(NameError::Syntax));
            let kind = self.typed(self.dirs.root.as_fd(), &name, kind);
            bad.push((String::new(), name, kind));
        }
        for name in blocked {
            bad.push((String::new(), name, ProblemKind::NotADirectory));
        }
        not_utf8(bad, "", wild);
        Ok(())
    }

    /// `ready/`, `receipts/` and (version 3) `prio/` and each `prio/<l>/` hold only their
    /// shard directories (and `prio/` only its levels).
    fn check_shard_parents(&self, v3: bool, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        let mut rels = vec![READY_DIR.to_string(), RECEIPTS_DIR.to_string()];
        if v3 && self.check_levels(rep, bad)? {
            for l in (0..self.ident.levels()).filter(|&l| l != crate::DEFAULT_PRIORITY) {
                rels.push(format!("prio/{l}"));
            }
        }
        let mut parents = Vec::new();
        for rel in rels {
            if let Some(fd) = self.dirs_parent(&rel, rep)? {
                parents.push((rel, fd));
            }
        }
        for (parent, fd) in parents {
            let parent = parent.as_str();
            let shards = self.ident.shards;
            let (mut odd, mut blocked, mut wild) = (Vec::new(), Vec::new(), Vec::new());
            self.sys
                .read_dir(fd.as_fd(), |name, raw, t| {
                    let ok = name
                        .and_then(|n| crate::disk::name::parse_hex(n.as_bytes(), 2))
                        .is_some_and(|s| s < shards as u128);
                    match name {
                        // A shard's name on a file or a symlink (never followed): the slot
                        // holds no job until it is moved away.
                        Some(n) if ok && !self.is_dir_entry(fd.as_fd(), n, t) => {
                            blocked.push(n.to_string())
                        }
                        _ if ok => {}
                        _ => push_odd(&mut odd, &mut wild, name, raw),
                    }
                })
                .map_err(|e| {
                    Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.path(parent)))
                })?;
            self.strays(rep, fd.as_fd(), parent, odd, bad);
            not_utf8(bad, parent, wild);
            for name in blocked {
                bad.push((parent.to_string(), name, ProblemKind::NotADirectory));
            }
        }
        for s in 0..self.ident.slots() {
            if let Some((owner, expected)) = self.foreign_slot(s) {
                rep.problems.push(Problem {
                    path: self.ident.slot_rel(s),
                    kind: ProblemKind::ForeignOwner { owner, expected },
                    quarantined: false,
                });
            }
        }
        Ok(())
    }

    /// Push a problem for each entry `odd` of `dir` (`rel` from the root), by
    /// [`Queue::stray`].
    fn strays(
        &self,
        rep: &mut FsckReport,
        dir: BorrowedFd<'_>,
        rel: &str,
        odd: Vec<String>,
        bad: &mut Bad,
    ) {
        for name in odd {
            if let Some(kind) = self.stray(rep, dir, &name) {
                bad.push((rel.to_string(), name, kind));
            }
        }
    }

    /// `prio/` (version 3) holds one directory per level other than the default, `0`..=`7`.
    /// False when `prio/` cannot be read (then it is a problem, and its levels are not
    /// looked at: the walk names each of their shards) or does not exist yet.
    fn check_levels(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<bool> {
        let levels = self.ident.levels();
        let Some(fd) = self.dirs_parent(PRIO_DIR, rep)? else {
            return Ok(false);
        };
        let (mut odd, mut blocked, mut wild) = (Vec::new(), Vec::new(), Vec::new());
        self.sys
            .read_dir(fd.as_fd(), |name, raw, t| {
                let level = matches!(name.map(str::as_bytes), Some([d])
                    if (b'0'..b'0' + levels).contains(d)
                        && *d != b'0' + crate::DEFAULT_PRIORITY);
                match name {
                    Some(n) if level && !self.is_dir_entry(fd.as_fd(), n, t) => {
                        blocked.push(n.to_string())
                    }
                    _ if level => {}
                    _ => push_odd(&mut odd, &mut wild, name, raw),
                }
            })
            .map_err(|e| self.read_dir_error(e, "prio"))?;
        self.strays(rep, fd.as_fd(), "prio", odd, bad);
        not_utf8(bad, PRIO_DIR, wild);
        for name in blocked {
            bad.push((PRIO_DIR.to_string(), name, ProblemKind::NotADirectory));
        }
        Ok(true)
    }

    /// Whether entry `name` of `dir`, of type `t` as listed, is a directory (`fstatat`
    /// without following a symlink when the listing did not say).
    fn is_dir_entry(&self, dir: BorrowedFd<'_>, name: &str, t: EntryType) -> bool {
        match t {
            EntryType::Dir => true,
            EntryType::Unknown => self
                .sys
                .stat_nofollow(dir, name)
                .is_ok_and(|m| m.file_type == rustix::fs::FileType::Directory),
            _ => false,
        }
    }

    /// Shard parent `name` (`ready`, `receipts`, `prio`, `prio/<l>`), opened and listable;
    /// `None` when this user cannot read it (`EACCES`, `EPERM`), which is a problem, or when
    /// a `prio` one does not exist (not made yet), which is not.
    fn dirs_parent(&self, name: &str, rep: &mut FsckReport) -> Result<Option<OwnedFd>> {
        let opened = self.sys.open_dir_beneath(self.dirs.root.as_fd(), name);
        let listed = opened.and_then(|fd| self.sys.read_dir(fd.as_fd(), |_, _, _| {}).map(|_| fd));
        match listed {
            Ok(fd) => Ok(Some(fd)),
            // `prio/` and `prio/<l>/` are made by the first job placed at a level
            // (`ops/levels.rs`): missing, they hold nothing. Not a directory (`ENOTDIR`), the
            // entry in the way is reported where it stands (the root, or `prio/`).
            Err(Errno::NOENT | Errno::NOTDIR) if name.split('/').next() == Some(PRIO_DIR) => {
                Ok(None)
            }
            // `ready` or `receipts` itself a file or a symlink: reported in the root.
            Err(Errno::NOTDIR | Errno::LOOP) => Ok(None),
            Err(e @ (Errno::ACCESS | Errno::PERM)) => {
                rep.problems.push(Problem {
                    path: name.to_string(),
                    kind: ProblemKind::Unreadable(e.into()),
                    quarantined: false,
                });
                Ok(None)
            }
            Err(e) => Err(Cause::io(
                Call::Open,
                e,
                Outcome::NotDone,
                Some(self.path(name)),
            )),
        }
    }

    /// `Ok(true)`: verified; `Ok(false)`: moved by a worker between the listing and the open
    /// (not a problem on a live queue).
    fn check_file(
        &self,
        dir: BorrowedFd<'_>,
        raw: &str,
        n: &JobName,
    ) -> core::result::Result<bool, ProblemKind> {
        // In 64 KiB chunks: memory does not grow with the payload.
        match self.check_job(dir, raw, n.id.0) {
            Ok(_) => Ok(true),
            Err(Load::Missing) => Ok(false),
            Err(Load::Corrupt(crate::disk::format::Corruption::NotRegular)) => {
                Err(ProblemKind::Foreign(Foreign::NotRegular))
            }
            Err(Load::Corrupt(c)) => Err(ProblemKind::Corrupt(c)),
            Err(Load::Io(_, e)) => Err(ProblemKind::Unreadable(e.into())),
        }
    }

    /// Where job file `raw`, found in a directory it does not fit, belongs: its ready slot
    /// (ready or leased), its delayed bucket or its receipt shard, relative to the root.
    /// `None` when its name does not verify, for a dead job (any dead bucket fits it), and
    /// for a priority the queue has no level for.
    fn home_of(&self, raw: &str) -> Option<String> {
        let n = JobName::parse(raw, self.ident.id).ok()?;
        if !self.ident.has_priority(n.priority) {
            return None;
        }
        match n.kind {
            Kind::Ready | Kind::Leased(_) => Some(self.ident.slot_rel(self.ident.slot_of(&n))),
            Kind::Delayed { not_before_ns, .. } => Some(format!(
                "{}/{}",
                crate::disk::layout::DELAYED_DIR,
                crate::disk::layout::delayed_bucket(not_before_ns, self.ident.delayed_bucket_ns)
            )),
            Kind::Receipt { .. } => Some(
                crate::disk::layout::receipts_shard(n.id.shard(self.ident.shards))
                    .as_str()
                    .to_owned(),
            ),
            Kind::Dead { .. } => None,
        }
    }

    /// Each directory made on demand ([`Queue::made_on_demand`]) that lacks a right its
    /// template grants: [`ProblemKind::NotShared`]. It replaces the
    /// `Unreadable` problems at its path and behind it (its mode is why).
    fn check_shared(&self, rep: &mut FsckReport, bad: &mut Bad) {
        let root = self.dirs.root.as_fd();
        for (rel, like) in self.made_on_demand() {
            let (Ok(want), Ok(got)) = (
                self.sys.owner_nofollow(root, like),
                self.sys.owner_nofollow(root, &rel),
            ) else {
                continue;
            };
            // A template that is not a directory (a file or a symlink at `ready`, reported
            // as such) sets no mode to share.
            if want.2 & 0o170000 != 0o040000 {
                continue;
            }
            // The sticky bit of `ready/` is its own: never shared (`Sys::copy_owner_and_mode`).
            let (want_mode, mode) = (want.2 & 0o6777, got.2 & 0o7777);
            // A right the template grants that this directory lacks (read, write, search
            // for owner, group or others; setgid), or, under another group, one the
            // template's group had that others do not get here. More rights refuse nobody.
            let lacks = want_mode & !mode & 0o2777 != 0;
            let group_lacks = got.1 != want.1 && (want_mode >> 3) & 7 & !mode != 0;
            if !lacks && !group_lacks {
                continue;
            }
            let behind =
                |p: &str| p == rel || p.strip_prefix(&rel).is_some_and(|r| r.starts_with('/'));
            rep.problems
                .retain(|p| !(behind(&p.path) && matches!(p.kind, ProblemKind::Unreadable(_))));
            let (dir, name) = rel.rsplit_once('/').unwrap_or(("", &rel));
            bad.push((
                dir.to_string(),
                name.to_string(),
                ProblemKind::NotShared {
                    like,
                    mode,
                    gid: got.1,
                    want_mode,
                    want_gid: want.1,
                },
            ));
        }
    }

    /// Give directory `rel` the owner (when this user may), group and mode of `like`, and
    /// make that durable (fsync of the directory). `Ok(false)`: it vanished meanwhile.
    ///
    /// `Ok(false)` too when this user may not change it (`EPERM`: neither its owner nor
    /// root), with a warning.
    ///
    /// # Errors
    /// Not done when it cannot be opened or changed; indeterminate when the fsync fails.
    fn share_made(&self, rel: &str, like: &str) -> Result<bool> {
        let root = self.dirs.root.as_fd();
        let at = |c, e, o| Cause::io(c, e, o, Some(self.path(rel)));
        // A directory this user may not even open (700, another user's) it may not change.
        let changed = match self.sys.open_dir_beneath(root, rel) {
            Ok(fd) => self
                .sys
                .copy_owner_and_mode(fd.as_fd(), root, like)
                .map(|()| fd),
            Err(Errno::NOENT) => return Ok(false),
            Err(e @ (Errno::PERM | Errno::ACCESS)) => Err(e),
            Err(e) => return Err(at(Call::Open, e, Outcome::NotDone)),
        };
        let fd = match changed {
            Ok(fd) => fd,
            Err(e @ (Errno::PERM | Errno::ACCESS)) => {
                log::warn!(
                    "{}: this user may not change its mode ({}); left as it is (run `steadq \
                     fsck --quarantine` as its owner or root)",
                    self.path(rel).display(),
                    std::io::Error::from(e)
                );
                return Ok(false);
            }
            // Counted and faulted as the `mkdirat` whose making it completes.
            Err(e) => return Err(at(Call::Mkdir, e, Outcome::NotDone)),
        };
        self.sys
            .fsync(fd.as_fd())
            .map_err(|e| at(Call::Fsync, e, Outcome::Indeterminate))?;
        Ok(true)
    }

    /// Move `dir/name` to `quarantine/dir/name`; with `escaped`, `name` is a name that is
    /// not UTF-8 as `disk::name::escape_name` wrote it, moved by its bytes. False if it
    /// vanished meanwhile.
    fn quarantine(&self, dir: &str, name: &str, escaped: bool) -> Result<bool> {
        let root = self.dirs.root.as_fd();
        let nd = |c, e, p: &str| Cause::io(c, e, Outcome::NotDone, Some(self.path(p)));
        let to = self.quarantine_dir(dir)?;
        let qdir = format!("{QUARANTINE_DIR}/{dir}");
        let from = self
            .sys
            .open_dir_beneath(root, dir)
            .map_err(|e| nd(Call::Open, e, dir))?;
        let bytes = match escaped {
            true => crate::disk::name::unescape_name(name).unwrap_or_default(),
            false => name.as_bytes().to_vec(),
        };
        match self
            .sys
            .rename_bytes(from.as_fd(), &bytes, to.as_fd(), &bytes)
        {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(nd(Call::Rename, e, &format!("{dir}/{name}"))),
        }
        let ind = |e, p: &str| {
            Cause::io(
                Call::FsyncDir,
                e,
                Outcome::Indeterminate,
                Some(self.path(p)),
            )
        };
        self.barrier(to.as_fd()).map_err(|e| ind(e, &qdir))?;
        self.barrier(from.as_fd()).map_err(|e| ind(e, dir))?;
        Ok(true)
    }
}

impl Queue {
    /// `quarantine/<dir>`, made one level at a time beneath the root: each level is opened
    /// without following a symlink (a planted `quarantine/ready -> /etc` is refused, not
    /// followed), and each directory this makes is made durable by an fsync of its parent
    /// before anything is moved into it.
    fn quarantine_dir(&self, dir: &str) -> Result<OwnedFd> {
        let mut rel = String::new();
        let mut parent = self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), ".")
            .map_err(|e| Cause::io(Call::Open, e, Outcome::NotDone, Some(self.path("."))))?;
        for part in std::iter::once(QUARANTINE_DIR).chain(dir.split('/').filter(|p| !p.is_empty()))
        {
            if !rel.is_empty() {
                rel.push('/');
            }
            rel.push_str(part);
            let at = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel)));
            let made = match self.sys.mkdir(parent.as_fd(), part) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(e) => return Err(at(Call::Mkdir, e)),
            };
            let child = self
                .sys
                .open_dir_beneath(parent.as_fd(), part)
                .map_err(|e| at(Call::Open, e))?;
            if made {
                // Shared like dead/ (owner, group, mode, setgid), not left at the umask of
                // whoever ran fsck first: the next user's `fsck --quarantine` moves into it.
                self.share_like(child.as_fd(), crate::disk::layout::DEAD_DIR, &rel);
                self.barrier(parent.as_fd()).map_err(|e| {
                    Cause::io(
                        Call::FsyncDir,
                        e,
                        Outcome::Indeterminate,
                        Some(self.path(&rel)),
                    )
                })?;
            }
            parent = child;
        }
        Ok(parent)
    }
}

impl Queue {
    /// `steadq.limits`, when present, must decode: a damaged one fails every enqueue.
    fn check_limits(&self, rep: &mut FsckReport) {
        let kind = match self.limits() {
            Ok(_) => return,
            Err(e) if *e.kind() == crate::ErrorKind::BadLimits => ProblemKind::Damaged(
                "the capacity limits file does not decode (checksum or syntax), and every \
                 enqueue fails until it is fixed: set the limits again (`steadq init DIR \
                 --max-jobs N|none --max-bytes N|none`)",
            ),
            Err(e) => match (e.kind(), e.errno()) {
                // Opened without following: a symlink (or a fifo) in its place is named by
                // its type, not "unreadable: Too many levels of symbolic links".
                (_, Some(x))
                    if x == Errno::LOOP.into()
                        || x == Errno::NXIO.into()
                        || x == Errno::ISDIR.into() =>
                {
                    self.typed(
                        self.dirs.root.as_fd(),
                        crate::disk::layout::LIMITS_FILE,
                        ProblemKind::Foreign(Foreign::NotRegular),
                    )
                }
                (crate::ErrorKind::Io { errno, .. }, _) => ProblemKind::Unreadable(*errno),
                _ => return,
            },
        };
        rep.problems.push(Problem {
            path: crate::disk::layout::LIMITS_FILE.to_string(),
            kind,
            quarantined: false,
        });
    }

    /// Evidence files hold whole `v1` lines only: torn appends are reported (see
    /// [`ProblemKind::TornEvidence`]); one that cannot be opened as a regular file is named.
    fn check_evidence(&self, rep: &mut FsckReport) {
        let mut names = self.rotated_evidence().unwrap_or_default();
        names.sort_unstable();
        names.push(crate::disk::layout::EVIDENCE_FILE.to_string());
        for name in names {
            let root = self.dirs.root.as_fd();
            let kind = match self.sys.open_regular_ro(root, &name) {
                Err(Errno::NOENT) => continue,
                Err(Errno::LOOP | Errno::NXIO | Errno::ISDIR) => {
                    self.typed(root, &name, ProblemKind::Foreign(Foreign::NotRegular))
                }
                Err(e) => ProblemKind::Unreadable(e.into()),
                Ok(fd) => {
                    let mut lines = 0u64;
                    let tail = self.evidence_lines(fd.as_fd(), &mut |l| {
                        let ok = core::str::from_utf8(l)
                            .ok()
                            .and_then(crate::admin::receipts::EvidenceLine::parse);
                        lines += u64::from(ok.is_none());
                        true
                    });
                    match tail {
                        Ok(0) if lines == 0 => continue,
                        Ok(tail) => ProblemKind::TornEvidence { lines, tail },
                        Err(e) => ProblemKind::Unreadable(e.into()),
                    }
                }
            };
            rep.problems.push(Problem {
                path: name,
                kind,
                quarantined: false,
            });
        }
    }

    /// `keys/` holds only key entries (`<64 hex>`) and tombstones
    /// (`<64 hex>.<32 hex>.gone`), regular files; anything else is foreign (quarantined on
    /// request: it cannot be a key entry).
    fn check_keys(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        use crate::disk::layout::KEYS_DIR;
        let keys = match self.sys.open_dir_beneath(self.dirs.root.as_fd(), KEYS_DIR) {
            Ok(fd) => fd,
            // A file or a symlink (never followed): reported in the root.
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(()),
            Err(e @ (Errno::ACCESS | Errno::PERM)) => {
                rep.problems.push(Problem {
                    path: KEYS_DIR.to_string(),
                    kind: ProblemKind::Unreadable(e.into()),
                    quarantined: false,
                });
                return Ok(());
            }
            Err(e) => {
                return Err(Cause::io(
                    Call::Open,
                    e,
                    Outcome::NotDone,
                    Some(self.path(KEYS_DIR)),
                ))
            }
        };
        let (mut odd, mut live, mut wild) = (Vec::new(), Vec::new(), Vec::new());
        self.sys
            .read_dir(keys.as_fd(), |name, raw, t| {
                rep.checked += 1;
                let named = name.is_some_and(crate::ops::keys::is_key_name);
                if !named || !matches!(t, EntryType::File | EntryType::Unknown) {
                    push_odd(&mut odd, &mut wild, name, raw);
                } else if let Some(n) = name.filter(|n| crate::ops::keys::is_entry_name(n)) {
                    live.push(n.to_string());
                }
            })
            .map_err(|e| self.read_dir_error(e, KEYS_DIR))?;
        // A live entry that does not decode fails every enqueue with its key. Reported and
        // left in place: removing it would let the key's job be enqueued twice.
        for name in live {
            if self.key_entry_damaged(keys.as_fd(), &name) {
                rep.problems.push(Problem {
                    path: format!("{KEYS_DIR}/{name}"),
                    kind: ProblemKind::Damaged(
                        "the idempotency key entry does not decode (or names another key), \
                         and every enqueue with its key fails; left in place: removing it \
                         lets that key's job be enqueued again",
                    ),
                    quarantined: false,
                });
            }
        }
        not_utf8(bad, KEYS_DIR, wild);
        for name in odd {
            let kind = ProblemKind::Foreign(Foreign::Name(NameError::Syntax));
            let kind = match self.typed(keys.as_fd(), &name, kind) {
                ProblemKind::Foreign(_) => ProblemKind::NotKeyName,
                k => k,
            };
            bad.push((KEYS_DIR.to_string(), name, kind));
        }
        Ok(())
    }

    /// What is wrong with `name`, an entry of `dir` where it does not belong: a verified job
    /// file of this queue is misplaced (quarantined by `--quarantine` unless its id is also
    /// elsewhere); anything else is foreign, by its file type ([`Queue::typed`]). `None`: it
    /// vanished meanwhile.
    fn stray(&self, rep: &mut FsckReport, dir: BorrowedFd<'_>, name: &str) -> Option<ProblemKind> {
        let kind = match (self.home_of(name), JobName::parse(name, self.ident.id)) {
            (Some(home), Ok(n)) => match self.check_file(dir, name, &n) {
                Ok(true) => {
                    rep.verified += 1;
                    ProblemKind::Misplaced(home)
                }
                Ok(false) => return None,
                Err(k) => k,
            },
            // Not a job name at all: say so, not "of the wrong kind" (a stray `notes.txt` in
            // `tmp/` was called a job name of the wrong kind).
            (_, Err(e)) => ProblemKind::Foreign(Foreign::Name(e)),
            (None, Ok(_)) => ProblemKind::Foreign(Foreign::WrongPlace),
        };
        Some(self.typed(dir, name, kind))
    }

    /// A foreign entry `name` of `dir` that is not a regular file, by its type (one
    /// `fstatat`, never followed): [`ProblemKind::NotRegular`], or
    /// [`ProblemKind::JobsInside`] for a directory holding job files. Any other `kind` is
    /// returned as it is.
    fn typed(&self, dir: BorrowedFd<'_>, name: &str, kind: ProblemKind) -> ProblemKind {
        use rustix::fs::FileType as T;
        if !matches!(kind, ProblemKind::Foreign(_)) {
            return kind;
        }
        let Ok(m) = self.sys.stat_nofollow(dir, name) else {
            return kind;
        };
        ProblemKind::NotRegular(match m.file_type {
            T::RegularFile => return kind,
            T::Directory => match self.jobs_inside(dir, name, 3) {
                0 => "directory",
                n => return ProblemKind::JobsInside(n),
            },
            T::Symlink => "symlink",
            T::Fifo => "fifo",
            T::Socket => "socket",
            _ => "device",
        })
    }

    /// Job files of this queue (regular files whose names verify) in directory `name` of
    /// `dir` and its subdirectories, `depth` levels down; never following a symlink. A
    /// directory that cannot be read counts as holding one (it may), so it is never moved.
    fn jobs_inside(&self, dir: BorrowedFd<'_>, name: &str, depth: u32) -> u64 {
        let Ok(fd) = self.sys.open_dir_beneath(dir, name) else {
            return 1;
        };
        let (mut n, mut subdirs) = (0, Vec::new());
        let listed = self.sys.read_dir(fd.as_fd(), |e, _, t| {
            let Some(e) = e else { return };
            let t = match t {
                crate::disk::sys::EntryType::Unknown => match self.sys.stat_nofollow(fd.as_fd(), e)
                {
                    Ok(m) if m.file_type == rustix::fs::FileType::Directory => {
                        crate::disk::sys::EntryType::Dir
                    }
                    Ok(m) if m.file_type == rustix::fs::FileType::RegularFile => {
                        crate::disk::sys::EntryType::File
                    }
                    _ => crate::disk::sys::EntryType::Other,
                },
                t => t,
            };
            match t {
                crate::disk::sys::EntryType::Dir => subdirs.push(e.to_string()),
                crate::disk::sys::EntryType::File => {
                    n += JobName::parse(e, self.ident.id).is_ok() as u64
                }
                _ => {}
            }
        });
        if listed.is_err() {
            return 1;
        }
        if depth > 0 {
            for d in subdirs {
                n += self.jobs_inside(fd.as_fd(), &d, depth - 1);
            }
        }
        n
    }
}

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
