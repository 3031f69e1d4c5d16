//! The embedding entry point: [`Mesh::start`] wires credentials, gossip, RPC and raft together
//! and returns a [`MeshHandle`] for the agent.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redb::Database;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::RwLock;
use tokio::task::JoinHandle;

use crate::config::{ConfigError, MeshConfig};
use crate::fence::{FenceGuard, FenceToken};
use crate::identity::{NodeId, Role};
use crate::join::{JOIN, JoinRequest, JoinResponse, pki_dir};
use crate::membership::{
    CoordinatorHint, Keyring, LocalInfo, Member, MemberStatus, Membership, MembershipConfig,
    MembershipError, SealStats,
};
use crate::pki::{ClusterCa, JoinToken, NodeCredentials, PkiError};
use crate::raft::{
    Committed, Consensus, ConsensusError, ConsensusStatus, RaftNode, ReplicatedState, ServerRole,
};
use crate::rpc::{
    Access, CallContext, ErrorCode, Registry, Request, RpcClient, RpcError, StreamHandler,
    Subscription, Target, UnaryHandler,
};
use crate::tls::{self, TlsError};

/// The caller's certificate identity (member methods always have one).
fn peer_of(ctx: &CallContext) -> Result<&crate::identity::PeerIdentity, RpcError> {
    ctx.peer
        .as_ref()
        .ok_or_else(|| RpcError::new(ErrorCode::Unauthenticated, "no certificate"))
}

const PROPOSE: &str = "mesh.propose";
const READ_INDEX: &str = "mesh.read_index";
const QUERY: &str = "mesh.query";
const STATUS: &str = "mesh.status";
const ADD_SERVER: &str = "mesh.add_server";
const REMOVE_SERVER: &str = "mesh.remove_server";
/// The mesh database file under the data directory.
const MESH_DB: &str = "mesh.redb";

/// Errors of the mesh.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Credentials missing or invalid.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// TLS setup failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Gossip could not start.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// Local storage failed.
    #[error("mesh storage {path}: {reason}")]
    Storage {
        /// File.
        path: String,
        /// Cause.
        reason: String,
    },
    /// Socket setup failed.
    #[error("mesh socket {addr}: {source}")]
    Io {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Consensus refused or failed.
    #[error(transparent)]
    Consensus(#[from] ConsensusError),
    /// A remote call failed.
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// No member with that id (or no address known for it).
    #[error("no reachable member {0}")]
    UnknownNode(NodeId),
    /// No server agent is known.
    #[error("no server agent known; is the node joined and gossiping?")]
    NoServer,
}

/// What a failed write did, as far as this node can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Refused before anything was proposed: nothing changed, safe to retry.
    NotApplied,
    /// Proposed (or possibly delivered to the leader) and no answer came: it may
    /// be applied.
    Unknown,
    /// This node (or its role) may not do this.
    Forbidden,
}

impl MeshError {
    /// What a write that failed with this error did.
    pub fn write_outcome(&self) -> WriteOutcome {
        let from_consensus = |c: &ConsensusError| match c {
            ConsensusError::OutcomeUnknown(_) | ConsensusError::Unavailable(_) => {
                WriteOutcome::Unknown
            }
            ConsensusError::NotServer => WriteOutcome::Forbidden,
            _ => WriteOutcome::NotApplied,
        };
        match self {
            MeshError::Consensus(c) => from_consensus(c),
            MeshError::Rpc(r) => {
                if let Some(c) = self.consensus() {
                    return from_consensus(&c);
                }
                match r.code {
                    ErrorCode::Forbidden | ErrorCode::Unauthenticated => WriteOutcome::Forbidden,
                    ErrorCode::Timeout
                    | ErrorCode::Transport
                    | ErrorCode::Unavailable
                    | ErrorCode::Internal
                    | ErrorCode::Application => WriteOutcome::Unknown,
                    _ => WriteOutcome::NotApplied,
                }
            }
            // Local setup failures and unknown targets: nothing was sent.
            _ => WriteOutcome::NotApplied,
        }
    }

    /// The consensus error inside, if this is one (also when it came back over RPC).
    pub fn consensus(&self) -> Option<ConsensusError> {
        match self {
            MeshError::Consensus(c) => Some(c.clone()),
            MeshError::Rpc(r) => r
                .detail
                .clone()
                .and_then(|d| serde_json::from_value(d).ok()),
            _ => None,
        }
    }
}

