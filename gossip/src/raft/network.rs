//! Raft messages over the mesh RPC (QUIC, mutual TLS; only server agents may call `raft.*`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::types::{RaftPeer, TypeConfig};
use crate::rpc::{ErrorCode, Request, RpcClient, RpcError, Target};

/// Method names of the raft service.
pub(crate) const APPEND: &str = "raft.append";
pub(crate) const VOTE: &str = "raft.vote";
pub(crate) const SNAPSHOT: &str = "raft.snapshot";

/// Creates per-peer clients.
pub struct NetworkFactory {
    rpc: Arc<RpcClient>,
}

impl NetworkFactory {
    /// A factory over the node's RPC client.
    pub fn new(rpc: Arc<RpcClient>) -> Self {
        Self { rpc }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: u64, node: &RaftPeer) -> PeerNetwork {
        PeerNetwork {
            rpc: self.rpc.clone(),
            target,
            peer: node.clone(),
            addr: node.rpc_addr.parse().ok(),
        }
    }
}

/// The raft connection to one peer.
pub struct PeerNetwork {
    rpc: Arc<RpcClient>,
    target: u64,
    peer: RaftPeer,
    addr: Option<SocketAddr>,
}

type RpcErr<E> = RPCError<u64, RaftPeer, RaftError<u64, E>>;

impl PeerNetwork {
    async fn send<Req, Resp, E>(
        &self,
        method: &str,
        req: &Req,
        ttl: Duration,
        entries: usize,
    ) -> Result<Resp, RpcErr<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let addr = self.addr.ok_or_else(|| {
            RPCError::Unreachable(Unreachable::new(&RpcError::bad_request(format!(
                "raft peer {} has an invalid address {:?}",
                self.peer.node_id, self.peer.rpc_addr
            ))))
        })?;
        let body =
            serde_json::to_value(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let t = Target::new(addr, self.peer.node_id.clone());
        // openraft enforces `ttl` itself and reports a Timeout (retried at the next heartbeat);
        // our own limit is looser so that only connection failures read as Unreachable (which
        // makes openraft back off).
        let v = match self
            .rpc
            .call(&t, &Request::new(method, body), ttl * 2)
            .await
        {
            Ok(v) => v,
            Err(e) if e.code == ErrorCode::TooLarge && entries > 1 => {
                return Err(RPCError::PayloadTooLarge(
                    PayloadTooLarge::new_entries_hint((entries / 2) as u64).with_source_error(&e),
                ));
            }
            Err(e) if e.is_transport() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        let r: Result<Resp, RaftError<u64, E>> =
            serde_json::from_value(v).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, RaftPeer, RaftError<u64>>> {
        let n = rpc.entries.len();
        self.send(APPEND, &rpc, option.hard_ttl(), n).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, RaftPeer, RaftError<u64, InstallSnapshotError>>,
    > {
        self.send(SNAPSHOT, &rpc, option.hard_ttl(), 0).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, RaftPeer, RaftError<u64>>> {
        self.send(VOTE, &rpc, option.hard_ttl(), 0).await
    }

    fn backoff(&self) -> openraft::network::Backoff {
        // Retry an unreachable peer soon: a restarted server should rejoin quickly.
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(200)))
    }
}
