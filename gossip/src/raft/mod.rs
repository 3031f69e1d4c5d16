//! Consensus among the server agents: openraft behind our own [`Consensus`] trait, generic over
//! the application state machine ([`ReplicatedState`]); log, vote and snapshots in redb.

mod consensus;
mod election;
mod log_store;
mod network;
mod node;
mod state;
mod state_machine;
mod types;

pub use consensus::{
    Committed, Consensus, ConsensusError, ConsensusStatus, ServerRole, ServerStatus,
};
pub use node::{MAX_COMMAND_BYTES, RaftNode, RaftTiming};
pub use state::{LogPosition, ReplicatedState, SnapshotJob, StateError};
