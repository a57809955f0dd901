//! Directories made on demand, and the moment of their making.
//!
//! A priority level (`prio/`, `prio/<l>/`, its shards), a delayed or dead bucket and `keys/`
//! are made by whichever process first needs them, with `mkdirat(2)` ([`Queue::made_dir`],
//! the one place they are made), and then given the owner and mode of the layout above
//! them (`fchown`/`fchmod`), whatever that process's user and umask. Between the two steps
//! the directory is its maker's at its maker's umask: 700 at umask 077 (this user may not
//! even open it), 755 at umask 022 (this user may open it, not write it). It cannot be made
//! already shared: a directory made in `tmp/` and renamed into place broke the btrfs crash
//! rig (DESIGN.md, "What the crash lab found").
//!
//! So the other users wait that moment out. A refusal (`EACCES`, `EPERM`) by a directory
//! another user made within [`MAKING_WINDOW`] is taken as its making
//! ([`Queue::in_making`]), and the refused call (an open, a `mkdirat`, an `O_TMPFILE` open,
//! a rename into it) is made again every [`MAKING_POLL`] until it passes or the window
//! ends ([`Queue::retry_making`]). Each of those calls is "not done" when refused, so making
//! it again is safe. A claim does not wait: it lists the slot again after
//! [`MAKING_RECHECK`] (`ops/lease.rs`).

use crate::disk::sys::{Call, Errno};
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// How recently a directory must have been made for a refusal by it (`EACCES`, `EPERM`) to
/// be taken as its making, not as a permission ([`Queue::in_making`]): 1 s. The making
/// itself (`mkdirat`, `openat`, `fchown`, `fchmod`) takes microseconds; a directory made
/// that recently and refused on purpose costs only this much delay before it is reported.
pub(crate) const MAKING_WINDOW: Duration = Duration::from_secs(1);

/// How soon a claim looks again at a slot refused by a directory in its making: 100 ms.
pub(crate) const MAKING_RECHECK: Duration = Duration::from_millis(100);

/// How often a call refused by a directory in its making is made again: every 20 ms.
pub(crate) const MAKING_POLL: Duration = Duration::from_millis(20);

/// Where the directory [`Queue::made_dir`] opened came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// It was there at the first look.
    Found,
    /// This call made it: the caller shares it and makes it durable.
    MadeHere,
    /// Missing at the first look, then made by another process first (`EEXIST`): that
    /// process may not have made it durable yet.
    MadeElsewhere,
}

impl Queue {
    /// A fresh name for a file this handle makes in `tmp/` (`TempKind::Job`: it is flock-ed
    /// while written, and recovery removes it once its writer is gone).
    pub(crate) fn fresh_temp_name(&self) -> String {
        crate::disk::name::TempName::new(
            self.clock.boot_id(),
            crate::disk::name::TempKind::Job,
            crate::queue::random(),
        )
        .format()
        .to_string()
    }

    /// Directory `name` of `parent` (`rel` from the root), opened (`openat2(2)`, beneath,
    /// symlinks not followed), and made first (`mkdirat(2)`, mode 0777 less the umask) when
    /// missing. Each call refused by a directory in its making is made again
    /// ([`Queue::retry_making`]). The caller shares a directory it made
    /// ([`Origin::MadeHere`]) and makes it durable in `parent`.
    ///
    /// # Errors
    /// The call and errno that failed; each is not done (nothing was made, or only the
    /// empty directory).
    pub(crate) fn made_dir(
        &self,
        parent: BorrowedFd<'_>,
        name: &str,
        rel: &str,
    ) -> core::result::Result<(OwnedFd, Origin), (Call, Errno)> {
        let open = || self.retry_making(rel, || self.sys.open_dir_beneath(parent, name));
        match open() {
            Ok(fd) => return Ok((fd, Origin::Found)),
            Err(Errno::NOENT) => {}
            Err(e) => return Err((Call::Open, e)),
        }
        let origin = match self.retry_making(rel, || self.sys.mkdir(parent, name)) {
            Ok(()) => Origin::MadeHere,
            Err(Errno::EXIST) => Origin::MadeElsewhere,
            Err(e) => return Err((Call::Mkdir, e)),
        };
        let fd = open().map_err(|e| (Call::Open, e))?;
        Ok((fd, origin))
    }

