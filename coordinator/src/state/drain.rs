//! Draining a node (`kubectl drain`, `nomad node drain`): the node is
//! cordoned and every instance on it moves to another node the way a rolling
//! update replaces a replica — stopped first within the workload's
//! `rollout.maxUnavailable`, or surged (started elsewhere, the old one stopped
//! once the new one is ready) within `rollout.maxSurge` — so that a drain
//! never takes down more of a workload than an update would. Applications
//! move highest priority first; preemption is never used to make room.
//!
//! Instances of a workload whose `disconnect.replace` is false are bound to
//! their node: the drain leaves them running and lists them. Instances that
//! cannot be placed elsewhere stay where they are and are tried again when
//! capacity changes; the drain says why each one waits. It is complete when
//! nothing movable still runs on the node; `uncordon` ends it.

use super::Coordinator;
use crate::command::Outcome;
use crate::decision::DecisionKind;
use crate::error::CoordinatorError;
use crate::lifecycle::Phase;
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use crate::placement::{NodeIdx, Placed, ResVec};
use crate::reconcile::{Instance, InstanceKey, ObservedState, Replaced};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A drain under way (or complete) on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drain {
    /// When it was asked.
    pub since: Timestamp,
    /// Instances moved off so far.
    pub moved: u32,
    /// Instances on their way off (stopping, or waiting for their
    /// replacement to be ready).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moving: Vec<String>,
    /// What stays there for now, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
    /// When nothing movable ran there any more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete: Option<Timestamp>,
    /// Each application's last failed attempt: the capacity epoch then and
    /// why (tried again only once capacity changed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) failed: BTreeMap<AppKey, (u64, String)>,
}

/// Whether an instance on a draining node is moved, left, or done.
enum Disposition {
    /// Placed elsewhere now.
    Move,
    /// On its way off.
    Moving(String),
    /// Stays, for this reason.
    Wait(String),
    /// Nothing runs (completed, or already on its way off).
    Gone,
}

impl Coordinator {
    /// `darosctl node drain NODE`: cordon it and start moving its instances.
    pub(super) fn cmd_drain(
        &mut self,
        name: &str,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let idx = self
            .cluster
            .index_of(name)
            .filter(|&i| self.cluster.node(i).is_some_and(|n| !n.removed))
            .ok_or_else(|| CoordinatorError::UnknownNode(name.into()))?;
        self.cluster.set_schedulable(idx, false);
        let d = self.drains.entry(name.to_string()).or_default();
        if d.complete.is_some() || d.since == Timestamp::default() {
            *d = Drain {
                since: now,
                ..Drain::default()
            };
        }
        out.notes.push(format!("node {name} cordoned and draining"));
        self.drain_pass(name, now, out);
        Ok(())
    }

    /// Ends the drain of `name` (uncordon).
    pub(super) fn end_drain(&mut self, name: &str) {
        self.drains.remove(name);
    }

    /// Drains under way take another step (on every tick and report).
    pub(super) fn drain_step(&mut self, now: Timestamp, out: &mut Outcome) {
        let nodes: Vec<String> = self
            .drains
            .iter()
            .filter(|(_, d)| d.complete.is_none())
            .map(|(n, _)| n.clone())
            .collect();
        for n in nodes {
            self.drain_pass(&n, now, out);
        }
    }

