//! Walking a queue: every entry of the four job areas (ready and receipt shards, delayed and
//! dead buckets), each classified once (name, tag, place, entry type), foreign ones included;
//! the walk that list, find, status and fsck share.

use crate::disk::layout::receipts_shard;
use crate::disk::name::{parse_hex, parse_ready, raw_tag, JobName, Kind, NameError};
use crate::disk::scan::Foreign;
use crate::disk::state::State;
use crate::disk::sys::{Call, EntryType, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// One entry seen by [`Queue::walk`].
pub(crate) struct Seen<'a> {
    pub dir_rel: &'a str,
    pub dir: BorrowedFd<'a>,
    pub raw: &'a str,
    pub parsed: core::result::Result<JobName, Foreign>,
}

/// [`crate::disk::scan`]'s classification of one entry (name syntax, tag, place, entry type;
/// an entry of unknown type is looked at with `stat`), with the tag checked over the raw
/// name: a name that parses is canonical (fixed-width lowercase fields), so the name without
/// its `.k<tag16>` field is the canonical form the tag covers, and nothing is re-formatted.
pub(super) fn classify(
    sys: &crate::disk::sys::Sys,
    dir: BorrowedFd<'_>,
    name: &str,
    queue_id: u128,
    t: EntryType,
    fits: &impl Fn(&JobName) -> bool,
) -> core::result::Result<JobName, Foreign> {
    let (n, tag) = match parse_ready(name.as_bytes()) {
        Some(x) => x,
        None => JobName::parse_untagged(name).map_err(Foreign::Name)?,
    };
    if raw_tag(queue_id, name) != Some(tag) {
        return Err(Foreign::Name(NameError::Tag));
    }
    if !fits(&n) {
        return Err(Foreign::WrongPlace);
    }
    match t {
        EntryType::File => Ok(n),
        EntryType::Unknown => match sys.stat_nofollow(dir, name) {
            Ok(m) if m.file_type == rustix::fs::FileType::RegularFile => Ok(n),
            _ => Err(Foreign::NotRegular),
        },
        _ => Err(Foreign::NotRegular),
    }
}

