//! Caps and the token bucket parameters that encode them for the eBPF program.
//!
//! The program runs the bucket in GCRA form: a single "theoretical arrival time" (TAT) that each
//! packet pushes forward by `len * ns_per_byte`. A packet conforms while the TAT is at most
//! `burst_ns` ahead of now; up to `debt_ns` further it passes with congestion notification
//! (egress: the CN bit makes TCP cut its window without losing the packet; ingress: ECN CE);
//! beyond that it is dropped (egress with CN, so TCP keeps the segment queued instead of
//! waiting for a retransmission timer). Division happens here, never per packet.

use serde::{Deserialize, Serialize};

use crate::abi::{BucketCfg, CFG_F_ECN, NS_PER_BYTE_SHIFT};

/// Smallest cap: below 1 kB/s a single loopback skb would take minutes to pay off.
pub const MIN_RATE_BPS: u64 = 1_000;
/// Largest cap: 100 GB/s, far above any NIC today; keeps the fixed point exact enough.
pub const MAX_RATE_BPS: u64 = 100_000_000_000;
/// Smallest burst. Loopback and GSO skbs reach 64 KiB and more (the stack hands whole TSO
/// segments to cgroup_skb), so a smaller burst would make single packets non-conforming.
pub const MIN_BURST_BYTES: u64 = 256 * 1024;
/// Default burst window: the bucket absorbs this much time at the capped rate.
pub const DEFAULT_BURST_MS: u64 = 20;
/// Depth of the debt zone (pass with notification) in time at the capped rate. A packet
/// dropped locally while the socket has nothing in flight leaves TCP waiting for its probe
/// timer (at least TCP_RTO_MIN, 200 ms); the bucket must keep that much credit, or the stall
/// is throughput lost below the cap. Measured in docs/ebpf.md.
pub const DEBT_WINDOW_NS: u64 = 250_000_000;

/// A bandwidth cap on one direction of one workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cap {
    /// Bytes per second of L3 traffic (IP header + payload, as the stack sees it).
    pub rate_bps: u64,
    /// Bucket depth in bytes; default `max(256 KiB, 20 ms at rate_bps)`.
    #[serde(default)]
    pub burst_bytes: Option<u64>,
    /// Depth of the debt zone beyond the burst, in ms at `rate_bps` (packets pass with
    /// congestion notification there); default [`DEBT_WINDOW_NS`].
    #[serde(default)]
    pub debt_ms: Option<u64>,
}

/// Why a cap was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    /// `rate_bps` out of range.
    #[error("cap rate_bps = {0}: must be between {MIN_RATE_BPS} and {MAX_RATE_BPS} bytes/s")]
    Rate(u64),
    /// `debt_ms` out of range.
    #[error("cap debt_ms = {0}: must be between 0 and 10000")]
    Debt(u64),
    /// `burst_bytes` too small.
    #[error(
        "cap burst_bytes = {0}: must be at least {MIN_BURST_BYTES} (loopback/GSO skbs are up to 64 KiB and more)"
    )]
    Burst(u64),
}

impl Cap {
    /// A cap of `rate_bps` with the default burst.
    pub fn rate(rate_bps: u64) -> Self {
        Self {
            rate_bps,
            burst_bytes: None,
            debt_ms: None,
        }
    }

    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), CapError> {
        if !(MIN_RATE_BPS..=MAX_RATE_BPS).contains(&self.rate_bps) {
            return Err(CapError::Rate(self.rate_bps));
        }
        if let Some(b) = self.burst_bytes
            && b < MIN_BURST_BYTES
        {
            return Err(CapError::Burst(b));
        }
        if let Some(d) = self.debt_ms
            && d > 10_000
        {
            return Err(CapError::Debt(d));
        }
        Ok(())
    }

    /// The burst actually used.
    pub fn effective_burst(&self) -> u64 {
        self.burst_bytes.unwrap_or_else(|| {
            let window = u128::from(self.rate_bps) * u128::from(DEFAULT_BURST_MS) / 1000;
            u64::try_from(window)
                .unwrap_or(u64::MAX)
                .max(MIN_BURST_BYTES)
        })
    }
}

