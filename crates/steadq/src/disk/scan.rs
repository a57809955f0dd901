//! Where a job name is parsed: directory listings turned into typed entries, once, at the edge.
//!
//! A name that does not parse, whose tag does not match, whose kind does not belong in the
//! directory, or whose entry is not a regular file is [`Foreign`]: it is reported and never
//! processed or moved by a worker.

use crate::disk::name::{JobName, Kind, NameError};
use crate::disk::state::State;
use crate::disk::sys::{EntryType, Errno, Sys};
use rustix::fs::FileType;
use std::os::fd::BorrowedFd;

/// Why an entry is foreign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Foreign {
    /// The name is not UTF-8, or holds a control character (shown escaped, `\xNN`).
    NotUtf8,
    /// The name is not a SteadQ name, or its tag does not match.
    Name(NameError),
    /// A valid name of a kind that does not belong in this directory (or the wrong shard or
    /// bucket).
    WrongPlace,
    /// Not a regular file: symlink, fifo, socket, device or directory.
    NotRegular,
}

impl core::fmt::Display for Foreign {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Foreign::NotUtf8 => "foreign: name is not UTF-8 or holds control characters",
            Foreign::Name(NameError::Syntax) => "foreign: not a SteadQ job name",
            Foreign::Name(NameError::LastGeneration) => {
                "foreign: a job name at generation ffffffffffffffff, which no job reaches (its next move would wrap to 0): forged"
            }
            Foreign::Name(NameError::Tag) => {
                "foreign: name tag mismatch (corrupt name or another queue's job)"
            }
            Foreign::WrongPlace => {
                "foreign: a job name that does not belong in this directory (another state, shard or bucket: fsck names where)"
            }
            Foreign::NotRegular => "foreign: not a regular file",
        })
    }
}

/// The state a name kind means.
pub fn state_of(kind: &Kind) -> State {
    match kind {
        Kind::Ready => State::Ready,
        Kind::Leased(_) => State::Leased,
        Kind::Delayed { .. } => State::Delayed,
        Kind::Dead { .. } => State::Dead,
        Kind::Receipt { .. } => State::Acked,
    }
}

/// Whether `n` belongs in the ready directory of priority `priority`'s shard `shard`
/// (`ready/<ss>` or `prio/<l>/<ss>`: a ready or leased name of that shard and priority).
pub(crate) fn fits_ready_shard(n: &JobName, priority: u8, shard: u16, shards: u16) -> bool {
    n.id.shard(shards) == shard
        && n.priority == priority
        && matches!(n.kind, Kind::Ready | Kind::Leased(_))
}

/// Whether `n` belongs in `receipts/<shard>/`.
pub(crate) fn fits_receipt_shard(n: &JobName, shard: u16, shards: u16) -> bool {
    n.id.shard(shards) == shard && matches!(n.kind, Kind::Receipt { .. })
}

/// Length in bytes of a ready name (`<id32>.g<16>.a<8>.m<8>.k<16>.sqj`).
pub(crate) const READY_NAME_LEN: usize = 92;
/// Length in bytes of a leased name (see [`crate::disk::name`]).
pub(crate) const LEASED_NAME_LEN: usize = 196;
/// Length in bytes of a leased name with a priority field (`.p<l>`, queue version 3).
pub(crate) const LEASED_PRIO_NAME_LEN: usize = LEASED_NAME_LEN + 3;
/// Length in bytes of a ready name with a priority field.
pub(crate) const READY_PRIO_NAME_LEN: usize = READY_NAME_LEN + 3;

/// Bytes a group field (`.q<group>`, 1 to 16 characters) adds to a name: 3 to 18.
const GROUP_FIELD: core::ops::RangeInclusive<usize> = 3..=18;

/// Whether a name of `len` bytes may be a leased name (no other kind has these lengths),
/// with or without a priority field and a group field.
pub(crate) fn leased_len(len: usize) -> bool {
    len == LEASED_NAME_LEN
        || len == LEASED_PRIO_NAME_LEN
        || GROUP_FIELD.contains(&(len.wrapping_sub(LEASED_NAME_LEN)))
        || GROUP_FIELD.contains(&(len.wrapping_sub(LEASED_PRIO_NAME_LEN)))
}

