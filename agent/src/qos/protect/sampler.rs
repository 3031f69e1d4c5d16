//! The fast sampler: each watched workload's counters read through the cgroup
//! layer's stat readers every tick, kept in a short ring so usage and stall can
//! be taken over a sliding window.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::cgroup::{
    AnyBackend, CgroupBackend, CgroupError, CgroupPath, CgroupStats, OpenMode, StatsReader,
};

/// Counters at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When read.
    pub at: Instant,
    /// CPU time, ns.
    pub cpu_ns: u64,
    /// Memory charged, bytes.
    pub memory: u64,
    /// `(major, minor, read bytes, written bytes)` per device.
    pub io: Vec<(u32, u32, u64, u64)>,
    /// PSI `some` totals in µs: cpu, memory, io.
    pub stall_us: [Option<u64>; 3],
}

/// Rates over a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    /// Window actually covered.
    pub span: Duration,
    /// CPUs used.
    pub cpu_cores: f64,
    /// Memory now, bytes.
    pub memory: u64,
    /// `(major, minor, read B/s, write B/s)` per device.
    pub io: Vec<(u32, u32, f64, f64)>,
    /// Share of the window stalled (PSI `some`): cpu, memory, io.
    pub stall: [f64; 3],
}

impl Rates {
    /// Read bytes/s over all devices.
    pub fn io_read(&self) -> f64 {
        self.io.iter().map(|d| d.2).sum()
    }
    /// Written bytes/s over all devices.
    pub fn io_write(&self) -> f64 {
        self.io.iter().map(|d| d.3).sum()
    }
}

/// The samples of one cgroup.
#[derive(Debug)]
pub struct Series {
    reader: StatsReader,
    stats: CgroupStats,
    ring: VecDeque<Sample>,
    keep: Duration,
}

impl Series {
    /// Opens the stat files of `cg`; keeps samples covering `keep`.
    pub fn open(
        backend: &AnyBackend,
        cg: &CgroupPath,
        keep: Duration,
    ) -> Result<Self, CgroupError> {
        Ok(Series {
            reader: backend.open_stats(cg, OpenMode::KeepOpen)?,
            stats: CgroupStats::default(),
            ring: VecDeque::new(),
            keep,
        })
    }

    /// Reads one sample.
    pub fn read(&mut self, buf: &mut Vec<u8>, now: Instant) -> Result<(), CgroupError> {
        self.reader.read(buf, &mut self.stats)?;
        let s = &self.stats;
        let sample = Sample {
            at: now,
            cpu_ns: s.cpu.map_or(0, |c| c.usage_ns),
            memory: s.memory.map_or(0, |m| m.current),
            io: s
                .io
                .iter()
                .flatten()
                .map(|d| (d.major, d.minor, d.rbytes, d.wbytes))
                .collect(),
            stall_us: [
                s.psi.cpu.map(|p| p.some.total_us),
                s.psi.memory.map(|p| p.some.total_us),
                s.psi.io.map(|p| p.some.total_us),
            ],
        };
        self.ring.push_back(sample);
        while self
            .ring
            .front()
            .is_some_and(|f| now.saturating_duration_since(f.at) > self.keep)
            && self.ring.len() > 2
        {
            self.ring.pop_front();
        }
        Ok(())
    }

    /// Rates between the newest sample and the oldest one within `window`
    /// (at least two samples apart); `None` until two samples exist.
    pub fn rates(&self, window: Duration) -> Option<Rates> {
        let last = self.ring.back()?;
        let first = self
            .ring
            .iter()
            .find(|s| last.at.saturating_duration_since(s.at) <= window && s.at < last.at)
            .or_else(|| self.ring.iter().rev().nth(1))?;
        Some(rates_between(first, last))
    }

    /// The newest sample.
    pub fn last(&self) -> Option<&Sample> {
        self.ring.back()
    }
}

/// Rates from `a` to `b`. Counters that went backwards (cgroup recreated) count as 0.
pub fn rates_between(a: &Sample, b: &Sample) -> Rates {
    let span = b.at.saturating_duration_since(a.at);
    let secs = span.as_secs_f64().max(1e-6);
    let stall = |i: usize| match (a.stall_us[i], b.stall_us[i]) {
        (Some(x), Some(y)) => (y.saturating_sub(x) as f64 / 1e6 / secs).min(1.0),
        _ => 0.0,
    };
    let io =
        b.io.iter()
            .map(|&(ma, mi, r, w)| {
                let (r0, w0) =
                    a.io.iter()
                        .find(|d| (d.0, d.1) == (ma, mi))
                        .map_or((r, w), |d| (d.2, d.3));
                (
                    ma,
                    mi,
                    r.saturating_sub(r0) as f64 / secs,
                    w.saturating_sub(w0) as f64 / secs,
                )
            })
            .collect();
    Rates {
        span,
        cpu_cores: b.cpu_ns.saturating_sub(a.cpu_ns) as f64 / 1e9 / secs,
        memory: b.memory,
        io,
        stall: [stall(0), stall(1), stall(2)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, cpu_ns: u64, rb: u64, stall: u64) -> Sample {
        Sample {
            at,
            cpu_ns,
            memory: 7,
            io: vec![(254, 0, rb, 0)],
            stall_us: [Some(stall), None, Some(0)],
        }
    }

    #[test]
    fn rates_over_a_window() {
        let t0 = Instant::now();
        let a = sample(t0, 0, 0, 0);
        let b = sample(
            t0 + Duration::from_millis(50),
            75_000_000,
            5_000_000,
            25_000,
        );
        let r = rates_between(&a, &b);
        assert!((r.cpu_cores - 1.5).abs() < 1e-9);
        assert!((r.io_read() - 100_000_000.0).abs() < 1.0);
        assert!((r.stall[0] - 0.5).abs() < 1e-9);
        assert_eq!(r.stall[1], 0.0);
        assert_eq!(r.memory, 7);
        // A counter that went backwards does not produce a negative rate.
        let c = sample(t0 + Duration::from_millis(60), 1, 0, 0);
        assert_eq!(rates_between(&b, &c).cpu_cores, 0.0);
    }
}
