//! [`Consensus`] implemented with openraft: log, vote and snapshots in redb, messages over the
//! mesh RPC.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::AppendEntriesResponse;
use openraft::{ChangeMembers, Config, ServerState, SnapshotPolicy};
use redb::Database;
use serde_json::Value;

use super::consensus::{
    Committed, Consensus, ConsensusError, ConsensusStatus, ServerRole, ServerStatus,
};
use super::election::{Elections, PREVOTE, PreVoteRequest};
use super::log_store::{LogStore, NONE};
use super::network::{APPEND, NetworkFactory, SNAPSHOT, VOTE};
use super::state::{LogPosition, ReplicatedState};
use super::state_machine::{SharedState, StateMachineStore};
use super::types::{Applied, Proposal, Raft, RaftPeer};
use crate::fence::FenceToken;
use crate::identity::NodeId;
use crate::rpc::{Access, Registry, RpcClient, RpcError};

/// Raft timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftTiming {
    /// Leader heartbeat interval (ms).
    pub heartbeat_ms: u64,
    /// Election timeout lower bound (ms).
    pub election_min_ms: u64,
    /// Election timeout upper bound (ms).
    pub election_max_ms: u64,
}

use serde::{Deserialize, Serialize};

impl Default for RaftTiming {
    fn default() -> Self {
        // A survivor campaigns 300–400 ms after the last heartbeat (election.rs: the
        // pre-vote timer is the election range, the followers' lease its bottom).
        // The heartbeat is also openraft's AppendEntries timeout: 100 ms leaves room for a
        // follower's fsync (about 3 ms here) on a busy node.
        Self {
            heartbeat_ms: 100,
            election_min_ms: 300,
            election_max_ms: 400,
        }
    }
}

/// Largest command accepted by `propose` (keeps AppendEntries under the frame limit).
pub const MAX_COMMAND_BYTES: usize = 256 * 1024;

/// A raft server.
pub struct RaftNode<S: ReplicatedState> {
    raft: Raft,
    state: SharedState<S>,
    committed: Arc<AtomicU64>,
    me: NodeId,
    elections: Arc<Elections>,
}

fn unavailable(e: impl std::fmt::Display) -> ConsensusError {
    ConsensusError::Unavailable(e.to_string())
}

fn node_id_of(peer: &RaftPeer) -> Option<NodeId> {
    NodeId::new(peer.node_id.clone()).ok()
}

fn write_error(e: RaftError<u64, ClientWriteError<u64, RaftPeer>>) -> ConsensusError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => ConsensusError::NotLeader {
            leader: f.leader_node.as_ref().and_then(node_id_of),
            leader_addr: f.leader_node.map(|n| n.rpc_addr),
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(m)) => {
            ConsensusError::Membership(m.to_string())
        }
        RaftError::Fatal(f) => unavailable(f),
    }
}

impl<S: ReplicatedState> RaftNode<S> {
    /// Starts the raft server `me` on `db`, talking to peers through `rpc`.
    pub async fn start(
        me: NodeId,
        db: Arc<Database>,
        state: S,
        rpc: Arc<RpcClient>,
        timing: RaftTiming,
    ) -> Result<Self, ConsensusError> {
        let config = Config {
            cluster_name: "daros".into(),
            heartbeat_interval: timing.heartbeat_ms,
            // openraft's own election timer is off (election.rs drives
            // elections); its `election_timeout_max` is the followers' lease on
            // real votes, a backstop behind the pre-vote's.
            election_timeout_min: timing.vote_lease_ms() - 1,
            election_timeout_max: timing.vote_lease_ms(),
            max_payload_entries: 64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(1000),
            snapshot_max_chunk_size: 512 * 1024,
            max_in_snapshot_log_to_keep: 1000,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ConsensusError::Invalid(format!("raft timing: {e}")))?;
        let log = LogStore::open(db.clone()).map_err(unavailable)?;
        let committed = log.committed_index();
        let log_reader = log.clone();
        let sm = StateMachineStore::open(db, state).map_err(unavailable)?;
        let shared = sm.shared();
        let raft = Raft::new(
            me.raft_id(),
            Arc::new(config),
            NetworkFactory::new(rpc.clone()),
            log,
            sm,
        )
        .await
        .map_err(unavailable)?;
        let elections = Arc::new(Elections::new(raft.clone(), log_reader, rpc, timing));
        tokio::spawn(Arc::clone(&elections).run());
        Ok(Self {
            raft,
            state: shared,
            committed,
            me,
            elections,
        })
    }

