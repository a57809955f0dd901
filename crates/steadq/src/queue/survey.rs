//! What a directory that is to become (or is) a queue already holds: jobs of another
//! queue, and the shard count its layout tells when its identity is lost.

use crate::disk::layout::{DEAD_DIR, DELAYED_DIR, READY_DIR, RECEIPTS_DIR};
use crate::disk::sys::{Call, Sys};
use crate::error::{Cause, Outcome};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// What the job files of a directory without a usable identity say about its queue.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Survey {
    /// No job file at all: a new identity is safe.
    Empty,
    /// Every readable header names this queue id.
    Agreed {
        /// The queue id.
        id: u128,
        /// Headers read.
        headers: u32,
    },
    /// Job files whose headers are unreadable or name more than one queue (`ids` distinct
    /// ids; 0 when none was readable).
    Lost {
        /// Job files found.
        jobs: u32,
        /// Distinct queue ids among the readable headers.
        ids: u32,
    },
}

/// Byte offset of the queue id in a job header (see the layout in `src/format.rs`).
pub(super) const HEADER_QUEUE_OFF: usize = 32;

/// The queue id in the header of job file `name` in `dir`: only the 128 header bytes are
/// read, and magic, version and header length must be right. `None` when unreadable.
pub(crate) fn header_queue_id(dir: BorrowedFd<'_>, name: &str, sys: &Sys) -> Option<u128> {
    use crate::disk::format::{HEADER_LEN, MAGIC, VERSION};
    let fd = sys.open_regular_ro(dir, name).ok()?;
    let mut h = [0u8; HEADER_LEN];
    let n = rustix::io::pread(fd.as_fd(), &mut h[..], 0).ok()?;
    let version = u16::from_le_bytes([h[8], h[9]]);
    let hlen = u16::from_le_bytes([h[10], h[11]]);
    if n < HEADER_LEN || h[..8] != MAGIC || version != VERSION || hlen as usize != HEADER_LEN {
        return None;
    }
    let mut q = [0u8; 16];
    q.copy_from_slice(&h[HEADER_QUEUE_OFF..HEADER_QUEUE_OFF + 16]);
    Some(u128::from_be_bytes(q))
}

/// Names of the entries of `dir` accepted by `keep`.
pub(super) fn list_names(
    sys: &Sys,
    dir: BorrowedFd<'_>,
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut out = Vec::new();
    let _ = sys.read_dir(dir, |name, _, _| {
        if let Some(n) = name.filter(|n| keep(n)) {
            out.push(n.to_string());
        }
    });
    out
}

/// Read the queue id from every job file (`*.sqj`, `*.rct`) under `ready/*/`, `receipts/*/`,
/// `delayed/*/`, `dead/*/` and `prio/<l>/*/`. Directories that are missing or unreadable are skipped.
pub(super) fn survey_jobs(sys: &Sys, root: BorrowedFd<'_>) -> Survey {
    let mut jobs = 0u32;
    let mut ids: std::collections::BTreeMap<u128, u32> = Default::default();
    // The priority levels' slots too (`prio/<l>/<ss>`): a job at a non-default priority
    // is a job of the queue, and a restore counts its header.
    let mut parents: Vec<String> = [READY_DIR, RECEIPTS_DIR, DELAYED_DIR, DEAD_DIR]
        .map(String::from)
        .to_vec();
    if let Ok(prio) = sys.open_dir_beneath(root, crate::disk::layout::PRIO_DIR) {
        let level = |n: &str| n.len() == 1 && n.as_bytes()[0].is_ascii_digit();
        for l in list_names(sys, prio.as_fd(), level) {
            parents.push(format!("{}/{l}", crate::disk::layout::PRIO_DIR));
        }
    }
    for parent in &parents {
        let Ok(pfd) = sys.open_dir_beneath(root, parent) else {
            continue;
        };
        for sub in list_names(sys, pfd.as_fd(), |_| true) {
            let Ok(dfd) = sys.open_dir_beneath(pfd.as_fd(), &sub) else {
                continue;
            };
            let is_job = |n: &str| n.ends_with(".sqj") || n.ends_with(".rct");
            for name in list_names(sys, dfd.as_fd(), is_job) {
                jobs += 1;
                if let Some(id) = header_queue_id(dfd.as_fd(), &name, sys) {
                    *ids.entry(id).or_default() += 1;
                }
            }
        }
    }
    match (jobs, ids.len()) {
        (0, _) => Survey::Empty,
        (_, 1) => {
            let (&id, &headers) = ids.iter().next().expect("one entry");
            Survey::Agreed { id, headers }
        }
        (jobs, n) => Survey::Lost {
            jobs,
            ids: n as u32,
        },
    }
}

