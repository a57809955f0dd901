//! Group slots: at most `N` jobs of a group with a limit leased at once, across every process
//! on the machine (DESIGN.md, Groups). A claim of a job of group `g` whose limit is `N` first
//! takes one of the files `groups/<g>/0` .. `groups/<g>/<N-1>` (its text written before it
//! gets its name: an `O_TMPFILE` linked in, or a temp file renamed in, never replacing), then
//! renames the job to its leased name; every move out of the leased name frees the slot
//! again (`ops/transition.rs`), and a renewal rewrites it. A slot whose lease is expired (or
//! from another boot) is stale: a claim that finds every slot taken reclaims stale ones.
//! Slots have no fsync: after a power cut every lease, and every slot with it, is another
//! boot's.

use crate::disk::name::{GroupName, JobId, LeaseFields};
use crate::disk::slot::{parse_slot_name, slot_name, slot_stale, Slot, GROUPS_DIR};
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, Outcome, Result};
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// How long a handle's claims pass over the jobs of a group they found full before they try
/// it again (no event says that another process freed a slot).
pub(crate) const FULL_RECHECK: Duration = Duration::from_millis(20);

/// A slot's text on its way in: an unnamed file in the group's directory, or a named temp
/// file in `tmp/` where the filesystem has no `O_TMPFILE`.
enum SlotFile {
    Unnamed(OwnedFd),
    Named(String),
}

/// What a listing of a group's slots found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotCount {
    /// Slots of live leases (and entries a claim leaves alone: symlinks, fifos).
    pub held: u32,
    /// Stale slots: a claim may take their place.
    pub stale: u32,
}

/// What a handle remembers of groups: those its claims found full, each with the
/// `CLOCK_BOOTTIME` ns until which they pass its jobs over, and the slot each lease it took
/// holds (by lease token), so that freeing or renewing reads that slot first rather than
/// every slot of the group.
#[derive(Debug, Default)]
pub(crate) struct GroupMemory {
    full: Vec<(GroupName, u64)>,
    held: std::collections::HashMap<u128, u32>,
}

/// What a renewal did with its group slot before its rename ([`Queue::renew_slot_first`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotRenewal {
    /// The lease holds no slot and runs on without one: the group has no limit, or the
    /// lease is live and was taken while the group had none (DESIGN.md, Groups).
    Without,
    /// Its own slot now holds the new deadlines.
    Rewritten,
    /// Its slot was no longer its own: it took a free one.
    Taken,
}

/// A slot found by its token: its name and file id (device, inode).
type FoundSlot = (String, (u64, u64));

/// Slots remembered per handle at most (leases settled through another handle, or dropped
/// by a crash of theirs, are forgotten when the map is full).
const HELD_MAX: usize = 4096;

/// `groups/<g>`, from the root.
pub(crate) fn group_rel(g: &GroupName) -> String {
    format!("{GROUPS_DIR}/{g}")
}

impl Queue {
    /// Directory `groups/<g>`, never through a symlink; with `make`, made (with `groups/`)
    /// when missing, then owned and shared like `ready/` ([`Queue::share_like`]): made at
    /// one user's umask, it would refuse the other users of a shared queue their slots.
    fn group_dir(&self, g: &GroupName, make: bool) -> core::result::Result<OwnedFd, Errno> {
        let root = self.dirs.root.as_fd();
        let open_or_make =
            |dir: BorrowedFd<'_>, name: &str, rel: &str| match self.sys.open_dir_beneath(dir, name)
            {
                Err(Errno::NOENT) if make => match self.sys.mkdir(dir, name) {
                    Ok(()) => {
                        let fd = self.sys.open_dir_beneath(dir, name)?;
                        self.share_like(fd.as_fd(), crate::disk::layout::READY_DIR, rel);
                        Ok(fd)
                    }
                    Err(Errno::EXIST) => self.sys.open_dir_beneath(dir, name),
                    Err(e) => Err(e),
                },
                r => r,
            };
        let groups = open_or_make(root, GROUPS_DIR, GROUPS_DIR)?;
        open_or_make(groups.as_fd(), g.as_str(), &group_rel(g))
    }

