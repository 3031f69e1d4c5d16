//! Resource pool (seed 000 §4.4): a label selector over nodes giving
//! arbitrable capacity. A node may belong to several pools.

use super::node::ExecutionNode;
use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Name of the pool that exists without being declared: every node.
pub const DEFAULT_POOL: &str = "default";

/// Operator of a label expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperator {
    /// Label value is one of `values`.
    In,
    /// Label absent or not one of `values`.
    NotIn,
    /// Label present.
    Exists,
    /// Label absent.
    DoesNotExist,
}

/// One label expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelExpression {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: SelectorOperator,
    /// Values for `In`/`NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A Kubernetes-style label selector; empty selects every node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must have exactly these values.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Expressions that must all hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelExpression>,
}

impl LabelSelector {
    /// True when `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let v = labels.get(&e.key);
                match e.operator {
                    SelectorOperator::In => v.is_some_and(|v| e.values.contains(v)),
                    SelectorOperator::NotIn => v.is_none_or(|v| !e.values.contains(v)),
                    SelectorOperator::Exists => v.is_some(),
                    SelectorOperator::DoesNotExist => v.is_none(),
                }
            })
    }

    /// Checks expression shapes; `path` is the selector's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, e) in self.match_expressions.iter().enumerate() {
            let p = format!("{}[{i}]", join(path, "matchExpressions"));
            let needs_values = matches!(e.operator, SelectorOperator::In | SelectorOperator::NotIn);
            if needs_values && e.values.is_empty() {
                errs.push(FieldError::new(
                    join(&p, "values"),
                    format!("{:?} needs at least one value", e.operator),
                ));
            }
            if !needs_values && !e.values.is_empty() {
                errs.push(FieldError::new(
                    join(&p, "values"),
                    format!("{:?} takes no values", e.operator),
                ));
            }
            if e.key.is_empty() {
                errs.push(FieldError::new(join(&p, "key"), "must not be empty"));
            }
        }
        errs
    }
}

/// A named pool of nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourcePool {
    /// Pool name.
    pub name: String,
    /// Which nodes belong to it.
    #[serde(default)]
    pub selector: LabelSelector,
}

impl ResourcePool {
    /// True when `node` belongs to this pool.
    pub fn contains(&self, node: &ExecutionNode) -> bool {
        self.selector.matches(&node.labels)
    }

    /// The implicit pool of every node.
    pub fn default_pool() -> Self {
        Self {
            name: DEFAULT_POOL.to_string(),
            selector: LabelSelector::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_semantics() {
        let labels: BTreeMap<String, String> = [("tier".to_string(), "gpu".to_string())]
            .into_iter()
            .collect();
        let sel = |json: &str| serde_json::from_str::<LabelSelector>(json).unwrap();
        assert!(sel("{}").matches(&labels));
        assert!(sel(r#"{"matchLabels":{"tier":"gpu"}}"#).matches(&labels));
        assert!(!sel(r#"{"matchLabels":{"tier":"cpu"}}"#).matches(&labels));
        assert!(
            sel(r#"{"matchExpressions":[{"key":"tier","operator":"In","values":["gpu","x"]}]}"#)
                .matches(&labels)
        );
        assert!(
            sel(r#"{"matchExpressions":[{"key":"zone","operator":"NotIn","values":["a"]}]}"#)
                .matches(&labels)
        );
        assert!(
            !sel(r#"{"matchExpressions":[{"key":"zone","operator":"Exists"}]}"#).matches(&labels)
        );
        let bad = sel(r#"{"matchExpressions":[{"key":"zone","operator":"In"}]}"#);
        assert_eq!(
            bad.validate("spec.selector")[0].path,
            "spec.selector.matchExpressions[0].values"
        );
    }
}
