//! Time on the service's clock. Leases and delays are measured against the storage service's
//! `Date` header, so workers need no synchronized clocks: each client keeps the offset between
//! its own clock and the service's, from the latest response.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Local wall time, unix ms.
pub fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Parse an HTTP date (`Tue, 01 Dec 2026 04:07:25 GMT`) to unix ms; `None` if malformed.
pub fn parse_http_date(s: &str) -> Option<i64> {
    let mut it = s.split_whitespace().skip(1);
    let d: i64 = it.next()?.parse().ok()?;
    let mon = it.next()?;
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let m = months.iter().position(|x| *x == mon)? as i64 + 1;
    let y: i64 = it.next()?.parse().ok()?;
    let mut hms = it.next()?.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, se) = (hms.next()??, hms.next()??, hms.next()??);
    Some(((days_from_civil(y, m, d) * 24 + h) * 60 + mi) * 60_000 + se * 1000)
}

/// Format unix ms as SigV4's `YYYYMMDDTHHMMSSZ`.
pub fn amz_date(ms: i64) -> String {
    let s = ms.div_euclid(1000);
    let (y, m, d) = civil_from_days(s.div_euclid(86_400));
    let t = s.rem_euclid(86_400);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        t / 3600,
        (t / 60) % 60,
        t % 60
    )
}

/// The offset between the service's clock and a monotonic local clock, learned from `Date`
/// headers.
///
/// `Date` has one-second resolution and is written before the response travels, so each
/// sample gives a lower bound of the service's time (`date` at the moment of receipt). The
/// offset kept is the largest lower bound seen. The local side is `Instant`, so a jump of this
/// machine's wall clock changes nothing; only the two clocks' rates must agree (drift of a few
/// ppm is lost in the one-second resolution).
#[derive(Debug)]
pub struct ServiceClock {
    anchor: Instant,
    offset_ms: AtomicI64,
    seen: AtomicBool,
}

impl Default for ServiceClock {
    fn default() -> Self {
        ServiceClock {
            anchor: Instant::now(),
            offset_ms: AtomicI64::new(0),
            seen: AtomicBool::new(false),
        }
    }
}

impl ServiceClock {
    fn mono_ms(&self) -> i64 {
        self.anchor.elapsed().as_millis() as i64
    }

    /// Record a `Date` header just received.
    pub fn observe(&self, date: &str) {
        if let Some(t) = parse_http_date(date) {
            let lower = t - self.mono_ms();
            if !self.seen.swap(true, Ordering::Relaxed) {
                self.offset_ms.store(lower, Ordering::Relaxed);
            } else {
                self.offset_ms.fetch_max(lower, Ordering::Relaxed);
            }
        }
    }

    /// Whether a `Date` header has been seen.
    pub fn known(&self) -> bool {
        self.seen.load(Ordering::Relaxed)
    }

    /// The service's time now, unix ms: a lower bound, at most about 1 s plus one response's
    /// transit behind. Before any `Date` was seen, this machine's wall clock.
    pub fn now_ms(&self) -> i64 {
        if !self.known() {
            return local_ms();
        }
        self.mono_ms() + self.offset_ms.load(Ordering::Relaxed)
    }
}

impl ServiceClock {
    /// An upper bound of the service's time now, unix ms: [`ServiceClock::now_ms`] plus the
    /// `Date` resolution (1 s). A ready job is due when it may be due by this bound.
    pub fn upper_ms(&self) -> i64 {
        self.now_ms() + 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        let ms = parse_http_date("Tue, 01 Dec 2026 04:07:25 GMT").unwrap();
        assert_eq!(ms, 1_796_098_045_000);
        assert_eq!(amz_date(ms), "20261201T040725Z");
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert!(parse_http_date("garbage").is_none());
        let c = ServiceClock::default();
        c.observe("Tue, 01 Dec 2026 04:07:25 GMT");
        assert!((c.now_ms() - ms).abs() < 50);
        c.observe("Tue, 01 Dec 2026 04:07:20 GMT");
        assert!(
            (c.now_ms() - ms).abs() < 50,
            "an older date does not move the clock back"
        );
    }
}
