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
                return Err(half_the_entries(entries, &e));
            }
            Err(e) if e.is_transport() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        let r: Result<Resp, RaftError<u64, E>> =
            serde_json::from_value(v).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

/// "Send again with half of these `n` entries" (openraft retries at once).
fn half_the_entries<E: std::error::Error>(n: usize, why: &RpcError) -> RpcErr<E> {
    RPCError::PayloadTooLarge(
        PayloadTooLarge::new_entries_hint((n / 2) as u64).with_source_error(why),
    )
}

impl RaftNetwork<TypeConfig> for PeerNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, RaftPeer, RaftError<u64>>> {
        let n = rpc.entries.len();
        if n <= 1 {
            return self.send(APPEND, &rpc, option.hard_ttl(), n).await;
        }
        // openraft gives every append one heartbeat interval and then sends
        // the same entries again: a batch that cannot cross in that time
        // (a busy follower, 64 large applies) would never be acknowledged
        // and no write would commit. One that is not answered by the soft
        // deadline goes again at half the entries (openraft keeps the hint
        // for its next ten appends), as etcd bounds each message's size.
        match tokio::time::timeout(
            option.soft_ttl(),
            self.send(APPEND, &rpc, option.hard_ttl(), n),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(half_the_entries(
                n,
                &RpcError::new(
                    ErrorCode::Timeout,
                    format!(
                        "{} did not take {n} entries within {:?}",
                        self.peer.node_id,
                        option.soft_ttl()
                    ),
                ),
            )),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::ClusterCa;
    use crate::rpc::{Access, CallContext, Registry};
    use crate::{NodeId, Role, tls};
    use openraft::entry::RaftEntry;
    use openraft::{CommittedLeaderId, Entry, LogId, Vote};
    use serde_json::{Value, json};

    /// A follower that takes 150 ms for an append of more than `fast`
    /// entries, and answers at once otherwise; real QUIC and TLS.
    async fn follower(fast: usize) -> (PeerNetwork, tokio::task::JoinHandle<()>) {
        let ca = ClusterCa::init("c1").unwrap();
        let s1 = ca
            .issue_local(&NodeId::new("s1").unwrap(), Role::Server)
            .unwrap();
        let s2 = ca
            .issue_local(&NodeId::new("s2").unwrap(), Role::Server)
            .unwrap();
        let ep = quinn::Endpoint::server(
            tls::server_config(&s2).unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap();
        let addr = ep.local_addr().unwrap();
        let reg = Arc::new(Registry::new(None));
        reg.unary(
            APPEND,
            Access::Server,
            move |_: CallContext, b: Value| async move {
                let n = b["entries"].as_array().map_or(0, Vec::len);
                if n > fast {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                let ok: Result<AppendEntriesResponse<u64>, RaftError<u64>> =
                    Ok(AppendEntriesResponse::Success);
                Ok(json!(ok))
            },
        );
        let served = tokio::spawn(crate::rpc::serve(ep, reg, "c1".into(), 1 << 20, None));
        let client_ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        let rpc = Arc::new(RpcClient::new(
            client_ep,
            tls::client_config(&s1).unwrap(),
            1 << 20,
        ));
        let peer = RaftPeer {
            node_id: "s2".into(),
            rpc_addr: addr.to_string(),
        };
        let net = NetworkFactory::new(rpc).new_client(2, &peer).await;
        (net, served)
    }

    fn append(n: u64) -> AppendEntriesRequest<TypeConfig> {
        let leader = CommittedLeaderId::new(1, 1);
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries: (1..=n)
                .map(|i| Entry::<TypeConfig>::new_blank(LogId::new(leader, i)))
                .collect(),
        }
    }

    /// A batch the follower does not take within the soft deadline comes
    /// back as "too large, send half", so openraft shrinks it instead of
    /// sending the same batch into the same timeout forever; a batch that
    /// crosses in time, and a single entry, are sent as they are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_slower_than_the_heartbeat_is_split() {
        let (mut net, served) = follower(8).await;
        let heartbeat = RPCOption::new(Duration::from_millis(100));
        // The connection first, so that its handshake is not what is timed.
        net.append_entries(append(1), RPCOption::new(Duration::from_secs(5)))
            .await
            .unwrap();

        match net.append_entries(append(64), heartbeat.clone()).await {
            Err(RPCError::PayloadTooLarge(p)) => assert_eq!(p.entries_hint(), 32),
            other => panic!("a slow batch of 64 was not split: {other:?}"),
        }
        let r = net.append_entries(append(8), heartbeat.clone()).await;
        assert!(
            matches!(r, Ok(AppendEntriesResponse::Success)),
            "a batch that crosses in time: {r:?}"
        );
        // A single entry is never split: openraft's own timeout judges it.
        let (mut slow, served_slow) = follower(0).await;
        slow.append_entries(append(1), RPCOption::new(Duration::from_secs(5)))
            .await
            .unwrap();
        let r = slow.append_entries(append(1), heartbeat).await;
        assert!(
            matches!(r, Ok(AppendEntriesResponse::Success)),
            "one entry, 150 ms: not split (openraft's 100 ms timeout would drop it): {r:?}"
        );
        served.abort();
        served_slow.abort();
    }
}
