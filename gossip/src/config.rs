//! Mesh settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::raft::RaftTiming;
use crate::rpc::frame::DEFAULT_MAX_FRAME;

/// Settings of one mesh node. Identity (node id, role, cluster) comes from the credentials in
/// `<data_dir>/pki`, written by [`crate::join::init_cluster`] or [`crate::join::join_cluster`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MeshConfig {
    /// Node data directory (credentials, `mesh.redb`).
    pub data_dir: PathBuf,
    /// QUIC RPC listen address.
    pub rpc_listen: SocketAddr,
    /// RPC address announced to peers (default: `rpc_listen`).
    pub rpc_advertise: Option<SocketAddr>,
    /// Gossip UDP listen address.
    pub gossip_listen: SocketAddr,
    /// Gossip address announced to peers (default: `gossip_listen`).
    pub gossip_advertise: Option<SocketAddr>,
    /// Gossip seeds (gossip addresses of a few existing members).
    pub seeds: Vec<SocketAddr>,
    /// SWIM probe period (notices are gossiped every fifth of it).
    pub gossip_interval: Duration,
    /// Suspicion multiplier: a suspected member is down after this many probe periods ×
    /// max(1, log10 members), at least 2 s (memberlist: 4).
    pub suspicion_mult: f64,
    /// Raft timing (server agents).
    pub raft: RaftTiming,
    /// Server agents: form a one-member raft cluster if this node has never been initialized.
    pub bootstrap: bool,
    /// Hard limit on one RPC frame.
    pub max_frame: usize,
    /// Default timeout of mesh calls.
    pub call_timeout: Duration,
    /// How long a write may wait to be committed (a leader cut off from its quorum never
    /// commits; the caller gets `unavailable` instead of waiting forever).
    pub write_timeout: Duration,
}

/// A setting that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("mesh config field {field}: {reason}")]
pub struct ConfigError {
    /// Field name.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl MeshConfig {
    /// Defaults around the given data directory and addresses.
    pub fn new(
        data_dir: impl Into<PathBuf>,
        rpc_listen: SocketAddr,
        gossip_listen: SocketAddr,
    ) -> Self {
        Self {
            data_dir: data_dir.into(),
            rpc_listen,
            rpc_advertise: None,
            gossip_listen,
            gossip_advertise: None,
            seeds: Vec::new(),
            // memberlist's LAN profile (Serf, Consul): one probe a second; at 700 ms the idle
            // traffic was 1.2× Serf's for a dead member called in 7.7 s instead of 12 s.
            gossip_interval: Duration::from_secs(1),
            suspicion_mult: 4.0,
            raft: RaftTiming::default(),
            bootstrap: false,
            max_frame: DEFAULT_MAX_FRAME,
            call_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
        }
    }

    /// RPC address peers use.
    pub fn rpc_addr(&self) -> SocketAddr {
        self.rpc_advertise.unwrap_or(self.rpc_listen)
    }

    /// Gossip address peers use.
    pub fn gossip_addr(&self) -> SocketAddr {
        self.gossip_advertise.unwrap_or(self.gossip_listen)
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, reason: &str| {
            Err(ConfigError {
                field,
                reason: reason.to_string(),
            })
        };
        if self.rpc_addr().ip().is_unspecified() {
            return err(
                "rpc_advertise",
                "peers cannot dial an unspecified address; set rpc_advertise",
            );
        }
        if self.gossip_addr().ip().is_unspecified() {
            return err(
                "gossip_advertise",
                "peers cannot gossip to an unspecified address; set gossip_advertise",
            );
        }
        if self.gossip_interval < Duration::from_millis(10) {
            return err("gossip_interval", "must be at least 10 ms");
        }
        if !(self.suspicion_mult.is_finite() && self.suspicion_mult >= 1.0) {
            return err("suspicion_mult", "must be a number of at least 1");
        }
        if self.raft.heartbeat_ms == 0 || self.raft.election_min_ms <= self.raft.heartbeat_ms {
            return err(
                "raft.election_min_ms",
                "must be greater than raft.heartbeat_ms (> 0)",
            );
        }
        if self.raft.election_max_ms <= self.raft.election_min_ms {
            return err(
                "raft.election_max_ms",
                "must be greater than raft.election_min_ms",
            );
        }
        if self.max_frame < 64 * 1024 {
            return err("max_frame", "must be at least 64 KiB");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field() {
        let mut c = MeshConfig::new(
            "/tmp/x",
            "0.0.0.0:7100".parse().unwrap(),
            "10.0.0.1:7000".parse().unwrap(),
        );
        assert_eq!(c.validate().unwrap_err().field, "rpc_advertise");
        c.rpc_advertise = Some("10.0.0.1:7100".parse().unwrap());
        c.validate().unwrap();
        c.raft.election_max_ms = c.raft.election_min_ms;
        assert_eq!(c.validate().unwrap_err().field, "raft.election_max_ms");
    }
}
