//! What every node publishes about itself in gossip, and the member view built from it.
//! Gossip is hints only: authority comes over mutual-TLS RPC and raft.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::identity::{NodeId, Role};

/// Chitchat keys (short: they travel in every delta).
pub(crate) mod keys {
    pub const ROLE: &str = "role";
    pub const RPC: &str = "rpc";
    pub const CAPACITY: &str = "cap";
    pub const ALLOCATABLE: &str = "alloc";
    pub const USAGE: &str = "usage";
    pub const QOS: &str = "qos";
    pub const RUNTIMES: &str = "rt";
    pub const VERSION: &str = "ver";
    pub const COORDINATOR: &str = "coord";
    pub const LEAVING: &str = "leaving";
}

/// Resources of a node (capacity or allocatable).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_millicores: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// GPU devices.
    pub gpus: u32,
    /// Network bandwidth in megabits per second.
    pub net_mbps: u64,
}

/// Compact usage summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageSummary {
    /// CPU in use, millicores.
    pub cpu_millicores: u64,
    /// Memory in use, bytes.
    pub memory_bytes: u64,
    /// CPU pressure (PSI some avg10, percent).
    pub cpu_pressure: f32,
    /// Memory pressure (PSI some avg10, percent).
    pub memory_pressure: f32,
}

/// Compact QoS summary: workloads per class and how many run degraded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QosSummary {
    /// GuaranteedPro workloads.
    pub guaranteed_pro: u32,
    /// Guaranteed workloads.
    pub guaranteed: u32,
    /// Burstable workloads.
    pub burstable: u32,
    /// BestEffort workloads.
    pub best_effort: u32,
    /// Workloads with at least one knob degraded.
    pub degraded: u32,
}

/// Who a node believes the coordinator is (the raft leader) and in which term.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorHint {
    /// Leader node id.
    pub leader: NodeId,
    /// Raft term of that leadership.
    pub term: u64,
}

/// What the agent publishes about its node; the mesh adds role, address and coordinator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LocalInfo {
    /// Total resources.
    pub capacity: Resources,
    /// Resources available to workloads.
    pub allocatable: Resources,
    /// Current usage.
    pub usage: UsageSummary,
    /// QoS summary.
    pub qos: QosSummary,
    /// Runtime adapters available (e.g. `process`, `kubernetes`).
    pub runtimes: Vec<String>,
    /// Agent version.
    pub agent_version: String,
}

/// Liveness of a member as seen by this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberStatus {
    /// Heartbeats arrive (phi-accrual below threshold).
    Alive,
    /// Heartbeats stopped (phi-accrual above threshold).
    Dead,
    /// The node announced it leaves.
    Left,
    /// Just heard of; not enough heartbeats to judge yet.
    Joining,
}

impl MemberStatus {
    /// Worth calling: alive, or heard of and not yet judged.
    pub fn reachable(self) -> bool {
        matches!(self, MemberStatus::Alive | MemberStatus::Joining)
    }
}

/// One member as seen through gossip.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// Node id.
    pub node_id: NodeId,
    /// Generation (start time, ms): distinguishes restarts.
    pub generation: u64,
    /// Gossip address.
    pub gossip_addr: SocketAddr,
    /// Liveness.
    pub status: MemberStatus,
    /// Milliseconds since a new heartbeat of this member was seen (None: never).
    pub last_heard_ms: Option<u64>,
    /// Role (None if not yet known).
    pub role: Option<Role>,
    /// RPC address.
    pub rpc_addr: Option<SocketAddr>,
    /// Capacity.
    pub capacity: Option<Resources>,
    /// Allocatable.
    pub allocatable: Option<Resources>,
    /// Usage summary.
    pub usage: Option<UsageSummary>,
    /// QoS summary.
    pub qos: Option<QosSummary>,
    /// Runtime capabilities.
    pub runtimes: Option<Vec<String>>,
    /// Agent version.
    pub agent_version: Option<String>,
    /// Coordinator as this member sees it.
    pub coordinator: Option<CoordinatorHint>,
    /// Keys whose values did not decode (named, never silently dropped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid_keys: Vec<String>,
}

impl LocalInfo {
    /// The key-value pairs that carry this info.
    pub fn to_kv(&self) -> Vec<(&'static str, String)> {
        vec![
            (keys::CAPACITY, json(&self.capacity)),
            (keys::ALLOCATABLE, json(&self.allocatable)),
            (keys::USAGE, json(&self.usage)),
            (keys::QOS, json(&self.qos)),
            (keys::RUNTIMES, json(&self.runtimes)),
            (keys::VERSION, self.agent_version.clone()),
        ]
    }
}

/// JSON text of a value (these plain structs always serialize).
pub(crate) fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Decodes one JSON-valued key; a bad value is named in `invalid`.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    key: &str,
    raw: Option<&str>,
    invalid: &mut Vec<String>,
) -> Option<T> {
    let raw = raw?;
    match serde_json::from_str(raw) {
        Ok(v) => Some(v),
        Err(_) => {
            invalid.push(key.to_string());
            None
        }
    }
}

/// Decodes a plain-text key with `FromStr`.
pub(crate) fn parse<T: std::str::FromStr>(
    key: &str,
    raw: Option<&str>,
    invalid: &mut Vec<String>,
) -> Option<T> {
    let raw = raw?;
    match raw.parse() {
        Ok(v) => Some(v),
        Err(_) => {
            invalid.push(key.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named() {
        let mut invalid = Vec::new();
        let r: Option<Resources> = decode("cap", Some("{not json"), &mut invalid);
        assert!(r.is_none());
        let role: Option<Role> = parse("role", Some("admin"), &mut invalid);
        assert!(role.is_none());
        assert_eq!(invalid, vec!["cap", "role"]);
        let ok: Option<Resources> = decode(
            "cap",
            Some(r#"{"cpu_millicores":4000,"memory_bytes":1,"gpus":0,"net_mbps":0}"#),
            &mut invalid,
        );
        assert_eq!(ok.unwrap().cpu_millicores, 4000);
    }

    #[test]
    fn local_info_round_trips_through_kv() {
        let info = LocalInfo {
            capacity: Resources {
                cpu_millicores: 8000,
                memory_bytes: 1 << 34,
                gpus: 1,
                net_mbps: 10_000,
            },
            runtimes: vec!["process".into()],
            agent_version: "0.1.0".into(),
            ..Default::default()
        };
        let kv = info.to_kv();
        let cap = kv.iter().find(|(k, _)| *k == keys::CAPACITY).unwrap();
        let mut invalid = Vec::new();
        let back: Resources = decode(cap.0, Some(&cap.1), &mut invalid).unwrap();
        assert_eq!(back, info.capacity);
    }
}
