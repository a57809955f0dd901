//! Where a job name is parsed: directory listings turned into typed entries, once, at the edge.
//!
//! A name that does not parse, whose tag does not match, whose kind does not belong in the
//! directory, or whose entry is not a regular file is [`Foreign`]: it is reported and never
//! processed or moved by a worker.

use crate::disk::name::{JobName, Kind, NameError};
use crate::disk::sys::{EntryType, Errno, Sys};
use crate::ops::state::State;
use rustix::fs::FileType;
use std::os::fd::BorrowedFd;

/// Why an entry is foreign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Foreign {
    /// The name is not UTF-8.
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
            Foreign::NotUtf8 => "foreign: name is not UTF-8",
            Foreign::Name(NameError::Syntax) => "foreign: not a SteadQ job name",
            Foreign::Name(NameError::Tag) => {
                "foreign: name tag mismatch (corrupt name or another queue's job)"
            }
            Foreign::WrongPlace => "foreign: job name of the wrong kind for this directory",
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

/// Whether `n` belongs in `ready/<shard>/` (a ready or leased name of that shard).
pub(crate) fn fits_ready_shard(n: &JobName, shard: u16, shards: u16) -> bool {
    n.id.shard(shards) == shard && matches!(n.kind, Kind::Ready | Kind::Leased(_))
}

/// Whether `n` belongs in `receipts/<shard>/`.
pub(crate) fn fits_receipt_shard(n: &JobName, shard: u16, shards: u16) -> bool {
    n.id.shard(shards) == shard && matches!(n.kind, Kind::Receipt { .. })
}

/// Length in bytes of a ready name (`<id32>.g<16>.a<8>.m<8>.k<16>.sqj`).
pub(crate) const READY_NAME_LEN: usize = 92;
/// Length in bytes of a leased name (see [`crate::disk::name`]).
pub(crate) const LEASED_NAME_LEN: usize = 196;

/// What one listing of a `ready/<shard>/` directory found. The claim path and recovery share
/// it, so a claim that finds nothing ready has already seen every expired lease.
#[derive(Debug, Default)]
pub(crate) struct ShardScan {
    /// Ready jobs (tag checked).
    pub ready: Vec<JobName>,
    /// Leases past their deadline or from another boot (tag checked).
    pub expired: Vec<JobName>,
    /// Live leases of this boot.
    pub live: u32,
    /// Earliest `CLOCK_BOOTTIME` deadline (ns) of a live lease.
    pub next_expiry_boot_ns: Option<u64>,
    /// Foreign entries (not parsed, wrong place, bad tag, not a regular file).
    pub foreign: u32,
    /// The listing stopped early, at the ready limit: the rest of the directory is unseen.
    pub partial: bool,
}

/// Whether a lease held under `boot_id` with `CLOCK_BOOTTIME` deadline `deadline_ns` has
/// expired at `now_ns` on boot `boot`: one from another boot expires at once (its clock
/// restarted), one of this boot at its deadline. The one place the expiry rule lives.
pub(crate) fn lease_expired(l: &crate::disk::name::LeaseFields, boot: u128, now_ns: u64) -> bool {
    l.boot_id != boot || now_ns >= l.boot_deadline_ns
}

/// List `ready/<shard>/` once. A live lease is read without checking its tag (one SHA-256 per
/// name would make an idle scan of 100,000 leases cost a core for a while); every name that
/// is acted on (ready, expired) is parsed in full and its entry type checked.
/// `on_foreign(raw, why)` is called per foreign entry. The listing stops once it holds
/// `max_ready` ready jobs (`partial`): with a deep backlog a claim reads one directory chunk,
/// not the whole shard; expired leases further on are recovered when a listing reaches them
/// (or at once by [`crate::Queue::recover`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn scan_ready_shard(
    sys: &Sys,
    dir: BorrowedFd<'_>,
    queue_id: u128,
    shard: u16,
    shards: u16,
    boot: u128,
    now_ns: u64,
    max_ready: usize,
    mut on_foreign: impl FnMut(&str, Foreign),
) -> Result<ShardScan, Errno> {
    let mut out = ShardScan::default();
    let fits = |n: &JobName| fits_ready_shard(n, shard, shards);
    let mut full = |name: &str, t: EntryType, out: &mut ShardScan| -> Option<JobName> {
        match classify(sys, dir, name, queue_id, t, &fits) {
            Ok(n) => Some(n),
            Err(f) => {
                out.foreign += 1;
                on_foreign(name, f);
                None
            }
        }
    };
    sys.read_dir_while(dir, |name, raw, t| {
        if out.ready.len() >= max_ready {
            out.partial = true;
            return false;
        }
        let Some(name) = name else {
            log::warn!("foreign entry with a non-UTF-8 name: {raw:?}");
            out.foreign += 1;
            return true;
        };
        if name.len() == LEASED_NAME_LEN {
            if let Ok((n, _)) = JobName::parse_untagged(name) {
                if let Kind::Leased(l) = n.kind {
                    if !lease_expired(&l, boot, now_ns) && n.id.shard(shards) == shard {
                        out.live += 1;
                        out.next_expiry_boot_ns = Some(
                            out.next_expiry_boot_ns
                                .map_or(l.boot_deadline_ns, |x| x.min(l.boot_deadline_ns)),
                        );
                        return true;
                    }
                }
            }
        }
        if let Some(n) = full(name, t, &mut out) {
            match n.kind {
                Kind::Ready => out.ready.push(n),
                Kind::Leased(l) if lease_expired(&l, boot, now_ns) => out.expired.push(n),
                Kind::Leased(l) => {
                    out.live += 1;
                    out.next_expiry_boot_ns = Some(
                        out.next_expiry_boot_ns
                            .map_or(l.boot_deadline_ns, |x| x.min(l.boot_deadline_ns)),
                    );
                }
                _ => {}
            }
        }
        true
    })?;
    Ok(out)
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
    }
}
