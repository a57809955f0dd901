//! `steadq top DIR`: a live view of a queue on the terminal. Depth per state and priority,
//! claims and acks per second, the oldest ready job, dead jobs by reason and leases by
//! holder; redrawn when the queue's directories change (inotify) and every second for the
//! rates. Plain ANSI: the alternate screen, cursor home, erase to end of line. `q` or Ctrl-C
//! quits, and the terminal is given back as it was on every way out (a key, SIGINT, SIGTERM,
//! SIGHUP, a terminal that went away). When stdout is not a terminal, one snapshot is printed.
//!
//! The rates come from successive snapshots (the queue keeps no counters): a claim is a
//! leased name (id, attempt) not there before, or a new receipt of a job not seen leased (it
//! was claimed and acked between two snapshots); an ack is a job seen leased that is now
//! neither leased nor ready, delayed or dead, or such a new receipt. A job claimed and acked
//! between two snapshots on a queue that keeps no receipts (policy `none`) is missed.
//!
//! Not in the appliance build (the Pis' binary, `#[cfg(not(feature = "appliance"))]`, as
//! `bench`): it is 12,512 bytes of the stripped aarch64 binary (7,824 reading with
//! `Queue::list`), which must stay at or under
//! 600,000 bytes.
//!
//! A lease's holder as its name records it is the claimer's boot (its boot id; DESIGN.md,
//! "Names"): no pid or host is in the name. Leases of another boot are expired by definition.

use super::args::TopView;
use super::encode::fmt_age;
use super::exit::Exit;
use super::fixed;
use super::CliError;
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};
use steadq::{Kind, Queue, State, PRIORITY_LEVELS};

/// Columns of the depth table, in [`col`]'s order.
const COLS: [&str; 6] = ["ready", "leased", "delayed", "dead", "acked", "waiting"];

fn col(s: State) -> usize {
    match s {
        State::Ready => 0,
        State::Leased => 1,
        State::Delayed => 2,
        State::Dead => 3,
        State::Acked => 4,
        State::Waiting => 5,
    }
}

/// One look at the queue.
struct Snap {
    at: Instant,
    status: steadq::Status,
    /// Jobs per priority and [`COLS`].
    depth: [[u64; 6]; PRIORITY_LEVELS as usize],
    /// Leased jobs as (id, attempt), sorted. (One element type for the three lists: one
    /// sort and one search in the binary.)
    leased: Vec<Key>,
    /// Receipts as (id, 0), sorted.
    receipts: Vec<Key>,
    /// Ready (not leased), delayed and dead jobs as (id, 0), sorted.
    elsewhere: Vec<Key>,
    /// Dead jobs by reason, sorted by reason.
    reasons: Vec<(String, u64)>,
    /// Leases by (the claimer's boot id, 0 live or 1 expired), sorted.
    holders: Vec<(Key, u64)>,
    /// How long the look took.
    pass: Duration,
}

/// An id and a small number: (job id, attempt), (boot id, expired).
type Key = (u128, u32);

fn bump<K: Ord>(v: &mut Vec<(K, u64)>, k: K) {
    match v.binary_search_by(|e| e.0.cmp(&k)) {
        Ok(i) => v[i].1 += 1,
        Err(i) => v.insert(i, (k, 1)),
    }
}

impl Snap {
    fn take(q: &Queue) -> Result<Snap, CliError> {
        let at = Instant::now();
        let status = q.status_with(&steadq::StatusOptions { bytes: false })?;
        let c = q.clock();
        let (boot, boot_ns) = (c.boot_id(), c.boot_ns());
        let mut s = Snap {
            at,
            status,
            depth: [[0; 6]; PRIORITY_LEVELS as usize],
            leased: Vec::new(),
            receipts: Vec::new(),
            elsewhere: Vec::new(),
            reasons: Vec::new(),
            holders: Vec::new(),
            pass: Duration::ZERO,
        };
        // `list_each`: nothing held per job but what the rates need (20 bytes). (`list`,
        // whose walk is in every binary already, would be 4.6 KB smaller on aarch64 and
        // hold about 100 bytes a job, sorted; `top` is not in that build.)
        q.list_each(None, false, |l| {
            let n = &l.name;
            s.depth[(n.priority as usize).min(PRIORITY_LEVELS as usize - 1)][col(l.state)] += 1;
            match n.kind {
                Kind::Leased(f) => {
                    s.leased.push((n.id.0, n.attempt));
                    let live = f.boot_id == boot && f.boot_deadline_ns > boot_ns;
                    bump(&mut s.holders, (f.boot_id, u32::from(!live)));
                }
                Kind::Receipt { .. } => s.receipts.push((n.id.0, 0)),
                Kind::Dead { reason } => {
                    bump(&mut s.reasons, reason.as_str().to_string());
                    s.elsewhere.push((n.id.0, 0))
                }
                _ => s.elsewhere.push((n.id.0, 0)),
            }
            true
        })?;
        s.leased.sort_unstable();
        s.receipts.sort_unstable();
        s.elsewhere.sort_unstable();
        s.pass = at.elapsed();
        Ok(s)
    }
}

