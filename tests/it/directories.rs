//! Files and symlinks in place of queue directories: named, never followed, never templates,
//! and they stop only what needs them.

use crate::common::*;

/// `tmp`, `dead`, `delayed`, `receipts`, `ready` or a receipt shard as a file or a symlink
/// stopped every command with "open failed: Not a directory", `fsck` included, which then
/// could not say what was wrong (breaker finding). Now fsck names the entry, status works,
/// and a file or a symlink (never followed) stops only what needs the directory behind it.
#[test]
fn a_file_or_symlink_in_place_of_a_queue_directory_is_named_and_stops_only_what_needs_it() {
    let elsewhere = TempDir::new("layout-elsewhere");
    std::fs::create_dir_all(elsewhere.path()).unwrap();
    for entry in [
        "tmp",
        "dead",
        "delayed",
        "receipts",
        "ready",
        "receipts/00",
        "keys",
        "quarantine",
    ] {
        for symlink in [false, true] {
            let d = TempDir::new("layout-blocked");
            let qs = d.path().to_str().unwrap();
            assert!(run(&["init", qs, "--shards", "1"]).status.success());
            assert!(steadq_in(&["enqueue", qs], b"kept").status.success());
            let at = d.path().join(entry);
            // `keys` and `quarantine` are made on first use: maybe not there yet.
            let _ = std::fs::remove_dir_all(&at).or_else(|_| std::fs::remove_file(&at));
            if symlink {
                std::os::unix::fs::symlink(elsewhere.path(), &at).unwrap();
            } else {
                std::fs::write(&at, b"not a directory").unwrap();
            }
            let case = format!("{entry} (symlink: {symlink})");
            let out = run(&["fsck", qs]);
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(5), "{case}: {out:?}");
            assert!(
                text.starts_with(&format!(
                    "{entry}: not a directory where the queue keeps jobs"
                )) && text.lines().count() == 1,
                "{case}: {text}"
            );
            let out = run(&["status", qs]);
            assert_eq!(out.status.code(), Some(0), "{case}: {out:?}");
            let out = steadq_in(&["enqueue", qs], b"new");
            let err = String::from_utf8_lossy(&out.stderr);
            if entry == "tmp" && steadq::sys::publishes_named(d.path()) {
                // On btrfs every enqueue writes its job file in tmp/ (DESIGN.md, "Found and
                // fixed: btrfs with threads"): refused, naming it, nothing made.
                assert_eq!(out.status.code(), Some(2), "{case}: {err}");
                assert!(err.contains(&format!("{qs}/tmp")), "{case}: {err}");
            } else if entry != "ready" {
                // The default enqueue needs none of these directories.
                assert_eq!(out.status.code(), Some(0), "{case}: {err}");
            }
            assert_eq!(
                std::fs::read_dir(elsewhere.path()).unwrap().count(),
                0,
                "{case}: nothing written behind a symlink"
            );
        }
    }
}

/// `recover` with a file where `tmp/` or `delayed/` belongs said "open failed: Permission
/// denied" for the directory, which sends a user to chmod; the entry is not a directory.
/// It now names the entry with "Not a directory" and recovers the rest (an expired lease goes
/// back to ready), so it exits 4: some done, not everything examined.
#[test]
fn recover_names_a_file_in_place_of_a_directory_as_not_a_directory() {
    for entry in ["tmp", "delayed"] {
        let d = TempDir::new("recover-notdir");
        let qs = d.path().to_str().unwrap();
        assert!(run(&["init", qs, "--shards", "1"]).status.success());
        assert!(steadq_in(&["enqueue", qs], b"kept").status.success());
        let out = run(&["claim", qs, "--lease", "1s"]);
        assert!(out.status.success(), "{out:?}");
        let at = d.path().join(entry);
        std::fs::remove_dir_all(&at).unwrap();
        std::fs::write(&at, b"not a directory").unwrap();
        // Past the 1 s lease by the test clock.
        let out = steadq_later(2, &["recover", qs]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{entry}: {err}");
        assert!(
            err.contains(&format!("{qs}/{entry}: open failed: Not a directory")),
            "{entry}: {err}"
        );
        assert!(!err.contains("Permission denied"), "{entry}: {err}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("expired leases to ready 1,"),
            "{entry}: {text}"
        );
    }
}

/// Directories made on demand take their owner and mode from `ready/`: a symlink there
/// (lstat mode 777) made `fsck --quarantine` chmod every level directory to 777, and a file
/// there (0644) gave new level directories no search bit (breaker finding). Only a real
/// directory is a template now.
#[test]
fn a_file_or_symlink_at_ready_is_never_a_template_for_directory_modes() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let elsewhere = TempDir::new("ready-template-elsewhere");
    std::fs::create_dir_all(elsewhere.path()).unwrap();
    let d = TempDir::new("ready-template");
    let qs = d.path().to_str().unwrap();
    assert!(run(&["init", qs]).status.success());
    assert!(steadq_in(&["enqueue", qs, "--priority", "6"], b"a")
        .status
        .success());
    let made = d.path().join("prio/6");
    let before = mode(&made);
    std::fs::rename(d.path().join("ready"), d.path().join("ready.real")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), d.path().join("ready")).unwrap();
    let out = run(&["fsck", qs, "--quarantine"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("not shared like"), "{text}");
    assert_eq!(mode(&made), before, "prio/6 kept its mode");
    // A file at `ready`: a new level's directories are still searchable.
    std::fs::remove_file(d.path().join("ready")).unwrap();
    std::fs::write(d.path().join("ready"), b"x").unwrap();
    std::fs::set_permissions(
        d.path().join("ready"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let out = steadq_in(&["enqueue", qs, "--priority", "5"], b"b");
    assert!(out.status.success(), "{out:?}");
    let level = d.path().join("prio/5");
    assert_eq!(mode(&level) & 0o111, 0o111 & before, "{:o}", mode(&level));
}
