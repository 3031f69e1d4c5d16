//! Spread: availability first. Prefers nodes without this application's
//! instances, then the emptiest node. (Failure-domain spread rules are hard
//! constraints checked by the engine for every strategy.)

use super::cluster::{NodeIdx, NodeState};
use super::strategy::{PlacementStrategy, ScanOrder, ScoreContext, utilisation_after_ppm};
use crate::model::policy::StrategyKind;

/// Spread over nodes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spread;

impl PlacementStrategy for Spread {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Spread
    }
    fn scan_order(&self, _: &ScoreContext<'_>) -> ScanOrder {
        ScanOrder::MostFree
    }
    fn score(&self, ctx: &ScoreContext<'_>, idx: NodeIdx, node: &NodeState) -> i64 {
        i64::from(ctx.app_instances_on(idx)) * 1_000_000 + utilisation_after_ppm(node, ctx.demand)
    }
}
