//! Workload (seed 000 §4.2): the smallest schedulable unit, runtime-neutral,
//! with its dependencies and init jobs (seed 002).

use super::health::HealthCheck;
use super::lifecycle_policy::{Backoff, LifecyclePolicy};
use super::qos::QosClass;
use super::resources::ResourceProfile;
use super::runtime::{RuntimeRequirement, RuntimeSpec};
use super::security::WorkloadSecurity;
use super::time::DurationMs;
use std::collections::BTreeMap;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// Replica bounds: the coordinator places `min`; scaling moves between
/// `min` and `max`. In a spec `replicas: 3` means `{min: 3, max: 3}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Replicas {
    /// Replicas that must run.
    pub min: u32,
    /// Most replicas allowed.
    pub max: u32,
}

impl Default for Replicas {
    fn default() -> Self {
        Self { min: 1, max: 1 }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplicasMap {
    min: u32,
    max: Option<u32>,
}

impl<'de> Deserialize<'de> for Replicas {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Replicas;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a replica count or {min, max}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Replicas, E> {
                let n = u32::try_from(v).map_err(|_| E::custom("too many replicas"))?;
                Ok(Replicas { min: n, max: n })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Replicas, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom("replicas must not be negative"))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Replicas, A::Error> {
                let m = ReplicasMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Replicas {
                    min: m.min,
                    max: m.max.unwrap_or(m.min),
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A job that must succeed before its workload starts (seed 002: "建表"
/// before the service). Runs once per workload, on the node of replica 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InitJob {
    /// Name, unique within the workload.
    pub name: String,
    /// Runtime; defaults to the workload's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeRequirement>,
    /// Image or binary, checked against allow-lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Resources while it runs.
    #[serde(default)]
    pub resources: ResourceProfile,
    /// Retries after a failed run (default 3).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Delay between retries.
    #[serde(default)]
    pub backoff: Backoff,
    /// Longest a run may take; a run past it is a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationMs>,
    /// Opaque runtime description for the adapter.
    #[serde(default, skip_serializing_if = "RuntimeSpec::is_null")]
    pub runtime_spec: RuntimeSpec,
}

fn default_retries() -> u32 {
    3
}

/// A workload of an application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    /// Name, unique within the application.
    pub name: String,
    /// Runtime type and OS.
    pub runtime: RuntimeRequirement,
    /// Image or binary the workload runs, checked against allow-lists;
    /// adapters refuse a runtimeSpec that runs something else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// QoS class; inferred from the resources when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosClass>,
    /// Requests, limits and reservations.
    #[serde(default)]
    pub resources: ResourceProfile,
    /// Replica bounds (default 1).
    #[serde(default)]
    pub replicas: Replicas,
    /// Failure handling; defaults to the application's lifecyclePolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecyclePolicy>,
    /// Health checks run by the adapter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
    /// Workloads that must be ready before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Jobs that must succeed before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_jobs: Vec<InitJob>,
    /// Non-critical workloads are the first stopped when the application is
    /// degraded (default true).
    #[serde(default = "default_true")]
    pub critical: bool,
    /// Labels a node must carry to take this workload (`{disk: nvme}`; every
    /// pair must match), as Kubernetes' `nodeSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Workloads of the same application every replica must share a node
    /// with ("web, cache and DB proxy on one node").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub colocate_with: Vec<String>,
    /// Workloads of the same application a replica must not share a node
    /// with (its own name: one replica per node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anti_affinity: Vec<String>,
    /// Opaque runtime description for the adapter.
    #[serde(default, skip_serializing_if = "RuntimeSpec::is_null")]
    pub runtime_spec: RuntimeSpec,
    /// What it asks of the security baseline (user, capabilities, writable
    /// paths, privileged).
    #[serde(default, skip_serializing_if = "WorkloadSecurity::is_default")]
    pub security: WorkloadSecurity,
    /// Declarative add-ons (`env`, ...), each applied by its registered
    /// handler ([`crate::traits`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traits: Vec<crate::traits::Trait>,
}

fn default_true() -> bool {
    true
}

impl Workload {
    /// Every init job, each with where it is written (relative to the
    /// workload): `initJobs` first, then the `init` trait's, in order.
    pub fn all_init_jobs(&self) -> Vec<(String, std::borrow::Cow<'_, InitJob>)> {
        let mut out: Vec<(String, std::borrow::Cow<'_, InitJob>)> = self
            .init_jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (format!("initJobs[{i}]"), std::borrow::Cow::Borrowed(j)))
            .collect();
        if !self.traits.is_empty() {
            out.extend(
                crate::traits::init::jobs(&self.traits)
                    .into_iter()
                    .map(|(p, j)| (p, std::borrow::Cow::Owned(j))),
            );
        }
        out
    }

    /// A minimal workload, for tests and programmatic construction.
    pub fn new(name: impl Into<String>, runtime: RuntimeRequirement) -> Self {
        Self {
            name: name.into(),
            runtime,
            image: None,
            qos: None,
            resources: ResourceProfile::default(),
            replicas: Replicas::default(),
            lifecycle: None,
            health_checks: Vec::new(),
            depends_on: Vec::new(),
            node_selector: BTreeMap::new(),
            colocate_with: Vec::new(),
            anti_affinity: Vec::new(),
            init_jobs: Vec::new(),
            critical: true,
            runtime_spec: RuntimeSpec::default(),
            security: WorkloadSecurity::default(),
            traits: Vec::new(),
        }
    }
}
