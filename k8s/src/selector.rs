//! Label selectors as Kubernetes writes them (`matchLabels`,
//! `matchExpressions` with In, NotIn, Exists, DoesNotExist), and matching.

use daros_coordinator::FieldError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values (In, NotIn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be equal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Further requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    /// True when `labels` satisfy every part.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let got = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => got.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => got.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => got.is_some(),
                    "DoesNotExist" => got.is_none(),
                    _ => false,
                }
            })
    }

    /// Field errors under `path`.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut e = Vec::new();
        for (i, r) in self.match_expressions.iter().enumerate() {
            let p = format!("{path}.matchExpressions[{i}]");
            match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => e.push(FieldError::new(
                    format!("{p}.values"),
                    format!("{} needs at least one value", r.operator),
                )),
                "Exists" | "DoesNotExist" if !r.values.is_empty() => e.push(FieldError::new(
                    format!("{p}.values"),
                    format!("{} takes no values", r.operator),
                )),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => e.push(FieldError::new(
                    format!("{p}.operator"),
                    format!("{other:?}: expected In, NotIn, Exists or DoesNotExist"),
                )),
            }
        }
        e
    }
}