fn consensus_rpc_error(e: ConsensusError) -> RpcError {
    let code = match e {
        ConsensusError::NotLeader { .. } => ErrorCode::NotLeader,
        ConsensusError::Unavailable(_) | ConsensusError::OutcomeUnknown(_) => {
            ErrorCode::Unavailable
        }
        ConsensusError::TooLarge { .. } => ErrorCode::TooLarge,
        ConsensusError::NotServer => ErrorCode::Forbidden,
        ConsensusError::Invalid(_) => ErrorCode::BadRequest,
        ConsensusError::Rejected(_) | ConsensusError::Membership(_) => ErrorCode::Application,
    };
    let detail = serde_json::to_value(&e).unwrap_or(Value::Null);
    RpcError::new(code, e.to_string()).with_detail(detail)
}

/// Health of one server as seen from this node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerHealth {
    /// Node id.
    pub node_id: NodeId,
    /// RPC address.
    pub rpc_addr: String,
    /// Votes in raft.
    pub voter: bool,
    /// Replicated index (leader view).
    pub matched_index: Option<u64>,
    /// Gossip liveness.
    pub gossip: Option<MemberStatus>,
    /// Milliseconds since its last gossip heartbeat.
    pub last_heard_ms: Option<u64>,
    /// Alive in gossip and, on the leader, replicating.
    pub healthy: bool,
}

/// `cluster status`: leader, term, commit index and health of the servers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// Node that produced this view.
    pub reported_by: NodeId,
    /// Its raft role (None on client agents).
    pub raft_role: Option<ServerRole>,
    /// Leader (the coordinator).
    pub leader: Option<NodeId>,
    /// Term.
    pub term: u64,
    /// Commit index.
    pub commit_index: Option<u64>,
    /// Last applied index.
    pub last_applied: Option<u64>,
    /// A leader that stepped down for want of a quorum: milliseconds since a
    /// quorum last acknowledged it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_lost_ms: Option<u64>,
    /// Servers.
    pub servers: Vec<PeerHealth>,
}