    /// Makes this server a one-member cluster if it has never been initialized.
    pub async fn bootstrap(&self, rpc_addr: SocketAddr) -> Result<(), ConsensusError> {
        if self.raft.is_initialized().await.map_err(unavailable)? {
            return Ok(());
        }
        let mut members = BTreeMap::new();
        members.insert(
            self.me.raft_id(),
            RaftPeer {
                node_id: self.me.to_string(),
                rpc_addr: rpc_addr.to_string(),
            },
        );
        self.raft.initialize(members).await.map_err(unavailable)
    }

    /// Registers the `raft.*` methods (server agents only).
    pub fn register(&self, registry: &Registry) {
        // Hearing from a leader (or voting for a candidate) restarts the
        // election timeout of the pre-vote driver.
        let (r, el) = (self.raft.clone(), Arc::clone(&self.elections));
        registry.unary(APPEND, Access::Server, move |_ctx, body: Value| {
            let (r, el) = (r.clone(), Arc::clone(&el));
            async move {
                let req: super::types::AppendRequest = serde_json::from_value(body)
                    .map_err(|e| RpcError::bad_request(format!("append entries: {e}")))?;
                // The leader is heard when its message arrives, not when this
                // server is done with it: a slow disk or a busy core must not
                // make a follower campaign against a leader it hears.
                el.heard_append(&req.vote);
                let entries = req.entries.len();
                let started = std::time::Instant::now();
                let res = r.append_entries(req).await;
                el.append_took(started.elapsed(), entries);
                if matches!(&res, Ok(a) if !matches!(a, AppendEntriesResponse::HigherVote(_))) {
                    el.contact.touch();
                }
                serde_json::to_value(&res).map_err(|e| RpcError::internal(e.to_string()))
            }
        });
        let (r, el) = (self.raft.clone(), Arc::clone(&self.elections));
        registry.unary(VOTE, Access::Server, move |_ctx, body: Value| {
            let (r, el) = (r.clone(), Arc::clone(&el));
            async move {
                let req = serde_json::from_value(body)
                    .map_err(|e| RpcError::bad_request(format!("vote: {e}")))?;
                let res = r.vote(req).await;
                if matches!(&res, Ok(v) if v.vote_granted) {
                    el.contact.touch();
                }
                serde_json::to_value(&res).map_err(|e| RpcError::internal(e.to_string()))
            }
        });
        let el = Arc::clone(&self.elections);
        registry.unary(PREVOTE, Access::Server, move |_ctx, body: Value| {
            let el = Arc::clone(&el);
            async move {
                let req: PreVoteRequest = serde_json::from_value(body)
                    .map_err(|e| RpcError::bad_request(format!("pre-vote: {e}")))?;
                serde_json::to_value(el.answer(&req)).map_err(|e| RpcError::internal(e.to_string()))
            }
        });
        let (r, el) = (self.raft.clone(), Arc::clone(&self.elections));
        registry.unary(SNAPSHOT, Access::Server, move |_ctx, body: Value| {
            let (r, el) = (r.clone(), Arc::clone(&el));
            async move {
                let req = serde_json::from_value(body)
                    .map_err(|e| RpcError::bad_request(format!("install snapshot: {e}")))?;
                let res = r.install_snapshot(req).await;
                if res.is_ok() {
                    el.contact.touch();
                }
                serde_json::to_value(&res).map_err(|e| RpcError::internal(e.to_string()))
            }
        });
    }

