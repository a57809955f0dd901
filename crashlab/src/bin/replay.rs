//! Replays a dm-log-writes / QEMU blklogwrites log onto a copy of the pre-workload image and
//! checks the filesystem at every flush/FUA point (every crash state a power cut could leave).
//!
//! ```text
//! replay check --fs ext4 --base base.img --log log.bin --markbase 448M \
//!        --check 'crashlab-verify --marks {marks} {mnt}' [options]
//! replay apply --base base.img --log log.bin --out final.img [--markbase B]
//! replay dump  --log log.bin [--markbase B]
//! ```
//! Exit status of `check`: 0 = all states OK (or, with --expect-violations, at least one
//! violation found), 1 = violations (or the negative control was not caught, or fewer than
//! --min-states states), 2 = usage, 3 = the rig itself failed (cannot copy, mount point stuck,
//! checker crashed or timed out).

use crashlab::apply::Applier;
use crashlab::logwrites::LogReader;
use crashlab::marks::{parse_size, write_marks};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Output};
use std::time::{Duration, Instant};

const USAGE: &str = "usage:
  replay check --fs FS --base IMG --log LOG --check CMD [--markbase BYTES] [--scratch DIR]
               [--points flush|all] [--every K] [--limit N] [--min-states N] [--expect-violations] [--label NAME]
               [--fsck CMD|none] [--mount-opts OPTS] [--keep-bad DIR] [--check-timeout SECS] [-v]
  replay apply --base IMG --log LOG --out IMG [--markbase BYTES]
  replay dump  --log LOG [--markbase BYTES]
CMD and the fsck command are run by sh -c after substituting {mnt} {marks} {img} {fs} {state}.
Without --markbase no in-band marks are taken (every write is applied).
--points flush (default) checks the image after each FLUSH/FUA entry; --points all after every
entry that changes the image too (every prefix of the log is a state a power cut can leave).";

fn usage_err(msg: &str) -> ! {
    eprintln!("replay: {msg}\n{USAGE}");
    exit(2)
}

fn rig_err(msg: String) -> ! {
    eprintln!("replay: RIG ERROR: {msg}");
    exit(3)
}

#[derive(Default)]
struct Opts {
    fs: String,
    base: Option<PathBuf>,
    log: Option<PathBuf>,
    out: Option<PathBuf>,
    markbase: Option<u64>,
    check: Option<String>,
    scratch: Option<PathBuf>,
    every: u64,
    all_points: bool,
    limit: u64,
    min_states: u64,
    expect_violations: bool,
    label: Option<String>,
    fsck: Option<String>,
    mount_opts: Option<String>,
    keep_bad: Option<PathBuf>,
    keep_max: u64,
    check_timeout: u64,
    verbose: bool,
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        every: 1,
        check_timeout: 120,
        keep_max: 3,
        ..Default::default()
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut val = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .unwrap_or_else(|| usage_err(&format!("{key} needs a value")))
        };
        let num = |s: String| {
            parse_size(&s).unwrap_or_else(|| usage_err(&format!("{key}: bad number {s:?}")))
        };
        match key {
            "--fs" => o.fs = val(),
            "--base" => o.base = Some(val().into()),
            "--log" => o.log = Some(val().into()),
            "--out" => o.out = Some(val().into()),
            "--markbase" => o.markbase = Some(num(val())),
            "--check" => o.check = Some(val()),
            "--scratch" => o.scratch = Some(val().into()),
            "--every" => o.every = num(val()).max(1),
            "--points" => match val().as_str() {
                "flush" => o.all_points = false,
                "all" => o.all_points = true,
                other => usage_err(&format!("--points flush|all, not {other:?}")),
            },
            "--limit" => o.limit = num(val()),
            "--min-states" => o.min_states = num(val()),
            "--expect-violations" => o.expect_violations = true,
            "--label" => o.label = Some(val()),
            "--fsck" => o.fsck = Some(val()),
            "--mount-opts" => o.mount_opts = Some(val()),
            "--keep-bad" => o.keep_bad = Some(val().into()),
            "--keep-max" => o.keep_max = num(val()),
            "--check-timeout" => o.check_timeout = num(val()),
            "-v" | "--verbose" => o.verbose = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                exit(0)
            }
            other => usage_err(&format!("unknown argument {other:?}")),
        }
    }
    o
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
        _ => None,
    }
}

/// Unmounts on drop (a panic or early return must not leave a mount behind).
struct Mounted<'a> {
    mnt: &'a Path,
    active: bool,
}

