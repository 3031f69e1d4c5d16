//! Node liveness as replicated facts: a node's own registration, the leader's
//! committed `Down` (silent) and `Ready` (heard again), and what that means for
//! the instances placed there. Nothing here reads a clock or a gossip view: the
//! leader decides from its own observation and commits the fact; every replica
//! applies it the same way, and any later leader can bring the node back.
//!
//! A Down node's instances are unreachable, not lost: the application is
//! Degraded and nothing moves until each instance's `disconnect.lostAfter`
//! passes; then it is lost and placed elsewhere (`replace`, the default) or
//! kept on its node until it returns.

use super::Coordinator;
use super::entry::{AppEntry, Degradation, DegradationCause};
use crate::command::Outcome;
use crate::lifecycle::{Input, Phase, SystemEvent, Trigger};
use crate::model::failure::{Failure, FailureCategory, InfrastructureFailure};
use crate::model::lifecycle_policy::FailureAction;
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use crate::placement::{NodeIdx, Placed};
use crate::reconcile::{Instance, InstanceKey, ObservedState};

/// The instances of `e` behind `lost` (evicted allocations) failed with
/// their node `node`: no longer unreachable, nothing asked of them.
fn mark_lost(e: &mut AppEntry, lost: &[(NodeIdx, u64, Placed)], node: &str) {
    for (_, _, p) in lost {
        if let Some(inst) = e
            .runtime
            .instances
            .get_mut(&InstanceKey::new(p.workload.clone(), p.replica))
        {
            inst.observed = ObservedState::Failed {
                failure: Failure::Infrastructure {
                    kind: InfrastructureFailure::NodeDown,
                    node: node.to_string(),
                },
            };
            inst.requested = None;
            inst.disconnected = None;
        }
    }
}

