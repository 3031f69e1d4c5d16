//! The `init` trait: init jobs written as a trait, another spelling of the
//! workload's `initJobs` (seed 002: "建表" before the service). The core reads
//! both through [`Workload::all_init_jobs`]: `initJobs` first, then these;
//! each job is checked with the others (`spec::validate`) at its own path.
//!
//! ```yaml
//! traits:
//! - type: init
//!   properties:
//!     jobs:
//!     - {name: migrate, runtimeSpec: {command: /usr/bin/migrate}}
//! ```

use super::TraitHandler;
use crate::field::FieldError;
use crate::model::runtime::RuntimeType;
use crate::model::workload::InitJob;
#[cfg(doc)]
use crate::model::workload::Workload;
use serde::{Deserialize, Serialize};

/// The `init` trait's handler.
pub struct InitTrait;

/// `properties` of the `init` trait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitProperties {
    /// Jobs, run in order after the workload's `initJobs`.
    pub jobs: Vec<InitJob>,
}

fn parse(properties: &serde_json::Value, path: &str) -> Result<InitProperties, FieldError> {
    super::read_properties(properties, path)
}

impl TraitHandler for InitTrait {
    fn name(&self) -> &'static str {
        "init"
    }

    fn runtimes(&self) -> &'static [RuntimeType] {
        &RuntimeType::ALL
    }

    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError> {
        match parse(properties, path) {
            Ok(p) if p.jobs.is_empty() => vec![FieldError::new(
                format!("{path}.jobs"),
                "name at least one job",
            )],
            Ok(_) => Vec::new(),
            Err(e) => vec![e],
        }
    }
}

/// The jobs of the `init` trait among `traits`, each with its path relative
/// to the workload (`traits[1].properties.jobs[0]`).
pub fn jobs(traits: &[super::Trait]) -> Vec<(String, InitJob)> {
    traits
        .iter()
        .enumerate()
        .filter(|(_, t)| t.kind == InitTrait.name())
        .filter_map(|(i, t)| parse(&t.properties, "").ok().map(|p| (i, p)))
        .flat_map(|(i, p)| {
            p.jobs
                .into_iter()
                .enumerate()
                .map(move |(k, j)| (format!("traits[{i}].properties.jobs[{k}]"), j))
        })
        .collect()
}
