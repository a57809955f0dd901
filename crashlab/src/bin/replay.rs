//! Replays a dm-log-writes / QEMU blklogwrites log onto a copy of the pre-workload image and
//! checks the filesystem at every flush/FUA point (every crash state a power cut could leave).
//!
//! ```text
//! replay check --fs ext4 --base base.img --log log.bin --markbase 448M \
//!        --check 'steadq-verify --marks {marks} {mnt}' [options]
//! replay apply --base base.img --log log.bin --out final.img [--markbase B]
//! replay dump  --log log.bin [--markbase B]
//! ```
//! Exit status of `check`: 0 = all states OK (or, with --expect-violations, at least one
//! violation found), 1 = violations (or the negative control was not caught, or fewer than
//! --min-states states), 2 = usage, 3 = the rig itself failed (cannot copy, mount point stuck,
//! checker crashed or timed out).

use argh::FromArgs;
use crashlab::apply::Applier;
use crashlab::args::{self, size, USAGE};
use crashlab::logwrites::{Entry, LogReader};
use crashlab::marks::write_marks;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Output};
use std::time::{Duration, Instant};

/// Exit status when the rig itself failed (not a verdict on the filesystem or the queue).
const RIG_ERROR: i32 = 3;

#[derive(FromArgs)]
/// Replay a dm-log-writes / QEMU blklogwrites log and check every crash state it contains.
/// Exit status: 0 OK; 1 violations, too few states, or a negative control not caught;
/// 2 usage; 3 the rig itself failed.
struct Top {
    #[argh(subcommand)]
    cmd: Cmd,
}

#[derive(FromArgs)]
#[argh(subcommand)]
enum Cmd {
    Check(CheckArgs),
    Apply(ApplyArgs),
    Dump(DumpArgs),
}

#[derive(FromArgs)]
/// Check the image at every flush/FUA point (mount, check command, umount, fsck). The check
/// and fsck commands are run by sh -c, with these words in braces replaced: mnt (the mount
/// point), marks (the marks file), img (the state image), fs, state (its number).
#[argh(subcommand, name = "check")]
struct CheckArgs {
    /// filesystem type to mount (ext4, xfs, btrfs, ...)
    #[argh(option)]
    fs: String,
    /// the image before the logged writes
    #[argh(option)]
    base: PathBuf,
    /// the write log
    #[argh(option)]
    log: PathBuf,
    /// check command for each state (exit 0 OK, 1 violation, other: rig error); `true` tests
    /// mount and fsck only
    #[argh(option)]
    check: String,
    /// in-band marks start at this byte offset (448M, 0x1000, ...); without it every write is
    /// applied and no marks are taken
    #[argh(option, from_str_fn(size))]
    markbase: Option<u64>,
    /// where state images are copied (default: a directory in $TMPDIR)
    #[argh(option)]
    scratch: Option<PathBuf>,
    /// flush (default): check after each FLUSH/FUA entry; all: after every entry that changes
    /// the image too (every prefix of the log is a state a power cut can leave)
    #[argh(option, default = "Points::Flush", from_str_fn(points))]
    points: Points,
    /// check every Kth point only (default 1)
    #[argh(option, default = "1", from_str_fn(size))]
    every: u64,
    /// check at most N states (default 0: all)
    #[argh(option, default = "0", from_str_fn(size))]
    limit: u64,
    /// fail if fewer than N states were checked (default 0)
    #[argh(option, default = "0", from_str_fn(size))]
    min_states: u64,
    /// negative control: succeed only if at least one state violates
    #[argh(switch)]
    expect_violations: bool,
    /// name used in reports and kept files (default: the fs)
    #[argh(option)]
    label: Option<String>,
    /// filesystem checker command, or `none` (default: e2fsck -fn, xfs_repair -n, btrfs
    /// check --readonly or fsck.f2fs -f --dry-run on {img})
    #[argh(option)]
    fsck: Option<String>,
    /// extra mount options (added to `loop`)
    #[argh(option)]
    mount_opts: Option<String>,
    /// keep violating states (as the crash left them) in this directory
    #[argh(option)]
    keep_bad: Option<PathBuf>,
    /// keep at most N violating states (default 3)
    #[argh(option, default = "3", from_str_fn(size))]
    keep_max: u64,
    /// seconds before a check command is declared hung (default 120)
    #[argh(option, default = "120", from_str_fn(size))]
    check_timeout: u64,
    /// report every state, not only the violating ones
    #[argh(switch, short = 'v')]
    verbose: bool,
}

