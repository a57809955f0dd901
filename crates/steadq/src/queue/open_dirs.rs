//! Opening the layout's directories once, for a new handle: every default-level ready
//! shard, the levels' slots that exist, `tmp/`, the receipt shards, `delayed/`, `dead/`. A
//! directory this user cannot read, or that is not a directory, or a shard another user
//! planted, is held by a stand-in instead of refusing the queue.

use super::*;
use crate::disk::identity::Identity;
use crate::disk::layout::{receipts_shard, DEAD_DIR, DELAYED_DIR, READY_DIR, TMP_DIR};
use crate::disk::layout::{IDENTITY_FILE, PRIO_DIR};
use crate::disk::name::{DEFAULT_PRIORITY, PRIORITY_LEVELS};
use crate::disk::sys::{Call, Errno, Sys};
use crate::error::{Cause, ErrorKind, Result};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

/// The first component of path `rel` beneath `root` that exists and is not a directory
/// (`fstatat`, symlinks not followed): the length of the path up to it, and its type.
pub(super) fn first_non_directory(
    sys: &Sys,
    root: BorrowedFd<'_>,
    rel: &str,
) -> Option<(usize, rustix::fs::FileType)> {
    let mut end = 0;
    for part in rel.split('/') {
        end += part.len();
        match sys.stat_nofollow(root, &rel[..end]) {
            Ok(m) if m.file_type != rustix::fs::FileType::Directory => {
                return Some((end, m.file_type))
            }
            Ok(_) => end += 1,
            Err(_) => return None,
        }
    }
    None
}

/// Open every directory of the layout beneath `rootfd` (which the result holds as `root`).
///
/// # Errors
/// Not done: [`ErrorKind::Incomplete`] for a missing directory (an interrupted create), or
/// [`ErrorKind::Io`] naming it.
pub(super) fn open_dirs(sys: &Sys, rootfd: OwnedFd, root: &Path, ident: &Identity) -> Result<Dirs> {
    let mut o = Opener {
        sys,
        rootfd: rootfd.as_fd(),
        root,
        ident,
        level_missing: levels_missing(sys, rootfd.as_fd(), ident),
        ready_owner: ready_owner(sys, rootfd.as_fd()),
        foreign: vec![None; ident.slots() as usize],
        warned: Vec::new(),
    };
    let ready = (0..ident.slots())
        .map(|s| {
            o.slot(s)
                .map(|fd| fd.map(std::sync::OnceLock::from).unwrap_or_default())
        })
        .collect::<Result<Vec<_>>>()?;
    let absent = sys
        .open_file_path_only(rootfd.as_fd(), IDENTITY_FILE)
        .or_else(|_| o.open(IDENTITY_FILE))?;
    // Unreadable, `tmp/` is held by name only too: the commands that look (status, list,
    // show) work; those that need it fail naming it, and recover reports it unreadable.
    let tmp = o.other(TMP_DIR)?;
    let receipts = (0..ident.shards)
        .map(|s| o.other(&receipts_shard(s)))
        .collect::<Result<_>>()?;
    let (delayed, dead) = (o.other(DELAYED_DIR)?, o.other(DEAD_DIR)?);
    let (foreign, warned) = (o.foreign, o.warned);
    let mut dirs = Dirs {
        tmp,
        placed: (0..ident.slots()).map(|_| Default::default()).collect(),
        writable: (0..ident.slots()).map(|_| Default::default()).collect(),
        ready,
        absent,
        receipts,
        delayed,
        dead,
        root: rootfd,
        standins: Vec::new(),
        foreign,
        warned,
    };
    dirs.standins = standins(&dirs);
    Ok(dirs)
}

/// The held fds that are stand-ins (not directories).
fn standins(dirs: &Dirs) -> Vec<RawFd> {
    let standins = dirs.ready.iter().filter_map(|c| c.get());
    let standins = standins.chain(&dirs.receipts).chain([&dirs.absent]);
    let standins = standins.chain([&dirs.tmp, &dirs.delayed, &dirs.dead]);
    let standins = standins.filter(|fd| {
        rustix::fs::fstat(fd).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
        })
    });
    standins.map(|fd| fd.as_raw_fd()).collect()
}

