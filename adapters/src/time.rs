//! Wall-clock helpers: the coordinator's [`Timestamp`] (ms since the epoch)
//! for events and records, and RFC 3339 times with nanoseconds for log lines.

use daros_coordinator::model::time::Timestamp;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub fn now() -> Timestamp {
    Timestamp(u64::try_from(unix_nanos() / 1_000_000).unwrap_or(u64::MAX))
}

/// Now, in nanoseconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos()
}

/// Formats nanoseconds since the epoch as `2006-01-02T15:04:05.000000000Z`.
pub fn rfc3339_nanos(nanos: u128) -> String {
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    let sub = nanos % 1_000_000_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(i64::MAX));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{sub:09}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Reads a time written by [`rfc3339_nanos`] (UTC, `Z`, 0-9 fraction
/// digits) back into nanoseconds since the epoch.
pub fn parse_rfc3339_nanos(s: &str) -> Option<u128> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || !s.ends_with('Z') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let frac = &s[19..s.len() - 1];
    let nanos_frac: u128 = if frac.is_empty() {
        0
    } else {
        let digits = frac.strip_prefix('.')?;
        if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let v: u128 = digits.parse().ok()?;
        v * 10u128.pow(u32::try_from(9 - digits.len()).ok()?)
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se;
    let secs = u128::try_from(secs).ok()?;
    Some(secs * 1_000_000_000 + nanos_frac)
}

// Howard Hinnant's civil calendar algorithms (public domain).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip_and_known_values() {
        assert_eq!(rfc3339_nanos(0), "1970-01-01T00:00:00.000000000Z");
        // 2024-02-29T12:34:56.123456789Z (a leap day)
        let t = 1_709_210_096_123_456_789u128;
        assert_eq!(rfc3339_nanos(t), "2024-02-29T12:34:56.123456789Z");
        assert_eq!(
            parse_rfc3339_nanos("2024-02-29T12:34:56.123456789Z"),
            Some(t)
        );
        assert_eq!(
            parse_rfc3339_nanos("2024-02-29T12:34:56.5Z"),
            Some(1_709_210_096_500_000_000)
        );
        assert_eq!(
            parse_rfc3339_nanos("2024-02-29T12:34:56Z"),
            Some(1_709_210_096_000_000_000)
        );
        for bad in [
            "",
            "2024-02-29 12:34:56Z",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:34:56.Z",
        ] {
            assert_eq!(parse_rfc3339_nanos(bad), None, "{bad:?}");
        }
        for n in [1u128, 999_999_999, 4_102_444_800_000_000_000] {
            assert_eq!(parse_rfc3339_nanos(&rfc3339_nanos(n)), Some(n));
        }
    }
}
