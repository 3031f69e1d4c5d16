//! Metrics of the mesh's transports on every agent (issue 16): gossip bytes
//! and datagrams, datagrams refused (did not authenticate, unknown key
//! epoch, stale, malformed, undecodable), RPC calls and errors by code on
//! each side, failed handshakes, connections dialed and calls over a peer's
//! connection, and the raft log's size (entries held past
//! the last purge, bytes of the mesh database on disk).

use std::fmt;
use std::sync::atomic::Ordering;

use daros_gossip::raft::ConsensusStatus;
use daros_gossip::rpc::Side;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType::{Counter, Gauge};

use super::plane::ControlMesh;
use crate::metrics::{Labels, family};

/// What the transports counted, read once a refresh.
#[derive(Debug, Default, Clone)]
pub struct TransportSeen {
    gossip_bytes: [u64; 2],
    gossip_datagrams: [u64; 2],
    refused: Vec<(&'static str, u64)>,
    rpc_calls: Vec<(Side, u64)>,
    rpc_errors: Vec<(Side, String, u64)>,
    handshakes_failed: u64,
    dialed: u64,
    on_peer_connections: u64,
    log_entries: Option<u64>,
    storage_bytes: Option<u64>,
}

impl TransportSeen {
    /// Reads the counters of `mesh` (and the log size from `status`).
    pub fn read(mesh: &ControlMesh, status: Option<&ConsensusStatus>) -> Self {
        let g = mesh.seal_stats();
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let r = mesh.rpc_stats();
        let mut rpc_errors = Vec::new();
        for side in [Side::Served, Side::Made] {
            for (code, n) in r.errors(side) {
                // Codes never seen are left out (one series per code seen).
                if n > 0 {
                    rpc_errors.push((side, code.to_string(), n));
                }
            }
        }
        Self {
            gossip_bytes: [load(&g.bytes_sent), load(&g.bytes_received)],
            gossip_datagrams: [load(&g.datagrams_sent), load(&g.datagrams_received)],
            refused: vec![
                ("auth", load(&g.rejected_auth)),
                ("epoch", load(&g.rejected_epoch)),
                ("stale", load(&g.rejected_stale)),
                ("malformed", load(&g.rejected_malformed)),
                ("decode", load(&g.rejected_decode)),
            ],
            rpc_calls: vec![
                (Side::Served, r.calls(Side::Served)),
                (Side::Made, r.calls(Side::Made)),
            ],
            rpc_errors,
            handshakes_failed: r.handshakes_failed(),
            dialed: r.dialed(),
            on_peer_connections: r.on_peer_connections(),
            log_entries: status.and_then(|s| {
                s.last_log_index
                    .map(|l| l.saturating_sub(s.purged_index.unwrap_or(0)))
            }),
            storage_bytes: mesh.storage_bytes(),
        }
    }

    /// Encodes the families.
    pub fn encode(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let directions = |v: &[u64; 2]| -> Vec<(Labels, f64)> {
            vec![
                (vec![("direction", "sent".to_string())], v[0] as f64),
                (vec![("direction", "received".to_string())], v[1] as f64),
            ]
        };
        family(
            enc,
            "daros_gossip_bytes",
            "Gossip bytes on the wire (sealed), by direction.",
            Counter,
            directions(&self.gossip_bytes),
        )?;
        family(
            enc,
            "daros_gossip_datagrams",
            "Gossip datagrams, by direction (received counts every datagram, before it is opened).",
            Counter,
            directions(&self.gossip_datagrams),
        )?;
        family(
            enc,
            "daros_gossip_datagrams_refused",
            "Gossip datagrams refused, by reason: auth (did not authenticate: wrong key, tampered, an outsider), epoch (unknown key epoch), stale (timestamp outside the allowed skew), malformed, decode (opened but not a gossip message).",
            Counter,
            self.refused
                .iter()
                .map(|(r, n)| (vec![("reason", (*r).to_string())], *n as f64))
                .collect(),
        )?;
        family(
            enc,
            "daros_rpc_calls",
            "Mesh RPC calls, by side (served: this node answered; made: this node called).",
            Counter,
            self.rpc_calls
                .iter()
                .map(|(s, n)| (vec![("side", s.as_str().to_string())], *n as f64))
                .collect(),
        )?;
        family(
            enc,
            "daros_rpc_errors",
            "Mesh RPC calls that ended in an error, by side and error code (forbidden, not_leader, timeout, unreachable ...).",
            Counter,
            self.rpc_errors
                .iter()
                .map(|(s, c, n)| {
                    (
                        vec![("side", s.as_str().to_string()), ("code", c.clone())],
                        *n as f64,
                    )
                })
                .collect(),
        )?;
        family(
            enc,
            "daros_rpc_handshakes_failed",
            "Incoming QUIC connections whose mutual-TLS handshake failed (no certificate of this cluster).",
            Counter,
            vec![(Vec::new(), self.handshakes_failed as f64)],
        )?;
        family(
            enc,
            "daros_rpc_connections_dialed",
            "QUIC connections this node dialed (handshake done); a peer that dialed this node is called over its connection instead.",
            Counter,
            vec![(Vec::new(), self.dialed as f64)],
        )?;
        family(
            enc,
            "daros_rpc_calls_on_peer_connections",
            "Mesh RPC calls this node made over a connection the peer had dialed to it.",
            Counter,
            vec![(Vec::new(), self.on_peer_connections as f64)],
        )?;
        if let Some(n) = self.log_entries {
            family(
                enc,
                "daros_raft_log_entries",
                "Raft log entries held (after the last purge; snapshots bound it).",
                Gauge,
                vec![(Vec::new(), n as f64)],
            )?;
        }
        if let Some(b) = self.storage_bytes {
            family(
                enc,
                "daros_mesh_storage_bytes",
                "Bytes the mesh database (raft log, vote, snapshot, state) takes on disk.",
                Gauge,
                vec![(Vec::new(), b as f64)],
            )?;
        }
        Ok(())
    }
}
