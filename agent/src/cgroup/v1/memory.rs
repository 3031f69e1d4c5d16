//! cgroup v1 `memory` controller files.

use crate::cgroup::parse::flat_keyed;

/// Usage in bytes (page cache included).
pub const USAGE: &str = "memory.usage_in_bytes";
/// Breakdown; `total_*` keys include descendants.
pub const STAT: &str = "memory.stat";
/// Times the limit was hit.
pub const FAILCNT: &str = "memory.failcnt";
/// OOM state and `oom_kill` counter.
pub const OOM_CONTROL: &str = "memory.oom_control";
/// Hard limit.
pub const LIMIT: &str = "memory.limit_in_bytes";
/// Soft limit (reclaim target under pressure).
pub const SOFT_LIMIT: &str = "memory.soft_limit_in_bytes";
/// Values at or above this in v1 limit files mean "unlimited" (the kernel
/// prints `PAGE_COUNTER_MAX` pages, about 2^63 bytes).
pub const UNLIMITED_THRESHOLD: u64 = 1 << 62;

/// Extracts hierarchical `(anon, file)` from v1 `memory.stat`
/// (`total_rss`, `total_cache`; the local `rss`/`cache` if totals are absent).
pub fn parse_stat(buf: &[u8]) -> (u64, u64) {
    let (mut rss, mut cache, mut trss, mut tcache) = (0, 0, None, None);
    flat_keyed(buf, |k, v| match k {
        b"rss" => rss = v,
        b"cache" => cache = v,
        b"total_rss" => trss = Some(v),
        b"total_cache" => tcache = Some(v),
        _ => {}
    });
    (trss.unwrap_or(rss), tcache.unwrap_or(cache))
}

/// Extracts `oom_kill` from `memory.oom_control` (kernels ≥ 4.13).
pub fn parse_oom_kill(buf: &[u8]) -> Option<u64> {
    let mut n = None;
    flat_keyed(buf, |k, v| {
        if k == b"oom_kill" {
            n = Some(v);
        }
    });
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_preferred() {
        let (a, f) = parse_stat(b"cache 10\nrss 20\nrss_huge 0\ntotal_cache 110\ntotal_rss 220\n");
        assert_eq!((a, f), (220, 110));
        assert_eq!(parse_stat(b"cache 10\nrss 20\n"), (20, 10));
        assert_eq!(
            parse_oom_kill(b"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"),
            Some(3)
        );
    }
}
