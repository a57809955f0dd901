//! `steadq`: the command line. It parses, calls the library and prints; the queue logic is
//! all in the library.
//!
//! Exit codes (also in every `--help`):
//! 0 done; 1 bad usage; 2 failed, not done (bad input, missing queue, ...); 3 nothing to do
//! (no job ready); 4 outcome indeterminate (it may have happened); 5 fsck found problems;
//! 6 lease lost.

/// `println!` through [`cli::stdout::line`]: flushed and checked. A closed pipe (`steadq
/// enqueue ... | true`) is ignored, as the operation is done either way; any other write
/// error makes the command exit 2 (see `main`).
macro_rules! out {
    ($($t:tt)*) => {{
        let _ = $crate::cli::stdout::line(format_args!($($t)*));
    }};
}

/// `eprintln!` that ignores a failed write: std's panics when stderr cannot be written
/// (`2>/dev/full`, a log pipe whose reader exited), and with `panic = "abort"` that killed
/// the process (exit 134), `work`'s running commands with it. Shadows std's macro in this
/// crate.
macro_rules! eprintln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod cli;

use argh::FromArgs;
use cli::args::Top;
use cli::exit::Exit;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // argh::from_env would print --help with println!, which panics on a closed pipe
    // (`steadq --help | head`): parse here and print through `out!`.
    // Paths and command arguments need not be UTF-8: argh sees placeholders for those.
    let args: Vec<String> = cli::rawargs::placeholders(std::env::args_os());
    // argh has no --version: answer it before parsing (only as the sole argument).
    if args.len() == 2 && (args[1] == "--version" || args[1] == "-V") {
        out!("steadq {}", env!("CARGO_PKG_VERSION"));
        std::process::exit(if cli::stdout::failure().is_some() {
            2
        } else {
            0
        });
    }
    let strs: Vec<&str> = args.iter().map(String::as_str).collect();
    let top = match Top::from_args(&strs[..1], &strs[1..]) {
        Ok(t) => t,
        Err(argh::EarlyExit {
            output,
            status: Ok(()),
        }) => {
            out!("{}", output.trim_end());
            if let Some(msg) = cli::stdout::failure() {
                eprintln!("steadq: {msg}");
                std::process::exit(Exit::NotDone.code());
            }
            std::process::exit(Exit::Done.code());
        }
        Err(argh::EarlyExit {
            output,
            status: Err(()),
        }) => {
            eprintln!("{}", cli::rawargs::shown_safe(output.trim_end()));
            std::process::exit(Exit::Usage.code());
        }
    };
    let code = match cli::run(top.cmd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("steadq: {}", cli::rawargs::shown_safe(&e.to_string()));
            e.exit().code()
        }
    };
    // Output that could not be written is not success: 8 when the command was done anyway
    // (a retry would do it twice), 2 when it changed nothing. So for fsck's 5: the list of
    // problems is what it reports, and a script that acts on 5 would act on a list it never
    // got (8 with --quarantine, which moved files). Any other code stands.
    let code = match cli::stdout::failure() {
        Some(msg) => {
            eprintln!("steadq: {msg}");
            let reported = code == Exit::Done.code() || code == Exit::Problems.code();
            match code {
                _ if reported && cli::stdout::was_done() => Exit::DoneOutputLost.code(),
                _ if reported => Exit::NotDone.code(),
                c => c,
            }
        }
        None => code,
    };
    std::process::exit(code);
}
