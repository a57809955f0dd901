//! The power relay on the controller, through the GPIO character device with libgpiod's
//! `gpioset` (v1 and v2 take different arguments; the installed one is detected). The chip and
//! line come from the device's board file in `boards/` (`gpio_chip`, `gpio_line`).
//!
//! A `gpioset` that holds a line keeps running: v1 with `--mode=signal`, v2 by default. Each
//! change of level replaces that process. The holder dies with the controller
//! (`PR_SET_PDEATHSIG`, `prctl(2)`), so a controller that exits without dropping its
//! [`Relay`] (an error through `exit`, a panic, SIGKILL, Ctrl-C) releases the line, and a
//! released line falls back to its bias: on a Raspberry Pi GPIO 17 is pulled down, so with
//! the relay wired through its normally-closed contact (cut level 1) the device is powered.
//! A dropped [`Relay`] (a normal exit) drives the line to "power on" with a holder that
//! outlives the controller; `powercut.sh` restores power again from its EXIT/INT/TERM trap.
//! `crashlab/relay-sim.sh` checks all of this against the kernel's simulated GPIO chip.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The GPIO fields of a board file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoardGpio {
    pub name: String,
    pub chip: String,
    pub line: u32,
}

/// Read `name`, `gpio_chip` and `gpio_line` from a board file (flat `key = value` TOML).
pub fn board_gpio(toml: &str) -> Result<BoardGpio, String> {
    let get = |key: &str| {
        toml.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
        })
    };
    let chip = get("gpio_chip").ok_or("the board file has no gpio_chip")?;
    let line = get("gpio_line")
        .ok_or("the board file has no gpio_line")?
        .parse()
        .map_err(|e| format!("gpio_line: {e}"))?;
    Ok(BoardGpio {
        name: get("name").unwrap_or_default(),
        chip,
        line,
    })
}

/// Which `gpioset` is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gpioset {
    V1,
    V2,
}

/// From `gpioset --version`: "gpioset (libgpiod) v1.6.3" or "gpioset (libgpiod) v2.1".
pub fn detect(version_output: &str) -> Option<Gpioset> {
    let v = version_output.split_whitespace().find_map(|w| {
        w.strip_prefix('v')
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    })?;
    match v.split('.').next()? {
        "1" => Some(Gpioset::V1),
        "2" => Some(Gpioset::V2),
        _ => None,
    }
}

/// The arguments that drive `chip` `line` to `value` and hold it until signalled.
pub fn args(v: Gpioset, chip: &str, line: u32, value: u8) -> Vec<String> {
    let set = format!("{line}={value}");
    match v {
        Gpioset::V1 => vec!["--mode=signal".into(), chip.into(), set],
        Gpioset::V2 => vec!["--chip".into(), chip.into(), set],
    }
}

/// A relay on one GPIO line. `cut_level` is the line level that cuts the device's power
/// (1 for the usual wiring through the relay's normally-closed contact, so that a released
/// line, a dead controller or a reboot leaves the device powered).
pub struct Relay {
    v: Gpioset,
    gpio: BoardGpio,
    cut_level: u8,
    holder: Option<Child>,
}

impl Relay {
    /// Detect the installed `gpioset` and switch the power on.
    pub fn new(gpio: BoardGpio, cut_level: u8) -> Result<Relay, String> {
        let out = Command::new("gpioset")
            .arg("--version")
            .output()
            .map_err(|e| format!("gpioset (libgpiod tools) not found: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v = detect(&text).ok_or(format!("unknown gpioset version: {text:?}"))?;
        let mut r = Relay {
            v,
            gpio,
            cut_level,
            holder: None,
        };
        r.power(true)?;
        Ok(r)
    }

    /// Drive the line to power on (`true`) or off, and hold it there while this process
    /// lives.
    pub fn power(&mut self, on: bool) -> Result<(), String> {
        self.hold(on, false)
    }

    /// Drive the line and hold it with a `gpioset` that dies with this process's thread
    /// (`outlive` false) or outlives it.
    fn hold(&mut self, on: bool, outlive: bool) -> Result<(), String> {
        self.release();
        let level = if on {
            1 - self.cut_level
        } else {
            self.cut_level
        };
        let mut cmd = Command::new("gpioset");
        cmd.args(args(self.v, &self.gpio.chip, self.gpio.line, level))
            .stdin(Stdio::null());
        if !outlive {
            // SAFETY: the closure runs in the child between fork and exec and only makes the
            // prctl(2) system call: async-signal-safe, no allocation, no lock.
            unsafe {
                cmd.pre_exec(|| {
                    rustix::process::set_parent_process_death_signal(Some(
                        rustix::process::Signal::TERM,
                    ))
                    .map_err(std::io::Error::from)
                });
            }
        }
        let mut c = cmd.spawn().map_err(|e| format!("gpioset: {e}"))?;
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(Some(st)) = c.try_wait() {
            return Err(format!(
                "gpioset {} line {} = {level} exited: {st}",
                self.gpio.chip, self.gpio.line
            ));
        }
        self.holder = Some(c);
        Ok(())
    }

    fn release(&mut self) {
        if let Some(mut c) = self.holder.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Err(e) = self.hold(true, true) {
            eprintln!("powercut: RESTORE POWER BY HAND: {e}");
        }
        // Leave the holder running: the line stays at "power on" until powercut.sh's trap.
        if let Some(c) = self.holder.take() {
            std::mem::forget(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_both_gpioset_versions() {
        let v1 = "gpioset (libgpiod) v1.6.3\nCopyright (C) 2017-2018 Bartosz Golaszewski\n";
        let v2 = "gpioset (libgpiod) v2.1\nCopyright (C) 2017-2023 Bartosz Golaszewski\n";
        assert_eq!(detect(v1), Some(Gpioset::V1));
        assert_eq!(detect(v2), Some(Gpioset::V2));
        assert_eq!(detect("gpioset (libgpiod) v3.0"), None);
        assert_eq!(detect("command not found"), None);
    }

    #[test]
    fn v1_and_v2_command_lines() {
        assert_eq!(
            args(Gpioset::V1, "gpiochip0", 17, 1),
            ["--mode=signal", "gpiochip0", "17=1"]
        );
        assert_eq!(
            args(Gpioset::V2, "gpiochip4", 17, 0),
            ["--chip", "gpiochip4", "17=0"]
        );
    }

    #[test]
    fn reads_the_gpio_fields_of_every_board_file() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../boards");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if !name.starts_with("pi-") {
                continue;
            }
            let g = board_gpio(&std::fs::read_to_string(&p).unwrap()).unwrap();
            assert_eq!((g.chip.as_str(), g.line), ("gpiochip0", 17), "{name}");
            assert!(g.name.starts_with("Raspberry Pi"), "{name}: {}", g.name);
            n += 1;
        }
        assert_eq!(n, 5);
        assert!(board_gpio("name = \"x\"\n").is_err());
    }
}
