//! Arbitration flows: fair-share rounds over admitted applications, the
//! placement of each (all or nothing, with preemption), scaling, restoring,
//! rolling updates and node loss.

use super::Coordinator;
use super::apps::origin_reason;
use super::entry::{Degradation, DegradationCause, TenantEntry};
use crate::arbitration::{
    DrfQueue, GangOutcome, GangRequest, PlacedReplica, order_key, place_gang, weighted_share_ppb,
};
use crate::command::{Outcome, Refusal};
use crate::decision::{
    Constraints, Decision, DecisionId, DecisionKind, ExpectedOutcome, FairShareRecord,
};
use crate::error::CoordinatorError;
use crate::lifecycle::{Input, Operation, Phase, SystemEvent, Trigger, transition};
use crate::model::application::Application;
use crate::model::dependency::DependencyGraph;
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use crate::placement::{NodeIdx, Placed, ResVec};
use crate::policy::EffectivePolicy;
use crate::reconcile::{Instance, InstanceKey, JobStatus, ObservedState, Replaced, Requested};
use crate::version::{AppVersion, VersionOrigin};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Replicas of `spec` to place, in dependency order: for each workload the
/// replicas below `targets[w]` that `wanted(w, r)` selects.
pub(super) fn replicas_in_order(
    spec: &Application,
    targets: &BTreeMap<String, u32>,
    wanted: impl Fn(&str, u32) -> bool,
) -> Vec<(usize, u32)> {
    let ws = &spec.spec.workloads;
    let order = DependencyGraph::new(ws)
        .start_order()
        .unwrap_or_else(|| (0..ws.len()).collect());
    let mut v = Vec::new();
    for i in order {
        let w = &ws[i];
        let n = targets.get(&w.name).copied().unwrap_or(w.replicas.min);
        for r in 0..n {
            if wanted(&w.name, r) {
                v.push((i, r));
            }
        }
    }
    v
}

/// Names the dependencies of `workload` that are not ready, if any.
fn unready_dependencies(
    e: &super::entry::AppEntry,
    spec: &Application,
    workload: &str,
) -> Option<String> {
    use crate::model::health::CheckKind;
    let w = spec.workload(workload)?;
    let mut not_ready = Vec::new();
    for d in &w.depends_on {
        let Some(dw) = spec.workload(d) else { continue };
        let readiness = dw
            .health_checks
            .iter()
            .any(|h| h.kind == CheckKind::Readiness);
        let (mut ready, mut total) = (0, 0);
        for (_, i) in e.runtime.of_workload(d) {
            total += 1;
            if i.observed == ObservedState::Ready
                || (i.observed == ObservedState::Running && !readiness)
            {
                ready += 1;
            }
        }
        if total == 0 || ready < total {
            not_ready.push(format!("{d} ({ready}/{total} ready)"));
        }
    }
    (!not_ready.is_empty()).then(|| format!("dependency not ready: {}", not_ready.join(", ")))
}

impl Coordinator {
    /// Weighted dominant share of tenant `t` in `pool`.
    fn tenant_share(&self, t: &str, pool: &str, weight: u32) -> u64 {
        let cap = self.cluster.pool(pool).map(|p| p.cap).unwrap_or_default();
        let alloc = self
            .tenants
            .get(t)
            .and_then(|e| e.pool_alloc.get(pool))
            .copied()
            .unwrap_or_default();
        weighted_share_ppb(alloc, cap, weight)
    }

    /// The tenants whose dominant share of `pool` is above their weighted
    /// fair share (`weight / Σ weights` over the tenants holding something
    /// there, `me` included): by tenant id, (share, fair share) in parts per
    /// billion. Only their instances, and `me`'s own, may be preempted.
    fn over_fair_share(&self, pool: &str, me: &str) -> BTreeMap<u32, (u64, u64)> {
        let cap = self.cluster.pool(pool).map(|p| p.cap).unwrap_or_default();
        let weight =
            |t: &TenantEntry| u64::from(t.spec.policy.fair_share_weight.unwrap_or(1).max(1));
        let active: Vec<&TenantEntry> = self
            .tenants
            .values()
            .filter(|t| {
                t.spec.name == me
                    || t.pool_alloc
                        .get(pool)
                        .is_some_and(|a| *a != ResVec::default())
            })
            .collect();
        let total: u64 = active.iter().map(|t| weight(t)).sum::<u64>().max(1);
        active
            .into_iter()
            .filter(|t| t.spec.name != me)
            .filter_map(|t| {
                let share = t
                    .pool_alloc
                    .get(pool)
                    .copied()
                    .unwrap_or_default()
                    .dominant_share_ppb(cap);
                let fair = weight(t) * 1_000_000_000 / total;
                (share > fair).then_some((t.id, (share, fair)))
            })
            .collect()
    }

