//! cgroup v1 `cpu` controller files.

use crate::cgroup::parse::flat_keyed;
use crate::cgroup::stats::Throttling;

/// CFS bandwidth counters (`throttled_time` in nanoseconds).
pub const STAT: &str = "cpu.stat";
/// Relative weight (2–262144, default 1024).
pub const SHARES: &str = "cpu.shares";
/// Quota per period in microseconds (-1: unlimited).
pub const CFS_QUOTA_US: &str = "cpu.cfs_quota_us";
/// Period in microseconds.
pub const CFS_PERIOD_US: &str = "cpu.cfs_period_us";
/// Default `cpu.shares`.
pub const DEFAULT_SHARES: u64 = 1024;

/// Parses v1 `cpu.stat`.
pub fn parse_stat(buf: &[u8]) -> Option<Throttling> {
    let mut t = Throttling::default();
    let mut seen = false;
    flat_keyed(buf, |k, v| match k {
        b"nr_periods" => {
            t.periods = v;
            seen = true;
        }
        b"nr_throttled" => t.throttled_periods = v,
        b"throttled_time" => t.throttled_ns = v,
        _ => {}
    });
    seen.then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_cpu_stat() {
        // Captured from /sys/fs/cgroup/cpu/<child>/cpu.stat on the hybrid hosts.
        let t = parse_stat(
            b"nr_periods 50\nnr_throttled 7\nthrottled_time 123456789\nnr_bursts 0\nburst_time 0\n",
        )
        .unwrap();
        assert_eq!(
            t,
            Throttling {
                periods: 50,
                throttled_periods: 7,
                throttled_ns: 123_456_789
            }
        );
        assert!(parse_stat(b"").is_none());
    }
}
