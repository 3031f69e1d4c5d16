//! `MinimalReservationPolicy` (cluster-scoped): the pods of some namespaces
//! and labels get floors (directly or through a [`crate::QoSProfile`]); when
//! several match, the higher `priority` wins, then the name (deterministic).
//! Its status counts, per node, the pods whose floors are enforced and those
//! degraded with the reason.

use crate::floors::Floors;
use crate::selector::LabelSelector;
use daros_coordinator::FieldError;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which pods get which floors.
#[derive(CustomResource, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "daros.io",
    version = "v1alpha1",
    kind = "MinimalReservationPolicy",
    plural = "minimalreservationpolicies",
    shortname = "mrp",
    status = "PolicyStatus",
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#
)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MinimalReservationPolicySpec {
    /// Namespaces whose pods it selects (all when empty, with the selector).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces by their labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pods by their labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// A QoSProfile whose class and floors the pods get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Floors (over the profile's, field by field).
    #[serde(default, skip_serializing_if = "Floors::is_empty")]
    pub floors: Floors,
    /// When several policies select a pod, the highest wins (then the name).
    #[serde(default)]
    pub priority: i32,
}

/// Per node: pods whose floors hold, and those degraded with why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// Pods with every floor enforced.
    pub enforced: u32,
    /// Pods with some floor degraded.
    pub degraded: u32,
    /// The reasons, as the node reported them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// The status the node agents write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// By node name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<String, NodeStatus>,
    /// The generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl MinimalReservationPolicySpec {
    /// Field errors (`spec.podSelector.matchExpressions[0].operator` ...).
    pub fn validate(&self) -> Vec<FieldError> {
        let mut e = self.floors.validate("spec.floors");
        if let Some(s) = &self.namespace_selector {
            e.extend(s.validate("spec.namespaceSelector"));
        }
        if let Some(s) = &self.pod_selector {
            e.extend(s.validate("spec.podSelector"));
        }
        if self.floors.is_empty() && self.profile.is_none() {
            e.push(FieldError::new(
                "spec",
                "names neither floors nor a profile: it would change nothing",
            ));
        }
        e
    }

    /// True when it selects a pod of `namespace` (with `ns_labels`) labelled
    /// `pod_labels`.
    pub fn selects(
        &self,
        namespace: &str,
        ns_labels: &BTreeMap<String, String>,
        pod_labels: &BTreeMap<String, String>,
    ) -> bool {
        (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace))
            && self
                .namespace_selector
                .as_ref()
                .is_none_or(|s| s.matches(ns_labels))
            && self
                .pod_selector
                .as_ref()
                .is_none_or(|s| s.matches(pod_labels))
    }
}

/// Of the policies that select a pod, the one that applies: highest
/// priority, then the smallest name.
pub fn winner<'a>(
    selecting: impl IntoIterator<Item = &'a MinimalReservationPolicy>,
) -> Option<&'a MinimalReservationPolicy> {
    selecting.into_iter().min_by(|a, b| {
        b.spec
            .priority
            .cmp(&a.spec.priority)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    })
}
