//! What-if (seed 000 §11.4.2): applies documents — or a node's loss or
//! drain — to a copy of the state and reports the predicted decisions,
//! conflicts and suggestions. The real state is not touched.

use crate::command::{Command, Outcome};
use crate::decision::Explanation;
use crate::error::CoordinatorError;
use crate::lifecycle::Phase;
use crate::model::names::AppKey;
use crate::model::resources::MilliCpu;
use crate::model::time::{DurationMs, Timestamp};
use crate::placement::RejectReason;
use crate::spec::Document;
use crate::state::Coordinator;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Prediction of applying documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfReport {
    /// What applying them would do (events, decisions, actions, refusals).
    pub outcome: Outcome,
    /// Explanation of every decision it would make.
    pub explanations: Vec<Explanation>,
    /// Phase each application would be in.
    pub phases: Vec<(AppKey, Option<Phase>)>,
    /// Conflicts and refusals, in words.
    pub conflicts: Vec<String>,
    /// Suggested changes that would help.
    pub suggestions: Vec<String>,
}

impl WhatIfReport {
    /// Human rendering.
    pub fn render(&self) -> String {
        let mut s = String::from("What-if (nothing was changed):\n");
        for (k, p) in &self.phases {
            let _ = writeln!(
                s,
                "  {k}: would be {}",
                p.map_or("deleted".to_string(), |p| p.to_string())
            );
        }
        for c in &self.conflicts {
            let _ = writeln!(s, "  conflict: {c}");
        }
        for sg in &self.suggestions {
            let _ = writeln!(s, "  suggestion: {sg}");
        }
        for e in &self.explanations {
            s.push('\n');
            s.push_str(&e.render());
        }
        s
    }
}

impl Coordinator {
    /// Predicts the result of applying `documents` (and starting the
    /// applications) at `now`. Changes nothing.
    pub fn what_if(
        &self,
        documents: Vec<Document>,
        now: Timestamp,
    ) -> Result<WhatIfReport, CoordinatorError> {
        let apps: Vec<AppKey> = documents
            .iter()
            .filter_map(|d| match d {
                Document::Application(a) => Some(a.key()),
                _ => None,
            })
            .collect();
        let mut sim = self.clone();
        let outcome = sim.apply(
            Command::Apply {
                documents,
                start: true,
            },
            now,
        )?;
        let explanations: Vec<Explanation> = outcome
            .decisions
            .iter()
            .filter_map(|d| sim.explain(*d).ok())
            .collect();
        // Refusals, and the running applications a Policy document would
        // leave unable to pass admission (they would keep running).
        let conflicts = outcome
            .refusals
            .iter()
            .map(|r| format!("{}: {}", r.app, r.reason))
            .chain(
                outcome
                    .notes
                    .iter()
                    .filter(|n| n.contains("would not be admitted now"))
                    .cloned(),
            )
            .collect();
        let suggestions = suggest(&sim, &explanations);
        Ok(WhatIfReport {
            phases: apps.iter().map(|k| (k.clone(), sim.phase(k))).collect(),
            outcome,
            explanations,
            conflicts,
            suggestions,
        })
    }
}

/// A node event to predict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NodeEvent {
    /// The node goes silent and stays so past every `disconnect.lostAfter`
    /// of its instances (they are lost and placed elsewhere, per policy).
    Loss,
    /// An operator drains it.
    Drain,
}

