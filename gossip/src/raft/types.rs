//! The openraft type configuration. Nothing outside `raft/` names these types.

use std::io::Cursor;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// A raft member as openraft stores it in the membership config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftPeer {
    /// Node id (text).
    pub node_id: String,
    /// RPC address.
    pub rpc_addr: String,
}

/// A log entry's application payload: the serialized application command.
/// Kept as its JSON text: reading the log back for replication only copies
/// it, and applying decodes the command straight from it, never building a
/// `Value` tree to decode and drop (a leader's top costs at 1,000 agents).
/// The same JSON as before, not always the same bytes: the leader writes a
/// command's fields in their order, while a follower stores what the RPC
/// layer's `Value` gave it (keys sorted). Both decode to the same command
/// for every type serde derives (no 128-bit integers, no duplicate keys:
/// through a `Value` those would differ).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proposal {
    /// `ReplicatedState::Command` as JSON text.
    pub payload: Box<RawValue>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A log written when the payload was a `Value` reads back and is
    /// written again as it was: log rows and append requests stay readable
    /// across an upgrade in either direction.
    #[test]
    fn the_payload_keeps_the_json_a_value_gave() {
        let cmd = serde_json::json!({"put": {"key": "a", "value": [1, 2.5, "x", null]}});
        let old = serde_json::to_vec(&serde_json::json!({ "payload": cmd })).unwrap();
        let p: Proposal = serde_json::from_slice(&old).unwrap();
        assert_eq!(serde_json::to_vec(&p).unwrap(), old);
        // The follower's path: the RPC body arrives as a `Value`.
        let via_value: Proposal =
            serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(via_value.payload.get(), p.payload.get());
        let back: Value = serde_json::from_str(p.payload.get()).unwrap();
        assert_eq!(back, cmd);
    }
}
