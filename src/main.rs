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

mod cli;

use argh::FromArgs;
use cli::*;

/// SteadQ: a durable job queue in a directory. No daemon, no database.
#[derive(FromArgs)]
#[argh(
    example = "steadq demo",
    example = "steadq init /var/lib/jobs && echo hello | steadq enqueue /var/lib/jobs",
    example = "steadq work /var/lib/jobs --concurrency 2 -- sh -c 'cat > /tmp/job.$STEADQ_JOB_ID'",
    note = "Logging: RUST_LOG=info (or debug) on stderr. `steadq --version` prints the version.",
    error_code(2, "failed, not done: nothing changed"),
    error_code(3, "nothing to do: no job ready"),
    error_code(4, "indeterminate: the operation may have happened"),
    error_code(5, "fsck found problems"),
    error_code(6, "lease lost: the lease was recovered, renewed or settled elsewhere")
)]
struct Top {
    #[argh(subcommand)]
    cmd: Cmd,
}

#[derive(FromArgs)]
#[argh(subcommand)]
enum Cmd {
    Init(Init),
    Enqueue(Enqueue),
    Work(Work),
    Claim(Claim),
    Renew(Renew),
    Ack(Ack),
    Nack(Nack),
    Fail(Fail),
    Status(Status),
    List(List),
    Show(Show),
    Recover(Recover),
    Fsck(Fsck),
    Dead(Dead),
    Compact(Compact),
    Demo(Demo),
    Bench(Bench),
    DemoJob(DemoJob),
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // argh::from_env would print --help with println!, which panics on a closed pipe
    // (`steadq --help | head`): parse here and print through `out!`.
    let args: Vec<String> = match std::env::args_os().map(|a| a.into_string()).collect() {
        Ok(a) => a,
        Err(bad) => {
            eprintln!("steadq: argument {bad:?} is not UTF-8");
            std::process::exit(1);
        }
    };
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
                std::process::exit(2);
            }
            std::process::exit(0);
        }
        Err(argh::EarlyExit {
            output,
            status: Err(()),
        }) => {
            eprintln!("{}", output.trim_end());
            std::process::exit(1);
        }
    };
    let code = match run(top.cmd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("steadq: {e}");
            e.code()
        }
    };
    // Output that could not be written is not success (exit 2); any other code stands.
    let code = match cli::stdout::failure() {
        Some(msg) => {
            eprintln!("steadq: {msg}");
            if code == 0 {
                2
            } else {
                code
            }
        }
        None => code,
    };
    std::process::exit(code);
}

fn run(cmd: Cmd) -> Result<i32, CliError> {
    match cmd {
        Cmd::Init(a) => cmd_init(a),
        Cmd::Enqueue(a) => cmd_enqueue(a),
        Cmd::Work(a) => work::cmd_work(a),
        Cmd::Claim(a) => cmd_claim(a),
        Cmd::Renew(a) => cmd_renew(a),
        Cmd::Ack(a) => cmd_ack(a),
        Cmd::Nack(a) => cmd_nack(a),
        Cmd::Fail(a) => cmd_fail(a),
        Cmd::Status(a) => cmd_status(a),
        Cmd::List(a) => cmd_list(a),
        Cmd::Show(a) => cmd_show(a),
        Cmd::Recover(a) => cmd_recover(a),
        Cmd::Fsck(a) => cmd_fsck(a),
        Cmd::Dead(a) => cmd_dead(a),
        Cmd::Compact(a) => cmd_compact(a),
        Cmd::Demo(a) => demo::cmd_demo(a),
        Cmd::Bench(a) => bench::cmd_bench(a),
        Cmd::DemoJob(a) => demo::cmd_demo_job(a),
    }
}