struct Inner<S: ReplicatedState> {
    creds: NodeCredentials,
    config: MeshConfig,
    rpc: Arc<RpcClient>,
    registry: Arc<Registry>,
    endpoint: quinn::Endpoint,
    membership: RwLock<Option<Membership>>,
    seal_stats: Arc<SealStats>,
    raft: Option<RaftNode<S>>,
    fence: Arc<FenceGuard>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

/// A running mesh node. Cheap to clone.
pub struct MeshHandle<S: ReplicatedState> {
    inner: Arc<Inner<S>>,
}

impl<S: ReplicatedState> Clone for MeshHandle<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

/// Entry point.
pub struct Mesh;

fn next_generation(data_dir: &std::path::Path) -> Result<u64, MeshError> {
    let path = data_dir.join("generation");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let last = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let gen_ = now.max(last + 1);
    std::fs::write(&path, gen_.to_string()).map_err(|e| MeshError::Storage {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok(gen_)
}

impl Mesh {
    /// Starts this node's mesh: RPC endpoint, raft (server agents), gossip.
    pub async fn start<S: ReplicatedState>(
        config: MeshConfig,
        state: S,
    ) -> Result<MeshHandle<S>, MeshError> {
        config.validate()?;
        let creds = NodeCredentials::load(&pki_dir(&config.data_dir))?;
        let ca = match creds.role {
            Role::Server => Some(Arc::new(ClusterCa::load(&pki_dir(&config.data_dir))?)),
            Role::Client => None,
        };
        let db_path = config.data_dir.join(MESH_DB);
        let db = Arc::new(Database::create(&db_path).map_err(|e| MeshError::Storage {
            path: db_path.display().to_string(),
            reason: e.to_string(),
        })?);
        let fence = Arc::new(
            FenceGuard::open(db.clone()).map_err(|e| MeshError::Storage {
                path: db_path.display().to_string(),
                reason: e.to_string(),
            })?,
        );

        let endpoint = quinn::Endpoint::server(tls::server_config(&creds)?, config.rpc_listen)
            .map_err(|source| MeshError::Io {
                addr: config.rpc_listen,
                source,
            })?;
        let rpc = Arc::new(RpcClient::new(
            endpoint.clone(),
            tls::client_config(&creds)?,
            config.max_frame,
        ));
        let registry = Arc::new(Registry::new(Some(fence.clone())).with_stats(rpc.stats()));
        rpc.serve_dialed(&registry, creds.cluster_id.clone());

        let raft = match creds.role {
            Role::Server => {
                let node = RaftNode::start(
                    creds.node_id.clone(),
                    db.clone(),
                    state,
                    rpc.clone(),
                    config.raft,
                )
                .await?;
                node.register(&registry);
                Some(node)
            }
            Role::Client => None,
        };

        let generation = next_generation(&config.data_dir)?;
        let mut mcfg = MembershipConfig::new(
            creds.cluster_id.clone(),
            creds.node_id.clone(),
            creds.role,
            config.rpc_addr(),
            config.gossip_listen,
            config.gossip_addr(),
        );
        mcfg.generation = generation;
        mcfg.seeds = config.seeds.clone();
        mcfg.interval = config.gossip_interval;
        mcfg.suspicion_mult = config.suspicion_mult;
        let primary = creds
            .gossip_keys
            .first()
            .ok_or_else(|| PkiError::Identity("no gossip key".into()))?;
        let keyring = Keyring::new(primary, &creds.gossip_keys[1..]);
        let membership = Membership::start(mcfg, keyring).await?;
        let seal_stats = membership.stats();

        let inner = Arc::new(Inner {
            creds,
            config,
            rpc,
            registry,
            endpoint: endpoint.clone(),
            membership: RwLock::new(Some(membership)),
            seal_stats,
            raft,
            fence,
            tasks: std::sync::Mutex::default(),
        });
        register_builtin(&inner, ca);
        let handle = MeshHandle { inner };

        if let (true, Some(r)) = (handle.inner.config.bootstrap, &handle.inner.raft) {
            r.bootstrap(handle.inner.config.rpc_addr()).await?;
        }

        let serve = tokio::spawn(crate::rpc::serve(
            endpoint,
            handle.inner.registry.clone(),
            handle.inner.creds.cluster_id.clone(),
            handle.inner.config.max_frame,
            Some(handle.inner.rpc.clone()),
        ));
        // Servers alone publish a coordinator hint (see `publish_coordinator`).
        let hints = handle
            .inner
            .raft
            .is_some()
            .then(|| tokio::spawn(publish_coordinator(Arc::downgrade(&handle.inner))));
        if let Ok(mut t) = handle.inner.tasks.lock() {
            t.push(serve);
            t.extend(hints);
        }
        tracing::info!(
            node = %handle.inner.creds.node_id,
            role = %handle.inner.creds.role,
            rpc = %handle.inner.config.rpc_addr(),
            gossip = %handle.inner.config.gossip_addr(),
            "mesh started"
        );
        Ok(handle)
    }
}

/// Keeps a server's coordinator hint in gossip current. Only servers publish one:
/// clients read the servers' alone, and a client repeating it made every leader
/// change a description change of every member — 1,000 notices to carry to
/// everyone at the moment of a failover, at 1,000 agents.
async fn publish_coordinator<S: ReplicatedState>(inner: Weak<Inner<S>>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Some(r) = &inner.raft else {
            return; // a client: it has no hint of its own
        };
        let s = r.status();
        let hint = s.leader.map(|leader| CoordinatorHint {
            leader,
            term: s.term,
        });
        if let Some(m) = inner.membership.read().await.as_ref() {
            m.set_coordinator(hint.as_ref()).await;
        }
    }
}

fn best_hint(members: &[Member]) -> Option<CoordinatorHint> {
    members
        .iter()
        .filter(|m| m.role == Some(Role::Server) && m.status.reachable())
        .filter_map(|m| m.coordinator.clone())
        .max_by_key(|h| h.term)
}

fn to_value<T: Serialize>(v: &T) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(|e| RpcError::internal(e.to_string()))
}

fn register_builtin<S: ReplicatedState>(inner: &Arc<Inner<S>>, ca: Option<Arc<ClusterCa>>) {
    let reg = &inner.registry;
    let weak = Arc::downgrade(inner);
    let get = move || {
        weak.upgrade()
            .map(|i| MeshHandle { inner: i })
            .ok_or_else(|| RpcError::new(ErrorCode::Unavailable, "mesh is shutting down"))
    };

    if let Some(ca) = ca {
        let g = get.clone();
        reg.unary(JOIN, Access::Anonymous, move |ctx: crate::rpc::CallContext, body| {
            let ca = ca.clone();
            let g = g.clone();
            async move {
                let h = g()?;
                let req: JoinRequest = serde_json::from_value(body)
                    .map_err(|e| RpcError::bad_request(format!("join request: {e}")))?;
                let token: JoinToken = req
                    .token
                    .parse()
                    .map_err(|e: crate::pki::TokenError| RpcError::bad_request(e.to_string()))?;
                if let Err(e) = ca.verify_token(&token) {
                    tracing::warn!(remote = %ctx.remote, node = %req.node_id, error = %e, "join refused");
                    return Err(RpcError::new(ErrorCode::Forbidden, format!("join refused: {e}")));
                }
                let taken = h.members().await.into_iter().any(|m| {
                    m.node_id == req.node_id
                        && matches!(m.status, MemberStatus::Alive | MemberStatus::Joining)
                });
                if taken {
                    return Err(RpcError::new(
                        ErrorCode::Forbidden,
                        format!("node id {} is in use by a live member", req.node_id),
                    ));
                }
                let cert_pem = ca
                    .sign_csr(&req.csr_pem, &req.node_id, token.role)
                    .map_err(|e| RpcError::bad_request(e.to_string()))?;
                tracing::info!(remote = %ctx.remote, node = %req.node_id, role = %token.role, "node certificate issued");
                to_value(&JoinResponse {
                    cluster_id: ca.cluster_id().to_string(),
                    ca_cert_pem: ca.ca_cert_pem().to_string(),
                    cert_pem,
                    gossip_keys: h.inner.creds.gossip_keys.clone(),
                    ca_bundle: (token.role == Role::Server).then(|| ca.bundle()),
                })
            }
        });
    }

    let g = get.clone();
    reg.unary(
        PROPOSE,
        Access::Member,
        move |ctx: CallContext, body: Value| {
            let g = g.clone();
            async move {
                let h = g()?;
                let raft = h
                    .inner
                    .raft
                    .as_ref()
                    .ok_or_else(|| consensus_rpc_error(ConsensusError::NotServer))?;
                let cmd: S::Command = serde_json::from_value(body)
                    .map_err(|e| RpcError::bad_request(format!("command: {e}")))?;
                let peer = peer_of(&ctx)?;
                let cmd = S::admit_command(cmd, peer)
                    .map_err(|e| RpcError::new(ErrorCode::Forbidden, e))?;
                let c = h
                    .propose_local(raft, cmd)
                    .await
                    .map_err(consensus_rpc_error)?;
                to_value(&c)
            }
        },
    );

    let g = get.clone();
    reg.unary(READ_INDEX, Access::Server, move |_ctx, _body| {
        let g = g.clone();
        async move {
            let h = g()?;
            let raft = h
                .inner
                .raft
                .as_ref()
                .ok_or_else(|| consensus_rpc_error(ConsensusError::NotServer))?;
            let i = raft.read_index().await.map_err(consensus_rpc_error)?;
            Ok(Value::from(i))
        }
    });

    let g = get.clone();
    reg.unary(
        QUERY,
        Access::Member,
        move |ctx: CallContext, body: Value| {
            let g = g.clone();
            async move {
                let h = g()?;
                let q: S::Query = serde_json::from_value(body)
                    .map_err(|e| RpcError::bad_request(format!("query: {e}")))?;
                let peer = peer_of(&ctx)?;
                let q =
                    S::admit_query(q, peer).map_err(|e| RpcError::new(ErrorCode::Forbidden, e))?;
                if h.inner.raft.is_none() {
                    return Err(consensus_rpc_error(ConsensusError::NotServer));
                }
                let r = h.read(q).await.map_err(|e| match e {
                    MeshError::Consensus(c) => consensus_rpc_error(c),
                    MeshError::Rpc(r) => r,
                    other => RpcError::new(ErrorCode::Unavailable, other.to_string()),
                })?;
                to_value(&r)
            }
        },
    );

    let g = get.clone();
    reg.unary(STATUS, Access::Member, move |_ctx, _body| {
        let g = g.clone();
        async move {
            let h = g()?;
            if h.inner.raft.is_none() {
                return Err(consensus_rpc_error(ConsensusError::NotServer));
            }
            to_value(&h.local_status().await)
        }
    });

    #[derive(Serialize, Deserialize)]
    struct ServerChange {
        node_id: NodeId,
        rpc_addr: Option<SocketAddr>,
    }
    let g = get.clone();
    reg.unary(ADD_SERVER, Access::Server, move |_ctx, body: Value| {
        let g = g.clone();
        async move {
            let h = g()?;
            let c: ServerChange = serde_json::from_value(body)
                .map_err(|e| RpcError::bad_request(format!("add server: {e}")))?;
            h.add_server_local(&c.node_id, c.rpc_addr)
                .await
                .map_err(|e| match e {
                    MeshError::Consensus(c) => consensus_rpc_error(c),
                    other => RpcError::bad_request(other.to_string()),
                })?;
            Ok(Value::Null)
        }
    });
    let g = get;
    reg.unary(REMOVE_SERVER, Access::Server, move |_ctx, body: Value| {
        let g = g.clone();
        async move {
            let h = g()?;
            let c: ServerChange = serde_json::from_value(body)
                .map_err(|e| RpcError::bad_request(format!("remove server: {e}")))?;
            let raft = h
                .inner
                .raft
                .as_ref()
                .ok_or_else(|| consensus_rpc_error(ConsensusError::NotServer))?;
            raft.remove_server(&c.node_id)
                .await
                .map_err(consensus_rpc_error)?;
            Ok(Value::Null)
        }
    });
}

fn leader_target(e: &ConsensusError) -> Option<Target> {
    match e {
        ConsensusError::NotLeader {
            leader: Some(l),
            leader_addr: Some(a),
        } => a.parse().ok().map(|addr| Target::new(addr, l.as_str())),
        _ => None,
    }
}

impl<S: ReplicatedState> MeshHandle<S> {
    /// This node's id.
    pub fn node_id(&self) -> &NodeId {
        &self.inner.creds.node_id
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.inner.creds.role
    }

