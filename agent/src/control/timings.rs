//! Local timings of this server's control plane (measured where they happen,
//! not replicated): how long the state machine takes per command kind (an
//! `Apply` is an admission and arbitration round), how long a write takes to
//! commit (proposal latency), and the size of the last snapshot.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds, in seconds, of the timing histograms.
pub const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

/// A histogram over [`BUCKETS`] (per-bucket counts, the last one +Inf).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timing {
    /// Observations per bucket.
    pub buckets: Vec<u64>,
    /// Observations.
    pub count: u64,
    /// Sum in seconds.
    pub sum: f64,
}

impl Timing {
    fn observe(&mut self, d: Duration) {
        if self.buckets.len() != BUCKETS.len() + 1 {
            self.buckets = vec![0; BUCKETS.len() + 1];
        }
        let s = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(BUCKETS.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum += s;
    }
}

/// The timings of one server.
#[derive(Debug, Default)]
pub struct Timings {
    apply: Mutex<BTreeMap<&'static str, Timing>>,
    proposal: Mutex<Timing>,
    snapshot_bytes: AtomicU64,
    unchanged: Mutex<BTreeMap<&'static str, u64>>,
    /// Leader dispatch sends: whole work, confirmed by digest, failed.
    sends: [AtomicU64; 3],
}

impl Timings {
    /// The state machine applied a `kind` command in `d`.
    pub fn applied(&self, kind: &'static str, d: Duration) {
        if let Ok(mut m) = self.apply.lock() {
            m.entry(kind).or_default().observe(d);
        }
    }

    /// A write committed (or failed) after `d`.
    pub fn proposed(&self, d: Duration) {
        if let Ok(mut t) = self.proposal.lock() {
            t.observe(d);
        }
    }

    /// A `kind` write was answered without a log entry: it changed nothing.
    pub fn unchanged(&self, kind: &'static str) {
        if let Ok(mut m) = self.unchanged.lock() {
            *m.entry(kind).or_default() += 1;
        }
    }

    /// Writes answered without a log entry, by kind.
    pub fn unchanged_counts(&self) -> BTreeMap<&'static str, u64> {
        self.unchanged.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// A dispatch round ended: nodes sent their whole work, nodes that held it
    /// already (confirmed by digest), sends that failed.
    pub fn dispatched(&self, whole: usize, confirmed: usize, failed: usize) {
        for (c, n) in self.sends.iter().zip([whole, confirmed, failed]) {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Dispatch sends so far by outcome (`whole`, `confirmed`, `failed`).
    pub fn sends(&self) -> [(&'static str, u64); 3] {
        let [w, c, f] = &self.sends;
        [
            ("whole", w.load(Ordering::Relaxed)),
            ("confirmed", c.load(Ordering::Relaxed)),
            ("failed", f.load(Ordering::Relaxed)),
        ]
    }

    /// A snapshot of `bytes` was written.
    pub fn snapshot(&self, bytes: usize) {
        self.snapshot_bytes.store(bytes as u64, Ordering::Relaxed);
    }

    /// Copies: apply timings by kind, proposal timing, last snapshot size.
    pub fn read(&self) -> (BTreeMap<&'static str, Timing>, Timing, u64) {
        (
            self.apply.lock().map(|m| m.clone()).unwrap_or_default(),
            self.proposal.lock().map(|t| t.clone()).unwrap_or_default(),
            self.snapshot_bytes.load(Ordering::Relaxed),
        )
    }
}
