//! Execution node (seed 000 §4.3): capacity, OS, runtimes, labels, failure
//! domains. The local node's description comes from the agent.

use super::ratio::Ratio;
use super::resources::{Bytes, BytesPerSec, GpuCount, MilliCpu};
use super::runtime::{OsType, RuntimeRequirement, RuntimeType};
use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What a node can give to workloads (after system reservations).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeCapacity {
    /// Allocatable cpu.
    pub cpu: MilliCpu,
    /// Allocatable memory.
    pub memory: Bytes,
    /// GPU devices.
    #[serde(default)]
    pub gpu: GpuCount,
    /// Outgoing link bandwidth, when known (bounds network reservations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_egress: Option<BytesPerSec>,
    /// Incoming link bandwidth, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_ingress: Option<BytesPerSec>,
}

/// A node that can run workloads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecutionNode {
    /// Unique node name.
    pub name: String,
    /// Allocatable capacity.
    pub capacity: NodeCapacity,
    /// Operating system.
    #[serde(default)]
    pub os: OsType,
    /// Runtime types it can run.
    pub runtimes: BTreeSet<RuntimeType>,
    /// Labels (pools select on these).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Failure domains it belongs to, by key: `{zone: z1, rack: r7}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_domains: BTreeMap<String, String>,
    /// Cost of the whole node in currency units per hour (three decimals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<Ratio>,
    /// False when the node takes no new workloads (cordoned or down).
    #[serde(default = "default_true")]
    pub schedulable: bool,
}

fn default_true() -> bool {
    true
}

impl ExecutionNode {
    /// True when the node can run a workload with this requirement.
    pub fn supports(&self, req: &RuntimeRequirement) -> bool {
        self.os == req.os && self.runtimes.contains(&req.runtime_type)
    }

    /// Checks the node description; `path` is the node's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(e) = super::names::check_name(&join(path, "name"), &self.name) {
            errs.push(e);
        }
        if self.capacity.cpu.is_zero() {
            errs.push(FieldError::new(
                join(path, "capacity.cpu"),
                "must be greater than 0",
            ));
        }
        if self.capacity.memory.is_zero() {
            errs.push(FieldError::new(
                join(path, "capacity.memory"),
                "must be greater than 0",
            ));
        }
        if self.runtimes.is_empty() {
            errs.push(FieldError::new(
                join(path, "runtimes"),
                "list at least one runtime type the node can run",
            ));
        }
        errs
    }
}
