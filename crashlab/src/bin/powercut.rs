//! The power-cut rig's controller: powers the device, observes its records, verifies every
//! boot, cuts the power at a seeded moment, repeats. `powercut virtual ...` drives a QEMU guest
//! (crashlab/powercut.sh sets it up); `powercut real ...` drives a relay on a GPIO line.
//!
//! Per boot: the device's report is checked against every operation confirmed so far with the
//! crash invariants (`crashlab::invariants::check`) and fsck's problems; one line is printed.
//! Then the cut: at a seeded moment in the window after the workload started, or (half the
//! cuts, and every cut with `--expect-caught`) right after the first operation of one kind
//! confirmed past that moment, before the device gets its `ok` (`--cut-after`: a kind, or
//! `rotate` through every kind). The next boot also checks that operation's own effect
//! (`crashlab::record::check_cut_op`). A violation is counted once, at the boot that finds
//! it, not again at every later boot. Outputs in `--out`: records.log (the observer's durable
//! records), cycles.csv, chart.svg, summary.txt.

use argh::FromArgs;
use crashlab::chart::{self, Row};
use crashlab::diskmodel;
use crashlab::invariants::{check, is_torn_evidence};
use crashlab::record::{check_cut_op, KINDS};
use crashlab::record::{check_report, expect_from, LineBuf, Op, Report};
use crashlab::relay::{board_gpio, Relay};
use crashlab::rng::Rng;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{exit, Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(FromArgs)]
/// SteadQ power-cut rig controller.
struct Args {
    #[argh(subcommand)]
    cmd: Cmd,
}

#[derive(FromArgs)]
#[argh(subcommand)]
enum Cmd {
    Virtual(Virtual),
    Real(Real),
}

#[derive(FromArgs)]
#[argh(subcommand, name = "virtual")]
/// QEMU guest as the device: kill -9 at the cut, the disk keeps what a volatile cache would.
struct Virtual {
    /// filesystem of the disk image (label only; the image is made by powercut.sh)
    #[argh(option)]
    fs: String,
    /// power cuts (boots = cuts + 1)
    #[argh(option)]
    cycles: u32,
    /// seed for cut moments, cut kinds and kept writes
    #[argh(option, default = "1")]
    seed: u64,
    /// cut window after the workload starts, ms (default 1000-3000)
    #[argh(option, default = "String::from(\"1000-3000\")")]
    window: String,
    /// the run is a negative control: succeed only if a violation is found
    #[argh(switch)]
    expect_caught: bool,
    /// the agent removes these barriers (`steadq::sys::Barrier` names, comma-separated);
    /// implies --expect-caught
    #[argh(option, long = "break")]
    break_barriers: Option<String>,
    /// after-op cuts come right after an operation of this kind (enq, claim, renew, ack,
    /// nack, fail, requeue, recover, compact), or `rotate` through them all (default)
    #[argh(option, default = "String::from(\"rotate\")")]
    cut_after: String,
    /// output directory (records, CSV, chart, summary, console logs, disk image)
    #[argh(option)]
    out: PathBuf,
    /// guest kernel
    #[argh(option)]
    kernel: PathBuf,
    /// guest initramfs (init, modules, agent, steadq)
    #[argh(option)]
    initrd: PathBuf,
    /// fresh disk image (copied to OUT/disk.img)
    #[argh(option)]
    image: PathBuf,
    /// percent of the writes after the last flush the disk keeps, each chosen at random
    #[argh(option, default = "50")]
    keep_percent: u64,
    /// transport: tcp (virtio-net, user-mode networking to 127.0.0.1) or serial (ttyS1)
    #[argh(option, default = "String::from(\"tcp\")")]
    transport: String,
    /// seconds a boot may take to report
    #[argh(option, default = "240")]
    boot_timeout: u64,
}

