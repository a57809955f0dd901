//! The layers hold: the on-disk layer (`src/disk/`: format, names, layout, identity, the
//! state table, clocks, syscalls) names nothing above it. A `crate::` path in its code (not
//! its comments) may only lead back into `disk` itself, directly or through one of the
//! crate root's re-exports of a `disk` item (`crate::name`, `crate::JobId`, ...); `super::`
//! may not climb out of it.
//!
//! The operations (`src/ops/`) name nothing of administration (`src/admin/`): no
//! `crate::admin::` path and no crate-root re-export of an admin item (`crate::Status`,
//! `crate::FsckReport`, ...), and `super::` may not climb out of `ops`. Of the queue handle
//! (`src/queue.rs`) they name only [`OPS_MAY_NAME_FROM_QUEUE`]; its public items re-exported
//! at the crate root (`crate::Options`, `crate::MAX_LEASE`, ...) are the public API and
//! allowed.
//!
//! The error types (`src/error.rs`: `Error`, `Cause`, `ErrorKind`, `Outcome`, `OsErrno`) sit
//! just above the on-disk layer and name nothing else: the operations' own error types live
//! beside their operations (`EnqueueError` in `ops/enqueue.rs`, `RenewError` and
//! `SettleError` in `ops/lease.rs`), so `error.rs` names no operation, no part of the queue
//! handle and no administration.
//!
//! The rules are read from the source, so a new upward import fails a test here with the
//! file, the line and the path it named.

use std::collections::BTreeSet;
use std::path::Path;

/// Names the crate root re-exports from `disk` (`pub use disk::{a, b}` and
/// `pub use disk::m::{A, B}` lines of `lib.rs`), and `disk` itself.
fn disk_names(lib: &str) -> BTreeSet<String> {
    let mut names = reexports(lib, "disk");
    names.insert("disk".to_string());
    names
}

/// Names the crate root re-exports from `module` (`pub use <module>::...` lines of `lib.rs`,
/// the last segment of each path or each name of a `{...}` list).
fn reexports(lib: &str, module: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let prefix = format!("pub use {module}::");
    let mut lines = lib.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        // A `{...}` list that rustfmt broke over several lines.
        let mut rest = rest.to_string();
        while rest.contains('{') && !rest.contains('}') {
            match lines.next() {
                Some(l) => rest.push_str(l),
                None => break,
            }
        }
        let rest = rest.trim_end_matches(';');
        let list = match rest.split_once('{') {
            Some((_, l)) => l.trim_end_matches('}').to_string(),
            None => rest.rsplit("::").next().unwrap_or(rest).to_string(),
        };
        names.extend(
            list.split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty()),
        );
    }
    names
}

/// Every `crate::` path in the code of `text` (comments left out), with its line, as its
/// segments up to the first one that is not a plain name: `crate::queue::{random, Queue}`
/// gives `["queue", "random"]` and `["queue", "Queue"]`; `crate::{a, b}` gives `["a"]` and
/// `["b"]`.
fn crate_paths_full(text: &str) -> Vec<(usize, Vec<String>)> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let path: String = tail
                .chars()
                .take_while(|c| ident(*c) || *c == ':')
                .collect();
            let mut segs: Vec<String> = path
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let after = &tail[path.len()..];
            match after.strip_prefix('{') {
                Some(group) => {
                    let group = group.split('}').next().unwrap_or("");
                    for item in group.split(',') {
                        let first: String = item.trim().chars().take_while(|c| ident(*c)).collect();
                        let mut s = segs.clone();
                        s.push(first);
                        out.push((i + 1, s));
                    }
                }
                None => {
                    if segs.is_empty() {
                        segs.push(String::new());
                    }
                    out.push((i + 1, segs));
                }
            }
            rest = tail;
        }
    }
    out
}

/// Every `crate::<first segment>` in the code of `text` (comments left out), with its line;
/// `super::super` counts as a path of its own.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = crate_paths_full(text)
        .into_iter()
        .map(|(l, s)| (l, s[0].clone()))
        .collect();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if code.contains("super::super") {
            out.push((i + 1, "super::super".to_string()));
        }
    }
    out.sort();
    out
}

/// The `.rs` files under `dir`, at any depth, with their depth below it (0: in `dir`).
fn rs_files(dir: &Path, depth: usize, out: &mut Vec<(std::path::PathBuf, usize)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, depth + 1, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push((p, depth));
        }
    }
}