    /// Make `call` (one filesystem call on the way to, or into, `rel` from the root) and
    /// make it again every [`MAKING_POLL`], for up to [`MAKING_WINDOW`], while it is refused
    /// (`EACCES`, `EPERM`) by a directory in its making ([`Queue::in_making`], judged at
    /// the moment of the refusal). Costs nothing when `call` passes; one `statx` per path
    /// component of `rel` per refusal.
    ///
    /// # Errors
    /// `call`'s last errno (a refusal after the window: a permission, for the caller to
    /// report).
    pub(crate) fn retry_making<T>(
        &self,
        rel: &str,
        mut call: impl FnMut() -> core::result::Result<T, Errno>,
    ) -> core::result::Result<T, Errno> {
        let started = self.clock.boot_ns();
        loop {
            match call() {
                Err(Errno::ACCESS | Errno::PERM) if self.waited_for_making(rel, started) => {}
                r => return r,
            }
        }
    }

    /// Called just after a call on the way to `rel` was refused: whether the refusal is a
    /// directory in its making, judged at this moment, within [`MAKING_WINDOW`] of
    /// `started` (`CLOCK_BOOTTIME`, ns); if so, after sleeping [`MAKING_POLL`]. Out of line:
    /// [`Queue::retry_making`] is made once per kind of call, and the appliance binary has
    /// a size limit.
    #[inline(never)]
    fn waited_for_making(&self, rel: &str, started: u64) -> bool {
        let refused_at = self.clock.wall_ns();
        let making = self.clock.boot_ns().saturating_sub(started) < MAKING_WINDOW.as_nanos() as u64
            && self.in_making(rel, refused_at);
        if making {
            std::thread::sleep(MAKING_POLL);
        }
        making
    }

    /// Whether what refuses this user on the way to `rel` (from the root), a directory made
    /// on demand (a level, its shards, a bucket, `keys/`: never `ready/<ss>`, made by
    /// `init`), is one another user is making right now: the deepest directory on the path
    /// that `statx(2)` can see (symlinks not followed) belongs to another user and was made
    /// within [`MAKING_WINDOW`] before the refusal (`refused_at`, `CLOCK_REALTIME` in unix ns
    /// read just after the refused call: a process stalled between the refusal and this
    /// look would otherwise judge by the age the directory has now, and take one shared
    /// meanwhile for a permission)
    /// ([`Sys::made_nofollow`](crate::disk::sys::Sys::made_nofollow): its birth time, or its
    /// change time where the filesystem keeps none). See the module docs. One `statx` per
    /// path component, on the refusal path only.
    pub(crate) fn in_making(&self, rel: &str, refused_at: u64) -> bool {
        if rel.starts_with(crate::disk::layout::READY_DIR) {
            return false;
        }
        let root = self.dirs.root.as_fd();
        let mut made = None;
        let mut end = 0;
        for part in rel.split('/') {
            end += part.len();
            match self.sys.made_nofollow(root, &rel[..end]) {
                Ok((rustix::fs::FileType::Directory, ns, uid)) => made = Some((ns, uid)),
                _ => break,
            }
            end += 1;
        }
        let window = MAKING_WINDOW.as_nanos() as u64;
        let me = rustix::process::geteuid().as_raw();
        made.is_some_and(|(ns, uid)| uid != me && refused_at.abs_diff(ns) < window)
    }

    /// Give job file (or key entry) `fd`, just made by this handle and not yet named, the
    /// read bits of `ready/` that this process's umask took away: a producer at umask 077
    /// made job files (mode 600) that a worker of another user could not open, so every
    /// claim of them was given back. One `fchmod(2)` per file, only under such a umask; the
    /// umask (`/proc/self/status`) and `ready/`'s mode are read once per handle. Best
    /// effort: a failure is logged at debug level and the file used as it is (its own user
    /// may still claim it).
    pub(crate) fn share_job_file(&self, fd: BorrowedFd<'_>) {
        let mode = *self.job_mode.get_or_init(|| {
            let Some(umask) = crate::disk::sys::Sys::umask() else {
                return 0;
            };
            let own = 0o666 & !umask;
            if own & 0o444 == 0o444 {
                return 0; // everyone may read what this process makes
            }
            match self
                .sys
                .mode_nofollow(self.dirs.root.as_fd(), crate::disk::layout::READY_DIR)
            {
                Ok(ready) if own | (ready & 0o444) != own => own | (ready & 0o444),
                _ => 0,
            }
        });
        if mode != 0 {
            if let Err(e) = self.sys.fchmod(fd, mode) {
                log::debug!("a new job file kept this process's umask: fchmod: {e}");
            }
        }
    }

