//! All-or-nothing placement of an application's replicas (an application is
//! placed as a whole or not at all), in dependency order, with preemption
//! when policy allows it and a cost-budget check. On failure every
//! allocation and eviction made on the way is undone.

use super::preemption::find_victims;
use crate::decision::PreemptionRecord;
use crate::model::application::Application;
use crate::model::names::AppKey;
use crate::model::ratio::Ratio;
use crate::model::workload::Workload;
use crate::placement::cost::cost_share;
use crate::placement::engine::{Constraints, SpreadNeed};
use crate::placement::{
    Cluster, Demand, NodeIdx, Placed, PlacementRecord, ResVec, ScoreContext, SearchParams,
    place_one, strategy,
};
use crate::policy::EffectivePolicy;
use std::collections::{BTreeMap, BTreeSet};

/// What to place.
#[derive(Debug, Clone, Copy)]
pub struct GangRequest<'a> {
    /// Application id.
    pub app_id: u32,
    /// Tenant id.
    pub tenant_id: u32,
    /// Spec to place.
    pub app: &'a Application,
    /// Pool.
    pub pool: &'a str,
    /// Effective policy.
    pub effective: &'a EffectivePolicy,
    /// Replicas to place as (workload index, replica), in start order.
    pub to_place: &'a [(usize, u32)],
    /// Instances of the application that stay: (workload name, node).
    pub staying: &'a [(String, NodeIdx)],
    /// Replicas per workload once placed (for the spread requirement).
    pub totals: &'a BTreeMap<String, u32>,
    /// Candidates to score and patience.
    pub top_k: usize,
    /// Nodes examined after the first feasible one.
    pub patience: usize,
}

/// One replica placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedReplica {
    /// Workload name.
    pub workload: String,
    /// Replica.
    pub replica: u32,
    /// Node.
    pub node: NodeIdx,
    /// Allocation serial.
    pub serial: u64,
}

/// Result of a gang placement.
#[derive(Debug, Clone, Default)]
pub struct GangOutcome {
    /// True when every replica was placed (and nothing was undone).
    pub ok: bool,
    /// The selection, or what failed.
    pub reason: String,
    /// Per-replica records, including the failing one.
    pub placements: Vec<PlacementRecord>,
    /// Replicas placed (empty when not ok).
    pub placed: Vec<PlacedReplica>,
    /// Instances evicted to make room: (node, serial, what it held).
    pub evicted: Vec<(NodeIdx, u64, Placed)>,
    /// Preemptions, for the decision.
    pub preemptions: Vec<PreemptionRecord>,
    /// Requests allocated.
    pub allocated: ResVec,
    /// Cost per hour (thousandths) of the node shares taken.
    pub cost_milli: u64,
    /// Other tenants over their fair share of the pool before this
    /// placement, by tenant id: (share, fair share) in parts per billion
    /// (the only other tenants preemption may take from).
    pub over_fair_share: BTreeMap<u32, (u64, u64)>,
    /// With `fairShareWithinTenant`: the placing tenant's own applications
    /// above their equal part of its holding in the pool, by application
    /// id: (share, equal part) in parts per billion of the pool (the only
    /// same-tenant applications preemption may take from then).
    pub over_within_tenant: BTreeMap<u32, (u64, u64)>,
}

/// How deep `w` sits in `colocateWith` chains (validation refuses cycles;
/// the depth bound only guards against them).
fn colocation_depth(ws: &[Workload], w: &Workload, depth: usize) -> usize {
    if depth > ws.len() {
        return depth;
    }
    w.colocate_with
        .iter()
        .filter_map(|t| ws.iter().find(|x| &x.name == t))
        .map(|t| 1 + colocation_depth(ws, t, depth + 1))
        .max()
        .unwrap_or(0)
}