    /// With `fairShareWithinTenant`: the applications of `me`'s tenant in
    /// `pool` (other than `me`) holding more than an equal part of what the
    /// tenant holds there (`me` counted among the parts): by application
    /// id, (share, equal part) in parts per billion of the pool.
    fn over_within_tenant(&self, pool: &str, me: &AppKey) -> BTreeMap<u32, (u64, u64)> {
        let cap = self.cluster.pool(pool).map(|p| p.cap).unwrap_or_default();
        let tenant_share = self
            .tenants
            .get(&me.tenant)
            .and_then(|t| t.pool_alloc.get(pool))
            .copied()
            .unwrap_or_default()
            .dominant_share_ppb(cap);
        let holders: Vec<&super::entry::AppEntry> = self
            .apps
            .values()
            .filter(|e| e.key.tenant == me.tenant && e.key != *me && e.spec().pool() == pool)
            .filter(|e| e.allocated != ResVec::default())
            .collect();
        let parts = holders.len() as u64 + 1;
        let equal = tenant_share / parts;
        holders
            .into_iter()
            .filter_map(|e| {
                let share = e.allocated.dominant_share_ppb(cap);
                (share > equal).then_some((e.id, (share, equal)))
            })
            .collect()
    }

    fn weight_and_pool(&self, key: &AppKey) -> (u32, String) {
        self.apps.get(key).map_or((1, String::new()), |e| {
            (
                e.effective.as_ref().map_or(1, |p| p.fair_share_weight),
                e.spec().pool().to_string(),
            )
        })
    }

    /// One arbitration round: tenants by weighted DRF, applications by
    /// priority within their tenant, each placed as a whole.
    pub(super) fn arbitrate_round(
        &mut self,
        pending: Vec<AppKey>,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let mut per_tenant: BTreeMap<String, Vec<(_, AppKey)>> = BTreeMap::new();
        for key in pending {
            let Some(e) = self.apps.get(&key) else {
                continue;
            };
            if e.phase != Phase::Admitted {
                continue;
            }
            let s = e.spec();
            per_tenant
                .entry(key.tenant.clone())
                .or_default()
                .push((order_key(s.spec.priority, &s.spec.sla, e.admitted_seq), key));
        }
        let mut queues: BTreeMap<String, VecDeque<AppKey>> = BTreeMap::new();
        let mut round_size = 0u32;
        for (t, mut v) in per_tenant {
            v.sort_by_key(|a| a.0);
            round_size += v.len() as u32;
            queues.insert(t, v.into_iter().map(|(_, k)| k).collect());
        }
        let mut q = DrfQueue::new();
        for (t, apps) in &queues {
            if let Some(first) = apps.front() {
                let (w, pool) = self.weight_and_pool(first);
                q.push(t.clone(), self.tenant_share(t, &pool, w));
            }
        }
        let mut position = 0;
        while let Some((t, share)) = q.pop() {
            let Some(key) = queues.get_mut(&t).and_then(VecDeque::pop_front) else {
                continue;
            };
            position += 1;
            let (weight, _) = self.weight_and_pool(&key);
            self.arbitrate_app(
                &key,
                FairShareRecord {
                    tenant_share_before_ppb: share,
                    weight,
                    position,
                    round_size,
                },
                now,
                out,
            );
            if let Some(next) = queues.get(&t).and_then(|v| v.front()) {
                let (w, pool) = self.weight_and_pool(next);
                q.push(t.clone(), self.tenant_share(&t, &pool, w));
            }
        }
    }