/// `p` relative to the crate's `src/`.
fn rel(src: &Path, p: &Path) -> String {
    p.strip_prefix(src).unwrap().to_string_lossy().into_owned()
}

#[test]
fn the_disk_layer_imports_nothing_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let allowed = disk_names(&lib);
    // What lib.rs re-exports from disk, as this test reads it: a change to that list's form
    // must not silently let everything through.
    for must in ["format", "name", "layout", "state", "JobId", "Clock"] {
        assert!(
            allowed.contains(must),
            "lib.rs re-export of disk::{must} not found: {allowed:?}"
        );
    }
    let mut bad = Vec::new();
    let mut files = Vec::new();
    rs_files(&src.join("disk"), 0, &mut files);
    for (p, _) in &files {
        let text = std::fs::read_to_string(p).unwrap();
        for (line, seg) in crate_paths(&text) {
            if !allowed.contains(&seg) {
                bad.push(format!("src/{}:{line}: crate::{seg}", rel(&src, p)));
            }
        }
    }
    let files = files.len();
    assert!(files >= 8, "src/disk holds {files} files");
    assert!(
        bad.is_empty(),
        "the disk layer names a higher layer:\n{}",
        bad.join("\n")
    );
}

/// The checker itself: an upward path is found, a comment is not, a re-export is allowed.
#[test]
fn the_layer_check_finds_an_upward_path() {
    let text = "use crate::disk::name::JobId;\nuse crate::ops::state::State; // crate::queue\nlet x = crate::JobId::new(1, 2);\n";
    let found = crate_paths(text);
    assert_eq!(
        found,
        vec![(1, "disk".into()), (2, "ops".into()), (3, "JobId".into())]
    );
    let allowed = disk_names("pub use disk::{format, name};\npub use disk::name::{JobId, Kind};\n");
    let up: Vec<_> = found.iter().filter(|(_, s)| !allowed.contains(s)).collect();
    assert_eq!(up, vec![&(2, "ops".to_string())]);
}

/// What `src/ops/` may name of `src/queue.rs` (`crate::queue::<item>`): the handle every
/// operation is a method of; its `Durability` option; and three helpers the handle and the
/// operations share: the lease bound (`check_lease`), the latest due time (`due_after`), the
/// per-thread random source (`random`); and the identity file's name (`IDENTITY_FILE`, which
/// capacity's temp-file rule must not count). Anything else of the handle's internals is
/// reached through `Queue`'s methods or moved down.
const OPS_MAY_NAME_FROM_QUEUE: [&str; 6] = [
    "Queue",
    "Durability",
    "check_lease",
    "due_after",
    "random",
    "IDENTITY_FILE",
];

/// What a file of `src/ops/` at `depth` below it names that the rules above forbid.
fn ops_violations(text: &str, depth: usize, admin: &BTreeSet<String>) -> Vec<(usize, String)> {
    let mut bad = Vec::new();
    for (line, segs) in crate_paths_full(text) {
        let first = segs[0].as_str();
        let second = segs.get(1).map_or("", String::as_str);
        let upward = first == "admin" || admin.contains(first);
        let internal = first == "queue" && !OPS_MAY_NAME_FROM_QUEUE.contains(&second);
        if upward || internal {
            bad.push((line, format!("crate::{}", segs.join("::"))));
        }
    }
    // `super::` once per level below `src/ops/` stays inside it; once more is the crate root.
    let climb = "super::".repeat(depth + 2);
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if code.contains(climb.trim_end_matches("::")) {
            bad.push((i + 1, climb.trim_end_matches("::").to_string()));
        }
    }
    bad
}

#[test]
fn the_operations_name_nothing_of_administration() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let admin = reexports(&lib, "admin");
    // What lib.rs re-exports from admin, as this test reads it.
    for must in [
        "FsckReport",
        "Status",
        "Listed",
        "RequeueReport",
        "CompactReport",
    ] {
        assert!(
            admin.contains(must),
            "lib.rs re-export of admin's {must} not found: {admin:?}"
        );
    }
    let mut files = Vec::new();
    rs_files(&src.join("ops"), 0, &mut files);
    let mut bad = Vec::new();
    for (p, depth) in &files {
        let text = std::fs::read_to_string(p).unwrap();
        for (line, path) in ops_violations(&text, *depth, &admin) {
            bad.push(format!("src/{}:{line}: {path}", rel(&src, p)));
        }
    }
    assert!(files.len() >= 15, "src/ops holds {} files", files.len());
    assert!(
        bad.is_empty(),
        "the operations name administration or the queue handle's internals:\n{}",
        bad.join("\n")
    );
}

