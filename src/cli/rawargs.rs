//! Arguments that are not UTF-8 (a Latin-1 file name, say). argh parses `&str`, so each such
//! argument is handed to it as a placeholder, and the original bytes are put back into the
//! paths and the `work` command before they are used. The library takes any path.

use super::args::{Cmd, DeadAction};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The arguments that were not UTF-8, by index into this table.
static RAW: OnceLock<Vec<OsString>> = OnceLock::new();
/// Placeholder prefix: a private-use character no one types, then the table index.
const MARK: &str = "\u{10FFFD}steadq-raw-arg-";

/// `args` as strings for argh: UTF-8 ones as they are, the others as placeholders (remembered
/// for [`os`] and [`restore`]). Call once, before parsing.
pub fn placeholders(args: impl IntoIterator<Item = OsString>) -> Vec<String> {
    let mut raw = Vec::new();
    let out = args
        .into_iter()
        .map(|a| {
            a.into_string().unwrap_or_else(|bad| {
                raw.push(bad);
                format!("{MARK}{}", raw.len() - 1)
            })
        })
        .collect();
    let _ = RAW.set(raw);
    out
}

/// The argument `s` stands for: the original bytes of a placeholder, else `s` itself.
pub fn os(s: &str) -> OsString {
    s.strip_prefix(MARK)
        .and_then(|i| i.parse::<usize>().ok())
        .and_then(|i| RAW.get()?.get(i).cloned())
        .unwrap_or_else(|| s.into())
}

/// `msg` with every placeholder in it (as is, or as `{:?}` writes it: `\u{10fffd}...`)
/// replaced by the argument it stands for, its bytes that are not UTF-8 escaped (`caf\xE9`):
/// a refused argument is shown as it was typed (`ack Q $'\xff'` names `\xff`), never as the
/// placeholder (`"\u{10fffd}steadq-raw-arg-0"`).
pub fn shown(msg: &str) -> String {
    let Some(raw) = RAW.get().filter(|r| !r.is_empty()) else {
        return msg.to_string();
    };
    let escaped = format!("{MARK:?}");
    let escaped = escaped.trim_matches('"');
    let mut out = msg.to_string();
    // The highest index first: `...-1` must not take the front of `...-10`.
    for (i, arg) in raw.iter().enumerate().rev() {
        let text = format!("{arg:?}");
        let text = text.trim_matches('"');
        for mark in [MARK, escaped] {
            out = out.replace(&format!("{mark}{i}"), text);
        }
    }
    out
}

/// [`shown`], then every control character but a newline or a tab as `\xNN` (each byte of
/// it): an argument typed with ESC or BEL in it (`--group $'a\e]0;pwn\a'`) is named in an
/// error without driving the reader's terminal.
pub fn shown_safe(msg: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(msg.len());
    for c in shown(msg).chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            let mut b = [0u8; 4];
            for b in c.encode_utf8(&mut b).bytes() {
                out.push_str("\\x");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 15)]));
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn path(p: &mut PathBuf) {
    if let Some(s) = p.to_str().filter(|s| s.starts_with(MARK)) {
        *p = PathBuf::from(os(s));
    }
}

/// Put the original bytes back into every path argument of `cmd`. (`work`'s command is
/// restored where it is run, through [`os`].)
pub fn restore(cmd: &mut Cmd) {
    match cmd {
        Cmd::Init(a) => path(&mut a.dir),
        Cmd::Config(a) => path(&mut a.dir),
        Cmd::Limit(a) => path(&mut a.dir),
        Cmd::Enqueue(a) => {
            path(&mut a.dir);
            a.file.iter_mut().for_each(path);
        }
        Cmd::Work(a) => path(&mut a.dir),
        Cmd::Claim(a) => {
            path(&mut a.dir);
            a.payload_out.iter_mut().for_each(path);
        }
        Cmd::Renew(a) => path(&mut a.dir),
        Cmd::Ack(a) => path(&mut a.dir),
        Cmd::Nack(a) => path(&mut a.dir),
        Cmd::Fail(a) => path(&mut a.dir),
        Cmd::Status(a) => path(&mut a.dir),
        #[cfg(not(feature = "appliance"))]
        Cmd::Top(a) => path(&mut a.dir),
        Cmd::List(a) => path(&mut a.dir),
        #[cfg(not(feature = "appliance"))]
        Cmd::Show(a) => path(&mut a.dir),
        Cmd::Recover(a) => path(&mut a.dir),
        Cmd::Fsck(a) => path(&mut a.dir),
        Cmd::Dead(a) => match &mut a.action {
            DeadAction::List(a) => path(&mut a.dir),
            DeadAction::Requeue(a) => path(&mut a.dir),
            DeadAction::Purge(a) => path(&mut a.dir),
        },
        Cmd::Compact(a) => path(&mut a.dir),
        Cmd::Wait(a) => path(&mut a.dir),
        #[cfg(not(feature = "appliance"))]
        Cmd::Demo(a) => a.dir.iter_mut().for_each(path),
        #[cfg(not(feature = "appliance"))]
        Cmd::Bench(a) => a.dir.iter_mut().for_each(path),
        #[cfg(not(feature = "appliance"))]
        Cmd::Completions(_) => {}
        #[cfg(not(feature = "appliance"))]
        Cmd::DemoJob(a) => path(&mut a.results),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn placeholders_round_trip() {
        let latin1 = OsString::from_vec(b"caf\xe9".to_vec());
        let s = placeholders([OsString::from("init"), latin1.clone()]);
        assert_eq!(s[0], "init");
        assert!(s[1].starts_with(MARK));
        assert_eq!(os(&s[1]), latin1);
        assert_eq!(os("plain"), OsString::from("plain"));
        let mut p = PathBuf::from(&s[1]);
        path(&mut p);
        assert_eq!(p.into_os_string(), latin1);
    }
}