impl Coordinator {
    /// Every instance placed on node `name`, with its application.
    pub(super) fn instances_on<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a AppEntry, &'a InstanceKey, &'a Instance)> + 'a {
        self.apps.touching(name).flat_map(move |e| {
            e.runtime
                .instances
                .iter()
                .filter(move |(_, i)| i.node.as_deref() == Some(name))
                .map(move |(k, i)| (e, k, i))
        })
    }

    /// Applications with an instance placed on node `name`.
    fn apps_on(&self, name: &str) -> Vec<AppKey> {
        let mut keys: Vec<AppKey> = self
            .instances_on(name)
            .map(|(e, _, _)| e.key.clone())
            .collect();
        keys.dedup();
        keys
    }

    /// Applications with an instance placed on node `name` (what-if).
    pub(crate) fn apps_with_instances_on(&self, name: &str) -> Vec<AppKey> {
        self.apps_on(name)
    }

    /// True when application `key` still has an unreachable instance on
    /// node `name` (one its disconnect policy keeps there).
    pub(crate) fn still_unreachable_on(&self, key: &AppKey, name: &str) -> bool {
        self.instances_on(name)
            .any(|(e, _, i)| &e.key == key && i.disconnected.is_some())
    }

    /// The longest `disconnect.lostAfter` of the instances on node `name`.
    pub(crate) fn longest_lost_after(&self, name: &str) -> crate::model::time::DurationMs {
        self.instances_on(name)
            .filter_map(|(e, k, _)| {
                let spec = e.spec();
                spec.workload(&k.workload)
                    .map(|w| spec.lifecycle_of(w).disconnect.lost_after)
            })
            .max()
            .unwrap_or_default()
    }

    /// The node went silent at `now`: no new placements there, its instances
    /// are unreachable from now on.
    pub(super) fn node_down(&mut self, idx: NodeIdx, now: Timestamp, out: &mut Outcome) {
        let Some(n) = self.cluster.node(idx) else {
            return;
        };
        if n.down.is_some() {
            return;
        }
        let name = n.spec.name.clone();
        self.cluster.set_down(idx, Some(now));
        let apps = self.apps_on(&name);
        let mut count = 0;
        for key in &apps {
            if let Some(e) = self.apps.get_mut(key) {
                for i in e.runtime.instances.values_mut() {
                    if i.node.as_deref() == Some(name.as_str()) && i.disconnected.is_none() {
                        i.disconnected = Some(now);
                        count += 1;
                    }
                }
            }
            self.replan(key, now, out);
        }
        out.notes
            .push(format!("node {name} down: {count} instance(s) unreachable"));
    }

    /// The node is heard again: it takes work (unless cordoned) and its
    /// instances that were not lost are reachable again.
    pub(super) fn node_back(&mut self, idx: NodeIdx, now: Timestamp, out: &mut Outcome) {
        let Some(n) = self.cluster.node(idx) else {
            return;
        };
        if n.down.is_none() {
            return;
        }
        let name = n.spec.name.clone();
        self.cluster.set_down(idx, None);
        self.capacity_epoch += 1;
        for key in self.apps_on(&name) {
            if let Some(e) = self.apps.get_mut(&key) {
                for i in e.runtime.instances.values_mut() {
                    if i.node.as_deref() == Some(name.as_str()) {
                        i.disconnected = None;
                    }
                }
            }
            self.replan(&key, now, out);
        }
        out.notes.push(format!("node {name} ready again"));
    }

    /// Instances a node's inventory of `placements` would fail: believed
    /// live on it (reported running there before) and absent from the list.
    /// None for an unknown node or one marked down.
    pub fn absent_from_inventory(
        &self,
        node: &str,
        placements: &std::collections::BTreeSet<crate::reconcile::PlacementId>,
    ) -> Vec<crate::reconcile::InstanceId> {
        if self
            .cluster
            .index_of(node)
            .and_then(|i| self.cluster.node(i))
            .is_none_or(|n| n.down.is_some())
        {
            return Vec::new();
        }
        self.instances_on(node)
            .filter(|(_, _, i)| {
                i.placement != 0 && i.observed.is_live() && !placements.contains(&i.placement)
            })
            .map(|(e, k, i)| crate::reconcile::InstanceId {
                app: e.key.clone(),
                workload: k.workload.clone(),
                replica: k.replica,
                version: i.version,
            })
            .collect()
    }

    /// A node's inventory: instances believed live there whose placement the
    /// node does not list fail ("not running on node N"), so that the phase
    /// never claims a process that does not exist. A Down node's word is not
    /// taken (its instances are unreachable, handled by `disconnect`).
    pub(super) fn cmd_inventory(
        &mut self,
        node: &str,
        placements: &std::collections::BTreeSet<crate::reconcile::PlacementId>,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        for id in self.absent_from_inventory(node, placements) {
            let placement = self
                .apps
                .get(&id.app)
                .and_then(|e| {
                    e.runtime
                        .instances
                        .get(&InstanceKey::new(id.workload.clone(), id.replica))
                })
                .map_or(0, |i| i.placement);
            let failed = ObservedState::Failed {
                failure: Failure::ControlPlane {
                    detail: format!(
                        "not running on node {node}: absent from its inventory of placements"
                    ),
                },
            };
            self.cmd_report_workload(id, placement, failed, now, out);
        }
    }

    /// Instances of `key` unreachable for longer than their `lostAfter` whose
    /// policy replaces them are lost now: placed elsewhere when possible.
    pub(super) fn expire_lost(&mut self, key: &AppKey, now: Timestamp, out: &mut Outcome) {
        let Some(e) = self.apps.get(key) else {
            return;
        };
        let spec = e.spec_arc();
        let expired: Vec<(InstanceKey, (NodeIdx, u64), FailureAction)> = e
            .runtime
            .instances
            .iter()
            .filter_map(|(k, i)| {
                let since = i.disconnected?;
                let lp = spec.lifecycle_of(spec.workload(&k.workload)?);
                let d = lp.disconnect;
                let action = lp.on_failure.action(FailureCategory::Infrastructure);
                (d.replace && now >= since.plus(d.lost_after)).then_some((
                    k.clone(),
                    i.slot?,
                    action,
                ))
            })
            .collect();
        if expired.is_empty() {
            return;
        }
        let node_of = |s: &Self, n: NodeIdx| s.cluster.name(n).to_string();
        // onFailure.infrastructure other than Restart: fail, or hold.
        if let Some((k, (n, _), _)) = expired
            .iter()
            .find(|(_, _, a)| *a == FailureAction::FailAndStopDependents)
        {
            let why = format!(
                "{}/{} lost with node {} (onFailure.infrastructure: FailAndStopDependents)",
                k.workload,
                k.replica,
                node_of(self, *n)
            );
            let ev = if e.phase == Phase::Scheduled {
                SystemEvent::ExecutionFailed
            } else {
                SystemEvent::RuntimeFailed
            };
            if let Ok(step) = self.transition_app(
                key,
                Input::Event(ev),
                Trigger::System,
                why.clone(),
                Vec::new(),
                Vec::new(),
                now,
                out,
            ) {
                self.teardown(key, &step.actions, &why, Some(&k.workload), out);
            }
            return;
        }
        let mut held: Vec<(NodeIdx, u64, Placed)> = Vec::new();
        let mut lost: Vec<(NodeIdx, u64, Placed)> = Vec::new();
        for (_, (n, s), action) in &expired {
            if let Some(p) = self.cluster.release(*n, *s) {
                match action {
                    FailureAction::WaitForOperator => held.push((*n, *s, p)),
                    _ => lost.push((*n, *s, p)),
                }
            }
        }
        if !held.is_empty() {
            let node = node_of(self, held[0].0);
            let why = format!(
                "{} instance(s) lost with node {node}, held (onFailure.infrastructure: WaitForOperator); `darosctl operate restore` places them again",
                held.len()
            );
            self.evict(key, &held, &why, now, out);
            if let Some(e) = self.apps.get_mut(key) {
                mark_lost(e, &held, &node);
                e.degradation = Some(Degradation {
                    cause: DegradationCause::Held,
                    reason: why,
                });
            }
            if lost.is_empty() {
                self.replan(key, now, out);
                return;
            }
        }
        let nodes: Vec<String> = lost
            .iter()
            .map(|(n, _, _)| self.cluster.name(*n).to_string())
            .collect();
        let node = nodes.first().cloned().unwrap_or_default();
        self.lose(key, &lost, &node, now, out);
    }

    /// `lost` allocations of `key` (released from the cluster) on node `node`
    /// fail with NodeDown and are re-placed elsewhere when possible; otherwise
    /// the application degrades (or fails when it never ran).
    pub(super) fn lose(
        &mut self,
        key: &AppKey,
        lost: &[(NodeIdx, u64, Placed)],
        node: &str,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let reason = format!("node {node} down");
        self.evict(key, lost, &reason, now, out);
        if let Some(e) = self.apps.get_mut(key) {
            mark_lost(e, lost, node);
            for j in e.runtime.jobs.values_mut() {
                if j.node.as_deref() == Some(node) && !j.succeeded() {
                    j.node = None;
                }
            }
        }
        match self.replace_evicted(key, now, out) {
            Some((d, true, r)) => {
                out.notes.push(format!(
                    "{key}: {reason}; {} re-placed ({r}, decision {d})",
                    lost.len()
                ));
                self.replan(key, now, out);
            }
            Some((d, false, r)) => {
                let why = format!(
                    "{reason}: {} instance(s) lost and not re-placed: {r}",
                    lost.len()
                );
                let phase = self.apps.get(key).map(|e| e.phase);
                let ev = if phase == Some(Phase::Scheduled) {
                    SystemEvent::ExecutionFailed
                } else {
                    SystemEvent::Degrade
                };
                if let Ok(step) = self.transition_app(
                    key,
                    Input::Event(ev),
                    Trigger::System,
                    why.clone(),
                    Vec::new(),
                    vec![d.to_string()],
                    now,
                    out,
                ) {
                    self.teardown(key, &step.actions, &why, None, out);
                }
                if let Some(e) = self.apps.get_mut(key)
                    && matches!(e.phase, Phase::Degraded)
                {
                    e.degradation = Some(Degradation {
                        cause: DegradationCause::NodeLoss,
                        reason: why.clone(),
                    });
                    e.restore_epoch = self.capacity_epoch;
                    self.on_capacity_loss(key, &why, now, out);
                }
            }
            None => {}
        }
    }
}
