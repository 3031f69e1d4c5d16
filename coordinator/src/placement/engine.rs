//! The placement search shared by every strategy: walk a pool's capacity
//! index in the strategy's order, check every hard constraint, score the
//! first few feasible nodes, keep the best. When nothing fits, every pool
//! member is classified so the explanation is exact.

use super::cluster::{Cluster, NodeIdx, NodeState, PoolState};
use super::record::{Candidate, PlacementRecord, RejectCounts, RejectReason};
use super::resources::Demand;
use super::strategy::{PlacementStrategy, ScanOrder, ScoreContext};
use crate::model::ratio::Ratio;
use std::collections::{BTreeMap, BTreeSet};

/// The failure-domain spread a replica must respect.
#[derive(Debug, Clone, Copy)]
pub struct SpreadNeed<'a> {
    /// Interned key (`None` when no node has the key).
    pub key: Option<u32>,
    /// Distinct domains the workload must reach.
    pub required: u32,
    /// Replicas of the workload per domain value so far.
    pub used: &'a BTreeMap<u32, u32>,
}

impl SpreadNeed<'_> {
    /// Whether `node` may take the next replica.
    pub fn check(&self, node: &NodeState) -> Result<(), RejectReason> {
        let Some(v) = self.key.and_then(|k| node.domain(k)) else {
            return Err(RejectReason::MissingFailureDomain);
        };
        if (self.used.len() as u32) < self.required && self.used.contains_key(&v) {
            return Err(RejectReason::FailureDomainSpread);
        }
        Ok(())
    }
}

/// What a replica asks of a node beside capacity: failure-domain spread,
/// the workload's `nodeSelector`, `colocateWith` and `antiAffinity`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Constraints<'a> {
    /// The spread rule, when there is one.
    pub spread: Option<SpreadNeed<'a>>,
    /// Labels the node must carry (none: any node).
    pub node_selector: Option<&'a BTreeMap<String, String>>,
    /// The only nodes allowed (those holding every `colocateWith` workload).
    pub colocate: Option<&'a BTreeSet<NodeIdx>>,
    /// Nodes excluded (those holding an `antiAffinity` workload).
    pub avoid: Option<&'a BTreeSet<NodeIdx>>,
}

impl Constraints<'_> {
    /// Whether node `i` satisfies the selector and the (anti-)affinities.
    pub fn selects(&self, i: NodeIdx, node: &NodeState) -> Result<(), RejectReason> {
        if let Some(sel) = self.node_selector
            && !sel.iter().all(|(k, v)| node.spec.labels.get(k) == Some(v))
        {
            return Err(RejectReason::NodeSelector);
        }
        if self.colocate.is_some_and(|c| !c.contains(&i)) {
            return Err(RejectReason::Colocation);
        }
        if self.avoid.is_some_and(|a| a.contains(&i)) {
            return Err(RejectReason::AntiAffinity);
        }
        Ok(())
    }

    /// Whether node `i` satisfies them all.
    pub fn check(&self, i: NodeIdx, node: &NodeState) -> Result<(), RejectReason> {
        self.selects(i, node)?;
        match &self.spread {
            Some(s) => s.check(node),
            None => Ok(()),
        }
    }
}

/// Search bounds.
#[derive(Debug, Clone, Copy)]
pub struct SearchParams {
    /// Overcommit ratio for cpu.
    pub ratio: Ratio,
    /// Feasible candidates to score before choosing.
    pub top_k: usize,
    /// Nodes examined after the first feasible one before settling.
    pub patience: usize,
}

/// Checks every hard constraint of `d` on `node`: whether it takes work at
/// all, the `nodeSelector`, capacity, then the spread rule.
pub fn feasible(
    i: NodeIdx,
    node: &NodeState,
    d: &Demand,
    ratio: Ratio,
    c: &Constraints<'_>,
) -> Result<(), RejectReason> {
    if node.takes_work() {
        c.selects(i, node)?;
    }
    node.fit(d, ratio)?;
    match &c.spread {
        Some(s) => s.check(node),
        None => Ok(()),
    }
}

