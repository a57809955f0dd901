//! Who can reach a queue, read from its directories' modes: `init` warns when users outside
//! the queue's group can read payloads, and when the group the queue is shared with cannot
//! write (docs/security.md gives the trust model these warnings enforce).
//!
//! Only the permission bits are read (`stat(2)`); ACLs and capabilities are not considered.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One directory's owner, group and mode bits, as `lstat(2)` gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirMode {
    pub path: PathBuf,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

impl DirMode {
    fn read(path: &Path) -> Option<DirMode> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(DirMode {
            path: path.to_path_buf(),
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o7777,
        })
    }
}

/// The warnings for a queue whose ancestors (from `/` down to the queue's parent, in that
/// order), root directory and `ready/` have the modes given. `caller_gid` is the effective
/// group of the process that runs `init`.
///
/// - Others can read payloads when every directory from `/` to `ready/` lets others search
///   it (`o+x`): job files take the read bits of `ready/`, so its `o+r` is theirs too.
/// - The group cannot write when the queue is meant to be shared (its root directory is
///   setgid, or its group is not the caller's) and `ready/` lacks `g+w` or `g+x`.
pub fn warnings(
    ancestors: &[DirMode],
    root: &DirMode,
    ready: &DirMode,
    caller_gid: u32,
) -> Vec<String> {
    let mut out = Vec::new();
    let others_reach = ancestors
        .iter()
        .chain([root, ready])
        .all(|d| d.mode & 0o001 != 0);
    if others_reach && ready.mode & 0o004 != 0 {
        out.push(format!(
            "{}: every local user can read this queue's payloads (mode {:o} on the queue and \
             search access for others on every directory above it); keep them out with \
             `chmod -R o-rwx {}` (a queue of one user: `chmod 700 {}`; one shared by a group: \
             its parent at mode 2770 and umask 007, docs/operations.md)",
            root.path.display(),
            root.mode,
            root.path.display(),
            root.path.display()
        ));
    }
    let shared = root.mode & 0o2000 != 0 || root.gid != caller_gid;
    if shared && ready.mode & 0o030 != 0o030 {
        out.push(format!(
            "{}: mode {:o}: members of the queue's group (gid {}) cannot enqueue or work here; \
             run everything that touches the queue with umask 007 (`chmod -R g+rwX {}` \
             repairs it)",
            ready.path.display(),
            ready.mode,
            root.gid,
            root.path.display()
        ));
    }
    out
}

/// [`warnings`] for the queue at `dir`, read from the filesystem. Nothing is said where a
/// directory cannot be read (the queue's own commands report that).
pub fn check(dir: &Path) -> Vec<String> {
    let Ok(root) = std::fs::canonicalize(dir) else {
        return Vec::new();
    };
    let ancestors: Option<Vec<DirMode>> = {
        let mut v: Vec<&Path> = root.ancestors().skip(1).collect();
        v.reverse();
        v.into_iter().map(DirMode::read).collect()
    };
    let (Some(ancestors), Some(r), Some(ready)) = (
        ancestors,
        DirMode::read(&root),
        DirMode::read(&root.join("ready")),
    ) else {
        return Vec::new();
    };
    warnings(&ancestors, &r, &ready, rustix::process::getegid().as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(path: &str, gid: u32, mode: u32) -> DirMode {
        DirMode {
            path: path.into(),
            uid: 0,
            gid,
            mode,
        }
    }

    #[test]
    fn others_reach_payloads_only_through_an_open_chain() {
        let up = [d("/", 0, 0o755), d("/var", 0, 0o755)];
        // README's old recipe: parent 2775, umask 002.
        let w = warnings(
            &up,
            &d("/var/q", 50, 0o2775),
            &d("/var/q/ready", 50, 0o2775),
            0,
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("/var/q: every local user can read"),
            "{w:?}"
        );
        // A parent at 2770 closes the chain whatever the queue's own modes.
        let up2 = [d("/", 0, 0o755), d("/var", 50, 0o2770)];
        assert!(warnings(
            &up2,
            &d("/var/q", 50, 0o2775),
            &d("/var/q/ready", 50, 0o2775),
            0
        )
        .is_empty());
        // Searchable but ready/ not readable by others: job files are not readable either.
        assert!(warnings(
            &up,
            &d("/var/q", 50, 0o2771),
            &d("/var/q/ready", 50, 0o2771),
            0
        )
        .is_empty());
    }

    #[test]
    fn a_shared_queue_must_let_its_group_write() {
        let up = [d("/", 0, 0o755), d("/srv", 50, 0o2770)];
        // umask 022 in a setgid parent: the group can read but not enqueue.
        let w = warnings(
            &up,
            &d("/srv/q", 50, 0o2750),
            &d("/srv/q/ready", 50, 0o2750),
            0,
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("members of the queue's group (gid 50) cannot enqueue"),
            "{w:?}"
        );
        // A private queue (the caller's own group, not setgid) is not meant to be shared.
        assert!(warnings(&up, &d("/srv/q", 0, 0o750), &d("/srv/q/ready", 0, 0o750), 0).is_empty());
        // The fixed recipe: 2770 and umask 007.
        assert!(warnings(
            &up,
            &d("/srv/q", 50, 0o2770),
            &d("/srv/q/ready", 50, 0o2770),
            0
        )
        .is_empty());
    }
}