    /// Give file `fd` (`rel` from the root), just made by this handle, the owner and group
    /// of `template` (from the root) and its read and write bits
    /// ([`Sys::share_file_like`](crate::disk::sys::Sys::share_file_like)). Best effort: a
    /// failure is logged and the file used as it is.
    pub(crate) fn share_file(&self, fd: BorrowedFd<'_>, template: &str, rel: &str) {
        let r = self
            .sys
            .share_file_like(fd, self.dirs.root.as_fd(), template);
        self.warn_unshared(r, template, rel);
    }

    /// Give directory `fd` (`rel` from the root), just made by this handle, the owner, group
    /// and mode of `template` (from the root), whatever this process's user and umask: a
    /// delayed bucket made 700 by a producer at umask 077 refused every other user's
    /// delayed enqueue for that minute, a dead bucket made 755 by root every other user's
    /// dead-letter for the day, `keys/` every other user's keyed enqueue for good. Best
    /// effort: a failure is logged and the directory used as it is.
    pub(crate) fn share_like(&self, fd: BorrowedFd<'_>, template: &str, rel: &str) {
        let r = self
            .sys
            .copy_owner_and_mode(fd, self.dirs.root.as_fd(), template);
        self.warn_unshared(r, template, rel);
    }

    /// Every directory made on demand that exists now, as `(rel from the root, template)`:
    /// `keys/`, `groups/` and each group's directory, `waiting/`, `needs/`, `after/`, `prio/`, each `prio/<l>/` and its shards (template `ready/`), and each
    /// delayed and dead bucket (templates `delayed/` and `dead/`). Entries that are not
    /// directories, or whose names are not the layout's, are left out (fsck reports them as
    /// foreign); a directory this user cannot list is given without its children.
    pub(crate) fn made_on_demand(&self) -> Vec<(String, &'static str)> {
        use crate::disk::layout::{
            AFTER_DIR, DEAD_DIR, DELAYED_DIR, GROUPS_DIR, KEYS_DIR, NEEDS_DIR, PRIO_DIR, READY_DIR,
            WAITING_DIR,
        };
        use crate::disk::sys::EntryType;
        let root = self.dirs.root.as_fd();
        let is_dir = |rel: &str| {
            self.sys
                .stat_nofollow(root, rel)
                .is_ok_and(|m| m.file_type == rustix::fs::FileType::Directory)
        };
        // The directories named `keep(name)` in directory `rel`.
        let children = |rel: &str, keep: &dyn Fn(&str) -> bool| -> Vec<String> {
            let mut names = Vec::new();
            if let Ok(fd) = self.sys.open_dir_beneath(root, rel) {
                let _ = self.sys.read_dir(fd.as_fd(), |n, _, t| {
                    if let Some(n) = n.filter(|n| keep(n)) {
                        if t != EntryType::Other && t != EntryType::File {
                            names.push(format!("{rel}/{n}"));
                        }
                    }
                });
            }
            names.sort();
            names.retain(|r| is_dir(r));
            names
        };
        let mut made = Vec::new();
        // `keys/`, `groups/` and the dependency directories: a member who makes one first at
        // mode 700 keeps every other user's keyed enqueues, grouped claims, dependencies and
        // counts out of it.
        for rel in [KEYS_DIR, GROUPS_DIR, WAITING_DIR, NEEDS_DIR, AFTER_DIR] {
            if is_dir(rel) {
                made.push((rel.to_string(), READY_DIR));
            }
        }
        let group = |n: &str| crate::disk::name::GroupName::new(n).is_some();
        made.extend(
            children(GROUPS_DIR, &group)
                .into_iter()
                .map(|g| (g, READY_DIR)),
        );
        if self.ident.version >= 3 && is_dir(PRIO_DIR) {
            made.push((PRIO_DIR.to_string(), READY_DIR));
            let levels = self.ident.levels();
            let level = |n: &str| {
                matches!(n.as_bytes(), [d] if (b'0'..b'0' + levels).contains(d)
                    && *d != b'0' + crate::disk::name::DEFAULT_PRIORITY)
            };
            let shards = self.ident.shards as u128;
            let shard = |n: &str| {
                n.len() == 2
                    && crate::disk::name::parse_hex(n.as_bytes(), 2).is_some_and(|s| s < shards)
            };
            for l in children(PRIO_DIR, &level) {
                let slots = children(&l, &shard);
                made.push((l, READY_DIR));
                made.extend(slots.into_iter().map(|s| (s, READY_DIR)));
            }
        }
        let bucket = |n: &str| crate::disk::layout::parse_bucket(n).is_some();
        for parent in [DELAYED_DIR, DEAD_DIR] {
            made.extend(children(parent, &bucket).into_iter().map(|b| (b, parent)));
        }
        made
    }

