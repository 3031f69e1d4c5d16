//! Lifecycle events (seed 000 §11.2.1): one per transition.

use super::state::Phase;
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Who caused a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// A user or operator request.
    User,
    /// The system: admission, arbitration, runtime reports.
    System,
    /// A policy: preemption, eviction.
    Policy,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Trigger::User => "user",
            Trigger::System => "system",
            Trigger::Policy => "policy",
        })
    }
}

/// Where a transition led: a phase, or out of existence (`[*]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Target {
    /// A phase.
    Phase(Phase),
    /// The application was deleted and cleaned up.
    Removed,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Phase(p) => write!(f, "{p}"),
            Target::Removed => f.write_str("[deleted]"),
        }
    }
}

/// One recorded transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleEvent {
    /// Sequence number, unique across the coordinator.
    pub seq: u64,
    /// The application.
    pub app: AppKey,
    /// When.
    pub time: Timestamp,
    /// Phase before (`None` when the application was just created).
    pub from: Option<Phase>,
    /// Phase after.
    pub to: Target,
    /// Who caused it.
    pub trigger: Trigger,
    /// Why, in words.
    pub reason: String,
    /// Policies that took part.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    /// Related objects: decision ids, versions, workloads, nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<String>,
}

impl LifecycleEvent {
    /// One line, with the time rendered by `time`.
    pub fn render(&self, time: crate::model::time::TimeFormat<'_>) -> String {
        let from = self.from.map_or("[*]".to_string(), |p| p.to_string());
        let mut s = format!(
            "#{} {} {} -> {} ({}): {}",
            self.seq,
            time(self.time),
            from,
            self.to,
            self.trigger,
            self.reason
        );
        if !self.policies.is_empty() {
            s.push_str(&format!(" [policies: {}]", self.policies.join(", ")));
        }
        if !self.related.is_empty() {
            s.push_str(&format!(" [{}]", self.related.join(", ")));
        }
        s
    }
}

impl fmt::Display for LifecycleEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&|t| t.to_string()))
    }
}
