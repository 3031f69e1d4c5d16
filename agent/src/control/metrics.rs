//! Metrics of the control plane on `/metrics` (issue 16): every agent
//! exports its raft view (term, role, indices, leader changes it saw); the
//! established leader also exports the coordinator's (applications by tenant
//! and phase, pending by reason, instances per node and pool, quota use,
//! node conditions, transition/rejection/preemption/failure/restart counters
//! and phase-latency histograms). The counters are replicated state, so a new
//! leader continues the same series. Values are refreshed every second by a
//! task (a scrape never waits on raft).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daros_coordinator::state::metrics::{
    Amounts, Histogram, LATENCY_BUCKETS, MetricsView, PoolUse,
};
use daros_gossip::raft::ConsensusStatus;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::plane::ControlPlane;
use super::timings::{BUCKETS as TIMING_BUCKETS, Timing};
use crate::metrics::{Labels, family};

/// What the last refresh saw.
#[derive(Debug, Default)]
struct Seen {
    status: Option<ConsensusStatus>,
    view: Option<MetricsView>,
    /// Gossip members by status (alive, dead, left, joining).
    members: std::collections::BTreeMap<String, u64>,
    /// Local timings: apply per command kind, proposals, snapshot size.
    apply: std::collections::BTreeMap<&'static str, Timing>,
    proposal: Timing,
    snapshot_bytes: u64,
    /// Writes answered without a log entry, by kind.
    unchanged: std::collections::BTreeMap<&'static str, u64>,
    /// Leader dispatch sends by outcome.
    sends: [(&'static str, u64); 3],
    transport: super::transport_metrics::TransportSeen,
}

/// The shared state between the refresh task and the collector.
#[derive(Debug, Default)]
pub struct ControlMetrics {
    seen: Mutex<Seen>,
    leader_changes: AtomicU64,
}

impl ControlMetrics {
    /// Metrics fixed at `view` (as the leader would export it), for benches.
    pub fn fixed(view: MetricsView) -> Arc<Self> {
        Arc::new(Self {
            seen: Mutex::new(Seen {
                view: Some(view),
                ..Seen::default()
            }),
            leader_changes: AtomicU64::new(0),
        })
    }

    /// Refreshes from `plane` every `every`, counting leader changes.
    pub async fn refresh_loop(self: Arc<Self>, plane: Arc<ControlPlane>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        let mut leader: Option<String> = None;
        loop {
            tick.tick().await;
            let status = plane.mesh().consensus_status();
            let now_leader = status
                .as_ref()
                .and_then(|s| s.leader.as_ref().map(|l| l.to_string()));
            if now_leader.is_some() && now_leader != leader {
                if leader.is_some() {
                    self.leader_changes.fetch_add(1, Ordering::Relaxed);
                }
                leader = now_leader;
            }
            let leading = status
                .as_ref()
                .is_some_and(|s| s.established && s.leader.as_ref() == Some(&s.node_id));
            let view = if leading {
                plane
                    .mesh()
                    .read_with(|s| s.coordinator().metrics(super::plane::now()))
                    .await
                    .ok()
            } else {
                None
            };
            let mut members = std::collections::BTreeMap::new();
            for m in plane.mesh().members().await {
                *members
                    .entry(format!("{:?}", m.status).to_lowercase())
                    .or_insert(0) += 1;
            }
            let (apply, proposal, snapshot_bytes) = plane.timings().read();
            let unchanged = plane.timings().unchanged_counts();
            let sends = plane.timings().sends();
            let transport =
                super::transport_metrics::TransportSeen::read(plane.mesh(), status.as_ref());
            if let Ok(mut s) = self.seen.lock() {
                *s = Seen {
                    status,
                    view,
                    members,
                    apply,
                    proposal,
                    snapshot_bytes,
                    unchanged,
                    sends,
                    transport,
                };
            }
        }
    }
}

/// Encodes [`ControlMetrics`].
#[derive(Debug)]
pub struct ControlCollector(pub Arc<ControlMetrics>);

/// Series of a map keyed by two label values.
fn pairs(
    m: &std::collections::BTreeMap<(String, String), u64>,
    a: &'static str,
    b: &'static str,
) -> Vec<(Labels, f64)> {
    m.iter()
        .map(|((x, y), n)| (vec![(a, x.clone()), (b, y.clone())], *n as f64))
        .collect()
}

fn one(v: f64) -> Vec<(Labels, f64)> {
    vec![(Vec::new(), v)]
}

/// Buckets of a local [`Timing`] as the encoder wants them.
fn timing_buckets(t: &Timing) -> Vec<(f64, u64)> {
    let mut b: Vec<(f64, u64)> = TIMING_BUCKETS
        .iter()
        .zip(t.buckets.iter().chain(std::iter::repeat(&0)))
        .map(|(u, n)| (*u, *n))
        .collect();
    b.push((
        f64::INFINITY,
        t.buckets.get(TIMING_BUCKETS.len()).copied().unwrap_or(0),
    ));
    b
}

fn latency_buckets(h: &Histogram) -> Vec<(f64, u64)> {
    let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
        .iter()
        .zip(h.buckets.iter().chain(std::iter::repeat(&0)))
        .map(|(b, n)| (*b, *n))
        .collect();
    buckets.push((
        f64::INFINITY,
        h.buckets.get(LATENCY_BUCKETS.len()).copied().unwrap_or(0),
    ));
    buckets
}

fn histogram(enc: &mut DescriptorEncoder, name: &str, help: &str, h: &Histogram) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
        h.sum_ms as f64 / 1000.0,
        h.count,
        &latency_buckets(h),
        None,
    )
}