/// Places the replicas of `req`, or nothing.
pub fn place_gang(
    cluster: &mut Cluster,
    req: &GangRequest<'_>,
    victim_ok: &dyn Fn(&Placed) -> bool,
    app_key_of: &dyn Fn(u32) -> AppKey,
) -> GangOutcome {
    let mut out = GangOutcome::default();
    let ws = &req.app.spec.workloads;
    let strat = strategy(req.effective.placement_strategy);
    let params = SearchParams {
        ratio: req.effective.max_overcommit_ratio,
        top_k: req.top_k,
        patience: req.patience,
    };
    let rule = req.effective.min_failure_domains.as_ref();
    let key_id = rule.and_then(|r| cluster.domain_key(&r.key));
    let mut used: BTreeMap<&str, BTreeMap<u32, u32>> = BTreeMap::new();
    let mut app_on_node: BTreeMap<NodeIdx, u32> = BTreeMap::new();
    // Nodes holding each workload of the application (for colocateWith and
    // antiAffinity).
    let mut on_node: BTreeMap<&str, BTreeSet<NodeIdx>> = BTreeMap::new();
    for (w, node) in req.staying {
        *app_on_node.entry(*node).or_default() += 1;
        on_node.entry(w.as_str()).or_default().insert(*node);
        if let Some(v) = key_id.and_then(|k| cluster.node(*node).and_then(|n| n.domain(k))) {
            *used.entry(w.as_str()).or_default().entry(v).or_default() += 1;
        }
    }
    let latency = req.app.spec.sla.latency;
    // Workloads others are colocated with are placed first (order does not
    // change what starts when: dependsOn does).
    let mut to_place = req.to_place.to_vec();
    to_place.sort_by_key(|&(wi, _)| ws.get(wi).map_or(0, |w| colocation_depth(ws, w, 0)));
    for &(wi, r) in &to_place {
        let Some(w) = ws.get(wi) else { continue };
        let colocate: Option<BTreeSet<NodeIdx>> = (!w.colocate_with.is_empty()).then(|| {
            let mut sets = w
                .colocate_with
                .iter()
                .map(|t| on_node.get(t.as_str()).cloned().unwrap_or_default());
            let first = sets.next().unwrap_or_default();
            sets.fold(first, |a, b| a.intersection(&b).copied().collect())
        });
        let avoid: Option<BTreeSet<NodeIdx>> = (!w.anti_affinity.is_empty()).then(|| {
            w.anti_affinity
                .iter()
                .flat_map(|t| on_node.get(t.as_str()).cloned().unwrap_or_default())
                .collect()
        });
        let demand = Demand::of(req.app, w, r);
        let empty = BTreeMap::new();
        let used_w = used.get(w.name.as_str()).unwrap_or(&empty);
        let constraints = Constraints {
            spread: rule.map(|rule| SpreadNeed {
                key: key_id,
                required: rule
                    .count
                    .min(req.totals.get(&w.name).copied().unwrap_or(w.replicas.min)),
                used: used_w,
            }),
            node_selector: (!w.node_selector.is_empty()).then_some(&w.node_selector),
            colocate: colocate.as_ref(),
            avoid: avoid.as_ref(),
        };
        let Some(pool) = cluster.pool(req.pool) else {
            out.reason = format!("pool {} does not exist", req.pool);
            undo(cluster, &mut out);
            return out;
        };
        let ctx = ScoreContext {
            demand: &demand,
            tenant: req.tenant_id,
            latency,
            app_on_node: &app_on_node,
        };
        let mut rec = place_one(
            cluster,
            pool,
            &demand,
            strat,
            &ctx,
            &params,
            &constraints,
            &w.name,
            r,
        );
        if rec.selected.is_none()
            && req.effective.enable_preemption
            && let Some(choice) = find_victims(
                cluster,
                pool,
                &demand,
                params.ratio,
                &constraints,
                victim_ok,
            )
        {
            let mut by_app: BTreeMap<u32, (u32, Vec<String>)> = BTreeMap::new();
            for serial in &choice.victims {
                if let Some(p) = cluster.release(choice.node, *serial) {
                    by_app
                        .entry(p.app)
                        .or_insert((p.priority, Vec::new()))
                        .1
                        .push(format!("{}/{}", p.workload, p.replica));
                    out.evicted.push((choice.node, *serial, p));
                }
            }
            for (app, (prio, instances)) in by_app {
                out.preemptions.push(PreemptionRecord {
                    victim: app_key_of(app),
                    victim_priority: prio,
                    node: choice.node,
                    instances,
                    for_replica: format!("{}/{r}", w.name),
                });
            }
            rec.selected = Some(choice.node);
            rec.preempted = Some(choice.victims.len() as u32);
        }
        let Some(node) = rec.selected else {
            let rej: Vec<String> = rec
                .rejected
                .iter()
                .map(|(why, n)| format!("{why}: {n}"))
                .collect();
            out.reason = format!(
                "no node of pool {} can take {}/{r} ({}; {} nodes: {})",
                req.pool,
                w.name,
                demand.request.describe(),
                rec.examined,
                if rej.is_empty() {
                    "the pool has no nodes".to_string()
                } else {
                    rej.join(", ")
                }
            );
            out.placements.push(rec);
            undo(cluster, &mut out);
            return out;
        };
        let serial = cluster.allocate(
            node,
            Placed {
                app: req.app_id,
                tenant: req.tenant_id,
                workload: w.name.clone(),
                replica: r,
                priority: req.app.spec.priority,
                critical: w.critical,
                demand,
            },
        );
        if let Some(n) = cluster.node(node) {
            out.cost_milli += cost_share(n, demand.request);
            if let Some(v) = key_id.and_then(|k| n.domain(k)) {
                *used
                    .entry(w.name.as_str())
                    .or_default()
                    .entry(v)
                    .or_default() += 1;
            }
        }
        *app_on_node.entry(node).or_default() += 1;
        on_node.entry(w.name.as_str()).or_default().insert(node);
        out.allocated = out.allocated.plus(demand.request);
        out.placed.push(PlacedReplica {
            workload: w.name.clone(),
            replica: r,
            node,
            serial,
        });
        out.placements.push(rec);
    }
    if let Some(max) = req.app.spec.budget.cost_per_hour
        && out.cost_milli > max.millis()
    {
        out.reason = format!(
            "placement would cost {}/h, over the budget of {max}/h",
            Ratio(out.cost_milli)
        );
        undo(cluster, &mut out);
        return out;
    }
    out.ok = true;
    let nodes: std::collections::BTreeSet<NodeIdx> = out.placed.iter().map(|p| p.node).collect();
    out.reason = format!(
        "{} replica(s) placed on {} node(s) by {}{}",
        out.placed.len(),
        nodes.len(),
        req.effective.placement_strategy,
        if out.preemptions.is_empty() {
            String::new()
        } else {
            format!(", preempting {} application(s)", out.preemptions.len())
        }
    );
    out
}

/// Reverts every allocation and eviction of `out`.
fn undo(cluster: &mut Cluster, out: &mut GangOutcome) {
    for p in out.placed.drain(..).rev() {
        cluster.release(p.node, p.serial);
    }
    for (node, serial, p) in out.evicted.drain(..).rev() {
        cluster.insert(node, serial, p);
    }
    out.preemptions.clear();
    out.allocated = ResVec::default();
    out.cost_milli = 0;
    out.ok = false;
}