#[derive(FromArgs)]
/// Apply the whole log to a copy of the base image (the guest's final disk, below markbase).
#[argh(subcommand, name = "apply")]
struct ApplyArgs {
    /// the image before the logged writes
    #[argh(option)]
    base: PathBuf,
    /// the write log
    #[argh(option)]
    log: PathBuf,
    /// the image to write
    #[argh(option)]
    out: PathBuf,
    /// in-band marks start at this byte offset (not applied to the image)
    #[argh(option, from_str_fn(size))]
    markbase: Option<u64>,
}

#[derive(FromArgs)]
/// Print the log, one line per entry, in-band marks decoded.
#[argh(subcommand, name = "dump")]
struct DumpArgs {
    /// the write log
    #[argh(option)]
    log: PathBuf,
    /// in-band marks start at this byte offset
    #[argh(option, from_str_fn(size))]
    markbase: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Points {
    Flush,
    All,
}

fn points(s: &str) -> Result<Points, String> {
    match s {
        "flush" => Ok(Points::Flush),
        "all" => Ok(Points::All),
        other => Err(format!("flush or all, not {other:?}")),
    }
}

fn rig_err(msg: String) -> ! {
    eprintln!("replay: RIG ERROR: {msg}");
    exit(RIG_ERROR)
}

fn open_log(p: &Path) -> LogReader<BufReader<File>> {
    let f = File::open(p).unwrap_or_else(|e| rig_err(format!("{}: {e}", p.display())));
    LogReader::new(BufReader::with_capacity(1 << 20, f))
        .unwrap_or_else(|e| rig_err(format!("{}: {e}", p.display())))
}

fn run(cmd: &mut Command) -> io::Result<Output> {
    cmd.output()
}

fn sh(script: &str) -> io::Result<Output> {
    run(Command::new("sh").arg("-c").arg(script))
}

fn text(o: &Output) -> String {
    let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&o.stderr));
    s.trim().to_string()
}

/// The last `n` characters, on one line, for reports.
fn tail(s: &str, n: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = one.chars().collect();
    if chars.len() > n {
        format!("...{}", chars[chars.len() - n..].iter().collect::<String>())
    } else {
        one
    }
}

fn copy_sparse(from: &Path, to: &Path) {
    let o = run(Command::new("cp")
        .args(["--sparse=always", "--reflink=auto"])
        .arg(from)
        .arg(to))
    .unwrap_or_else(|e| rig_err(format!("cp: {e}")));
    if !o.status.success() {
        rig_err(format!(
            "cp {} {}: {}",
            from.display(),
            to.display(),
            text(&o)
        ));
    }
}

fn subst(tpl: &str, mnt: &Path, marks: &Path, img: &Path, fs: &str, state: u64) -> String {
    tpl.replace("{mnt}", &mnt.to_string_lossy())
        .replace("{marks}", &marks.to_string_lossy())
        .replace("{img}", &img.to_string_lossy())
        .replace("{fs}", fs)
        .replace("{state}", &state.to_string())
}

fn default_fsck(fs: &str) -> Option<&'static str> {
    match fs {
        "ext2" | "ext3" | "ext4" => Some("e2fsck -fn {img}"),
        "xfs" => Some("xfs_repair -n -f {img}"),
        "btrfs" => Some("btrfs check --readonly {img}"),
        // -f: the whole check even after a clean unmount; --dry-run: no repair
        "f2fs" => Some("fsck.f2fs -f --dry-run {img}"),
        _ => None,
    }
}

/// Unmounts on drop (a panic or early return must not leave a mount behind).
struct Mounted {
    mnt: PathBuf,
    active: bool,
}