fn has(v: &[Key], x: &Key) -> bool {
    v.binary_search(x).is_ok()
}

/// Whether `v` holds an entry of id `id`, whatever its number.
fn has_id(v: &[Key], id: u128) -> bool {
    let i = v.partition_point(|l| l.0 < id);
    v.get(i).is_some_and(|l| l.0 == id)
}

/// Claims and acks between `a` and the later `b` (see the module's comment).
fn moves(a: &Snap, b: &Snap) -> (u64, u64) {
    let fast = b
        .receipts
        .iter()
        .filter(|r| !has(&a.receipts, r) && !has_id(&a.leased, r.0))
        .count() as u64;
    let claims = b.leased.iter().filter(|l| !has(&a.leased, l)).count() as u64;
    let mut gone = 0;
    let mut last = None;
    for &(id, _) in &a.leased {
        if last != Some(id) && !has_id(&b.leased, id) && !has(&b.elsewhere, &(id, 0)) {
            gone += 1;
        }
        last = Some(id);
    }
    (claims + fast, gone + fast)
}

/// The running totals of claims and acks, with the time of each snapshot, for rates over
/// the last few seconds.
#[derive(Default)]
struct Rates {
    /// (time, claims so far, acks so far), oldest first; at most a few seconds' worth.
    samples: Vec<(Instant, u64, u64)>,
}

impl Rates {
    fn add(&mut self, at: Instant, claims: u64, acks: u64) {
        let (c, a) = self.samples.last().map_or((0, 0), |s| (s.1, s.2));
        self.samples.push((at, c + claims, a + acks));
        // Keep the newest sample at least 3 s old, and nothing older.
        while self.samples.len() > 2 && at - self.samples[1].0 >= Duration::from_secs(3) {
            self.samples.remove(0);
        }
    }

    /// (claims/s, acks/s) over the samples kept, one decimal; `None` before two samples.
    fn per_sec(&self) -> Option<(String, String)> {
        let (a, b) = (self.samples.first()?, self.samples.last()?);
        let ns = (b.0 - a.0).as_nanos();
        (ns > 0).then(|| {
            let r = |n: u64| fixed::fixed(u128::from(n) * 1_000_000_000, ns, 1);
            (r(b.1 - a.1), r(b.2 - a.2))
        })
    }
}

/// The screen as lines (no line ends).
fn render(dir: &str, s: &Snap, rates: Option<(String, String)>, this_boot: u128) -> Vec<String> {
    let st = &s.status;
    let mut out = vec![
        format!("steadq top {dir}   (pass {} ms)", s.pass.as_millis()),
        format!(
            "ready {}  leased {} ({} expired)  delayed {}  dead {}  acked {}  waiting {}  foreign {}",
            st.ready,
            st.leased,
            st.expired_leases,
            st.delayed,
            st.dead,
            st.acked,
            st.waiting,
            st.foreign
        ),
    ];
    out.push(match rates {
        Some((c, a)) => format!("claims/s {c}  acks/s {a}"),
        None => "claims/s -  acks/s -  (rates need two looks)".into(),
    });
    if !st.unreadable_dirs.is_empty() {
        out.push(format!(
            "cannot read (their jobs are not counted): {}",
            st.unreadable_dirs.join(" ")
        ));
    }
    out.push(format!(
        "oldest ready {}",
        st.oldest_ready_age
            .map_or("-".into(), |a| fmt_age(a.as_nanos() as u64))
    ));
    out.push(String::new());
    let mut head = String::from("priority");
    for c in COLS {
        head += &format!(" {c:>9}");
    }
    out.push(head);
    for (p, row) in s.depth.iter().enumerate().rev() {
        if row.iter().any(|&n| n > 0) {
            let mut line = format!("{p:>8}");
            for n in row {
                line += &format!(" {n:>9}");
            }
            out.push(line);
        }
    }
    for u in &st.groups {
        let max = super::encode::group_limit(u);
        out.push(format!(
            "group {:<16} {} leased ({max})  {} ready",
            u.group.as_str(),
            u.leased,
            u.ready
        ));
    }
    out.push(String::new());
    let mut dead = String::from("dead by reason:");
    for (r, n) in &s.reasons {
        dead += &format!(" {r} {n}");
    }
    if s.reasons.is_empty() {
        dead += " -";
    }
    out.push(dead);
    out.push("leases by holder (claimer's boot id):".into());
    for (i, &((b, e), n)) in s.holders.iter().enumerate() {
        // (boot, 0) live then (boot, 1) expired: one line per boot.
        if i > 0 && s.holders[i - 1].0 .0 == b {
            continue;
        }
        let next = s.holders.get(i + 1).filter(|h| h.0 .0 == b && e == 0);
        let (live, expired) = match (e, next) {
            (0, Some(x)) => (n, x.1),
            (0, None) => (n, 0),
            _ => (0, n),
        };
        let mine = if b == this_boot { " (this boot)" } else { "" };
        out.push(format!("  {b:032x}{mine}  {live} live, {expired} expired"));
    }
    if s.holders.is_empty() {
        out.push("  -".into());
    }
    out
}

