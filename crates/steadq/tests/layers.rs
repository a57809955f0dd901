//! The layers hold: the on-disk layer (`src/disk/`: format, names, layout, identity, the
//! state table, clocks, syscalls) names nothing above it. A `crate::` path in its code (not
//! its comments) may only lead back into `disk` itself, directly or through one of the
//! crate root's re-exports of a `disk` item (`crate::name`, `crate::JobId`, ...); `super::`
//! may not climb out of it.
//!
//! The rule is read from the source, so a new upward import fails this test with the file,
//! the line and the path it named.

use std::collections::BTreeSet;
use std::path::Path;

/// Names the crate root re-exports from `disk` (`pub use disk::{a, b}` and
/// `pub use disk::m::{A, B}` lines of `lib.rs`), and `disk` itself.
fn disk_names(lib: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::from(["disk".to_string()]);
    for line in lib.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("pub use disk::") else {
            continue;
        };
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

/// Every `crate::<first segment>` in the code of `text` (comments left out), with its line.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let seg: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push((i + 1, seg));
            rest = tail;
        }
        if code.contains("super::super") {
            out.push((i + 1, "super::super".to_string()));
        }
    }
    out
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
    let mut files = 0;
    for e in std::fs::read_dir(src.join("disk")).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        files += 1;
        for (line, seg) in crate_paths(&text) {
            if !allowed.contains(&seg) {
                bad.push(format!(
                    "src/disk/{}:{line}: crate::{seg}",
                    p.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
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
