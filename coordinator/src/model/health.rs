//! Health checks a runtime adapter runs for a workload; the coordinator only
//! carries them and reacts to their reported outcome.

use super::time::DurationMs;
use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};

/// What a failing check means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckKind {
    /// Failure means the instance is broken: it is handled by the lifecycle
    /// policy (restart, wait for an operator, fail).
    #[default]
    Liveness,
    /// Success gates readiness: dependents start only after it passes.
    Readiness,
}

/// Run a command inside the workload; exit 0 is healthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecProbe {
    /// argv of the command.
    pub command: Vec<String>,
}

/// HTTP GET; a 2xx/3xx answer is healthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpProbe {
    /// Port on the workload.
    pub port: u16,
    /// Path to request (default `/`).
    #[serde(default = "default_path")]
    pub path: String,
}

fn default_path() -> String {
    "/".to_string()
}

/// TCP connect; an accepted connection is healthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpProbe {
    /// Port on the workload.
    pub port: u16,
}

/// One health check: exactly one of `exec`, `http`, `tcp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheck {
    /// Name, unique within the workload.
    pub name: String,
    /// Liveness (default) or readiness.
    #[serde(default)]
    pub kind: CheckKind,
    /// Command probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecProbe>,
    /// HTTP probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpProbe>,
    /// TCP probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpProbe>,
    /// Time between probes (default 10s).
    #[serde(default = "default_period")]
    pub period: DurationMs,
    /// Time a probe may take (default 1s).
    #[serde(default = "default_timeout")]
    pub timeout: DurationMs,
    /// Consecutive failures before the check fails (default 3).
    #[serde(default = "default_threshold")]
    pub failure_threshold: u32,
    /// Wait before the first probe (default 0).
    #[serde(default)]
    pub initial_delay: DurationMs,
}

fn default_period() -> DurationMs {
    DurationMs::from_secs(10)
}
fn default_timeout() -> DurationMs {
    DurationMs::from_secs(1)
}
fn default_threshold() -> u32 {
    3
}

impl HealthCheck {
    /// Checks the probe choice and timings; `path` is the check's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.name.trim().is_empty() {
            errs.push(FieldError::new(join(path, "name"), "must not be empty"));
        }
        let probes = [self.exec.is_some(), self.http.is_some(), self.tcp.is_some()]
            .iter()
            .filter(|b| **b)
            .count();
        if probes != 1 {
            errs.push(FieldError::new(
                path,
                format!("set exactly one of exec, http, tcp (found {probes})"),
            ));
        }
        if let Some(e) = &self.exec
            && e.command.is_empty()
        {
            errs.push(FieldError::new(
                join(path, "exec.command"),
                "must not be empty",
            ));
        }
        if self.period.0 == 0 {
            errs.push(FieldError::new(
                join(path, "period"),
                "must be greater than 0",
            ));
        }
        if self.timeout.0 == 0 || self.timeout > self.period {
            errs.push(FieldError::new(
                join(path, "timeout"),
                format!(
                    "must be greater than 0 and at most period ({})",
                    self.period
                ),
            ));
        }
        if self.failure_threshold == 0 {
            errs.push(FieldError::new(
                join(path, "failureThreshold"),
                "must be at least 1",
            ));
        }
        errs
    }
}
