//! What the QoS API returns: per workload and per knob the requested value,
//! the applied value and enforced or degraded with the reason; the node's
//! admission account; the protection loop's state and events.

use daros_coordinator::{MinimalReservation, QosClass, ResourceProfile};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::admission::ResourceAccount;
use super::knob::{KnobReport, KnobStatus};
use super::protect::{HoldView, ProtectionEvent, ProtectionStatus};
use super::store::TargetKind;
use crate::cgroup::CgroupMode;

/// The QoS state of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkloadQos {
    /// Workload id (`managed/web`, `systemd/nginx.service`).
    pub workload: String,
    /// Cgroup path.
    pub cgroup: String,
    /// How it came under a class.
    pub kind: TargetKind,
    /// QoS class (`GuaranteedPro`, `Guaranteed`, `Burstable`, `BestEffort`).
    #[schemars(with = "String")]
    pub class: QosClass,
    /// The profile in effect (completed for the class).
    #[schemars(with = "serde_json::Value")]
    pub profile: ResourceProfile,
    /// The MinimalReservation (GuaranteedPro only).
    #[schemars(with = "serde_json::Value")]
    pub reservation: MinimalReservation,
    /// When the class was set, ms since the Unix epoch.
    pub set_at_unix_ms: u64,
    /// When the knobs were last written and checked.
    pub applied_at_unix_ms: u64,
    /// Knobs enforced.
    pub enforced: usize,
    /// Knobs degraded.
    pub degraded: usize,
    /// Every knob.
    pub knobs: Vec<KnobReport>,
    /// Knobs the protection loop holds right now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<HoldView>,
    /// Dedicated cores, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedicated_cpus: Option<String>,
    /// Processes moved in (adopted workloads).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
}

impl WorkloadQos {
    /// Counts enforced and degraded knobs.
    pub fn count(knobs: &[KnobReport]) -> (usize, usize) {
        let e = knobs
            .iter()
            .filter(|k| k.status == KnobStatus::Enforced)
            .count();
        (e, knobs.len() - e)
    }
}

/// `GET /v1/qos`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QosOverview {
    /// Classes are applied (`[qos] enabled`).
    pub enabled: bool,
    /// cgroup mode of the host.
    pub mode: CgroupMode,
    /// The managed root.
    pub managed_root: String,
    /// Floors against allocatable, per resource.
    pub admission: Vec<ResourceAccount>,
    /// Floors propagated to the managed root (sums of its children).
    pub managed_root_knobs: Vec<KnobReport>,
    /// Protection loop.
    pub protection: ProtectionStatus,
    /// Workloads under a class, by id.
    pub workloads: Vec<WorkloadQos>,
    /// Problems outside any one workload (unreadable stored records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// `DELETE /v1/qos/workloads/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnsetReport {
    /// Workload id.
    pub workload: String,
    /// What was written back (original values of a discovered cgroup, defaults of a managed one).
    pub restored: Vec<String>,
    /// Writes that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// `GET /v1/qos/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventList {
    /// Oldest first.
    pub events: Vec<ProtectionEvent>,
}

/// Class and floors of one workload, for consumers such as the eBPF network
/// floor controller.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassState {
    /// Workload id.
    pub workload: String,
    /// Cgroup path relative to the hierarchy roots.
    pub cgroup: String,
    /// Class.
    pub class: QosClass,
    /// Floors.
    pub reservation: MinimalReservation,
    /// Profile (network limits included).
    pub profile: ResourceProfile,
}
