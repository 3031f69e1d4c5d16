//! Policies are versioned like application specs (seed 000 §8.5): every
//! write that changes a policy records a version, the history is kept (up to
//! the retention's versions per policy, deletion included), and a rollback
//! writes an earlier version again as a new one, through the same conflict
//! and impact checks as any write.

use super::Coordinator;
use crate::command::Outcome;
use crate::error::CoordinatorError;
use crate::model::policy::Policy;
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};

/// One version of a policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyVersion {
    /// Version number, from 1.
    pub version: u32,
    /// When it was written.
    pub time: Timestamp,
    /// The policy as written; `None` records its deletion.
    pub policy: Option<Policy>,
    /// The version it restored, for a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u32>,
}

impl Coordinator {
    /// Records `policy` (or the deletion of `name`) as its next version
    /// when it differs from the latest.
    pub(super) fn record_policy_version(
        &mut self,
        name: &str,
        policy: Option<Policy>,
        rollback_of: Option<u32>,
        now: Timestamp,
    ) {
        let keep = self.retention.versions.max(1);
        let h = self.policy_versions.entry(name.to_string()).or_default();
        if rollback_of.is_none() && h.last().map(|v| &v.policy) == Some(&policy) {
            return;
        }
        let version = h.last().map_or(1, |v| v.version + 1);
        h.push(PolicyVersion {
            version,
            time: now,
            policy,
            rollback_of,
        });
        if h.len() > keep {
            h.drain(..h.len() - keep);
        }
    }

    /// The recorded versions of policy `name`, oldest first.
    pub fn policy_versions(&self, name: &str) -> Option<&[PolicyVersion]> {
        self.policy_versions.get(name).map(Vec::as_slice)
    }

    /// `RollbackPolicy`: writes version `version` of `name` again.
    pub(super) fn cmd_rollback_policy(
        &mut self,
        name: &str,
        version: u32,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let h = self
            .policy_versions
            .get(name)
            .ok_or_else(|| CoordinatorError::UnknownPolicy(name.to_string()))?;
        let Some(v) = h.iter().find(|v| v.version == version) else {
            return Err(CoordinatorError::Invalid {
                kind: "Policy".into(),
                name: name.into(),
                errors: vec![crate::field::FieldError::new(
                    "version",
                    format!(
                        "policy {name} has no version {version} (kept: {})",
                        h.iter()
                            .map(|v| v.version.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )],
            });
        };
        let Some(p) = v.policy.clone() else {
            return Err(CoordinatorError::Invalid {
                kind: "Policy".into(),
                name: name.into(),
                errors: vec![crate::field::FieldError::new(
                    "version",
                    format!("version {version} of policy {name} is its deletion"),
                )],
            });
        };
        let errors = self.policy_conflicts(&p);
        if !errors.is_empty() {
            return Err(CoordinatorError::Invalid {
                kind: "Policy".into(),
                name: name.into(),
                errors,
            });
        }
        self.policies.insert(p.name.clone(), p.clone());
        self.record_policy_version(name, Some(p.clone()), Some(version), now);
        self.policy_impact(&p, now, out);
        Ok(())
    }
}
