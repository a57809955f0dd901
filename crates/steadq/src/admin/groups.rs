//! Group use for `status`: per group, its ready and leased jobs, its limit and the slots
//! held (DESIGN.md, Groups).

use crate::disk::name::GroupName;
use crate::queue::Queue;

/// One group as [`crate::Status::groups`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupUse {
    /// The group.
    pub group: GroupName,
    /// Its ready jobs.
    pub ready: u64,
    /// Its leased jobs (live leases; an expired one is counted as a lease no more).
    pub leased: u64,
    /// Its limit (`steadq limit`), or `None` (no limit, or not known: `limit_unknown`).
    pub max_leased: Option<u32>,
    /// The limits file could not be read (damaged): the group's limit is not known, and
    /// claims pass its jobs over until it is mended (fsck names it).
    pub limit_unknown: bool,
    /// Slot files held by live leases (and entries claims leave alone; fsck names those):
    /// what claims count against the limit.
    pub slots: u32,
}

/// Per-group counts of one status pass: `(group, ready, leased)`, unsorted.
#[derive(Debug, Default)]
pub(crate) struct GroupCounts(pub(crate) Vec<(GroupName, u64, u64)>);

impl GroupCounts {
    /// Count a job of group `g`: ready, or (with `leased`) a live lease.
    pub(crate) fn add(&mut self, g: GroupName, leased: bool) {
        let at = match self.0.iter().position(|e| e.0 == g) {
            Some(i) => i,
            None => {
                self.0.push((g, 0, 0));
                self.0.len() - 1
            }
        };
        let e = &mut self.0[at];
        if leased {
            e.2 += 1;
        } else {
            e.1 += 1;
        }
    }

    /// Add another part's counts.
    pub(crate) fn absorb(&mut self, o: GroupCounts) {
        for (g, r, l) in o.0 {
            match self.0.iter_mut().find(|e| e.0 == g) {
                Some(e) => {
                    e.1 += r;
                    e.2 += l;
                }
                None => self.0.push((g, r, l)),
            }
        }
    }
}

impl Queue {
    /// Every group with jobs ready or leased, or with a limit, sorted by name, with its
    /// limit and the slots held. A limits file that cannot be read is logged and makes every
    /// group's limit unknown; a slot directory that cannot be read is logged and shows no
    /// slots.
    pub(crate) fn group_use(&self, counted: GroupCounts) -> Vec<GroupUse> {
        let (limits, unknown) = match self.group_limits() {
            Ok(l) => (l, false),
            Err(e) => {
                log::warn!("{e}");
                (Vec::new(), true)
            }
        };
        let mut out: Vec<GroupUse> = counted
            .0
            .into_iter()
            .map(|(group, ready, leased)| GroupUse {
                group,
                ready,
                leased,
                max_leased: None,
                limit_unknown: unknown,
                slots: 0,
            })
            .collect();
        for (g, n) in limits {
            match out.iter_mut().find(|u| u.group == g) {
                Some(u) => u.max_leased = Some(n),
                None => out.push(GroupUse {
                    group: g,
                    ready: 0,
                    leased: 0,
                    max_leased: Some(n),
                    limit_unknown: false,
                    slots: 0,
                }),
            }
        }
        for u in &mut out {
            u.slots = self.count_slots(&u.group).map_or_else(
                |e| {
                    log::warn!("{e}");
                    0
                },
                |c| c.held,
            );
        }
        out.sort_by_key(|u| u.group);
        out
    }
}

/// A group whose ready jobs claims pass over now ([`Queue::held_back`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldBack {
    /// The group.
    pub group: GroupName,
    /// Its ready jobs.
    pub ready: u64,
    /// Its limit, every slot of which is held by a live lease; `None` when the limit is not
    /// known (the limits file is damaged: claims pass the group's jobs over).
    pub max_leased: Option<u32>,
}

impl Queue {
    /// The groups whose ready jobs a claim passes over now: those at their limit (every
    /// slot held by a live lease), and, when the limits file is damaged, every group (its
    /// limit is not known), each with its ready jobs, sorted by name. For a claim that found
    /// no job, to say why. Nothing is read but the limits file when no group has a limit;
    /// else one listing of the ready directories and one of each such group's slots.
    ///
    /// # Errors
    /// As [`Queue::list`] (the listing failed); not done, nothing changed.
    pub fn held_back(&self) -> crate::Result<Vec<HeldBack>> {
        let limits = self.group_limits().ok();
        if limits.as_ref().is_some_and(|l| l.is_empty()) {
            return Ok(Vec::new());
        }
        let mut ready = GroupCounts::default();
        let slots: Vec<u16> = (0..self.ident.slots()).collect();
        let mut unreadable = Vec::new();
        self.walk_part(&slots, false, &mut unreadable, |s| {
            if let Ok(n) = s.parsed {
                if let (Some(g), crate::disk::name::Kind::Ready) = (n.group, n.kind) {
                    ready.add(g, false);
                }
            }
            true
        })?;
        let mut out = Vec::new();
        for (group, ready, _) in ready.0 {
            let max_leased = match &limits {
                None => None,
                Some(l) => match l.iter().find(|x| x.0 == group) {
                    None => continue,
                    Some(&(_, n)) => match self.count_slots(&group) {
                        Ok(c) if c.held >= n => Some(n),
                        _ => continue,
                    },
                },
            };
            out.push(HeldBack {
                group,
                ready,
                max_leased,
            });
        }
        out.sort_by_key(|h| h.group);
        Ok(out)
    }
}
