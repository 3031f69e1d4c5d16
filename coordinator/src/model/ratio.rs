//! Fixed-point ratios (three decimals) so that policy arithmetic stays exact
//! and deterministic: `1.5`, `"1.2"`, `"20%"`.

use super::resources::parse_fixed;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A non-negative ratio in thousandths (`Ratio(1500)` is 1.5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ratio(pub u64);

impl Ratio {
    /// 1.0.
    pub const ONE: Ratio = Ratio(1000);

    /// The ratio in thousandths.
    pub const fn millis(self) -> u64 {
        self.0
    }

    /// `v * self`, rounded down.
    pub fn apply(self, v: u64) -> u64 {
        let r = u128::from(v) * u128::from(self.0) / 1000;
        u64::try_from(r).unwrap_or(u64::MAX)
    }
}

impl FromStr for Ratio {
    type Err = crate::model::resources::QuantityError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        if let Some(p) = s.strip_suffix('%') {
            return parse_fixed("ratio", p, 10).map(Ratio);
        }
        parse_fixed("ratio", s, 1000).map(Ratio)
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (i, frac) = (self.0 / 1000, self.0 % 1000);
        if frac == 0 {
            write!(f, "{i}")
        } else {
            let s = format!("{frac:03}");
            write!(f, "{i}.{}", s.trim_end_matches('0'))
        }
    }
}

impl Serialize for Ratio {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ratio {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Ratio;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a ratio such as 1.5 or \"20%\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Ratio, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ratio, E> {
                Ratio::from_str(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ratio, E> {
                Ratio::from_str(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Ratio, E> {
                Ratio::from_str(&v.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios() {
        assert_eq!("1.5".parse::<Ratio>().unwrap(), Ratio(1500));
        assert_eq!("20%".parse::<Ratio>().unwrap(), Ratio(200));
        assert_eq!(Ratio(1200).to_string(), "1.2");
        assert_eq!(Ratio(2000).to_string(), "2");
        assert_eq!(Ratio(1500).apply(4000), 6000);
        let r: Ratio = serde_json::from_str("1.3").unwrap();
        assert_eq!(r, Ratio(1300));
        assert!("1.0001".parse::<Ratio>().is_err());
        assert!("-1".parse::<Ratio>().is_err());
    }
}