    /// Cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.inner.creds.cluster_id
    }

    /// Bytes the mesh's database (raft log, vote, snapshots, credentials
    /// state) takes on disk.
    pub fn storage_bytes(&self) -> Option<u64> {
        std::fs::metadata(self.inner.config.data_dir.join(MESH_DB))
            .ok()
            .map(|m| m.len())
    }

    /// RPC counters: calls served and made, errors by code, failed handshakes.
    pub fn rpc_stats(&self) -> Arc<crate::rpc::RpcStats> {
        self.inner.rpc.stats()
    }

    /// Gossip transport counters (bytes, refused datagrams).
    pub fn seal_stats(&self) -> Arc<SealStats> {
        self.inner.seal_stats.clone()
    }

    /// Highest coordinator fence accepted by this agent.
    pub fn fence_highest(&self) -> FenceToken {
        self.inner.fence.highest()
    }

    /// All members known through gossip.
    pub async fn members(&self) -> Vec<Member> {
        match self.inner.membership.read().await.as_ref() {
            Some(m) => m.members().await,
            None => Vec::new(),
        }
    }

    /// Publishes this node's capacity, usage, QoS summary, runtimes and version.
    pub async fn set_local_info(&self, info: &LocalInfo) {
        if let Some(m) = self.inner.membership.read().await.as_ref() {
            m.set_info(info).await;
        }
    }

