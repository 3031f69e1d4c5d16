//! Resource quantities (Kubernetes-style strings), request/limit/reservation
//! bounds and the per-workload [`ResourceProfile`].
//!
//! Quantity syntax:
//! - [`MilliCpu`]: `"500m"` (millicores), `"1.5"` or `"2"` (cores, at most 3
//!   decimals); YAML/JSON numbers are read as cores.
//! - [`Bytes`]: `"4096"`, decimal suffixes `k`/`K`, `M`, `G`, `T`, `P`, `E`
//!   (powers of 1000) and binary suffixes `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`
//!   (powers of 1024); a fraction is allowed when the result is whole bytes
//!   (`"1.5Gi"`).
//! - [`BytesPerSec`]: a [`Bytes`] quantity, optionally followed by `B` (bytes)
//!   or `bit` (bits), optionally followed by `/s`: `"10MB/s"`, `"100Mi/s"`,
//!   `"1Gbit/s"`, `"4096"` (plain number = bytes per second).
//! - [`GpuCount`]: a whole number of devices.

use crate::field::{FieldError, join};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A quantity string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} quantity {input:?}: {reason}")]
pub struct QuantityError {
    /// Which quantity was being read (`cpu`, `bytes`, ...).
    pub kind: &'static str,
    /// The text as given.
    pub input: String,
    /// Why it was refused.
    pub reason: String,
}

impl QuantityError {
    fn new(kind: &'static str, input: &str, reason: impl Into<String>) -> Self {
        Self {
            kind,
            input: input.to_string(),
            reason: reason.into(),
        }
    }
}

/// A non-negative decimal number split into its integer and fraction digits.
struct Decimal {
    int: u128,
    frac: u128,
    frac_digits: u32,
}

impl Decimal {
    fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("a number is missing".into());
        }
        if s.starts_with('-') {
            return Err("must not be negative".into());
        }
        let (int_s, frac_s) = match s.split_once('.') {
            Some((i, f)) => (i, f),
            None => (s, ""),
        };
        if int_s.is_empty() && frac_s.is_empty() {
            return Err("a number is missing".into());
        }
        let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(int_s) || !all_digits(frac_s) {
            return Err(format!("{s:?} is not a decimal number"));
        }
        if int_s.len() > 30 || frac_s.len() > 30 {
            return Err("too many digits".into());
        }
        let int = if int_s.is_empty() {
            0
        } else {
            int_s.parse::<u128>().map_err(|e| e.to_string())?
        };
        let frac_trim = frac_s.trim_end_matches('0');
        let frac = if frac_trim.is_empty() {
            0
        } else {
            frac_trim.parse::<u128>().map_err(|e| e.to_string())?
        };
        Ok(Self {
            int,
            frac,
            frac_digits: frac_trim.len() as u32,
        })
    }

    /// `self * mult` if it is a whole number that fits in a u64.
    fn scale(&self, mult: u128) -> Result<u64, String> {
        let whole = self.int.checked_mul(mult).ok_or("too large")?;
        let den = 10u128
            .checked_pow(self.frac_digits)
            .ok_or("too many digits")?;
        let num = self.frac.checked_mul(mult).ok_or("too large")?;
        if num % den != 0 {
            return Err("is not a whole number of the base unit".into());
        }
        let total = whole.checked_add(num / den).ok_or("too large")?;
        u64::try_from(total).map_err(|_| "too large".to_string())
    }
}

/// Reads a non-negative decimal `input` as a fixed-point integer with `scale`
/// units per 1 (`parse_fixed("ratio", "1.5", 1000) == 1500`).
pub(crate) fn parse_fixed(
    kind: &'static str,
    input: &str,
    scale: u128,
) -> Result<u64, QuantityError> {
    let err = |r: String| QuantityError::new(kind, input, r);
    let d = Decimal::parse(input.trim()).map_err(err)?;
    d.scale(scale).map_err(|r| {
        if r.contains("whole number") {
            err(format!("at most {} decimals", scale.ilog10()))
        } else {
            err(r)
        }
    })
}

