//! Node pressure (seed 000 §6.4.2 "资源压力超过阈值"): a node's agent says
//! when the node is under resource pressure (its PSI above the operator's
//! thresholds) and when that ends. While it lasts, the Running applications
//! with instances there are Degraded, saying which node and what; once no
//! node of theirs is under pressure they recover (if nothing else keeps them
//! down).

use super::Coordinator;
use super::entry::{Degradation, DegradationCause};
use crate::command::Outcome;
use crate::error::CoordinatorError;
use crate::lifecycle::{Input, Phase, SystemEvent, Trigger};
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};

/// A node under pressure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePressure {
    /// Since when.
    pub since: Timestamp,
    /// What its agent measured (`memory full 12.0% (avg10) >= 10%`).
    pub detail: String,
}

impl Coordinator {
    /// `NodePressure`: node `node` is under pressure (`Some(what)`) or no
    /// longer (`None`).
    pub(super) fn cmd_node_pressure(
        &mut self,
        node: &str,
        pressure: Option<String>,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        self.cluster
            .index_of(node)
            .ok_or_else(|| CoordinatorError::UnknownNode(node.into()))?;
        match pressure {
            Some(detail) => {
                let newly = !self.pressure.contains_key(node);
                let since = self.pressure.get(node).map_or(now, |p| p.since);
                self.pressure
                    .insert(node.to_string(), NodePressure { since, detail });
                if newly {
                    out.notes.push(format!("node {node} under pressure"));
                    for key in self.apps_with_instances_on(node) {
                        self.degrade_for_pressure(&key, node, now, out);
                    }
                }
            }
            None => {
                if self.pressure.remove(node).is_none() {
                    return Ok(());
                }
                out.notes
                    .push(format!("node {node} no longer under pressure"));
                let relieved: Vec<AppKey> = self
                    .apps
                    .values()
                    .filter(|e| {
                        e.degradation
                            .as_ref()
                            .is_some_and(|d| d.cause == DegradationCause::NodePressure)
                    })
                    .map(|e| e.key.clone())
                    .filter(|k| self.pressured_node_of(k).is_none())
                    .collect();
                for key in relieved {
                    if let Some(e) = self.apps.get_mut(&key) {
                        e.degradation = Some(Degradation {
                            cause: DegradationCause::Runtime,
                            reason: format!("node {node} no longer under pressure"),
                        });
                    }
                    self.replan(&key, now, out);
                }
            }
        }
        Ok(())
    }

    /// The node under pressure `key` has an instance on, if any.
    fn pressured_node_of(&self, key: &AppKey) -> Option<String> {
        let e = self.apps.get(key)?;
        e.runtime
            .instances
            .values()
            .filter_map(|i| i.node.as_ref())
            .find(|n| self.pressure.contains_key(*n))
            .cloned()
    }

    fn degrade_for_pressure(
        &mut self,
        key: &AppKey,
        node: &str,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let Some(e) = self.apps.get(key) else {
            return;
        };
        let detail = self.pressure.get(node).map_or("", |p| p.detail.as_str());
        let reason = format!("node {node} under pressure: {detail}");
        match e.phase {
            Phase::Running => {
                let _ = self.transition_app(
                    key,
                    Input::Event(SystemEvent::Degrade),
                    Trigger::System,
                    reason.clone(),
                    Vec::new(),
                    Vec::new(),
                    now,
                    out,
                );
            }
            // Already degraded for a cause that heals by itself: pressure
            // now keeps it there too.
            Phase::Degraded
                if e.degradation
                    .as_ref()
                    .is_none_or(|d| d.cause == DegradationCause::Runtime) => {}
            _ => return,
        }
        if let Some(e) = self.apps.get_mut(key) {
            e.degradation = Some(Degradation {
                cause: DegradationCause::NodePressure,
                reason,
            });
        }
    }

    /// Nodes under pressure, by name.
    pub fn node_pressure(&self, name: &str) -> Option<&NodePressure> {
        self.pressure.get(name)
    }
}
