//! Time on the service's clock. Leases and delays are measured against the storage service's
//! `Date` header, so workers need no synchronized clocks: each client keeps the offset between
//! its own clock and the service's, from the latest response.

use std::sync::Mutex;
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

/// How far one `Date` may disagree with what is already known of the service's clock and
/// still be taken on its own, ms; also how close two samples must be to confirm each other.
/// Genuine samples move the offset by about a second (the header's resolution, plus a slow
/// response's transit); a clock that stepped, a proxy that rewrites `Date` or a cached answer
/// disagrees by minutes, hours or days.
pub const SKEW_TOLERANCE_MS: i64 = 5_000;

/// The offset between the service's clock and a monotonic local clock, learned from `Date`
/// headers.
///
/// `Date` has one-second resolution and is written before the response travels, so each
/// sample gives a lower bound of the service's time (`date` at the moment of receipt). The
/// offset kept is the largest lower bound seen. The local side is `Instant`, so a jump of this
/// machine's wall clock changes nothing; only the two clocks' rates must agree (drift of a few
/// ppm is lost in the one-second resolution).
///
/// One bogus `Date` (a proxy's, a cache's, a server's clock wrong for one answer) must not move
/// this clock: a day ahead made every live lease look expired to this handle, so `recover`
/// and `claim` delivered their jobs a second time, and its own leases ran a day long; a day
/// behind (as the first sample) made its leases expired at birth and no job look due. So:
/// - the offset is established by a sample that agrees with this machine's wall clock within
///   [`SKEW_TOLERANCE_MS`] (the common case: one answer, as before), or else by two
///   consecutive samples that agree with each other (a wall clock that is wrong); until then [`ServiceClock::now_ms`] is this machine's wall clock,
///   as before any `Date` was seen (a queue handle does not get that far: opening the queue
///   asks again until two agree, or refuses);
/// - once established, a sample at most [`SKEW_TOLERANCE_MS`] ahead of it raises it (the
///   largest lower bound); a sample further ahead is held back and taken only when the next
///   sample confirms it (a clock that really stepped forward, seen twice in a row); an
///   unconfirmed one is dropped with a warning;
/// - a sample behind it never lowers it (it is a lower bound: a slow answer is behind by
///   its transit). Lowering it would shorten this handle's leases as other workers see them.
///
/// What this cannot tell from a genuine clock is a wrong `Date` on two consecutive answers
/// that agree with each other (a proxy that rewrites every answer): that is the service's
/// clock as this handle sees it.
#[derive(Debug)]
pub struct ServiceClock {
    anchor: Instant,
    state: Mutex<Offset>,
}

/// What [`ServiceClock`] knows: the established offset (service ms minus monotonic ms), and
/// a sample waiting for a second one to confirm it.
#[derive(Debug, Default)]
struct Offset {
    established: Option<i64>,
    pending: Option<i64>,
    /// Samples dropped as implausible (none confirmed them).
    dropped: u64,
}

impl Default for ServiceClock {
    fn default() -> Self {
        ServiceClock {
            anchor: Instant::now(),
            state: Mutex::new(Offset::default()),
        }
    }
}