    /// Runs the gang placement for `key` with `spec` (borrowing the cluster
    /// mutably and the applications for victim checks).
    pub(super) fn run_gang(
        &mut self,
        key: &AppKey,
        spec: &Application,
        eff: &EffectivePolicy,
        to_place: &[(usize, u32)],
        staying: &[(String, NodeIdx)],
        totals: &BTreeMap<String, u32>,
    ) -> GangOutcome {
        self.cluster.prepare();
        let Some(e) = self.apps.get(key) else {
            return GangOutcome::default();
        };
        let app_id = e.id;
        let tenant_id = self.tenants.get(&key.tenant).map_or(u32::MAX, |t| t.id);
        let prio = spec.spec.priority;
        // Tenant-safe: another tenant's instances only while that tenant
        // holds more of the pool than its fair share.
        let over = self.over_fair_share(spec.pool(), &key.tenant);
        let within = eff
            .fair_share_within_tenant
            .then(|| self.over_within_tenant(spec.pool(), key));
        let apps = &self.apps;
        let app_ids = &self.app_ids;
        let victim_ok = |p: &Placed| {
            p.app != app_id
                && (p.tenant == tenant_id || over.contains_key(&p.tenant))
                && (p.tenant != tenant_id || within.as_ref().is_none_or(|w| w.contains_key(&p.app)))
                && p.priority < prio
                && app_ids
                    .get(&p.app)
                    .and_then(|k| apps.get(k))
                    .is_some_and(|v| matches!(v.phase, Phase::Running | Phase::Degraded))
        };
        let key_of = |id: u32| {
            app_ids
                .get(&id)
                .cloned()
                .unwrap_or_else(|| AppKey::new("unknown", "unknown"))
        };
        let mut g = place_gang(
            &mut self.cluster,
            &GangRequest {
                app_id,
                tenant_id,
                app: spec,
                pool: spec.pool(),
                effective: eff,
                to_place,
                staying,
                totals,
                top_k: self.config.top_k,
                patience: self.config.patience,
            },
            &victim_ok,
            &key_of,
        );
        g.over_fair_share = over;
        g.over_within_tenant = within.unwrap_or_default();
        g
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn placement_decision(
        &mut self,
        key: &AppKey,
        kind: DecisionKind,
        version: u32,
        spec: &Application,
        eff: &EffectivePolicy,
        g: &GangOutcome,
        instances: u32,
        fair: Option<FairShareRecord>,
        phase_after: Phase,
        now: Timestamp,
        out: &mut Outcome,
    ) -> DecisionId {
        let (policies, evaluation) = self
            .apps
            .get(key)
            .map_or((Vec::new(), None), |e| (e.policies.clone(), e.evaluation));
        let demand = g
            .placements
            .iter()
            .filter_map(|p| {
                spec.workload(&p.workload)
                    .map(|w| crate::placement::Demand::of(spec, w, p.replica).request)
            })
            .fold(ResVec::default(), ResVec::plus);
        let nodes: BTreeSet<NodeIdx> = g.placed.iter().map(|p| p.node).collect();
        let expected = g.ok.then(|| {
            let weight = eff.fair_share_weight;
            let pool = spec.pool();
            let cap = self.cluster.pool(pool).map(|p| p.cap).unwrap_or_default();
            let alloc = self
                .tenants
                .get(&key.tenant)
                .and_then(|t| t.pool_alloc.get(pool))
                .copied()
                .unwrap_or_default()
                .plus(g.allocated);
            ExpectedOutcome {
                phase: phase_after,
                allocated: g.allocated,
                nodes: nodes.len() as u32,
                cost_per_hour_milli: g.cost_milli,
                tenant_share_after_ppb: weighted_share_ppb(alloc, cap, weight),
            }
        });
        self.push_decision(
            Decision {
                id: DecisionId(0),
                time: now,
                kind,
                app: key.clone(),
                version,
                pool: spec.pool().to_string(),
                constraints: Some(Constraints {
                    priority: spec.spec.priority,
                    strategy: eff.placement_strategy,
                    overcommit: eff.max_overcommit_ratio,
                    max_cluster_share: eff.max_cluster_share,
                    spread: eff.min_failure_domains.clone(),
                    preemption: eff.enable_preemption,
                    demand,
                    instances,
                    budget: spec.spec.budget,
                }),
                fair_share: fair,
                placements: g.placements.clone(),
                preemptions: g.preemptions.clone(),
                checks: Vec::new(),
                evaluation,
                policies,
                accepted: g.ok,
                reason: g.reason.clone(),
                expected,
            },
            out,
        )
    }

    fn arbitrate_app(
        &mut self,
        key: &AppKey,
        fair: FairShareRecord,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let Some(e) = self.apps.get(key) else { return };
        let spec = e.spec_arc();
        let eff = e.effective.clone().unwrap_or_default();
        let version = e.current;
        let targets = e.targets.clone();
        let to_place = replicas_in_order(&spec, &targets, |_, _| true);
        let g = self.run_gang(key, &spec, &eff, &to_place, &[], &targets);
        let d = self.placement_decision(
            key,
            DecisionKind::Arbitration,
            version,
            &spec,
            &eff,
            &g,
            to_place.len() as u32,
            Some(fair),
            Phase::Scheduled,
            now,
            out,
        );
        let policies = self
            .apps
            .get(key)
            .map(|e| e.policies.clone())
            .unwrap_or_default();
        if g.ok {
            self.commit_placed(key, &g.placed, version, now);
            let names: Vec<String> = spec.spec.workloads.iter().map(|w| w.name.clone()).collect();
            self.reset_jobs(key, &names, version, now);
            let _ = self.transition_app(
                key,
                Input::Event(SystemEvent::ArbitrationSucceeded),
                Trigger::System,
                format!("arbitration passed: {}", g.reason),
                policies,
                vec![d.to_string()],
                now,
                out,
            );
            self.apply_preemptions(key, &g, d, now, out);
            self.replan(key, now, out);
        } else {
            let reason = format!("arbitration failed: {}", g.reason);
            if let Ok(step) = self.transition_app(
                key,
                Input::Event(SystemEvent::ArbitrationFailed),
                Trigger::System,
                reason.clone(),
                policies,
                vec![d.to_string()],
                now,
                out,
            ) {
                self.teardown(key, &step.actions, &reason, None, out);
            }
            out.refusals.push(Refusal {
                app: key.clone(),
                reason,
                decision: Some(d),
            });
        }
    }

    /// Records placed replicas as instances and allocations.
    fn commit_placed(
        &mut self,
        key: &AppKey,
        placed: &[PlacedReplica],
        version: u32,
        now: Timestamp,
    ) {
        let mut added = ResVec::default();
        let mut new = Vec::new();
        for p in placed {
            let demand = self.cluster.request_of(p.node, p.serial);
            added = added.plus(demand);
            new.push((
                InstanceKey::new(p.workload.clone(), p.replica),
                Instance::placed(
                    self.cluster.name(p.node).to_string(),
                    (p.node, p.serial),
                    version,
                    now,
                ),
            ));
        }
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        e.allocated = e.allocated.plus(added);
        let pool = e.spec().pool().to_string();
        for (k, i) in new {
            e.runtime.instances.insert(k, i);
        }
        if let Some(t) = self.tenants.get_mut(&key.tenant) {
            let a = t.pool_alloc.entry(pool).or_default();
            *a = a.plus(added);
        }
    }

    /// Init jobs of `workloads` start afresh at `version`.
    fn reset_jobs(&mut self, key: &AppKey, workloads: &[String], version: u32, now: Timestamp) {
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        let spec = e.spec_arc();
        for w in workloads {
            e.runtime.jobs.retain(|(jw, _), _| jw != w);
            if let Some(w) = spec.workload(w) {
                for (_, j) in w.all_init_jobs() {
                    self.job_runs += 1;
                    e.runtime.jobs.insert(
                        (w.name.clone(), j.name.clone()),
                        JobStatus::new(version, self.job_runs, now),
                    );
                }
            }
        }
    }

    /// Victims of preemption lose their instances and become Degraded.
    fn apply_preemptions(
        &mut self,
        by: &AppKey,
        g: &GangOutcome,
        d: DecisionId,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let prio = self.apps.get(by).map_or(0, |e| e.spec().spec.priority);
        let mut by_app: BTreeMap<u32, Vec<(NodeIdx, u64, Placed)>> = BTreeMap::new();
        for (node, serial, p) in &g.evicted {
            by_app
                .entry(p.app)
                .or_default()
                .push((*node, *serial, p.clone()));
        }
        for (id, lost) in by_app {
            let Some(vkey) = self.app_ids.get(&id).cloned() else {
                continue;
            };
            // Another tenant's instances are taken only above its fair
            // share: say both figures.
            let shares = lost
                .first()
                .and_then(|(_, _, p)| g.over_fair_share.get(&p.tenant))
                .map(|(share, fair)| {
                    format!(
                        "; tenant {} held {:.1}% of pool {}, above its fair share {:.1}%",
                        vkey.tenant,
                        *share as f64 / 1e7,
                        self.apps.get(&vkey).map_or("default", |e| e.spec().pool()),
                        *fair as f64 / 1e7
                    )
                })
                .unwrap_or_default();
            let within = g
                .over_within_tenant
                .get(&id)
                .map(|(share, equal)| {
                    format!(
                        "; it held {:.1}% of the pool, above its equal part {:.1}% of tenant {}'s holding (fairShareWithinTenant)",
                        *share as f64 / 1e7,
                        *equal as f64 / 1e7,
                        vkey.tenant
                    )
                })
                .unwrap_or_default();
            let reason = format!(
                "preempted by {by} (priority {prio}, decision {d}): {}{shares}{within}",
                lost.iter()
                    .map(|(_, _, p)| format!("{}/{}", p.workload, p.replica))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            self.evict(&vkey, &lost, &reason, now, out);
            self.counters.preempted_instances += lost.len() as u64;
            let phase = self.apps.get(&vkey).map(|e| e.phase);
            if phase == Some(Phase::Running) {
                let _ = self.transition_app(
                    &vkey,
                    Input::Event(SystemEvent::Degrade),
                    Trigger::Policy,
                    reason.clone(),
                    vec!["enablePreemption".into()],
                    vec![d.to_string(), by.to_string()],
                    now,
                    out,
                );
            }
            if let Some(e) = self.apps.get_mut(&vkey) {
                e.degradation = Some(Degradation {
                    cause: DegradationCause::Preemption,
                    reason: reason.clone(),
                });
                e.restore_epoch = self.capacity_epoch;
            }
            self.on_capacity_loss(&vkey, &reason, now, out);
        }
    }

    /// Marks `lost` allocations (already released from the cluster) as
    /// evicted instances of `key`, stopping them where they still run.
    pub(super) fn evict(
        &mut self,
        key: &AppKey,
        lost: &[(NodeIdx, u64, Placed)],
        reason: &str,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        let pool = e.spec().pool().to_string();
        let mut freed = ResVec::default();
        for (node, serial, p) in lost {
            let k = InstanceKey::new(p.workload.clone(), p.replica);
            let Some(inst) = e.runtime.instances.get_mut(&k) else {
                continue;
            };
            if inst.slot != Some((*node, *serial)) {
                continue;
            }
            freed = freed.plus(p.demand.request);
            inst.slot = None;
            if let Some(n) = inst.node.take()
                && (inst.starts > 0 || inst.observed.is_live())
            {
                out.actions.push(super::apps::stop_action(
                    key,
                    &k,
                    (inst.version, inst.placement),
                    &n,
                    reason.to_string(),
                ));
            }
            inst.evicted = Some(reason.to_string());
            inst.requested = Some((Requested::Stop, inst.observations));
            inst.since = now;
        }
        e.allocated = e.allocated.minus(freed);
        if let Some(t) = self.tenants.get_mut(&key.tenant)
            && let Some(a) = t.pool_alloc.get_mut(&pool)
        {
            *a = a.minus(freed);
        }
    }

    /// Puts evicted instances back on nodes (restore, node loss); returns
    /// the decision and whether it succeeded.
    pub(super) fn replace_evicted(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Option<(DecisionId, bool, String)> {
        let e = self.apps.get(key)?;
        let spec = e.spec_arc();
        let eff = e.effective.clone().unwrap_or_default();
        let version = e.current;
        let evicted: BTreeSet<InstanceKey> = e
            .runtime
            .instances
            .iter()
            .filter(|(_, i)| i.evicted.is_some() || i.slot.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        if evicted.is_empty() {
            return None;
        }
        let staying: Vec<(String, NodeIdx)> = e
            .runtime
            .instances
            .iter()
            .filter_map(|(k, i)| i.slot.map(|(n, _)| (k.workload.clone(), n)))
            .collect();
        let ws = &spec.spec.workloads;
        let to_place: Vec<(usize, u32)> = replicas_in_order(&spec, &e.targets, |_, _| true)
            .into_iter()
            .filter(|(i, r)| evicted.contains(&InstanceKey::new(ws[*i].name.clone(), *r)))
            .collect();
        let targets = e.targets.clone();
        let g = self.run_gang(key, &spec, &eff, &to_place, &staying, &targets);
        let phase = self.apps.get(key).map_or(Phase::Running, |e| e.phase);
        let d = self.placement_decision(
            key,
            DecisionKind::Restore,
            version,
            &spec,
            &eff,
            &g,
            to_place.len() as u32,
            None,
            if phase == Phase::Degraded {
                Phase::Running
            } else {
                phase
            },
            now,
            out,
        );
        if g.ok {
            let mut added = ResVec::default();
            if let Some(e) = self.apps.get_mut(key) {
                for p in &g.placed {
                    let k = InstanceKey::new(p.workload.clone(), p.replica);
                    let demand = self.cluster.request_of(p.node, p.serial);
                    added = added.plus(demand);
                    if let Some(inst) = e.runtime.instances.get_mut(&k) {
                        inst.node = Some(self.cluster.name(p.node).to_string());
                        inst.slot = Some((p.node, p.serial));
                        inst.placement = p.serial;
                        inst.evicted = None;
                        inst.observed = ObservedState::Pending;
                        inst.since = now;
                        inst.requested = None;
                        inst.version = version;
                    }
                }
                e.allocated = e.allocated.plus(added);
            }
            let pool = spec.pool().to_string();
            if let Some(t) = self.tenants.get_mut(&key.tenant) {
                let a = t.pool_alloc.entry(pool).or_default();
                *a = a.plus(added);
            }
            self.apply_preemptions(key, &g, d, now, out);
        }
        Some((d, g.ok, g.reason))
    }

    pub(super) fn op_scale(
        &mut self,
        key: &AppKey,
        workload: &str,
        replicas: u32,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let e = self
            .apps
            .get(key)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        transition(e.phase, Input::Op(Operation::Scale)).map_err(|source| {
            CoordinatorError::Illegal {
                app: key.clone(),
                source,
            }
        })?;
        let spec = e.spec_arc();
        let w = spec
            .workload(workload)
            .ok_or_else(|| CoordinatorError::UnknownWorkload {
                app: key.clone(),
                workload: workload.into(),
            })?;
        // 0 parks the workload (an operator's choice below the spec's min);
        // otherwise the spec's bounds hold.
        if replicas != 0 && (replicas < w.replicas.min || replicas > w.replicas.max) {
            return Err(CoordinatorError::InvalidScale {
                app: key.clone(),
                workload: workload.into(),
                reason: format!(
                    "{replicas} replicas is outside spec.workloads[{workload}].replicas \
                     {{min: {}, max: {}}}; scale within it, to 0 to park the workload, \
                     or apply a spec with other bounds",
                    w.replicas.min, w.replicas.max
                ),
            });
        }
        let current = e.target(workload);
        if replicas > current {
            // Seed §2.4.4: no scaling up while a downstream dependency is
            // not ready.
            if let Some(why) = unready_dependencies(e, &spec, workload) {
                out.refusals.push(Refusal {
                    app: key.clone(),
                    reason: format!("scale {workload} to {replicas} refused: {why}"),
                    decision: None,
                });
                return Ok(());
            }
        }
        if replicas == current {
            out.notes
                .push(format!("{key}: {workload} already has {replicas} replicas"));
            return Ok(());
        }
        let version = e.current;
        let own = e.charge;
        let mut targets = e.targets.clone();
        targets.insert(workload.to_string(), replicas);
        let ev = self.evaluate(key, &spec, &targets, own, version, now);
        if !ev.admitted() {
            let reason = format!("scale {workload} to {replicas} refused: {}", ev.failures());
            let d = self.new_decision(
                key,
                DecisionKind::Scale,
                version,
                &spec,
                &ev,
                false,
                reason.clone(),
                now,
                out,
            );
            out.refusals.push(Refusal {
                app: key.clone(),
                reason,
                decision: Some(d),
            });
            return Ok(());
        }
        let charge = ev.admission.as_ref().map(|a| a.charge).unwrap_or_default();
        let eff = ev.effective.clone().unwrap_or_default();
        self.mark_converging(key, super::convergence::ConvergeCause::Scale, now);
        let mut related = Vec::new();
        if replicas > current {
            let staying: Vec<(String, NodeIdx)> = self
                .apps
                .get(key)
                .map(|e| {
                    e.runtime
                        .instances
                        .iter()
                        .filter_map(|(k, i)| i.slot.map(|(n, _)| (k.workload.clone(), n)))
                        .collect()
                })
                .unwrap_or_default();
            let to_place: Vec<(usize, u32)> =
                replicas_in_order(&spec, &targets, |n, r| n == workload && r >= current);
            let g = self.run_gang(key, &spec, &eff, &to_place, &staying, &targets);
            let d = self.placement_decision(
                key,
                DecisionKind::Scale,
                version,
                &spec,
                &eff,
                &g,
                to_place.len() as u32,
                None,
                Phase::Running,
                now,
                out,
            );
            if !g.ok {
                out.refusals.push(Refusal {
                    app: key.clone(),
                    reason: format!("scale {workload} to {replicas} refused: {}", g.reason),
                    decision: Some(d),
                });
                return Ok(());
            }
            self.commit_placed(key, &g.placed, version, now);
            self.apply_preemptions(key, &g, d, now, out);
            related.push(d.to_string());
        } else {
            let surplus: Vec<InstanceKey> = (replicas..current)
                .rev()
                .map(|r| InstanceKey::new(workload, r))
                .collect();
            self.remove_instances(key, &surplus, "scaled down", out);
        }
        if let Some(t) = self.tenants.get_mut(&key.tenant) {
            t.usage = t.usage.minus(own).plus(charge);
        }
        if let Some(e) = self.apps.get_mut(key) {
            e.targets = targets;
            e.charge = charge;
        }
        self.transition_app(
            key,
            Input::Op(Operation::Scale),
            Trigger::User,
            format!("scaled {workload} from {current} to {replicas} replicas"),
            ev.policies.clone(),
            related,
            now,
            out,
        )?;
        self.replan(key, now, out);
        Ok(())
    }

    /// Stops and forgets instances, releasing their allocations.
    fn remove_instances(
        &mut self,
        key: &AppKey,
        keys: &[InstanceKey],
        reason: &str,
        out: &mut Outcome,
    ) {
        self.capacity_epoch += 1;
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        let pool = e.spec().pool().to_string();
        let mut freed = ResVec::default();
        for k in keys {
            let Some(inst) = e.runtime.instances.remove(k) else {
                continue;
            };
            if let Some((node, serial)) = inst.slot
                && let Some(p) = self.cluster.release(node, serial)
            {
                freed = freed.plus(p.demand.request);
            }
            if let (Some(n), true) = (&inst.node, inst.starts > 0 || inst.observed.is_live()) {
                out.actions.push(super::apps::stop_action(
                    key,
                    k,
                    (inst.version, inst.placement),
                    n,
                    reason.to_string(),
                ));
            }
            if let Some(old) = &inst.replacing
                && let (Some(n), false) = (&old.node, old.stopped)
            {
                out.actions.push(super::apps::stop_action(
                    key,
                    k,
                    (old.version, old.placement),
                    n,
                    reason.to_string(),
                ));
            }
        }
        e.allocated = e.allocated.minus(freed);
        if let Some(t) = self.tenants.get_mut(&key.tenant)
            && let Some(a) = t.pool_alloc.get_mut(&pool)
        {
            *a = a.minus(freed);
        }
    }

    /// Degraded applications that lost replicas to preemption or a node try
    /// to get them back, highest priority first, once per capacity change
    /// (seed §6.4.2: Degraded -> Running when resources recover).
    pub(super) fn auto_restore(&mut self, now: Timestamp, out: &mut Outcome) {
        let epoch = self.capacity_epoch;
        let mut due: Vec<(std::cmp::Reverse<u32>, u64, AppKey)> = self
            .apps
            .values()
            .filter(|e| {
                e.phase == Phase::Degraded
                    && e.restore_epoch < epoch
                    && e.degradation.as_ref().is_some_and(|d| {
                        matches!(
                            d.cause,
                            DegradationCause::Preemption | DegradationCause::NodeLoss
                        )
                    })
            })
            .map(|e| {
                (
                    std::cmp::Reverse(e.spec().spec.priority),
                    e.admitted_seq,
                    e.key.clone(),
                )
            })
            .collect();
        due.sort();
        for (_, _, key) in due {
            if let Some(e) = self.apps.get_mut(&key) {
                e.restore_epoch = epoch;
            }
            if let Some((d, true, reason)) = self.replace_evicted(&key, now, out) {
                if let Some(e) = self.apps.get_mut(&key) {
                    e.degradation = Some(Degradation {
                        cause: DegradationCause::Runtime,
                        reason: format!("resources recovered: {reason} (decision {d})"),
                    });
                }
                out.notes
                    .push(format!("{key}: evicted replicas re-placed ({d})"));
                self.replan(&key, now, out);
            }
        }
    }

    pub(super) fn op_restore(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let phase = self
            .apps
            .get(key)
            .map(|e| e.phase)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        transition(phase, Input::Op(Operation::Restore)).map_err(|source| {
            CoordinatorError::Illegal {
                app: key.clone(),
                source,
            }
        })?;
        let mut related = Vec::new();
        if let Some((d, ok, reason)) = self.replace_evicted(key, now, out) {
            related.push(d.to_string());
            if !ok {
                out.refusals.push(Refusal {
                    app: key.clone(),
                    reason: format!("restore refused: {reason}"),
                    decision: Some(d),
                });
                return Ok(());
            }
        }
        if let Some(e) = self.apps.get_mut(key) {
            // Held instances get a fresh retry budget; those an onFailure
            // rule held start afresh (their failure would hold them again).
            let spec = e.spec_arc();
            for (k, inst) in e.runtime.instances.iter_mut() {
                if inst.observed.has_ended() {
                    inst.restarts = 0;
                    let held = inst.observed.failure_category().is_some_and(|c| {
                        spec.workload(&k.workload).is_some_and(|w| {
                            spec.lifecycle_of(w).on_failure.action(c)
                                != crate::model::lifecycle_policy::FailureAction::Restart
                        })
                    });
                    if held {
                        inst.observed = ObservedState::Pending;
                        inst.since = now;
                    }
                }
            }
            e.degradation = Some(Degradation {
                cause: DegradationCause::Runtime,
                reason: "restore requested".into(),
            });
        }
        self.transition_app(
            key,
            Input::Op(Operation::Restore),
            Trigger::User,
            "restore requested: evicted replicas re-placed, held replicas released".into(),
            Vec::new(),
            related,
            now,
            out,
        )?;
        self.replan(key, now, out);
        Ok(())
    }

    /// UpdateSpec of a placed application: admission, arbitration of the
    /// changed workloads, then a rolling replacement; refused as a whole
    /// when any step fails.
    pub(super) fn update_placed(
        &mut self,
        key: &AppKey,
        app: Application,
        origin: VersionOrigin,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let Some(e) = self.apps.get(key) else { return };
        let old = e.spec_arc();
        let version = e.next_version();
        let own = e.charge;
        let targets = super::apps::targets_for(&e.targets, &app);
        let ev = self.evaluate(key, &app, &targets, own, version, now);
        if !ev.admitted() {
            let reason = format!("version {version} refused: {}", ev.failures());
            let d = self.new_decision(
                key,
                DecisionKind::Update,
                version,
                &app,
                &ev,
                false,
                reason.clone(),
                now,
                out,
            );
            out.refusals.push(Refusal {
                app: key.clone(),
                reason,
                decision: Some(d),
            });
            return;
        }
        let eff = ev.effective.clone().unwrap_or_default();
        let changed: BTreeSet<String> = app
            .spec
            .workloads
            .iter()
            .filter(|w| old.workload(&w.name) != Some(*w))
            .map(|w| w.name.clone())
            .collect();
        let removed: BTreeSet<String> = old
            .spec
            .workloads
            .iter()
            .filter(|w| app.workload(&w.name).is_none())
            .map(|w| w.name.clone())
            .collect();
        // Release, tentatively, what does not stay.
        let mut released: Vec<(InstanceKey, NodeIdx, u64, Placed)> = Vec::new();
        let mut staying: Vec<(String, NodeIdx)> = Vec::new();
        let mut kept: BTreeSet<InstanceKey> = BTreeSet::new();
        let instances: Vec<(InstanceKey, Option<(NodeIdx, u64)>)> = self
            .apps
            .get(key)
            .map(|e| {
                e.runtime
                    .instances
                    .iter()
                    .map(|(k, i)| (k.clone(), i.slot))
                    .collect()
            })
            .unwrap_or_default();
        for (k, slot) in instances {
            let keep = !removed.contains(&k.workload)
                && !changed.contains(&k.workload)
                && k.replica < targets.get(&k.workload).copied().unwrap_or(0);
            match slot {
                Some((n, _)) if keep => {
                    staying.push((k.workload.clone(), n));
                    kept.insert(k.clone());
                }
                Some((n, s)) => {
                    if let Some(p) = self.cluster.release(n, s) {
                        released.push((k, n, s, p));
                    }
                }
                None => {}
            }
        }
        // Changed workloads are placed afresh; the others keep what stays
        // and get the replicas they lack (evicted, or a raised minimum).
        let to_place = replicas_in_order(&app, &targets, |w, r| {
            changed.contains(w) || !kept.contains(&InstanceKey::new(w, r))
        });
        let g = self.run_gang(key, &app, &eff, &to_place, &staying, &targets);
        if !g.ok {
            for (_, n, s, p) in released {
                self.cluster.insert(n, s, p);
            }
            let d = self.placement_decision(
                key,
                DecisionKind::Update,
                version,
                &app,
                &eff,
                &g,
                to_place.len() as u32,
                None,
                Phase::Running,
                now,
                out,
            );
            out.refusals.push(Refusal {
                app: key.clone(),
                reason: format!("version {version} refused: {}", g.reason),
                decision: Some(d),
            });
            return;
        }
        let phase = self.apps.get(key).map_or(Phase::Running, |e| e.phase);
        let d = self.placement_decision(
            key,
            DecisionKind::Update,
            version,
            &app,
            &eff,
            &g,
            to_place.len() as u32,
            None,
            phase,
            now,
            out,
        );
        let charge = ev.admission.as_ref().map(|a| a.charge).unwrap_or_default();
        let pool = app.pool().to_string();
        let old_pool = old.pool().to_string();
        let mut freed = ResVec::default();
        let mut added = ResVec::default();
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        // Stop what is gone; remember what is replaced.
        let mut replaced: BTreeMap<InstanceKey, Replaced> = BTreeMap::new();
        let mut kept_old: BTreeMap<InstanceKey, Replaced> = BTreeMap::new();
        for (k, _, _, p) in &released {
            freed = freed.plus(p.demand.request);
            let Some(inst) = e.runtime.instances.remove(k) else {
                continue;
            };
            let started = inst.starts > 0 || inst.observed.is_live();
            let goes_on = changed.contains(&k.workload)
                && k.replica < targets.get(&k.workload).copied().unwrap_or(0);
            // A rollback to what the old copy of a replacement still runs
            // (a canary's or blue-green's, which never stopped) keeps that
            // copy: only the newer one stops.
            let keeps_old = inst.replacing.clone().filter(|o| {
                goes_on
                    && o.live()
                    && e.version(o.version)
                        .and_then(|v| v.spec.workload(&k.workload))
                        == app.workload(&k.workload)
            });
            if let Some(o) = keeps_old {
                if started && let Some(n) = &inst.node {
                    out.actions.push(super::apps::stop_action(
                        key,
                        k,
                        (inst.version, inst.placement),
                        n,
                        format!(
                            "version {version} is what version {} runs: that copy goes on, this one stops",
                            o.version
                        ),
                    ));
                }
                kept_old.insert(k.clone(), o);
                continue;
            }
            // During a rollout, the instance that still serves is the old one
            // a replacement kept running, when the newer one never got ready:
            // that one is replaced, the newer one stopped.
            let ready = inst.observed == ObservedState::Ready
                || (inst.observed == ObservedState::Running
                    && !old.workload(&k.workload).is_some_and(|w| {
                        w.health_checks
                            .iter()
                            .any(|h| h.kind == crate::model::health::CheckKind::Readiness)
                    }));
            let serving = inst
                .replacing
                .clone()
                .filter(|o| o.live() && !ready)
                .filter(|_| goes_on);
            if let Some(o) = serving {
                if started && let Some(n) = &inst.node {
                    out.actions.push(super::apps::stop_action(
                        key,
                        k,
                        (inst.version, inst.placement),
                        n,
                        format!("replaced by version {version} before it was ready"),
                    ));
                }
                replaced.insert(k.clone(), Replaced { surge: false, ..o });
            } else if goes_on && started {
                replaced.insert(
                    k.clone(),
                    Replaced {
                        node: inst.node.clone(),
                        version: inst.version,
                        placement: inst.placement,
                        stopped: false,
                        stop_requested: false,
                        surge: false,
                        observed: Some(inst.observed.clone()),
                    },
                );
            } else if started && let Some(n) = &inst.node {
                out.actions.push(super::apps::stop_action(
                    key,
                    k,
                    (inst.version, inst.placement),
                    n,
                    format!("not in version {version}"),
                ));
            }
        }
        for p in &g.placed {
            let demand = self.cluster.request_of(p.node, p.serial);
            added = added.plus(demand);
            let k = InstanceKey::new(p.workload.clone(), p.replica);
            let node = self.cluster.name(p.node).to_string();
            let inst = match kept_old.remove(&k) {
                Some(o) if o.node.as_deref() == Some(node.as_str()) => {
                    Instance::restored(&o, (p.node, p.serial), now)
                }
                // Placed elsewhere: the old copy serves until replaced.
                Some(o) => Instance {
                    replacing: Some(Replaced { surge: false, ..o }),
                    ..Instance::placed(node, (p.node, p.serial), version, now)
                },
                None => Instance {
                    replacing: replaced.remove(&k),
                    ..Instance::placed(node, (p.node, p.serial), version, now)
                },
            };
            e.runtime.instances.insert(k, inst);
        }
        e.runtime.jobs.retain(|(w, _), _| !removed.contains(w));
        e.allocated = e.allocated.minus(freed).plus(added);
        e.versions.push(AppVersion {
            version,
            spec: std::sync::Arc::new(app),
            created: now,
            origin,
        });
        let previous = e.current;
        e.current = version;
        e.targets = targets;
        e.charge = charge;
        e.effective = ev.effective.clone();
        e.policies = ev.policies.clone();
        e.evaluation = Some(ev.evaluation);
        if let Some(t) = self.tenants.get_mut(&key.tenant) {
            t.usage = t.usage.minus(own).plus(charge);
            if let Some(a) = t.pool_alloc.get_mut(&old_pool) {
                *a = a.minus(freed);
            }
            let a = t.pool_alloc.entry(pool).or_default();
            *a = a.plus(added);
        }
        self.capacity_epoch += 1;
        let changed_list: Vec<String> = changed.iter().cloned().collect();
        self.reset_jobs(key, &changed_list, version, now);
        let mut reason = origin_reason(origin, version);
        if !changed_list.is_empty() {
            reason.push_str(&format!("; rolling update of {}", changed_list.join(", ")));
        }
        let _ = self.transition_app(
            key,
            Input::Op(Operation::UpdateSpec),
            Trigger::User,
            reason,
            ev.policies.clone(),
            vec![d.to_string(), format!("version {version}")],
            now,
            out,
        );
        self.apply_preemptions(key, &g, d, now, out);
        self.begin_rollout(key, previous, version, origin, now);
        self.replan(key, now, out);
    }
}
