//! Verify one crash state of the SteadQ workload: `steadq-verify --marks FILE MOUNTPOINT`.
//! Runs recovery (first crashed part-way, then whole) on `MOUNTPOINT/q` and checks every
//! invariant of [`crashlab::invariants`] against the marks. Exit 0: OK; 1: violation (each
//! printed); 2: the verifier itself failed.

use crashlab::invariants::{verify, Expect};
use crashlab::marks::{read_marks, VerifyArgs};

fn main() {
    let a = VerifyArgs::from_env();
    let marks = read_marks(&a.marks).unwrap_or_else(|e| {
        eprintln!("{}: {e}", a.marks.display());
        std::process::exit(2)
    });
    let expect = Expect::from_marks(&marks).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
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
        std::process::exit(1);
    }
    // Vary where the first recovery crashes: after its 1st, 2nd or 3rd rename.
    let crash_at = Some(1 + (marks.len() % 3) as u32);
    match verify(&dir, &expect, crash_at) {
        Ok(v) if v.violations.is_empty() => {}
        Ok(v) => {
            for x in &v.violations {
                println!("VIOLATION: {x}");
            }
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("verifier failed: {e}");
            std::process::exit(2);
        }
    }
}
