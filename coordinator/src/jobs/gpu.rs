//! `gpu-batch`: a program that needs GPUs (seed 002 Q5). The GPUs are
//! pre-checked: at admission, a step that no node of the cluster could ever
//! hold (more GPUs than any node has) refuses the application with the
//! reason — a *rejection*; when nodes could but none has the GPUs free now,
//! the step waits for capacity (and says so); a run that ends badly is a
//! *failure*. Three different states, never one for another.
//!
//! ```yaml
//! - name: eval
//!   type: gpu-batch
//!   properties: {command: /opt/eval/run, args: [--model, m1], gpus: 1}
//! ```

use super::command::{CommandProperties, run_of};
use super::{JobLimits, JobRun, JobType};
use crate::field::FieldError;
use crate::model::resources::{GpuCount, ResourceBounds};
use crate::model::time::DurationMs;
use serde::Deserialize;

/// The `gpu-batch` job type.
pub struct GpuJob;

/// Most GPUs one step may ask.
const MAX_GPUS: u32 = 8;

// Not deny_unknown_fields (serde cannot with flatten): the command's reader
// refuses what is neither.
#[derive(Debug, Clone, Deserialize)]
struct GpuProperties {
    gpus: u32,
    #[serde(flatten)]
    command: serde_json::Map<String, serde_json::Value>,
}

fn read(
    properties: &serde_json::Value,
    path: &str,
) -> Result<(u32, CommandProperties), Vec<FieldError>> {
    let p: GpuProperties = crate::traits::read_properties(properties, path).map_err(|e| vec![e])?;
    let mut errs = Vec::new();
    if p.gpus == 0 {
        errs.push(FieldError::new(
            format!("{path}.gpus"),
            "must be at least 1 (a GPU job without a GPU is a `command` job)",
        ));
    }
    let cmd = super::command::read(&serde_json::Value::Object(p.command), path);
    match cmd {
        Ok(c) if errs.is_empty() => Ok((p.gpus, c)),
        Ok(_) => Err(errs),
        Err(e) => {
            errs.extend(e);
            Err(errs)
        }
    }
}

impl JobType for GpuJob {
    fn name(&self) -> &'static str {
        "gpu-batch"
    }

    fn summary(&self) -> &'static str {
        "runs a program that needs GPUs; refused at admission when no node could ever hold it"
    }

    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError> {
        read(properties, path).err().unwrap_or_default()
    }

    fn run(&self, properties: &serde_json::Value) -> Result<JobRun, String> {
        let (gpus, c) = read(properties, "properties").map_err(|e| {
            e.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        let mut run = run_of(c);
        run.resources.gpu = ResourceBounds {
            request: Some(GpuCount(gpus)),
            limit: Some(GpuCount(gpus)),
            ..ResourceBounds::default()
        };
        Ok(run)
    }

    fn limits(&self) -> JobLimits {
        JobLimits {
            max_timeout: DurationMs::from_secs(24 * 3600),
            max_gpus: MAX_GPUS,
            ..JobLimits::default()
        }
    }
}
