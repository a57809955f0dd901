//! The power-cut controller's relay, driven one command per stdin line, for
//! `crashlab/relay-sim.sh`: that script runs it in the crash lab's guest against the kernel's
//! simulated GPIO chip (`gpio-sim`) and reads the line's value after each command.
//!
//! Commands: `on`, `cut` (the relay's `power`), `error` (end as the controller ends on an
//! error: `exit(2)`, no destructor runs), `quit` (a normal end: the relay is dropped). After
//! each command it prints `relaycheck: <command> done`. Ctrl-C and SIGKILL come from the
//! script. Exit 2 on a relay error, naming it.

use argh::FromArgs;
use crashlab::relay::{board_gpio, Relay};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::exit;

#[derive(FromArgs)]
/// Drive the power relay of a board file, one command per stdin line.
struct Args {
    /// board file with gpio_chip and gpio_line (boards/*.toml)
    #[argh(option)]
    board: PathBuf,
    /// line level that cuts the power (default 1: the relay's normally-closed contact)
    #[argh(option, default = "1")]
    cut_level: u8,
}

fn die(e: impl std::fmt::Display) -> ! {
    eprintln!("relaycheck: ERROR: {e}");
    exit(2)
}

fn main() {
    // A background job of a non-interactive shell starts with SIGINT and SIGQUIT ignored
    // (POSIX, "Shell Command Language" 2.11), and gpioset v2 keeps an ignored SIGINT: the
    // Ctrl-C check needs what a terminal's foreground job has, the defaults.
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: signal(2) with SIG_DFL installs no handler; the process is single-threaded
        // here, before the relay spawns anything.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    let a: Args = argh::from_env();
    let text = std::fs::read_to_string(&a.board)
        .unwrap_or_else(|e| die(format!("{}: {e}", a.board.display())));
    let gpio = board_gpio(&text).unwrap_or_else(|e| die(format!("{}: {e}", a.board.display())));
    let mut relay = Relay::new(gpio, a.cut_level).unwrap_or_else(|e| die(e));
    println!("relaycheck: new done");
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap_or_else(|e| die(format!("stdin: {e}")));
        match line.trim() {
            "on" => relay.power(true).unwrap_or_else(|e| die(e)),
            "cut" => relay.power(false).unwrap_or_else(|e| die(e)),
            "error" => die("the error a controller meets mid-run (exit without a destructor)"),
            "quit" => break,
            other => die(format!("unknown command {other:?}")),
        }
        println!("relaycheck: {} done", line.trim());
    }
    drop(relay);
    println!("relaycheck: quit done");
}