    /// Registers a request/response method for the agent.
    pub fn handle(&self, method: &str, access: Access, h: impl UnaryHandler) {
        self.inner.registry.unary(method, access, h);
    }

    /// Registers a fenced coordinator command (server callers only; stale terms refused).
    pub fn handle_command(&self, method: &str, h: impl UnaryHandler) {
        self.inner.registry.command(method, h);
    }

    /// Registers a server-push method.
    pub fn handle_stream(&self, method: &str, access: Access, h: impl StreamHandler) {
        self.inner.registry.stream(method, access, h);
    }

    async fn target_of(&self, node: &NodeId) -> Result<Target, MeshError> {
        let from_raft = self.inner.raft.as_ref().and_then(|r| {
            r.status()
                .servers
                .into_iter()
                .find(|s| &s.node_id == node)
                .and_then(|s| s.rpc_addr.parse().ok())
        });
        if let Some(addr) = from_raft {
            return Ok(Target::new(addr, node.as_str()));
        }
        // One member decoded, not all: the leader's dispatch round asks this for
        // every node (all members per call made the round O(nodes²) JSON
        // decodes, hundreds of ms of a worker at 500 nodes).
        let member = match self.inner.membership.read().await.as_ref() {
            Some(m) => m.member(node).await,
            None => None,
        };
        member
            .and_then(|m| m.rpc_addr)
            .map(|addr| Target::new(addr, node.as_str()))
            .ok_or_else(|| MeshError::UnknownNode(node.clone()))
    }

    /// Calls `method` on `node`.
    pub async fn call(&self, node: &NodeId, method: &str, body: Value) -> Result<Value, MeshError> {
        let t = self.target_of(node).await?;
        Ok(self
            .inner
            .rpc
            .call(
                &t,
                &Request::new(method, body),
                self.inner.config.call_timeout,
            )
            .await?)
    }

