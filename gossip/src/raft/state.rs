//! The application state machine the raft group replicates. The coordinator implements this
//! trait; the mesh never knows what the commands mean.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where an entry sits in the raft log.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
pub struct LogPosition {
    /// Term of the leader that created the entry.
    pub term: u64,
    /// Log index.
    pub index: u64,
}

/// A snapshot or restore failure of the application state.
#[derive(Debug, thiserror::Error)]
#[error("state machine: {0}")]
pub struct StateError(pub String);

/// Serializes a copy of the state ([`ReplicatedState::snapshot_job`]).
pub type SnapshotJob = Box<dyn FnOnce() -> Result<Vec<u8>, StateError> + Send>;

/// A deterministic state machine replicated by raft.
///
/// `apply` must be deterministic: every server applies the same commands in the same order and
/// must reach the same state. The state lives in memory; durability comes from the raft log and
/// snapshots, both in redb (a restarted server restores the last snapshot and re-applies the
/// committed log after it).
pub trait ReplicatedState: Send + Sync + 'static {
    /// A write.
    type Command: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What a write returns.
    type Response: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// A read that can be sent to another server.
    type Query: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What a read returns.
    type QueryResponse: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Applies one committed command.
    fn apply(&mut self, cmd: Self::Command, at: LogPosition) -> Self::Response;
    /// Answers a read.
    fn query(&self, q: &Self::Query) -> Self::QueryResponse;
    /// Serializes the whole state.
    fn snapshot(&self) -> Result<Vec<u8>, StateError>;
    /// The snapshot in two steps: what this returns is taken under the state's
    /// lock, and the job it holds runs after the lock is released, on a blocking
    /// thread. A state that is large to serialize returns a cheap copy of itself
    /// and serializes that, so that the lock (which applying waits for, and every
    /// read behind it) is held for the copy alone. The default serializes here.
    fn snapshot_job(&self) -> SnapshotJob {
        let r = self.snapshot();
        Box::new(move || r)
    }
    /// Replaces the whole state with a snapshot.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateError>;

    /// The answer to a write that would change nothing, when the state can
    /// tell: the leader then answers it at once, without a log entry (no
    /// fsync, no replication, no apply on every server). A node's periodic
    /// inventory usually repeats what is known: 500 nodes sending one every
    /// 10 s made most of the log. The default proposes everything.
    fn unchanged_by(&self, cmd: &Self::Command) -> Option<Self::Response> {
        let _ = cmd;
        None
    }

    /// A write that arrived over the mesh from `peer` (its certificate's
    /// identity), before it is proposed: the state may narrow what a node
    /// may claim (a client node speaks for itself only). The default takes
    /// it as it came.
    fn admit_command(
        cmd: Self::Command,
        peer: &crate::identity::PeerIdentity,
    ) -> Result<Self::Command, String> {
        let _ = peer;
        Ok(cmd)
    }

    /// The same for a read.
    fn admit_query(
        q: Self::Query,
        peer: &crate::identity::PeerIdentity,
    ) -> Result<Self::Query, String> {
        let _ = peer;
        Ok(q)
    }
}
