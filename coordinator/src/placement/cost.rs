//! Cost-aware: the cheapest node that fits, scored by the cost share the
//! replica would take (node cost x dominant share of the replica).

use super::cluster::{NodeIdx, NodeState};
use super::strategy::{PlacementStrategy, ScanOrder, ScoreContext};
use crate::model::policy::StrategyKind;

/// Minimise cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct CostAware;

/// Cost per hour (thousandths) of `node`'s share taken by `request`.
pub fn cost_share(node: &NodeState, request: super::resources::ResVec) -> u64 {
    if node.cost == u64::MAX {
        return 0;
    }
    let share = request.dominant_share_ppb(node.cap);
    (u128::from(node.cost) * u128::from(share) / 1_000_000_000) as u64
}

impl PlacementStrategy for CostAware {
    fn kind(&self) -> StrategyKind {
        StrategyKind::CostAware
    }
    fn scan_order(&self, _: &ScoreContext<'_>) -> ScanOrder {
        ScanOrder::Cheapest
    }
    fn score(&self, ctx: &ScoreContext<'_>, _: NodeIdx, node: &NodeState) -> i64 {
        if node.cost == u64::MAX {
            // Unknown cost sorts after every known cost.
            return i64::MAX / 2;
        }
        cost_share(node, ctx.demand.request).min(i64::MAX as u64 / 4) as i64
    }
}
