//! Policy evaluation records (seed 000 §11.2.3 PolicyExecution): every
//! resolution and every check against a policy is kept.

use super::resolve::{EffectivePolicy, Resolution};
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};

/// Result of one check made against the effective policy or the quota.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyCheck {
    /// What was checked (`allowedRuntimeTypes`, `quota.cpu`, ...).
    pub rule: String,
    /// Whether it passed.
    pub passed: bool,
    /// Input and finding, in words.
    pub detail: String,
    /// Policy that set the rule, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// One evaluation of the policies of an application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyEvaluation {
    /// Sequence number.
    pub id: u64,
    /// When.
    pub time: Timestamp,
    /// For which application.
    pub app: AppKey,
    /// Spec version evaluated.
    pub version: u32,
    /// Policies taken into account, highest scope first.
    pub policies: Vec<String>,
    /// Resolution result, or the conflict.
    pub effective: Result<EffectivePolicy, String>,
    /// How each field was decided.
    pub resolutions: Vec<Resolution>,
    /// Checks made with the result (admission).
    pub checks: Vec<PolicyCheck>,
}