/// Per level: its directory (`prio/<l>`) does not exist, so it holds no slot yet and its
/// slots are not opened one by one (448 failed opens of a 64-shard queue with no level
/// made). Only on a queue with lazy levels.
fn levels_missing(sys: &Sys, rootfd: BorrowedFd<'_>, ident: &Identity) -> Vec<bool> {
    let lazy_levels = (0..ident.slots()).any(|s| ident.slot_is_lazy(s));
    (0..PRIORITY_LEVELS)
        .map(|l| {
            let rel = format!("{PRIO_DIR}/{l}");
            lazy_levels
                && l != DEFAULT_PRIORITY
                && matches!(sys.open_dir_beneath(rootfd, &rel), Err(Errno::NOENT))
        })
        .collect()
}

/// The owner of `ready/` when it is a directory. A default-level shard is made by `init`,
/// as the owner of `ready/`: one owned by another user (root excepted) was put there by
/// someone else (a member of the queue's group who moved the owner's shard away, its jobs
/// with it, and made her own). Its jobs are not the queue's to run, and new jobs must not
/// go there: it is held by the stand-in like a blocked shard, named in a warning, and fsck
/// reports it.
fn ready_owner(sys: &Sys, rootfd: BorrowedFd<'_>) -> Option<u32> {
    sys.owner_nofollow(rootfd, READY_DIR)
        .ok()
        .filter(|(_, _, mode)| {
            rustix::fs::FileType::from_raw_mode(*mode) == rustix::fs::FileType::Directory
        })
        .map(|(uid, _, _)| uid)
}

/// What opening the layout needs to know along the way, and what it found: shards of
/// another owner (`foreign`) and the entries it warned about (`warned`).
struct Opener<'a> {
    sys: &'a Sys,
    rootfd: BorrowedFd<'a>,
    root: &'a Path,
    ident: &'a Identity,
    level_missing: Vec<bool>,
    ready_owner: Option<u32>,
    foreign: Vec<Option<(u32, u32)>>,
    warned: Vec<String>,
}

