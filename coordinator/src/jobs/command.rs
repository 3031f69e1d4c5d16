//! `command`: runs a program to completion (exit 0 is success).
//!
//! ```yaml
//! - name: migrate
//!   type: command
//!   properties:
//!     command: /usr/bin/python3
//!     args: [migrate.py]
//!     env: {STAGE: "2"}
//!     cpu: 500m
//!     memory: 256Mi
//! ```

use super::{JobRun, JobType};
use crate::field::FieldError;
use crate::model::resources::{Bytes, MilliCpu, ResourceBounds, ResourceProfile};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The `command` job type.
pub struct CommandJob;

/// Its `properties`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandProperties {
    /// Absolute path of the program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// CPU asked (default 100m).
    #[serde(default)]
    pub cpu: Option<MilliCpu>,
    /// Memory asked and its limit (default 128Mi).
    #[serde(default)]
    pub memory: Option<Bytes>,
}

/// Checks the properties common to command-like types and reads them.
pub(crate) fn read(
    properties: &serde_json::Value,
    path: &str,
) -> Result<CommandProperties, Vec<FieldError>> {
    let p: CommandProperties =
        crate::traits::read_properties(properties, path).map_err(|e| vec![e])?;
    let mut errs = Vec::new();
    if !p.command.starts_with('/') {
        errs.push(FieldError::new(
            format!("{path}.command"),
            format!("{:?} must be an absolute path", p.command),
        ));
    }
    for k in p.env.keys() {
        if k.is_empty() || k.contains('=') || k.starts_with("DAROS_") {
            errs.push(FieldError::new(
                format!("{path}.env.{k}"),
                "must be a name without '=' that does not start with DAROS_",
            ));
        }
    }
    if errs.is_empty() { Ok(p) } else { Err(errs) }
}

/// The run of command-like properties.
pub(crate) fn run_of(p: CommandProperties) -> JobRun {
    let mut argv = vec![p.command];
    argv.extend(p.args);
    let memory = p.memory.unwrap_or(Bytes(128 << 20));
    JobRun {
        argv,
        env: p.env,
        resources: ResourceProfile {
            cpu: ResourceBounds {
                request: Some(p.cpu.unwrap_or(MilliCpu(100))),
                ..ResourceBounds::default()
            },
            memory: ResourceBounds {
                request: Some(memory),
                limit: Some(memory),
                ..ResourceBounds::default()
            },
            ..ResourceProfile::default()
        },
    }
}

impl JobType for CommandJob {
    fn name(&self) -> &'static str {
        "command"
    }

    fn summary(&self) -> &'static str {
        "runs a program to completion (exit 0 is success)"
    }

    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError> {
        read(properties, path).err().unwrap_or_default()
    }

    fn run(&self, properties: &serde_json::Value) -> Result<JobRun, String> {
        read(properties, "properties").map(run_of).map_err(|e| {
            e.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}
