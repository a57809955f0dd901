//! Placeholder crash workload (runs in the guest). To be replaced by a SteadQ workload with the
//! same command line: `crashlab-workload <mountpoint> <blockdev> <markbase> [options]`.
//!
//! Options:
//!   --jobs N            number of jobs (each is enqueued, claimed and acked; default 100)
//!   --max-size BYTES    largest job file (default 65536)
//!   --skip-file-fsync   NEGATIVE CONTROL: publish job files without fsyncing their data first
//!
//! Every step is made durable (fsync of the file, renameat2(RENAME_NOREPLACE), fsync of the
//! directories involved) and only then recorded with an in-band mark `<seq> <op> <job>`.

use crashlab::marks::{parse_size, say, MarkWriter, WorkloadArgs};
use crashlab::placeholder::{job_content, job_id, schedule, CUR, NEW, ROOT, TMP};
use rustix::fs::{renameat_with, RenameFlags, CWD};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::process::exit;
use std::time::Instant;

struct Opts {
    jobs: u64,
    max_size: usize,
    skip_file_fsync: bool,
}

fn parse_opts(rest: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        jobs: 100,
        max_size: 65536,
        skip_file_fsync: false,
    };
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--jobs" => o.jobs = val()?.parse().map_err(|e| format!("--jobs: {e}"))?,
            "--max-size" => {
                o.max_size = parse_size(&val()?).ok_or("--max-size: bad size")? as usize
            }
            "--skip-file-fsync" => o.skip_file_fsync = true,
            "" => {}
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(o)
}

fn fsync_dir(p: &Path) -> io::Result<()> {
    File::open(p)?.sync_all()
}

fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE).map_err(io::Error::from)
}

fn ctx<T>(r: io::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| {
        say(&format!("CRASHLAB_WORKLOAD_FAIL {what}: {e}"));
        exit(1)
    })
}

fn main() {
    let args = WorkloadArgs::from_env();
    let o = parse_opts(&args.rest).unwrap_or_else(|e| {
        eprintln!("crashlab-workload: {e}");
        exit(2)
    });
    let mut marks = ctx(
        MarkWriter::open(&args.blockdev, args.markbase),
        "open mark device",
    );
    let ops = schedule(o.jobs);
    if ops.len() as u64 + 1 > marks.capacity() {
        say(&format!(
            "CRASHLAB_WORKLOAD_FAIL {} ops but room for {} marks",
            ops.len(),
            marks.capacity()
        ));
        exit(1);
    }
    let root = args.mountpoint.join(ROOT);
    let (tmp, new, cur) = (root.join(TMP), root.join(NEW), root.join(CUR));
    let t0 = Instant::now();

    // setup: the queue directories, durable before any job exists
    for d in [&root, &tmp, &new, &cur] {
        ctx(fs::create_dir(d), "mkdir");
    }
    for d in [&tmp, &new, &cur, &root, &args.mountpoint] {
        ctx(fsync_dir(d), "fsync setup dir");
    }
    ctx(marks.mark("setup", ""), "mark setup");

    for (n, (op, i)) in ops.iter().enumerate() {
        let id = job_id(*i);
        match *op {
            "enqueue" => {
                let data = job_content(&id, o.max_size);
                let mut f = ctx(
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(tmp.join(&id)),
                    "create",
                );
                ctx(f.write_all(&data), "write");
                if !o.skip_file_fsync {
                    ctx(f.sync_all(), "fsync file");
                }
                drop(f);
                ctx(
                    rename_noreplace(&tmp.join(&id), &new.join(&id)),
                    "rename tmp->new",
                );
                ctx(fsync_dir(&new), "fsync new");
                ctx(fsync_dir(&tmp), "fsync tmp");
            }
            "claim" => {
                ctx(
                    rename_noreplace(&new.join(&id), &cur.join(&id)),
                    "rename new->cur",
                );
                ctx(fsync_dir(&cur), "fsync cur");
                ctx(fsync_dir(&new), "fsync new");
            }
            "ack" => {
                ctx(fs::remove_file(cur.join(&id)), "unlink");
                ctx(fsync_dir(&cur), "fsync cur");
            }
            _ => unreachable!(),
        }
        ctx(marks.mark(op, &id), "mark");
        if (n + 1) % 50 == 0 {
            say(&format!("CRASHLAB_PROGRESS {} ops", n + 1));
        }
    }
    say(&format!(
        "CRASHLAB_WORKLOAD_OK jobs={} ops={} marks={} skip_file_fsync={} secs={:.2}",
        o.jobs,
        ops.len(),
        ops.len() + 1,
        o.skip_file_fsync,
        t0.elapsed().as_secs_f64()
    ));
}
