//! How much of their IO holds the held workloads use: the share of each
//! `io.max` rate a held workload reads or writes at, averaged over the ticks
//! since the hold last changed. An easing step is worth taking only while it
//! is high (the policy's `widen_use`): a hold far above a workload's mean rate
//! gives it nothing lasting, only room for its surges, and a surge past such
//! a hold is what took the isolation benchmark's reader to 74-78 % of its
//! floor in a second (2026-11-30).

use std::collections::BTreeMap;

use super::sampler::Rates;
use crate::cgroup::v2::io::IoMaxLine;

/// The largest share of a held rate any held workload moved at over its
/// latest window: `None` while nothing is held or nothing measured.
pub fn io_share<'a>(
    holds: impl Iterator<Item = (&'a str, &'a [IoMaxLine])>,
    rates: &BTreeMap<String, Rates>,
) -> Option<f64> {
    let mut share: Option<f64> = None;
    for (id, lines) in holds {
        let Some(r) = rates.get(id) else { continue };
        for l in lines {
            let Some(&(_, _, rd, wr)) = r.io.iter().find(|d| (d.0, d.1) == (l.major, l.minor))
            else {
                continue;
            };
            for (rate, cap) in [(rd, l.rbps), (wr, l.wbps)] {
                if let Some(cap) = cap.filter(|c| *c > 0) {
                    let s = rate / cap as f64;
                    share = Some(share.map_or(s, |m| m.max(s)));
                }
            }
        }
    }
    share
}

/// The mean of the shares seen since the last [`HoldUse::reset`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HoldUse {
    sum: f64,
    n: u32,
}

impl HoldUse {
    /// Starts over (the hold changed).
    pub fn reset(&mut self) {
        *self = HoldUse::default();
    }

    /// Adds one tick's share (nothing when none was measured).
    pub fn add(&mut self, share: Option<f64>) {
        if let Some(s) = share {
            self.sum += s;
            self.n += 1;
        }
    }

    /// The mean share, `None` before the first.
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn line(rbps: Option<u64>, wbps: Option<u64>) -> IoMaxLine {
        IoMaxLine {
            rbps,
            wbps,
            ..IoMaxLine::unlimited(254, 0)
        }
    }

    fn rates(rd: f64, wr: f64) -> Rates {
        Rates {
            span: Duration::from_millis(100),
            io: vec![(254, 0, rd, wr), (8, 0, 9e9, 9e9)],
            ..Rates::default()
        }
    }

    #[test]
    fn the_share_is_the_fullest_rate_of_any_held_workload_on_its_held_device() {
        let a = [line(Some(100 << 20), Some(1 << 20))];
        let b = [line(Some(400 << 20), None)];
        let holds = || [("managed/a", &a[..]), ("managed/b", &b[..])].into_iter();
        let mut r = BTreeMap::new();
        assert_eq!(io_share(holds(), &r), None, "nothing measured");
        // a reads at 60 % of its rate and writes nothing; b reads at 75 %;
        // the unheld device's rates do not count.
        r.insert("managed/a".to_string(), rates(60.0 * 1048576.0, 0.0));
        r.insert("managed/b".to_string(), rates(300.0 * 1048576.0, 0.0));
        assert_eq!(io_share(holds(), &r), Some(0.75));
        // A write rate near its hold counts as much as a read.
        r.insert("managed/a".to_string(), rates(0.0, 0.9 * 1048576.0));
        assert!(io_share(holds(), &r).is_some_and(|s| (s - 0.9).abs() < 1e-9));
        assert_eq!(io_share(std::iter::empty(), &r), None, "nothing held");
    }

    #[test]
    fn the_use_is_averaged_until_the_hold_changes() {
        let mut u = HoldUse::default();
        assert_eq!(u.mean(), None);
        u.add(Some(0.2));
        u.add(None);
        u.add(Some(0.6));
        assert!(u.mean().is_some_and(|m| (m - 0.4).abs() < 1e-9));
        u.reset();
        assert_eq!(u.mean(), None);
    }
}
