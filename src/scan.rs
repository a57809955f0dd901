//! Where a job name is parsed: directory listings turned into typed entries, once, at the edge.
//!
//! A name that does not parse, whose tag does not match, whose kind does not belong in the
//! directory, or whose entry is not a regular file is [`Foreign`]: it is reported and never
//! processed or moved by a worker.

use crate::name::{JobName, Kind, NameError};
use crate::state::State;
use crate::sys::{EntryType, Errno, Sys};
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

/// List `dir`, which holds jobs accepted by `fits`, calling `f(name, parsed)` per entry.
pub(crate) fn scan(
    sys: &Sys,
    dir: BorrowedFd<'_>,
    queue_id: u128,
    fits: impl Fn(&JobName) -> bool,
    mut f: impl FnMut(&str, Result<JobName, Foreign>),
) -> Result<(), Errno> {
    sys.read_dir(dir, |name, raw, t| {
        let Some(name) = name else {
            log::warn!("foreign entry with a non-UTF-8 name: {raw:?}");
            f("", Err(Foreign::NotUtf8));
            return;
        };
        let parsed = match JobName::parse(name, queue_id) {
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
        };
        f(name, parsed);
    })
}