/// What the layout and job names of a queue directory without a usable identity file say
/// of its shard count ([`orphan_shards`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrphanShards {
    /// No job name in any shard directory, and the `ready/` shard directories (if any) not
    /// a complete `00` to `<n-1>`: nothing to go by (the options' count is taken).
    Unknown,
    /// The layout tells: `ready/00` to `ready/<n-1>` (hex) and `receipts/00` to
    /// `receipts/<n-1>` are all there and nothing above, and every job name in a shard
    /// directory (`ready/`, `receipts/`, `prio/<l>/`) fits `n` (a job's shard is its id's
    /// low 64 bits modulo the count).
    Told(u16),
    /// Shard directories are missing (an empty one removed by a cleanup, say): the counts,
    /// ascending, from the highest shard directory's index + 1 up to 256 that every job
    /// name found fits. The queue's own count is always among them (unless job files were
    /// moved by hand), so one count alone is that count. Empty: none fits.
    Fits(Vec<u16>),
}

/// Read what directory `dir` (whose identity file is missing or damaged) says of its shard
/// count: see [`OrphanShards`]. Nothing is changed or followed (`openat2` with
/// `RESOLVE_NO_SYMLINKS`); unreadable directories are skipped. Reads every name under the
/// shard directories (one listing each; 1,000,000 jobs: about a second).
///
/// # Errors
/// `dir` cannot be opened (not done, nothing changed).
pub fn orphan_shards(dir: &Path) -> crate::Result<OrphanShards> {
    let sys = Sys::new();
    let root = sys
        .open_dir_path(dir)
        .map_err(|e| Cause::io(Call::Open, e, Outcome::NotDone, Some(dir.to_path_buf())))?;
    Ok(shard_evidence(&sys, root.as_fd()))
}

