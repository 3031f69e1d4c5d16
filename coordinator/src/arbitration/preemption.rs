//! Preemption (seed 000 §5.2 step 4, §6.4.2): when a replica fits nowhere
//! and policy allows it, take the room from lower-priority applications,
//! least protected first: lowest priority, then QoS hold-back order
//! (BestEffort first), then non-critical workloads. The node needing the
//! fewest victims wins.

use crate::model::ratio::Ratio;
use crate::placement::engine::Constraints;
use crate::placement::{Cluster, Demand, NodeIdx, Placed, PoolState};

/// Where to make room and whom to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VictimChoice {
    /// The node.
    pub node: NodeIdx,
    /// Serials of the instances to stop.
    pub victims: Vec<u64>,
}

/// Finds the cheapest way to fit `d` on a node of `pool` by stopping
/// instances that `eligible` accepts (callers pass "lower priority, another
/// application, in a phase that may be degraded").
pub fn find_victims(
    cluster: &Cluster,
    pool: &PoolState,
    d: &Demand,
    ratio: Ratio,
    constraints: &Constraints<'_>,
    eligible: &dyn Fn(&Placed) -> bool,
) -> Option<VictimChoice> {
    let class = cluster.class(pool, &d.runtime);
    let mut best: Option<((usize, u32, u64, NodeIdx), VictimChoice)> = None;
    for &(_, i) in class.by_free.iter() {
        let Some(n) = cluster.node(i) else { continue };
        if constraints.check(i, n).is_err() {
            continue;
        }
        let mut cands: Vec<(&u64, &Placed)> =
            n.instances.iter().filter(|(_, p)| eligible(p)).collect();
        if cands.is_empty() {
            continue;
        }
        cands.sort_by_key(|(serial, p)| {
            (
                p.priority,
                p.demand.qos.protection_rank(),
                p.critical,
                **serial,
            )
        });
        let mut usage = n.usage();
        let mut chosen = Vec::new();
        let mut fits = false;
        for (serial, p) in cands {
            usage = usage.without(&p.demand);
            chosen.push((*serial, p.priority));
            if n.fit_with(usage, d, ratio).is_ok() {
                fits = true;
                break;
            }
        }
        if !fits {
            continue;
        }
        let key = (
            chosen.len(),
            chosen.iter().map(|c| c.1).max().unwrap_or(0),
            chosen.iter().map(|c| u64::from(c.1)).sum(),
            i,
        );
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((
                key,
                VictimChoice {
                    node: i,
                    victims: chosen.into_iter().map(|c| c.0).collect(),
                },
            ));
        }
    }
    best.map(|(_, c)| c)
}
