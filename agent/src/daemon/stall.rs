//! A probe of the async runtime's responsiveness: a timer that should fire every
//! 50 ms, and a warning when it fires much later — a worker thread was blocked
//! (a lock, a long computation on the runtime), and with two workers every RPC,
//! raft heartbeat included, waited as long.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType::{Counter, Gauge};
use tracing::warn;

use crate::metrics::family;

/// How often the probe ticks. Each tick wakes the runtime's parked worker (a
/// timer earlier than the one it sleeps on): at 10 ms that was 86 % of an idle
/// agent's cross-thread wake-ups, and a runtime that is never idle costs most
/// where the agent sits beside the workloads it protects. A stall of over
/// 150 ms is always seen; one of 100-150 ms when it covers a tick's deadline
/// by over 100 ms.
const TICK: Duration = Duration::from_millis(50);
/// Lateness worth a warning: raft's heartbeat (openraft's AppendEntries timeout).
const WARN_AFTER: Duration = Duration::from_millis(100);

/// The worst lateness seen (milliseconds), for `/metrics`.
#[derive(Debug, Default)]
pub struct StallProbe {
    worst_ms: AtomicU64,
    stalls: AtomicU64,
}

impl StallProbe {
    /// Starts the probe on the current runtime.
    pub fn spawn() -> Arc<Self> {
        let probe = Arc::new(Self::default());
        let p = Arc::clone(&probe);
        tokio::spawn(async move {
            let mut last_warn: Option<Instant> = None;
            loop {
                let asked = Instant::now();
                tokio::time::sleep(TICK).await;
                let late = asked.elapsed().saturating_sub(TICK);
                if late < WARN_AFTER {
                    continue;
                }
                let ms = late.as_millis() as u64;
                p.worst_ms.fetch_max(ms, Ordering::Relaxed);
                p.stalls.fetch_add(1, Ordering::Relaxed);
                if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    last_warn = Some(Instant::now());
                    warn!(
                        late_ms = ms,
                        "the async runtime stalled: a 50 ms timer fired late (a worker thread was blocked); RPCs and raft heartbeats waited as long"
                    );
                }
            }
        });
        probe
    }

    /// Stalls over 100 ms seen since start.
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    /// The longest stall seen (ms).
    pub fn worst_ms(&self) -> u64 {
        self.worst_ms.load(Ordering::Relaxed)
    }
}

/// `/metrics`: how often and how long the runtime stalled.
#[derive(Debug)]
pub struct StallCollector(pub Arc<StallProbe>);

impl Collector for StallCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        family(
            &mut enc,
            "daros_runtime_stalls",
            "Times darosd's async runtime answered a 50 ms timer over 100 ms late (a blocked worker thread: RPCs and raft heartbeats waited as long).",
            Counter,
            vec![(vec![], self.0.stalls() as f64)],
        )?;
        family(
            &mut enc,
            "daros_runtime_stall_max_seconds",
            "The longest of those stalls since darosd started.",
            Gauge,
            vec![(vec![], self.0.worst_ms() as f64 / 1000.0)],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime blocked for 250 ms is seen as a stall of about that length.
    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_runtime_is_counted_and_measured() {
        let probe = StallProbe::spawn();
        tokio::time::sleep(Duration::from_millis(30)).await;
        // The only worker thread is this one: nothing else runs meanwhile.
        std::thread::sleep(Duration::from_millis(250));
        let deadline = Instant::now() + Duration::from_secs(5);
        while probe.stalls() == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(probe.stalls() >= 1, "no stall seen");
        assert!(probe.worst_ms() >= 200, "worst {} ms", probe.worst_ms());
    }
}
