//! What the node agent does to a pod's cgroup, behind a trait: darosd
//! implements it over its QoS service (which admits floors, writes and
//! checks the knobs, and restores the original values on release); tests of
//! the controller alone may use their own.

use crate::pod::PodFacts;
use daros_coordinator::{QosClass, ResourceProfile};
use std::collections::BTreeMap;

/// A pod under a class, as last applied and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The class in effect.
    pub class: QosClass,
    /// The profile in effect.
    pub profile: ResourceProfile,
    /// Knobs of the floors' resources that are degraded, each with why
    /// (`memory.min: cgroup v1 has no memory floor ...`); empty when every
    /// floor is enforced.
    pub degraded: Vec<String>,
}

/// The node side of Kubernetes mode. Every method blocks (cgroup files).
pub trait PodEnforcer: Send + Sync + 'static {
    /// Pods this mode has put under a class, by UID, with their state now.
    fn enforced(&self) -> BTreeMap<String, Applied>;
    /// Puts the pod's cgroup (the kubelet's) under `class` and `profile`.
    fn enforce(
        &self,
        pod: &PodFacts,
        class: QosClass,
        profile: &ResourceProfile,
    ) -> Result<Applied, String>;
    /// Restores what [`PodEnforcer::enforce`] changed on pod `uid`.
    fn release(&self, uid: &str) -> Result<(), String>;
    /// Why the pod is under a class set by someone else (an operator with
    /// `darosctl qos set`), which policies then leave alone.
    fn held_elsewhere(&self, uid: &str) -> Option<String>;
}