    /// Moves what can move off `node`, highest priority first, and records
    /// what waits.
    fn drain_pass(&mut self, node: &str, now: Timestamp, out: &mut Outcome) {
        let Some(idx) = self.cluster.index_of(node) else {
            return;
        };
        if self.cluster.node(idx).is_some_and(|n| n.down.is_some()) {
            // A silent node's instances follow their disconnect policy.
            if let Some(d) = self.drains.get_mut(node) {
                d.waiting = vec![format!(
                    "node {node} is down: its instances follow their disconnect policy"
                )];
            }
            return;
        }
        let mut apps: Vec<(std::cmp::Reverse<u32>, u64, AppKey)> = self
            .instances_on(node)
            .chain(self.replaced_on(node))
            .map(|(e, _, _)| {
                (
                    std::cmp::Reverse(e.spec().spec.priority),
                    e.admitted_seq,
                    e.key.clone(),
                )
            })
            .collect();
        apps.sort();
        apps.dedup();
        let mut moved = 0;
        for (_, _, key) in &apps {
            moved += self.migrate_off(key, node, idx, now, out);
        }
        // What still runs there after this step, and why.
        let mut waiting = Vec::new();
        let mut moving = Vec::new();
        for (_, _, key) in &apps {
            let Some(e) = self.apps.get(key) else {
                continue;
            };
            let mut unplaced = 0;
            for (k, i) in &e.runtime.instances {
                match Self::disposition(e, k, i, node) {
                    Disposition::Wait(why) => waiting.push(why),
                    Disposition::Moving(what) => moving.push(what),
                    Disposition::Move => unplaced += 1,
                    Disposition::Gone => {}
                }
            }
            if unplaced > 0 {
                let why = self
                    .drains
                    .get(node)
                    .and_then(|d| d.failed.get(key))
                    .map_or("not tried yet", |(_, r)| r.as_str());
                waiting.push(format!("{key}: {unplaced} instance(s) wait: {why}"));
            }
        }
        let Some(d) = self.drains.get_mut(node) else {
            return;
        };
        d.moved += moved;
        let done = waiting.is_empty() && moving.is_empty();
        d.waiting = waiting;
        d.moving = moving;
        if done && d.complete.is_none() {
            d.complete = Some(now);
            out.notes.push(format!(
                "node {node} drained: {} instance(s) moved off in {}",
                d.moved,
                now.since(d.since)
            ));
        }
    }