impl Mounted {
    fn umount(&mut self) -> Result<(), String> {
        if !self.active {
            return Ok(());
        }
        let mut last = String::new();
        for attempt in 0..10 {
            match run(Command::new("umount").arg(&self.mnt)) {
                Ok(o) if o.status.success() => {
                    self.active = false;
                    return Ok(());
                }
                Ok(o) => last = text(&o),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100 * (attempt + 1)));
        }
        Err(format!("umount {}: {last}", self.mnt.display()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.active {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

#[derive(Default, Debug)]
struct Counts {
    states: u64,
    ok: u64,
    bad: u64,
    mount_fail: u64,
    check_fail: u64,
    fsck_fail: u64,
    mount_retries: u64,
}

/// One state's problems (empty: the state is fine).
type Reasons = Vec<String>;

struct Checker<'a> {
    o: &'a CheckArgs,
    state_img: PathBuf,
    mnt: PathBuf,
    marks_file: PathBuf,
    counts: Counts,
}

impl Checker<'_> {
    /// Mount (running the filesystem's own recovery), run the check command, umount, fsck.
    fn check(&mut self, k: u64) -> Reasons {
        let mut mounted = match self.mount() {
            Ok(m) => m,
            Err(why) => return vec![why],
        };
        let mut reasons = Vec::new();
        if let Some(why) = self.run_check(k) {
            reasons.push(why);
        }
        if let Err(e) = mounted.umount() {
            rig_err(e);
        }
        drop(mounted);
        reasons.extend(self.fsck(k));
        reasons
    }

    /// Loop-mounts the state image, retrying a few times; a mount that keeps failing is a
    /// violation of the state, reported as the error.
    fn mount(&mut self) -> Result<Mounted, String> {
        let mut opts = "loop".to_string();
        if let Some(extra) = &self.o.mount_opts {
            opts.push(',');
            opts.push_str(extra);
        }
        let mut cmd = Command::new("mount");
        cmd.arg("-t").arg(&self.o.fs).arg("-o").arg(&opts);
        cmd.arg(&self.state_img).arg(&self.mnt);
        let mut last = String::new();
        for attempt in 0..5u64 {
            match run(&mut cmd) {
                Ok(out) if out.status.success() => {
                    return Ok(Mounted {
                        mnt: self.mnt.clone(),
                        active: true,
                    })
                }
                Ok(out) => last = text(&out),
                Err(e) => rig_err(format!("mount: {e}")),
            }
            self.counts.mount_retries += 1;
            std::thread::sleep(Duration::from_millis(200 * (attempt + 1)));
        }
        self.counts.mount_fail += 1;
        Err(format!("MOUNT FAILED: {}", tail(&last, 300)))
    }

    /// Runs the check command on the mounted state: None if it passed.
    fn run_check(&mut self, k: u64) -> Option<String> {
        let o = self.o;
        let cmd = subst(
            &o.check,
            &self.mnt,
            &self.marks_file,
            &self.state_img,
            &o.fs,
            k,
        );
        let timeout = o.check_timeout.to_string();
        let out = run(Command::new("timeout").args(["-k", "5", &timeout, "sh", "-c", &cmd]))
            .unwrap_or_else(|e| rig_err(format!("check command: {e}")));
        match out.status.code() {
            Some(0) => {
                if o.verbose && !text(&out).is_empty() {
                    println!("  check: {}", tail(&text(&out), 300));
                }
                None
            }
            Some(1) => {
                self.counts.check_fail += 1;
                Some(format!("CHECK: {}", tail(&text(&out), 600)))
            }
            code => {
                // exit() skips the caller's Mounted drop: unmount (lazily) here.
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
                rig_err(format!(
                    "check command failed (status {code:?}, not 0=OK or 1=violation) at state {k}: {cmd}\n{}",
                    text(&out)
                ))
            }
        }
    }

    /// Runs the filesystem checker on the unmounted state: None if it is clean or disabled.
    fn fsck(&mut self, k: u64) -> Option<String> {
        let o = self.o;
        let tpl = match o.fsck.as_deref() {
            Some("none") | Some("") => return None,
            Some(c) => c.to_string(),
            None => default_fsck(&o.fs)?.to_string(),
        };
        let cmd = subst(&tpl, &self.mnt, &self.marks_file, &self.state_img, &o.fs, k);
        let out = sh(&cmd).unwrap_or_else(|e| rig_err(format!("fsck: {e}")));
        if out.status.success() {
            return None;
        }
        self.counts.fsck_fail += 1;
        Some(format!(
            "FSCK {:?}: {}",
            out.status.code(),
            tail(&text(&out), 400)
        ))
    }
}

/// One `replay check` run: the log, the image being rebuilt, the checker and the tallies.
struct Run<'a> {
    o: &'a CheckArgs,
    label: String,
    work: PathBuf,
    log: LogReader<BufReader<File>>,
    ap: Applier,
    ck: Checker<'a>,
    kept: u64,
    points: u64,
    limit_hit: bool,
    check_secs: f64,
    t0: Instant,
}

impl<'a> Run<'a> {
    /// Creates the scratch directories, copies the base image and opens the log.
    fn new(o: &'a CheckArgs) -> Run<'a> {
        let label = o.label.clone().unwrap_or_else(|| o.fs.clone());
        let scratch = o.scratch.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("crashlab-replay-{}", std::process::id()))
        });
        let mnt = scratch.join("mnt");
        for d in [Some(&scratch), Some(&mnt), o.keep_bad.as_ref()]
            .into_iter()
            .flatten()
        {
            std::fs::create_dir_all(d).unwrap_or_else(|e| rig_err(format!("{}: {e}", d.display())));
        }
        let t0 = Instant::now();
        let log = open_log(&o.log);
        let sup = log.super_block();
        println!(
            "replay {label}: fs={} log={} entries={} sectorsize={} markbase={:?}",
            o.fs,
            o.log.display(),
            sup.nr_entries,
            sup.sectorsize,
            o.markbase
        );
        let work = scratch.join("work.img");
        let ap = Applier::new(open_copy(&o.base, &work), log.sectorsize(), o.markbase);
        let ck = Checker {
            o,
            state_img: scratch.join("state.img"),
            mnt,
            marks_file: scratch.join("marks"),
            counts: Counts::default(),
        };
        Run {
            o,
            label,
            work,
            log,
            ap,
            ck,
            kept: 0,
            points: 0,
            limit_hit: false,
            check_secs: 0.0,
            t0,
        }
    }

    /// Applies the whole log, checking each crash state on the way.
    fn replay(&mut self) {
        while let Some(e) = self
            .log
            .next_entry()
            .unwrap_or_else(|e| rig_err(format!("log: {e}")))
        {
            let checkpoint = self
                .ap
                .apply(&e)
                .unwrap_or_else(|err| rig_err(format!("applying entry {}: {err}", e.index)));
            if !(checkpoint || (self.o.points == Points::All && self.changes_image(&e))) {
                continue;
            }
            self.points += 1;
            if !self.points.is_multiple_of(self.o.every.max(1)) {
                continue;
            }
            if self.o.limit > 0 && self.ck.counts.states >= self.o.limit {
                self.limit_hit = true;
                break;
            }
            self.check_state(&e);
        }
        let _ = std::fs::remove_file(&self.work);
        let _ = std::fs::remove_file(&self.ck.state_img);
    }

    /// A write or discard below markbase (not an in-band mark).
    fn changes_image(&self, e: &Entry) -> bool {
        (e.is_write() || e.is_discard())
            && e.sector * self.log.sectorsize() < self.o.markbase.unwrap_or(u64::MAX)
    }

    fn check_state(&mut self, e: &Entry) {
        let k = self.points;
        let c0 = Instant::now();
        copy_sparse(&self.work, &self.ck.state_img);
        write_marks(&self.ck.marks_file, &self.ap.marks)
            .unwrap_or_else(|err| rig_err(format!("marks file: {err}")));
        let reasons = self.ck.check(k);
        self.check_secs += c0.elapsed().as_secs_f64();
        let c = &mut self.ck.counts;
        c.states += 1;
        let marks = self.ap.marks.len();
        if reasons.is_empty() {
            c.ok += 1;
            if self.o.verbose {
                println!("OK  state {k} entry {} marks {marks}", e.index);
            }
        } else {
            c.bad += 1;
            println!(
                "BAD state {k} entry {} marks {marks}: {}",
                e.index,
                reasons.join(" | ")
            );
            self.keep(k);
        }
        let c = &self.ck.counts;
        if c.states.is_multiple_of(100) {
            let secs = self.t0.elapsed().as_secs_f64();
            println!(
                "... {}: {} states, {} bad, {secs:.1}s",
                self.label, c.states, c.bad
            );
        }
    }

    /// Keeps a violating state as the crash left it (work.img, before mount and recovery).
    fn keep(&mut self, k: u64) {
        let Some(dir) = &self.o.keep_bad else { return };
        if self.kept >= self.o.keep_max {
            return;
        }
        let dst = dir.join(format!("{}-state{k}.img", self.label));
        copy_sparse(&self.work, &dst);
        let marks = dir.join(format!("{}-state{k}.marks", self.label));
        let _ = std::fs::copy(&self.ck.marks_file, marks);
        println!("    kept {}", dst.display());
        self.kept += 1;
    }

    fn summary(&self) {
        let (c, s, label) = (&self.ck.counts, &self.ap.stats, &self.label);
        println!(
            "SUMMARY label={label} fs={} states={} ok={} violations={} mount_fail={} check_fail={} fsck_fail={} \
             mount_retries={} points_seen={} checkpoints_seen={} entries={} writes={} flushes={} fua={} discards={} \
             dm_marks={} inband_marks={} foreign_blocks={} limit_hit={} secs={:.1} per_state={:.3}",
            self.o.fs, c.states, c.ok, c.bad, c.mount_fail, c.check_fail, c.fsck_fail,
            c.mount_retries, self.points, s.checkpoints, s.entries, s.writes, s.flushes, s.fua,
            s.discards, s.dm_marks, s.inband_marks, s.foreign_blocks, self.limit_hit,
            self.t0.elapsed().as_secs_f64(),
            self.check_secs / c.states.max(1) as f64
        );
        println!(
            "{label}: crash states checked: {}, violations: {}",
            c.states, c.bad
        );
        if s.foreign_blocks > 0 {
            println!(
                "{label}: WARNING: {} non-mark blocks were written past markbase",
                s.foreign_blocks
            );
        }
    }

    /// The exit status: 0 or 1 (see the module docs).
    fn verdict(&self) -> i32 {
        let (c, label) = (&self.ck.counts, &self.label);
        if self.o.expect_violations {
            if c.bad > 0 {
                println!(
                    "{label}: negative control caught ({} violating states)",
                    c.bad
                );
                return 0;
            }
            println!(
                "{label}: NEGATIVE CONTROL NOT CAUGHT: no violation in {} states",
                c.states
            );
            1
        } else if c.bad > 0 {
            println!(
                "{label}: FAILED: {} of {} crash states violate the invariants",
                c.bad, c.states
            );
            1
        } else if c.states < self.o.min_states {
            println!(
                "{label}: FAILED: only {} crash states, --min-states {}",
                c.states, self.o.min_states
            );
            1
        } else {
            0
        }
    }
}

