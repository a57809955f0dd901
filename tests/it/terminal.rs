//! On a real terminal: `steadq top` and the progress lines of long commands, run in a tmux
//! pane of a fixed size (tmux is a skip notice when missing, unless STEADQ_REQUIRE_TMUX is
//! set, as .ci/run does); and what they print when their output is not a terminal.

use crate::common::*;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use steadq::{Options, Queue, Reason};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// A tmux server of this test's own (its own socket), with one 100x30 window running `cmd`
/// under `sh -c`. Killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(tag: &str, cmd: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            assert!(
                std::env::var_os("STEADQ_REQUIRE_TMUX").is_none(),
                "tmux is required (STEADQ_REQUIRE_TMUX) but not installed"
            );
            eprintln!("skipped: tmux is not installed");
            return None;
        }
        let t = Tmux {
            socket: format!("steadq-{tag}-{}", std::process::id()),
        };
        let out = t.tmux(&[
            "new-session",
            "-d",
            "-x",
            "100",
            "-y",
            "30",
            "sh",
            "-c",
            cmd,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        Some(t)
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap()
    }

    /// The pane's screen as text.
    fn screen(&self) -> String {
        text(&self.tmux(&["capture-pane", "-p"]).stdout)
    }

    /// Poll the screen until `ok` holds (30 s at most); the screen it held on.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < end, "waited for {what}; the screen:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of the process the pane's shell runs (the shell's one child).
    fn child_pid(&self) -> u32 {
        let sh = self.tmux(&["display", "-p", "#{pane_pid}"]);
        let sh = text(&sh.stdout).trim().to_string();
        let kids = std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children")).unwrap();
        kids.split_whitespace().next().unwrap().parse().unwrap()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The value after `label` on the screen (e.g. "acks/s " -> "0.7").
fn field<'a>(screen: &'a str, label: &str) -> Option<&'a str> {
    let at = screen.find(label)? + label.len();
    screen[at..].split_whitespace().next()
}

/// `top` draws the queue and redraws it as jobs are enqueued, claimed, acked and
/// dead-lettered (counts per state and priority, holders, reasons, a non-zero ack rate);
/// `q` leaves the alternate screen and gives the terminal its modes back (echo, canonical
/// input: `stty` after it says so).
/// `top` exited 0 and the `stty` after it has drawn its lines (`icanon` first, then `echo`,
/// set or not): a screen read between the two misses the modes.
fn exited_and_stty_shown(s: &str) -> bool {
    s.split_once("top exited 0")
        .is_some_and(|(_, after)| after.contains("echo\n"))
}

#[test]
fn top_redraws_as_the_queue_changes_and_q_gives_the_terminal_back() {
    // Under qemu-user (.ci/cross's aarch64 run) `q` was not seen within 30 s. `top` is not in
    // the aarch64 binary that ships (the appliance build leaves it out); the native run
    // covers it.
    if std::env::var_os("STEADQ_QEMU_USER").is_some() {
        eprintln!("under qemu-user: top_redraws_as_the_queue_changes_and_q_gives_the_terminal_back skipped");
        return;
    }
    let d = TempDir::new("top");
    let q = Queue::create(d.path(), fast(2)).unwrap();
    for _ in 0..3 {
        q.enqueue(b"job").unwrap();
    }
    let cmd = format!(
        "{BIN} top {} 2>/dev/null; echo \"top exited $?\"; stty -a | tr ' ' '\\n' | grep -E -x -e '-?(icanon|echo)'; sleep 60",
        p(d.path())
    );
    let Some(t) = Tmux::start("top", &cmd) else {
        return;
    };
    let s = t.wait_for("3 ready", |s| s.contains("ready 3  leased 0"));
    assert!(s.contains("steadq top "), "{s}");
    assert!(s.contains("dead by reason: -"), "{s}");
    // Claimed: one leased, held by this boot.
    let l = q.claim().unwrap().unwrap();
    let s = t.wait_for("1 leased", |s| s.contains("ready 2  leased 1 (0 expired)"));
    assert!(s.contains("(this boot)  1 live, 0 expired"), "{s}");
    // The depth table: the default priority's row.
    let row = s
        .lines()
        .find(|l| l.trim_start().starts_with("3 "))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["3", "2", "1", "0", "0", "0", "0"], "{s}");
    // Acked: a receipt and an ack rate above zero.
    l.ack().unwrap();
    t.wait_for("an ack and its rate", |s| {
        s.contains("acked 1") && field(s, "acks/s ").is_some_and(|r| r != "0.0" && r != "-")
    });
    // Dead-lettered with a reason.
    let l = q.claim().unwrap().unwrap();
    l.fail(Reason::new("badinput").unwrap()).unwrap();
    t.wait_for("a dead job by reason", |s| {
        s.contains("dead by reason: badinput 1") && s.contains("ready 1  leased 0")
    });
    t.tmux(&["send-keys", "q"]);
    let s = t.wait_for("top to exit", exited_and_stty_shown);
    assert!(
        !s.contains("steadq top "),
        "the alternate screen was left:\n{s}"
    );
    assert!(s.contains("\nicanon\n") && s.contains("\necho\n"), "{s}");
}