/// The operations' checker itself: each kind of forbidden path is found, what is allowed
/// is not, and a comment is not read.
#[test]
fn the_ops_check_finds_each_forbidden_path() {
    let admin = reexports(
        "pub use admin::fsck::{FsckReport, Problem};\npub use admin::view::{\n    Listed, Status,\n};\n",
        "admin",
    );
    assert_eq!(
        admin,
        BTreeSet::from(["FsckReport", "Problem", "Listed", "Status"].map(String::from))
    );
    let text = "use crate::admin::view::Load;\n\
                fn f(s: &mut crate::Status) {}\n\
                use crate::queue::{random, Queue, open_dirs};\n\
                let x = crate::queue::LOST_FOUND; // crate::admin\n\
                use crate::{Options, Listed};\n\
                use super::super::admin;\n\
                use super::levels;\n\
                let m = crate::MAX_LEASE;\n";
    let found = ops_violations(text, 0, &admin);
    assert_eq!(
        found,
        vec![
            (1, "crate::admin::view::Load".to_string()),
            (2, "crate::Status".to_string()),
            (3, "crate::queue::open_dirs".to_string()),
            (4, "crate::queue::LOST_FOUND".to_string()),
            (5, "crate::Listed".to_string()),
            (6, "super::super".to_string()),
        ]
    );
    // One level down (`ops/lease/claim.rs`), `super::super` is `ops` itself.
    assert_eq!(
        ops_violations("use super::super::levels;\n", 1, &admin),
        vec![]
    );
    assert_eq!(
        ops_violations("use super::super::super::admin;\n", 1, &admin),
        vec![(1, "super::super::super".to_string())]
    );
}

/// What `src/error.rs` names that its rule forbids: any `crate::` path but into `disk` (or a
/// crate-root re-export of a `disk` item) and its own re-exports (`$crate::ErrorKind` in its
/// accessor macro).
fn error_violations(text: &str, lib: &str) -> Vec<(usize, String)> {
    let mut allowed = disk_names(lib);
    allowed.extend(reexports(lib, "error"));
    allowed.insert("error".to_string());
    crate_paths(text)
        .into_iter()
        .filter(|(_, seg)| !allowed.contains(seg))
        .map(|(line, seg)| (line, format!("crate::{seg}")))
        .collect()
}

#[test]
fn the_error_types_name_only_the_disk_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let ours = reexports(&lib, "error");
    for must in ["Error", "Cause", "ErrorKind", "Outcome"] {
        assert!(
            ours.contains(must),
            "lib.rs re-export of error's {must} not found: {ours:?}"
        );
    }
    // The per-operation error types are re-exported from their operations, not from here.
    for op in ["EnqueueError", "RenewError", "SettleError"] {
        assert!(
            !ours.contains(op),
            "{op} is re-exported from error.rs: {ours:?}"
        );
        assert!(
            reexports(&lib, "ops").contains(op),
            "{op} is not re-exported from ops"
        );
    }
    let text = std::fs::read_to_string(src.join("error.rs")).unwrap();
    let bad: Vec<String> = error_violations(&text, &lib)
        .into_iter()
        .map(|(line, path)| format!("src/error.rs:{line}: {path}"))
        .collect();
    assert!(
        bad.is_empty(),
        "error.rs names an operation, the queue handle or administration:\n{}",
        bad.join("\n")
    );
}

/// The error checker itself: an operation's path and a re-export of one are found, the disk
/// layer and error.rs's own items are not, and a comment is not read.
#[test]
fn the_error_check_finds_an_operation_path() {
    let lib = "pub use disk::name::{JobId, Kind};\npub use error::{Cause, Error};\npub use ops::lease::{Lease, SettleError};\n";
    let text = "use crate::disk::sys::Errno;\n\
                use crate::ops::lease::Lease;\n\
                let f = crate::queue::IDENTITY_FILE; // crate::admin\n\
                fn k() -> $crate::Cause {}\n\
                let e: crate::SettleError;\n\
                let j = crate::JobId::new(1, 2);\n";
    assert_eq!(
        error_violations(text, lib),
        vec![
            (2, "crate::ops".to_string()),
            (3, "crate::queue".to_string()),
            (5, "crate::SettleError".to_string()),
        ]
    );
}