impl Coordinator {
    /// Predicts what `event` on node `node` at `now` would do to the
    /// applications placed there. Changes nothing.
    pub fn what_if_node(
        &self,
        node: &str,
        event: NodeEvent,
        now: Timestamp,
    ) -> Result<WhatIfReport, CoordinatorError> {
        let affected = self.apps_with_instances_on(node);
        let mut sim = self.clone();
        let mut outcome = match event {
            NodeEvent::Loss => sim.apply(
                Command::SetNodeCondition {
                    node: node.to_string(),
                    condition: crate::command::NodeCondition::Down,
                },
                now,
            )?,
            NodeEvent::Drain => sim.apply(
                Command::DrainNode {
                    name: node.to_string(),
                },
                now,
            )?,
        };
        if event == NodeEvent::Loss {
            // Past the longest lostAfter: every instance that is to be lost is.
            let at = now.plus(self.longest_lost_after(node)).plus(DurationMs(1));
            outcome.merge(sim.apply(Command::Tick, at)?);
        }
        let explanations: Vec<Explanation> = outcome
            .decisions
            .iter()
            .filter_map(|d| sim.explain(*d).ok())
            .collect();
        // What would not find a new home: refused re-placements, instances
        // kept for their node, a drain's waiting list.
        let mut conflicts: Vec<String> = explanations
            .iter()
            .filter(|e| !e.accepted)
            .map(|e| format!("{}: not re-placed: {}", e.app, e.reason))
            .collect();
        if event == NodeEvent::Loss {
            conflicts.extend(
                affected
                    .iter()
                    .filter(|k| sim.still_unreachable_on(k, node))
                    .map(|k| {
                        format!("{k}: kept on {node} until it returns (disconnect.replace: false)")
                    }),
            );
        }
        if let Some(d) = sim.drain(node) {
            conflicts.extend(d.waiting.iter().map(|w| format!("drain waits: {w}")));
        }
        let suggestions = suggest(&sim, &explanations);
        Ok(WhatIfReport {
            phases: affected.iter().map(|k| (k.clone(), sim.phase(k))).collect(),
            outcome,
            explanations,
            conflicts,
            suggestions,
        })
    }
}

fn suggest(sim: &Coordinator, explanations: &[Explanation]) -> Vec<String> {
    let mut out = Vec::new();
    for e in explanations.iter().filter(|e| !e.accepted) {
        for c in e.checks.iter().filter(|c| !c.passed) {
            let s = match c.rule.as_str() {
                r if r.starts_with("quota.") => format!(
                    "{}: raise tenant {}'s {} or lower the requests ({})",
                    e.app,
                    e.app.tenant,
                    r.trim_start_matches("quota."),
                    c.detail
                ),
                "priority" => format!(
                    "{}: lower spec.priority to the tenant's ceiling ({})",
                    e.app, c.detail
                ),
                "policyResolution" => {
                    format!("{}: align the conflicting policies ({})", e.app, c.detail)
                }
                "maxClusterShare" => format!(
                    "{}: lower the requests or raise maxClusterShare ({})",
                    e.app, c.detail
                ),
                _ => format!("{}: fix {} ({})", e.app, c.rule, c.detail),
            };
            out.push(s);
        }
        for p in e.placements.iter().filter(|p| p.selected.is_none()) {
            let top = p.rejected.iter().max_by_key(|(_, n)| *n).map(|(r, _)| r);
            let s = match top {
                Some(RejectReason::InsufficientCpu) => {
                    let free = sim
                        .cluster()
                        .pool(&e.pool)
                        .map(|pool| {
                            pool.members
                                .iter()
                                .filter_map(|&i| sim.cluster().node(i))
                                .filter(|n| n.takes_work())
                                .map(|n| n.free_cpu())
                                .max()
                                .unwrap_or(0)
                        })
                        .unwrap_or(0);
                    format!(
                        "{}: {} needs more cpu than any node of pool {} has free (largest free: {}); lower the request, allow overcommit, or add nodes",
                        e.app,
                        p.replica,
                        e.pool,
                        MilliCpu(free)
                    )
                }
                Some(RejectReason::IncompatibleRuntime) => format!(
                    "{}: no node of pool {} runs the runtime type and OS of {}",
                    e.app, e.pool, p.replica
                ),
                Some(RejectReason::FailureDomainSpread | RejectReason::MissingFailureDomain) => {
                    format!(
                        "{}: not enough failure domains with room for {}; lower minFailureDomains or add nodes in other domains",
                        e.app, p.replica
                    )
                }
                Some(r) => format!(
                    "{}: {} cannot be placed: {r}; add capacity",
                    e.app, p.replica
                ),
                None => format!("{}: pool {} has no nodes", e.app, e.pool),
            };
            out.push(s);
        }
    }
    for e in explanations.iter().filter(|e| !e.preemptions.is_empty()) {
        for (p, node) in &e.preemptions {
            out.push(format!(
                "{}: would preempt {} on {node} ({}); add capacity to avoid it",
                e.app,
                p.victim,
                p.instances.join(", ")
            ));
        }
    }
    out
}
