//! Decimal numbers on the command line without floating point: a duration such as `1.5m`
//! parses exactly into ns, and seconds and rates print as fixed-point decimals.
//!
//! Why not `f64`: parsing one links core's `dec2flt` (its `POWER_OF_FIVE_128` table alone is
//! 10,416 bytes) and printing one links `flt2dec` (Grisu and Dragon4). On the size-limited
//! aarch64 build (.ci/cross) they were 24,816 bytes (604,312 stripped bytes with them, 579,496
//! without, 2026-12-03) of a 600 KB budget, for seven format strings and one parser. Integers
//! also make `1.1s` exactly 1,100,000,000 ns.

/// `n / d`, rounded half up to `places` decimals: `fixed(1_500_000_000, 1_000_000_000, 3)` is
/// `"1.500"`, `fixed(7, 2, 0)` is `"4"`. A `d` of 0 counts as 1. Saturates at `u128::MAX`
/// (far past any count of ns or jobs this prints).
pub fn fixed(n: u128, d: u128, places: u32) -> String {
    let p = 10u128.pow(places);
    let d = d.max(1);
    let v = n.saturating_mul(p).saturating_add(d / 2) / d;
    if places == 0 {
        v.to_string()
    } else {
        format!("{}.{:0w$}", v / p, v % p, w = places as usize)
    }
}

/// Seconds from ns, to `places` decimals: `secs(1_500_000_000, 3)` is `"1.500"`.
pub fn secs(ns: u128, places: u32) -> String {
    fixed(ns, 1_000_000_000, places)
}

/// A unix time in ns as UTC, to the millisecond: `utc(0)` is `"1970-01-01T00:00:00.000Z"`.
/// The civil date comes from the days since the epoch by Howard Hinnant's `civil_from_days`
/// (<https://howardhinnant.github.io/date_algorithms.html#civil_from_days>), proleptic
/// Gregorian, no leap seconds (as `CLOCK_REALTIME` counts).
pub fn utc(ns: u128) -> String {
    let ms = ns / 1_000_000;
    let (secs, ms) = (ms / 1000, ms % 1000);
    let (days, sod) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// A moment (unix time in ns) in UTC for a person and in unix seconds for a script, both
/// cut to the same millisecond (`secs` alone would round half up, a millisecond past
/// `utc`'s): `2026-12-06T11:14:07.764Z (unix 1796555647.764)`.
pub fn moment(ns: u128) -> String {
    let ms = ns / 1_000_000 * 1_000_000;
    format!("{} (unix {})", utc(ms), secs(ms, 3))
}

/// What `nack` prints for a job delayed until `ns` (unix time in ns): `delayed until
/// 2026-12-06T11:14:07.764Z (unix 1796555647.764)` ([`moment`]).
pub fn delayed_until(ns: u128) -> String {
    format!("delayed until {}", moment(ns))
}

/// Events per second: `n` events in `ns` ns, rounded to a whole number.
pub fn per_sec(n: u128, ns: u128) -> String {
    fixed(n.saturating_mul(1_000_000_000), ns, 0)
}

/// An unsigned decimal (`12`, `1.5`, `.5`, `2.`) times `unit`, truncated toward zero: the
/// value in units of `1/unit`. `parse_scaled("1.5", 60_000_000_000)` is 90 s in ns.
/// Digits past the 20th after the point are ignored (below 1 ns for every unit this takes).
/// `None` for anything else (a sign, an exponent, a lone `.`, an empty string); a value too
/// large for `u128` saturates to `u128::MAX` for the caller's range check.
pub fn parse_scaled(s: &str, unit: u128) -> Option<u128> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    let whole = int.bytes().fold(0u128, |v, b| {
        v.saturating_mul(10).saturating_add(u128::from(b - b'0'))
    });
    let frac = &frac[..frac.len().min(20)];
    let num = frac
        .bytes()
        .fold(0u128, |v, b| v * 10 + u128::from(b - b'0'));
    // num < 10^20 and every unit is under 10^15, so the product fits (10^35 < 2^128).
    let part = num.saturating_mul(unit) / 10u128.pow(frac.len() as u32);
    Some(whole.saturating_mul(unit).saturating_add(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_match_date_1() {
        // Values from GNU date: `date -u -d @SECS +%FT%T.%3NZ`.
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_123_000_000), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_796_539_406_640_000_000), "2026-12-06T06:43:26.640Z");
        assert_eq!(utc(4_102_444_799_999_999_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_delayed_nack_gives_utc_and_unix_seconds() {
        assert_eq!(
            delayed_until(1_796_539_406_640_000_000),
            "delayed until 2026-12-06T06:43:26.640Z (unix 1796539406.640)"
        );
        assert_eq!(
            delayed_until(1_796_555_683_567_600_000),
            "delayed until 2026-12-06T11:14:43.567Z (unix 1796555683.567)",
            "one moment, cut to the millisecond in both"
        );
    }

    #[test]
    fn fixed_point_printing_rounds_half_up() {
        assert_eq!(fixed(1_500_000_000, 1_000_000_000, 3), "1.500");
        assert_eq!(fixed(1_499_500_000, 1_000_000_000, 3), "1.500");
        assert_eq!(fixed(1_499_499_999, 1_000_000_000, 3), "1.499");
        assert_eq!(fixed(7, 2, 0), "4");
        assert_eq!(fixed(5, 0, 1), "5.0");
        assert_eq!(secs(42_000_000, 3), "0.042");
        assert_eq!(secs(3_000_000_001, 2), "3.00");
        assert_eq!(per_sec(1_000, 250_000_000), "4000");
        assert_eq!(per_sec(3, 0), "3000000000");
    }

    #[test]
    fn decimals_parse_exactly() {
        const S: u128 = 1_000_000_000;
        assert_eq!(parse_scaled("1.5", 60 * S), Some(90 * S));
        assert_eq!(parse_scaled("1.1", S), Some(1_100_000_000));
        assert_eq!(parse_scaled(".5", S), Some(S / 2));
        assert_eq!(parse_scaled("2.", S), Some(2 * S));
        assert_eq!(parse_scaled("0.0000000015", S), Some(1));
        assert_eq!(parse_scaled("1.000000000000000000009", S), Some(S));
        assert_eq!(parse_scaled(&"9".repeat(60), S), Some(u128::MAX));
        for bad in ["", ".", "-1", "+1", "1e3", "1.2.3", " 1", "1 ", "١"] {
            assert_eq!(parse_scaled(bad, S), None, "{bad:?}");
        }
    }
}