    /// Stops raft.
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }

    /// Refuses leader-only work on a leader that lost its quorum (nothing is
    /// proposed: the caller may safely try again elsewhere).
    fn check_quorum(&self) -> Result<(), ConsensusError> {
        let Some(ms) = self.elections.quorum_lost_ms() else {
            return Ok(());
        };
        tracing::debug!(ms, "leader without a quorum: refusing leader-only work");
        Err(ConsensusError::NotLeader {
            leader: None,
            leader_addr: None,
        })
    }

    fn not_leader(&self) -> ConsensusError {
        let m = self.raft.metrics().borrow().clone();
        let leader = m.current_leader;
        let node = leader.and_then(|l| {
            m.membership_config
                .nodes()
                .find(|(id, _)| **id == l)
                .map(|(_, n)| n.clone())
        });
        ConsensusError::NotLeader {
            leader: node.as_ref().and_then(node_id_of),
            leader_addr: node.map(|n| n.rpc_addr),
        }
    }

    /// A write the applied state says changes nothing, answered as of the
    /// last applied entry (see [`ReplicatedState::unchanged_by`]).
    fn unchanged(
        &self,
        cmd: &S::Command,
    ) -> Result<Option<Committed<S::Response>>, ConsensusError> {
        let g = self
            .state
            .read()
            .map_err(|_| unavailable("state lock poisoned"))?;
        let at = g
            .last_applied
            .map_or(LogPosition::default(), |l| LogPosition {
                term: l.leader_id.term,
                index: l.index,
            });
        Ok(g.state
            .unchanged_by(cmd)
            .map(|response| Committed { at, response }))
    }

    fn read_state<T>(&self, f: impl FnOnce(&S) -> T) -> Result<T, ConsensusError> {
        let g = self
            .state
            .read()
            .map_err(|_| unavailable("state lock poisoned"))?;
        Ok(f(&g.state))
    }
}

impl<S: ReplicatedState> Consensus for RaftNode<S> {
    type State = S;

    async fn propose(&self, cmd: S::Command) -> Result<Committed<S::Response>, ConsensusError> {
        let payload = serde_json::value::to_raw_value(&cmd)
            .map_err(|e| ConsensusError::Invalid(e.to_string()))?;
        let size = payload.get().len();
        if size > MAX_COMMAND_BYTES {
            return Err(ConsensusError::TooLarge {
                size,
                limit: MAX_COMMAND_BYTES,
            });
        }
        self.check_quorum()?;
        if let Some(done) = self.unchanged(&cmd)? {
            return Ok(done);
        }
        let resp = self
            .raft
            .client_write(Proposal { payload })
            .await
            .map_err(write_error)?;
        let at = LogPosition {
            term: resp.log_id.leader_id.term,
            index: resp.log_id.index,
        };
        match resp.data {
            Applied::Ok { response } => Ok(Committed {
                at,
                response: serde_json::from_value(response)
                    .map_err(|e| ConsensusError::Rejected(format!("response: {e}")))?,
            }),
            Applied::Rejected { reason } => Err(ConsensusError::Rejected(reason)),
        }
    }

