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
    /// Its limit (`steadq limit`), or `None`.
    pub max_leased: Option<u32>,
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
    /// limit and the slots held. A limits file or slot directory that cannot be read is
    /// logged and shows no limit or no slots.
    pub(crate) fn group_use(&self, counted: GroupCounts) -> Vec<GroupUse> {
        let limits = self.group_limits().unwrap_or_else(|e| {
            log::warn!("{e}");
            Vec::new()
        });
        let mut out: Vec<GroupUse> = counted
            .0
            .into_iter()
            .map(|(group, ready, leased)| GroupUse {
                group,
                ready,
                leased,
                max_leased: None,
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