impl Queue {
    /// Add 1 to [`Options::progress`](crate::Options::progress), if the handle has one.
    pub(crate) fn count_progress(&self) {
        if let Some(p) = &self.opts.progress {
            p.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Visit every entry of the four job areas (ready and receipt shards, delayed and dead
    /// buckets), foreign ones included. Unexpected subdirectories of `delayed/` and `dead/`
    /// are reported as foreign entries of those directories.
    pub(crate) fn walk(&self, mut f: impl FnMut(Seen<'_>)) -> Result<()> {
        self.walk_while(|s| {
            f(s);
            true
        })
    }

    /// [`Queue::walk`] until `f` returns false: no further entry is read after that.
    /// Directories this user cannot read are skipped with a warning.
    pub(crate) fn walk_while(&self, f: impl FnMut(Seen<'_>) -> bool) -> Result<()> {
        let mut unreadable = Vec::new();
        self.walk_noting(&mut unreadable, f)?;
        self.warn_unreadable(unreadable);
        Ok(())
    }

    /// Warn about each directory a walk could not read (`rel` from the root).
    pub(super) fn warn_unreadable(&self, unreadable: Vec<String>) {
        for rel in unreadable {
            match self.not_a_directory_on(&rel) {
                // Once per handle, as the claims say it.
                Some(block) => self.warn_block(&block),
                None => log::warn!(
                    "{}: cannot read this directory (Permission denied); its jobs were skipped",
                    self.path(&rel).display()
                ),
            }
        }
    }

    /// [`Queue::walk_while`] that adds the directories this user cannot read (`EACCES`,
    /// `EPERM`: a ready or receipt shard, `delayed/`, `dead/` or one of their buckets) to
    /// `unreadable`, relative to the root, and goes on with the others.
    pub(crate) fn walk_noting(
        &self,
        unreadable: &mut Vec<String>,
        f: impl FnMut(Seen<'_>) -> bool,
    ) -> Result<()> {
        let slots: Vec<u16> = (0..self.ident.slots()).collect();
        self.walk_part(&slots, true, unreadable, f)
    }

    /// [`Queue::walk_noting`] over the ready slots `slots` only, and with `rest` the receipt
    /// shards and the delayed and dead buckets after them: a part of one walk, for threads
    /// to share ([`Queue::status_with`]).
    pub(crate) fn walk_part(
        &self,
        slots: &[u16],
        rest: bool,
        unreadable: &mut Vec<String>,
        mut f: impl FnMut(Seen<'_>) -> bool,
    ) -> Result<()> {
        let shards = self.ident.shards;
        let ident = self.ident;
        let receipts: Vec<u16> = if rest {
            (0..shards).collect()
        } else {
            Vec::new()
        };
        for (area, list) in [(State::Ready, slots), (State::Acked, &receipts[..])] {
            for s in list.iter().map(|&s| s as usize) {
                // Ready slots: every level's shards (`ready/<ss>`, `prio/<l>/<ss>`).
                let (priority, shard) = ident.slot_parts(s as u16);
                let rel = match area {
                    State::Acked => receipts_shard(s as u16),
                    _ => ident.slot_dir_rel(s as u16),
                };
                let fits = |n: &JobName| match area {
                    State::Acked => {
                        crate::disk::scan::fits_receipt_shard(n, s as u16, shards)
                            && ident.has_priority(n.priority)
                    }
                    _ => crate::disk::scan::fits_ready_shard(n, priority, shard, shards),
                };
                let list = |dir: BorrowedFd<'_>| self.walk_entries(dir, &rel, &fits, &mut f);
                // A slot this user cannot read is skipped (noted; a ready one is warned once
                // and counted by status).
                let going = match area {
                    // A level's slot not made yet holds no job.
                    State::Ready => match self.list_ready_shard(s as u16, list) {
                        Err(Errno::NOENT) => Ok(Some(true)),
                        // Not a directory on its path: holds no job; noted below.
                        Err(Errno::NOTDIR) => Ok(None),
                        r => r,
                    },
                    _ => self.list_held(self.dirs.receipts[s].as_fd(), &rel, list),
                }
                .map_err(|e| self.read_dir_error(e, &rel))?;
                let going = going.unwrap_or_else(|| {
                    // Behind an entry that is not a directory (a file named `prio`): that
                    // entry, once, not each of the 56 slots behind it.
                    let at = self
                        .not_a_directory_on(&rel)
                        .unwrap_or_else(|| rel.as_str().to_owned());
                    if !unreadable.contains(&at) {
                        unreadable.push(at);
                    }
                    true
                });
                if !going {
                    return Ok(());
                }
            }
        }
        if !rest {
            return Ok(());
        }
        for (area, parent_fd, parent) in [
            (State::Delayed, &self.dirs.delayed, "delayed"),
            (State::Dead, &self.dirs.dead, "dead"),
        ] {
            if !self.walk_buckets(area, parent_fd.as_fd(), parent, unreadable, &mut f)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One directory of [`Queue::walk_while`]: every entry, classified as
    /// [`crate::disk::scan`] does (name syntax, tag, place, entry type), until `f` returns
    /// false. Returns whether to go on, or the listing's errno.
    fn walk_entries(
        &self,
        dir: BorrowedFd<'_>,
        rel: &str,
        fits: &impl Fn(&JobName) -> bool,
        f: &mut impl FnMut(Seen<'_>) -> bool,
    ) -> core::result::Result<bool, Errno> {
        let mut going = true;
        self.sys.read_dir_while(dir, |name, raw, t| {
            self.count_progress();
            // A name that is not UTF-8 is passed on escaped (`\xNN`), so it is named, and
            // `fsck --quarantine` finds it again (`disk::name::unescape_name`).
            let escaped;
            let (parsed, raw) = match name {
                Some(n) => (classify(&self.sys, dir, n, self.ident.id, t, fits), n),
                None => {
                    escaped = crate::disk::name::escape_name(raw.to_bytes());
                    log::warn!("{rel}/{escaped}: foreign entry with a name not UTF-8 or with control characters");
                    (Err(Foreign::NotUtf8), escaped.as_str())
                }
            };
            going = f(Seen {
                dir_rel: rel,
                dir,
                raw,
                parsed,
            });
            going
        })?;
        Ok(going)
    }

    /// The directory (relative to the root) that `e` failed to open or list because this
    /// user may not read it (`EACCES`, `EPERM`) or because it is not one (`ENOTDIR`, or
    /// `ELOOP`: a symlink, never followed); `None` for any other error.
    pub(crate) fn unreadable_rel(&self, e: &Cause) -> Option<String> {
        let errno = e.errno()?;
        let unreadable = [Errno::ACCESS, Errno::PERM, Errno::NOTDIR, Errno::LOOP]
            .iter()
            .any(|x| errno == (*x).into());
        let rel = e.path()?.strip_prefix(&self.root).ok()?;
        (unreadable && !rel.as_os_str().is_empty()).then(|| rel.to_string_lossy().into_owned())
    }

    pub(crate) fn read_dir_error(&self, e: Errno, rel: &str) -> Cause {
        Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.path(rel)))
    }

    /// The buckets of `delayed/` or `dead/` for [`Queue::walk_while`], in time order; anything
    /// else in the parent is a foreign entry of it. Returns whether to go on.
    fn walk_buckets(
        &self,
        area: State,
        parent_fd: BorrowedFd<'_>,
        parent: &str,
        unreadable: &mut Vec<String>,
        f: &mut impl FnMut(Seen<'_>) -> bool,
    ) -> Result<bool> {
        let mut buckets: Vec<String> = Vec::new();
        let mut going = true;
        let listed = self.list_held(parent_fd, parent, |parent_fd| {
            buckets.clear();
            self.sys.read_dir_while(parent_fd, |name, raw, t| {
                match name {
                    Some(n)
                        if parse_hex(n.as_bytes(), 16).is_some()
                            && t != crate::disk::sys::EntryType::Other
                            && t != crate::disk::sys::EntryType::File =>
                    {
                        buckets.push(n.to_string())
                    }
                    Some(n) => {
                        going = f(Seen {
                            dir_rel: parent,
                            dir: parent_fd,
                            raw: n,
                            parsed: Err(Foreign::WrongPlace),
                        })
                    }
                    None => {
                        going = f(Seen {
                            dir_rel: parent,
                            dir: parent_fd,
                            raw: &crate::disk::name::escape_name(raw.to_bytes()),
                            parsed: Err(Foreign::NotUtf8),
                        })
                    }
                }
                going
            })
        });
        match listed.map_err(|e| self.read_dir_error(e, parent))? {
            Some(()) => {}
            None => {
                unreadable.push(parent.to_string());
                return Ok(true);
            }
        }
        buckets.sort();
        for b in &buckets {
            if !going {
                break;
            }
            let rel = format!("{parent}/{b}");
            let fd: OwnedFd = match self.sys.open_dir_beneath(parent_fd, b) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => continue,
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    going = f(Seen {
                        dir_rel: parent,
                        dir: parent_fd,
                        raw: b,
                        parsed: Err(Foreign::NotRegular),
                    });
                    continue;
                }
                Err(Errno::ACCESS | Errno::PERM) => {
                    unreadable.push(rel);
                    continue;
                }
                Err(e) => {
                    let path = Some(self.path(&rel));
                    return Err(Cause::io(Call::Open, e, Outcome::NotDone, path));
                }
            };
            // A bucket is removed only when empty (by a claim, recovery or a member): one
            // removed since it was opened is empty, not a failed listing. It failed every
            // `status` and `wait --empty` that met one.
            let fits = self.bucket_fits(area, b);
            going = match self.walk_entries(fd.as_fd(), &rel, &fits, f) {
                Err(Errno::NOENT) => going,
                r => r.map_err(|e| self.read_dir_error(e, &rel))?,
            };
        }
        Ok(going)
    }

    /// Which names belong in bucket `b` of `area` (`delayed/` or `dead/`).
    fn bucket_fits(&self, area: State, b: &str) -> impl Fn(&JobName) -> bool {
        let width = self.ident.delayed_bucket_ns;
        let bucket = parse_hex(b.as_bytes(), 16).unwrap_or(0) as u64;
        let ident = self.ident;
        move |n: &JobName| match n.kind {
            _ if !ident.has_priority(n.priority) => false,
            Kind::Delayed { not_before_ns, .. } => {
                area == State::Delayed && not_before_ns / width == bucket
            }
            Kind::Dead { .. } => area == State::Dead,
            _ => false,
        }
    }
}