/// Whether a name of `len` bytes may be a ready name, with or without a priority field and
/// a group field (a grouped ready name may be as long as a version-1 delayed name, 110
/// bytes: the callers parse the kind of what they act on).
pub(crate) fn ready_len(len: usize) -> bool {
    len == READY_NAME_LEN
        || len == READY_PRIO_NAME_LEN
        || GROUP_FIELD.contains(&(len.wrapping_sub(READY_NAME_LEN)))
        || GROUP_FIELD.contains(&(len.wrapping_sub(READY_PRIO_NAME_LEN)))
}

/// What one listing of a ready directory (a slot: `ready/<ss>` or `prio/<l>/<ss>`) found. The
/// claim path and recovery share it, so a claim that finds nothing ready has already seen
/// every expired lease.
#[derive(Debug, Default)]
pub(crate) struct ShardScan {
    /// The oldest ready jobs (tag checked), at most the listing's limit, oldest first.
    pub ready: Vec<JobName>,
    /// Leases past their deadline or from another boot (tag checked).
    pub expired: Vec<JobName>,
    /// Live leases of this boot.
    pub live: u32,
    /// Earliest `CLOCK_BOOTTIME` deadline (ns) of a live lease.
    pub next_expiry_boot_ns: Option<u64>,
    /// Foreign entries (not parsed, wrong place, bad tag, not a regular file).
    pub foreign: u32,
    /// More ready jobs than `ready` holds were seen (only the oldest were kept): claiming
    /// every one kept does not empty the directory.
    pub truncated: bool,
    /// Ready jobs passed over because their ids are in [`SlotScan::refused`].
    pub refused: u32,
    /// When (`CLOCK_BOOTTIME` ns) the first of those refusals lapses: the slot is to be
    /// listed again then, when the jobs are tried again.
    pub refused_until: Option<u64>,
}

/// The longest lease, ns: 7 days (`crate::MAX_LEASE`, which is checked equal to it).
pub(crate) const LEASE_CAP_NS: u64 = 7 * 86_400 * 1_000_000_000;

/// Whether a lease held under `boot_id` with `CLOCK_BOOTTIME` deadline `deadline_ns` has
/// expired at `now_ns` on boot `boot`: one from another boot expires at once (its clock
/// restarted), one of this boot at its deadline, and one whose deadline is further than
/// [`lease_beyond_cap`] allows at once (a forged deadline, say `u64::MAX`, hid the job for
/// 213,503 days). The one place the expiry rule lives.
pub(crate) fn lease_expired(l: &crate::disk::name::LeaseFields, boot: u128, now_ns: u64) -> bool {
    l.boot_id != boot || now_ns >= l.boot_deadline_ns || lease_beyond_cap(l, now_ns)
}

/// Whether lease `l`'s deadline is further from `now_ns` than any claim or renewal sets
/// ([`LEASE_CAP_NS`] and a minute of slack): no lease SteadQ wrote can be, so the name was
/// forged, and the lease counts as expired (recovery gives the job back).
pub(crate) fn lease_beyond_cap(l: &crate::disk::name::LeaseFields, now_ns: u64) -> bool {
    l.boot_deadline_ns.saturating_sub(now_ns) > LEASE_CAP_NS + 60_000_000_000
}

/// A ready name kept by a listing: ordered by id alone (a max-heap drops the newest).
struct Kept(crate::disk::name::JobId, String, EntryType);