    /// Instances whose old copy (being replaced) is still on `node`.
    fn replaced_on<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = (&'a super::entry::AppEntry, &'a InstanceKey, &'a Instance)> + 'a
    {
        self.apps.values().flat_map(move |e| {
            e.runtime
                .instances
                .iter()
                .filter(move |(_, i)| {
                    i.replacing
                        .as_ref()
                        .is_some_and(|o| o.node.as_deref() == Some(node) && !o.stopped)
                })
                .map(move |(k, i)| (e, k, i))
        })
    }

    /// What becomes of instance `k` of `e` on the draining node.
    fn disposition(
        e: &super::entry::AppEntry,
        k: &InstanceKey,
        i: &Instance,
        node: &str,
    ) -> Disposition {
        let name = format!("{}/{}/{}", e.key, k.workload, k.replica);
        if let Some(o) = &i.replacing {
            if o.node.as_deref() == Some(node) && !o.stopped {
                let to = i.node.as_deref().unwrap_or("?");
                return Disposition::Moving(if o.live() {
                    format!("{name}: waits for its replacement on {to} to be ready")
                } else {
                    format!("{name}: stopping (replaced on {to})")
                });
            }
            if i.node.as_deref() == Some(node) {
                return Disposition::Wait(format!(
                    "{name}: a rolling update is under way; moved once it completes"
                ));
            }
            return Disposition::Gone;
        }
        if i.node.as_deref() != Some(node) || i.slot.is_none() {
            return Disposition::Gone;
        }
        if matches!(i.observed, ObservedState::Exited { code: 0 }) {
            return Disposition::Gone;
        }
        let spec = e.spec();
        let pinned = spec
            .workload(&k.workload)
            .is_some_and(|w| !spec.lifecycle_of(w).disconnect.replace);
        if pinned {
            return Disposition::Wait(format!(
                "{name}: bound to its node (disconnect.replace is false); stays until stopped by hand"
            ));
        }
        if !e.phase.holds_placements() {
            return Disposition::Gone;
        }
        Disposition::Move
    }

    /// Moves the movable instances of `key` off `node` (index `idx`) in one
    /// placement; returns how many moved.
    fn migrate_off(
        &mut self,
        key: &AppKey,
        node: &str,
        idx: NodeIdx,
        now: Timestamp,
        out: &mut Outcome,
    ) -> u32 {
        let Some(e) = self.apps.get(key) else {
            return 0;
        };
        let mut movable: Vec<(InstanceKey, u64)> = Vec::new();
        for (k, i) in &e.runtime.instances {
            if i.node.as_deref() != Some(node) && i.replacing.is_none() {
                continue;
            }
            if let (Disposition::Move, Some((_, s))) = (Self::disposition(e, k, i, node), i.slot) {
                movable.push((k.clone(), s));
            }
        }
        if movable.is_empty() {
            return 0;
        }
        let epoch = self.capacity_epoch;
        if self
            .drains
            .get(node)
            .and_then(|d| d.failed.get(key))
            .is_some_and(|(tried, _)| *tried == epoch)
        {
            return 0;
        }
        let spec = e.spec_arc();
        // Making room by evicting others is not what a drain is for.
        let mut eff = e.effective.clone().unwrap_or_default();
        eff.enable_preemption = false;
        let version = e.current;
        let targets = e.targets.clone();
        let moving: BTreeSet<InstanceKey> = movable.iter().map(|(k, _)| k.clone()).collect();
        let staying: Vec<(String, NodeIdx)> = e
            .runtime
            .instances
            .iter()
            .filter(|(k, _)| !moving.contains(k))
            .filter_map(|(k, i)| i.slot.map(|(n, _)| (k.workload.clone(), n)))
            .collect();
        let to_place = super::arbitrate::replicas_in_order(&spec, &targets, |w, r| {
            moving.contains(&InstanceKey::new(w, r))
        });
        let mut released: Vec<(InstanceKey, u64, Placed)> = Vec::new();
        for (k, s) in &movable {
            if let Some(p) = self.cluster.release(idx, *s) {
                released.push((k.clone(), *s, p));
            }
        }
        let g = self.run_gang(key, &spec, &eff, &to_place, &staying, &targets);
        let phase = self.apps.get(key).map_or(Phase::Running, |e| e.phase);
        let d = self.placement_decision(
            key,
            DecisionKind::Drain,
            version,
            &spec,
            &eff,
            &g,
            to_place.len() as u32,
            None,
            phase,
            now,
            out,
        );
        if !g.ok {
            for (_, s, p) in released {
                self.cluster.insert(idx, s, p);
            }
            let reason = format!("no other node takes them: {} (decision {d})", g.reason);
            if let Some(dr) = self.drains.get_mut(node) {
                dr.failed.insert(key.clone(), (epoch, reason));
            }
            return 0;
        }
        if let Some(dr) = self.drains.get_mut(node) {
            dr.failed.remove(key);
        }
        let mut freed = ResVec::default();
        let mut added = ResVec::default();
        for (_, _, p) in &released {
            freed = freed.plus(p.demand.request);
        }
        let placed: Vec<(InstanceKey, String, NodeIdx, u64)> = g
            .placed
            .iter()
            .map(|p| {
                let demand = self.cluster.request_of(p.node, p.serial);
                added = added.plus(demand);
                (
                    InstanceKey::new(p.workload.clone(), p.replica),
                    self.cluster.name(p.node).to_string(),
                    p.node,
                    p.serial,
                )
            })
            .collect();
        let Some(e) = self.apps.get_mut(key) else {
            return 0;
        };
        let mut n = 0;
        for (k, to, ni, serial) in placed {
            let Some(old) = e.runtime.instances.remove(&k) else {
                continue;
            };
            let started = old.starts > 0 || old.observed.is_live();
            let mut inst = Instance::placed(to, (ni, serial), old.version, now);
            inst.replacing = Some(Replaced {
                node: old.node.clone(),
                version: old.version,
                placement: old.placement,
                stopped: !started,
                stop_requested: false,
                surge: false,
                observed: Some(old.observed.clone()),
            });
            e.runtime.instances.insert(k, inst);
            n += 1;
        }
        e.allocated = e.allocated.minus(freed).plus(added);
        let pool = e.spec().pool().to_string();
        if let Some(t) = self.tenants.get_mut(&key.tenant)
            && let Some(a) = t.pool_alloc.get_mut(&pool)
        {
            *a = a.minus(freed).plus(added);
        }
        out.notes.push(format!(
            "{key}: {n} instance(s) moving off draining node {node} (decision {d})"
        ));
        self.replan(key, now, out);
        n
    }
}