/// SIGTERM (and so a closed terminal's SIGHUP) ends `top` as `q` does: exit 0, the
/// terminal's screen and modes given back.
#[test]
fn top_gives_the_terminal_back_on_sigterm() {
    let d = TempDir::new("top-term");
    let q = Queue::create(d.path(), fast(1)).unwrap();
    q.enqueue(b"job").unwrap();
    let cmd = format!(
        "{BIN} top {} 2>/dev/null; echo \"top exited $?\"; stty -a | tr ' ' '\\n' | grep -E -x -e '-?(icanon|echo)'; sleep 60",
        p(d.path())
    );
    let Some(t) = Tmux::start("topterm", &cmd) else {
        return;
    };
    t.wait_for("the first screen", |s| s.contains("ready 1  leased 0"));
    let pid = t.child_pid();
    assert!(Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let s = t.wait_for("top to exit", exited_and_stty_shown);
    assert!(!s.contains("steadq top "), "{s}");
    assert!(s.contains("\nicanon\n") && s.contains("\necho\n"), "{s}");
}

/// With stdout not a terminal, `top` prints one snapshot, no escape sequences, and exits;
/// the holder's line counts its live and expired leases.
#[test]
fn top_without_a_terminal_prints_one_snapshot() {
    let d = TempDir::new("top-pipe");
    let q = Queue::create(d.path(), fast(1)).unwrap();
    for p in [b"a", b"b", b"c"] {
        q.enqueue(p).unwrap();
    }
    let short = steadq::ClaimOptions {
        lease: Some(Duration::from_millis(1)),
        ..Default::default()
    };
    let _expired = q.claim_with(&short).unwrap().unwrap();
    let _l = q.claim().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let out = Command::new(BIN)
        .args(["top", p(d.path())])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("ready 1  leased 2 (1 expired)"), "{s}");
    assert!(s.contains("claims/s -  acks/s -"), "{s}");
    assert!(s.contains("(this boot)  1 live, 1 expired"), "{s}");
    assert_eq!(s.matches(" live, ").count(), 1, "{s}");
    assert!(!s.contains('\x1b'), "{s:?}");
}

/// A queue of `n` ready jobs of `size` bytes each.
fn deep_queue(d: &TempDir, n: usize, size: usize) {
    let q = Queue::create(d.path(), fast(8)).unwrap();
    let payloads: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; size]).collect();
    for chunk in payloads.chunks(500) {
        let refs: Vec<&[u8]> = chunk.iter().map(|p| p.as_slice()).collect();
        q.enqueue_batch(&refs).unwrap();
    }
}