pub fn cmd_top(a: TopView) -> Result<Exit, CliError> {
    let q = super::open_read_only(&a.dir)?;
    let dir = a.dir.display().to_string();
    let boot = q.clock().boot_id();
    if !std::io::stdout().is_terminal() {
        let mut text = render(&dir, &Snap::take(&q)?, None, boot).join("\n");
        text.push('\n');
        super::stdout::write(text.as_bytes());
        return Ok(Exit::Done);
    }
    super::work::install_interrupting_handlers();
    // Warnings on stderr would land in the middle of the screen until the next redraw (one
    // about a foreign entry with a non-UTF-8 name comes at every look): a directory it
    // cannot read is on the screen instead, and `fsck` names the rest.
    log::set_max_level(log::LevelFilter::Error);
    let mut ino = rustix::fs::inotify::init(
        rustix::fs::inotify::CreateFlags::CLOEXEC | rustix::fs::inotify::CreateFlags::NONBLOCK,
    )
    .ok();
    let screen = Screen::enter();
    let mut rates = Rates::default();
    let mut prev: Option<Snap> = None;
    let (mut dirty, mut next) = (true, Instant::now());
    let mut last = Instant::now();
    let mut gap = Duration::from_millis(250);
    while !super::work::stop_requested() {
        let now = Instant::now();
        if now >= next || (dirty && now >= last + gap) {
            if ino.as_ref().is_some_and(|i| !watch(i, &a.dir)) {
                ino = None; // its watches freed: redrawn each second only
            }
            let s = Snap::take(&q)?;
            let (c, k) = prev.as_ref().map_or((0, 0), |p| moves(p, &s));
            rates.add(s.at, c, k);
            let mut lines = render(&dir, &s, rates.per_sec(), boot);
            lines.push(String::new());
            lines.push("q quits; redrawn on every change (inotify) and each second".into());
            if !screen.draw(&lines) {
                break; // the terminal is gone
            }
            // A deep queue takes a while to read: at most a third of the time reading it.
            gap = (s.pass * 3).max(Duration::from_millis(250));
            (last, next, dirty) = (now, now + Duration::from_secs(1), false);
            prev = Some(s);
            continue;
        }
        let until = if dirty { next.min(last + gap) } else { next };
        match screen.wait(ino.as_ref(), until - now) {
            Wake::Quit => break,
            Wake::Changed => dirty = true,
            Wake::Nothing => {}
        }
    }
    Ok(Exit::Done)
}