#[derive(FromArgs)]
#[argh(subcommand, name = "real")]
/// A real board behind a relay on a GPIO line of this controller.
struct Real {
    /// board file (boards/*.toml): gpio_chip and gpio_line
    #[argh(option)]
    board: PathBuf,
    /// line level that cuts the power (default 1: relay energized opens its NC contact)
    #[argh(option, default = "1")]
    cut_level: u8,
    /// power cuts
    #[argh(option)]
    cycles: u32,
    /// seed
    #[argh(option, default = "1")]
    seed: u64,
    /// cut window after the workload starts, ms (default 2000-20000)
    #[argh(option, default = "String::from(\"2000-20000\")")]
    window: String,
    /// power stays off this long, ms (default 3000: the board's capacitors drain)
    #[argh(option, default = "3000")]
    hold_off_ms: u64,
    /// listen for the agent here (default 0.0.0.0:7010)
    #[argh(option, default = "String::from(\"0.0.0.0:7010\")")]
    listen: String,
    /// serial line to the agent instead of TCP (e.g. /dev/ttyUSB0, set raw beforehand)
    #[argh(option)]
    serial: Option<PathBuf>,
    /// output directory
    #[argh(option)]
    out: PathBuf,
    /// seconds a boot may take to report
    #[argh(option, default = "300")]
    boot_timeout: u64,
    /// the run is a negative control
    #[argh(switch)]
    expect_caught: bool,
    /// after-op cuts come right after an operation of this kind, or `rotate` (default)
    #[argh(option, default = "String::from(\"rotate\")")]
    cut_after: String,
}

/// The running guest, killed by [`die`] too (`exit` runs no destructors).
static GUEST: Mutex<Option<Child>> = Mutex::new(None);

fn kill_guest() {
    let mut g = GUEST.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(mut c) = g.take() {
        let _ = c.kill(); // SIGKILL: the power cut
        let _ = c.wait();
    }
}

/// The console log of the boot under way, whose last lines `die` prints: a run on a CI
/// machine keeps no files, so the reason a device stopped must be in the output.
static CONSOLE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// How many of the console's last lines `die` prints.
const CONSOLE_TAIL: usize = 25;

fn die(e: impl std::fmt::Display) -> ! {
    eprintln!("powercut: ERROR: {e}");
    kill_guest();
    let console = CONSOLE.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(p) = console {
        eprintln!("powercut: the last lines of {}:", p.display());
        for l in console_tail(&p, CONSOLE_TAIL) {
            eprintln!("  | {l}");
        }
    }
    exit(2)
}

/// The last `n` lines of a console log, terminal escapes and carriage returns removed (an
/// unreadable log gives one line saying so).
fn console_tail(p: &Path, n: usize) -> Vec<String> {
    let raw = match std::fs::read(p) {
        Ok(b) => b,
        Err(e) => return vec![format!("(unreadable: {e})")],
    };
    let text = String::from_utf8_lossy(&raw);
    let lines: Vec<String> = text
        .split(['\n', '\r'])
        .map(strip_escapes)
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// A line without its ANSI escape sequences (`ESC [ ... letter`, `ESC c`).
fn strip_escapes(l: &str) -> String {
    let mut out = String::new();
    let mut it = l.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        if it.next_if_eq(&'[').is_some() {
            while it.next().is_some_and(|c| !c.is_ascii_alphabetic()) {}
        } else {
            it.next();
        }
    }
    out
}

/// A byte stream from the agent with read timeouts.
trait Stream: Read + Write + Send {
    fn timeout(&mut self, d: Option<Duration>);
}
impl Stream for TcpStream {
    fn timeout(&mut self, d: Option<Duration>) {
        let _ = self.set_read_timeout(d);
    }
}
impl Stream for File {
    fn timeout(&mut self, _: Option<Duration>) {}
}

/// The device: how to power it, reach it, and cut it.
trait Device {
    /// Power on (or boot) and return the agent's stream.
    fn start(&mut self, boot: u32) -> Box<dyn Stream>;
    /// Cut the power now; returns (writes after the last flush, writes kept) where known.
    fn cut(&mut self, rng: &mut Rng) -> diskmodel::Cut;
    /// Power off without a cut (after the last boot's report).
    fn stop(&mut self);
}

/// Accept one connection before `deadline`, watching `alive` (false: the device died).
fn accept(l: &TcpListener, deadline: Instant, mut alive: impl FnMut() -> bool) -> TcpStream {
    l.set_nonblocking(true).unwrap_or_else(|e| die(e));
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap_or_else(|e| die(e));
                let _ = s.set_nodelay(true);
                return s;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() > deadline || !alive() {
                    die("the device did not connect in time (see its console log)");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => die(e),
        }
    }
}

struct Qemu {
    a: Virtual,
    disk: PathBuf,
    pre: PathBuf,
    log: PathBuf,
}

impl Qemu {
    fn console(&self, boot: u32) -> PathBuf {
        self.a.out.join(format!("console-{boot:04}.log"))
    }
}

/// The guest kernel's command line. `no_timer_check`: under a loaded host the TCG guest hung at
/// boot after "MP-BIOS bug: 8254 timer not connected to IO-APIC".
fn cmdline(fs: &str, agent_args: &str) -> String {
    format!(
        "console=ttyS0 panic=-1 quiet no_timer_check crashlab.fs={fs} crashlab.mode=agent crashlab.args={agent_args}"
    )
}