    /// Take a slot of group `g`, whose limit is `n`, for lease `l` that a claim of job `id`
    /// is about to take: `Ok(Some(k))`, slot `k` is the lease's; `Ok(None)`, the group is full
    /// (every slot held by a live lease, or by an entry claims leave alone).
    ///
    /// # Errors
    /// [`crate::ErrorKind::Io`], not done: no slot was taken.
    pub(crate) fn take_slot(
        &self,
        g: &GroupName,
        n: u32,
        id: JobId,
        l: &LeaseFields,
    ) -> Result<Option<u32>> {
        let rel = group_rel(g);
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel)));
        let dir = self.group_dir(g, true).map_err(|e| nd(Call::Open, e))?;
        let text = Slot { job: id, lease: *l }.encode();
        let mut file = self.slot_file(dir.as_fd(), &text)?;
        let mut taken = self.place_in_free_slot(&file, dir.as_fd(), n);
        if let (SlotFile::Unnamed(_), Err((Call::Link, Errno::NOTSUP))) = (&file, taken) {
            // Neither way of linking an O_TMPFILE works here (`Sys::link_tmpfile`), which the
            // handle now remembers: a named temp file, as enqueues do.
            file = self.slot_file(dir.as_fd(), &text)?;
            taken = self.place_in_free_slot(&file, dir.as_fd(), n);
        }
        if let SlotFile::Named(tmp) = &file {
            if !matches!(taken, Ok(Some(_))) {
                let _ = self.sys.unlink(self.dirs.tmp.as_fd(), tmp);
            }
        }
        if let Ok(Some(k)) = taken {
            let mut m = self.full_groups.lock().unwrap_or_else(|p| p.into_inner());
            if m.held.len() >= HELD_MAX {
                m.held.clear();
            }
            m.held.insert(l.token, k);
        }
        taken.map_err(|(c, e)| nd(c, e))
    }

    /// The slot's text `text` in a file without a name yet (see [`SlotFile`]), readable by
    /// those who may read the queue's jobs ([`Queue::share_job_file`]), whose claims read it
    /// to tell a live slot from a stale one.
    fn slot_file(&self, dir: BorrowedFd<'_>, text: &str) -> Result<SlotFile> {
        let written = |fd: &OwnedFd, at: &str| {
            self.share_job_file(fd.as_fd());
            self.sys
                .write_all(fd.as_fd(), text.as_bytes())
                .map_err(|e| Cause::io(Call::Write, e, Outcome::NotDone, Some(self.path(at))))
        };
        let named = self.sys.publish_mode() == Some(crate::disk::sys::Publish::Named);
        if !named {
            match self.sys.open_tmpfile(dir) {
                Ok(fd) => {
                    written(&fd, GROUPS_DIR)?;
                    return Ok(SlotFile::Unnamed(fd));
                }
                Err(Errno::NOTSUP | Errno::ISDIR) => {}
                Err(e) => {
                    return Err(Cause::io(
                        Call::Open,
                        e,
                        Outcome::NotDone,
                        Some(self.path(GROUPS_DIR)),
                    ))
                }
            }
        }
        let tmp = self.fresh_temp_name();
        let at = format!("{}/{tmp}", crate::disk::layout::TMP_DIR);
        let t = self.dirs.tmp.as_fd();
        let fd = (self.sys.create_file(t, &tmp))
            .map_err(|e| Cause::io(Call::Open, e, Outcome::NotDone, Some(self.path(&at))))?;
        if let Err(e) = written(&fd, &at) {
            let _ = self.sys.unlink(t, &tmp);
            return Err(e);
        }
        Ok(SlotFile::Named(tmp))
    }

    /// Give `file` the name of a free slot of `dir` (`0..n`): the free ones first, then the
    /// stale ones, each removed first (if it is still the file that was read). `Ok(None)`:
    /// none was free or stale.
    fn place_in_free_slot(
        &self,
        file: &SlotFile,
        dir: BorrowedFd<'_>,
        n: u32,
    ) -> core::result::Result<Option<u32>, (Call, Errno)> {
        for reclaim in [false, true] {
            for k in 0..n {
                let name = slot_name(k);
                if reclaim {
                    match self.stale_slot(dir, &name) {
                        Some(file_id) => self.unlink_slot(dir, &name, file_id),
                        None => continue,
                    }
                }
                let placed = match file {
                    SlotFile::Unnamed(fd) => self
                        .sys
                        .link_tmpfile(fd.as_fd(), dir, &name)
                        .map_err(|e| (Call::Link, e)),
                    SlotFile::Named(tmp) => {
                        (self.sys.rename(self.dirs.tmp.as_fd(), tmp, dir, &name))
                            .map_err(|e| (Call::Rename, e))
                    }
                };
                match placed {
                    Ok(()) => return Ok(Some(k)),
                    Err((_, Errno::EXIST)) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(None)
    }

    /// The file id of slot `name` of `dir` when it is stale ([`slot_stale`]); `None` when it
    /// is live, gone, or not a regular file (never followed, never opened as one).
    fn stale_slot(&self, dir: BorrowedFd<'_>, name: &str) -> Option<(u64, u64)> {
        let fd = self.sys.open_regular_ro(dir, name).ok()?;
        let meta = self.sys.fstat_meta(fd.as_fd()).ok()?;
        let mut text = Vec::new();
        self.sys.read_all(fd.as_fd(), 4096, &mut text).ok()?;
        let (boot, now) = (self.clock.boot_id(), self.clock.boot_ns());
        slot_stale(&text, boot, now).then_some(meta.file)
    }

    /// Remove slot `name` of `dir` if it is still file `file_id` (another claim may have
    /// taken its place since it was read: DESIGN.md, Groups, for the window left). A failure
    /// is logged.
    fn unlink_slot(&self, dir: BorrowedFd<'_>, name: &str, file_id: (u64, u64)) {
        match self.sys.stat_nofollow(dir, name) {
            Ok(m) if m.file == file_id => {}
            _ => return,
        }
        match self.sys.unlink(dir, name) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => log::warn!("removing group slot {name}: {e}"),
        }
    }

    /// Free the slot the lease with token `token` holds in group `g`, after the job left its
    /// leased name: the slot whose text names that token is removed. A failure is logged (the
    /// slot goes stale at the lease's deadline); the move that freed it stays done.
    pub(crate) fn free_slot(&self, g: &GroupName, token: u128) {
        let Ok(dir) = self.group_dir(g, false) else {
            return;
        };
        let hint = {
            let mut m = self.full_groups.lock().unwrap_or_else(|p| p.into_inner());
            m.held.remove(&token)
        };
        match self.find_slot(dir.as_fd(), token, hint) {
            Ok(Some((name, file_id))) => self.unlink_slot(dir.as_fd(), &name, file_id),
            Ok(None) => {}
            Err((c, e)) => log::warn!(
                "freeing a slot of {}: {} failed: {e}; it goes stale at its lease's deadline",
                group_rel(g),
                c.name()
            ),
        }
    }

    /// Before a renewal's rename: make the slot of lease `l` (token unchanged, new
    /// deadlines) of job `id` in group `g` say the renewed deadlines. Its own slot (the one
    /// whose text names the token) is rewritten ([`Queue::rewrite_own_slot`]); a lease with
    /// no slot of its own takes a free slot if the limit allows. With none free, a lease that
    /// has `expired` (a claim may have reclaimed its slot as stale) is lost; a live one (it
    /// was taken while the group had no limit: a live slot is never reclaimed) runs on
    /// without a slot, as a limit set at run time ends no lease already taken.
    ///
    /// # Errors
    /// Not done, nothing changed: [`crate::ErrorKind::LeaseLost`] naming the group's
    /// directory when the lease `expired`, no slot is its own and none is free (or the limit
    /// is not known: a damaged limits file); [`crate::ErrorKind::Io`] when the slot's calls
    /// fail.
    pub(crate) fn renew_slot_first(
        &self,
        g: &GroupName,
        id: JobId,
        l: &LeaseFields,
        expired: bool,
    ) -> Result<SlotRenewal> {
        let rel = group_rel(g);
        let text = Slot { job: id, lease: *l }.encode();
        match self.group_dir(g, false) {
            Ok(dir) => {
                let hint = {
                    let m = self.full_groups.lock().unwrap_or_else(|p| p.into_inner());
                    m.held.get(&l.token).copied()
                };
                let nd = |(c, e)| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel)));
                let d = dir.as_fd();
                if let Some((name, _)) = self.find_slot(d, l.token, hint).map_err(nd)? {
                    if self
                        .rewrite_own_slot(d, &name, l.token, &text)
                        .map_err(nd)?
                    {
                        return Ok(SlotRenewal::Rewritten);
                    }
                }
            }
            Err(Errno::NOENT) => {}
            Err(e) => {
                return Err(Cause::io(
                    Call::Open,
                    e,
                    Outcome::NotDone,
                    Some(self.path(&rel)),
                ));
            }
        }
        let lost = || Cause::not_done(crate::ErrorKind::LeaseLost, Some(self.path(&rel)));
        let n = match self.group_limit_now(g) {
            Ok(None) => return Ok(SlotRenewal::Without),
            Ok(Some(n)) => n,
            Err(_) if !expired => return Ok(SlotRenewal::Without),
            Err(e) => {
                log::warn!(
                    "group {g}: the expired lease of job {id} holds no slot and the group's \
                     limit is not known ({e}): not renewed"
                );
                return Err(lost());
            }
        };
        match self.take_slot(g, n, id, l)? {
            Some(_) => Ok(SlotRenewal::Taken),
            None if !expired => Ok(SlotRenewal::Without),
            None => {
                log::warn!(
                    "group {g}: the lease of job {id} expired and its slot was taken by another \
                     lease; all {n} are held: not renewed"
                );
                Err(lost())
            }
        }
    }

    /// Rewrite slot `name` of `dir`, which held lease token `token` when it was read, with
    /// `text`: a temp file in `tmp/` swapped with the slot (`RENAME_EXCHANGE`), then the
    /// file swapped out is read. Its own: removed, done (`Ok(true)`). Another holder's (a
    /// claim reclaimed this lease's stale slot since it was read): swapped back, and
    /// `Ok(false)`, the slot is not its own. Where the filesystem cannot exchange, the slot
    /// is read again and replaced (`rename`): DESIGN.md, Groups, for the window that leaves.
    ///
    /// # Errors
    /// The failed call: not done (the slot is as it was, or, after an `EIO`, holds either
    /// text of this lease).
    fn rewrite_own_slot(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        token: u128,
        text: &str,
    ) -> core::result::Result<bool, (Call, Errno)> {
        let t = self.dirs.tmp.as_fd();
        let tmp = self.fresh_temp_name();
        // Held open (and so flock-ed: `Sys::create_file`) until the swap is settled, so
        // that no recovery takes it for a dead writer's temp file.
        let held = self.sys.create_file(t, &tmp).map_err(|e| (Call::Open, e))?;
        self.share_job_file(held.as_fd());
        if let Err(e) = self.sys.write_all(held.as_fd(), text.as_bytes()) {
            let _ = self.sys.unlink(t, &tmp);
            return Err((Call::Write, e));
        }
        let holds_token = |d: BorrowedFd<'_>, n: &str| -> bool {
            let Ok(fd) = self.sys.open_regular_ro(d, n) else {
                return false;
            };
            let mut b = Vec::new();
            self.sys.read_all(fd.as_fd(), 4096, &mut b).is_ok()
                && Slot::decode(&b).is_some_and(|s| s.lease.token == token)
        };
        match self.sys.rename_exchange(t, &tmp, dir, name) {
            Ok(()) => {}
            Err(Errno::INVAL | Errno::NOTSUP) => {
                // No exchange here: read it again, then replace it.
                let r = match holds_token(dir, name) {
                    true => self.sys.rename_replace(t, &tmp, dir, name).map(|()| true),
                    false => Ok(false),
                };
                if !matches!(r, Ok(true)) {
                    let _ = self.sys.unlink(t, &tmp);
                }
                return r.map_err(|e| (Call::Rename, e));
            }
            Err(e) => {
                let _ = self.sys.unlink(t, &tmp);
                // Gone since it was read: freed or reclaimed, no longer its own.
                return match e {
                    Errno::NOENT => Ok(false),
                    e => Err((Call::Rename, e)),
                };
            }
        }
        // `tmp` is now the slot's old file.
        if holds_token(t, &tmp) {
            let _ = self.sys.unlink(t, &tmp);
            return Ok(true);
        }
        match self.sys.rename_exchange(t, &tmp, dir, name) {
            Ok(()) => {
                let _ = self.sys.unlink(t, &tmp);
            }
            Err(e) => {
                // The slot holds this lease's text now: it is this lease's, and the other
                // lease runs without one until it ends (logged: a fault after a swap).
                log::warn!(
                    "giving back group slot {name} of another lease (tmp/{tmp}): {e}; the \
                     slot is this renewal's"
                );
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The slot of `dir` whose text names lease token `token`: its name and file id. Slot
    /// `hint` (the one this handle's claim took) is read first; the others only when it is
    /// not that slot. Entries that are gone or not regular files are passed over.
    ///
    /// # Errors
    /// The call that failed listing the directory or reading a slot: whether the lease
    /// holds a slot is not known.
    fn find_slot(
        &self,
        dir: BorrowedFd<'_>,
        token: u128,
        hint: Option<u32>,
    ) -> core::result::Result<Option<FoundSlot>, (Call, Errno)> {
        let holds = |n: &str| -> core::result::Result<Option<(u64, u64)>, (Call, Errno)> {
            let fd = match self.sys.open_regular_ro(dir, n) {
                Ok(fd) => fd,
                Err(Errno::NOENT | Errno::LOOP | Errno::NXIO | Errno::ISDIR) => return Ok(None),
                Err(e) => return Err((Call::Open, e)),
            };
            let mut text = Vec::new();
            (self.sys.read_all(fd.as_fd(), 4096, &mut text)).map_err(|e| (Call::Read, e))?;
            match Slot::decode(&text) {
                Some(s) if s.lease.token == token => {
                    let m = self
                        .sys
                        .fstat_meta(fd.as_fd())
                        .map_err(|e| (Call::Stat, e))?;
                    Ok(Some(m.file))
                }
                _ => Ok(None),
            }
        };
        if let Some(k) = hint {
            let name = slot_name(k);
            if let Some(id) = holds(&name)? {
                return Ok(Some((name.to_string(), id)));
            }
        }
        let mut names = Vec::new();
        (self.sys.read_dir(dir, |n, _, _| {
            if let Some(n) = n.filter(|n| parse_slot_name(n).is_some()) {
                names.push(n.to_string());
            }
        }))
        .map_err(|e| (Call::ReadDir, e))?;
        names.sort_by_key(|n| parse_slot_name(n));
        for n in names {
            if let Some(id) = holds(&n)? {
                return Ok(Some((n, id)));
            }
        }
        Ok(None)
    }

    /// Count group `g`'s slots: held (live, or left alone) and stale. Nothing when the group
    /// has no directory.
    ///
    /// # Errors
    /// [`crate::ErrorKind::Io`] (not done) when its directory cannot be opened or listed.
    pub(crate) fn count_slots(&self, g: &GroupName) -> Result<SlotCount> {
        let rel = group_rel(g);
        let nd = |c, e| Cause::io(c, e, Outcome::NotDone, Some(self.path(&rel)));
        let dir = match self.group_dir(g, false) {
            Ok(d) => d,
            Err(Errno::NOENT) => return Ok(SlotCount::default()),
            Err(e) => return Err(nd(Call::Open, e)),
        };
        let mut names = Vec::new();
        self.sys
            .read_dir(dir.as_fd(), |n, _, _| {
                if let Some(n) = n.filter(|n| parse_slot_name(n).is_some()) {
                    names.push(n.to_string());
                }
            })
            .map_err(|e| nd(Call::ReadDir, e))?;
        let mut c = SlotCount::default();
        for n in names {
            match self.stale_slot(dir.as_fd(), &n) {
                Some(_) => c.stale += 1,
                None => c.held += u32::from(self.sys.stat_nofollow(dir.as_fd(), &n).is_ok()),
            }
        }
        Ok(c)
    }

    /// Remember group `g` as full: this handle's claims pass its jobs over for
    /// [`FULL_RECHECK`].
    pub(crate) fn remember_full(&self, g: GroupName) {
        let until = self.clock.boot_ns() + FULL_RECHECK.as_nanos() as u64;
        let mut m = self.full_groups.lock().unwrap_or_else(|p| p.into_inner());
        m.full.retain(|x| x.0 != g);
        m.full.push((g, until));
    }

    /// Forget that group `g` was found full (its limit changed through this handle).
    pub(crate) fn forget_full(&self, g: &GroupName) {
        let mut m = self.full_groups.lock().unwrap_or_else(|p| p.into_inner());
        m.full.retain(|x| x.0 != *g);
    }

    /// The groups remembered as full and not lapsed, `(group, until boot ns)` (lapsed ones
    /// are dropped).
    pub(crate) fn full_groups_now(&self) -> Vec<(GroupName, u64)> {
        let mut m = self.full_groups.lock().unwrap_or_else(|p| p.into_inner());
        if m.full.is_empty() {
            return Vec::new();
        }
        let now = self.clock.boot_ns();
        m.full.retain(|x| x.1 > now);
        m.full.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::fault::{Fault, FaultAction, FaultPlan};

    /// A renewal that read its slot as its own and finds another holder's file there when
    /// it swaps its text in (a claim reclaimed the stale slot in between) swaps it back and
    /// says so: the other holder's slot is never replaced. Its own slot is rewritten. Both
    /// with `RENAME_EXCHANGE` and, where it is refused (`EINVAL`), by reading again and
    /// replacing. No temp file is left.
    #[test]
    fn a_renewal_never_replaces_a_slot_that_is_not_its_own() {
        for exchange in [true, false] {
            let dir = std::env::temp_dir()
                .join(format!("steadq-slots-{}-{exchange}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            // Armed: each rewrite's exchange (the 1st and 2nd renames) is refused.
            let refused = |nth| Fault {
                call: Call::Rename,
                nth,
                action: FaultAction::Fail(Errno::INVAL),
            };
            let plan = FaultPlan::disarmed(vec![refused(1), refused(2)]);
            let opts = crate::Options {
                faults: Some(plan.clone()),
                ..crate::Options::default()
            };
            let q = Queue::create(&dir, opts).unwrap();
            let g = GroupName::new("ff").unwrap();
            let gd = q.group_dir(&g, true).unwrap();
            let slot = |job: u128, token: u128, secs: u64| {
                let l = LeaseFields {
                    boot_id: q.clock.boot_id(),
                    boot_deadline_ns: q.clock.boot_ns() + secs * 1_000_000_000,
                    wall_deadline_ns: q.clock.wall_ns() + secs * 1_000_000_000,
                    token,
                };
                Slot {
                    job: JobId(job),
                    lease: l,
                }
                .encode()
            };
            let at = dir.join("groups/ff/0");
            let theirs = slot(1, 2, 60);
            std::fs::write(&at, &theirs).unwrap();
            let mine = slot(3, 1, 300);
            if !exchange {
                plan.arm();
            }
            let r = q.rewrite_own_slot(gd.as_fd(), "0", 1, &mine);
            assert_eq!(r, Ok(false), "exchange {exchange}");
            assert_eq!(std::fs::read_to_string(&at).unwrap(), theirs);
            std::fs::write(&at, slot(3, 1, 0)).unwrap();
            let r = q.rewrite_own_slot(gd.as_fd(), "0", 1, &mine);
            assert_eq!(r, Ok(true), "exchange {exchange}");
            assert_eq!(std::fs::read_to_string(&at).unwrap(), mine);
            let tmp: Vec<_> = std::fs::read_dir(dir.join("tmp")).unwrap().collect();
            assert!(tmp.is_empty(), "{tmp:?}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
