//! Dependencies, the lookups: where a dependency stands (acked, dead, elsewhere, nowhere),
//! a job's name in a directory by its id, the waiting jobs. Hostile entries are skipped,
//! never followed.

use super::Dep;
use crate::disk::layout::WAITING_DIR;
use crate::disk::name::{JobId, JobName, Kind};
use crate::disk::sys::{EntryType, Errno};
use crate::error::{ErrorKind, Result};
use crate::queue::Queue;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};

impl Queue {
    /// Where job `x` stands. The quick look (`thorough` false) reads `x`'s receipts shard,
    /// the evidence log and the dead buckets; the thorough one also finds it anywhere else
    /// (one walk of the queue, and `waiting/`), or says [`Dep::Unknown`].
    pub(crate) fn dep_state(&self, x: JobId, thorough: bool) -> Result<Dep> {
        let shard = x.shard(self.ident.shards);
        let receipts = self.dirs.receipts[shard as usize].as_fd();
        let rel = crate::disk::layout::receipts_shard(shard);
        if self
            .named_in(receipts, x)
            .map_err(|e| self.read_dir_error(e, &rel))?
            .is_some_and(|n| matches!(n.kind, Kind::Receipt { .. }))
            || self.acked_in_evidence(x)?
        {
            return Ok(Dep::Acked);
        }
        if self.dead_name(x)?.is_some() {
            return Ok(Dep::Dead);
        }
        if !thorough {
            return Ok(Dep::Pending);
        }
        // One walk of the queue, `waiting/` included.
        match self.find(x) {
            Ok(_) => Ok(Dep::Pending),
            Err(e) if *e.kind() == ErrorKind::NoSuchJob => Ok(Dep::Unknown),
            Err(e) => Err(e.into_internal()),
        }
    }

    /// The first name of job `x` in directory `dir` that parses as this queue's and is a
    /// regular file (anything else is skipped, never followed).
    pub(crate) fn named_in(
        &self,
        dir: BorrowedFd<'_>,
        x: JobId,
    ) -> core::result::Result<Option<JobName>, Errno> {
        let prefix = x.to_string();
        let mut found = None;
        self.sys.read_dir_while(dir, |name, _, t| {
            let Some(n) = name.filter(|n| n.starts_with(&prefix)) else {
                return true;
            };
            let regular = match t {
                EntryType::File => true,
                EntryType::Unknown => self
                    .sys
                    .stat_nofollow(dir, n)
                    .is_ok_and(|m| m.file_type == rustix::fs::FileType::RegularFile),
                _ => false,
            };
            found = JobName::parse(n, self.ident.id)
                .ok()
                .filter(|p| regular && p.id == x);
            found.is_none()
        })?;
        Ok(found)
    }

    /// Job `x`'s dead name and its bucket, if it is dead.
    pub(super) fn dead_name(&self, x: JobId) -> Result<Option<(String, JobName)>> {
        let dead = self.dirs.dead.as_fd();
        let mut buckets = Vec::new();
        self.sys
            .read_dir(dead, |name, _, t| {
                if let Some(b) = name.filter(|b| crate::disk::layout::parse_bucket(b).is_some()) {
                    if t == EntryType::Dir || t == EntryType::Unknown {
                        buckets.push(b.to_string());
                    }
                }
            })
            .map_err(|e| self.read_dir_error(e, crate::disk::layout::DEAD_DIR))?;
        for b in buckets {
            let fd = match self.sys.open_dir_beneath(dead, &b) {
                Ok(fd) => fd,
                Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
                Err(e) => return Err(self.read_dir_error(e, &format!("dead/{b}"))),
            };
            let found = self.named_in(fd.as_fd(), x).map_err(|e| {
                self.read_dir_error(e, &format!("{}/{b}", crate::disk::layout::DEAD_DIR))
            })?;
            if let Some(n) = found.filter(|n| matches!(n.kind, Kind::Dead { .. })) {
                return Ok(Some((b, n)));
            }
        }
        Ok(None)
    }

    /// Job `x`'s name in `waiting/`, if it waits.
    pub(crate) fn waiting_name(&self, x: JobId) -> Result<Option<JobName>> {
        let Some(w) = self.deps_dir(WAITING_DIR, false)? else {
            return Ok(None);
        };
        let found = self
            .named_in(w.as_fd(), x)
            .map_err(|e| self.read_dir_error(e, WAITING_DIR))?;
        Ok(found.filter(|n| n.kind == Kind::Ready))
    }

    /// The waiting names of the jobs `ids`, from one listing of `waiting/` (only names that
    /// start with one of the ids are parsed).
    pub(super) fn waiting_named(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobName>> {
        let mut out = HashMap::new();
        let Some(w) = self.deps_dir(WAITING_DIR, false)? else {
            return Ok(out);
        };
        let want: std::collections::HashSet<JobId> = ids.iter().copied().collect();
        self.sys
            .read_dir(w.as_fd(), |name, _, t| {
                let Some(n) = name.filter(|_| t == EntryType::File || t == EntryType::Unknown)
                else {
                    return;
                };
                let id = n.get(..32).and_then(JobId::parse);
                if id.is_some_and(|id| want.contains(&id)) {
                    if let Ok(j) = JobName::parse(n, self.ident.id) {
                        if j.kind == Kind::Ready
                            && (t == EntryType::File || self.is_regular(w.as_fd(), n))
                        {
                            out.insert(j.id, j);
                        }
                    }
                }
            })
            .map_err(|e| self.read_dir_error(e, WAITING_DIR))?;
        Ok(out)
    }

    /// Whether `name` in `dir` is a regular file (never followed).
    pub(super) fn is_regular(&self, dir: BorrowedFd<'_>, name: &str) -> bool {
        self.sys
            .stat_nofollow(dir, name)
            .is_ok_and(|m| m.file_type == rustix::fs::FileType::RegularFile)
    }

    /// Every waiting job, oldest id first (hostile entries skipped, never followed).
    pub(crate) fn waiting_jobs(&self) -> Result<Vec<JobName>> {
        let Some(w) = self.deps_dir(WAITING_DIR, false)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        self.sys
            .read_dir(w.as_fd(), |name, _, t| {
                let Some(n) = name else { return };
                let regular = match t {
                    EntryType::File => true,
                    EntryType::Unknown => self
                        .sys
                        .stat_nofollow(w.as_fd(), n)
                        .is_ok_and(|m| m.file_type == rustix::fs::FileType::RegularFile),
                    _ => false,
                };
                match JobName::parse(n, self.ident.id) {
                    Ok(j) if regular && j.kind == Kind::Ready => out.push(j),
                    _ => log::warn!("{WAITING_DIR}/{n}: foreign entry; skipped"),
                }
            })
            .map_err(|e| self.read_dir_error(e, WAITING_DIR))?;
        out.sort_by_key(|n| n.id);
        Ok(out)
    }

    /// The bytes of the waiting jobs `names` (each file's size as capacity counts it,
    /// `Meta::counted_size`; one gone meanwhile counts 0).
    pub(crate) fn waiting_bytes(&self, names: &[JobName]) -> u64 {
        let Ok(Some(w)) = self.deps_dir(WAITING_DIR, false) else {
            return 0;
        };
        names
            .iter()
            .filter_map(|n| {
                self.sys
                    .stat_nofollow(w.as_fd(), &n.format(self.ident.id))
                    .ok()
            })
            .map(|m| m.counted_size())
            .sum()
    }
}