    /// Log a failure `r` to share `rel` (from the root) like `template`.
    fn warn_unshared(&self, r: core::result::Result<(), Errno>, template: &str, rel: &str) {
        if let Err(e) = r {
            log::warn!(
                "{}: could not give it the owner and mode of {template} ({}); other users \
                 may not be able to use it",
                self.path(rel).display(),
                std::io::Error::from(e)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const BUCKET: &str = "dead/0000000000004e20";

    /// A queue in a fresh temp dir with dead bucket [`BUCKET`] owned by another user (nobody),
    /// made now; `None` unless run as root (only root may give it away).
    fn queue_with_bucket_of_another_user(tag: &str) -> Option<(std::path::PathBuf, Queue)> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIP {tag}: needs root to make a directory of another user");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("steadq-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let q = Queue::create(&dir, crate::Options::default()).unwrap();
        let bucket = dir.join(BUCKET);
        std::fs::create_dir(&bucket).unwrap();
        std::os::unix::fs::chown(&bucket, Some(65534), Some(65534)).unwrap();
        Some((dir, q))
    }

    /// A directory's making is judged at the moment of the refusal: a process that looks
    /// 1.1 s after it was refused (stalled on a loaded machine) still takes a directory
    /// made just before the refusal as in its making, and waits for it; judged by its age
    /// at the look, it reported a permission (a dead-letter exited 2 in CI).
    #[test]
    fn a_making_is_judged_at_the_refusal_not_at_the_look() {
        let Some((dir, q)) = queue_with_bucket_of_another_user("making-stall") else {
            return;
        };
        let refused = q.clock.wall_ns();
        std::thread::sleep(MAKING_WINDOW + Duration::from_millis(100));
        assert!(q.in_making(BUCKET, refused), "refused 0 s after its making");
        assert!(
            !q.in_making(BUCKET, q.clock.wall_ns()),
            "refused 1.1 s after"
        );
        // A directory of this user is never another user's making.
        assert!(!q.in_making("dead", refused));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A refusal by a directory in its making is made again every 20 ms for about 1 s, then
    /// returned; one by a directory of this user is returned at once.
    #[test]
    fn a_lasting_refusal_is_returned_after_the_window() {
        let Some((dir, q)) = queue_with_bucket_of_another_user("making-lasting") else {
            return;
        };
        let calls = Cell::new(0u32);
        let t0 = std::time::Instant::now();
        let r: core::result::Result<(), Errno> = q.retry_making(BUCKET, || {
            calls.set(calls.get() + 1);
            Err(Errno::ACCESS)
        });
        let took = t0.elapsed();
        assert_eq!(r, Err(Errno::ACCESS));
        assert!(
            took >= MAKING_WINDOW - Duration::from_millis(50),
            "{took:?}"
        );
        let most = (MAKING_WINDOW.as_millis() / MAKING_POLL.as_millis()) as u32 + 1;
        assert!((2..=most).contains(&calls.get()), "{} calls", calls.get());
        calls.set(0);
        let own: core::result::Result<(), Errno> = q.retry_making("dead", || {
            calls.set(calls.get() + 1);
            Err(Errno::PERM)
        });
        assert_eq!((own, calls.get()), (Err(Errno::PERM), 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
