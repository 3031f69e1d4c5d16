//! cgroup v2 `cpu` controller files.

use crate::cgroup::parse::flat_keyed;
use crate::cgroup::stats::{CpuStats, Throttling};

/// Usage and (with the controller enabled) bandwidth counters; exists in every cgroup.
pub const STAT: &str = "cpu.stat";
/// Proportional weight (1–10000).
pub const WEIGHT: &str = "cpu.weight";
/// Bandwidth limit `$MAX $PERIOD`.
pub const MAX: &str = "cpu.max";
/// The kernel's default `cpu.max` period in microseconds.
pub const DEFAULT_PERIOD_US: u64 = 100_000;
/// Default `cpu.weight` of a new cgroup.
pub const DEFAULT_WEIGHT: u64 = 100;

/// Parses `cpu.max` (`max 100000` or `150000 100000`) into `(quota_us, period_us)`;
/// `None` quota means unlimited.
pub fn parse_max(text: &str) -> Option<(Option<u64>, u64)> {
    let mut it = text.split_whitespace();
    let quota = match it.next()? {
        "max" => None,
        q => Some(q.parse().ok()?),
    };
    let period = it.next()?.parse().ok()?;
    Some((quota, period))
}

/// Parses `cpu.stat`. Throttling is present only when the cpu controller is enabled.
pub fn parse_stat(buf: &[u8]) -> Option<CpuStats> {
    let mut usage = None;
    let mut out = CpuStats::default();
    let mut thr = Throttling::default();
    let mut has_thr = false;
    flat_keyed(buf, |k, v| match k {
        b"usage_usec" => usage = Some(v.saturating_mul(1000)),
        b"user_usec" => out.user_ns = Some(v.saturating_mul(1000)),
        b"system_usec" => out.system_ns = Some(v.saturating_mul(1000)),
        b"nr_periods" => {
            thr.periods = v;
            has_thr = true;
        }
        b"nr_throttled" => thr.throttled_periods = v,
        b"throttled_usec" => thr.throttled_ns = v.saturating_mul(1000),
        _ => {}
    });
    out.usage_ns = usage?;
    out.throttling = has_thr.then_some(thr);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_controller() {
        // Format from a v2 host with the cpu controller enabled.
        let s = parse_stat(b"usage_usec 8290000\nuser_usec 5170000\nsystem_usec 3120000\nnice_usec 0\ncore_sched.force_idle_usec 0\nnr_periods 120\nnr_throttled 30\nthrottled_usec 2500000\nnr_bursts 0\nburst_usec 0\n").unwrap();
        assert_eq!(s.usage_ns, 8_290_000_000);
        assert_eq!(s.user_ns, Some(5_170_000_000));
        assert_eq!(
            s.throttling,
            Some(Throttling {
                periods: 120,
                throttled_periods: 30,
                throttled_ns: 2_500_000_000
            })
        );
    }

    #[test]
    fn max_format() {
        assert_eq!(parse_max("max 100000\n"), Some((None, 100_000)));
        assert_eq!(parse_max("150000 100000"), Some((Some(150_000), 100_000)));
        assert_eq!(parse_max("x 1"), None);
    }

    #[test]
    fn without_controller() {
        // Captured from /sys/fs/cgroup/unified/<child>/cpu.stat on the hybrid hosts.
        let s = parse_stat(b"usage_usec 28904\nuser_usec 4817\nsystem_usec 24086\nnice_usec 0\n")
            .unwrap();
        assert_eq!(s.usage_ns, 28_904_000);
        assert!(s.throttling.is_none());
        assert!(parse_stat(b"").is_none());
    }
}
