//! StowQ (feature `s3`): SteadQ's job lifecycle on S3-compatible object storage with
//! conditional writes.
//!
//! A job is a chain of immutable objects; each state change creates the job's next generation
//! with `If-None-Match: *`, the object-store counterpart of `renameat2(RENAME_NOREPLACE)`: of
//! all workers racing for one transition exactly one create succeeds. Payloads carry SteadQ's
//! SHA-256 envelope ([`steadq::format`]) and are verified before a worker sees them.
//!
//! Every mutating call returns `Ok` only when it is **done** (its create was answered 200, or
//! a read-back found our own nonce in place); an [`Error`] carries [`Outcome::NotDone`] or
//! [`Outcome::Indeterminate`] (the request may have been applied and nothing could settle it).
//! See `DESIGN-S3.md` at the repository's root.

mod admin;
mod batch;
mod client;
pub mod clock;
mod compact;
pub mod config;
pub mod error;
pub mod http;
pub mod keys;
mod lifecycle;
pub mod queue;
mod sigv4;

pub use client::{Client, Page};
pub use config::Config;
pub use error::{Error, ErrorKind};
pub use keys::{Record, State};
pub use queue::{
    CheckReport, CompactReport, Lease, Listed, Nacked, Options, Queue, Receipt, RecoverReport,
    RepairReport, Status, CANDIDATES_KEEP, DEFAULT_LEVEL,
};
pub use sigv4::Credentials;
use std::time::Duration;
pub use steadq::Outcome;

/// `work`'s first pause after a claim found nothing ready.
pub const IDLE_FIRST: Duration = Duration::from_millis(100);
/// `work`'s longest pause between claims on an idle queue.
pub const IDLE_MAX: Duration = Duration::from_secs(10);

/// How long an idle worker pauses after `streak` empty claims in a row (1 for the first):
/// 100 ms doubling to 10 s ([`IDLE_FIRST`], [`IDLE_MAX`]), drawn uniformly from the upper
/// half of that step so idle workers do not poll in step. A claim resets the streak. At the
/// cap a worker makes one empty claim per 7.5 s on average (480 an hour); each costs 2 to 4
/// LISTs (see `DESIGN-S3.md`, "Idle workers").
pub fn idle_pause(streak: u32) -> Duration {
    let step = IDLE_FIRST
        .saturating_mul(1u32 << streak.saturating_sub(1).min(16))
        .min(IDLE_MAX);
    let half = step / 2;
    let jitter = (queue::random_u128() % (half.as_micros().max(1))) as u64;
    half + Duration::from_micros(jitter)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_pauses_double_from_100_ms_to_10_s_with_jitter() {
        for (streak, step_ms) in [(1, 100), (2, 200), (3, 400), (7, 6_400), (8, 10_000)] {
            for _ in 0..50 {
                let p = idle_pause(streak).as_millis() as u64;
                assert!(p >= step_ms / 2 && p <= step_ms, "streak {streak}: {p} ms");
            }
        }
        assert!(idle_pause(1_000) <= IDLE_MAX);
        let draws: std::collections::BTreeSet<_> = (0..20).map(|_| idle_pause(8)).collect();
        assert!(draws.len() > 10, "jittered: {draws:?}");
    }

    #[test]
    fn s3_urls_parse() {
        assert_eq!(parse_s3_url("s3://b/p/q/"), Ok(("b".into(), "p/q".into())));
        assert_eq!(parse_s3_url("s3://b"), Ok(("b".into(), String::new())));
        assert!(parse_s3_url("s3:///p").is_err());
        assert!(parse_s3_url("/var/q").is_err());
    }
}
