//! Entries in the queue root that are not the queue's: refused at create, never followed.

use super::*;
use crate::disk::layout::{DEAD_DIR, DELAYED_DIR, READY_DIR, RECEIPTS_DIR, TMP_DIR};
use crate::disk::name::JobName;
use crate::disk::name::TempName;
use crate::disk::sys::{Call, Errno, Sys};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use crate::disk::layout::IDENTITY_FILE;

/// [`ErrorKind::NotEmpty`] when `root` (no identity file in it) holds an entry that is not
/// one of a queue's root entries (an interrupted `init` leaves only those), its identity
/// file's temp names, a rotated evidence file, or `lost+found` (a filesystem's root).
pub(super) fn refuse_foreign_entries(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let mut first = First(None);
    root_entries(sys, root, path, &mut first)?;
    within(sys, root, path, &mut first)?;
    match first.0 {
        Some(entry) => Err(Cause::not_done(
            ErrorKind::NotEmpty { entry },
            Some(path.to_path_buf()),
        )),
        None => Ok(()),
    }
}

/// The first foreign entry found, by name (the error names one, the same every time).
struct First(Option<String>);

impl First {
    fn note(&mut self, n: String) {
        if self.0.as_ref().is_none_or(|f| n < *f) {
            self.0 = Some(n);
        }
    }
}

fn read_err(e: Errno, path: &Path, at: &str) -> Cause {
    Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(path.join(at)))
}

/// The root's own entries: a queue's root entries, `prio/`, `lost+found` (a filesystem's
/// root), the identity file's temp names, rotated evidence.
fn root_entries(sys: &Sys, root: BorrowedFd<'_>, path: &Path, first: &mut First) -> Result<()> {
    use crate::disk::sys::EntryType;
    let fs_root = is_fs_root(sys, root, path);
    sys.read_dir(root, |name, raw, t| {
        let ours = name.is_some_and(|n| {
            crate::disk::layout::ROOT_ENTRIES.contains(&n)
                || n == crate::disk::layout::PRIO_DIR
                || (n == LOST_FOUND && fs_root && t != EntryType::File && t != EntryType::Other)
                || n.starts_with(&format!(".{IDENTITY_FILE}."))
                || crate::admin::receipts::is_rotated_evidence(n)
        });
        if !ours {
            first.note(name.map_or_else(|| raw.to_string_lossy().into_owned(), str::to_string));
        }
    })
    .map_err(|e| read_err(e, path, "."))
}

/// What a directory of the layout may hold. An interrupted `init` leaves its directories
/// empty or holding only what a queue puts there (shard and bucket directories, temp and
/// job files in tmp/), and a queue that lost its identity holds job files one level deeper,
/// in its shards and buckets, and maybe `keys/` and `prio/<l>/<ss>/`. Anything else there,
/// or one of them that is not a directory (a symlink `ready -> /etc`), is someone's:
/// refused before anything is made. Job names are checked for their shape only (no
/// identity, so no tag); their contents are fsck's.
#[derive(Clone, Copy, PartialEq)]
enum Holds {
    Temps,
    Shards,
    Buckets,
    Levels,
    Keys,
    Jobs,
}

impl Holds {
    /// Entry `n` of such a directory (`dir`, `file`: what its type may be): `None` when it
    /// is foreign, `Some(None)` when it is the queue's, `Some(Some(h))` when it is the
    /// queue's and holds `h` in turn.
    fn next(self, n: &str, dir: bool, file: bool) -> Option<Option<Holds>> {
        use crate::disk::name::parse_hex;
        let job = |n: &str| file && JobName::parse_untagged(n).is_ok();
        match self {
            Holds::Temps => (file && TempName::parse(n).is_some() || job(n)).then_some(None),
            Holds::Jobs => job(n).then_some(None),
            Holds::Keys => (file && crate::ops::keys::is_key_name(n)).then_some(None),
            Holds::Shards => {
                (dir && parse_hex(n.as_bytes(), 2).is_some()).then_some(Some(Holds::Jobs))
            }
            Holds::Buckets => {
                (dir && parse_hex(n.as_bytes(), 16).is_some()).then_some(Some(Holds::Jobs))
            }
            Holds::Levels => (dir && n.len() == 1 && matches!(n.as_bytes()[0], b'0'..=b'7'))
                .then_some(Some(Holds::Shards)),
        }
    }
}

/// Down through what a queue holds (see [`Holds`]), noting what does not belong.
fn within(sys: &Sys, root: BorrowedFd<'_>, path: &Path, first: &mut First) -> Result<()> {
    use crate::disk::sys::EntryType;
    let mut todo: Vec<(String, Holds)> = vec![
        (TMP_DIR.into(), Holds::Temps),
        (READY_DIR.into(), Holds::Shards),
        (RECEIPTS_DIR.into(), Holds::Shards),
        (DEAD_DIR.into(), Holds::Buckets),
        (DELAYED_DIR.into(), Holds::Buckets),
        (crate::disk::layout::PRIO_DIR.into(), Holds::Levels),
        (crate::disk::layout::KEYS_DIR.into(), Holds::Keys),
    ];
    while let Some((d, holds)) = todo.pop() {
        let fd = match sys.open_dir_beneath(root, &d) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => continue,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                first.note(format!("{d} (not a directory)"));
                continue;
            }
            Err(e) => {
                return Err(Cause::io(
                    Call::Open,
                    e,
                    Outcome::NotDone,
                    Some(path.join(&d)),
                ))
            }
        };
        let mut deeper = Vec::new();
        sys.read_dir(fd.as_fd(), |name, raw, t| {
            let dir = matches!(t, EntryType::Dir | EntryType::Unknown);
            let file = matches!(t, EntryType::File | EntryType::Unknown);
            match (name.and_then(|n| holds.next(n, dir, file)), name) {
                (Some(Some(h)), Some(n)) => deeper.push((format!("{d}/{n}"), h)),
                (Some(None), _) => {}
                _ => {
                    let n = name.map_or_else(|| raw.to_string_lossy().into_owned(), str::to_string);
                    first.note(format!("{d}/{n}"));
                }
            }
        })
        .map_err(|e| read_err(e, path, &d))?;
        todo.extend(deeper);
    }
    Ok(())
}