fn cp_sparse(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        die(format!("cp {} {}", from.display(), to.display()));
    }
}

impl Device for Qemu {
    fn start(&mut self, boot: u32) -> Box<dyn Stream> {
        cp_sparse(&self.disk, &self.pre);
        File::create(&self.log).unwrap_or_else(|e| die(e));
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| die(e));
        let port = l.local_addr().unwrap_or_else(|e| die(e)).port();
        let (connect, net): (&str, Vec<String>) = match self.a.transport.as_str() {
            "tcp" => (
                "tcp:10.0.2.100:7000",
                vec![
                    "-netdev".into(),
                    format!(
                        "user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:7000-tcp:127.0.0.1:{port}"
                    ),
                    "-device".into(),
                    "virtio-net-pci,netdev=n0,romfile=".into(),
                ],
            ),
            "serial" => (
                "serial:/dev/ttyS1",
                vec![
                    "-serial".into(),
                    "mon:stdio".into(),
                    "-serial".into(),
                    format!("tcp:127.0.0.1:{port}"),
                    "-net".into(),
                    "none".into(),
                ],
            ),
            t => die(format!("unknown transport {t:?}")),
        };
        let mut args = format!("--queue,/mnt/q,--connect,{connect},--steadq,/steadq");
        if self.a.fs.starts_with("ext4-inline") {
            // Job files that fit in the flavour's 512-byte inodes.
            args += ",--small";
        }
        if let Some(b) = &self.a.break_barriers {
            // The guest's init splits its arguments at commas.
            args += &format!(",--break,{}", b.replace(',', "+"));
        }
        let console = File::create(self.console(boot)).unwrap_or_else(|e| die(e));
        *CONSOLE.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.console(boot));
        let child = Command::new("qemu-system-x86_64")
            // -cpu max: RDRAND seeds the guest's RNG at once (getrandom would otherwise wait for
            // entropy for seconds under TCG) and SSE4.2 lets crc32c-intel load.
            .args(["-accel", "tcg", "-cpu", "max", "-m", "512", "-smp", "1", "-nographic"])
            .arg("-no-reboot")
            .arg("-kernel")
            .arg(&self.a.kernel)
            .arg("-initrd")
            .arg(&self.a.initrd)
            .arg("-append")
            .arg(cmdline(&self.a.fs, &args))
            .arg("-drive")
            .arg(format!(
                "if=none,id=d0,driver=blklogwrites,file.driver=file,file.filename={},log.driver=file,log.filename={}",
                self.disk.display(),
                self.log.display()
            ))
            .args(["-device", "virtio-blk-pci,drive=d0"])
            .args(net)
            .stdin(Stdio::null())
            .stdout(console.try_clone().unwrap_or_else(|e| die(e)))
            .stderr(console)
            .spawn()
            .unwrap_or_else(|e| die(format!("qemu-system-x86_64: {e}")));
        *GUEST.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        let deadline = Instant::now() + Duration::from_secs(self.a.boot_timeout);
        let s = accept(&l, deadline, || {
            let mut g = GUEST.lock().unwrap_or_else(|p| p.into_inner());
            g.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        });
        Box::new(s)
    }

    fn cut(&mut self, rng: &mut Rng) -> diskmodel::Cut {
        self.stop();
        let c = diskmodel::cut(&self.pre, &self.log, rng, self.a.keep_percent)
            .unwrap_or_else(|e| die(format!("disk model: {e}")));
        std::fs::rename(&self.pre, &self.disk).unwrap_or_else(|e| die(e));
        c
    }

    fn stop(&mut self) {
        kill_guest();
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Board {
    relay: Relay,
    listen: Option<TcpListener>,
    serial: Option<PathBuf>,
    hold_off: Duration,
    boot_timeout: Duration,
}

impl Device for Board {
    fn start(&mut self, _boot: u32) -> Box<dyn Stream> {
        self.relay.power(true).unwrap_or_else(|e| die(e));
        if let Some(p) = &self.serial {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .unwrap_or_else(|e| die(e));
            return Box::new(f);
        }
        let l = self.listen.as_ref().expect("tcp or serial");
        Box::new(accept(l, Instant::now() + self.boot_timeout, || true))
    }

    fn cut(&mut self, _rng: &mut Rng) -> diskmodel::Cut {
        self.relay.power(false).unwrap_or_else(|e| die(e));
        std::thread::sleep(self.hold_off);
        diskmodel::Cut::default()
    }

    fn stop(&mut self) {}
}

/// The observer's records file: appended, fsynced before the device gets its `ok`.
struct Records {
    f: File,
    path: PathBuf,
}

impl Records {
    fn append(&mut self, line: &str) {
        self.f
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.f.sync_data())
            .unwrap_or_else(|e| die(format!("records: {e}")));
    }
}