impl Mounted<'_> {
    fn umount(&mut self) -> Result<(), String> {
        if !self.active {
            return Ok(());
        }
        let mut last = String::new();
        for attempt in 0..10 {
            match run(Command::new("umount").arg(self.mnt)) {
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

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if self.active {
            let _ = Command::new("umount").arg("-l").arg(self.mnt).status();
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

enum Verdict {
    Ok,
    Bad(Vec<String>),
}

struct Checker<'a> {
    o: &'a Opts,
    state_img: PathBuf,
    mnt: PathBuf,
    marks_file: PathBuf,
    counts: Counts,
}

impl Checker<'_> {
    /// Mount (running the filesystem's own recovery), run the check command, umount, fsck.
    fn check(&mut self, k: u64) -> Verdict {
        let o = self.o;
        let mut reasons = Vec::new();
        let mut mount_cmd = Command::new("mount");
        mount_cmd.arg("-t").arg(&o.fs);
        let mut mopts = "loop".to_string();
        if let Some(extra) = &o.mount_opts {
            mopts.push(',');
            mopts.push_str(extra);
        }
        mount_cmd
            .arg("-o")
            .arg(&mopts)
            .arg(&self.state_img)
            .arg(&self.mnt);
        let mut mounted = Mounted {
            mnt: &self.mnt,
            active: false,
        };
        let mut last = String::new();
        for attempt in 0..5u64 {
            match run(&mut mount_cmd) {
                Ok(out) if out.status.success() => {
                    mounted.active = true;
                    break;
                }
                Ok(out) => last = text(&out),
                Err(e) => rig_err(format!("mount: {e}")),
            }
            self.counts.mount_retries += 1;
            std::thread::sleep(Duration::from_millis(200 * (attempt + 1)));
        }
        if !mounted.active {
            self.counts.mount_fail += 1;
            return Verdict::Bad(vec![format!("MOUNT FAILED: {}", tail(&last, 300))]);
        }
        if let Some(tpl) = &o.check {
            let cmd = subst(tpl, &self.mnt, &self.marks_file, &self.state_img, &o.fs, k);
            let out = run(Command::new("timeout").args([
                "-k",
                "5",
                &o.check_timeout.to_string(),
                "sh",
                "-c",
                &cmd,
            ]))
            .unwrap_or_else(|e| rig_err(format!("check command: {e}")));
            match out.status.code() {
                Some(0) => {
                    if o.verbose && !text(&out).is_empty() {
                        println!("  check: {}", tail(&text(&out), 300));
                    }
                }
                Some(1) => {
                    self.counts.check_fail += 1;
                    reasons.push(format!("CHECK: {}", tail(&text(&out), 600)));
                }
                code => {
                    drop(mounted);
                    rig_err(format!(
                        "check command failed (status {code:?}, not 0=OK or 1=violation) at state {k}: {cmd}\n{}",
                        text(&out)
                    ))
                }
            }
        }
        if let Err(e) = mounted.umount() {
            rig_err(e);
        }
        drop(mounted);
        let fsck = match o.fsck.as_deref() {
            Some("none") | Some("") => None,
            Some(c) => Some(c.to_string()),
            None => default_fsck(&o.fs).map(str::to_string),
        };
        if let Some(tpl) = fsck {
            let cmd = subst(&tpl, &self.mnt, &self.marks_file, &self.state_img, &o.fs, k);
            let out = sh(&cmd).unwrap_or_else(|e| rig_err(format!("fsck: {e}")));
            if !out.status.success() {
                self.counts.fsck_fail += 1;
                reasons.push(format!(
                    "FSCK {:?}: {}",
                    out.status.code(),
                    tail(&text(&out), 400)
                ));
            }
        }
        if reasons.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Bad(reasons)
        }
    }
}

fn cmd_check(o: Opts) -> i32 {
    let base = o
        .base
        .clone()
        .unwrap_or_else(|| usage_err("--base is required"));
    let logp = o
        .log
        .clone()
        .unwrap_or_else(|| usage_err("--log is required"));
    if o.fs.is_empty() {
        usage_err("--fs is required");
    }
    if o.check.is_none() {
        usage_err("--check is required (use --check true to test mount+fsck only)");
    }
    let label = o.label.clone().unwrap_or_else(|| o.fs.clone());
    let scratch = o.scratch.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("crashlab-replay-{}", std::process::id()))
    });
    std::fs::create_dir_all(&scratch)
        .unwrap_or_else(|e| rig_err(format!("{}: {e}", scratch.display())));
    let work = scratch.join("work.img");
    let mnt = scratch.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap_or_else(|e| rig_err(format!("{}: {e}", mnt.display())));
    if let Some(k) = &o.keep_bad {
        std::fs::create_dir_all(k).unwrap_or_else(|e| rig_err(format!("{}: {e}", k.display())));
    }

    let t0 = Instant::now();
    let mut log = open_log(&logp);
    let sup = log.super_block();
    println!(
        "replay {label}: fs={} log={} entries={} sectorsize={} markbase={:?}",
        o.fs,
        logp.display(),
        sup.nr_entries,
        sup.sectorsize,
        o.markbase
    );
    copy_sparse(&base, &work);
    let img = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&work)
        .unwrap_or_else(|e| rig_err(format!("{}: {e}", work.display())));
    let mut ap = Applier::new(img, log.sectorsize(), o.markbase);
    let mut ck = Checker {
        o: &o,
        state_img: scratch.join("state.img"),
        mnt: mnt.clone(),
        marks_file: scratch.join("marks"),
        counts: Counts::default(),
    };
    let mut kept = 0;
    let mut stopped_at_limit = false;
    let mut check_secs = 0.0;
    let mut points = 0u64;
    while let Some(e) = log
        .next_entry()
        .unwrap_or_else(|e| rig_err(format!("log: {e}")))
    {
        let cp = ap
            .apply(&e)
            .unwrap_or_else(|err| rig_err(format!("applying entry {}: {err}", e.index)));
        // with --points all, also every write/discard that changed the image (not mark writes)
        let changed = (e.is_write() || e.is_discard())
            && e.sector * log.sectorsize() < o.markbase.unwrap_or(u64::MAX);
        if !(cp || (o.all_points && changed)) {
            continue;
        }
        points += 1;
        let k = points;
        if !k.is_multiple_of(o.every) {
            continue;
        }
        if o.limit > 0 && ck.counts.states >= o.limit {
            stopped_at_limit = true;
            break;
        }
        let c0 = Instant::now();
        copy_sparse(&work, &ck.state_img);
        write_marks(&ck.marks_file, &ap.marks)
            .unwrap_or_else(|err| rig_err(format!("marks file: {err}")));
        let verdict = ck.check(k);
        check_secs += c0.elapsed().as_secs_f64();
        ck.counts.states += 1;
        match verdict {
            Verdict::Ok => {
                ck.counts.ok += 1;
                if o.verbose {
                    println!("OK  state {k} entry {} marks {}", e.index, ap.marks.len());
                }
            }
            Verdict::Bad(reasons) => {
                ck.counts.bad += 1;
                println!(
                    "BAD state {k} entry {} marks {}: {}",
                    e.index,
                    ap.marks.len(),
                    reasons.join(" | ")
                );
                if let Some(dir) = &o.keep_bad {
                    if kept < o.keep_max {
                        // work.img still holds this state as the crash left it (before mount/recovery)
                        let dst = dir.join(format!("{label}-state{k}.img"));
                        copy_sparse(&work, &dst);
                        let _ = std::fs::copy(
                            &ck.marks_file,
                            dir.join(format!("{label}-state{k}.marks")),
                        );
                        println!("    kept {}", dst.display());
                        kept += 1;
                    }
                }
            }
        }
        if ck.counts.states.is_multiple_of(100) {
            println!(
                "... {label}: {} states, {} bad, {:.1}s",
                ck.counts.states,
                ck.counts.bad,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let _ = std::fs::remove_file(&work);
    let _ = std::fs::remove_file(&ck.state_img);
    let secs = t0.elapsed().as_secs_f64();
    let c = &ck.counts;
    let s = &ap.stats;
    println!(
        "SUMMARY label={label} fs={} states={} ok={} violations={} mount_fail={} check_fail={} fsck_fail={} \
         mount_retries={} points_seen={points} checkpoints_seen={} entries={} writes={} flushes={} fua={} discards={} \
         dm_marks={} inband_marks={} foreign_blocks={} limit_hit={} secs={secs:.1} per_state={:.3}",
        o.fs,
        c.states,
        c.ok,
        c.bad,
        c.mount_fail,
        c.check_fail,
        c.fsck_fail,
        c.mount_retries,
        s.checkpoints,
        s.entries,
        s.writes,
        s.flushes,
        s.fua,
        s.discards,
        s.dm_marks,
        s.inband_marks,
        s.foreign_blocks,
        stopped_at_limit,
        check_secs / c.states.max(1) as f64
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
    if o.expect_violations {
        if c.bad > 0 {
            println!(
                "{label}: negative control caught ({} violating states)",
                c.bad
            );
            0
        } else {
            println!(
                "{label}: NEGATIVE CONTROL NOT CAUGHT: no violation in {} states",
                c.states
            );
            1
        }
    } else if c.bad > 0 {
        println!(
            "{label}: FAILED: {} of {} crash states violate the invariants",
            c.bad, c.states
        );
        1
    } else if c.states < o.min_states {
        println!(
            "{label}: FAILED: only {} crash states, --min-states {}",
            c.states, o.min_states
        );
        1
    } else {
        0
    }
}

fn cmd_apply(o: Opts) -> i32 {
    let base = o
        .base
        .clone()
        .unwrap_or_else(|| usage_err("--base is required"));
    let logp = o
        .log
        .clone()
        .unwrap_or_else(|| usage_err("--log is required"));
    let out = o
        .out
        .clone()
        .unwrap_or_else(|| usage_err("--out is required"));
    let mut log = open_log(&logp);
    copy_sparse(&base, &out);
    let img = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&out)
        .unwrap_or_else(|e| rig_err(format!("{}: {e}", out.display())));
    let mut ap = Applier::new(img, log.sectorsize(), o.markbase);
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

fn cmd_dump(o: Opts) -> i32 {
    let logp = o
        .log
        .clone()
        .unwrap_or_else(|| usage_err("--log is required"));
    let mut log = open_log(&logp);
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(sub) = args.first() else {
        usage_err("missing subcommand")
    };
    let o = parse(&args[1..]);
    let rc = match sub.as_str() {
        "check" => cmd_check(o),
        "apply" => cmd_apply(o),
        "dump" => cmd_dump(o),
        "-h" | "--help" => {
            println!("{USAGE}");
            0
        }
        other => usage_err(&format!("unknown subcommand {other:?}")),
    };
    exit(rc)
}
