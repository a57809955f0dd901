//! Command lines of the crashlab binaries: argh, with the exit status for a usage error chosen
//! by the binary (argh's own `from_env` exits 1, which `replay` and the verifiers reserve for
//! "violation"), and `--flag=value` accepted as well as `--flag value`.

use argh::{EarlyExit, TopLevelCommand};

/// Exit status of a command-line error, for every crashlab binary.
pub const USAGE: i32 = 2;

/// Splits `--name=value` into `--name`, `value` (argh takes only the second form). A value that
/// itself looks like `--name=...` cannot be given inline; none of the crashlab flags takes one.
pub fn split_inline(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len() + 1);
    for a in args {
        match a.split_once('=') {
            Some((k, v)) if is_flag(k) => {
                out.push(k.to_string());
                out.push(v.to_string());
            }
            _ => out.push(a.clone()),
        }
    }
    out
}

fn is_flag(s: &str) -> bool {
    s.strip_prefix("--")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'))
}

/// Parses `args` (without the program name) as `T`: `--help` prints and gives `Err(0)`, a
/// usage error prints and gives `Err(USAGE)`.
pub fn parse<T: TopLevelCommand>(cmd: &str, args: &[String]) -> Result<T, i32> {
    let args = split_inline(args);
    let strs: Vec<&str> = args.iter().map(String::as_str).collect();
    T::from_args(&[cmd], &strs).map_err(|EarlyExit { output, status }| match status {
        Ok(()) => {
            println!("{}", output.trim_end());
            0
        }
        Err(()) => {
            eprintln!(
                "{}\nRun {cmd} --help for more information.",
                output.trim_end()
            );
            USAGE
        }
    })
}

/// [`parse`] of this process's arguments; exits on `--help` (0) or a usage error ([`USAGE`]).
pub fn from_env<T: TopLevelCommand>() -> T {
    let args: Vec<String> = std::env::args().collect();
    let cmd = args
        .first()
        .and_then(|p| std::path::Path::new(p).file_name())
        .map_or("crashlab".into(), |n| n.to_string_lossy().into_owned());
    parse(&cmd, args.get(1..).unwrap_or_default()).unwrap_or_else(|code| std::process::exit(code))
}

/// A size for argh's `from_str_fn`: `1234`, `0x400`, `448M`, `4K`, `1G` (binary units).
pub fn size(s: &str) -> Result<u64, String> {
    crate::marks::parse_size(s).ok_or_else(|| format!("not a size or number: {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn inline_values_are_split() {
        assert_eq!(
            split_inline(&s(&[
                "--markbase=32K",
                "--check",
                "a --b=c",
                "--mount-opts",
                "a=b"
            ])),
            s(&[
                "--markbase",
                "32K",
                "--check",
                "a --b=c",
                "--mount-opts",
                "a=b"
            ])
        );
        assert_eq!(split_inline(&s(&["pos=1", "-v"])), s(&["pos=1", "-v"]));
    }

    #[test]
    fn sizes() {
        assert_eq!(size("448M"), Ok(448 << 20));
        assert!(size("x").is_err());
    }
}