/// Bucket parameters for one direction: `cap` is the effective cap (None = uncapped),
/// `configured` and `floor_cap` are stored alongside for read-back after a restart.
pub(crate) fn bucket_cfg(
    cap: Option<Cap>,
    configured: Option<Cap>,
    floor_cap: Option<u64>,
    ecn: bool,
) -> Result<BucketCfg, CapError> {
    let mut cfg = BucketCfg {
        configured_bps: configured.map_or(0, |c| c.rate_bps),
        configured_burst: configured.and_then(|c| c.burst_bytes).unwrap_or(0),
        configured_debt_ms: configured
            .and_then(|c| c.debt_ms)
            .map_or(0, |d| u32::try_from(d + 1).unwrap_or(u32::MAX)),
        floor_cap_bps: floor_cap.unwrap_or(0),
        flags: if ecn { CFG_F_ECN } else { 0 },
        ..BucketCfg::default()
    };
    let Some(cap) = cap else {
        return Ok(cfg);
    };
    cap.validate()?;
    let rate = u128::from(cap.rate_bps);
    let burst = cap.effective_burst();
    let ns =
        |bytes: u64| u64::try_from(u128::from(bytes) * 1_000_000_000 / rate).unwrap_or(u64::MAX);
    cfg.ns_per_byte = u64::try_from(((1_000_000_000u128 << NS_PER_BYTE_SHIFT) + rate / 2) / rate)
        .unwrap_or(u64::MAX)
        .max(1);
    cfg.burst_ns = ns(burst);
    cfg.debt_ns = match cap.debt_ms {
        Some(ms) => ms * 1_000_000,
        None => ns(burst).max(DEBT_WINDOW_NS),
    };
    cfg.rate_bps = cap.rate_bps;
    cfg.burst_bytes = burst;
    Ok(cfg)
}

/// The operator cap stored in `cfg`, as it was configured.
pub(crate) fn configured_cap(cfg: &BucketCfg) -> Option<Cap> {
    (cfg.configured_bps != 0).then(|| Cap {
        rate_bps: cfg.configured_bps,
        burst_bytes: (cfg.configured_burst != 0).then_some(cfg.configured_burst),
        debt_ms: cfg.configured_debt_ms.checked_sub(1).map(u64::from),
    })
}

/// The tighter of two optional caps.
pub(crate) fn tighter(a: Option<Cap>, b: Option<Cap>) -> Option<Cap> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.rate_bps <= b.rate_bps { a } else { b }),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_cost_matches_the_rate() {
        for rate in [MIN_RATE_BPS, 10_000_000, 50_000_000, 12_500_000_000] {
            let cfg = bucket_cfg(Some(Cap::rate(rate)), None, None, false).unwrap();
            // cost of one second worth of bytes, computed the way the program does
            let cost = (u128::from(rate) * u128::from(cfg.ns_per_byte)) >> NS_PER_BYTE_SHIFT;
            let err = (cost as f64 - 1e9).abs() / 1e9;
            assert!(err < 1e-4, "rate {rate}: one second costs {cost} ns");
        }
    }

    #[test]
    fn default_burst_covers_a_loopback_skb_and_scales_with_rate() {
        assert_eq!(Cap::rate(10_000_000).effective_burst(), MIN_BURST_BYTES);
        assert_eq!(Cap::rate(50_000_000).effective_burst(), 1_000_000);
        let cfg = bucket_cfg(Some(Cap::rate(50_000_000)), None, None, true).unwrap();
        assert_eq!(cfg.burst_ns, 20_000_000);
        assert_eq!(cfg.debt_ns, DEBT_WINDOW_NS);
        assert_eq!(cfg.flags, CFG_F_ECN);
    }

    #[test]
    fn invalid_caps_name_the_field() {
        let e = bucket_cfg(Some(Cap::rate(10)), None, None, false).unwrap_err();
        assert!(e.to_string().contains("rate_bps = 10"), "{e}");
        let e = Cap {
            rate_bps: 1_000_000,
            burst_bytes: Some(1000),
            debt_ms: None,
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("burst_bytes = 1000"), "{e}");
    }

    #[test]
    fn uncapped_direction_keeps_read_back_fields() {
        let cfg = bucket_cfg(None, None, Some(0), false).unwrap();
        assert_eq!(cfg.ns_per_byte, 0);
        let cfg = bucket_cfg(
            Some(Cap::rate(5_000_000)),
            Some(Cap::rate(9_000_000)),
            Some(5_000_000),
            false,
        )
        .unwrap();
        assert_eq!(
            (cfg.rate_bps, cfg.configured_bps, cfg.floor_cap_bps),
            (5_000_000, 9_000_000, 5_000_000)
        );
    }

    #[test]
    fn configured_cap_round_trips() {
        for cap in [
            Cap::rate(5_000_000),
            Cap {
                rate_bps: 7_000_000,
                burst_bytes: Some(MIN_BURST_BYTES * 2),
                debt_ms: Some(0),
            },
            Cap {
                rate_bps: 7_000_000,
                burst_bytes: None,
                debt_ms: Some(900),
            },
        ] {
            let cfg = bucket_cfg(Some(cap), Some(cap), None, false).unwrap();
            assert_eq!(configured_cap(&cfg), Some(cap));
        }
        assert_eq!(
            configured_cap(&bucket_cfg(None, None, None, false).unwrap()),
            None
        );
    }

    #[test]
    fn tighter_picks_the_lower_rate() {
        let a = Some(Cap::rate(5));
        let b = Some(Cap::rate(7));
        assert_eq!(tighter(a, b), a);
        assert_eq!(tighter(None, b), b);
        assert_eq!(tighter(None, None), None);
    }
}
