//! The scenario all three sides of the gossip comparison run, and the figures each reports
//! (shared by the bench and CI's short run).

use std::time::Duration;

use daros_gossip::membership::LocalInfo;

use super::node_info;

/// The harness's clock for republishing (both sides).
pub const TICK: Duration = Duration::from_millis(100);
/// Every member republishes its usage every `CHURN_TICKS` ticks (5 s), staggered.
pub const CHURN_TICKS: u64 = 50;

/// What both sides run.
pub struct Scenario {
    pub nodes: usize,
    pub window: Duration,
    /// Quiet time after all are alive, before the idle window (joins' broadcasts drain).
    pub settle: Duration,
    pub updates: usize,
    pub kills: usize,
}

impl Scenario {
    /// What member `i` publishes; `marker` lands in its usage (the value that changes).
    pub fn info(&self, i: usize, marker: u64) -> LocalInfo {
        node_info::info(i, marker)
    }

    /// The same key-values as Serf tags (a D-AROS member also publishes role and RPC address).
    pub fn tags(&self, i: usize, marker: u64) -> Vec<(&'static str, String)> {
        let mut t = vec![
            ("role", "client".to_string()),
            ("rpc", "127.0.0.1:7100".to_string()),
        ];
        t.extend(self.info(i, marker).to_kv());
        t
    }

    /// Whether member `i` republishes at `tick` of a churn window.
    pub fn due(&self, i: usize, tick: u64) -> bool {
        (i as u64 + tick).is_multiple_of(CHURN_TICKS)
    }

    /// The `k`-th member killed (distinct, not a seed).
    pub fn victim(&self, k: usize) -> usize {
        3 + (self.nodes / 2 + k * 7) % (self.nodes - 3)
    }
}

/// Bytes and CPU over a window.
pub struct Window {
    /// IP bytes on the gossip ports per second per member (nftables).
    pub bytes_per_node_s: f64,
    /// CPU per member, in cores.
    pub cpu_cores_per_agent: f64,
    /// D-AROS's own count of sealed datagram bytes sent, per member per second.
    pub own_bytes_per_node_s: Option<f64>,
}

/// One side's figures.
pub struct Figures {
    pub nodes: usize,
    pub started_s: f64,
    pub cold_start_s: f64,
    pub idle: Window,
    pub churn: Window,
    pub update_ms: Vec<f64>,
    pub detect_ms: Vec<f64>,
    pub rss_per_agent: f64,
}

impl Figures {
    pub fn summary(&self) -> String {
        format!(
            "alive everywhere {:.1} s; idle {:.1} KiB/s, {:.1} m; republishing {:.1} KiB/s, {:.1} m; updates {:?} ms; kills {:?} ms; {:.1} MiB each",
            self.cold_start_s,
            self.idle.bytes_per_node_s / 1024.0,
            self.idle.cpu_cores_per_agent * 1e3,
            self.churn.bytes_per_node_s / 1024.0,
            self.churn.cpu_cores_per_agent * 1e3,
            round(&self.update_ms),
            round(&self.detect_ms),
            self.rss_per_agent / 1048576.0
        )
    }
}

/// Samples rounded to whole milliseconds.
pub fn round(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.round() as u64).collect()
}
