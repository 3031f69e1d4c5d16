//! Our consensus interface. The rest of the system talks to this trait and never names openraft.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::state::{LogPosition, ReplicatedState};
use crate::fence::FenceToken;
use crate::identity::NodeId;

/// Raft role of this server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerRole {
    /// Coordinator.
    Leader,
    /// Voter following a leader.
    Follower,
    /// Voter running an election.
    Candidate,
    /// Receives the log but does not vote (being added, or not yet a member).
    Learner,
    /// Stopped.
    Shutdown,
}

/// A server in the raft membership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStatus {
    /// Node id.
    pub node_id: NodeId,
    /// RPC address.
    pub rpc_addr: String,
    /// Votes (false: learner).
    pub voter: bool,
    /// Highest log index known replicated to it (known on the leader only).
    pub matched_index: Option<u64>,
}

/// Consensus state as this server sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsensusStatus {
    /// This server.
    pub node_id: NodeId,
    /// Its raft role (a leader without a quorum for `quorum_lost_ms` reports
    /// `candidate`: it stepped down).
    pub role: ServerRole,
    /// A leader that committed an entry of its own term: only such a leader
    /// acts as coordinator.
    #[serde(default)]
    pub established: bool,
    /// On a leader that stepped down: milliseconds since a quorum last
    /// acknowledged it (`u64::MAX`: never in this leadership).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_lost_ms: Option<u64>,
    /// Current leader (the coordinator).
    pub leader: Option<NodeId>,
    /// Current term.
    pub term: u64,
    /// Highest committed log index.
    pub commit_index: Option<u64>,
    /// Highest applied log index.
    pub last_applied: Option<u64>,
    /// Last log index.
    pub last_log_index: Option<u64>,
    /// Last index the latest snapshot covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_index: Option<u64>,
    /// Last index purged from the log (entries above it are held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purged_index: Option<u64>,
    /// On the leader: milliseconds since a quorum last acknowledged it.
    pub millis_since_quorum_ack: Option<u64>,
    /// Servers in the membership.
    pub servers: Vec<ServerStatus>,
}

/// A committed write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Committed<R> {
    /// Where the command sits in the log.
    pub at: LogPosition,
    /// The state machine's response.
    pub response: R,
}

/// Consensus errors.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum ConsensusError {
    /// Only the leader does this; the leader is named when known.
    #[error("this server is not the leader{}", leader_hint(.leader, .leader_addr))]
    NotLeader {
        /// Leader node id.
        leader: Option<NodeId>,
        /// Leader RPC address.
        leader_addr: Option<String>,
    },
    /// The command is larger than the limit.
    #[error("command of {size} bytes exceeds the {limit} byte limit")]
    TooLarge {
        /// Size.
        size: usize,
        /// Limit.
        limit: usize,
    },
    /// The state machine refused the committed entry.
    #[error("state machine rejected the command: {0}")]
    Rejected(String),
    /// A membership change is already in progress, or the change is invalid.
    #[error("membership change refused: {0}")]
    Membership(String),
    /// No quorum, raft stopped, or a timeout.
    #[error("consensus unavailable: {0}")]
    Unavailable(String),
    /// The command was proposed but its commit was not seen in time: it may
    /// still be applied.
    #[error("proposed, not committed in time: {0}")]
    OutcomeUnknown(String),
    /// A bad argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// This node does not run raft (client agent).
    #[error("this node is not a server agent")]
    NotServer,
}

fn leader_hint(leader: &Option<NodeId>, addr: &Option<String>) -> String {
    match (leader, addr) {
        (Some(l), Some(a)) => format!(" (leader: {l} at {a})"),
        (Some(l), None) => format!(" (leader: {l})"),
        _ => " (no leader known)".to_string(),
    }
}

/// Consensus among the server agents, over an application [`ReplicatedState`].
pub trait Consensus: Send + Sync + 'static {
    /// The replicated application state.
    type State: ReplicatedState;

    /// Appends a command, waits until it is committed and applied, returns its response.
    /// Leader only ([`ConsensusError::NotLeader`] otherwise).
    fn propose(
        &self,
        cmd: <Self::State as ReplicatedState>::Command,
    ) -> impl Future<
        Output = Result<Committed<<Self::State as ReplicatedState>::Response>, ConsensusError>,
    > + Send;

    /// Leader only: confirms leadership with a quorum and returns the index a linearizable read
    /// must observe.
    fn read_index(&self) -> impl Future<Output = Result<u64, ConsensusError>> + Send;

    /// Waits until this server applied `index` (at most `timeout`) and reads the state.
    fn read_at<T: Send, F: FnOnce(&Self::State) -> T + Send>(
        &self,
        index: u64,
        timeout: Duration,
        f: F,
    ) -> impl Future<Output = Result<T, ConsensusError>> + Send;

    /// Leader only: a linearizable read.
    fn read_linearizable<T: Send, F: FnOnce(&Self::State) -> T + Send>(
        &self,
        f: F,
    ) -> impl Future<Output = Result<T, ConsensusError>> + Send;

    /// Current status.
    fn status(&self) -> ConsensusStatus;

    /// Leader only: the fence token for commands issued now.
    fn fence_token(&self) -> Result<FenceToken, ConsensusError>;

    /// Leader only: adds a server as learner, waits for it to catch up, then makes it a voter.
    fn add_server(
        &self,
        node: &NodeId,
        rpc_addr: SocketAddr,
    ) -> impl Future<Output = Result<(), ConsensusError>> + Send;

    /// Leader only: removes a server from the voters and the membership.
    fn remove_server(
        &self,
        node: &NodeId,
    ) -> impl Future<Output = Result<(), ConsensusError>> + Send;
}
