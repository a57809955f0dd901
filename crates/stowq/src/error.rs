//! Errors: what went wrong, and the outcome (not done or indeterminate).

use steadq::format::Corruption;
use steadq::Outcome;

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No response: connection refused, lost or timed out (the message says which).
    Transport(String),
    /// The service answered with an unexpected status.
    Status {
        /// HTTP status.
        status: u16,
        /// Which request.
        what: String,
    },
    /// The lease's next generation was created by someone else (it expired and was recovered,
    /// or was acked already): the operation cannot happen.
    LeaseLost,
    /// No such job, or not in the state the operation needs.
    NotFound,
    /// The prefix holds no queue, or something else.
    NotAQueue(String),
    /// A stored object failed verification.
    Corrupt(Corruption),
    /// The claim was done but the payload could not be read afterwards; the lease will expire
    /// and be recovered.
    PayloadUnavailable(String),
    /// Bad configuration or arguments.
    Config(String),
    /// The bucket could not be created ([`crate::Client::create_bucket`]).
    Bucket {
        /// Its name.
        bucket: String,
        /// Why: no connection, no answer, or the service's status and error code.
        why: String,
    },
}

/// A failed call: what happened and whether it may have taken effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Not done, or indeterminate.
    pub outcome: Outcome,
    /// What went wrong.
    pub kind: ErrorKind,
}

impl Error {
    /// A not-done error.
    pub fn not_done(kind: ErrorKind) -> Error {
        Error {
            outcome: Outcome::NotDone,
            kind,
        }
    }

    /// An indeterminate error.
    pub fn indeterminate(kind: ErrorKind) -> Error {
        Error {
            outcome: Outcome::Indeterminate,
            kind,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = match self.outcome {
            Outcome::NotDone => "not done",
            Outcome::Indeterminate => "indeterminate",
        };
        match &self.kind {
            ErrorKind::Transport(m) => write!(f, "{o}: no response: {m}"),
            ErrorKind::Status { status, what } => write!(f, "{o}: {what}: HTTP {status}"),
            ErrorKind::LeaseLost => {
                write!(f, "{o}: lease lost (expired and recovered, or finished)")
            }
            ErrorKind::NotFound => write!(f, "{o}: no such job in that state"),
            ErrorKind::NotAQueue(m) => write!(f, "{o}: not a stowq queue: {m}"),
            ErrorKind::Corrupt(c) => write!(f, "{o}: corrupt: {c}"),
            ErrorKind::PayloadUnavailable(m) => {
                write!(f, "{o}: claimed, but the payload could not be read: {m}")
            }
            ErrorKind::Config(m) => write!(f, "{o}: {m}"),
            ErrorKind::Bucket { bucket, why } => write!(f, "create bucket {bucket}: {o}: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
