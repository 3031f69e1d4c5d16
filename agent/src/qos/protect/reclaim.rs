//! The node's own reclaim, as the protection loop sees it: pages kswapd scanned
//! (`pgscan_kswapd` in `/proc/vmstat`) over a sliding window.
//!
//! Why the loop watches it: `memory.min` keeps a reserved workload's pages, but
//! not its CPU. An allocating BestEffort workload that fills the node wakes
//! kswapd, a kernel thread outside every cgroup and weight, and in the
//! isolation bench's memory scenario kswapd took 0.5-1.1 of the VM's two cores
//! for seconds at a time — the seconds the protected reader fell to 54-69 % of
//! its target although none of its pages were touched. Holding the allocating
//! workload's `memory.high` below its usage makes it reclaim its own pages, in
//! its own context, charged to its own CPU weight, and leaves the node's free
//! memory above kswapd's watermark.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cgroup::CgroupError;
use crate::cgroup::fs::StatFile;

/// `/proc/vmstat`, kept open, and its kswapd scan counter over time.
#[derive(Debug)]
pub struct NodeReclaim {
    file: StatFile,
    ring: VecDeque<(Instant, u64)>,
    keep: Duration,
}

impl NodeReclaim {
    /// Opens `vmstat`; `None` where it does not exist.
    pub fn open(vmstat: &Path, keep: Duration) -> Result<Option<Self>, CgroupError> {
        Ok(
            StatFile::open_optional(vmstat.to_path_buf())?.map(|file| NodeReclaim {
                file,
                ring: VecDeque::new(),
                keep,
            }),
        )
    }

    /// Reads one sample, unless the last is younger than an eighth of what it
    /// keeps (the loop keeps twice its 200 ms window, so a sample every 50 ms,
    /// where it ticks every 10 ms: the kernel sums its per-CPU counters for
    /// every read of `/proc/vmstat`).
    pub fn read(&mut self, buf: &mut Vec<u8>, now: Instant) -> Result<(), CgroupError> {
        if self
            .ring
            .back()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) < self.keep / 8)
        {
            return Ok(());
        }
        self.file.read_into(buf)?;
        let scanned = kswapd_scanned(buf);
        self.ring.push_back((now, scanned));
        while self.ring.len() > 2
            && self
                .ring
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > self.keep)
        {
            self.ring.pop_front();
        }
        Ok(())
    }

    /// Pages kswapd scanned between the newest sample and the oldest within
    /// `window` of it; `None` until two samples exist.
    pub fn scanned(&self, window: Duration) -> Option<u64> {
        let (last_at, last) = *self.ring.back()?;
        let first = self
            .ring
            .iter()
            .find(|(at, _)| last_at.saturating_duration_since(*at) <= window && *at < last_at)
            .or_else(|| {
                self.ring
                    .len()
                    .checked_sub(2)
                    .and_then(|i| self.ring.get(i))
            })?;
        Some(last.saturating_sub(first.1))
    }
}

/// `pgscan_kswapd` of a `/proc/vmstat` text (0 where it is missing).
fn kswapd_scanned(text: &[u8]) -> u64 {
    text.split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"pgscan_kswapd "))
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kswapd_scans_over_a_window() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("vmstat");
        let write = |n: u64| {
            std::fs::write(
                &p,
                format!("pgscan_direct 7\npgscan_kswapd {n}\npgscan_khugepaged 0\n"),
            )
            .unwrap()
        };
        write(100);
        let mut r = NodeReclaim::open(&p, Duration::from_secs(1))
            .unwrap()
            .unwrap();
        let mut buf = Vec::new();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        r.read(&mut buf, t0).unwrap();
        assert_eq!(r.scanned(ms(500)), None);
        write(160);
        // Sooner than an eighth of what it keeps: not read.
        r.read(&mut buf, t0 + ms(100)).unwrap();
        assert_eq!(r.scanned(ms(500)), None);
        r.read(&mut buf, t0 + ms(200)).unwrap();
        assert_eq!(r.scanned(ms(500)), Some(60));
        write(160);
        r.read(&mut buf, t0 + ms(1000)).unwrap();
        // The window holds only the last step: nothing scanned in it.
        assert_eq!(r.scanned(ms(500)), Some(0));
        assert_eq!(r.scanned(ms(2000)), Some(60));
    }

    #[test]
    fn a_kernel_without_the_counter_scans_nothing() {
        assert_eq!(kswapd_scanned(b"nr_free_pages 5\n"), 0);
        assert_eq!(kswapd_scanned(b"pgscan_kswapd 42\n"), 42);
        assert!(
            NodeReclaim::open(Path::new("/nonexistent/vmstat"), Duration::ZERO)
                .unwrap()
                .is_none()
        );
    }
}