/// One histogram per value of `label` (nothing when there is none).
fn histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    hs: &std::collections::BTreeMap<String, Histogram>,
) -> fmt::Result {
    if hs.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (v, h) in hs {
        m.encode_family(&vec![(label, v.clone())])?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                h.sum_ms as f64 / 1000.0,
                h.count,
                &latency_buckets(h),
                None,
            )?;
    }
    Ok(())
}

impl Collector for ControlCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use MetricType::{Counter, Gauge};
        let Ok(seen) = self.0.seen.lock() else {
            return Ok(());
        };
        if let Some(s) = &seen.status {
            let leading = s.leader.as_ref() == Some(&s.node_id);
            family(
                &mut enc,
                "daros_raft_term",
                "Current raft term.",
                Gauge,
                one(s.term as f64),
            )?;
            family(
                &mut enc,
                "daros_raft_commit_index",
                "Highest committed raft log index.",
                Gauge,
                one(s.commit_index.unwrap_or(0) as f64),
            )?;
            family(
                &mut enc,
                "daros_raft_applied_index",
                "Highest raft log index applied to the coordinator state.",
                Gauge,
                one(s.last_applied.unwrap_or(0) as f64),
            )?;
            family(
                &mut enc,
                "daros_raft_last_log_index",
                "Last raft log index held.",
                Gauge,
                one(s.last_log_index.unwrap_or(0) as f64),
            )?;
            family(
                &mut enc,
                "daros_raft_is_leader",
                "1 when this server is the raft leader (and exports the coordinator's metrics once established).",
                Gauge,
                one(if leading { 1.0 } else { 0.0 }),
            )?;
            family(
                &mut enc,
                "daros_raft_role",
                "This server's raft role (1 for the current one).",
                Gauge,
                vec![(vec![("role", format!("{:?}", s.role).to_lowercase())], 1.0)],
            )?;
            family(
                &mut enc,
                "daros_raft_leader_changes",
                "Leader changes this agent has seen since it started.",
                Counter,
                one(self.0.leader_changes.load(Ordering::Relaxed) as f64),
            )?;
        }
        if !seen.apply.is_empty() {
            let mut m = enc.encode_descriptor(
                "daros_coordinator_apply_seconds",
                "Time this server's state machine took per command kind (Apply: admission and an arbitration round).",
                None,
                MetricType::Histogram,
            )?;
            for (kind, t) in &seen.apply {
                m.encode_family(&vec![("command", (*kind).to_string())])?
                    .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    t.sum,
                    t.count,
                    &timing_buckets(t),
                    None,
                )?;
            }
        }
        if seen.proposal.count > 0 {
            let mut m = enc.encode_descriptor(
                "daros_raft_proposal_seconds",
                "Time a write through this server took to commit (or fail).",
                None,
                MetricType::Histogram,
            )?;
            m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                seen.proposal.sum,
                seen.proposal.count,
                &timing_buckets(&seen.proposal),
                None,
            )?;
        }
        family(
            &mut enc,
            "daros_raft_unchanged_writes",
            "Writes this server, leading, answered without a log entry because they changed nothing (repeated node inventories and reports), by command kind.",
            Counter,
            seen.unchanged
                .iter()
                .map(|(k, n)| (vec![("command", (*k).to_string())], *n as f64))
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_dispatch_sends",
            "Work sends of this server's leader dispatch, by outcome: whole (the node was sent its whole work), confirmed (it held that work already: digest only), failed.",
            Counter,
            seen.sends
                .iter()
                .map(|(k, n)| (vec![("outcome", (*k).to_string())], *n as f64))
                .collect(),
        )?;
        if seen.snapshot_bytes > 0 {
            family(
                &mut enc,
                "daros_raft_snapshot_bytes",
                "Size of the last raft snapshot this server wrote.",
                Gauge,
                one(seen.snapshot_bytes as f64),
            )?;
        }
        family(
            &mut enc,
            "daros_mesh_members",
            "Gossip members this agent sees, by status (alive, dead, left, joining).",
            Gauge,
            seen.members
                .iter()
                .map(|(s, n)| (vec![("status", s.clone())], *n as f64))
                .collect(),
        )?;
        if seen.status.is_some() {
            seen.transport.encode(&mut enc)?;
        }
        let Some(v) = &seen.view else {
            return Ok(());
        };
        family(
            &mut enc,
            "daros_applications",
            "Applications by tenant and lifecycle phase.",
            Gauge,
            pairs(&v.applications, "tenant", "phase"),
        )?;
        family(
            &mut enc,
            "daros_applications_pending",
            "Applications not running yet, by tenant and reason (admission, arbitration, starting, the refusing rule such as quota.cpu, or placement.<reject reason>).",
            Gauge,
            pairs(&v.pending, "tenant", "reason"),
        )?;
        family(
            &mut enc,
            "daros_instances_pending",
            "Instances of running applications not ready, by tenant and reason (unplaced: lost their node and no node takes them yet; starting: placed, not started or not ready yet; restarting: ended or failed, waiting for their next start).",
            Gauge,
            pairs(&v.pending_instances, "tenant", "reason"),
        )?;
        family(
            &mut enc,
            "daros_instances",
            "Workload instances placed, by node and pool.",
            Gauge,
            pairs(&v.instances, "node", "pool"),
        )?;
        family(
            &mut enc,
            "daros_tenant_quota_used",
            "What a tenant's admitted applications hold (cpu in cores, memory in bytes, gpu, applications, workloads).",
            Gauge,
            v.quota
                .iter()
                .map(|((t, r), (used, _))| {
                    (vec![("tenant", t.clone()), ("resource", r.clone())], *used)
                })
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_tenant_quota_limit",
            "A tenant's quota, where one is set.",
            Gauge,
            v.quota
                .iter()
                .filter_map(|((t, r), (_, limit))| {
                    limit.map(|l| (vec![("tenant", t.clone()), ("resource", r.clone())], l))
                })
                .collect(),
        )?;
        let pool = |f: fn(&PoolUse) -> Amounts| {
            v.pools
                .iter()
                .flat_map(move |(p, x)| {
                    let a = f(x);
                    [("cpu", a.cpu), ("memory", a.memory), ("gpu", a.gpu)]
                        .into_iter()
                        .map(move |(r, val)| {
                            (vec![("pool", p.clone()), ("resource", r.to_string())], val)
                        })
                })
                .collect::<Vec<_>>()
        };
        family(
            &mut enc,
            "daros_pool_allocated",
            "Requests placed in a resource pool (cpu cores, memory bytes, gpus).",
            Gauge,
            pool(|x| x.allocated),
        )?;
        family(
            &mut enc,
            "daros_pool_capacity",
            "Capacity of a pool's nodes that take work (cpu cores, memory bytes, gpus).",
            Gauge,
            pool(|x| x.capacity),
        )?;
        family(
            &mut enc,
            "daros_nodes",
            "Cluster nodes by condition (ready, down, cordoned, draining, not-registered; under-pressure counted apart).",
            Gauge,
            v.nodes
                .iter()
                .map(|(c, n)| (vec![("condition", c.clone())], *n as f64))
                .collect(),
        )?;
        let c = &v.counters;
        family(
            &mut enc,
            "daros_lifecycle_transitions",
            "Application lifecycle transitions, by phase reached and trigger.",
            Counter,
            c.transitions
                .iter()
                .map(|(k, n)| {
                    let (phase, trigger) = k.split_once('/').unwrap_or((k.as_str(), ""));
                    (
                        vec![
                            ("phase", phase.to_string()),
                            ("trigger", trigger.to_string()),
                        ],
                        *n as f64,
                    )
                })
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_admission_rejections",
            "Admissions refused, by the first failing rule.",
            Counter,
            c.rejections
                .iter()
                .map(|(r, n)| (vec![("rule", r.clone())], *n as f64))
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_preempted_instances",
            "Instances taken by preemption.",
            Counter,
            one(c.preempted_instances as f64),
        )?;
        family(
            &mut enc,
            "daros_instance_failures",
            "Instance failures reported by the runtimes, by category (seed 000 §4.7).",
            Counter,
            c.failures
                .iter()
                .map(|(k, n)| (vec![("category", k.clone())], *n as f64))
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_instance_restarts",
            "Instance restarts the coordinator asked for.",
            Counter,
            one(c.restarts as f64),
        )?;
        family(
            &mut enc,
            "daros_init_job_runs",
            "Init-job runs ended, by outcome (succeeded, failed): their success ratio.",
            Counter,
            c.job_runs
                .iter()
                .map(|(o, n)| (vec![("outcome", o.clone())], *n as f64))
                .collect(),
        )?;
        histogram(
            &mut enc,
            "daros_init_job_run_seconds",
            "How long init-job runs ran, from running to their end.",
            &c.job_run_time,
        )?;
        histogram(
            &mut enc,
            "daros_app_admission_to_scheduled_seconds",
            "Time from admission to placement (Admitted -> Scheduled).",
            &c.admission_to_scheduled,
        )?;
        histogram(
            &mut enc,
            "daros_app_scheduled_to_running_seconds",
            "Time from placement to running (Scheduled -> Running).",
            &c.scheduled_to_running,
        )?;
        histogram(
            &mut enc,
            "daros_init_job_queue_seconds",
            "How long init-job runs waited placed before they started.",
            &c.job_queue_time,
        )?;
        histograms(
            &mut enc,
            "daros_app_convergence_seconds",
            "Desired -> observed convergence: from a change of what an application should be (create, update, scale, start) to every wanted replica ready at the version in force.",
            "cause",
            &c.convergence,
        )?;
        family(
            &mut enc,
            "daros_app_convergence_abandoned",
            "Convergences abandoned (stopped, failed or refused before they converged), by cause.",
            Counter,
            c.convergence_abandoned
                .iter()
                .map(|(k, n)| (vec![("cause", k.clone())], *n as f64))
                .collect(),
        )?;
        super::sla_metrics::encode(&mut enc, &v.availability)
    }
}
