//! StowQ: SteadQ's job lifecycle on S3-compatible object storage with conditional writes.
//!
//! A job is a chain of immutable objects; each state change creates the job's next generation
//! with `If-None-Match: *`, the object-store counterpart of `renameat2(RENAME_NOREPLACE)`: of
//! all workers racing for one transition exactly one create succeeds. Payloads carry SteadQ's
//! SHA-256 envelope ([`steadq::format`]) and are verified before a worker sees them.
//!
//! Every mutating call returns `Ok` only when it is **done** (its create was answered 200, or
//! a read-back found our own nonce in place); an [`Error`] carries [`Outcome::NotDone`] or
//! [`Outcome::Indeterminate`] (the request may have been applied and nothing could settle it).
//! See `DESIGN.md` beside this crate.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admin;
pub mod clock;
pub mod config;
pub mod error;
pub mod http;
pub mod keys;
mod lifecycle;
pub mod queue;
pub mod s3;
pub mod sigv4;

pub use config::Config;
pub use error::{Error, ErrorKind};
pub use keys::State;
pub use queue::{
    Lease, Listed, Nacked, Options, Queue, Receipt, RecoverReport, RepairReport, Status,
};
pub use steadq::Outcome;

/// Split `s3://bucket/prefix` into bucket and prefix (prefix may be empty).
///
/// # Errors
/// A message if `url` is not `s3://bucket[/prefix]`.
pub fn parse_s3_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{url:?}: expected s3://bucket/prefix"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("{url:?}: no bucket"));
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}
