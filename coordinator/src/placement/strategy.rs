//! The pluggable placement strategy (seed 000 §5.3): where to look first and
//! how to score a feasible node. Feasibility (capacity, runtime/OS,
//! reservations, failure-domain spread) is checked by the engine for every
//! strategy, so a strategy can only choose among valid nodes.

use super::binpack::BinPack;
use super::cluster::{NodeIdx, NodeState};
use super::cost::CostAware;
use super::fairshare::FairShare;
use super::resources::Demand;
use super::sla::SlaAware;
use super::spread::Spread;
use crate::model::application::LatencyClass;
use crate::model::policy::StrategyKind;
use std::collections::BTreeMap;

/// Order in which the engine walks the candidate nodes of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOrder {
    /// Smallest free cpu that can still fit first (best fit).
    LeastFreeThatFits,
    /// Largest free cpu first.
    MostFree,
    /// Cheapest node first.
    Cheapest,
}

/// What a strategy may look at when scoring.
#[derive(Debug, Clone, Copy)]
pub struct ScoreContext<'a> {
    /// The replica's demand.
    pub demand: &'a Demand,
    /// Tenant id of the application.
    pub tenant: u32,
    /// Latency class of the application.
    pub latency: Option<LatencyClass>,
    /// Instances of this application per node (existing and just placed).
    pub app_on_node: &'a BTreeMap<NodeIdx, u32>,
}

impl ScoreContext<'_> {
    /// Instances of this application on node `i`.
    pub fn app_instances_on(&self, i: NodeIdx) -> u32 {
        self.app_on_node.get(&i).copied().unwrap_or(0)
    }
}

/// A placement strategy.
pub trait PlacementStrategy: Sync {
    /// Which strategy this is.
    fn kind(&self) -> StrategyKind;
    /// Where to look first.
    fn scan_order(&self, ctx: &ScoreContext<'_>) -> ScanOrder;
    /// Score of a feasible node; lower is better.
    fn score(&self, ctx: &ScoreContext<'_>, idx: NodeIdx, node: &NodeState) -> i64;
}

/// The strategy implementing `kind`.
pub fn strategy(kind: StrategyKind) -> &'static dyn PlacementStrategy {
    match kind {
        StrategyKind::BinPack => &BinPack,
        StrategyKind::Spread => &Spread,
        StrategyKind::SlaAware => &SlaAware,
        StrategyKind::CostAware => &CostAware,
        StrategyKind::FairShare => &FairShare,
    }
}

/// Dominant share of the node after placing `d`, in parts per million.
pub fn utilisation_after_ppm(node: &NodeState, d: &Demand) -> i64 {
    let after = node.alloc.plus(d.request);
    (after.dominant_share_ppb(node.cap) / 1000) as i64
}
