//! Verify one crash state of the SteadQ workload: `steadq-verify --marks FILE MOUNTPOINT`.
//! Runs recovery (first crashed part-way, then whole) on `MOUNTPOINT/q` and checks every
//! invariant of [`crashlab::invariants`] against the marks. Exit 0: OK; 1: violation (each
//! printed); 2: usage, or the verifier itself failed.

use argh::FromArgs;
use crashlab::args::{self, USAGE};
use crashlab::invariants::{check_created, verify, Expect};
use crashlab::marks::read_marks;
use std::path::PathBuf;
use std::process::exit;

#[derive(FromArgs)]
/// Check one mounted crash state of the SteadQ workload against the marks of the operations
/// that had returned done. Exit 0 OK, 1 violation, 2 usage or verifier failure.
struct Args {
    /// the marks file (`<seq> <op> <arg>` lines)
    #[argh(option)]
    marks: PathBuf,
    /// the mounted crash state (the queue is <mountpoint>/q)
    #[argh(positional)]
    mountpoint: PathBuf,
}

fn broken(msg: String) -> ! {
    eprintln!("steadq-verify: {msg}");
    exit(USAGE)
}

fn main() {
    let a: Args = args::from_env();
    let marks =
        read_marks(&a.marks).unwrap_or_else(|e| broken(format!("{}: {e}", a.marks.display())));
    let expect = Expect::from_marks(&marks).unwrap_or_else(|e| broken(e));
    let dir = a.mountpoint.join("q");
    if !dir.join(steadq::IDENTITY_FILE).exists() {
        // The queue itself was not yet durable: fine only if nothing was marked done.
        if expect.enqueued.is_empty() {
            return;
        }
        println!(
            "VIOLATION: {} enqueues marked done, but no queue at {}",
            expect.enqueued.len(),
            dir.display()
        );
        exit(1);
    }
    // Vary where the first recovery crashes: after its 1st, 2nd or 3rd rename.
    let crash_at = Some(1 + (marks.len() % 3) as u32);
    match verify(&dir, &expect, crash_at) {
        Ok(mut v) => {
            v.violations.extend(check_created(&a.mountpoint, &expect));
            if v.violations.is_empty() {
                return;
            }
            for x in &v.violations {
                println!("VIOLATION: {x}");
            }
            exit(1);
        }
        Err(e) => broken(format!("verifier failed: {e}")),
    }
}
