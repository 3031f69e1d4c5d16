//! Fair-share: keep each tenant's footprint per node even, so no tenant
//! dominates a node (and its noisy neighbours and failures).

use super::cluster::{NodeIdx, NodeState};
use super::strategy::{PlacementStrategy, ScanOrder, ScoreContext, utilisation_after_ppm};
use crate::model::policy::StrategyKind;

/// Balance tenants across nodes.
#[derive(Debug, Clone, Copy, Default)]
pub struct FairShare;

impl PlacementStrategy for FairShare {
    fn kind(&self) -> StrategyKind {
        StrategyKind::FairShare
    }
    fn scan_order(&self, _: &ScoreContext<'_>) -> ScanOrder {
        ScanOrder::MostFree
    }
    fn score(&self, ctx: &ScoreContext<'_>, _: NodeIdx, node: &NodeState) -> i64 {
        let mine = node.tenant_cpu(ctx.tenant) + ctx.demand.request.cpu;
        let share_ppm = if node.cap.cpu == 0 {
            0
        } else {
            (u128::from(mine) * 1_000_000 / u128::from(node.cap.cpu)) as i64
        };
        share_ppm * 10 + utilisation_after_ppm(node, ctx.demand) / 100
    }
}
