//! Progress on a terminal for the commands that can run long (`fsck`, `compact`, `dead
//! requeue --all`, `status`, the demo): one stderr line rewritten in place (`\r`, the text,
//! then `\x1b[K` to erase what a longer earlier line left), with the count so far and its
//! rate, at most 10 times a second, first after 0.2 s (a quick command draws nothing), and
//! erased when the command ends. Nothing at all is written when stderr is not a terminal
//! (a log file, a pipe, a service's journal), so scripts and logs see no progress bytes.
//!
//! The library knows no terminal: it adds to a counter it is given
//! ([`steadq::Options::progress`]), and a thread here reads it and draws.

use super::fixed;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Time between redraws.
const TICK: Duration = Duration::from_millis(100);
/// Nothing is drawn before this: a command that ends sooner prints no progress at all.
const QUIET: Duration = Duration::from_millis(200);

/// A counter and, when stderr is a terminal, the thread that draws it. Dropping it stops the
/// thread and erases the line.
pub struct Progress {
    count: Arc<AtomicU64>,
    drawer: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
}

impl Progress {
    /// Count `noun`s (e.g. "entries") under `label` (e.g. "fsck /var/lib/jobs"), out of
    /// `total` when it is known.
    pub fn start(label: String, noun: &'static str, total: Option<u64>) -> Progress {
        let count = Arc::new(AtomicU64::new(0));
        // No progress line in the appliance build (the size-limited aarch64 binary).
        let drawer = (!cfg!(feature = "appliance") && std::io::stderr().is_terminal()).then(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let (c, s) = (count.clone(), stop.clone());
            let h = std::thread::Builder::new()
                .name("progress".into())
                .spawn(move || draw(&label, noun, total, &c, &s))
                .ok()?;
            Some((h, stop))
        });
        Progress {
            count,
            drawer: drawer.flatten(),
        }
    }

    /// The counter, for [`steadq::Options::progress`].
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.count.clone()
    }

    /// Set the count (for a caller that counts itself, such as the demo's settled jobs).
    #[cfg(not(feature = "appliance"))]
    pub fn set(&self, n: u64) {
        self.count.store(n, Ordering::Relaxed);
    }

    /// Whether the line is drawn on the terminal that stdout also writes to (both are
    /// terminals), where a line printed meanwhile would land in the middle of it.
    #[cfg(not(feature = "appliance"))]
    pub fn shown_with_stdout(&self) -> bool {
        self.drawer.is_some() && std::io::stdout().is_terminal()
    }

    /// Open the queue at `dir` in `mode`, counting into this progress.
    pub fn open(
        &self,
        dir: &Path,
        mode: steadq::OpenMode,
    ) -> Result<steadq::Queue, super::CliError> {
        let o = steadq::Options {
            mode,
            progress: Some(self.counter()),
            ..Default::default()
        };
        super::open_with(dir, o)
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((h, stop)) = self.drawer.take() {
            stop.store(true, Ordering::Relaxed);
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// The drawing thread: redraws every [`TICK`] after [`QUIET`], erases the line when stopped.
fn draw(label: &str, noun: &str, total: Option<u64>, count: &AtomicU64, stop: &AtomicBool) {
    let t0 = Instant::now();
    let mut last: Option<Instant> = None;
    let mut err = std::io::stderr();
    while !stop.load(Ordering::Relaxed) {
        std::thread::park_timeout(TICK);
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) || now - t0 < QUIET || last.is_some_and(|l| now - l < TICK)
        {
            continue;
        }
        let n = count.load(Ordering::Relaxed);
        let of = total.map(|t| format!(" of {t}")).unwrap_or_default();
        let rate = fixed::per_sec(n.into(), (now - t0).as_nanos());
        // One write: stderr is unbuffered, and a line in pieces would flicker.
        let line = format!("\r{label}: {n}{of} {noun}, {rate}/s\x1b[K");
        let _ = err.write_all(line.as_bytes());
        last = Some(now);
    }
    if last.is_some() {
        let _ = err.write_all(b"\r\x1b[K");
    }
}
