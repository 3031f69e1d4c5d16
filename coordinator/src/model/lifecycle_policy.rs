//! How a workload reacts to failure (seed 000 §4.7.2): restart with retries
//! and backoff, wait for an operator, or fail and stop its dependents.

use super::disconnect::DisconnectPolicy;
use super::failure::FailureCategory;
use super::rollout::RolloutPolicy;
use super::time::DurationMs;
use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};

/// When an exited or failed instance is restarted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPolicy {
    /// After any exit, including exit code 0 (long-running services).
    #[default]
    Always,
    /// Only after a failure (non-zero exit, crash, failed liveness check).
    OnFailure,
    /// Never; a failure goes straight to `onExhausted`.
    Never,
}

/// What happens when restarts are not allowed or exhausted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnExhausted {
    /// Hold the workload and wait for an operator (the application is
    /// Degraded, or stays Scheduled if it never ran, and says why).
    WaitForOperator,
    /// Mark the application Failed and stop the workloads that depend on
    /// the failing one.
    #[default]
    FailAndStopDependents,
}

/// What a workload does about a failure of one category (seed 000 §4.7.2:
/// restart by default, wait for an operator, or fail and stop dependents).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureAction {
    /// Restart per `restart`, `maxRetries` and `backoff`; `onExhausted`
    /// applies once no restart is left.
    #[default]
    Restart,
    /// Hold at once, without restarting, until an operator acts.
    WaitForOperator,
    /// Fail the application at once and stop the dependents.
    FailAndStopDependents,
}

/// Per failure category (seed 000 §4.7.1), the action that replaces the
/// default `Restart`; a category left out restarts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OnFailure {
    /// Node down, network partition (a lost instance placed elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure: Option<FailureAction>,
    /// Crash, non-zero exit, adapter error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<FailureAction>,
    /// Killed at its memory limit (default: as `runtime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_memory: Option<FailureAction>,
    /// Failing liveness check, business error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<FailureAction>,
    /// A D-AROS component failed (e.g. the node lost track of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<FailureAction>,
    /// A policy refused it (e.g. the node's admission of its reservation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_violation: Option<FailureAction>,
}

impl OnFailure {
    /// The action for a failure of category `c`.
    pub fn action(&self, c: FailureCategory) -> FailureAction {
        let own = match c {
            FailureCategory::Infrastructure => self.infrastructure,
            FailureCategory::Runtime => self.runtime,
            FailureCategory::OutOfMemory => self.out_of_memory.or(self.runtime),
            FailureCategory::Application => self.application,
            FailureCategory::ControlPlane => self.control_plane,
            FailureCategory::PolicyViolation => self.policy_violation,
        };
        own.unwrap_or_default()
    }

    /// True when every category restarts (the default).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Exponential backoff between restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    /// Delay before the first restart (default 1s).
    #[serde(default = "default_initial")]
    pub initial: DurationMs,
    /// Largest delay (default 5m).
    #[serde(default = "default_max")]
    pub max: DurationMs,
    /// Factor applied after each restart (default 2).
    #[serde(default = "default_multiplier")]
    pub multiplier: u32,
}

fn default_initial() -> DurationMs {
    DurationMs::from_secs(1)
}
fn default_max() -> DurationMs {
    DurationMs::from_secs(300)
}
fn default_multiplier() -> u32 {
    2
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: default_initial(),
            max: default_max(),
            multiplier: default_multiplier(),
        }
    }
}

impl Backoff {
    /// Delay before restart number `attempt` (0-based): `initial *
    /// multiplier^attempt`, capped at `max`.
    pub fn delay(&self, attempt: u32) -> DurationMs {
        let mut d = self.initial.0;
        for _ in 0..attempt {
            d = d.saturating_mul(u64::from(self.multiplier));
            if d >= self.max.0 {
                return self.max;
            }
        }
        DurationMs(d.min(self.max.0))
    }

    /// Checks the values; `path` is the backoff's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.multiplier == 0 {
            errs.push(FieldError::new(
                join(path, "multiplier"),
                "must be at least 1",
            ));
        }
        if self.max < self.initial {
            errs.push(FieldError::new(
                join(path, "max"),
                format!("max {} is below initial {}", self.max, self.initial),
            ));
        }
        errs
    }
}

/// Failure handling of a workload (or, at application level, the default
/// for its workloads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LifecyclePolicy {
    /// When to restart (default `Always`).
    #[serde(default)]
    pub restart: RestartPolicy,
    /// Restarts allowed before `onExhausted` applies; absent = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Delay between restarts.
    #[serde(default)]
    pub backoff: Backoff,
    /// What to do when no restart is allowed (default
    /// `FailAndStopDependents`).
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// Per failure category, an action other than restarting.
    #[serde(default, skip_serializing_if = "OnFailure::is_default")]
    pub on_failure: OnFailure,
    /// An instance that ran this long before failing starts counting its
    /// retries afresh (default 10m).
    #[serde(default = "default_reset")]
    pub reset_after: DurationMs,
    /// What happens when its node goes silent.
    #[serde(default)]
    pub disconnect: DisconnectPolicy,
    /// How a changed workload replaces its replicas.
    #[serde(default)]
    pub rollout: RolloutPolicy,
}

fn default_reset() -> DurationMs {
    DurationMs::from_secs(600)
}

impl Default for LifecyclePolicy {
    fn default() -> Self {
        Self {
            restart: RestartPolicy::default(),
            max_retries: None,
            backoff: Backoff::default(),
            on_exhausted: OnExhausted::default(),
            on_failure: OnFailure::default(),
            reset_after: default_reset(),
            disconnect: DisconnectPolicy::default(),
            rollout: RolloutPolicy::default(),
        }
    }
}

impl LifecyclePolicy {
    /// Checks the values; `path` is the policy's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = self.backoff.validate(&join(path, "backoff"));
        errs.extend(self.disconnect.validate(&join(path, "disconnect")));
        errs.extend(self.rollout.validate(&join(path, "rollout")));
        errs
    }

    /// True when an instance that ended (`failed` tells whether it was a
    /// failure) after `restarts` earlier restarts may be restarted again.
    pub fn may_restart(&self, failed: bool, restarts: u32) -> bool {
        let wanted = match self.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => failed,
            RestartPolicy::Never => false,
        };
        wanted && self.max_retries.is_none_or(|m| restarts < m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let b = Backoff {
            initial: DurationMs(1000),
            max: DurationMs(5000),
            multiplier: 2,
        };
        let d: Vec<u64> = (0..5).map(|a| b.delay(a).0).collect();
        assert_eq!(d, [1000, 2000, 4000, 5000, 5000]);
    }

    #[test]
    fn restart_rules() {
        let mut p = LifecyclePolicy {
            restart: RestartPolicy::OnFailure,
            max_retries: Some(2),
            ..Default::default()
        };
        assert!(p.may_restart(true, 0));
        assert!(p.may_restart(true, 1));
        assert!(!p.may_restart(true, 2));
        assert!(!p.may_restart(false, 0));
        p.restart = RestartPolicy::Always;
        assert!(p.may_restart(false, 0));
        p.restart = RestartPolicy::Never;
        assert!(!p.may_restart(true, 0));
    }
}
