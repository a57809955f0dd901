//! `steadq completions bash|zsh|fish`: the shell completion script, made by `argh_complete`
//! from argh's description of the arguments (`ArgsInfo`), so it follows every subcommand and
//! option as they are defined in `args.rs`.

use super::args::{Completions, Shell, Top};
use super::exit::Exit;
use super::CliError;
use argh::ArgsInfo;
use argh_complete::Generator;

/// Print the script for `a.shell` on stdout. Never touches a queue.
pub fn cmd_completions(a: Completions) -> Result<Exit, CliError> {
    let info = Top::get_args_info();
    let script = match a.shell {
        Shell::Bash => argh_complete::bash::Bash::generate("steadq", &info),
        Shell::Zsh => argh_complete::zsh::Zsh::generate("steadq", &info),
        // `commandline -x` came with fish 3.7; Debian 12 and Raspberry Pi OS ship fish 3.6,
        // which refuses it on every completion. `-o` (tokenize) answers the same question
        // here (which subcommand the words name) on both (fish's `commandline` man page).
        Shell::Fish => argh_complete::fish::Fish::generate("steadq", &info)
            .replace("commandline -xpc", "commandline -opc"),
    };
    out!("{}", script.trim_end());
    Ok(Exit::Done)
}
