//! Time as data: timestamps are passed in by the caller, durations are parsed
//! from specs. The crate never reads a clock.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Milliseconds since the Unix epoch, supplied by the caller.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// This time plus `d`.
    #[must_use]
    pub const fn plus(self, d: DurationMs) -> Self {
        Self(self.0.saturating_add(d.0))
    }

    /// Time elapsed from `earlier` to `self` (zero if `earlier` is later).
    pub const fn since(self, earlier: Timestamp) -> DurationMs {
        DurationMs(self.0.saturating_sub(earlier.0))
    }
}

/// How a view renders a time (the CLI passes local time; the default prints
/// milliseconds since the epoch).
pub type TimeFormat<'a> = &'a dyn Fn(Timestamp) -> String;

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}ms", self.0)
    }
}

/// A duration in milliseconds; in specs `"250ms"`, `"10s"`, `"5m"`, `"1h"`
/// or a number of seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DurationMs(pub u64);

impl DurationMs {
    /// `n` seconds.
    pub const fn from_secs(n: u64) -> Self {
        Self(n.saturating_mul(1000))
    }
}

/// A duration string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: use a whole number with ms, s, m or h (e.g. \"500ms\", \"10s\")"
)]
pub struct DurationError {
    /// The text as given.
    pub input: String,
}

impl FromStr for DurationMs {
    type Err = DurationError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        let err = || DurationError {
            input: input.to_string(),
        };
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(end);
        let n: u64 = num.parse().map_err(|_| err())?;
        let mult = match unit {
            "ms" => 1,
            "s" | "" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(err()),
        };
        n.checked_mul(mult).map(Self).ok_or_else(err)
    }
}

impl fmt::Display for DurationMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v != 0 && v.is_multiple_of(3_600_000) {
            write!(f, "{}h", v / 3_600_000)
        } else if v != 0 && v.is_multiple_of(60_000) {
            write!(f, "{}m", v / 60_000)
        } else if v.is_multiple_of(1000) {
            write!(f, "{}s", v / 1000)
        } else {
            write!(f, "{v}ms")
        }
    }
}

impl Serialize for DurationMs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DurationMs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationMs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"500ms\", \"10s\", \"5m\" or a number of seconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationMs, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DurationMs, E> {
                v.checked_mul(1000)
                    .map(DurationMs)
                    .ok_or_else(|| E::custom("duration too long"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DurationMs, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom("duration must not be negative"))
                    .and_then(|v| self.visit_u64(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_display() {
        assert_eq!("500ms".parse::<DurationMs>().unwrap(), DurationMs(500));
        assert_eq!("10s".parse::<DurationMs>().unwrap(), DurationMs(10_000));
        assert_eq!("5m".parse::<DurationMs>().unwrap(), DurationMs(300_000));
        assert_eq!("2h".parse::<DurationMs>().unwrap().to_string(), "2h");
        assert_eq!(DurationMs(1500).to_string(), "1500ms");
        assert!("1.5s".parse::<DurationMs>().is_err());
        assert!("5d".parse::<DurationMs>().is_err());
        let d: DurationMs = serde_json::from_str("3").unwrap();
        assert_eq!(d, DurationMs(3000));
    }
}
