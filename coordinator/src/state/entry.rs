//! What the coordinator keeps per application and per tenant.

use crate::admission::Charge;
use crate::decision::DecisionId;
use crate::lifecycle::Phase;
use crate::model::application::Application;
use crate::model::names::AppKey;
use crate::model::tenant::Tenant;
use crate::model::time::Timestamp;
use crate::placement::ResVec;
use crate::policy::EffectivePolicy;
use crate::reconcile::AppRuntime;
use crate::version::AppVersion;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why an application is Degraded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DegradationCause {
    /// Replicas down, restarting or held: heals by itself.
    Runtime,
    /// Replicas taken by a higher-priority application: needs Restore or
    /// free capacity.
    Preemption,
    /// Replicas lost with their node and not re-placed.
    NodeLoss,
    /// A node it runs on is under resource pressure: recovers when that ends.
    NodePressure,
    /// Replicas held for an operator by the workload's `onFailure`
    /// (`darosctl operate restore` re-places them).
    Held,
}

impl std::fmt::Display for DegradationCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DegradationCause::Runtime => "replicas down",
            DegradationCause::Preemption => "preempted",
            DegradationCause::NodeLoss => "node lost",
            DegradationCause::Held => "held for an operator",
            DegradationCause::NodePressure => "node under pressure",
        })
    }
}

/// Degradation state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Degradation {
    /// Cause.
    pub cause: DegradationCause,
    /// Details.
    pub reason: String,
}

/// Everything about one application.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppEntry {
    /// Numeric id (never reused).
    pub id: u32,
    /// Key.
    pub key: AppKey,
    /// Lifecycle phase.
    pub phase: Phase,
    /// Accepted versions kept, by increasing number (retention may have
    /// compacted some older ones away; the latest is always kept).
    pub versions: Vec<AppVersion>,
    /// What of its history was compacted.
    #[serde(default)]
    pub compacted: super::history::Compacted,
    /// Version in force.
    pub current: u32,
    /// Effective policy from the last admission.
    pub effective: Option<EffectivePolicy>,
    /// Policies that took part.
    pub policies: Vec<String>,
    /// Policy evaluation id.
    pub evaluation: Option<u64>,
    /// Quota held.
    pub charge: Charge,
    /// Requests placed on nodes.
    pub allocated: ResVec,
    /// Replicas per workload.
    pub targets: BTreeMap<String, u32>,
    /// Instances and init jobs.
    pub runtime: AppRuntime,
    /// Why degraded.
    pub degradation: Option<Degradation>,
    /// The user asked it to run.
    pub start_requested: bool,
    /// Indices of its lifecycle events in the coordinator's log.
    pub events: Vec<usize>,
    /// Its decisions.
    pub decisions: Vec<DecisionId>,
    /// Admission order.
    pub admitted_seq: u64,
    /// Plan again at this time.
    pub wake_at: Option<Timestamp>,
    /// Capacity epoch of the last automatic restore attempt.
    pub restore_epoch: u64,
    /// The rollout under way, if any.
    pub rollout: Option<super::rollout::Rollout>,
    /// The run of its workflow (none without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<crate::workflow::run::WorkflowRun>,
    /// Desired state changed and observed state has not caught up yet.
    #[serde(default)]
    pub converging: Option<super::convergence::Converging>,
    /// Time available and not since it first ran (SLA attainment).
    #[serde(default)]
    pub uptime: super::availability::Uptime,
}

impl AppEntry {
    /// Version `v`, unless compacted or not written.
    pub fn version(&self, v: u32) -> Option<&AppVersion> {
        self.versions
            .binary_search_by_key(&v, |x| x.version)
            .ok()
            .map(|i| &self.versions[i])
    }

    /// The latest version number.
    pub fn latest_version(&self) -> u32 {
        self.versions.last().map_or(0, |v| v.version)
    }

    /// The number the next version gets.
    pub fn next_version(&self) -> u32 {
        self.latest_version() + 1
    }

    fn current_index(&self) -> usize {
        self.versions
            .binary_search_by_key(&self.current, |x| x.version)
            .unwrap_or(self.versions.len().saturating_sub(1))
    }

    /// The spec in force.
    pub fn spec(&self) -> &Application {
        &self.versions[self.current_index()].spec
    }

    /// The spec in force, shared.
    pub fn spec_arc(&self) -> std::sync::Arc<Application> {
        std::sync::Arc::clone(&self.versions[self.current_index()].spec)
    }

    /// Replicas of `w` wanted (its target, else its min).
    pub fn target(&self, w: &str) -> u32 {
        self.targets
            .get(w)
            .copied()
            .unwrap_or_else(|| self.spec().workload(w).map_or(0, |w| w.replicas.min))
    }
}

/// A tenant and what its applications hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantEntry {
    /// Numeric id (never reused).
    pub id: u32,
    /// The tenant.
    pub spec: Tenant,
    /// Quota held by its applications.
    pub usage: Charge,
    /// Requests placed, per pool.
    pub pool_alloc: BTreeMap<String, ResVec>,
}