pub(super) fn shard_evidence(sys: &Sys, root: BorrowedFd<'_>) -> OrphanShards {
    let is_shard =
        |n: &str| n.len() == 2 && crate::disk::name::parse_hex(n.as_bytes(), 2).is_some();
    let index = |n: &str| crate::disk::name::parse_hex(n.as_bytes(), 2).map_or(0, |v| v as u16);
    let is_job = |n: &str| n.len() > 33 && n.as_bytes()[32] == b'.';
    // (id's low 64 bits, the shard directory it was found in)
    let mut found: Vec<(u64, u16)> = Vec::new();
    let mut highest: Option<u16> = None;
    // The shard parents, each with the shard directories listed in it: `ready/` (0),
    // `receipts/` (1), then each `prio/<l>/` (2).
    let mut parents: Vec<(OwnedFd, u8)> = Vec::new();
    for (p, kind) in [(READY_DIR, 0u8), (RECEIPTS_DIR, 1)] {
        if let Ok(fd) = sys.open_dir_beneath(root, p) {
            parents.push((fd, kind));
        }
    }
    if let Ok(prio) = sys.open_dir_beneath(root, crate::disk::layout::PRIO_DIR) {
        for l in list_names(sys, prio.as_fd(), |_| true) {
            if let Ok(fd) = sys.open_dir_beneath(prio.as_fd(), &l) {
                parents.push((fd, 2));
            }
        }
    }
    let (mut ready, mut receipts): (Vec<u16>, Vec<u16>) = (Vec::new(), Vec::new());
    for (pfd, kind) in &parents {
        for sub in list_names(sys, pfd.as_fd(), is_shard) {
            let Ok(dfd) = sys.open_dir_beneath(pfd.as_fd(), &sub) else {
                continue;
            };
            let s = index(&sub);
            highest = Some(highest.map_or(s, |h| h.max(s)));
            match kind {
                0 => ready.push(s),
                1 => receipts.push(s),
                _ => {}
            }
            for name in list_names(sys, dfd.as_fd(), is_job) {
                if let Some(id) = crate::disk::name::JobId::parse(&name[..32]) {
                    found.push((id.0 as u64, s));
                }
            }
        }
    }
    let Some(highest) = highest else {
        return OrphanShards::Unknown;
    };
    let fits = |n: u16| found.iter().all(|(id, s)| id % n as u64 == *s as u64);
    // Told only when `ready/` and `receipts/` both hold every shard directory of one count
    // (`init` makes them all): a cleanup that removed the empty ones leaves a layout that
    // does not tell (`ready/00`..`03` left of 8 would restore 4 shards).
    let complete = |v: &mut Vec<u16>| {
        v.sort_unstable();
        v.iter().enumerate().all(|(i, s)| i as u16 == *s)
    };
    let n = ready.len() as u16;
    if complete(&mut ready)
        && complete(&mut receipts)
        && receipts.len() == ready.len()
        && n == highest + 1
        && fits(n)
    {
        return OrphanShards::Told(n);
    }
    if found.is_empty() {
        return OrphanShards::Unknown;
    }
    OrphanShards::Fits((highest + 1..=256).filter(|&n| fits(n)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with `ready/<ss>` for each of `dirs`, each holding a job-like name for
    /// each id of `jobs` placed there (only the names are read).
    fn layout(tag: &str, dirs: &[u16], jobs: &[(u128, u16)]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sq-evidence-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for s in dirs {
            std::fs::create_dir_all(d.join(format!("ready/{s:02x}"))).unwrap();
            std::fs::create_dir_all(d.join(format!("receipts/{s:02x}"))).unwrap();
        }
        for (id, s) in jobs {
            std::fs::write(d.join(format!("ready/{s:02x}/{id:032x}.g0.sqj")), b"").unwrap();
        }
        d
    }

    #[test]
    fn shard_evidence_tells_fits_or_says_it_cannot() {
        // Every shard directory there: the layout tells.
        let d = layout("told", &[0, 1, 2, 3], &[(5, 1), (7, 3)]);
        assert_eq!(orphan_shards(&d).unwrap(), OrphanShards::Told(4));
        // A receipt shard gone (a cleanup of empty directories): the layout no longer tells.
        std::fs::remove_dir(d.join("receipts/03")).unwrap();
        let OrphanShards::Fits(f) = orphan_shards(&d).unwrap() else {
            panic!("told without receipts/03")
        };
        assert_eq!(f, vec![4]); // 5 % 4 = 1 and 7 % 4 = 3; no other count from 4 on fits
                                // Directories missing: the counts from the highest index + 1 that fit every name.
        let d2 = layout("fits", &[5, 6], &[(21, 5), (13, 5), (6, 6)]);
        let OrphanShards::Fits(f) = orphan_shards(&d2).unwrap() else {
            panic!("told")
        };
        // 8 fits (21%8=5, 13%8=5, 6%8=6); 16 does not (13%16=13); 7 does not (21%7=0).
        assert!(f.contains(&8), "{f:?}");
        assert!(!f.contains(&16) && !f.contains(&7), "{f:?}");
        assert!(f
            .iter()
            .all(|&n| n >= 7 && [21u128, 13].iter().all(|i| i % n as u128 == 5)));
        // One count alone fits: every id is 7 modulo 12 and the ids minus 7 have 12 as
        // their greatest common divisor, so of 8..=256 only 12 fits.
        let only: Vec<(u128, u16)> = (0..40u128).map(|k| (12 * (k * 7919 + 3) + 7, 7)).collect();
        let d3 = layout("one", &[7], &only);
        let OrphanShards::Fits(f) = orphan_shards(&d3).unwrap() else {
            panic!("told")
        };
        assert_eq!(f, vec![12]);
        // No shard directory at all: nothing to go by.
        let d4 = layout("none", &[], &[]);
        std::fs::create_dir_all(d4.join("ready")).unwrap();
        assert_eq!(orphan_shards(&d4).unwrap(), OrphanShards::Unknown);
        for d in [d, d2, d3, d4] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
