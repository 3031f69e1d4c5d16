//! Rates from monotonically increasing byte counters: a short sliding window per key, so the
//! floor loop reacts within a few ticks without following every single 64 KiB skb.

use std::collections::{BTreeMap, VecDeque};

/// Sliding-window rate meter over counters keyed by `K`.
#[derive(Debug, Clone)]
pub struct RateMeter<K: Ord + Clone> {
    window_ns: u64,
    samples: BTreeMap<K, VecDeque<(u64, u64)>>,
}

impl<K: Ord + Clone> RateMeter<K> {
    /// A meter averaging over `window_ns`.
    pub fn new(window_ns: u64) -> Self {
        Self {
            window_ns: window_ns.max(1),
            samples: BTreeMap::new(),
        }
    }

    /// Records counter value `bytes` of `key` at monotonic time `t_ns`. A counter that went
    /// backwards (the workload was re-registered) restarts the history.
    pub fn observe(&mut self, key: &K, t_ns: u64, bytes: u64) {
        let q = self.samples.entry(key.clone()).or_default();
        if q.back().is_some_and(|&(t, b)| bytes < b || t_ns < t) {
            q.clear();
        }
        q.push_back((t_ns, bytes));
        // Keep one sample at or beyond the window edge as the base of the difference.
        while q.len() > 2
            && q.get(1)
                .is_some_and(|&(t, _)| t_ns.saturating_sub(t) >= self.window_ns)
        {
            q.pop_front();
        }
    }

    /// Bytes per second over the window ending at the last observation, if two samples exist.
    pub fn rate(&self, key: &K) -> Option<f64> {
        let q = self.samples.get(key)?;
        let (&(t0, b0), &(t1, b1)) = (q.front()?, q.back()?);
        (t1 > t0).then(|| (b1 - b0) as f64 * 1e9 / (t1 - t0) as f64)
    }

    /// Forgets keys for which `keep` is false.
    pub fn retain(&mut self, keep: impl Fn(&K) -> bool) {
        self.samples.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_over_window() {
        let mut m = RateMeter::new(30_000_000);
        for i in 0..10u64 {
            m.observe(&"a", i * 10_000_000, i * 1_000_000); // 1 MB per 10 ms = 100 MB/s
        }
        let r = m.rate(&"a").unwrap();
        assert!((r - 100e6).abs() < 1.0, "{r}");
        assert_eq!(m.rate(&"b"), None);
    }

    #[test]
    fn window_follows_a_change_quickly() {
        let mut m = RateMeter::new(30_000_000);
        let mut bytes = 0;
        for i in 0..10u64 {
            m.observe(&1, i * 10_000_000, bytes);
            bytes += 100_000; // 10 MB/s
        }
        for i in 10..14u64 {
            m.observe(&1, i * 10_000_000, bytes);
            bytes += 2_000_000; // 200 MB/s
        }
        let r = m.rate(&1).unwrap();
        assert!(r > 190e6, "after a 30 ms window the new rate shows: {r}");
    }

    #[test]
    fn counter_reset_restarts_history() {
        let mut m = RateMeter::new(30_000_000);
        m.observe(&1, 0, 5_000);
        m.observe(&1, 10_000_000, 10_000);
        m.observe(&1, 20_000_000, 100);
        assert_eq!(m.rate(&1), None);
        m.observe(&1, 30_000_000, 1100);
        assert!((m.rate(&1).unwrap() - 100_000.0).abs() < 1.0);
    }
}
