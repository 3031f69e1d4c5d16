//! `[mesh]`: the control plane's mesh (gossip, RPC, raft). With no settings
//! darosd forms its own one-member cluster on loopback, on ports chosen once
//! and kept in the data directory.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, HumanDuration};

/// Role this agent asks for when it creates or joins a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MeshRole {
    /// Votes in raft; may become the coordinator.
    #[default]
    Server,
    /// Runs workloads only.
    Client,
}

/// `[mesh]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeshSection {
    /// QUIC RPC listen address (default: 127.0.0.1 on a port kept in the data dir).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_listen: Option<SocketAddr>,
    /// RPC address announced to peers (default: `rpc_listen`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_advertise: Option<SocketAddr>,
    /// Gossip UDP listen address (default: 127.0.0.1 on a kept port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gossip_listen: Option<SocketAddr>,
    /// Gossip address announced to peers (default: `gossip_listen`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gossip_advertise: Option<SocketAddr>,
    /// Gossip addresses of a few members to contact first.
    pub seeds: Vec<SocketAddr>,
    /// Role: must match the join token's role when joining.
    pub role: MeshRole,
    /// With no credentials and no join token, create a cluster here (CA, gossip
    /// key, tokens) and form a one-member raft.
    pub bootstrap: bool,
    /// Cluster id used when bootstrapping (default `daros-<node>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// Join token (`darosctl cluster init` prints them) for a first start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_token: Option<String>,
    /// RPC address of a server agent to join through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_server: Option<SocketAddr>,
    /// SWIM probe period (membership changes are gossiped every fifth of it).
    pub gossip_interval: HumanDuration,
    /// Raft heartbeat.
    pub raft_heartbeat: HumanDuration,
    /// Raft election timeout, lower bound.
    pub raft_election_min: HumanDuration,
    /// Raft election timeout, upper bound.
    pub raft_election_max: HumanDuration,
    /// How often the leader checks that every node holds its work (by digest;
    /// the whole work to a node that does not). Changes are sent at once.
    pub dispatch_interval: HumanDuration,
    /// The leader marks a node Down after this long without a gossip heartbeat
    /// from it (counted from its own election at the earliest); its instances
    /// are then unreachable, and lost after their `disconnect.lostAfter`.
    pub node_down_after: HumanDuration,
    /// Labels of this node (pools select on them).
    pub labels: BTreeMap<String, String>,
    /// Failure domains of this node (`zone = "z1"`).
    pub failure_domains: BTreeMap<String, String>,
    /// This node is reported under pressure (its applications Degraded) at
    /// this percent of the last 10 s with every task stalled on memory
    /// (PSI `memory full avg10`); 0 turns it off.
    pub pressure_memory_full: f64,
    /// The same for IO (`io full avg10`); 0 (the default) turns it off.
    pub pressure_io_full: f64,
    /// The same for CPU (`cpu some avg10`); 0 (the default) turns it off.
    pub pressure_cpu_some: f64,
}

impl Default for MeshSection {
    fn default() -> Self {
        let t = daros_gossip::raft::RaftTiming::default();
        MeshSection {
            rpc_listen: None,
            rpc_advertise: None,
            gossip_listen: None,
            gossip_advertise: None,
            seeds: Vec::new(),
            role: MeshRole::Server,
            bootstrap: true,
            cluster_id: None,
            join_token: None,
            join_server: None,
            // memberlist's LAN profile: Serf's idle bytes, a dead member called in ~8-12 s.
            gossip_interval: HumanDuration(Duration::from_secs(1)),
            raft_heartbeat: HumanDuration(Duration::from_millis(t.heartbeat_ms)),
            raft_election_min: HumanDuration(Duration::from_millis(t.election_min_ms)),
            raft_election_max: HumanDuration(Duration::from_millis(t.election_max_ms)),
            dispatch_interval: HumanDuration(Duration::from_secs(5)),
            node_down_after: HumanDuration(Duration::from_secs(10)),
            labels: BTreeMap::new(),
            failure_domains: BTreeMap::new(),
            pressure_memory_full: 10.0,
            pressure_io_full: 0.0,
            pressure_cpu_some: 0.0,
        }
    }
}

/// Checks `[mesh]`.
pub fn validate(c: &Config) -> Result<(), ConfigError> {
    let m = &c.mesh;
    if m.join_token.is_some() != m.join_server.is_some() {
        return Err(ConfigError::invalid(
            "mesh.join_server",
            "mesh.join_token and mesh.join_server go together (darosd --join TOKEN --server ADDR)",
        ));
    }
    if let Some(t) = &m.join_token {
        let token = t
            .parse::<daros_gossip::pki::JoinToken>()
            .map_err(|e| ConfigError::invalid("mesh.join_token", e.to_string()))?;
        let (want, other) = match m.role {
            MeshRole::Server => (daros_gossip::Role::Server, "client"),
            MeshRole::Client => (daros_gossip::Role::Client, "server"),
        };
        if token.role != want {
            return Err(ConfigError::invalid(
                "mesh.role",
                format!(
                    "the join token admits a {} agent but mesh.role is {:?}; set mesh.role = \"{other}\" \
                     (DAROS_MESH_ROLE={other}) or join with the {} token",
                    token.role,
                    format!("{:?}", m.role).to_lowercase(),
                    format!("{:?}", m.role).to_lowercase()
                ),
            ));
        }
    }
    if m.raft_heartbeat.0.is_zero() {
        return Err(ConfigError::invalid("mesh.raft_heartbeat", "must be > 0"));
    }
    if m.raft_election_min.0 <= m.raft_heartbeat.0 {
        return Err(ConfigError::invalid(
            "mesh.raft_election_min",
            "must be greater than mesh.raft_heartbeat",
        ));
    }
    if m.raft_election_max.0 <= m.raft_election_min.0 {
        return Err(ConfigError::invalid(
            "mesh.raft_election_max",
            "must be greater than mesh.raft_election_min",
        ));
    }
    if m.gossip_interval.0 < Duration::from_millis(10) {
        return Err(ConfigError::invalid(
            "mesh.gossip_interval",
            "must be at least 10ms",
        ));
    }
    if m.node_down_after.0 < Duration::from_secs(1) {
        return Err(ConfigError::invalid(
            "mesh.node_down_after",
            "must be at least 1s (a node is Down only after missing several gossip heartbeats)",
        ));
    }
    if m.dispatch_interval.0 < Duration::from_millis(100) {
        return Err(ConfigError::invalid(
            "mesh.dispatch_interval",
            "must be at least 100ms",
        ));
    }
    for (field, v) in [
        ("mesh.pressure_memory_full", m.pressure_memory_full),
        ("mesh.pressure_io_full", m.pressure_io_full),
        ("mesh.pressure_cpu_some", m.pressure_cpu_some),
    ] {
        if !(0.0..=100.0).contains(&v) {
            return Err(ConfigError::invalid(
                field,
                format!("{v} is not a percentage from 0 (off) to 100"),
            ));
        }
    }
    for (field, a) in [
        ("mesh.rpc_listen", m.rpc_listen),
        ("mesh.gossip_listen", m.gossip_listen),
    ] {
        if let Some(a) = a
            && a.port() == 0
        {
            return Err(ConfigError::invalid(
                field,
                "needs a fixed port (peers dial it); leave it unset for a kept loopback port",
            ));
        }
    }
    Ok(())
}
