//! Bin-pack: utilisation first. Best fit on cpu, scored by the leftover
//! dominant share so the fullest node that fits wins.

use super::cluster::{NodeIdx, NodeState};
use super::strategy::{PlacementStrategy, ScanOrder, ScoreContext, utilisation_after_ppm};
use crate::model::policy::StrategyKind;

/// Fill nodes before opening new ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct BinPack;

impl PlacementStrategy for BinPack {
    fn kind(&self) -> StrategyKind {
        StrategyKind::BinPack
    }
    fn scan_order(&self, _: &ScoreContext<'_>) -> ScanOrder {
        ScanOrder::LeastFreeThatFits
    }
    fn score(&self, ctx: &ScoreContext<'_>, _: NodeIdx, node: &NodeState) -> i64 {
        1_000_000 - utilisation_after_ppm(node, ctx.demand)
    }
}
