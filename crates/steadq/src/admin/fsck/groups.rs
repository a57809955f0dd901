//! fsck's check of `groups/`: a directory per group (a group name), holding slot files
//! `<k>` whose text decodes and names a lease a job of the group holds (DESIGN.md, Groups).
//! Anything else is reported and skipped, never followed; `--quarantine` moves it aside
//! (which frees the slot it took).

use super::{not_utf8, push_odd, Bad, FsckReport, Problem, ProblemKind};
use crate::disk::name::{GroupName, Kind, NameError};
use crate::disk::scan::Foreign;
use crate::disk::slot::{parse_slot_name, slot_cut_short, slot_stale, Slot, GROUPS_DIR};
use crate::disk::state::State;
use crate::disk::sys::{EntryType, Errno};
use crate::error::Result;
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd};

/// How long fsck waits before it looks again at a slot that names no lease (a claim or a
/// settle of a live queue between its two steps).
const SETTLE_WINDOW: std::time::Duration = std::time::Duration::from_millis(20);

impl Queue {
    /// `groups/` holds group directories, each holding slots; see the module docs.
    pub(super) fn check_groups(&self, rep: &mut FsckReport, bad: &mut Bad) -> Result<()> {
        let groups = match self
            .sys
            .open_dir_beneath(self.dirs.root.as_fd(), GROUPS_DIR)
        {
            Ok(fd) => fd,
            // Missing, or a file or a symlink (never followed): reported in the root.
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(()),
            Err(e) => {
                rep.problems.push(Problem {
                    path: GROUPS_DIR.to_string(),
                    kind: ProblemKind::Unreadable(e.into()),
                    quarantined: false,
                });
                return Ok(());
            }
        };
        let (mut dirs, mut odd, mut wild) = (Vec::new(), Vec::new(), Vec::new());
        self.sys
            .read_dir(groups.as_fd(), |name, raw, t| {
                rep.checked += 1;
                match name.and_then(GroupName::new) {
                    Some(g) if self.is_dir_entry(groups.as_fd(), g.as_str(), t) => dirs.push(g),
                    _ => push_odd(&mut odd, &mut wild, name, raw),
                }
            })
            .map_err(|e| self.read_dir_error(e, GROUPS_DIR))?;
        not_utf8(bad, GROUPS_DIR, wild);
        for name in odd {
            let kind =
                ProblemKind::BadSlot("not a group directory (a group name: 1 to 16 of a-z 0-9)");
            bad.push((
                GROUPS_DIR.to_string(),
                name.clone(),
                self.typed_slot(groups.as_fd(), &name, kind),
            ));
        }
        for g in dirs {
            self.check_group(groups.as_fd(), &g, rep, bad)?;
        }
        Ok(())
    }

    /// One group's directory: slots only, each a regular file that decodes and names a live
    /// lease of the group (a stale one, or one a power cut cut short, is no problem: the next
    /// claim reclaims it).
    fn check_group(
        &self,
        groups: BorrowedFd<'_>,
        g: &GroupName,
        rep: &mut FsckReport,
        bad: &mut Bad,
    ) -> Result<()> {
        let rel = crate::ops::slots::group_rel(g);
        let Ok(dir) = self.sys.open_dir_beneath(groups, g.as_str()) else {
            return Ok(());
        };
        let (mut slots, mut odd, mut wild) = (Vec::new(), Vec::new(), Vec::new());
        self.sys
            .read_dir(dir.as_fd(), |name, raw, t| {
                rep.checked += 1;
                match name.filter(|n| parse_slot_name(n).is_some()) {
                    Some(n) if matches!(t, EntryType::File | EntryType::Unknown) => {
                        slots.push(n.to_string())
                    }
                    _ => push_odd(&mut odd, &mut wild, name, raw),
                }
            })
            .map_err(|e| self.read_dir_error(e, &rel))?;
        not_utf8(bad, &rel, wild);
        for name in odd {
            let kind = ProblemKind::BadSlot("not a slot (slots are named 0, 1, 2, ...)");
            bad.push((
                rel.clone(),
                name.clone(),
                self.typed_slot(dir.as_fd(), &name, kind),
            ));
        }
        for name in slots {
            if let Some(kind) = self.slot_problem(dir.as_fd(), &name, g) {
                bad.push((rel.clone(), name, kind));
            }
        }
        Ok(())
    }

    /// What is wrong with slot file `name` of group `g`'s directory `dir`, if anything.
    fn slot_problem(&self, dir: BorrowedFd<'_>, name: &str, g: &GroupName) -> Option<ProblemKind> {
        let fd = match self.sys.open_regular_ro(dir, name) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return None,
            Err(Errno::LOOP | Errno::NXIO | Errno::ISDIR) => {
                let kind = ProblemKind::Foreign(Foreign::NotRegular);
                return Some(self.typed(dir, name, kind));
            }
            Err(e) => return Some(ProblemKind::Unreadable(e.into())),
        };
        let mut text = Vec::new();
        if let Err(e) = self.sys.read_all(fd.as_fd(), 4096, &mut text) {
            return Some(ProblemKind::Unreadable(e.into()));
        }
        let Some(slot) = Slot::decode(&text) else {
            // Cut short by a power cut: stale, the next claim takes its place.
            return (!slot_cut_short(&text)).then_some(ProblemKind::BadSlot(
                "does not decode and is no slot cut short by a power cut: forged (claims take \
                 its place)",
            ));
        };
        if slot_stale(&text, self.clock.boot_id(), self.clock.boot_ns()) {
            return None;
        }
        let held = || {
            self.find(slot.job).ok().is_some_and(|l| {
                l.state == State::Leased
                    && l.name.group == Some(*g)
                    && matches!(l.name.kind, Kind::Leased(f) if f.token == slot.lease.token)
            })
        };
        if held() {
            return None;
        }
        // On a live queue a claim links its slot just before its rename, and a settle frees
        // it just after: a slot seen in that moment is looked at again a little later, and
        // only one still there, the same file, and still naming no lease is reported.
        let first = self.sys.fstat_meta(fd.as_fd()).map(|m| m.file).ok();
        std::thread::sleep(SETTLE_WINDOW);
        let still = self.sys.stat_nofollow(dir, name).ok().map(|m| m.file);
        (still.is_some() && still == first && !held()).then_some(ProblemKind::BadSlot(
            "names a lease that no job of the group holds: forged, or left by a settle whose \
             freeing failed; it takes a slot until its deadline",
        ))
    }

    /// `kind`, or what the entry is when it is not a regular file (never followed).
    fn typed_slot(&self, dir: BorrowedFd<'_>, name: &str, kind: ProblemKind) -> ProblemKind {
        match self.typed(
            dir,
            name,
            ProblemKind::Foreign(Foreign::Name(NameError::Syntax)),
        ) {
            ProblemKind::Foreign(_) => kind,
            typed => typed,
        }
    }
}
