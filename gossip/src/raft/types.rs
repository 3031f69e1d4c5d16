//! The openraft type configuration. Nothing outside `raft/` names these types.

use std::io::Cursor;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A raft member as openraft stores it in the membership config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftPeer {
    /// Node id (text).
    pub node_id: String,
    /// RPC address.
    pub rpc_addr: String,
}

/// A log entry's application payload: the serialized application command.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proposal {
    /// `ReplicatedState::Command` as JSON.
    pub payload: Value,
}

/// Outcome of applying one entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "applied", rename_all = "snake_case")]
pub enum Applied {
    /// Applied; the state machine's response as JSON.
    Ok {
        /// `ReplicatedState::Response` as JSON.
        response: Value,
    },
    /// The payload did not decode as a command of this state machine (version skew).
    Rejected {
        /// Why.
        reason: String,
    },
}

openraft::declare_raft_types!(
    /// Type configuration of the mesh raft group.
    pub TypeConfig:
        D = Proposal,
        R = Applied,
        NodeId = u64,
        Node = RaftPeer,
        SnapshotData = Cursor<Vec<u8>>,
);

pub type LogId = openraft::LogId<u64>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<u64>;
pub type StoredMembership = openraft::StoredMembership<u64, RaftPeer>;
pub type Raft = openraft::Raft<TypeConfig>;
pub type Vote = openraft::Vote<u64>;
pub type AppendRequest = openraft::raft::AppendEntriesRequest<TypeConfig>;