/// Finds a node for one replica. The record says what was considered,
/// rejected and selected; nothing is allocated here.
#[allow(clippy::too_many_arguments)]
pub fn place_one(
    cluster: &Cluster,
    pool: &PoolState,
    demand: &Demand,
    strategy: &dyn PlacementStrategy,
    ctx: &ScoreContext<'_>,
    params: &SearchParams,
    constraints: &Constraints<'_>,
    workload: &str,
    replica: u32,
) -> PlacementRecord {
    let class = cluster.class(pool, &demand.runtime);
    let headroom = params
        .ratio
        .apply(class.max_cap_cpu)
        .saturating_sub(class.max_cap_cpu);
    let lower = demand.request.cpu as i64 - headroom as i64;
    let mut s = Search {
        cluster,
        demand,
        strategy,
        ctx,
        params,
        constraints,
        feasible: Vec::with_capacity(params.top_k),
        rejected: RejectCounts::default(),
        examined: 0,
        since_first: 0,
    };
    match strategy.scan_order(ctx) {
        ScanOrder::LeastFreeThatFits => {
            for &(_, i) in class.by_free.range((lower, 0)..) {
                if !s.visit(i) {
                    break;
                }
            }
        }
        ScanOrder::MostFree => {
            for &(free, i) in class.by_free.iter().rev() {
                if free < lower || !s.visit(i) {
                    break;
                }
            }
        }
        ScanOrder::Cheapest if !class.cost_tree.is_dirty() => {
            let mut from = 0;
            while let Some((p, i)) = class.cost_tree.first_at_least(from, lower) {
                from = p + 1;
                if !s.visit(i) {
                    break;
                }
            }
        }
        ScanOrder::Cheapest => {
            for &(_, i) in &class.by_cost {
                if !s.visit(i) {
                    break;
                }
            }
        }
    }
    let members = pool.members.len() as u32;
    let mut rec = PlacementRecord {
        workload: workload.to_string(),
        replica,
        selected: None,
        considered: Vec::new(),
        rejected: s.rejected,
        examined: s.examined,
        not_examined: members.saturating_sub(s.examined),
        preempted: None,
    };
    if s.feasible.is_empty() {
        rec.rejected = classify(cluster, pool, demand, params.ratio, constraints);
        rec.examined = members;
        rec.not_examined = 0;
        return rec;
    }
    s.feasible.sort_by_key(|c| (c.score, c.node));
    rec.selected = Some(s.feasible[0].node);
    rec.considered = s.feasible;
    rec
}

/// Why each member of `pool` cannot take `d`.
pub fn classify(
    cluster: &Cluster,
    pool: &PoolState,
    d: &Demand,
    ratio: Ratio,
    constraints: &Constraints<'_>,
) -> RejectCounts {
    let mut c = RejectCounts::default();
    for &i in &pool.members {
        if let Some(Err(r)) = cluster
            .node(i)
            .map(|n| feasible(i, n, d, ratio, constraints))
        {
            c.add(r, 1);
        }
    }
    c
}

struct Search<'a> {
    cluster: &'a Cluster,
    demand: &'a Demand,
    strategy: &'a dyn PlacementStrategy,
    ctx: &'a ScoreContext<'a>,
    params: &'a SearchParams,
    constraints: &'a Constraints<'a>,
    feasible: Vec<Candidate>,
    rejected: RejectCounts,
    examined: u32,
    since_first: usize,
}

impl Search<'_> {
    /// Examines node `i`; false when the search should stop.
    fn visit(&mut self, i: NodeIdx) -> bool {
        let Some(n) = self.cluster.node(i) else {
            return true;
        };
        self.examined += 1;
        match feasible(i, n, self.demand, self.params.ratio, self.constraints) {
            Ok(()) => self.feasible.push(Candidate {
                node: i,
                score: self.strategy.score(self.ctx, i, n),
            }),
            Err(r) => self.rejected.add(r, 1),
        }
        if !self.feasible.is_empty() {
            self.since_first += 1;
        }
        self.feasible.len() < self.params.top_k.max(1) && self.since_first <= self.params.patience
    }
}
