//! Control-plane metrics (issue 16, seed 000 §11.3): counters and latency
//! histograms kept as replicated facts — every replica applies the same
//! commands at the same proposer timestamps, so every server holds the same
//! values and a new leader continues the series — and a view of the state
//! (applications by tenant and phase, what waits and why, instances per node
//! and pool, quota use, node conditions) computed when asked.

use super::Coordinator;
use crate::lifecycle::{Phase, Target, Trigger};
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Upper bounds, in seconds, of the latency histograms' buckets.
pub const LATENCY_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// A latency histogram (per-bucket counts, not cumulative).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// Observations per bucket of [`LATENCY_BUCKETS`] (one more for +Inf).
    pub buckets: Vec<u64>,
    /// Observations.
    pub count: u64,
    /// Sum of the observations, in milliseconds.
    pub sum_ms: u64,
}

impl Histogram {
    /// Adds one observation of `ms` milliseconds.
    pub fn observe(&mut self, ms: u64) {
        if self.buckets.len() != LATENCY_BUCKETS.len() + 1 {
            self.buckets = vec![0; LATENCY_BUCKETS.len() + 1];
        }
        let s = ms as f64 / 1000.0;
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
    }
}

/// Monotonic counters and histograms (never reset, not trimmed by retention).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counters {
    /// Lifecycle transitions, by `to/trigger` (`Running/system`).
    pub transitions: BTreeMap<String, u64>,
    /// Admissions refused, by the first failing rule (`quota.cpu`).
    pub rejections: BTreeMap<String, u64>,
    /// Instances taken by preemption.
    pub preempted_instances: u64,
    /// Instance failures reported, by category (`runtime`, `outOfMemory`).
    pub failures: BTreeMap<String, u64>,
    /// Restarts asked.
    pub restarts: u64,
    /// Admitted → Scheduled.
    pub admission_to_scheduled: Histogram,
    /// Scheduled → Running.
    pub scheduled_to_running: Histogram,
    /// Init-job runs ended, by outcome (`succeeded`, `failed`).
    #[serde(default)]
    pub job_runs: BTreeMap<String, u64>,
    /// How long init-job runs ran (from running to their end).
    #[serde(default)]
    pub job_run_time: Histogram,
    /// How long init-job runs waited placed before they started.
    #[serde(default)]
    pub job_queue_time: Histogram,
    /// Desired → observed convergence, by what started it (`create`,
    /// `update`, `scale`, `start`).
    #[serde(default)]
    pub convergence: BTreeMap<String, Histogram>,
    /// Convergences abandoned (stopped, failed, refused first), by cause.
    #[serde(default)]
    pub convergence_abandoned: BTreeMap<String, u64>,
}

/// Amounts of cpu (cores), memory (bytes) and GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Amounts {
    /// Cores.
    pub cpu: f64,
    /// Bytes.
    pub memory: f64,
    /// GPUs.
    pub gpu: f64,
}

impl From<crate::placement::ResVec> for Amounts {
    fn from(r: crate::placement::ResVec) -> Self {
        Self {
            cpu: r.cpu as f64 / 1000.0,
            memory: r.memory as f64,
            gpu: r.gpu as f64,
        }
    }
}

/// What a pool holds and offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolUse {
    /// Requests placed.
    pub allocated: Amounts,
    /// Capacity of its nodes that take work.
    pub capacity: Amounts,
}

/// The metrics of the coordinator at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricsView {
    /// Applications by (tenant, phase).
    pub applications: BTreeMap<(String, String), u64>,
    /// Applications not running yet, by (tenant, reason code): `admission`,
    /// `arbitration`, `starting`, the refusing rule (`quota.cpu`) or the
    /// placement's main reason (`placement.insufficient-cpu`).
    pub pending: BTreeMap<(String, String), u64>,
    /// Instances placed, by (node, pool).
    pub instances: BTreeMap<(String, String), u64>,
    /// Instances of running applications not ready, by (tenant, reason):
    /// `unplaced` (lost their node, no node takes them yet), `starting`
    /// (placed, not started or not ready yet), `restarting` (ended or failed,
    /// waiting for their next start).
    #[serde(default)]
    pub pending_instances: BTreeMap<(String, String), u64>,
    /// Tenant quota: (tenant, resource) → (used, limit when set).
    pub quota: BTreeMap<(String, String), (f64, Option<f64>)>,
    /// Pools: name → requests placed and capacity of the nodes taking work.
    pub pools: BTreeMap<String, PoolUse>,
    /// Nodes by condition (`ready`, `down`, `cordoned`, `draining`,
    /// `under-pressure`, `not-registered`).
    pub nodes: BTreeMap<String, u64>,
    /// Applications declaring `sla.availability`, by (tenant, name):
    /// (attained share of time Running since it first ran, target); the
    /// attained share only once it ran.
    pub availability: BTreeMap<(String, String), (Option<f64>, f64)>,
    /// Counters and histograms.
    pub counters: Counters,
}

fn code(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c);
        } else {
            out.push('-');
        }
    }
    out
}

impl Coordinator {
    /// Counts a lifecycle transition of `key` to `to` at `now` (and the
    /// phase latencies it ends).
    pub(super) fn count_transition(
        &mut self,
        key: &crate::model::names::AppKey,
        to: Target,
        trigger: Trigger,
        now: Timestamp,
    ) {
        let Target::Phase(p) = to else {
            return;
        };
        *self
            .counters
            .transitions
            .entry(format!("{p}/{}", code(&format!("{trigger:?}"))))
            .or_default() += 1;
        let since = |want: Phase| {
            self.apps.get(key).and_then(|e| {
                e.events.iter().rev().find_map(|&i| {
                    let ev = self.events.get(i as u64)?;
                    (ev.to == Target::Phase(want)).then_some(ev.time)
                })
            })
        };
        match p {
            Phase::Scheduled => {
                if let Some(t) = since(Phase::Admitted) {
                    self.counters.admission_to_scheduled.observe(now.since(t).0);
                }
            }
            Phase::Running => {
                if let Some(t) = since(Phase::Scheduled) {
                    self.counters.scheduled_to_running.observe(now.since(t).0);
                }
            }
            _ => {}
        }
    }