struct Run {
    fs: String,
    cycles: u32,
    seed: u64,
    window: (u64, u64),
    expect_caught: bool,
    cut_after: String,
    out: PathBuf,
    boot_timeout: Duration,
}

/// What the next read from the agent gave.
enum Got {
    Line(String),
    Timeout,
    Eof,
}

fn next(s: &mut dyn Stream, buf: &mut LineBuf, wait: Option<Duration>) -> Got {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(l) = buf.next_line() {
            return Got::Line(l);
        }
        s.timeout(wait.map(|w| w.max(Duration::from_millis(1))));
        match s.read(&mut chunk) {
            Ok(0) => return Got::Eof,
            Ok(n) => buf.push(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Got::Timeout
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Got::Eof,
        }
    }
}

/// What a read that timed out means for the cut.
#[derive(Debug, PartialEq, Eq)]
enum OnTimeout {
    /// A cut by time: its moment came.
    Cut,
    /// An after-op cut whose moment came: wait for the next operation of its kind.
    Wait,
    /// An after-op cut that waited its whole limit past the moment: cut by time.
    GiveUp,
}

/// `past_moment`: the read was the limited wait after the moment (not the wait up to it).
fn on_timeout(after_ack: bool, past_moment: bool) -> OnTimeout {
    match (after_ack, past_moment) {
        (false, _) => OnTimeout::Cut,
        (true, false) => OnTimeout::Wait,
        (true, true) => OnTimeout::GiveUp,
    }
}

/// Whether this confirmed record triggers an after-op cut (before the device hears `ok`):
/// `after` is the kind that cut waits for (`None`: a cut by time).
fn cut_on_record(after: Option<&str>, what: &str, past_moment: bool) -> bool {
    past_moment && after == Some(what)
}

/// The kind the `n`th after-op cut waits for: `cut_after` itself, or with `rotate` each
/// kind in turn.
fn cut_kind(cut_after: &str, n: u32) -> String {
    if cut_after == "rotate" {
        KINDS[n as usize % KINDS.len()].to_string()
    } else {
        cut_after.to_string()
    }
}

fn check_cut_after(k: &str) {
    if k != "rotate" && !KINDS.contains(&k) {
        die(format!(
            "--cut-after {k:?}: want rotate or one of {}",
            KINDS.join(", ")
        ));
    }
}

fn parse_window(w: &str) -> (u64, u64) {
    let (a, b) = w.split_once('-').unwrap_or((w, w));
    match (a.parse(), b.parse()) {
        (Ok(a), Ok(b)) if a <= b => (a, b),
        _ => die(format!("bad window {w:?} (want LO-HI in ms)")),
    }
}

fn run(r: Run, dev: &mut dyn Device) -> i32 {
    std::fs::create_dir_all(&r.out).unwrap_or_else(|e| die(e));
    let path = r.out.join("records.log");
    let mut rec = Records {
        f: OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| die(e)),
        path,
    };
    let mut rng = Rng(r.seed);
    let mut rows: Vec<Row> = Vec::new();
    let mut caught_at = None;
    let mut seen = HashSet::new();
    let mut cut_op: Option<Op> = None;
    let mut after_op_cuts = 0;
    let t_run = Instant::now();
    for boot in 0..=r.cycles {
        let t_boot = Instant::now();
        let mut s = dev.start(boot);
        let mut buf = LineBuf::default();
        let report = read_report(&mut *s, &mut buf, boot, r.boot_timeout);
        let mut row = check_boot(&mut rec, &report, boot, cut_op.take().as_ref(), &mut seen);
        if row.violations > 0 && caught_at.is_none() {
            caught_at = Some(boot);
        }
        let stop = boot == r.cycles || (r.expect_caught && caught_at.is_some());
        if stop {
            dev.stop();
        } else {
            s.write_all(b"ok report\n").unwrap_or_else(|e| die(e));
            // Drawn in this order (the moment, then the kind): a seed replays its cuts.
            let cut_at = Duration::from_millis(rng.between(r.window.0, r.window.1));
            let after = (r.expect_caught || rng.chance(50)).then(|| {
                after_op_cuts += 1;
                cut_kind(&r.cut_after, after_op_cuts - 1)
            });
            cut_op = run_until_cut(
                &mut *s,
                &mut buf,
                &mut rec,
                cut_at,
                after.as_deref(),
                &mut row,
            );
            let c = dev.cut(&mut rng);
            (row.unflushed, row.kept, row.log_entries) = (c.after, c.kept, c.entries);
        }
        print_row(&row, stop, t_boot);
        rows.push(row);
        if stop {
            break;
        }
    }
    summarize(&r, &rows, caught_at, t_run)
}