impl ServiceClock {
    fn mono_ms(&self) -> i64 {
        self.anchor.elapsed().as_millis() as i64
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Offset> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record a `Date` header just received (an unparsable one is ignored). See
    /// [`ServiceClock`] for which samples move the clock.
    pub fn observe(&self, date: &str) {
        if let Some(t) = parse_http_date(date) {
            self.observe_ms(t);
        }
    }

    /// [`ServiceClock::observe`] for a `Date` already parsed to unix ms.
    pub fn observe_ms(&self, date_ms: i64) {
        let lower = date_ms - self.mono_ms();
        let mut st = self.state();
        let near = |a: i64, b: i64| (a - b).abs() <= SKEW_TOLERANCE_MS;
        if st.established.is_none() && near(date_ms, local_ms()) {
            // The first sample that agrees with this machine's wall clock: two witnesses.
            st.established = Some(lower);
            st.pending = None;
            return;
        }
        if let Some(p) = st.pending.filter(|&p| near(p, lower)) {
            // Two in a row agree: the service's clock (a first one, or a step forward).
            let off = st.established.unwrap_or(i64::MIN);
            st.established = Some(off.max(p).max(lower));
            st.pending = None;
            return;
        }
        if let (Some(p), Some(off)) = (st.pending.take(), st.established) {
            st.dropped += 1;
            log::warn!(
                "stowq: ignored a server Date {} s ahead of the service's clock (the next answer did not confirm it)",
                (p - off) / 1000
            );
        }
        match st.established {
            Some(off) if lower <= off + SKEW_TOLERANCE_MS => st.established = Some(off.max(lower)),
            _ => st.pending = Some(lower),
        }
    }

    /// Whether the service's clock is known: a `Date` agreed with this machine's wall clock,
    /// or two consecutive ones agreed with each other.
    pub fn known(&self) -> bool {
        self.state().established.is_some()
    }

    /// Whether a `Date` was seen but the clock is not yet known: the samples so far agreed
    /// neither with this machine's wall clock nor two in a row with each other. [`crate::Queue::open`] asks again until they do.
    pub fn unconfirmed(&self) -> bool {
        let st = self.state();
        st.established.is_none() && st.pending.is_some()
    }

    /// Whether the last `Date` was far ahead of the established clock and waits for the next
    /// answer to confirm it: the service's clock may have stepped forward (or this machine
    /// slept, its monotonic clock standing still), so [`ServiceClock::now_ms`] may be behind
    /// by that step. A deadline written now could be expired at birth to every handle that
    /// knows the new time: [`crate::Queue`] asks once more before writing one.
    pub fn in_doubt(&self) -> bool {
        let st = self.state();
        st.established.is_some() && st.pending.is_some()
    }

    /// `Date` headers so far dropped as implausible: further ahead of the established clock
    /// than [`SKEW_TOLERANCE_MS`], and not confirmed by the next answer.
    pub fn dropped(&self) -> u64 {
        self.state().dropped
    }

    /// The service's time now, unix ms: a lower bound, at most about 1 s plus one response's
    /// transit behind. Before the clock is known ([`ServiceClock::known`]), this machine's
    /// wall clock.
    pub fn now_ms(&self) -> i64 {
        match self.state().established {
            Some(off) => self.mono_ms() + off,
            None => local_ms(),
        }
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
        c.observe("Tue, 01 Dec 2026 04:07:25 GMT");
        assert!((c.now_ms() - ms).abs() < 50);
        c.observe("Tue, 01 Dec 2026 04:07:20 GMT");
        assert!(
            (c.now_ms() - ms).abs() < 50,
            "an older date does not move the clock back"
        );
    }

    const DAY: i64 = 86_400_000;

    #[test]
    fn one_implausible_date_does_not_move_the_clock() {
        let t = 1_796_098_045_000;
        let c = ServiceClock::default();
        c.observe_ms(t);
        assert!(!c.known(), "one sample is not yet the service's clock");
        assert!((c.now_ms() - local_ms()).abs() < 50, "wall clock meanwhile");
        c.observe_ms(t + 1000);
        assert!(c.known());
        assert!((c.now_ms() - (t + 1000)).abs() < 50);
        // A day ahead, once: held back, then dropped when the next answer disagrees.
        c.observe_ms(t + DAY);
        assert!((c.now_ms() - (t + 1000)).abs() < 50, "held back");
        c.observe_ms(t + 2000);
        assert!((c.now_ms() - (t + 2000)).abs() < 50);
        assert_eq!(c.dropped(), 1);
        // A day behind never lowers it.
        c.observe_ms(t - DAY);
        c.observe_ms(t - DAY);
        assert!((c.now_ms() - (t + 2000)).abs() < 50);
        // A forward step seen twice in a row is the service's clock.
        c.observe_ms(t + 3_600_000);
        assert!(c.in_doubt(), "held back, in doubt until the next answer");
        c.observe_ms(t + 3_600_000);
        assert!((c.now_ms() - (t + 3_600_000)).abs() < 50);
        assert!(!c.in_doubt());
        assert_eq!(c.dropped(), 1);
    }

    #[test]
    fn a_date_that_agrees_with_the_wall_clock_is_taken_at_once() {
        let c = ServiceClock::default();
        c.observe_ms(local_ms() - DAY);
        assert!(!c.known() && c.unconfirmed());
        c.observe_ms(local_ms() + 2000);
        assert!(c.known() && !c.unconfirmed());
        assert!((c.now_ms() - (local_ms() + 2000)).abs() < 50);
    }

    #[test]
    fn a_bogus_first_date_is_replaced_by_two_that_agree() {
        let t = 1_796_098_045_000;
        let c = ServiceClock::default();
        c.observe_ms(t - DAY);
        c.observe_ms(t);
        assert!(!c.known(), "the first two disagree");
        c.observe_ms(t + 500);
        assert!(c.known());
        assert!((c.now_ms() - (t + 500)).abs() < 50);
    }
}
