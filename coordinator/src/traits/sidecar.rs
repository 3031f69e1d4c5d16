//! The `sidecar` trait: extra processes that share their instance's
//! lifecycle, cgroup and logs: started with it, in its cgroup (its limits
//! and class cover them), under its user and confinement, with its
//! environment and volumes; their output goes into the instance's log; one
//! that exits is started again (1 s doubling to 30 s) while the instance
//! runs; they end when it ends.
//!
//! ```yaml
//! traits:
//! - type: sidecar
//!   properties:
//!     sidecars:
//!     - name: log-shipper
//!       image: /usr/bin/tail
//!       runtimeSpec: {command: /usr/bin/tail, args: ["-F", "/var/log/app.log"]}
//! ```
//!
//! `image` is checked against the allow-lists like the workload's; the
//! process adapter reads `runtimeSpec` (`command`, `args`, `env`).

use super::TraitHandler;
use crate::field::FieldError;
use crate::model::runtime::{RuntimeSpec, RuntimeType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The `sidecar` trait's handler.
pub struct SidecarTrait;

/// Most sidecars per workload.
const MAX_SIDECARS: usize = 4;

/// `properties` of the `sidecar` trait.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarProperties {
    /// The sidecars.
    pub sidecars: Vec<SidecarSpec>,
}

/// One sidecar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SidecarSpec {
    /// Name, unique within the workload (a DNS label).
    pub name: String,
    /// Image or binary, checked against the allow-lists.
    pub image: String,
    /// Opaque runtime description for the adapter.
    pub runtime_spec: RuntimeSpec,
}

fn parse(properties: &serde_json::Value, path: &str) -> Result<SidecarProperties, FieldError> {
    super::read_properties(properties, path)
}

impl TraitHandler for SidecarTrait {
    fn name(&self) -> &'static str {
        "sidecar"
    }

    // Pods have their own containers; the Kubernetes adapter does not add
    // them from this trait yet.
    fn runtimes(&self) -> &'static [RuntimeType] {
        &[RuntimeType::Process]
    }

    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError> {
        let p = match parse(properties, path) {
            Ok(p) => p,
            Err(e) => return vec![e],
        };
        let mut errors = Vec::new();
        if p.sidecars.is_empty() || p.sidecars.len() > MAX_SIDECARS {
            errors.push(FieldError::new(
                format!("{path}.sidecars"),
                format!(
                    "name 1 to {MAX_SIDECARS} sidecars, got {}",
                    p.sidecars.len()
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, s) in p.sidecars.iter().enumerate() {
            let at = format!("{path}.sidecars[{i}]");
            errors.extend(crate::model::names::check_name(
                &format!("{at}.name"),
                &s.name,
            ));
            if !seen.insert(s.name.as_str()) {
                errors.push(FieldError::new(
                    format!("{at}.name"),
                    format!("duplicate sidecar name {:?}", s.name),
                ));
            }
            if s.image.trim().is_empty() {
                errors.push(FieldError::new(format!("{at}.image"), "must not be empty"));
            }
            if !s.runtime_spec.0.is_object() {
                errors.push(FieldError::new(
                    format!("{at}.runtimeSpec"),
                    "must be a mapping (the adapter's runtime description)",
                ));
            }
        }
        errors
    }
}

/// The sidecars the `sidecar` trait among `traits` asks for.
pub fn sidecars(traits: &[super::Trait]) -> Vec<SidecarSpec> {
    super::properties_of::<SidecarProperties>(traits, SidecarTrait.name())
        .map(|p| p.sidecars)
        .unwrap_or_default()
}
