//! How a changed workload replaces its running replicas (Kubernetes'
//! `RollingUpdate` strategy and progress deadline, Nomad's `auto_revert`).
//!
//! Each replica is replaced by a new instance of the new version. A
//! replacement either starts the new instance while the old one still runs
//! and stops the old one once the new one is ready (a *surge*, at most
//! `maxSurge` at a time per workload), or stops the old one first (at most
//! `maxUnavailable` at a time). Surging first is only possible when two
//! copies of the replica can run side by side: a process on the host network
//! that binds a fixed port needs `SO_REUSEPORT`, else the new copy cannot
//! bind and the rollout fails (and rolls back). Hence the default: stop first,
//! one at a time, as before.
//!
//! A rollout that is not complete `progressDeadline` after it began, or whose
//! new instances exhausted their restarts, has failed: with `autoRollback`
//! the coordinator applies the spec of the version the rollout started from
//! as a new version; without it the rollout holds (the surged old replicas
//! keep serving) until an operator rolls back or applies a fix.

use super::time::DurationMs;
use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};

/// Rollout strategy of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutPolicy {
    /// Replacements that start their new instance before stopping the old one,
    /// at a time (default 0).
    #[serde(default)]
    pub max_surge: u32,
    /// Replacements that stop their old instance first, at a time (default 1);
    /// used once the surge budget is taken.
    #[serde(default = "one")]
    pub max_unavailable: u32,
    /// The rollout fails when it is not complete this long after it began
    /// (default 10m).
    #[serde(default = "default_deadline")]
    pub progress_deadline: DurationMs,
    /// A failed rollout rolls back to the version it started from (default
    /// true).
    #[serde(default = "yes")]
    pub auto_rollback: bool,
}

fn one() -> u32 {
    1
}

fn default_deadline() -> DurationMs {
    DurationMs::from_secs(600)
}

fn yes() -> bool {
    true
}

impl Default for RolloutPolicy {
    fn default() -> Self {
        Self {
            max_surge: 0,
            max_unavailable: one(),
            progress_deadline: default_deadline(),
            auto_rollback: true,
        }
    }
}

impl RolloutPolicy {
    /// Checks the values; `path` is the policy's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.max_surge == 0 && self.max_unavailable == 0 {
            errs.push(FieldError::new(
                join(path, "maxUnavailable"),
                "maxSurge and maxUnavailable cannot both be 0 (no replica could ever be replaced)",
            ));
        }
        if self.progress_deadline == DurationMs(0) {
            errs.push(FieldError::new(
                join(path, "progressDeadline"),
                "must be more than 0 (every rollout would fail at once)",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let d: RolloutPolicy = serde_json::from_str("{}").unwrap();
        assert_eq!(d, RolloutPolicy::default());
        assert_eq!((d.max_surge, d.max_unavailable), (0, 1));
        assert!(d.validate("p").is_empty());
        let stuck = RolloutPolicy {
            max_unavailable: 0,
            ..d
        };
        assert_eq!(
            stuck.validate("p.rollout")[0].path,
            "p.rollout.maxUnavailable"
        );
        let e =
            serde_json::from_str::<RolloutPolicy>(r#"{"maxSurge": 1, "surge": 1}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `surge`"), "{e}");
    }
}
