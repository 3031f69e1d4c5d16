//! Application (seed 000 §4.1): the first-class unit, with its tenant,
//! priority, SLA/QoS goals, budget, lifecycle policy and workloads.

use super::lifecycle_policy::LifecyclePolicy;
use super::names::AppKey;
use super::policy::PolicyRules;
use super::qos::QosClass;
use super::ratio::Ratio;
use super::resources::{Bytes, GpuCount, MilliCpu};
use super::time::DurationMs;
use super::workload::Workload;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Latency sensitivity, used by SLA-aware arbitration and placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LatencyClass {
    /// Latency-critical: served first among equals, placed on quiet nodes.
    Critical,
    /// Ordinary online service.
    Standard,
    /// Throughput work, latency does not matter.
    Batch,
}

/// Service-level goals of an application.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SlaGoals {
    /// Latency sensitivity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyClass>,
    /// Target 99th percentile latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_latency: Option<DurationMs>,
    /// Target availability as a fraction (`0.999` or `"99.9%"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability: Option<Ratio>,
}

impl SlaGoals {
    /// Rank for ordering: 0 = most latency-sensitive.
    pub fn urgency_rank(&self) -> u8 {
        match self.latency {
            Some(LatencyClass::Critical) => 0,
            Some(LatencyClass::Standard) | None => 1,
            Some(LatencyClass::Batch) => 2,
        }
    }
}

/// Resource budget of an application: totals over all replicas at `max`
/// (for cpu, memory, gpu) and a cost ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Budget {
    /// Total cpu requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<MilliCpu>,
    /// Total memory requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    /// Total GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuCount>,
    /// Cost ceiling in currency units per hour (three decimals), compared
    /// with the nodes' `costPerHour` shares.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<Ratio>,
}

/// The desired state of an application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplicationSpec {
    /// Priority within the tenant, 0..=1000, capped by the tenant's ceiling.
    #[serde(default)]
    pub priority: u32,
    /// Resource pool to run in (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Service-level goals.
    #[serde(default)]
    pub sla: SlaGoals,
    /// Default QoS class for workloads that do not name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosClass>,
    /// Budget.
    #[serde(default)]
    pub budget: Budget,
    /// Default failure handling of the workloads.
    #[serde(default)]
    pub lifecycle_policy: LifecyclePolicy,
    /// Application-scope policy rules.
    #[serde(default)]
    pub policy: PolicyRules,
    /// The workloads.
    pub workloads: Vec<Workload>,
    /// Ordered steps of the deployment (default: every workload, by its
    /// `dependsOn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<crate::workflow::Workflow>,
}

/// Highest priority an application may ask for.
pub const MAX_PRIORITY: u32 = 1000;

/// An application: name, tenant, labels and its desired state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Application {
    /// Name, unique within the tenant.
    pub name: String,
    /// Owning tenant.
    pub tenant: String,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Desired state.
    pub spec: ApplicationSpec,
}

impl Application {
    /// The application's key.
    pub fn key(&self) -> AppKey {
        AppKey::new(self.tenant.clone(), self.name.clone())
    }

    /// Name of the pool it runs in.
    pub fn pool(&self) -> &str {
        self.spec
            .pool
            .as_deref()
            .unwrap_or(super::pool::DEFAULT_POOL)
    }

    /// The workload named `name`.
    pub fn workload(&self, name: &str) -> Option<&Workload> {
        self.spec.workloads.iter().find(|w| w.name == name)
    }

    /// Failure handling of `w`: its own, else the application's.
    pub fn lifecycle_of(&self, w: &Workload) -> LifecyclePolicy {
        w.lifecycle.unwrap_or(self.spec.lifecycle_policy)
    }

    /// QoS class of `w`: its own, else the application default, else inferred.
    pub fn qos_of(&self, w: &Workload) -> QosClass {
        w.qos
            .or(self.spec.qos)
            .unwrap_or_else(|| QosClass::infer(&w.resources))
    }
}
