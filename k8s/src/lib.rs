//! D-AROS on Kubernetes (issue 13, seed 001 §5–§7): the custom resources a
//! Kubernetes user creates — [`QoSProfile`] (a class and the floors it
//! carries, cluster-scoped) and [`MinimalReservationPolicy`] (the pods of
//! namespaces and label selectors get floors, with a per-node status) — as
//! Rust types; their CRDs are generated from these types
//! (`packaging/kubernetes/crds.yaml`, checked by a test) and their fields are
//! checked with the same quantity parsers as the rest of D-AROS.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod floors;
pub mod node;
pub mod pod;
pub mod policy;
pub mod profile;
pub mod resolve;
pub mod selector;

pub use floors::Floors;
pub use policy::{
    MinimalReservationPolicy, MinimalReservationPolicySpec, NodeStatus, PolicyStatus,
};
pub use profile::{QoSProfile, QoSProfileSpec};
pub use selector::{LabelSelector, Requirement};

use kube::CustomResourceExt;

/// The CRDs of both kinds as one multi-document YAML (what
/// `packaging/kubernetes/crds.yaml` holds).
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::from(
        "# Generated from the Rust types in k8s/src (daros-k8s); do not edit:\n\
         # DAROS_TEST_BLESS=1 cargo test -p daros-k8s --test crds rewrites it.\n",
    );
    for crd in [QoSProfile::crd(), MinimalReservationPolicy::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd)?);
    }
    Ok(out)
}
