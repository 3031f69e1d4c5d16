//! Placement hints (seed 000 §5.2 step 3): per-replica node choice by a
//! pluggable strategy, honouring runtime/OS compatibility, capacity with the
//! overcommit ratio, reservations, network floors and failure-domain spread.

pub mod binpack;
pub mod cluster;
pub mod cost;
pub mod cost_index;
pub mod engine;
pub mod fairshare;
pub mod record;
pub mod resources;
pub mod sla;
pub mod spread;
pub mod strategy;

pub use cluster::{Cluster, NodeIdx, NodeState, Placed, PoolState, Usage};
pub use engine::{Constraints, SearchParams, SpreadNeed, place_one};
pub use record::{Candidate, PlacementRecord, RejectCounts, RejectReason};
pub use resources::{Demand, ResVec};
pub use strategy::{PlacementStrategy, ScanOrder, ScoreContext, strategy};