impl Opener<'_> {
    fn open_failed(&self, rel: &str, e: Errno) -> Cause {
        let kind = if e == Errno::NOENT {
            ErrorKind::Incomplete
        } else {
            ErrorKind::Io {
                call: Call::Open,
                errno: e.into(),
            }
        };
        Cause::not_done(kind, Some(self.root.join(rel)))
    }

    fn open(&self, rel: &str) -> Result<OwnedFd> {
        self.sys
            .open_dir_beneath(self.rootfd, rel)
            .map_err(|e| self.open_failed(rel, e))
    }

    /// The stand-in: an `O_PATH` handle on the identity file, which every listing and
    /// `*at` call refuses (`EBADF`, `ENOTDIR`).
    fn standin(&self) -> core::result::Result<OwnedFd, Errno> {
        self.sys.open_file_path_only(self.rootfd, IDENTITY_FILE)
    }

    /// A job directory this user cannot read (a ready or receipt shard, `delayed/`,
    /// `dead/`) is held by name only (`O_PATH`): claims skip it, status and fsck report it
    /// (`Queue::list_held`) instead of refusing the whole queue. One whose parent this user
    /// cannot search (`prio/6`, `ready/` or `receipts/` at mode 700 of another user) cannot
    /// be named at all: it is held by the stand-in.
    fn held(&self, rel: &str) -> Result<OwnedFd> {
        match self.sys.open_dir_beneath(self.rootfd, rel) {
            Err(Errno::ACCESS) => match self.sys.open_dir_path_only(self.rootfd, rel) {
                Err(Errno::ACCESS | Errno::PERM) => self.standin().or_else(|_| self.open(rel)),
                r => r.or_else(|_| self.open(rel)),
            },
            // Opened once: each directory was opened, closed and opened again (1,400
            // `openat2` calls to open a queue of 64 shards at 8 levels).
            r => r.map_err(|e| self.open_failed(rel, e)),
        }
    }

    /// The entry on the way to `rel` that is not a directory, when `e` says there is one.
    /// A slot behind something that is not a directory (a file named `prio` in the root, a
    /// file or a symlink in place of `ready/03`) holds no job: its level's slot is left
    /// unopened like one not made yet (`Queue::slot_dir` names the entry at each use), a
    /// default-level shard is held by the stand-in. Every other slot goes on, and fsck
    /// names the entry. A symlink is never followed (`ready/03 -> /elsewhere`: an attempt
    /// to keep jobs outside the queue, or to stop it): it refused the whole queue, so one
    /// member of the queue's group stopped every worker, enqueue and `init`.
    fn blocked(&self, e: &Cause, rel: &str) -> Option<String> {
        let errno = |n: Errno| {
            e.errno()
                .is_some_and(|x| x.raw_os_error() == n.raw_os_error())
        };
        if !errno(Errno::NOTDIR) && !errno(Errno::LOOP) {
            return None;
        }
        let (end, _) = first_non_directory(self.sys, self.rootfd, rel)?;
        Some(rel[..end].to_string())
    }

    /// Ready slot `s`: its directory, the stand-in, or `None` for a level's slot not made
    /// yet (opened on first use).
    fn slot(&mut self, s: u16) -> Result<Option<OwnedFd>> {
        let rel = self.ident.slot_rel(s);
        let lazy = self.ident.slot_is_lazy(s);
        if lazy && self.level_missing[self.ident.slot_parts(s).0 as usize] {
            return Ok(None);
        }
        match self.held(&rel) {
            Err(e) if *e.kind() == ErrorKind::Incomplete && lazy => Ok(None),
            Err(e) => match self.blocked(&e, &rel) {
                Some(_) if lazy => Ok(None),
                Some(block) => {
                    if !self.warned.contains(&block) {
                        log::warn!(
                            "{}: not a directory where the queue keeps ready jobs (a file, or \
                             a symlink, never followed); no job can be in the shards behind it \
                             and none is placed there until it is moved away (fsck names it)",
                            self.root.join(&block).display()
                        );
                        self.warned.push(block);
                    }
                    self.standin().map(Some).map_err(|_| e)
                }
                None => Err(e),
            },
            Ok(fd) if !lazy => self.owned_by_ready_owner(s, &rel, fd),
            r => r.map(Some),
        }
    }

    /// Default-level shard `s` (`rel`, opened as `fd`) if its owner is the owner of
    /// `ready/` (or root); otherwise the stand-in, with a warning (see [`ready_owner`]).
    fn owned_by_ready_owner(&mut self, s: u16, rel: &str, fd: OwnedFd) -> Result<Option<OwnedFd>> {
        // Not the stand-in of a shard this user cannot name: the identity file's owner says
        // nothing about the shard.
        let dir = self
            .sys
            .fstat(fd.as_fd())
            .is_ok_and(|(t, _)| t == rustix::fs::FileType::Directory);
        let owner = self.sys.owner_of(fd.as_fd()).ok().filter(|_| dir);
        match (owner, self.ready_owner) {
            // A shard of root's is not a member's plant: only root could make it.
            (Some(o), Some(r)) if o != r && o != 0 => {
                self.foreign[s as usize] = Some((o, r));
                log::warn!(
                    "{}: owned by uid {o}, not by the owner of {READY_DIR}/ (uid {r}): \
                     not the shard `init` made; its jobs are not taken and no job is \
                     placed there (fsck names it; move it away and run `steadq init` \
                     as uid {r})",
                    self.root.join(rel).display()
                );
                self.warned.push(rel.to_string());
                self.standin()
                    .map(Some)
                    .map_err(|e| self.open_failed(rel, e))
            }
            _ => Ok(Some(fd)),
        }
    }

    /// `tmp/`, `delayed/`, `dead/` or a receipt shard. One that is not a directory (a file,
    /// or a symlink, never followed) stopped every command with "Not a directory", `fsck`
    /// included. It is held by the stand-in now: the commands that need it fail naming it,
    /// the others go on, and fsck names it.
    fn other(&self, rel: &str) -> Result<OwnedFd> {
        match self.held(rel) {
            Err(e) => match self.blocked(&e, rel) {
                Some(block) => {
                    log::warn!(
                        "{}: not a directory where the queue has one (a file, or a symlink, \
                         never followed); what belongs there can be neither placed nor taken \
                         until it is moved away (fsck names it)",
                        self.root.join(block).display()
                    );
                    self.standin().map_err(|_| e)
                }
                None => Err(e),
            },
            r => r,
        }
    }
}
