//! `QoSProfile` (cluster-scoped): a named QoS level — a class and the
//! floors it carries — that policies refer to (seed 001 §7, custom QoS
//! levels).

use crate::floors::Floors;
use daros_coordinator::{FieldError, QosClass};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The class, as the CRD spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ClassName {
    /// Guaranteed plus a MinimalReservation floor kept under contention.
    GuaranteedPro,
    /// Requests equal limits.
    Guaranteed,
    /// Some requests, limits may be higher.
    Burstable,
    /// Runs on what is left.
    BestEffort,
}

impl From<ClassName> for QosClass {
    fn from(c: ClassName) -> Self {
        match c {
            ClassName::GuaranteedPro => QosClass::GuaranteedPro,
            ClassName::Guaranteed => QosClass::Guaranteed,
            ClassName::Burstable => QosClass::Burstable,
            ClassName::BestEffort => QosClass::BestEffort,
        }
    }
}

/// A named QoS level.
#[derive(CustomResource, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "daros.io",
    version = "v1alpha1",
    kind = "QoSProfile",
    plural = "qosprofiles",
    shortname = "qosp",
    printcolumn = r#"{"name":"Class","type":"string","jsonPath":".spec.class"}"#
)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QoSProfileSpec {
    /// The class pods under this profile get.
    pub class: ClassName,
    /// Floors they get (only GuaranteedPro keeps them under contention).
    #[serde(default, skip_serializing_if = "Floors::is_empty")]
    pub floors: Floors,
}

impl QoSProfileSpec {
    /// Field errors (`spec.floors.cpu` ...).
    pub fn validate(&self) -> Vec<FieldError> {
        let mut e = self.floors.validate("spec.floors");
        if !self.floors.is_empty() && self.class != ClassName::GuaranteedPro {
            e.push(FieldError::new(
                "spec.floors",
                format!(
                    "floors are kept only for GuaranteedPro; class {:?} would not hold them",
                    self.class
                ),
            ));
        }
        e
    }
}