/// Splits `s` into its numeric prefix and the unit suffix after it.
fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap_or(s.len());
    s.split_at(end)
}

/// Number of one unit in bytes for a Kubernetes-style suffix.
fn byte_suffix(suffix: &str) -> Option<u128> {
    let k: u128 = 1000;
    let ki: u128 = 1024;
    Some(match suffix {
        "" => 1,
        "k" | "K" => k,
        "M" => k.pow(2),
        "G" => k.pow(3),
        "T" => k.pow(4),
        "P" => k.pow(5),
        "E" => k.pow(6),
        "Ki" => ki,
        "Mi" => ki.pow(2),
        "Gi" => ki.pow(3),
        "Ti" => ki.pow(4),
        "Pi" => ki.pow(5),
        "Ei" => ki.pow(6),
        _ => return None,
    })
}

/// Largest suffix that divides `v` exactly, binary preferred, for display.
fn display_bytes(v: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if v == 0 {
        return f.write_str("0");
    }
    const UNITS: [(&str, u64); 12] = [
        ("Ei", 1 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
        ("E", 1_000_000_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ];
    for (suffix, unit) in UNITS {
        if v.is_multiple_of(unit) {
            return write!(f, "{}{suffix}", v / unit);
        }
    }
    write!(f, "{v}")
}

/// Implements serde for a quantity newtype: strings through `FromStr`,
/// numbers through `from_number`, output through `Display`.
macro_rules! quantity_serde {
    ($ty:ident, $expecting:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$ty, E> {
                        $ty::from_str(&v.to_string()).map_err(E::custom)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$ty, E> {
                        $ty::from_str(&v.to_string()).map_err(E::custom)
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$ty, E> {
                        if !v.is_finite() {
                            return Err(E::custom(concat!("expected ", $expecting)));
                        }
                        $ty::from_str(&v.to_string()).map_err(E::custom)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

/// Saturating arithmetic shared by the quantity newtypes.
macro_rules! quantity_ops {
    ($ty:ident, $inner:ty) => {
        impl $ty {
            /// Zero of this quantity.
            pub const ZERO: Self = Self(0);
            /// The value in the base unit.
            pub const fn get(self) -> $inner {
                self.0
            }
            /// True when zero.
            pub const fn is_zero(self) -> bool {
                self.0 == 0
            }
            /// Sum, clamped at the maximum.
            #[must_use]
            pub const fn saturating_add(self, other: Self) -> Self {
                Self(self.0.saturating_add(other.0))
            }
            /// Difference, clamped at zero.
            #[must_use]
            pub const fn saturating_sub(self, other: Self) -> Self {
                Self(self.0.saturating_sub(other.0))
            }
            /// Sum, or `None` on overflow.
            pub fn checked_add(self, other: Self) -> Option<Self> {
                self.0.checked_add(other.0).map(Self)
            }
            /// `n` times this quantity, clamped at the maximum.
            #[must_use]
            pub fn saturating_mul(self, n: $inner) -> Self {
                Self(self.0.saturating_mul(n))
            }
        }

        impl std::iter::Sum for $ty {
            fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
                iter.fold(Self::ZERO, Self::saturating_add)
            }
        }

        impl Quantity for $ty {
            const KIND: &'static str = stringify!($ty);
            fn is_zero(&self) -> bool {
                self.0 == 0
            }
        }
    };
}

/// Behaviour common to every quantity type used in [`ResourceBounds`].
pub trait Quantity: Copy + Ord + fmt::Display {
    /// Name of the quantity for messages.
    const KIND: &'static str;
    /// True when the quantity is zero.
    fn is_zero(&self) -> bool;
}

/// CPU in thousandths of a core (`"500m"`, `"1.5"`, `"2"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MilliCpu(pub u64);

impl MilliCpu {
    /// `n` whole cores.
    pub const fn from_cores(n: u64) -> Self {
        Self(n.saturating_mul(1000))
    }
    /// The value in millicores.
    pub const fn millis(self) -> u64 {
        self.0
    }
    /// Whole cores when the value is a whole number of cores.
    pub const fn whole_cores(self) -> Option<u64> {
        if self.0.is_multiple_of(1000) {
            Some(self.0 / 1000)
        } else {
            None
        }
    }
}

impl FromStr for MilliCpu {
    type Err = QuantityError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        let err = |r: String| QuantityError::new("cpu", input, r);
        if let Some(milli) = s.strip_suffix('m') {
            if milli.contains('.') {
                return Err(err(
                    "millicores must be a whole number (1m is the finest unit)".into(),
                ));
            }
            let d = Decimal::parse(milli).map_err(err)?;
            return d.scale(1).map(Self).map_err(err);
        }
        let (num, suffix) = split_number(s);
        if !suffix.is_empty() {
            return Err(err(format!(
                "unknown unit {suffix:?}; use cores (\"1.5\") or millicores (\"1500m\")"
            )));
        }
        let d = Decimal::parse(num).map_err(err)?;
        d.scale(1000).map(Self).map_err(|r| {
            if r.contains("whole number") {
                err("finer than 1m (at most 3 decimals of a core)".into())
            } else {
                err(r)
            }
        })
    }
}

impl fmt::Display for MilliCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.whole_cores() {
            Some(c) => write!(f, "{c}"),
            None => write!(f, "{}m", self.0),
        }
    }
}

quantity_serde!(MilliCpu, "a cpu quantity such as \"500m\", \"1.5\" or 2");
quantity_ops!(MilliCpu, u64);

/// A size in bytes (`"512Mi"`, `"1G"`, `"1Gi"`, `"4096"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl Bytes {
    /// `n` mebibytes.
    pub const fn from_mib(n: u64) -> Self {
        Self(n.saturating_mul(1 << 20))
    }
    /// `n` gibibytes.
    pub const fn from_gib(n: u64) -> Self {
        Self(n.saturating_mul(1 << 30))
    }
}

fn parse_bytes(kind: &'static str, input: &str, s: &str) -> Result<u64, QuantityError> {
    let err = |r: String| QuantityError::new(kind, input, r);
    let (num, suffix) = split_number(s);
    let mult = byte_suffix(suffix).ok_or_else(|| {
        err(format!(
            "unknown unit {suffix:?}; use k, M, G, T, P, E (powers of 1000) or Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024)"
        ))
    })?;
    let d = Decimal::parse(num).map_err(err)?;
    d.scale(mult).map_err(|r| {
        if r.contains("whole number") {
            err("is not a whole number of bytes".into())
        } else {
            err(r)
        }
    })
}

impl FromStr for Bytes {
    type Err = QuantityError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse_bytes("bytes", input, input.trim()).map(Self)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        display_bytes(self.0, f)
    }
}

quantity_serde!(Bytes, "a size such as \"512Mi\", \"1G\" or 4096");
quantity_ops!(Bytes, u64);

/// A rate in bytes per second (`"10MB/s"`, `"100Mi/s"`, `"1Gbit/s"`, `"4096"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BytesPerSec(pub u64);

impl FromStr for BytesPerSec {
    type Err = QuantityError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let kind = "bandwidth";
        let s = input.trim();
        let s = s.strip_suffix("/s").unwrap_or(s);
        if let Some(bits) = s.strip_suffix("bit") {
            let b = parse_bytes(kind, input, bits)?;
            if b % 8 != 0 {
                return Err(QuantityError::new(
                    kind,
                    input,
                    "is not a whole number of bytes per second",
                ));
            }
            return Ok(Self(b / 8));
        }
        let s = s.strip_suffix('B').unwrap_or(s);
        parse_bytes(kind, input, s).map(Self)
    }
}

