//! Placeholder verifier for one crash state (runs on the host, on the mounted state). To be
//! replaced by a SteadQ verifier with the same command line:
//! `crashlab-verify --marks <FILE> <MOUNTPOINT>`; exit 0 = OK, 1 = violation, 2 = usage/internal.
//!
//! The marks file lists the steps that were durable before this crash state (`<seq> <op> <job>`).
//! The workload runs one step at a time and writes each mark before starting the next step, so at
//! most one step beyond the marks can have reached the disk. Rules:
//! - every file in `new/` and `cur/` is a job with exactly its content (whether marked or not);
//! - no job is in both `new/` and `cur/`;
//! - a job is in the state of its last mark, or (for at most one job in total) one step further:
//!   unmarked: absent or new/; enqueued: new/ or cur/; claimed: cur/ or gone; acked: gone;
//! - once `setup` is marked the queue directories exist.
//!
//! `tmp/` is not checked: leftovers there are garbage by design.

use crashlab::marks::{read_marks, VerifyArgs};
use crashlab::placeholder::{check_content, parse_job_id, CUR, NEW, ROOT, TMP};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::exit;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum St {
    Absent = 0,
    New = 1,
    Cur = 2,
    Gone = 3,
}

fn internal(msg: String) -> ! {
    eprintln!("crashlab-verify: {msg}");
    exit(2)
}

/// Names in `dir`, or None if it does not exist. Read errors are violations.
fn list(dir: &Path, bad: &mut Vec<String>) -> Option<Vec<String>> {
    match std::fs::read_dir(dir) {
        Ok(rd) => {
            let mut v = Vec::new();
            for e in rd {
                match e {
                    Ok(e) => v.push(e.file_name().to_string_lossy().into_owned()),
                    Err(e) => bad.push(format!("{}: readdir: {e}", dir.display())),
                }
            }
            v.sort();
            Some(v)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            bad.push(format!("{}: {e}", dir.display()));
            None
        }
    }
}

fn main() {
    let a = VerifyArgs::from_env();
    let verbose = a.rest.iter().any(|x| x == "-v");
    let marks = read_marks(&a.marks).unwrap_or_else(|e| internal(format!("marks: {e}")));

    let mut setup = false;
    let mut marked: BTreeMap<u64, St> = BTreeMap::new();
    for m in &marks {
        let (want_prev, next) = match m.op.as_str() {
            "setup" => {
                setup = true;
                continue;
            }
            "enqueue" => (St::Absent, St::New),
            "claim" => (St::New, St::Cur),
            "ack" => (St::Cur, St::Gone),
            other => internal(format!("unknown op {other:?} in mark {m}")),
        };
        let j = parse_job_id(&m.arg).unwrap_or_else(|| internal(format!("bad job in mark {m}")));
        let prev = marked.get(&j).copied().unwrap_or(St::Absent);
        if prev != want_prev {
            internal(format!("marks out of order: {m} after state {prev:?}"));
        }
        marked.insert(j, next);
    }

    let mut bad = Vec::new();
    let root = a.mountpoint.join(ROOT);
    let new = list(&root.join(NEW), &mut bad);
    let cur = list(&root.join(CUR), &mut bad);
    if setup {
        for d in [TMP, NEW, CUR] {
            if !root.join(d).is_dir() {
                bad.push(format!("{ROOT}/{d} missing after setup was marked"));
            }
        }
    }

    let mut seen: BTreeMap<u64, St> = BTreeMap::new();
    for (dir, names, st) in [(NEW, &new, St::New), (CUR, &cur, St::Cur)] {
        for name in names.iter().flatten() {
            let Some(j) = parse_job_id(name) else {
                bad.push(format!("{dir}/{name}: unexpected file"));
                continue;
            };
            match std::fs::read(root.join(dir).join(name)) {
                Ok(data) => {
                    if let Err(e) = check_content(name, &data) {
                        bad.push(format!("{dir}/{name}: bad content: {e}"));
                    }
                }
                Err(e) => bad.push(format!("{dir}/{name}: read: {e}")),
            }
            if let Some(prev) = seen.insert(j, st) {
                bad.push(format!("{name}: in both {prev:?} and {st:?}"));
            }
        }
    }

    let mut ahead = Vec::new();
    let jobs: std::collections::BTreeSet<u64> = marked.keys().chain(seen.keys()).copied().collect();
    for j in jobs {
        let m = marked.get(&j).copied().unwrap_or(St::Absent);
        let s = seen.get(&j).copied();
        // what the directory listing can show for each logical state
        let shows = |st: St| match st {
            St::Absent | St::Gone => None,
            other => Some(other),
        };
        let next = match m {
            St::Absent => St::New,
            St::New => St::Cur,
            St::Cur | St::Gone => St::Gone,
        };
        let name = format!("j{j:05}");
        if s == shows(m) {
            continue;
        }
        if s == shows(next) {
            ahead.push(format!("{name} (marked {m:?}, found {next:?})"));
            continue;
        }
        let found = s.map_or("absent".to_string(), |x| format!("{x:?}"));
        bad.push(format!("{name}: marked {m:?} (durable) but found {found}"));
    }
    if ahead.len() > 1 {
        bad.push(format!(
            "{} jobs ahead of their marks (at most 1 step is in flight): {}",
            ahead.len(),
            ahead.join(", ")
        ));
    }

    if verbose || !bad.is_empty() {
        println!(
            "marks={} jobs_marked={} new={} cur={} ahead={:?}",
            marks.len(),
            marked.len(),
            new.as_ref().map_or(0, |v| v.len()),
            cur.as_ref().map_or(0, |v| v.len()),
            ahead
        );
    }
    if !bad.is_empty() {
        for b in bad.iter().take(20) {
            println!("VIOLATION {b}");
        }
        if bad.len() > 20 {
            println!("... {} more", bad.len() - 20);
        }
        exit(1);
    }
}
