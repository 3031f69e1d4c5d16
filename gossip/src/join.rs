//! Cluster bootstrap and join.
//!
//! `init_cluster` creates the cluster CA, gossip key and join tokens on the first server agent.
//! `join_cluster` runs on a new node: it generates its key pair locally, sends a CSR and the
//! token over QUIC to a server agent (server-authenticated only: it has no certificate yet, and
//! it pins the CA by the fingerprint in the token), and stores what it receives.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::identity::{NodeId, Role};
use crate::membership::GossipKey;
use crate::pki::{CaBundle, ClusterCa, JoinToken, NodeCredentials, PkiError, fingerprint};
use crate::rpc::{Request, RpcClient, RpcError, Target};
use crate::tls::{self, TlsError};

/// RPC method of the join.
pub(crate) const JOIN: &str = "mesh.join";

/// Subdirectory of the data dir holding credentials.
pub fn pki_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("pki")
}

/// Errors of init and join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// Credentials problem.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// TLS setup problem.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The server refused or could not be reached.
    #[error("join via {server}: {error}")]
    Rpc {
        /// Server address.
        server: SocketAddr,
        /// Cause.
        error: RpcError,
    },
    /// Local socket problem.
    #[error("join: {0}")]
    Io(#[from] std::io::Error),
    /// The data dir already belongs to a cluster.
    #[error("{0} already holds credentials; refusing to overwrite them")]
    AlreadyInitialized(PathBuf),
    /// The server's answer does not fit the token.
    #[error("join answer: {0}")]
    BadAnswer(String),
}

/// Tokens printed by `cluster init`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InitOutput {
    /// Cluster id.
    pub cluster_id: String,
    /// Token admitting client agents.
    pub client_token: String,
    /// Token admitting server agents.
    pub server_token: String,
    /// SHA-256 of the CA certificate (hex).
    pub ca_fingerprint: String,
}

/// Creates a cluster on this (server) node: CA, gossip key, join tokens, and this node's own
/// server certificate, all under `<data_dir>/pki`.
pub fn init_cluster(
    data_dir: &Path,
    cluster_id: &str,
    node: &NodeId,
) -> Result<InitOutput, JoinError> {
    let dir = pki_dir(data_dir);
    if NodeCredentials::exist(&dir) || ClusterCa::exists(&dir) {
        return Err(JoinError::AlreadyInitialized(dir));
    }
    let ca = ClusterCa::init(cluster_id)?;
    ca.save(&dir)?;
    ca.issue_local(node, Role::Server)?.save(&dir)?;
    tokens(data_dir)
}

/// The join tokens of the cluster (server agents only: they hold the secrets).
pub fn tokens(data_dir: &Path) -> Result<InitOutput, JoinError> {
    let ca = ClusterCa::load(&pki_dir(data_dir))?;
    Ok(InitOutput {
        cluster_id: ca.cluster_id().to_string(),
        client_token: ca.join_token(Role::Client)?.to_string(),
        server_token: ca.join_token(Role::Server)?.to_string(),
        ca_fingerprint: crate::pki::hex::encode(&ca.fingerprint()?),
    })
}

#[derive(Serialize, Deserialize)]
pub(crate) struct JoinRequest {
    pub token: String,
    pub node_id: NodeId,
    pub csr_pem: String,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct JoinResponse {
    pub cluster_id: String,
    pub ca_cert_pem: String,
    pub cert_pem: String,
    pub gossip_keys: Vec<GossipKey>,
    /// Only for server agents.
    pub ca_bundle: Option<CaBundle>,
}

/// Joins the cluster through the server agent at `server` and stores the credentials under
/// `<data_dir>/pki`. The role is the token's.
pub async fn join_cluster(
    data_dir: &Path,
    node: &NodeId,
    server: SocketAddr,
    token: &JoinToken,
    timeout: Duration,
) -> Result<NodeCredentials, JoinError> {
    let dir = pki_dir(data_dir);
    if NodeCredentials::exist(&dir) {
        return Err(JoinError::AlreadyInitialized(dir));
    }
    let (key_pem, csr_pem) = NodeCredentials::new_key_and_csr(node)?;
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let endpoint = quinn::Endpoint::client(bind)?;
    // The handshake gets the peers' 1 s; a joiner that hears nothing starts over (as systemd
    // restarts darosd). Waiting out the whole budget was tried and reverted (00682cd): 1,000
    // simulated agents retried 25 times rather than 137, but their gossip then never
    // converged, 3 runs of 3 (docs/benchmarks.md, "Patient joins").
    let client = RpcClient::new(
        endpoint.clone(),
        tls::join_client_config(token.ca_fingerprint)?,
        crate::rpc::frame::DEFAULT_MAX_FRAME,
    );
    let req = JoinRequest {
        token: token.to_string(),
        node_id: node.clone(),
        csr_pem,
    };
    let body = serde_json::to_value(&req).map_err(|e| JoinError::BadAnswer(e.to_string()))?;
    let answer = client
        .call(
            &Target::new(server, tls::JOIN_SERVER_NAME),
            &Request::new(JOIN, body),
            timeout,
        )
        .await
        .map_err(|error| JoinError::Rpc { server, error });
    endpoint.close(0u32.into(), b"joined");
    let resp: JoinResponse =
        serde_json::from_value(answer?).map_err(|e| JoinError::BadAnswer(e.to_string()))?;

    let creds = NodeCredentials {
        cluster_id: resp.cluster_id,
        node_id: node.clone(),
        role: token.role,
        ca_cert_pem: resp.ca_cert_pem,
        cert_pem: resp.cert_pem,
        key_pem,
        gossip_keys: resp.gossip_keys,
    };
    if fingerprint(&creds.ca_der()?) != token.ca_fingerprint {
        return Err(JoinError::BadAnswer(
            "CA certificate does not match the token's fingerprint".into(),
        ));
    }
    creds.validate()?;
    match (token.role, resp.ca_bundle) {
        (Role::Server, Some(bundle)) => {
            ClusterCa::from_bundle(&creds.ca_cert_pem, bundle)?.save(&dir)?;
        }
        (Role::Server, None) => {
            return Err(JoinError::BadAnswer(
                "server agent joined without the CA bundle".into(),
            ));
        }
        (Role::Client, Some(_)) => {
            return Err(JoinError::BadAnswer(
                "a client agent must not receive the CA key".into(),
            ));
        }
        (Role::Client, None) => {}
    }
    creds.save(&dir)?;
    Ok(creds)
}