    async fn read_index(&self) -> Result<u64, ConsensusError> {
        self.check_quorum()?;
        match self.raft.get_read_log_id().await {
            Ok((read, _applied)) => Ok(read.map(|l| l.index).unwrap_or(0)),
            Err(RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(_))) => {
                Err(self.not_leader())
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn read_at<T: Send, F: FnOnce(&S) -> T + Send>(
        &self,
        index: u64,
        timeout: Duration,
        f: F,
    ) -> Result<T, ConsensusError> {
        if index > 0 {
            self.raft
                .wait(Some(timeout))
                .applied_index_at_least(Some(index), "linearizable read")
                .await
                .map_err(unavailable)?;
        }
        self.read_state(f)
    }

    async fn read_linearizable<T: Send, F: FnOnce(&S) -> T + Send>(
        &self,
        f: F,
    ) -> Result<T, ConsensusError> {
        let index = self.read_index().await?;
        self.read_at(index, Duration::from_secs(5), f).await
    }

    fn status(&self) -> ConsensusStatus {
        let m = self.raft.metrics().borrow().clone();
        let quorum_lost_ms = self.elections.quorum_lost_ms();
        let role = match m.state {
            // Stepped down: it leads nobody (see `election`).
            ServerState::Leader if quorum_lost_ms.is_some() => ServerRole::Candidate,
            ServerState::Leader => ServerRole::Leader,
            ServerState::Follower => ServerRole::Follower,
            ServerState::Candidate => ServerRole::Candidate,
            ServerState::Learner => ServerRole::Learner,
            ServerState::Shutdown => ServerRole::Shutdown,
        };
        let voters: BTreeSet<u64> = m.membership_config.voter_ids().collect();
        let mut leader = None;
        let mut servers = Vec::new();
        for (id, node) in m.membership_config.nodes() {
            let Some(node_id) = node_id_of(node) else {
                continue;
            };
            if Some(*id) == m.current_leader && !(*id == m.id && quorum_lost_ms.is_some()) {
                leader = Some(node_id.clone());
            }
            let matched_index = m
                .replication
                .as_ref()
                .and_then(|r| r.get(id).cloned().flatten())
                .map(|l| l.index)
                .or_else(|| {
                    (*id == m.id && role == ServerRole::Leader)
                        .then_some(m.last_log_index)
                        .flatten()
                });
            servers.push(ServerStatus {
                node_id,
                rpc_addr: node.rpc_addr.clone(),
                voter: voters.contains(id),
                matched_index,
            });
        }
        servers.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        let c = self.committed.load(Ordering::Relaxed);
        // Established: it committed an entry of its own term (openraft's blank
        // entry at election), so its view of the state is complete.
        let established = role == ServerRole::Leader
            && m.last_applied
                .is_some_and(|l| l.leader_id.term == m.current_term);
        ConsensusStatus {
            node_id: self.me.clone(),
            role,
            established,
            quorum_lost_ms,
            leader,
            term: m.current_term,
            commit_index: (c != NONE).then_some(c),
            last_applied: m.last_applied.map(|l| l.index),
            last_log_index: m.last_log_index,
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
            millis_since_quorum_ack: m.millis_since_quorum_ack,
            servers,
        }
    }

    fn fence_token(&self) -> Result<FenceToken, ConsensusError> {
        self.check_quorum()?;
        let m = self.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            return Err(self.not_leader());
        }
        let c = self.committed.load(Ordering::Relaxed);
        Ok(FenceToken {
            term: m.current_term,
            index: if c == NONE { 0 } else { c },
        })
    }

    async fn add_server(&self, node: &NodeId, rpc_addr: SocketAddr) -> Result<(), ConsensusError> {
        let id = node.raft_id();
        let m = self.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            return Err(self.not_leader());
        }
        if let Some((_, other)) = m
            .membership_config
            .nodes()
            .find(|(i, n)| **i == id && n.node_id != node.as_str())
        {
            return Err(ConsensusError::Invalid(format!(
                "node id {node} collides with {} in raft id space; rename one of them",
                other.node_id
            )));
        }
        if m.membership_config.voter_ids().any(|v| v == id) {
            return Ok(());
        }
        let peer = RaftPeer {
            node_id: node.to_string(),
            rpc_addr: rpc_addr.to_string(),
        };
        self.raft
            .add_learner(id, peer, true)
            .await
            .map_err(write_error)?;
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(write_error)?;
        Ok(())
    }

    async fn remove_server(&self, node: &NodeId) -> Result<(), ConsensusError> {
        let id = node.raft_id();
        let m = self.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            return Err(self.not_leader());
        }
        let voters: BTreeSet<u64> = m.membership_config.voter_ids().collect();
        let known = m.membership_config.nodes().any(|(i, _)| *i == id);
        if !known {
            return Err(ConsensusError::Invalid(format!(
                "{node} is not a raft member"
            )));
        }
        if voters.contains(&id) {
            if voters.len() == 1 {
                return Err(ConsensusError::Membership(
                    "cannot remove the last voter".into(),
                ));
            }
            self.raft
                .change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
                .await
                .map_err(write_error)?;
        } else {
            self.raft
                .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false)
                .await
                .map_err(write_error)?;
        }
        Ok(())
    }
}