    /// Coordinator only: sends a fenced command (carrying this leader's term and commit index).
    pub async fn command(
        &self,
        node: &NodeId,
        method: &str,
        body: Value,
    ) -> Result<Value, MeshError> {
        let raft = self.inner.raft.as_ref().ok_or(ConsensusError::NotServer)?;
        let fence = raft.fence_token()?;
        let t = self.target_of(node).await?;
        let req = Request {
            method: method.to_string(),
            fence: Some(fence),
            body,
        };
        Ok(self
            .inner
            .rpc
            .call(&t, &req, self.inner.config.call_timeout)
            .await?)
    }

    /// Opens a server-push subscription on `node`.
    pub async fn subscribe(
        &self,
        node: &NodeId,
        method: &str,
        body: Value,
    ) -> Result<Subscription, MeshError> {
        let t = self.target_of(node).await?;
        Ok(self
            .inner
            .rpc
            .subscribe(&t, &Request::new(method, body))
            .await?)
    }

    /// Where to send something for the leader when this node cannot tell (client agents).
    async fn server_targets(&self) -> Vec<Target> {
        let members = match self.inner.membership.read().await.as_ref() {
            Some(m) => m.servers().await,
            None => Vec::new(),
        };
        let mut out = Vec::new();
        let leader = best_hint(&members).and_then(|h| {
            members
                .iter()
                .find(|m| m.node_id == h.leader)
                .and_then(|m| m.rpc_addr)
                .map(|addr| Target::new(addr, h.leader.as_str()))
        });
        out.extend(leader);
        for m in members {
            let Some(addr) = m.rpc_addr else { continue };
            if m.role == Some(Role::Server) && m.status.reachable() {
                let t = Target::new(addr, m.node_id.as_str());
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// The leader this node believes in, with its term.
    async fn leader_now(&self) -> Option<(NodeId, u64)> {
        match &self.inner.raft {
            Some(r) => {
                let s = r.status();
                s.leader.map(|l| (l, s.term))
            }
            None => {
                let g = self.inner.membership.read().await;
                match g.as_ref() {
                    Some(m) => best_hint(&m.servers().await).map(|h| (h.leader, h.term)),
                    None => None,
                }
            }
        }
    }

    /// Resolves once a leader other than `target` is known in a newer term than `before`.
    async fn leader_changes(
        &self,
        target: &Target,
        before: Option<(NodeId, u64)>,
    ) -> (NodeId, u64) {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some((l, term)) = self.leader_now().await {
                let newer = before.as_ref().is_none_or(|(_, t0)| term > *t0);
                if l.as_str() != target.node && newer {
                    return (l, term);
                }
            }
        }
    }

    async fn propose_local(
        &self,
        raft: &RaftNode<S>,
        cmd: S::Command,
    ) -> Result<Committed<S::Response>, ConsensusError> {
        let t = self.inner.config.write_timeout;
        match tokio::time::timeout(t, raft.propose(cmd)).await {
            Ok(r) => r,
            Err(_) => Err(ConsensusError::OutcomeUnknown(format!(
                "write not committed within {t:?} (no quorum reachable?)"
            ))),
        }
    }

    async fn forward<T: serde::de::DeserializeOwned>(
        &self,
        first: Option<Target>,
        method: &str,
        body: Value,
    ) -> Result<T, MeshError> {
        let timeout = if method == PROPOSE {
            // The serving leader gives up after its write timeout; wait a bit longer than that.
            self.inner.config.write_timeout + Duration::from_secs(1)
        } else {
            self.inner.config.call_timeout
        };
        let mut targets: Vec<Target> = first.into_iter().collect();
        if targets.is_empty() {
            targets = self.server_targets().await;
        }
        if targets.is_empty() {
            return Err(MeshError::NoServer);
        }
        let mut last = None;
        let mut tried = Vec::new();
        while let Some(t) = targets.first().cloned() {
            targets.remove(0);
            if tried.contains(&t) || tried.len() >= 4 {
                continue;
            }
            tried.push(t.clone());
            let req = Request::new(method, body.clone());
            let before = self.leader_now().await;
            let outcome = tokio::select! {
                r = self.inner.rpc.call(&t, &req, timeout) => r,
                (l, term) = self.leader_changes(&t, before) => {
                    // A dead leader never answers; stop waiting as soon as a successor exists.
                    let e = RpcError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "{l} became leader in term {term} while {} handled {method}; outcome unknown",
                            t.node
                        ),
                    );
                    last = Some(e);
                    if method == PROPOSE {
                        break;
                    }
                    // Reads and status are safe to ask again, of the new leader.
                    if let Ok(nt) = self.target_of(&l).await {
                        targets.insert(0, nt);
                    }
                    continue;
                }
            };
            match outcome {
                Ok(v) => {
                    return serde_json::from_value(v)
                        .map_err(|e| MeshError::Rpc(RpcError::bad_request(e.to_string())));
                }
                Err(e) => {
                    let redirect = e
                        .detail
                        .clone()
                        .and_then(|d| serde_json::from_value::<ConsensusError>(d).ok())
                        .and_then(|c| leader_target(&c));
                    // Only a refusal before anything happened may be retried elsewhere.
                    let retry = matches!(e.code, ErrorCode::NotLeader | ErrorCode::Unreachable);
                    last = Some(e);
                    if !retry {
                        break;
                    }
                    if let Some(r) = redirect {
                        targets.insert(0, r);
                    }
                }
            }
        }
        Err(MeshError::Rpc(last.unwrap_or_else(|| {
            RpcError::new(ErrorCode::Unreachable, "no server could be asked")
        })))
    }

