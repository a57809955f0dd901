//! fsck's check of the job files: every entry of the job areas verified (name, tag, place,
//! both digests), duplicates of one id found, a wrong identity told from bad jobs, and
//! directories it could not read reported.

use super::{is_tag_mismatch, Bad, FsckReport, Problem, ProblemKind};
use crate::admin::view::Load;
use crate::admin::walk::Seen;
use crate::disk::name::{JobName, Kind, Reason};
use crate::disk::scan::Foreign;
use crate::disk::sys::Errno;
use crate::error::Result;
use crate::queue::{header_queue_id, Queue};
use std::os::fd::{AsFd, BorrowedFd};

impl Queue {
    /// Every entry of the job areas: name, place, file type and digests; one job id in two
    /// places (say, a hard link planted in another state's directory) is a duplicate. Returns
    /// the entries seen.
    pub(super) fn check_jobs(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<u64> {
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
            self.check_entry(s, rep, bad);
            true
        })?;
        report_unreadable(rep, bad, unreadable);
        self.report_dups(rep, bad, dups);
        Ok(jobs_seen)
    }

    /// Check one entry the walk saw, `s`: a job file is verified (a corrupt one that is
    /// dead with reason `corrupt` only counted), a misplaced one verified and reported as
    /// misplaced, anything else reported as foreign; each problem is added to `bad`.
    fn check_entry(&self, s: Seen<'_>, rep: &mut FsckReport, bad: &mut Bad) {
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
                Err(ProblemKind::Corrupt(_)) if matches!(n.kind, Kind::Dead { reason } if reason == Reason::CORRUPT) => {
                    rep.dead_corrupt += 1
                }
                Err(k) => bad.push((at().0, at().1, self.typed(s.dir, s.raw, k))),
            },
        }
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

    /// [`ProblemKind::IdentityMismatch`] when every one of the `jobs_seen` job entries, and
    /// at least two, fails the tag check and the headers of all of them that are readable
    /// name one queue id other than the identity's.
    pub(super) fn identity_mismatch(
        &self,
        bad: &[(String, String, ProblemKind)],
        jobs_seen: u64,
    ) -> Option<ProblemKind> {
        let tagged: Vec<_> = bad.iter().filter(|b| is_tag_mismatch(&b.2)).collect();
        // One stray job in an empty queue is a foreign job (as a copied-in file looks), not
        // evidence against the identity: at least two are needed.
        // And every job must fail it: one job that passes shows the identity is this
        // queue's, and the others are foreign. Blaming the identity for jobs copied in
        // beside one of the queue's own would advise removing it, and `init` would then
        // adopt the other queue's id.
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

    /// `Ok(true)`: verified; `Ok(false)`: moved by a worker between the listing and the open
    /// (not a problem on a live queue).
    pub(super) fn check_file(
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
    pub(super) fn home_of(&self, raw: &str) -> Option<String> {
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
}

/// Report each directory in `unreadable` (skipped by the walk: this user cannot read it),
/// unless an entry that is not a directory stands on its path (reported already, in `bad`).
fn report_unreadable(rep: &mut FsckReport, bad: &Bad, unreadable: Vec<String>) {
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
}
