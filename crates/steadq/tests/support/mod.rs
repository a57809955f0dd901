//! What the library's tests and the binary's share: temp dirs under `$STEADQ_TEST_DIR`,
//! options, counts per state. `tests/it/common.rs` of the binary's package includes it too.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use steadq::{Durability, Options, Queue, State};

static N: AtomicU32 = AtomicU32::new(0);

/// A fresh, empty directory path (not created) under `$STEADQ_TEST_DIR` or the temp dir.
/// Removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let base = std::env::var_os("STEADQ_TEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let p = base.join(format!(
            "sq-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("STEADQ_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn opts(shards: u16) -> Options {
    Options {
        shards,
        ..Options::default()
    }
}

pub fn fast(shards: u16) -> Options {
    Options {
        shards,
        durability: Durability::None,
        ..Options::default()
    }
}

/// Count jobs per state (ready, leased, delayed, dead, acked; waiting jobs are not counted).
pub fn counts(q: &Queue) -> [usize; 5] {
    let mut c = [0; 5];
    for l in q.list(None).unwrap() {
        let i = match l.state {
            State::Ready => 0,
            State::Leased => 1,
            State::Delayed => 2,
            State::Dead => 3,
            State::Acked => 4,
            State::Waiting => continue,
        };
        c[i] += 1;
    }
    c
}

/// Append a line to `target/tmp/summary.txt`, which `.ci/run` prints after the tests (cargo
/// hides a passing test's output).
pub fn summary(line: &str) {
    use std::io::Write;
    let fs = std::env::var("STEADQ_TEST_DIR")
        .map(|d| format!(" [{d}]"))
        .unwrap_or_default();
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join("summary.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
    {
        let _ = writeln!(f, "{line}{fs}");
    }
    eprintln!("{line}");
}