    /// Writes a command through raft (forwarded to the leader when needed) and returns its
    /// response once committed and applied.
    pub async fn write(&self, cmd: S::Command) -> Result<Committed<S::Response>, MeshError> {
        let body = serde_json::to_value(&cmd)
            .map_err(|e| MeshError::Consensus(ConsensusError::Invalid(e.to_string())))?;
        if let Some(r) = &self.inner.raft {
            match self.propose_local(r, cmd).await {
                Ok(c) => return Ok(c),
                Err(e @ ConsensusError::NotLeader { .. }) => match leader_target(&e) {
                    Some(t) => return self.forward(Some(t), PROPOSE, body).await,
                    None => return Err(e.into()),
                },
                Err(e) => return Err(e.into()),
            }
        }
        self.forward(None, PROPOSE, body).await
    }

    /// A linearizable read: on servers through the leader's read index, on client agents
    /// forwarded to a server.
    pub async fn read(&self, q: S::Query) -> Result<S::QueryResponse, MeshError> {
        match &self.inner.raft {
            Some(_) => self.read_with(move |s| s.query(&q)).await,
            None => {
                let body = serde_json::to_value(&q)
                    .map_err(|e| MeshError::Consensus(ConsensusError::Invalid(e.to_string())))?;
                self.forward(None, QUERY, body).await
            }
        }
    }

    /// Server agents: a linearizable read of the local state with a closure.
    pub async fn read_with<T: Send, F: FnOnce(&S) -> T + Send>(
        &self,
        f: F,
    ) -> Result<T, MeshError> {
        let raft = self.inner.raft.as_ref().ok_or(ConsensusError::NotServer)?;
        let index = match raft.read_index().await {
            Ok(i) => i,
            Err(e @ ConsensusError::NotLeader { .. }) => {
                let t = leader_target(&e).ok_or(e)?;
                let v = self
                    .inner
                    .rpc
                    .call(
                        &t,
                        &Request::new(READ_INDEX, Value::Null),
                        self.inner.config.call_timeout,
                    )
                    .await?;
                v.as_u64()
                    .ok_or_else(|| RpcError::bad_request("read index is not a number"))?
            }
            Err(e) => return Err(e.into()),
        };
        Ok(raft
            .read_at(index, self.inner.config.call_timeout, f)
            .await?)
    }

    async fn add_server_local(
        &self,
        node: &NodeId,
        addr: Option<SocketAddr>,
    ) -> Result<(), MeshError> {
        let raft = self.inner.raft.as_ref().ok_or(ConsensusError::NotServer)?;
        let members = self.members().await;
        let m = members.iter().find(|m| &m.node_id == node);
        if m.is_some_and(|m| m.role != Some(Role::Server)) {
            return Err(ConsensusError::Invalid(format!(
                "{node} is not a server agent (its certificate role is client)"
            ))
            .into());
        }
        let addr = match addr.or_else(|| m.and_then(|m| m.rpc_addr)) {
            Some(a) => a,
            None => return Err(MeshError::UnknownNode(node.clone())),
        };
        Ok(raft.add_server(node, addr).await?)
    }