/// Read the device's whole boot report (recovery figures, snapshot, fsck) within
/// `boot_timeout` of now.
fn read_report(s: &mut dyn Stream, buf: &mut LineBuf, boot: u32, boot_timeout: Duration) -> Report {
    let mut report = Report::default();
    let deadline = Instant::now() + boot_timeout;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        match next(s, buf, Some(wait)) {
            Got::Line(l) => match report.feed(&l) {
                Ok(true) => return report,
                Ok(false) => {}
                Err(e) => die(format!("boot {boot}: {e}")),
            },
            Got::Timeout => die(format!(
                "boot {boot}: no whole report within {} s (see its console log)",
                boot_timeout.as_secs()
            )),
            Got::Eof => die(format!("boot {boot}: the device hung up during its report")),
        }
    }
}

/// What a violation is about, so that one lost operation counts once: the first job id it
/// names (32 hex digits), else its whole text.
fn violation_key(v: &str) -> String {
    v.split(|c: char| !c.is_ascii_hexdigit())
        .find(|w| w.len() == 32)
        .map_or_else(|| v.to_string(), str::to_string)
}

/// Check boot `boot`'s report against every operation confirmed before it (the invariants,
/// the effect of `cut_op`, the operation the last cut came right after, and fsck outside
/// quarantine); its row, with the violations not found at an earlier boot (`seen`) counted
/// (the first 5 printed).
fn check_boot(
    rec: &mut Records,
    report: &Report,
    boot: u32,
    cut_op: Option<&Op>,
    seen: &mut HashSet<String>,
) -> Row {
    rec.append(&format!("# boot {boot} {}", report.boot.line()));
    let records = std::fs::read_to_string(&rec.path).unwrap_or_else(|e| die(e));
    let expect = expect_from(&records).unwrap_or_else(|e| die(e));
    let snap = report.snapshot();
    let mut v = check(&snap, &expect);
    v.extend(cut_op.and_then(|op| check_cut_op(op, &snap)));
    v.extend(check_report(report, &expect));
    v.extend(
        report
            .fsck
            .iter()
            .filter(|p| !p.starts_with("quarantine/") && !is_torn_evidence(p))
            // A job file damaged on purpose (the admin step), until fsck moves it aside.
            .filter(|p| !expect.planted.iter().any(|id| p.contains(&id.to_string())))
            .map(|p| format!("fsck: {p}")),
    );
    v.retain(|x| seen.insert(violation_key(x)));
    for x in v.iter().take(5) {
        println!("  VIOLATION boot {boot}: {x}");
    }
    Row {
        boot,
        mount_ms: report.boot.mount_ms,
        recover_ms: report.boot.recover_ms,
        moved: report.boot.moved,
        jobs: report.jobs() as u64,
        violations: v.len() as u64,
        ..Row::default()
    }
}

/// Confirm the device's operations (each recorded before its `ok`) until the cut: by time
/// at `cut_at` from now, or (`after`: a kind) at the first operation of that kind past that
/// moment, before the device hears its `ok` (by time if none comes within 60 s). Fills the
/// row's confirmed count, cut kind and time; returns the operation the cut came after.
fn run_until_cut(
    s: &mut dyn Stream,
    buf: &mut LineBuf,
    rec: &mut Records,
    cut_at: Duration,
    after: Option<&str>,
    row: &mut Row,
) -> Option<Op> {
    let boot = row.boot;
    let t0 = Instant::now();
    let mut cut_op = None;
    let mut waited = Duration::ZERO;
    loop {
        let left = cut_at.saturating_sub(t0.elapsed());
        let wait = if left.is_zero() && after.is_some() {
            Some(Duration::from_secs(60).saturating_sub(waited))
        } else {
            Some(left)
        };
        let t_read = Instant::now();
        let got = next(s, buf, wait);
        if left.is_zero() {
            waited += t_read.elapsed();
        }
        match got {
            Got::Timeout => match on_timeout(after.is_some(), left.is_zero()) {
                OnTimeout::Cut => {
                    row.cut_kind = "time".into();
                    break;
                }
                OnTimeout::Wait => {}
                OnTimeout::GiveUp => {
                    row.cut_kind = "time".into();
                    println!(
                        "  boot {boot}: no {} confirmed within 60 s past the moment: cut by time",
                        after.unwrap_or("")
                    );
                    break;
                }
            },
            Got::Eof => die(format!(
                "boot {boot}: the device hung up before the cut (see its console log)"
            )),
            Got::Line(l) => {
                let op = match Op::parse(&l) {
                    Ok(Some(op)) => op,
                    _ => die(format!("boot {boot}: unexpected record {l:?}")),
                };
                rec.append(&l);
                row.confirmed += 1;
                if cut_on_record(after, &op.what, t0.elapsed() >= cut_at) {
                    row.cut_kind = op.what.clone();
                    cut_op = Some(op);
                    break; // cut before the device hears its ok
                }
                s.write_all(format!("ok {}\n", op.seq).as_bytes())
                    .unwrap_or_else(|e| die(e));
            }
        }
    }
    row.cut_ms = t0.elapsed().as_millis() as u64;
    cut_op
}