/// Watch the queue's job directories (ready and receipt shards, the priority levels, the
/// delayed and dead buckets) for names coming and going. Run at every redraw, so new shards
/// and buckets are watched too (adding a watch again changes nothing). Never follows a
/// symlink; a directory that cannot be watched is only not watched. `false` past
/// [`WATCH_MAX`] directories: the watches are this user's (root's, shared with systemd and
/// every other process of root, `fs.inotify.max_user_watches`), and every directory a
/// member makes under `dead/` or `prio/` took one.
fn watch(ino: &OwnedFd, root: &Path) -> bool {
    use rustix::fs::inotify::{add_watch, WatchFlags};
    let flags = WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW;
    let mut dirs: Vec<(std::path::PathBuf, u8)> = ["ready", "receipts", "delayed", "dead"]
        .iter()
        .map(|d| (root.join(d), 1))
        .collect();
    dirs.push((root.join("prio"), 2));
    let mut added = 0;
    while let Some((d, depth)) = dirs.pop() {
        added += 1;
        if added > WATCH_MAX {
            return false;
        }
        if add_watch(ino, &d, flags).is_err() || depth == 0 {
            continue;
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push((e.path(), depth - 1));
                }
            }
        }
    }
    true
}

/// The most directories `top` watches (4096); past it, it redraws each second only.
const WATCH_MAX: usize = 4096;

enum Wake {
    Quit,
    Changed,
    Nothing,
}

/// The terminal while `top` runs: the alternate screen, no cursor, keys read one at a time
/// without echo. Dropping it gives the terminal back as it was.
struct Screen {
    /// The terminal modes of stdin before (when stdin is a terminal).
    saved: Option<rustix::termios::Termios>,
}

impl Screen {
    fn enter() -> Screen {
        use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};
        let stdin = std::io::stdin();
        let saved = stdin
            .is_terminal()
            .then(|| tcgetattr(&stdin).ok())
            .flatten();
        if let Some(t) = &saved {
            let mut raw = t.clone();
            // Keys one at a time, not echoed; Ctrl-C still signals (ISIG stays on).
            raw.local_modes &= !(LocalModes::ICANON | LocalModes::ECHO);
            let _ = tcsetattr(&stdin, OptionalActions::Now, &raw);
        }
        let _ = std::io::stdout().write_all(b"\x1b[?1049h\x1b[?25l");
        Screen { saved }
    }

    /// Draw `lines` from the top left, cut to the terminal's size. False if it cannot be
    /// written (the terminal went away).
    fn draw(&self, lines: &[String]) -> bool {
        let out = std::io::stdout();
        let (rows, cols) = rustix::termios::tcgetwinsize(&out)
            .map(|w| (w.ws_row as usize, w.ws_col as usize))
            .unwrap_or((24, 80));
        let mut text = String::from("\x1b[H");
        for (i, l) in lines.iter().take(rows.max(1)).enumerate() {
            if i > 0 {
                text += "\r\n";
            }
            let end = l.char_indices().nth(cols).map_or(l.len(), |(i, _)| i);
            text += &l[..end];
            text += "\x1b[K";
        }
        text += "\x1b[J";
        let mut out = out.lock();
        out.write_all(text.as_bytes()).is_ok() && out.flush().is_ok()
    }

    /// Wait up to `t` for a change in the queue (`ino`) or a key. `q`, Ctrl-C or the end of
    /// input quits; a signal returns to the caller, which reads the stop flag.
    fn wait(&self, ino: Option<&OwnedFd>, t: Duration) -> Wake {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let stdin = std::io::stdin();
        let keys = self.saved.is_some();
        let mut fds = Vec::with_capacity(2);
        if keys {
            fds.push(PollFd::new(&stdin, PollFlags::IN));
        }
        if let Some(i) = ino {
            fds.push(PollFd::new(i, PollFlags::IN));
        }
        let ts = Timespec {
            tv_sec: t.as_secs() as i64,
            tv_nsec: t.subsec_nanos().into(),
        };
        if poll(&mut fds, Some(&ts)).is_err() {
            return Wake::Nothing; // EINTR: a signal
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        let mut buf = [0u8; 4096];
        if keys && ready[0] {
            match rustix::io::read(stdin.as_fd(), &mut buf) {
                Ok(0) => return Wake::Quit,
                Ok(n) if buf[..n].iter().any(|&b| b == b'q' || b == b'Q' || b == 3) => {
                    return Wake::Quit
                }
                Err(e) if e != rustix::io::Errno::INTR && e != rustix::io::Errno::AGAIN => {
                    return Wake::Quit
                }
                _ => {}
            }
        }
        match ino {
            Some(i) if ready[usize::from(keys)] => {
                while rustix::io::read(i, &mut buf).is_ok_and(|n| n > 0) {}
                Wake::Changed
            }
            _ => Wake::Nothing,
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = std::io::stdout().write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = std::io::stdout().flush();
        if let Some(t) = &self.saved {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin(),
                rustix::termios::OptionalActions::Now,
                t,
            );
        }
    }
}