impl PartialEq for Kept {
    fn eq(&self, o: &Kept) -> bool {
        self.0 == o.0
    }
}
impl Eq for Kept {}
impl PartialOrd for Kept {
    fn partial_cmp(&self, o: &Kept) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Kept {
    fn cmp(&self, o: &Kept) -> core::cmp::Ordering {
        self.0.cmp(&o.0)
    }
}

/// Where a slot listing is and what it is for.
pub(crate) struct SlotScan {
    /// Queue id (tags).
    pub queue_id: u128,
    /// The slot's priority and shard, and the shard count (placement).
    pub priority: u8,
    /// The slot's shard.
    pub shard: u16,
    /// Shards of the queue.
    pub shards: u16,
    /// This boot and its `CLOCK_BOOTTIME` now (lease expiry).
    pub boot: u128,
    /// `CLOCK_BOOTTIME`, ns.
    pub now_ns: u64,
    /// Ready jobs to keep: the oldest this many.
    pub max_ready: usize,
    /// Ready jobs to pass over, `(id, until boot ns)` sorted by id: jobs this handle may
    /// not move or open, until their refusal lapses.
    pub refused: Vec<(u128, u64)>,
    /// Groups whose ready jobs to pass over, `(group, until boot ns)`: groups a claim found
    /// full, until it tries them again (counted with the refused jobs).
    pub full: Vec<(crate::disk::name::GroupName, u64)>,
}

/// List a ready directory once, whole. A live lease is read without checking its tag (one
/// SHA-256 per name would make an idle scan of 100,000 leases cost a core for a while); a
/// ready name is read the same way and only the `max_ready` oldest (smallest ids: ids are
/// time-ordered) are kept and then parsed in full, so the claim takes the oldest ready jobs
/// of the directory whatever order the filesystem lists it in. Every name acted on (kept
/// ready, expired) is parsed in full and its entry type checked. `on_foreign(raw, why)` is
/// called per foreign entry seen.
pub(crate) fn scan_ready_shard(
    sys: &Sys,
    dir: BorrowedFd<'_>,
    at: &SlotScan,
    mut on_foreign: impl FnMut(&str, Foreign),
) -> Result<ShardScan, Errno> {
    let mut out = ShardScan::default();
    let fits = |n: &JobName| fits_ready_shard(n, at.priority, at.shard, at.shards);
    let mut full = |name: &str, t: EntryType, out: &mut ShardScan| -> Option<JobName> {
        match classify(sys, dir, name, at.queue_id, t, &fits) {
            Ok(n) => Some(n),
            Err(f) => {
                out.foreign += 1;
                on_foreign(name, f);
                None
            }
        }
    };
    let mut kept: std::collections::BinaryHeap<Kept> = Default::default();
    let live = |out: &mut ShardScan, l: &crate::disk::name::LeaseFields| {
        out.live += 1;
        out.next_expiry_boot_ns = Some(
            out.next_expiry_boot_ns
                .map_or(l.boot_deadline_ns, |x| x.min(l.boot_deadline_ns)),
        );
    };
    sys.read_dir(dir, |name, raw, t| {
        let Some(name) = name else {
            log::warn!("foreign entry with a non-UTF-8 name: {raw:?}");
            out.foreign += 1;
            return;
        };
        if leased_len(name.len()) || ready_len(name.len()) {
            // The fixed-offset parse of a default-level ready name first (most entries of a
            // deep slot): the general parse was 17% of a new worker's first claim at
            // 1,000,000 jobs (perf).
            let parsed = crate::disk::name::parse_ready(name.as_bytes())
                .ok_or(crate::disk::name::NameError::Syntax)
                .or_else(|_| JobName::parse_untagged(name));
            if let Ok((n, _)) = parsed {
                match n.kind {
                    Kind::Leased(l) if !lease_expired(&l, at.boot, at.now_ns) && fits(&n) => {
                        return live(&mut out, &l);
                    }
                    Kind::Ready if fits(&n) => {
                        return keep_ready(&mut kept, &mut out, at, &n, name, t);
                    }
                    _ => {}
                }
            }
        }
        if let Some(n) = full(name, t, &mut out) {
            match n.kind {
                Kind::Leased(l) if lease_expired(&l, at.boot, at.now_ns) => out.expired.push(n),
                Kind::Leased(l) => live(&mut out, &l),
                _ => {}
            }
        }
    })?;
    for Kept(_, name, t) in kept.into_sorted_vec() {
        if let Some(n) = full(&name, t, &mut out) {
            out.ready.push(n);
        }
    }
    Ok(out)
}

/// A ready job `n` (entry `name` of type `t`) seen by [`scan_ready_shard`]: counted as
/// refused while its refusal (or its group's being full) lasts, else kept in `kept` if among
/// the `max_ready` oldest seen so far (a listing that drops one is truncated).
fn keep_ready(
    kept: &mut std::collections::BinaryHeap<Kept>,
    out: &mut ShardScan,
    at: &SlotScan,
    n: &JobName,
    name: &str,
    t: EntryType,
) {
    let id = n.id;
    let refused = at.refused.binary_search_by_key(&id.0, |r| r.0).ok();
    let until = match (refused, n.group) {
        (Some(i), _) => Some(at.refused[i].1),
        (None, Some(g)) => at.full.iter().find(|f| f.0 == g).map(|f| f.1),
        (None, None) => None,
    };
    if let Some(until) = until {
        out.refused += 1;
        out.refused_until = Some(out.refused_until.map_or(until, |u| u.min(until)));
        return;
    }
    if kept.len() < at.max_ready {
        kept.push(Kept(id, name.to_string(), t));
    } else {
        out.truncated = true;
        if kept.peek().is_some_and(|k| id < k.0) {
            kept.pop();
            kept.push(Kept(id, name.to_string(), t));
        }
    }
}

/// Parse `name` in full (tag checked) and check that it belongs here and is a regular file.
pub(crate) fn classify(
    sys: &Sys,
    dir: BorrowedFd<'_>,
    name: &str,
    queue_id: u128,
    t: EntryType,
    fits: &impl Fn(&JobName) -> bool,
) -> Result<JobName, Foreign> {
    match JobName::parse(name, queue_id) {
        Err(e) => Err(Foreign::Name(e)),
        Ok(n) if !fits(&n) => Err(Foreign::WrongPlace),
        Ok(n) => match t {
            EntryType::File => Ok(n),
            EntryType::Unknown => match sys.stat_nofollow(dir, name) {
                Ok(m) if m.file_type == FileType::RegularFile => Ok(n),
                _ => Err(Foreign::NotRegular),
            },
            _ => Err(Foreign::NotRegular),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::name::{JobId, LeaseFields};

    #[test]
    fn name_lengths_match_the_formatter() {
        let n = JobName::new_ready(JobId(u128::MAX), 5);
        assert_eq!(n.format(7).len(), READY_NAME_LEN);
        let l = n.next(
            Kind::Leased(LeaseFields {
                boot_id: 1,
                boot_deadline_ns: 2,
                wall_deadline_ns: 3,
                token: 4,
            }),
            true,
        );
        assert_eq!(l.format(7).len(), LEASED_NAME_LEN);
        assert_eq!(l.with_priority(0).format(7).len(), LEASED_PRIO_NAME_LEN);
        assert_eq!(n.with_priority(7).format(7).len(), READY_PRIO_NAME_LEN);
        // The version-2 delayed and receipt names are longer than before but shorter than a
        // leased name, so an idle scan's length test still picks out leases alone.
        let d = n.next(
            Kind::Delayed {
                not_before_ns: 5,
                boot: Some(crate::disk::name::BootDue {
                    boot_id: 6,
                    not_before_boot_ns: 7,
                }),
            },
            false,
        );
        let r = n.next(
            Kind::Receipt {
                token: 4,
                acked_ns: Some(8),
            },
            false,
        );
        assert_eq!((d.format(7).len(), r.format(7).len()), (162, 144));
        let (dp, rp) = (d.with_priority(1), r.with_priority(1));
        assert_eq!((dp.format(7).len(), rp.format(7).len()), (165, 147));
        let ready_or_leased = |len| leased_len(len) || ready_len(len);
        assert!(![162, 144, 165, 147, 126].into_iter().any(ready_or_leased));
    }
}
