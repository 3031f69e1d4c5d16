//! What placement of one replica considered, rejected and selected: compact
//! enough to keep for every placement (top-k candidates, rejection counts).

use super::cluster::NodeIdx;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

/// Why a node could not take a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RejectReason {
    /// Node cordoned or down.
    Unschedulable,
    /// Node OS or runtimes do not fit the workload.
    IncompatibleRuntime,
    /// Not enough cpu (after the overcommit ratio).
    InsufficientCpu,
    /// Not enough memory.
    InsufficientMemory,
    /// Not enough GPUs.
    InsufficientGpu,
    /// Reservations (MinimalReservation, dedicated cores) would exceed capacity.
    ReservationCapacity,
    /// Network reservations would exceed the node's link.
    NetworkReservation,
    /// The node's failure domain already holds a replica and the spread
    /// rule needs another domain.
    FailureDomainSpread,
    /// The node has no value for the spread rule's failure-domain key.
    MissingFailureDomain,
    /// Declared by a `Node` document, never registered by its agent.
    NotRegistered,
    /// The node's labels do not match the workload's `nodeSelector`.
    NodeSelector,
    /// The node does not hold the workloads this one must be colocated with.
    Colocation,
    /// The node holds a workload this one must not share a node with.
    AntiAffinity,
}

impl RejectReason {
    /// Every reason, in a fixed order.
    pub const ALL: [RejectReason; 13] = [
        RejectReason::Unschedulable,
        RejectReason::IncompatibleRuntime,
        RejectReason::InsufficientCpu,
        RejectReason::InsufficientMemory,
        RejectReason::InsufficientGpu,
        RejectReason::ReservationCapacity,
        RejectReason::NetworkReservation,
        RejectReason::FailureDomainSpread,
        RejectReason::MissingFailureDomain,
        RejectReason::NotRegistered,
        RejectReason::NodeSelector,
        RejectReason::Colocation,
        RejectReason::AntiAffinity,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Short description.
    pub fn describe(self) -> &'static str {
        match self {
            RejectReason::Unschedulable => "node not schedulable",
            RejectReason::IncompatibleRuntime => "OS or runtime type not supported",
            RejectReason::InsufficientCpu => "insufficient cpu",
            RejectReason::InsufficientMemory => "insufficient memory",
            RejectReason::InsufficientGpu => "insufficient gpu",
            RejectReason::ReservationCapacity => "reservations would exceed capacity",
            RejectReason::NetworkReservation => "network reservations would exceed the link",
            RejectReason::FailureDomainSpread => "failure domain already used (spread rule)",
            RejectReason::MissingFailureDomain => "node lacks the spread rule's failure-domain key",
            RejectReason::NotRegistered => "node not yet seen (declared, no agent registered it)",
            RejectReason::NodeSelector => "node labels do not match the workload's nodeSelector",
            RejectReason::Colocation => "node lacks a workload of colocateWith",
            RejectReason::AntiAffinity => "node holds a workload of antiAffinity",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Number of nodes rejected per reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RejectCounts([u32; 13]);

impl RejectCounts {
    /// Counts one rejection.
    pub fn add(&mut self, r: RejectReason, n: u32) {
        self.0[r.index()] = self.0[r.index()].saturating_add(n);
    }

    /// Rejections for `r`.
    pub fn get(&self, r: RejectReason) -> u32 {
        self.0[r.index()]
    }

    /// Total rejections.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|&n| u64::from(n)).sum()
    }

    /// Non-zero counts, in reason order.
    pub fn iter(&self) -> impl Iterator<Item = (RejectReason, u32)> + '_ {
        RejectReason::ALL
            .into_iter()
            .map(|r| (r, self.get(r)))
            .filter(|(_, n)| *n > 0)
    }

    /// Adds every count of `o`.
    pub fn merge(&mut self, o: &RejectCounts) {
        for (r, n) in o.iter() {
            self.add(r, n);
        }
    }
}

impl Serialize for RejectCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (r, n) in self.iter() {
            m.serialize_entry(&r, &n)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for RejectCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = std::collections::BTreeMap::<RejectReason, u32>::deserialize(d)?;
        let mut c = RejectCounts::default();
        for (r, n) in m {
            c.add(r, n);
        }
        Ok(c)
    }
}

/// A feasible node that was scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    /// The node.
    pub node: NodeIdx,
    /// Strategy score, lower is better.
    pub score: i64,
}

/// How one replica was placed (or not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRecord {
    /// Workload name.
    pub workload: String,
    /// Replica number.
    pub replica: u32,
    /// Node chosen, if any.
    pub selected: Option<NodeIdx>,
    /// Best feasible candidates scored (at most the configured top-k).
    pub considered: Vec<Candidate>,
    /// Nodes rejected, by reason.
    pub rejected: RejectCounts,
    /// Nodes examined.
    pub examined: u32,
    /// Pool nodes not examined because the capacity index ruled them out
    /// (too little free cpu) or a full set of candidates was found first.
    pub not_examined: u32,
    /// Set when preemption made room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted: Option<u32>,
}