impl fmt::Display for BytesPerSec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        display_bytes(self.0, f)?;
        f.write_str("/s")
    }
}

quantity_serde!(
    BytesPerSec,
    "a bandwidth such as \"10MB/s\", \"100Mi/s\", \"1Gbit/s\" or 4096 (bytes/s)"
);
quantity_ops!(BytesPerSec, u64);

/// A whole number of GPU devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuCount(pub u32);

impl FromStr for GpuCount {
    type Err = QuantityError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        let err = |r: &str| QuantityError::new("gpu", input, r);
        if s.starts_with('-') {
            return Err(err("must not be negative"));
        }
        if s.contains('.') {
            let d = Decimal::parse(s).map_err(|r| err(&r))?;
            if d.frac != 0 {
                return Err(err("GPUs are counted in whole devices"));
            }
            return u32::try_from(d.int).map(Self).map_err(|_| err("too large"));
        }
        s.parse::<u32>()
            .map(Self)
            .map_err(|_| err("expected a whole number of devices"))
    }
}

impl fmt::Display for GpuCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for GpuCount {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.0)
    }
}

impl<'de> Deserialize<'de> for GpuCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GpuCount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of GPU devices")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GpuCount, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GpuCount, E> {
                u32::try_from(v)
                    .map(GpuCount)
                    .map_err(|_| E::custom("too many GPUs"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GpuCount, E> {
                GpuCount::from_str(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<GpuCount, E> {
                GpuCount::from_str(&v.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

quantity_ops!(GpuCount, u32);

/// Request, limit and reservation of one resource, each optional; valid when
/// `reservation <= request <= limit` wherever present.
///
/// - `request`: what placement counts and what the workload is entitled to
///   under contention (shares/weights);
/// - `limit`: the hard cap;
/// - `reservation`: the MinimalReservation floor kept even under contention
///   (only meaningful for the `GuaranteedPro` class).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceBounds<T> {
    /// Amount placement counts and the share under contention.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<T>,
    /// Hard cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<T>,
    /// Floor kept under contention (MinimalReservation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<T>,
}

impl<T: Quantity> ResourceBounds<T> {
    /// Bounds with only a request.
    pub fn request(v: T) -> Self {
        Self {
            request: Some(v),
            limit: None,
            reservation: None,
        }
    }

    /// Bounds with request == limit.
    pub fn exact(v: T) -> Self {
        Self {
            request: Some(v),
            limit: Some(v),
            reservation: None,
        }
    }

    /// True when no bound is set.
    pub fn is_empty(&self) -> bool {
        self.request.is_none() && self.limit.is_none() && self.reservation.is_none()
    }

    /// The amount placement must find on a node: the request, else the
    /// reservation, else nothing (a limit alone is not an entitlement).
    pub fn placement_amount(&self) -> Option<T> {
        self.request.or(self.reservation)
    }

    /// True when [`ResourceBounds::validate`] finds nothing (no allocation).
    pub fn is_valid(&self) -> bool {
        !(self.limit.is_some_and(|l| l.is_zero())
            || matches!((self.reservation, self.request), (Some(r), Some(q)) if r > q)
            || matches!((self.request, self.limit), (Some(q), Some(l)) if q > l)
            || matches!(
                (self.reservation, self.limit, self.request),
                (Some(r), Some(l), None) if r > l
            ))
    }

    /// Checks `reservation <= request <= limit` and a non-zero limit; `path`
    /// names this resource in the errors.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(l) = self.limit
            && l.is_zero()
        {
            errs.push(FieldError::new(
                join(path, "limit"),
                "must be greater than 0 (leave it out for no limit)",
            ));
        }
        if let (Some(r), Some(q)) = (self.reservation, self.request)
            && r > q
        {
            errs.push(FieldError::new(
                join(path, "reservation"),
                format!("reservation {r} exceeds request {q}"),
            ));
        }
        if let (Some(q), Some(l)) = (self.request, self.limit)
            && q > l
        {
            errs.push(FieldError::new(
                join(path, "request"),
                format!("request {q} exceeds limit {l}"),
            ));
        }
        if let (Some(r), Some(l), None) = (self.reservation, self.limit, self.request)
            && r > l
        {
            errs.push(FieldError::new(
                join(path, "reservation"),
                format!("reservation {r} exceeds limit {l}"),
            ));
        }
        errs
    }
}

/// Network bandwidth bounds per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkProfile {
    /// Outgoing bandwidth.
    #[serde(skip_serializing_if = "ResourceBounds::is_empty")]
    pub egress: ResourceBounds<BytesPerSec>,
    /// Incoming bandwidth.
    #[serde(skip_serializing_if = "ResourceBounds::is_empty")]
    pub ingress: ResourceBounds<BytesPerSec>,
}

impl NetworkProfile {
    /// True when neither direction has a bound.
    pub fn is_empty(&self) -> bool {
        self.egress.is_empty() && self.ingress.is_empty()
    }
}

/// Block IO bandwidth bounds per direction (bytes/s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IoProfile {
    /// Read bandwidth.
    #[serde(skip_serializing_if = "ResourceBounds::is_empty")]
    pub read: ResourceBounds<BytesPerSec>,
    /// Write bandwidth.
    #[serde(skip_serializing_if = "ResourceBounds::is_empty")]
    pub write: ResourceBounds<BytesPerSec>,
}

impl IoProfile {
    /// True when neither direction has a bound.
    pub fn is_empty(&self) -> bool {
        self.read.is_empty() && self.write.is_empty()
    }
}

/// Dedicated (exclusive) cores for a workload, enforced with a cpuset.
///
/// In a spec: `dedicatedCpus: true` (as many cores as the cpu limit, which
/// must then be whole cores), `dedicatedCpus: 2` (that many cores), or absent /
/// `false` (shared cores).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DedicatedCpus {
    /// Shared cores.
    #[default]
    No,
    /// As many cores as the cpu limit.
    MatchLimit,
    /// This many cores.
    Cores(u32),
}

impl DedicatedCpus {
    /// True when no dedicated cores are asked for.
    pub fn is_no(&self) -> bool {
        matches!(self, Self::No)
    }
}

impl Serialize for DedicatedCpus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::No => s.serialize_bool(false),
            Self::MatchLimit => s.serialize_bool(true),
            Self::Cores(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for DedicatedCpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DedicatedCpus;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false or a whole number of cores")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<DedicatedCpus, E> {
                Ok(if v {
                    DedicatedCpus::MatchLimit
                } else {
                    DedicatedCpus::No
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DedicatedCpus, E> {
                u32::try_from(v)
                    .map(DedicatedCpus::Cores)
                    .map_err(|_| E::custom("too many dedicated cores"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DedicatedCpus, E> {
                u32::try_from(v)
                    .map(DedicatedCpus::Cores)
                    .map_err(|_| E::custom("dedicated cores must be a whole number >= 0"))
            }
        }
        d.deserialize_any(V)
    }
}

/// Everything a workload asks of a node: cpu, memory, gpu, network, io,
/// process count and dedicated cores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceProfile {
    /// CPU.
    #[serde(skip_serializing_if = "ResourceBounds::is_empty")]
    pub cpu: ResourceBounds<MilliCpu>,
    /// Memory.
    #[serde(skip_serializing_if = "ResourceBounds::is_empty")]
    pub memory: ResourceBounds<Bytes>,
    /// GPU devices.
    #[serde(skip_serializing_if = "ResourceBounds::is_empty")]
    pub gpu: ResourceBounds<GpuCount>,
    /// Network bandwidth.
    #[serde(skip_serializing_if = "NetworkProfile::is_empty")]
    pub network: NetworkProfile,
    /// Block IO bandwidth.
    #[serde(skip_serializing_if = "IoProfile::is_empty")]
    pub io: IoProfile,
    /// Maximum number of processes/threads (`pids.max`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Dedicated cores (cpuset).
    #[serde(skip_serializing_if = "DedicatedCpus::is_no")]
    pub dedicated_cpus: DedicatedCpus,
}

impl ResourceProfile {
    /// Checks every bound and the dedicated-cores rule; `path` is the path of
    /// the profile itself (e.g. `spec.workloads[0].resources`).
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        // Paths are built only for bounds that have a problem.
        if !self.cpu.is_valid() {
            errs.extend(self.cpu.validate(&join(path, "cpu")));
        }
        if !self.memory.is_valid() {
            errs.extend(self.memory.validate(&join(path, "memory")));
        }
        if !self.gpu.is_valid() {
            errs.extend(self.gpu.validate(&join(path, "gpu")));
        }
        for (name, b) in [
            ("network.egress", &self.network.egress),
            ("network.ingress", &self.network.ingress),
            ("io.read", &self.io.read),
            ("io.write", &self.io.write),
        ] {
            if !b.is_valid() {
                errs.extend(b.validate(&join(path, name)));
            }
        }
        if self.pids == Some(0) {
            errs.push(FieldError::new(
                join(path, "pids"),
                "must be greater than 0 (leave it out for no limit)",
            ));
        }
        let dpath = || join(path, "dedicatedCpus");
        match self.dedicated_cpus {
            DedicatedCpus::No => {}
            DedicatedCpus::MatchLimit => match self.cpu.limit {
                None => errs.push(FieldError::new(
                    dpath(),
                    "true needs cpu.limit to say how many cores",
                )),
                Some(l) if l.whole_cores().is_none() => errs.push(FieldError::new(
                    dpath(),
                    format!("true needs a whole-core cpu.limit, got {l}"),
                )),
                Some(_) => {}
            },
            DedicatedCpus::Cores(0) => errs.push(FieldError::new(
                dpath(),
                "0 dedicated cores: use false for shared cores",
            )),
            DedicatedCpus::Cores(n) => {
                if let Some(l) = self.cpu.limit
                    && l < MilliCpu::from_cores(u64::from(n))
                {
                    errs.push(FieldError::new(
                        dpath(),
                        format!("{n} dedicated cores exceed cpu.limit {l}"),
                    ));
                }
            }
        }
        errs
    }

    /// Number of dedicated cores asked for, if any.
    pub fn dedicated_cores(&self) -> Option<u64> {
        match self.dedicated_cpus {
            DedicatedCpus::No => None,
            DedicatedCpus::MatchLimit => self.cpu.limit.and_then(MilliCpu::whole_cores),
            DedicatedCpus::Cores(n) => Some(u64::from(n)),
        }
    }

    /// True when any resource carries a request.
    pub fn has_request(&self) -> bool {
        self.cpu.request.is_some()
            || self.memory.request.is_some()
            || self.gpu.request.is_some()
            || self.network.egress.request.is_some()
            || self.network.ingress.request.is_some()
            || self.io.read.request.is_some()
            || self.io.write.request.is_some()
    }

    /// True when any resource carries a reservation.
    pub fn has_reservation(&self) -> bool {
        self.cpu.reservation.is_some()
            || self.memory.reservation.is_some()
            || self.gpu.reservation.is_some()
            || self.network.egress.reservation.is_some()
            || self.network.ingress.reservation.is_some()
            || self.io.read.reservation.is_some()
            || self.io.write.reservation.is_some()
    }

    /// CPU placement must find on a node (request, else reservation, else 0;
    /// dedicated cores count whole).
    pub fn cpu_demand(&self) -> MilliCpu {
        let base = self.cpu.placement_amount().unwrap_or(MilliCpu::ZERO);
        match self.dedicated_cores() {
            Some(c) => base.max(MilliCpu::from_cores(c)),
            None => base,
        }
    }

    /// Memory placement must find on a node.
    pub fn memory_demand(&self) -> Bytes {
        self.memory.placement_amount().unwrap_or(Bytes::ZERO)
    }

    /// GPUs placement must find on a node.
    pub fn gpu_demand(&self) -> GpuCount {
        self.gpu
            .placement_amount()
            .or(self.gpu.limit)
            .unwrap_or(GpuCount::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_parses_kubernetes_forms() {
        assert_eq!("500m".parse::<MilliCpu>().unwrap(), MilliCpu(500));
        assert_eq!("1.5".parse::<MilliCpu>().unwrap(), MilliCpu(1500));
        assert_eq!("2".parse::<MilliCpu>().unwrap(), MilliCpu(2000));
        assert_eq!("0.25".parse::<MilliCpu>().unwrap(), MilliCpu(250));
        assert_eq!(".5".parse::<MilliCpu>().unwrap(), MilliCpu(500));
        assert_eq!("1.000".parse::<MilliCpu>().unwrap(), MilliCpu(1000));
    }

    #[test]
    fn cpu_refuses_bad_input_with_reason() {
        let e = "1.0005".parse::<MilliCpu>().unwrap_err();
        assert!(e.to_string().contains("finer than 1m"), "{e}");
        let e = "-1".parse::<MilliCpu>().unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let e = "2 cores".parse::<MilliCpu>().unwrap_err();
        assert!(e.to_string().contains("unknown unit"), "{e}");
        let e = "1.5m".parse::<MilliCpu>().unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
        assert!("".parse::<MilliCpu>().is_err());
        assert!("m".parse::<MilliCpu>().is_err());
        assert!("99999999999999999999".parse::<MilliCpu>().is_err());
    }

    #[test]
    fn cpu_displays_round_trip() {
        for s in ["500m", "2", "1500m", "0"] {
            let v: MilliCpu = s.parse().unwrap();
            assert_eq!(v.to_string(), s);
        }
    }

    #[test]
    fn bytes_parse_decimal_and_binary_suffixes() {
        assert_eq!("512Mi".parse::<Bytes>().unwrap(), Bytes(512 << 20));
        assert_eq!("1G".parse::<Bytes>().unwrap(), Bytes(1_000_000_000));
        assert_eq!("1Gi".parse::<Bytes>().unwrap(), Bytes(1 << 30));
        assert_eq!("4096".parse::<Bytes>().unwrap(), Bytes(4096));
        assert_eq!("1.5Gi".parse::<Bytes>().unwrap(), Bytes(3 << 29));
        assert_eq!("1k".parse::<Bytes>().unwrap(), Bytes(1000));
        let e = "0.1Ki".parse::<Bytes>().unwrap_err();
        assert!(e.to_string().contains("whole number of bytes"), "{e}");
        let e = "12Q".parse::<Bytes>().unwrap_err();
        assert!(e.to_string().contains("unknown unit \"Q\""), "{e}");
        assert!("20Ei".parse::<Bytes>().is_err());
    }

    #[test]
    fn bytes_display_picks_exact_suffix() {
        assert_eq!(Bytes(512 << 20).to_string(), "512Mi");
        assert_eq!(Bytes(1_000_000_000).to_string(), "1G");
        assert_eq!(Bytes(4097).to_string(), "4097");
        for s in ["512Mi", "1G", "3Gi", "4097", "0"] {
            assert_eq!(s.parse::<Bytes>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn bandwidth_syntax() {
        assert_eq!(
            "10MB/s".parse::<BytesPerSec>().unwrap(),
            BytesPerSec(10_000_000)
        );
        assert_eq!(
            "100Mi/s".parse::<BytesPerSec>().unwrap(),
            BytesPerSec(100 << 20)
        );
        assert_eq!(
            "100MiB/s".parse::<BytesPerSec>().unwrap(),
            BytesPerSec(100 << 20)
        );
        assert_eq!(
            "1Gbit/s".parse::<BytesPerSec>().unwrap(),
            BytesPerSec(125_000_000)
        );
        assert_eq!("4096".parse::<BytesPerSec>().unwrap(), BytesPerSec(4096));
        assert!("1bit/s".parse::<BytesPerSec>().is_err());
        assert_eq!(BytesPerSec(100 << 20).to_string(), "100Mi/s");
        assert_eq!(
            "100Mi/s"
                .parse::<BytesPerSec>()
                .unwrap()
                .to_string()
                .parse::<BytesPerSec>()
                .unwrap(),
            BytesPerSec(100 << 20)
        );
    }

    #[test]
    fn gpu_count() {
        assert_eq!("2".parse::<GpuCount>().unwrap(), GpuCount(2));
        assert!("0.5".parse::<GpuCount>().is_err());
        assert!("-1".parse::<GpuCount>().is_err());
    }

    #[test]
    fn serde_reads_strings_and_numbers() {
        let v: MilliCpu = serde_json::from_str("\"250m\"").unwrap();
        assert_eq!(v, MilliCpu(250));
        let v: MilliCpu = serde_json::from_str("0.5").unwrap();
        assert_eq!(v, MilliCpu(500));
        let v: MilliCpu = serde_json::from_str("2").unwrap();
        assert_eq!(v, MilliCpu(2000));
        let v: Bytes = serde_json::from_str("\"1Gi\"").unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"1Gi\"");
        let e = serde_json::from_str::<MilliCpu>("-3").unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let g: GpuCount = serde_json::from_str("\"1\"").unwrap();
        assert_eq!(serde_json::to_string(&g).unwrap(), "1");
    }

    #[test]
    fn bounds_order_is_checked() {
        let b = ResourceBounds {
            request: Some(MilliCpu(1000)),
            limit: Some(MilliCpu(500)),
            reservation: Some(MilliCpu(2000)),
        };
        let errs = b.validate("spec.cpu");
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["spec.cpu.reservation", "spec.cpu.request"]);
        assert!(errs[1].reason.contains("request 1 exceeds limit 500m"));
        let ok = ResourceBounds {
            request: Some(Bytes(2)),
            limit: Some(Bytes(3)),
            reservation: Some(Bytes(1)),
        };
        assert!(ok.validate("m").is_empty());
        let zero = ResourceBounds {
            limit: Some(Bytes(0)),
            ..Default::default()
        };
        assert_eq!(zero.validate("m")[0].path, "m.limit");
    }

    #[test]
    fn is_valid_agrees_with_validate() {
        let vals = [None, Some(Bytes(0)), Some(Bytes(1)), Some(Bytes(2))];
        for request in vals {
            for limit in vals {
                for reservation in vals {
                    let b = ResourceBounds {
                        request,
                        limit,
                        reservation,
                    };
                    assert_eq!(b.is_valid(), b.validate("p").is_empty(), "{b:?}");
                }
            }
        }
    }

    #[test]
    fn profile_unknown_fields_refused() {
        let e = serde_json::from_str::<ResourceProfile>(r#"{"cpu":{"requst":"1"}}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `requst`"), "{e}");
    }

    #[test]
    fn dedicated_cpus_rules() {
        let p: ResourceProfile =
            serde_json::from_str(r#"{"cpu":{"request":"2","limit":"2"},"dedicatedCpus":true}"#)
                .unwrap();
        assert!(p.validate("r").is_empty());
        assert_eq!(p.dedicated_cores(), Some(2));
        let p: ResourceProfile =
            serde_json::from_str(r#"{"cpu":{"limit":"1500m"},"dedicatedCpus":true}"#).unwrap();
        assert_eq!(p.validate("r")[0].path, "r.dedicatedCpus");
        let p: ResourceProfile =
            serde_json::from_str(r#"{"cpu":{"limit":"1"},"dedicatedCpus":2}"#).unwrap();
        assert!(p.validate("r")[0].reason.contains("exceed cpu.limit"));
        let p: ResourceProfile =
            serde_json::from_str(r#"{"cpu":{"request":"500m"},"dedicatedCpus":2}"#).unwrap();
        assert_eq!(p.cpu_demand(), MilliCpu(2000));
    }

    #[test]
    fn profile_round_trips_through_json() {
        let p: ResourceProfile = serde_json::from_str(
            r#"{"cpu":{"request":"500m","limit":"1","reservation":"250m"},
                "memory":{"request":"256Mi","limit":"512Mi"},
                "network":{"egress":{"reservation":"10MB/s","limit":"100Mi/s"}},
                "io":{"read":{"limit":"50M/s"}},"pids":128}"#,
        )
        .unwrap();
        let s = serde_json::to_string(&p).unwrap();
        let back: ResourceProfile = serde_json::from_str(&s).unwrap();
        assert_eq!(p, back);
        assert!(p.has_reservation());
        assert_eq!(p.cpu_demand(), MilliCpu(500));
    }
}