/// One line per boot: recovery figures, then the cut (or `stop` after the last boot).
fn print_row(row: &Row, stop: bool, t_boot: Instant) {
    println!(
        "boot {:>4}: mount {:>4} ms, recover {:>4} ms, moved {:>3}, jobs {:>5}, violations {} | {}",
        row.boot,
        row.mount_ms,
        row.recover_ms,
        row.moved,
        row.jobs,
        row.violations,
        if stop {
            format!("stop ({:.1} s)", t_boot.elapsed().as_secs_f64())
        } else {
            format!(
                "{} confirmed, cut {} at {:.2} s, {} log entries, kept {}/{} writes after the last flush ({:.1} s)",
                row.confirmed,
                if row.cut_kind == "time" {
                    "by time".to_string()
                } else {
                    format!("after {}", row.cut_kind)
                },
                row.cut_ms as f64 / 1000.0,
                row.log_entries,
                row.kept,
                row.unflushed,
                t_boot.elapsed().as_secs_f64()
            )
        }
    );
}

/// Write `cycles.csv`, `chart.svg` and `summary.txt`, print the summary; the exit code (0:
/// no violation, or with `--expect-caught` the removed barrier was caught).
fn summarize(r: &Run, rows: &[Row], caught_at: Option<u32>, t_run: Instant) -> i32 {
    let cuts = rows.len() as u32 - 1;
    let confirmed: u64 = rows.iter().map(|r| r.confirmed).sum();
    let violations: u64 = rows.iter().map(|r| r.violations).sum();
    let (med, max) = chart::recovery(rows);
    let secs = t_run.elapsed().as_secs_f64();
    let mut summary = format!(
        "fs {}: {} cuts, {} boots, {} confirmed operations, {} violations; recovery at boot (mount + steadq) median {} ms, max {} ms; {:.0} s, {:.1} s per cycle; seed {}\n",
        r.fs,
        cuts,
        rows.len(),
        confirmed,
        violations,
        med,
        max,
        secs,
        secs / rows.len() as f64,
        r.seed
    );
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for row in rows.iter().filter(|r| !r.cut_kind.is_empty()) {
        match kinds.iter_mut().find(|k| k.0 == row.cut_kind) {
            Some(k) => k.1 += 1,
            None => kinds.push((&row.cut_kind, 1)),
        }
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    summary += &format!("cuts after: {}\n", kinds.join(", "));
    let skipped = skipped_barriers(&r.out);
    if !skipped.is_empty() {
        summary += &format!("removed barriers reached: {skipped}\n");
    }
    if r.fs == "ext4-fc" {
        let fc = fast_commits(&r.out);
        summary += &format!(
            "fast commits (fc_info, summed over boots): {}\n",
            if fc.is_empty() { "none reported" } else { &fc }
        );
    }
    if r.expect_caught {
        summary += &match caught_at {
            Some(b) => format!("negative control CAUGHT at cut {b}\n"),
            None => format!("negative control NOT CAUGHT in {cuts} cuts\n"),
        };
    }
    let write = |name: &str, text: String| {
        std::fs::write(r.out.join(name), text).unwrap_or_else(|e| die(e));
    };
    write("cycles.csv", chart::csv(rows));
    write(
        "chart.svg",
        chart::svg(
            &format!("SteadQ power cuts, {} (seed {})", r.fs, r.seed),
            rows,
        ),
    );
    write("summary.txt", summary.clone());
    print!("{summary}");
    println!(
        "powercut fs={} cycles={cuts} confirmed={confirmed} violations={violations}",
        r.fs
    );
    let ok = if r.expect_caught {
        caught_at.is_some()
    } else {
        violations == 0
    };
    i32::from(!ok)
}

/// The `key=n` fields of the last line holding `marker` (e.g. `CRASHLAB_FC `) of each boot's
/// console log in `out`, summed over the boots in the order first seen; empty without any.
fn sum_console_fields(out: &Path, marker: &str) -> Vec<(String, u64)> {
    let mut sums: Vec<(String, u64)> = Vec::new();
    let Ok(rd) = std::fs::read_dir(out) else {
        return sums;
    };
    let mut logs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("console-"))
        })
        .collect();
    logs.sort();
    for log in logs {
        let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
        let Some(last) = text
            .lines()
            .rev()
            .find_map(|l| l.split_once(marker).map(|x| x.1))
        else {
            continue;
        };
        for kv in last.split_whitespace() {
            let Some((k, n)) = kv.split_once('=') else {
                continue;
            };
            let n: u64 = n.trim().parse().unwrap_or(0);
            match sums.iter_mut().find(|s| s.0 == k) {
                Some(s) => s.1 += n,
                None => sums.push((k.to_string(), n)),
            }
        }
    }
    sums
}

