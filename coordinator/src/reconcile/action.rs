//! Actions for runtime adapters: what to run or stop, where, and why.

use super::instance::PlacementId;
use super::observed::{InitJobId, InstanceId};
use crate::model::health::HealthCheck;
use crate::model::qos::{MinimalReservation, QosClass};
use crate::model::resources::ResourceProfile;
use crate::model::runtime::{RuntimeRequirement, RuntimeSpec};
use crate::model::time::{DurationMs, Timestamp};
use serde::{Deserialize, Serialize};

/// Everything an adapter needs to start a workload instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadLaunch {
    /// Runtime type and OS.
    pub runtime: RuntimeRequirement,
    /// Image or binary (the adapter refuses a runtimeSpec running another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// QoS class to enforce.
    pub qos: QosClass,
    /// Requests, limits, reservations.
    pub resources: ResourceProfile,
    /// The floor to protect (GuaranteedPro).
    pub reservation: MinimalReservation,
    /// Health checks to run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
    /// Opaque runtime description.
    pub runtime_spec: RuntimeSpec,
    /// The node stops the instance itself after this long without contact with
    /// the servers (`disconnect.stopOnClientAfter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_on_client_after: Option<crate::model::time::DurationMs>,
    /// What the runtime enforces on it (user, capabilities, no_new_privs,
    /// system-call filter, writable paths).
    #[serde(default)]
    pub security: crate::model::security::SecurityContext,
    /// Kubernetes namespace for its pods when the spec names none (the
    /// tenant's first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Environment from its `env` trait, resolved against the tenant's
    /// Configs and Secrets (secret values sealed here, opened by the leader
    /// for the node only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<crate::traits::env::EnvVar>,
    /// Volumes from its `storage` trait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::traits::storage::VolumeSpec>,
    /// Sidecars from its `sidecar` trait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<crate::traits::sidecar::SidecarSpec>,
}

/// Everything an adapter needs to run an init job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobLaunch {
    /// Runtime type and OS.
    pub runtime: RuntimeRequirement,
    /// Image or binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Resources while it runs.
    pub resources: ResourceProfile,
    /// Longest run allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationMs>,
    /// Opaque runtime description.
    pub runtime_spec: RuntimeSpec,
    /// What the runtime enforces on it (its workload's context).
    #[serde(default)]
    pub security: crate::model::security::SecurityContext,
    /// Kubernetes namespace when the spec names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Environment from its workload's `env` trait (as [`WorkloadLaunch::env`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<crate::traits::env::EnvVar>,
    /// Its workload's volumes (replica 0's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::traits::storage::VolumeSpec>,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum ActionKind {
    /// Run (or re-run) an init job to completion.
    RunInitJob {
        /// The job.
        job: InitJobId,
        /// The series of runs this attempt belongs to.
        #[serde(default)]
        run: PlacementId,
        /// Attempt number, from 1.
        attempt: u32,
        /// How to run it.
        launch: Box<JobLaunch>,
    },
    /// Start (or restart) an instance.
    Start {
        /// The instance.
        instance: InstanceId,
        /// The placement to start (the node stops an older placement of the
        /// same instance first).
        #[serde(default)]
        placement: PlacementId,
        /// Attempt number: 1 for the first start, then one per restart.
        attempt: u32,
        /// How to run it.
        launch: Box<WorkloadLaunch>,
    },
    /// Stop an instance and release its runtime resources.
    Stop {
        /// The instance.
        instance: InstanceId,
        /// The placement to stop.
        #[serde(default)]
        placement: PlacementId,
    },
}

/// One action for the runtime adapter on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeAction {
    /// Node that must perform it.
    pub node: String,
    /// Not before this time (restart backoff); `None` means now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// Why.
    pub reason: String,
    /// What.
    #[serde(flatten)]
    pub kind: ActionKind,
}

impl RuntimeAction {
    /// Name of the instance or job the action concerns.
    pub fn subject(&self) -> String {
        match &self.kind {
            ActionKind::RunInitJob { job, .. } => job.to_string(),
            ActionKind::Start { instance, .. } | ActionKind::Stop { instance, .. } => {
                instance.to_string()
            }
        }
    }
}
