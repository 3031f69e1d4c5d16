//! SLA-aware: latency-critical applications go to the quietest nodes (few
//! BestEffort/Burstable neighbours, low utilisation); batch applications are
//! packed; standard ones take the least utilised node.

use super::cluster::{NodeIdx, NodeState};
use super::strategy::{PlacementStrategy, ScanOrder, ScoreContext, utilisation_after_ppm};
use crate::model::application::LatencyClass;
use crate::model::policy::StrategyKind;

/// Place by the application's latency class.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlaAware;

impl PlacementStrategy for SlaAware {
    fn kind(&self) -> StrategyKind {
        StrategyKind::SlaAware
    }
    fn scan_order(&self, ctx: &ScoreContext<'_>) -> ScanOrder {
        match ctx.latency {
            Some(LatencyClass::Batch) => ScanOrder::LeastFreeThatFits,
            _ => ScanOrder::MostFree,
        }
    }
    fn score(&self, ctx: &ScoreContext<'_>, _: NodeIdx, node: &NodeState) -> i64 {
        let util = utilisation_after_ppm(node, ctx.demand);
        match ctx.latency {
            Some(LatencyClass::Critical) => i64::from(node.noisy) * 100_000 + util,
            Some(LatencyClass::Batch) => 1_000_000 - util,
            _ => util,
        }
    }
}
