//! The exit-code table: one enum that `--help` (argh's `error_code` lines), the conversion
//! from library errors and docs/cli.md's table all follow. A test checks the three agree.

use steadq::Error;

/// How a `steadq` command ended, as its process exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: done (past its linearization point and every durability barrier).
    Done = 0,
    /// 1: bad usage: the command line was refused (by argh, or a check of its own values
    /// such as options that exclude each other) before anything was read or changed.
    Usage = 1,
    /// 2: failed, not done: nothing changed.
    NotDone = 2,
    /// 3: nothing to do: no job ready.
    NoJob = 3,
    /// 4: indeterminate: the operation may have happened.
    Indeterminate = 4,
    /// 5: fsck found problems.
    Problems = 5,
    /// 6: lease lost: recovered, renewed or settled elsewhere, or its job file changed and
    /// was moved to `dead/` as corrupt.
    LeaseLost = 6,
    /// 7: queue full: at its capacity limit (`steadq.limits`); not done.
    Full = 7,
    /// 8: done, but its output (a job id, a lease handle, a receipt name) could not be
    /// written to stdout; stderr says what was done. Never retry on it blindly: it happened.
    DoneOutputLost = 8,
}

impl Exit {
    /// Every exit code, in order.
    #[cfg(test)]
    pub const ALL: [Exit; 9] = [
        Exit::Done,
        Exit::Usage,
        Exit::NotDone,
        Exit::NoJob,
        Exit::Indeterminate,
        Exit::Problems,
        Exit::LeaseLost,
        Exit::Full,
        Exit::DoneOutputLost,
    ];

    /// The process exit code.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// What the code means, as `--help` and docs/cli.md say it.
    #[cfg(test)]
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Done => "done",
            Exit::Usage => "bad usage",
            Exit::NotDone => "failed, not done: nothing changed",
            Exit::NoJob => "nothing to do: no job ready",
            Exit::Indeterminate => "indeterminate: the operation may have happened",
            Exit::Problems => "fsck found problems",
            Exit::LeaseLost => {
                "lease lost: the lease was recovered, renewed or settled elsewhere, or its job file changed and was moved to dead/ as corrupt"
            }
            Exit::Full => "queue full: at its capacity limit, not done",
            Exit::DoneOutputLost => "done, but its output could not be written (see stderr)",
        }
    }

    /// The exit code a library failure maps to: lease lost 6, queue full 7, indeterminate 4,
    /// else 2 (the outcome is the variant; a read-only call's error is not done).
    pub fn of(e: &Error) -> Exit {
        match e {
            Error::Indeterminate(_) => Exit::Indeterminate,
            Error::NotDone(e) if matches!(e.kind(), steadq::ErrorKind::QueueFull { .. }) => {
                Exit::Full
            }
            Error::NotDone(e) if e.is_lease_lost() => Exit::LeaseLost,
            // A settle or renew that found the leased file changed moved it to dead/ as
            // corrupt: the handle holds no lease any more, as after a lost lease.
            Error::NotDone(e)
                if matches!(e.kind(), steadq::ErrorKind::Corrupt(_)) && e.into_dir().is_some() =>
            {
                Exit::LeaseLost
            }
            Error::NotDone(_) => Exit::NotDone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::Top;
    use argh::FromArgs;
    use steadq::{Cause, Error, ErrorKind};

    #[test]
    fn exit_codes_follow_the_outcome_type() {
        let e = |k| Cause::new(k, None);
        let full = ErrorKind::QueueFull {
            jobs: 1,
            bytes: 0,
            max_jobs: Some(1),
            max_bytes: None,
            adding_jobs: 1,
            adding_bytes: 129,
        };
        for (f, want) in [
            (Error::NotDone(e(ErrorKind::NoSuchJob)), Exit::NotDone),
            (Error::NotDone(e(ErrorKind::LeaseLost)), Exit::LeaseLost),
            (Error::NotDone(e(full)), Exit::Full),
            (
                Error::Indeterminate(e(ErrorKind::NoSuchJob)),
                Exit::Indeterminate,
            ),
        ] {
            assert_eq!(Exit::of(&f), want, "{f}");
        }
        // The indeterminate note follows the variant, even for an error built outside.
        let f = Error::Indeterminate(e(ErrorKind::NoSuchJob));
        assert!(f.to_string().contains("indeterminate"), "{f}");
        assert!(!f.into_cause().to_string().contains("indeterminate"));
    }

    #[test]
    fn help_and_cli_reference_follow_the_table() {
        let help = Top::from_args(&["steadq"], &["--help"])
            .err()
            .unwrap()
            .output;
        let reference = include_str!("../../docs/cli.md");
        for e in Exit::ALL {
            let row = format!("| {} | {} |", e.code(), e.meaning());
            assert!(
                reference.contains(&row),
                "docs/cli.md lacks the row {row:?}"
            );
            // argh lists the error codes (2 and up) with their meaning.
            if e.code() >= 2 {
                let line = help
                    .lines()
                    .find(|l| l.trim_start().starts_with(&format!("{} ", e.code())))
                    .unwrap_or_else(|| panic!("--help lacks exit code {}", e.code()));
                assert!(line.ends_with(e.meaning()), "{line:?} vs {:?}", e.meaning());
            }
        }
    }
}
