//! First start of the mesh: credentials (own cluster, or join with a token),
//! addresses (loopback ports chosen once and kept), and the mesh settings.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use daros_gossip::NodeId;
use daros_gossip::config::MeshConfig;
use daros_gossip::join::{self, pki_dir};
use daros_gossip::pki::{JoinToken, NodeCredentials};
use daros_gossip::raft::RaftTiming;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::ControlError;
use crate::config::MeshSection;

/// The mesh directory under the agent's data dir.
pub fn mesh_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("mesh")
}

/// A mesh node id from a node name: lowercase, `.`/`_` → `-`, at most 63 characters.
pub fn node_id_of(name: &str) -> Result<NodeId, ControlError> {
    let mut s: String = name
        .chars()
        .map(|c| match c {
            'A'..='Z' => c.to_ascii_lowercase(),
            'a'..='z' | '0'..='9' | '-' => c,
            _ => '-',
        })
        .collect();
    s.truncate(63);
    let s = s.trim_matches('-').to_string();
    NodeId::new(s.clone()).map_err(|e| {
        ControlError::Startup(format!(
            "agent.node_name {name:?} gives no usable mesh node id ({s:?}): {e}"
        ))
    })
}

/// Marker of the node that created its cluster.
const CREATED_HERE: &str = "created-cluster";

#[derive(Serialize, Deserialize)]
struct KeptPorts {
    rpc: u16,
    gossip: u16,
}

/// Two distinct free loopback ports: both sockets are held while the second is chosen.
fn free_udp_ports() -> Result<(u16, u16), ControlError> {
    let err = |e: std::io::Error| ControlError::Startup(format!("choosing a loopback port: {e}"));
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(err)?;
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(err)?;
    Ok((
        a.local_addr().map_err(err)?.port(),
        b.local_addr().map_err(err)?.port(),
    ))
}

/// Loopback ports for a node without configured addresses: chosen once, kept in
/// `<mesh dir>/ports.json` so that the raft membership stays valid across restarts.
fn kept_ports(dir: &Path) -> Result<KeptPorts, ControlError> {
    let path = dir.join("ports.json");
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(p) = serde_json::from_str::<KeptPorts>(&text)
    {
        return Ok(p);
    }
    let (rpc, gossip) = free_udp_ports()?;
    let p = KeptPorts { rpc, gossip };
    let text = serde_json::to_string(&p).map_err(|e| ControlError::Startup(e.to_string()))?;
    std::fs::write(&path, text)
        .map_err(|e| ControlError::Startup(format!("{}: {e}", path.display())))?;
    Ok(p)
}

/// Makes sure `<data_dir>/mesh` holds credentials (creating a cluster or joining
/// one) and returns the mesh settings.
pub async fn prepare(
    data_dir: &Path,
    node: &NodeId,
    m: &MeshSection,
) -> Result<MeshConfig, ControlError> {
    let dir = mesh_dir(data_dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| ControlError::Startup(format!("{}: {e}", dir.display())))?;
    let mut bootstrap = false;
    if !NodeCredentials::exist(&pki_dir(&dir)) {
        match (&m.join_token, m.join_server) {
            (Some(token), Some(server)) => {
                let token: JoinToken = token
                    .parse()
                    .map_err(|e| ControlError::Startup(format!("mesh.join_token: {e}")))?;
                // The config check refused a token whose role is not mesh.role.
                let creds = join::join_cluster(&dir, node, server, &token, Duration::from_secs(15))
                    .await
                    .map_err(|e| ControlError::Startup(format!("joining via {server}: {e}")))?;
                info!(node = %node, cluster = %creds.cluster_id, role = ?creds.role, "joined the cluster");
            }
            _ if m.bootstrap => {
                let cluster = m
                    .cluster_id
                    .clone()
                    .unwrap_or_else(|| format!("daros-{node}"));
                join::init_cluster(&dir, &cluster, node)
                    .map_err(|e| ControlError::Startup(format!("creating the cluster: {e}")))?;
                std::fs::write(dir.join(CREATED_HERE), &cluster)
                    .map_err(|e| ControlError::Startup(format!("{}: {e}", dir.display())))?;
                info!(node = %node, cluster = %cluster, "created a new cluster");
                bootstrap = true;
            }
            _ => {
                return Err(ControlError::Startup(
                    "no mesh credentials: start with --join TOKEN --server ADDR, or set mesh.bootstrap = true"
                        .into(),
                ));
            }
        }
    } else if dir.join(CREATED_HERE).exists() {
        // Only the node that created the cluster forms the one-member raft (a
        // no-op once initialized; completes a first start that died early).
        bootstrap = true;
    }
    let (rpc_listen, gossip_listen) = match (m.rpc_listen, m.gossip_listen) {
        (Some(r), Some(g)) => (r, g),
        (r, g) => {
            let kept = kept_ports(&dir)?;
            (
                r.unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, kept.rpc))),
                g.unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, kept.gossip))),
            )
        }
    };
    let mut cfg = MeshConfig::new(&dir, rpc_listen, gossip_listen);
    cfg.rpc_advertise = m.rpc_advertise;
    cfg.gossip_advertise = m.gossip_advertise;
    cfg.seeds = m.seeds.clone();
    cfg.bootstrap = bootstrap;
    cfg.gossip_interval = m.gossip_interval.0;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    cfg.raft = RaftTiming {
        heartbeat_ms: ms(m.raft_heartbeat.0),
        election_min_ms: ms(m.raft_election_min.0),
        election_max_ms: ms(m.raft_election_max.0),
    };
    cfg.validate()
        .map_err(|e| ControlError::Startup(format!("mesh: {e}")))?;
    Ok(cfg)
}