/// Copies `base` to `to` (sparse) and opens the copy for writing.
fn open_copy(base: &Path, to: &Path) -> File {
    copy_sparse(base, to);
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(to)
        .unwrap_or_else(|e| rig_err(format!("{}: {e}", to.display())))
}

fn cmd_check(o: &CheckArgs) -> i32 {
    let mut r = Run::new(o);
    r.replay();
    r.summary();
    r.verdict()
}

fn cmd_apply(o: &ApplyArgs) -> i32 {
    let mut log = open_log(&o.log);
    let mut ap = Applier::new(open_copy(&o.base, &o.out), log.sectorsize(), o.markbase);
    while let Some(e) = log
        .next_entry()
        .unwrap_or_else(|e| rig_err(format!("log: {e}")))
    {
        ap.apply(&e)
            .unwrap_or_else(|err| rig_err(format!("applying entry {}: {err}", e.index)));
    }
    ap.sync().unwrap_or_else(|e| rig_err(format!("sync: {e}")));
    println!("applied {:?}; marks={}", ap.stats, ap.marks.len());
    0
}

fn cmd_dump(o: &DumpArgs) -> i32 {
    let mut log = open_log(&o.log);
    let sup = log.super_block();
    println!(
        "super: version={} nr_entries={} sectorsize={}",
        sup.version, sup.nr_entries, sup.sectorsize
    );
    let ss = log.sectorsize();
    let markbase = o.markbase.unwrap_or(u64::MAX);
    while let Some(e) = log
        .next_entry()
        .unwrap_or_else(|e| rig_err(format!("log: {e}")))
    {
        let mut line = e.to_string();
        if e.is_write() && e.sector * ss >= markbase {
            if let Some(m) = crashlab::marks::Mark::decode_block(&e.data) {
                line.push_str(&format!(" inband-mark={:?}", m.to_string()));
            }
        }
        println!("{line}");
    }
    0
}

fn main() {
    let top: Top = args::from_env();
    debug_assert_eq!(USAGE, 2, "the module docs promise 2 for usage errors");
    exit(match &top.cmd {
        Cmd::Check(o) => cmd_check(o),
        Cmd::Apply(o) => cmd_apply(o),
        Cmd::Dump(o) => cmd_dump(o),
    })
}
