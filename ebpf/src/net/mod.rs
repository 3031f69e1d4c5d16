//! Per-workload network accounting and caps: cgroup_skb programs on egress and ingress.
//!
//! A *workload* is a cgroup registered with [`NetDatapath::set_workload`]; packets are keyed by
//! the cgroup of their socket (`bpf_skb_cgroup_id`), so the programs run for every cgroup below
//! an attach point but only registered cgroups (and their registered members) are counted and
//! capped. Traffic of other cgroups is summed in [`NetStats`].

mod datapath;
mod index;
mod reader;
mod testrun;

use serde::{Deserialize, Serialize};

pub use datapath::{NetDatapath, NetOptions};
pub use reader::NetReader;
pub use testrun::{TestRunOutcome, Verdict, ipv4_tcp_packet, run_program};

use crate::{
    abi::{self, BucketCfg, DirCountersRaw},
    bucket::Cap,
    cgroup::CgroupId,
};

/// Traffic direction, as seen from the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Sent by the workload.
    Egress,
    /// Received by the workload.
    Ingress,
}

impl Direction {
    /// Both directions.
    pub const ALL: [Self; 2] = [Self::Egress, Self::Ingress];

    pub(crate) fn index(self) -> usize {
        match self {
            Self::Egress => abi::EGRESS,
            Self::Ingress => abi::INGRESS,
        }
    }

    pub(crate) fn from_index(i: u32) -> Option<Self> {
        match i {
            0 => Some(Self::Egress),
            1 => Some(Self::Ingress),
            _ => None,
        }
    }

    /// `egress` / `ingress`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Egress => "egress",
            Self::Ingress => "ingress",
        }
    }
}

/// Caps requested for one workload by the operator (static caps; the floor controller may set
/// tighter ones on top, see [`NetDatapath::set_floor_cap`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetLimits {
    /// Cap on bytes sent.
    #[serde(default)]
    pub egress: Option<Cap>,
    /// Cap on bytes received.
    #[serde(default)]
    pub ingress: Option<Cap>,
    /// Ingress: mark ECN CE on ECN-capable packets while in debt. Off by default: with BBR
    /// (the default congestion control here) CE marks stalled senders and halved the
    /// throughput under an ingress cap, while plain pass-then-drop held it (docs/ebpf.md).
    #[serde(default)]
    pub ingress_ecn: bool,
}

impl NetLimits {
    /// Accounting only, no caps.
    pub fn accounting() -> Self {
        Self::default()
    }

    /// The cap of one direction.
    pub fn cap(&self, dir: Direction) -> Option<Cap> {
        match dir {
            Direction::Egress => self.egress,
            Direction::Ingress => self.ingress,
        }
    }
}

/// Counters of one direction of one workload (summed over CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirCounters {
    /// Bytes of passed packets, L3 (`skb->len`: IP header + transport header + payload).
    pub bytes: u64,
    /// Passed packets; a GSO/TSO skb counts once, as the stack hands it to cgroup_skb.
    pub packets: u64,
    /// Bytes dropped by the cap.
    pub drop_bytes: u64,
    /// Packets dropped by the cap.
    pub drop_packets: u64,
    /// Packets passed with congestion notification (egress) or ECN CE (ingress).
    pub marked_packets: u64,
}

impl DirCounters {
    pub(crate) fn add(&mut self, raw: &DirCountersRaw) {
        self.bytes += raw.bytes;
        self.packets += raw.packets;
        self.drop_bytes += raw.drop_bytes;
        self.drop_packets += raw.drop_packets;
        self.marked_packets += raw.marked_packets;
    }

    /// Difference to an earlier reading (saturating: a reset reads as zero, not as a wrap).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            bytes: self.bytes.saturating_sub(earlier.bytes),
            packets: self.packets.saturating_sub(earlier.packets),
            drop_bytes: self.drop_bytes.saturating_sub(earlier.drop_bytes),
            drop_packets: self.drop_packets.saturating_sub(earlier.drop_packets),
            marked_packets: self.marked_packets.saturating_sub(earlier.marked_packets),
        }
    }
}

/// Counters of both directions of one workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetCounters {
    /// Sent.
    pub egress: DirCounters,
    /// Received.
    pub ingress: DirCounters,
}

impl NetCounters {
    /// One direction.
    pub fn dir(&self, dir: Direction) -> &DirCounters {
        match dir {
            Direction::Egress => &self.egress,
            Direction::Ingress => &self.ingress,
        }
    }
}

/// The cap state of one direction, as read back from the maps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapStatus {
    /// Cap enforced now (bytes/s), the tighter of `configured` and `floor_cap`.
    pub effective_bps: Option<u64>,
    /// Operator cap.
    pub configured_bps: Option<u64>,
    /// Cap set by the floor controller.
    pub floor_cap_bps: Option<u64>,
    /// Bucket depth in bytes when capped.
    pub burst_bytes: Option<u64>,
    /// Monotonic ns since which the direction is throttled, if it is.
    pub throttled_since_ns: Option<u64>,
}

impl CapStatus {
    pub(crate) fn from_cfg(cfg: &BucketCfg, throttled_since_ns: u64) -> Self {
        let opt = |v: u64| (v != 0).then_some(v);
        let capped = cfg.ns_per_byte != 0;
        Self {
            effective_bps: capped.then_some(cfg.rate_bps),
            configured_bps: opt(cfg.configured_bps),
            floor_cap_bps: opt(cfg.floor_cap_bps),
            burst_bytes: capped.then_some(cfg.burst_bytes),
            throttled_since_ns: opt(throttled_since_ns),
        }
    }
}

/// Everything the datapath knows about one workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadNet {
    /// The workload's cgroup.
    pub cgroup: CgroupId,
    /// Further cgroups counted as this workload (e.g. its sub-cgroups).
    pub members: Vec<CgroupId>,
    /// Traffic counters.
    pub counters: NetCounters,
    /// Egress cap state.
    pub egress: CapStatus,
    /// Ingress cap state.
    pub ingress: CapStatus,
}

/// Node-wide datapath counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetStats {
    /// Packets of sockets in cgroups that are not registered (below an attach point).
    pub unknown_packets: u64,
    /// Their bytes.
    pub unknown_bytes: u64,
    /// Events the ring buffer could not take (reader too slow or not running).
    pub events_lost: u64,
}