    /// Adds a server agent to the raft voters (forwarded to the leader). The address comes from
    /// gossip unless given.
    pub async fn add_server(
        &self,
        node: &NodeId,
        rpc_addr: Option<SocketAddr>,
    ) -> Result<(), MeshError> {
        let body = serde_json::json!({ "node_id": node, "rpc_addr": rpc_addr });
        match self.add_server_local(node, rpc_addr).await {
            Err(MeshError::Consensus(e @ ConsensusError::NotLeader { .. })) => {
                let t = leader_target(&e).ok_or(e)?;
                self.forward::<Value>(Some(t), ADD_SERVER, body)
                    .await
                    .map(|_| ())
            }
            Err(MeshError::Consensus(ConsensusError::NotServer)) => self
                .forward::<Value>(None, ADD_SERVER, body)
                .await
                .map(|_| ()),
            other => other,
        }
    }

    /// Removes a server agent from raft (forwarded to the leader).
    pub async fn remove_server(&self, node: &NodeId) -> Result<(), MeshError> {
        let body = serde_json::json!({ "node_id": node, "rpc_addr": null });
        let local = match &self.inner.raft {
            Some(r) => r.remove_server(node).await,
            None => Err(ConsensusError::NotServer),
        };
        match local {
            Ok(()) => Ok(()),
            Err(e @ ConsensusError::NotLeader { .. }) => {
                let t = leader_target(&e).ok_or(e)?;
                self.forward::<Value>(Some(t), REMOVE_SERVER, body)
                    .await
                    .map(|_| ())
            }
            Err(ConsensusError::NotServer) => self
                .forward::<Value>(None, REMOVE_SERVER, body)
                .await
                .map(|_| ()),
            Err(e) => Err(e.into()),
        }
    }

    /// Raft status of this server (None on client agents).
    pub fn consensus_status(&self) -> Option<ConsensusStatus> {
        self.inner.raft.as_ref().map(|r| r.status())
    }

    async fn local_status(&self) -> ClusterStatus {
        let members: BTreeMap<NodeId, Member> = self
            .members()
            .await
            .into_iter()
            .map(|m| (m.node_id.clone(), m))
            .collect();
        let s = self.consensus_status();
        let (raft_role, leader, term, commit_index, last_applied, servers) = match &s {
            Some(s) => (
                Some(s.role),
                s.leader.clone(),
                s.term,
                s.commit_index,
                s.last_applied,
                s.servers.clone(),
            ),
            None => (None, None, 0, None, None, Vec::new()),
        };
        let is_leader = raft_role == Some(ServerRole::Leader);
        let servers = servers
            .into_iter()
            .map(|srv| {
                let m = members.get(&srv.node_id);
                let gossip = m.map(|m| m.status);
                let replicating = !is_leader
                    || match (srv.matched_index, commit_index) {
                        (Some(mi), Some(ci)) => ci.saturating_sub(mi) < 1000,
                        _ => false,
                    };
                PeerHealth {
                    healthy: gossip == Some(MemberStatus::Alive) && replicating,
                    node_id: srv.node_id,
                    rpc_addr: srv.rpc_addr,
                    voter: srv.voter,
                    matched_index: srv.matched_index,
                    gossip,
                    last_heard_ms: m.and_then(|m| m.last_heard_ms),
                }
            })
            .collect();
        ClusterStatus {
            reported_by: self.node_id().clone(),
            raft_role,
            leader,
            term,
            commit_index,
            last_applied,
            quorum_lost_ms: s.as_ref().and_then(|s| s.quorum_lost_ms),
            servers,
        }
    }

    /// `cluster status`: on servers their own view; client agents ask a server (the leader if
    /// known).
    pub async fn cluster_status(&self) -> Result<ClusterStatus, MeshError> {
        if self.inner.raft.is_some() {
            return Ok(self.local_status().await);
        }
        self.forward(None, STATUS, Value::Null).await
    }

    /// Announces departure in gossip, then stops everything.
    pub async fn leave(&self) {
        if let Some(m) = self.inner.membership.write().await.take() {
            m.leave().await;
        }
        self.shutdown().await;
    }

    /// Stops raft, RPC and gossip.
    pub async fn shutdown(&self) {
        if let Some(r) = &self.inner.raft {
            r.shutdown().await;
        }
        if let Some(m) = self.inner.membership.write().await.take() {
            m.shutdown().await;
        }
        self.inner.endpoint.close(0u32.into(), b"shutdown");
        if let Ok(mut t) = self.inner.tasks.lock() {
            for task in t.drain(..) {
                task.abort();
            }
        }
    }
}