    /// The metrics at `now` (availability counts the current phase up to it).
    pub fn metrics(&self, now: Timestamp) -> MetricsView {
        let mut v = MetricsView {
            counters: self.counters.clone(),
            ..MetricsView::default()
        };
        for e in self.apps.values() {
            let tenant = e.key.tenant.clone();
            *v.applications
                .entry((tenant.clone(), e.phase.to_string()))
                .or_default() += 1;
            let reason = match e.phase {
                Phase::Created => Some("admission".to_string()),
                Phase::Scheduled => Some("starting".to_string()),
                Phase::Admitted | Phase::Rejected => Some(self.waiting_reason(e)),
                _ => None,
            };
            if let Some(target) = e.spec().spec.sla.availability {
                v.availability.insert(
                    (tenant.clone(), e.key.name.clone()),
                    (
                        e.uptime.attained(e.phase, now),
                        target.millis() as f64 / 1000.0,
                    ),
                );
            }
            if let Some(r) = reason {
                *v.pending.entry((tenant, r)).or_default() += 1;
            }
            let live = matches!(e.phase, Phase::Scheduled | Phase::Running | Phase::Degraded);
            for i in e.runtime.instances.values() {
                if let Some(n) = &i.node {
                    *v.instances
                        .entry((n.clone(), e.spec().pool().to_string()))
                        .or_default() += 1;
                }
                use crate::reconcile::ObservedState as O;
                let why = match (&i.node, &i.observed) {
                    (None, _) => Some("unplaced"),
                    (_, O::Pending | O::Starting | O::Running) => Some("starting"),
                    (_, O::Exited { code }) if *code != 0 => Some("restarting"),
                    (_, O::Failed { .. }) => Some("restarting"),
                    _ => None,
                };
                if let Some(why) = why.filter(|_| live) {
                    *v.pending_instances
                        .entry((e.key.tenant.clone(), why.into()))
                        .or_default() += 1;
                }
            }
        }
        for t in self.tenants.values() {
            let q = &t.spec.quota;
            let u = t.usage;
            let name = t.spec.name.clone();
            for (res, used, limit) in [
                (
                    "cpu",
                    u.request.cpu as f64 / 1000.0,
                    q.cpu.map(|c| c.0 as f64 / 1000.0),
                ),
                (
                    "memory",
                    u.request.memory as f64,
                    q.memory.map(|m| m.0 as f64),
                ),
                ("gpu", u.request.gpu as f64, q.gpu.map(|g| f64::from(g.0))),
                (
                    "applications",
                    f64::from(u.apps),
                    q.max_applications.map(f64::from),
                ),
                (
                    "workloads",
                    f64::from(u.workloads),
                    q.max_concurrent_workloads.map(f64::from),
                ),
            ] {
                v.quota.insert((name.clone(), res.into()), (used, limit));
            }
        }
        for (name, p) in self.cluster.pools() {
            let alloc = self
                .tenants
                .values()
                .filter_map(|t| t.pool_alloc.get(name).copied())
                .fold(
                    crate::placement::ResVec::default(),
                    crate::placement::ResVec::plus,
                );
            v.pools.insert(
                name.clone(),
                PoolUse {
                    allocated: alloc.into(),
                    capacity: p.cap.into(),
                },
            );
        }
        for n in self.cluster.live_nodes() {
            let name = &n.spec.name;
            let cond = if !n.registered {
                "not-registered"
            } else if n.down.is_some() {
                "down"
            } else if self.drains.contains_key(name) {
                "draining"
            } else if !n.spec.schedulable {
                "cordoned"
            } else {
                "ready"
            };
            *v.nodes.entry(cond.into()).or_default() += 1;
            if self.pressure.contains_key(name) {
                *v.nodes.entry("under-pressure".into()).or_default() += 1;
            }
        }
        v
    }

    /// Why an Admitted or Rejected application waits: the rule that refused
    /// it, or the main reason its placement failed.
    fn waiting_reason(&self, e: &super::entry::AppEntry) -> String {
        let Some(d) = e.decisions.last().and_then(|id| self.decision(*id).ok()) else {
            return "arbitration".into();
        };
        if let Some(c) = d.checks.iter().find(|c| !c.passed) {
            return c.rule.clone();
        }
        d.placements
            .iter()
            .flat_map(|p| p.rejected.iter())
            .max_by_key(|(_, n)| *n)
            .filter(|(_, n)| *n > 0)
            .map_or_else(
                || "arbitration".into(),
                |(r, _)| format!("placement.{}", code(&format!("{r:?}"))),
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_codes() {
        let mut h = Histogram::default();
        h.observe(50);
        h.observe(1_000);
        h.observe(400_000);
        assert_eq!(h.buckets[0], 1);
        assert_eq!(h.buckets[3], 1);
        assert_eq!(h.buckets[10], 1, "+Inf");
        assert_eq!((h.count, h.sum_ms), (3, 401_050));
        assert_eq!(code("InsufficientCpu"), "insufficient-cpu");
        assert_eq!(code("System"), "system");
    }
}
