//! Rates from monotonic counters.
//!
//! A rate exists only when the previous sample is known, time moved forward and
//! the counter did not go backwards (reset, wrap or a recreated cgroup); it is
//! then finite and non-negative. Everything else yields `None`, never a negative
//! number or NaN.

use std::time::{Duration, Instant};

/// `(cur - prev) / dt`, or `None` when that is not a meaningful rate.
pub fn rate(prev: u64, cur: u64, dt: Duration) -> Option<f64> {
    if cur < prev || dt.is_zero() {
        return None;
    }
    let r = (cur - prev) as f64 / dt.as_secs_f64();
    (r.is_finite() && r >= 0.0).then_some(r)
}

/// `part_delta / whole_delta` over one interval (e.g. throttled periods / periods);
/// `None` when either counter went backwards or nothing elapsed.
pub fn ratio(prev_part: u64, cur_part: u64, prev_whole: u64, cur_whole: u64) -> Option<f64> {
    if cur_part < prev_part || cur_whole <= prev_whole {
        return None;
    }
    let r = (cur_part - prev_part) as f64 / (cur_whole - prev_whole) as f64;
    (r.is_finite() && r >= 0.0).then_some(r.min(1.0))
}

/// The previous value and time of one counter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counter {
    last: Option<(u64, Instant)>,
}

impl Counter {
    /// Records `value` observed at `at` and returns the rate since the previous
    /// observation. A counter that went backwards restarts from `value`.
    pub fn update(&mut self, value: u64, at: Instant) -> Option<f64> {
        let r = self
            .last
            .and_then(|(v, t)| rate(v, value, at.checked_duration_since(t)?));
        self.last = Some((value, at));
        r
    }

    /// Forgets the previous observation.
    pub fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn basic() {
        assert_eq!(rate(100, 300, Duration::from_secs(2)), Some(100.0));
        assert_eq!(rate(300, 100, Duration::from_secs(2)), None);
        assert_eq!(rate(1, 2, Duration::ZERO), None);
        assert_eq!(ratio(0, 5, 10, 20), Some(0.5));
        assert_eq!(ratio(0, 5, 10, 10), None);
        assert_eq!(ratio(6, 5, 10, 20), None);
    }

    #[test]
    fn counter_restarts_after_reset() {
        let t0 = Instant::now();
        let mut c = Counter::default();
        assert_eq!(c.update(1000, t0), None);
        assert_eq!(c.update(3000, t0 + Duration::from_secs(1)), Some(2000.0));
        // cgroup recreated: counter starts again from a small value
        assert_eq!(c.update(10, t0 + Duration::from_secs(2)), None);
        assert_eq!(c.update(20, t0 + Duration::from_secs(3)), Some(10.0));
        c.reset();
        assert_eq!(c.update(30, t0 + Duration::from_secs(4)), None);
    }

    proptest! {
        /// Whatever the counter does (resets, wraps, huge jumps) and however time
        /// advances (including not at all), a rate is never negative, NaN or infinite.
        #[test]
        fn rates_are_never_negative_or_nan(
            steps in prop::collection::vec((any::<u64>(), 0u64..5_000_000_000), 1..64)
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut c = Counter::default();
            for (value, dt_ns) in steps {
                now += Duration::from_nanos(dt_ns);
                if let Some(r) = c.update(value, now) {
                    prop_assert!(r.is_finite());
                    prop_assert!(r >= 0.0);
                }
            }
        }

        /// For a counter that only grows, the rate is exactly delta / dt.
        #[test]
        fn monotonic_counters_give_exact_rates(
            start in 0u64..1u64 << 60,
            deltas in prop::collection::vec((0u64..1u64 << 40, 1u64..10_000_000_000), 1..32)
        ) {
            let mut now = Instant::now();
            let mut c = Counter::default();
            let mut v = start;
            c.update(v, now);
            for (d, dt_ns) in deltas {
                v += d;
                now += Duration::from_nanos(dt_ns);
                let r = c.update(v, now).unwrap();
                let expected = d as f64 / (dt_ns as f64 / 1e9);
                prop_assert!((r - expected).abs() <= expected * 1e-9 + 1e-9);
            }
        }

        /// A ratio is within 0..=1 or absent.
        #[test]
        fn ratios_are_bounded(a in any::<u64>(), b in any::<u64>(), c in any::<u64>(), d in any::<u64>()) {
            if let Some(r) = ratio(a, b, c, d) {
                prop_assert!((0.0..=1.0).contains(&r));
            }
        }
    }
}