/// `key=n key=m` of [`sum_console_fields`].
fn fields_line(sums: &[(String, u64)]) -> String {
    let f: Vec<String> = sums.iter().map(|(k, n)| format!("{k}={n}")).collect();
    f.join(" ")
}

/// The removed barriers' skip counts summed over the boots' console logs (the agent's last
/// `CRASHLAB_AGENT_SKIPPED a=N b=M` line of each boot), as `a=N b=M`; empty without any.
fn skipped_barriers(out: &Path) -> String {
    fields_line(&sum_console_fields(out, "CRASHLAB_AGENT_SKIPPED "))
}

/// ext4's fast-commit figures summed over the boots (the guest init's last
/// `CRASHLAB_FC commits=N ineligible=M` line of each boot, from /proc/fs/ext4/vda/fc_info,
/// per mount, printed each second they change: what the last second before a cut did is
/// missing), as `commits=N ineligible=M`; empty without any.
fn fast_commits(out: &Path) -> String {
    fields_line(&sum_console_fields(out, "CRASHLAB_FC "))
}

fn main() {
    let a: Args = argh::from_env();
    let code = match a.cmd {
        Cmd::Virtual(v) => {
            std::fs::create_dir_all(&v.out).unwrap_or_else(|e| die(e));
            let disk = v.out.join("disk.img");
            cp_sparse(&v.image, &disk);
            check_cut_after(&v.cut_after);
            let r = Run {
                fs: v.fs.clone(),
                cycles: v.cycles,
                seed: v.seed,
                window: parse_window(&v.window),
                expect_caught: v.expect_caught || v.break_barriers.is_some(),
                cut_after: v.cut_after.clone(),
                out: v.out.clone(),
                boot_timeout: Duration::from_secs(v.boot_timeout),
            };
            let mut q = Qemu {
                pre: v.out.join("pre.img"),
                log: v.out.join("writes.log"),
                disk,
                a: v,
            };
            run(r, &mut q)
        }
        Cmd::Real(b) => {
            let text = std::fs::read_to_string(&b.board).unwrap_or_else(|e| die(e));
            let gpio = board_gpio(&text).unwrap_or_else(|e| die(e));
            let relay = Relay::new(gpio, b.cut_level).unwrap_or_else(|e| die(e));
            let listen = match &b.serial {
                Some(_) => None,
                None => Some(TcpListener::bind(&b.listen).unwrap_or_else(|e| die(e))),
            };
            let r = Run {
                fs: "device".into(),
                cycles: b.cycles,
                seed: b.seed,
                window: parse_window(&b.window),
                expect_caught: b.expect_caught,
                cut_after: {
                    check_cut_after(&b.cut_after);
                    b.cut_after.clone()
                },
                out: b.out.clone(),
                boot_timeout: Duration::from_secs(b.boot_timeout),
            };
            let mut d = Board {
                relay,
                listen,
                serial: b.serial.clone(),
                hold_off: Duration::from_millis(b.hold_off_ms),
                boot_timeout: Duration::from_secs(b.boot_timeout),
            };
            run(r, &mut d)
        }
    };
    exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_after_ack_cut_waits_for_an_ack_past_its_moment() {
        // A read up to the moment that times out waits for the ack instead of cutting by
        // time: a cut by time would miss the broken build's ack window.
        assert_eq!(on_timeout(true, false), OnTimeout::Wait);
        assert_eq!(on_timeout(true, true), OnTimeout::GiveUp);
        assert_eq!(on_timeout(false, false), OnTimeout::Cut);
        assert!(
            !cut_on_record(Some("ack"), "ack", false),
            "not before the moment"
        );
        assert!(!cut_on_record(Some("ack"), "enq", true), "only an ack");
        assert!(cut_on_record(Some("ack"), "ack", true));
        assert!(cut_on_record(Some("fail"), "fail", true));
        assert!(
            !cut_on_record(None, "ack", true),
            "a cut by time ignores acks"
        );
    }

    #[test]
    fn rotating_cuts_visit_every_kind() {
        let got: Vec<String> = (0..KINDS.len() as u32)
            .map(|n| cut_kind("rotate", n))
            .collect();
        assert_eq!(got, KINDS);
        assert_eq!(cut_kind("fail", 7), "fail");
    }

    #[test]
    fn a_lost_operation_counts_once_across_boots() {
        // The bug: every later boot counted the same lost ack again.
        let id = "0000018c0a1b2c3d4e5f60718293a4b5";
        let a = format!("ack of {id} returned done, but the job is Some([Ready])");
        let b = format!("job {id}: attempt went down from 2 to 1");
        let mut seen = HashSet::new();
        assert!(seen.insert(violation_key(&a)));
        assert!(!seen.insert(violation_key(&a)), "the same at the next boot");
        assert!(!seen.insert(violation_key(&b)), "the same job");
        assert!(seen.insert(violation_key("fsck: x")));
    }

    #[test]
    fn the_guest_skips_the_timer_check_and_runs_the_agent() {
        let c = cmdline("f2fs", "--queue,/mnt/q");
        assert!(c.split(' ').any(|w| w == "no_timer_check"), "{c}");
        assert!(c.contains("crashlab.fs=f2fs crashlab.mode=agent crashlab.args=--queue,/mnt/q"));
    }

    #[test]
    fn the_console_tail_is_its_last_lines_without_escapes() {
        let d = std::env::temp_dir().join(format!("pc-console-{}", std::process::id()));
        std::fs::write(
            &d,
            "\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS\r\nBooting..\x1bc\x1b[2JCRASHLAB_INIT a\nb\n\nc\n",
        )
        .unwrap();
        assert_eq!(console_tail(&d, 2), ["b", "c"]);
        assert_eq!(
            console_tail(&d, 9),
            ["SeaBIOS", "Booting..CRASHLAB_INIT a", "b", "c"]
        );
        std::fs::remove_file(&d).unwrap();
        assert!(console_tail(&d, 3)[0].starts_with("(unreadable: "));
    }

    #[test]
    fn kill_guest_kills_and_reaps_the_running_guest() {
        // die() calls exit(), which runs no destructor: the guest is killed and reaped
        // explicitly, or QEMU would keep running.
        let c = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = c.id();
        *GUEST.lock().unwrap() = Some(c);
        kill_guest();
        assert!(GUEST.lock().unwrap().is_none());
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "reaped");
    }

    #[test]
    fn fast_commits_are_the_last_figures_of_each_boot_summed() {
        let d = std::env::temp_dir().join(format!("pc-fc-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        assert_eq!(fast_commits(&d), "");
        std::fs::write(
            d.join("console-0000.log"),
            "CRASHLAB_INIT fs=ext4-fc\r\nCRASHLAB_FC commits=3 ineligible=0\r\nCRASHLAB_FC commits=40 ineligible=2\r\n",
        )
        .unwrap();
        std::fs::write(d.join("console-0001.log"), "CRASHLAB_INIT fs=ext4-fc\n").unwrap();
        std::fs::write(
            d.join("console-0002.log"),
            "x\x1b[0mCRASHLAB_FC commits=7 ineligible=1\nCRASHLAB_AGENT_SKIPPED claim-dest=4\n",
        )
        .unwrap();
        std::fs::write(
            d.join("records.log"),
            "CRASHLAB_FC commits=1000 ineligible=0\n",
        )
        .unwrap();
        assert_eq!(fast_commits(&d), "commits=47 ineligible=3");
        assert_eq!(skipped_barriers(&d), "claim-dest=4");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn windows() {
        assert_eq!(parse_window("1000-3000"), (1000, 3000));
        assert_eq!(parse_window("500"), (500, 500));
    }
}