/// `fsck` on a terminal shows a progress line rewritten in place (`\r`, erase to the end
/// of the line) with the count of entries and a rate, and erases it before its summary;
/// recorded from the pane with `pipe-pane`, which sees every byte written to it.
#[test]
fn fsck_on_a_terminal_shows_a_progress_line_and_erases_it() {
    let d = TempDir::new("progress");
    deep_queue(&d, 4000, 4096);
    let logs = TempDir::new("progress-log");
    std::fs::create_dir(logs.path()).unwrap();
    let log = logs.path().join("pane.log");
    let Some(t) = Tmux::start("progress", "sh") else {
        return;
    };
    let out = t.tmux(&["pipe-pane", "-o", &format!("cat >> {}", p(&log))]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Each of the 4,000 jobs is read and its 4 KiB verified: well over the 0.2 s before
    // the first line is drawn.
    t.tmux(&[
        "send-keys",
        &format!("{BIN} fsck {}; echo fsck-exit-$?", p(d.path())),
        "Enter",
    ]);
    t.wait_for("fsck to finish", |s| s.contains("fsck-exit-0"));
    let end = Instant::now() + Duration::from_secs(5);
    let bytes = loop {
        let b = std::fs::read(&log).unwrap_or_default();
        if text(&b).contains("fsck-exit-0") || Instant::now() > end {
            break text(&b);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let label = format!("\rfsck {}: ", p(d.path()));
    let first = bytes
        .find(&label)
        .unwrap_or_else(|| panic!("no progress line in {bytes:?}"));
    let line = &bytes[first + 1..];
    let line = &line[..line.find('\x1b').unwrap()];
    eprintln!("progress line: {line}");
    let (count, rest) = line[label.len() - 1..].split_once(" entries, ").unwrap();
    let count: u64 = count.parse().unwrap();
    assert!(count <= 4000, "{line}");
    assert!(rest.ends_with("/s"), "{line}");
    // Erased before the summary line.
    let summary = bytes.find("entries checked").unwrap();
    let erase = bytes[..summary].rfind("\r\x1b[K").unwrap();
    assert!(erase > first, "{bytes:?}");
    assert!(!bytes[erase + 4..summary].contains(&label), "{bytes:?}");
}

/// With stderr not a terminal (a pipe), `fsck` writes no progress bytes: no `\r`, no
/// escape sequence, only its summary.
#[test]
fn fsck_writes_no_progress_bytes_when_stderr_is_not_a_terminal() {
    let d = TempDir::new("no-progress");
    deep_queue(&d, 2000, 16);
    let out = Command::new(BIN)
        .args(["fsck", p(d.path())])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    assert!(err.contains("2000 job files verified"), "{err}");
}

/// The library's progress counter (`Options::progress`): one per entry a walk reads (fsck
/// and status read each of the jobs once), and one more per job `requeue_dead` moves.
#[test]
fn the_progress_counter_counts_entries_read_and_jobs_moved() {
    let d = TempDir::new("progress-counter");
    deep_queue(&d, 300, 16);
    let c = Arc::new(AtomicU64::new(0));
    let q = Queue::open_with(
        d.path(),
        Options {
            progress: Some(c.clone()),
            ..fast(8)
        },
    )
    .unwrap();
    q.fsck().unwrap();
    assert_eq!(c.swap(0, Ordering::Relaxed), 300);
    q.status_with(&steadq::StatusOptions { bytes: false })
        .unwrap();
    assert_eq!(c.swap(0, Ordering::Relaxed), 300);
    for _ in 0..10 {
        q.claim().unwrap().unwrap().fail(Reason::FAILED).unwrap();
    }
    c.store(0, Ordering::Relaxed);
    assert_eq!(q.requeue_dead(None).into_result().unwrap().requeued, 10);
    // 300 entries listed, 10 jobs moved.
    assert_eq!(c.load(Ordering::Relaxed), 310);
}

/// A directory `top` cannot read is named on the screen (its jobs are not counted), and no
/// warning is left on the screen across redraws (stderr goes to the same terminal here).
#[test]
fn top_names_an_unreadable_directory_on_its_screen_not_over_it() {
    let Some(n) = AsNobody::new("top-unread") else {
        return;
    };
    let (code, _, err) =
        n.run("$S init $Q --shards 2 && for i in $(seq 6); do echo j$i | $S enqueue $Q; done");
    assert_eq!(code, Some(0), "{err}");
    let in_01 = n.ls("ready/01").len();
    n.chmod("ready/01", 0o000);
    let cmd = format!(
        "setpriv --reuid=nobody --regid=nogroup --clear-groups {} top {}; sleep 60",
        p(&n.base.join("steadq")),
        p(&n.q)
    );
    let Some(t) = Tmux::start("topunread", &cmd) else {
        return;
    };
    let s = t.wait_for("the first screen", |s| s.contains("q quits"));
    assert!(
        s.contains("cannot read (their jobs are not counted): ready/01"),
        "{s}"
    );
    assert!(s.contains(&format!("ready {}  leased 0", 6 - in_01)), "{s}");
    // Two more redraws (one a second): still no warning on the screen.
    std::thread::sleep(Duration::from_millis(2100));
    let s = t.screen();
    assert!(s.starts_with("steadq top "), "{s}");
    assert!(
        !s.contains("WARN") && !s.contains("Permission denied"),
        "{s}"
    );
}
