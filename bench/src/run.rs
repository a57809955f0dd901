//! What every system's run reports, and running N workers for a duration.

use std::time::{Duration, Instant};

/// One run of one system: jobs done, seconds, per-lifecycle latencies (ns, sorted), the
/// journal commits the filesystem made meanwhile (ext3/ext4 only) and what its block
/// device did (see `journal.rs`).
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub jobs: usize,
    pub secs: f64,
    pub lat: Vec<u64>,
    pub commits: Option<u64>,
    /// The block device's flushes and sectors written meanwhile (see `journal.rs`).
    pub device: Option<crate::journal::Device>,
}

impl Run {
    pub fn rate(&self) -> f64 {
        self.jobs as f64 / self.secs.max(1e-9)
    }
    /// Journal commits per job, when they were counted.
    pub fn commits_per_job(&self) -> Option<f64> {
        self.commits.map(|c| c as f64 / self.jobs.max(1) as f64)
    }
    /// Device cache flushes per job, when they were counted.
    pub fn flushes_per_job(&self) -> Option<f64> {
        self.device
            .map(|d| d.flushes as f64 / self.jobs.max(1) as f64)
    }
    /// KiB written to the device per job, when they were counted.
    pub fn kib_per_job(&self) -> Option<f64> {
        self.device
            .map(|d| d.sectors as f64 / 2.0 / self.jobs.max(1) as f64)
    }
    /// Quantile `q` (0..=1) of the latencies, µs.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.lat.is_empty() {
            return 0.0;
        }
        self.lat[((self.lat.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0
    }
}

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Run `workers` threads for `d`; each gets its index and calls `step` until the time is up.
/// `step` does `n` lifecycles and returns `n`; each job of a step counts the step's latency.
pub fn timed<S>(workers: usize, d: Duration, make: impl Fn(usize) -> Res<S> + Sync) -> Res<Run>
where
    S: FnMut() -> Res<usize>,
{
    let t = Instant::now();
    let until = t + d;
    let parts = std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers)
            .map(|i| {
                let make = &make;
                s.spawn(move || -> Res<(usize, Vec<u64>)> {
                    let mut step = make(i)?;
                    let (mut jobs, mut lat) = (0usize, Vec::new());
                    while Instant::now() < until {
                        let t0 = Instant::now();
                        let n = step()?;
                        let ns = t0.elapsed().as_nanos() as u64;
                        jobs += n;
                        lat.extend(std::iter::repeat_n(ns, n));
                    }
                    Ok((jobs, lat))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().map_err(|_| "worker panicked")?)
            .collect::<Res<Vec<_>>>()
    })?;
    let mut r = Run {
        secs: t.elapsed().as_secs_f64(),
        ..Run::default()
    };
    for (j, l) in parts {
        r.jobs += j;
        r.lat.extend(l);
    }
    r.lat.sort_unstable();
    Ok(r)
}
