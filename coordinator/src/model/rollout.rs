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
//!
//! Two other strategies (seed 000 §10; Nomad's `canary`/`auto_promote`,
//! Argo Rollouts' blue-green):
//! - `canary`: the first `canary.replicas` replicas get a new instance beside
//!   the old one, and every other replica keeps its old version, until the
//!   canaries pass their health gate — each ready, without a restart, for
//!   `canary.healthyFor` — or an operator promotes (`darosctl operate
//!   promote`); then the rollout goes on as `rolling`. A canary that ends
//!   (crash, failed liveness, exit) fails the gate and the rollout at once:
//!   with `autoRollback`, the old instances, which never stopped, are what the
//!   application runs again, and the canaries are stopped.
//! - `blueGreen`: every replica gets its new instance beside the old one; the
//!   old ones are stopped together once every new one is ready (the switch),
//!   so there is no moment without a ready instance.

use super::time::DurationMs;
use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};

/// How the replicas of a changed workload are replaced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Strategy {
    /// Replica by replica within `maxSurge` / `maxUnavailable`.
    #[default]
    Rolling,
    /// A few new instances beside the old ones first, held for a health gate
    /// or an operator's promotion.
    Canary,
    /// A whole new set beside the old one, switched to once all are ready.
    BlueGreen,
}

/// The canary step of a `canary` rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CanaryPolicy {
    /// Replicas (the first ones) that get the new version first (default 1).
    #[serde(default = "one")]
    pub replicas: u32,
    /// The health gate: every canary ready, without a restart, this long
    /// (default 30s).
    #[serde(default = "default_healthy_for")]
    pub healthy_for: DurationMs,
    /// Go on by itself once the gate passes (default true); false: hold for
    /// an operator's promotion.
    #[serde(default = "yes")]
    pub auto_promote: bool,
}

fn default_healthy_for() -> DurationMs {
    DurationMs::from_secs(30)
}

impl Default for CanaryPolicy {
    fn default() -> Self {
        Self {
            replicas: one(),
            healthy_for: default_healthy_for(),
            auto_promote: true,
        }
    }
}

/// Rollout strategy of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutPolicy {
    /// `rolling` (default), `canary` or `blueGreen`.
    #[serde(default)]
    pub strategy: Strategy,
    /// The canary step (read with `strategy: canary`; defaults apply when
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryPolicy>,
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
            strategy: Strategy::Rolling,
            canary: None,
            max_surge: 0,
            max_unavailable: one(),
            progress_deadline: default_deadline(),
            auto_rollback: true,
        }
    }
}

impl RolloutPolicy {
    /// The canary step of a `canary` rollout (its defaults when not given).
    pub fn canary(&self) -> Option<CanaryPolicy> {
        (self.strategy == Strategy::Canary).then(|| self.canary.unwrap_or_default())
    }

    /// Checks the values; `path` is the policy's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match (self.strategy, self.canary) {
            (Strategy::Canary, Some(c)) if c.replicas == 0 => errs.push(FieldError::new(
                join(path, "canary.replicas"),
                "must be at least 1 (a canary of no replica tests nothing)",
            )),
            (Strategy::Rolling | Strategy::BlueGreen, Some(_)) => errs.push(FieldError::new(
                join(path, "canary"),
                "is read only with strategy: canary",
            )),
            _ => {}
        }
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

    #[test]
    fn strategies_and_their_errors() {
        let c: RolloutPolicy = serde_json::from_str(r#"{"strategy": "canary"}"#).unwrap();
        assert_eq!(c.canary(), Some(CanaryPolicy::default()));
        assert!(c.validate("p").is_empty());
        let c: RolloutPolicy = serde_json::from_str(
            r#"{"strategy": "canary", "canary": {"replicas": 2, "healthyFor": "5s", "autoPromote": false}}"#,
        )
        .unwrap();
        assert_eq!(
            c.canary().map(|c| (c.replicas, c.auto_promote)),
            Some((2, false))
        );
        let bg: RolloutPolicy = serde_json::from_str(r#"{"strategy": "blueGreen"}"#).unwrap();
        assert_eq!((bg.strategy, bg.canary()), (Strategy::BlueGreen, None));
        let zero: RolloutPolicy =
            serde_json::from_str(r#"{"strategy": "canary", "canary": {"replicas": 0}}"#).unwrap();
        assert_eq!(zero.validate("r")[0].path, "r.canary.replicas");
        let stray: RolloutPolicy =
            serde_json::from_str(r#"{"strategy": "blueGreen", "canary": {}}"#).unwrap();
        let e = &stray.validate("r")[0];
        assert_eq!(e.path, "r.canary");
        assert!(e.reason.contains("strategy: canary"), "{}", e.reason);
        let e = serde_json::from_str::<RolloutPolicy>(r#"{"strategy": "redBlack"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant `redBlack`"), "{e}");
        let e = serde_json::from_str::<RolloutPolicy>(
            r#"{"strategy": "canary", "canary": {"replica": 1}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `replica`"), "{e}");
    }
}
