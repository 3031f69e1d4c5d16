//! A small key-value state machine: used by the standalone mesh node and the tests until the
//! coordinator's state machine is plugged in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::raft::{LogPosition, ReplicatedState, StateError};

/// Key-value writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum KvCommand {
    /// Sets a key.
    Put {
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
    /// Removes a key.
    Delete {
        /// Key.
        key: String,
    },
}

/// Key-value reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum KvQuery {
    /// One key.
    Get {
        /// Key.
        key: String,
    },
    /// Every key and value.
    All,
}

/// Answer to a [`KvQuery`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KvAnswer {
    /// A value (or none).
    Value(Option<String>),
    /// All entries.
    All(BTreeMap<String, String>),
}

/// The key-value state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvState {
    /// Entries.
    pub entries: BTreeMap<String, String>,
    /// Last applied position (to show what a read observed).
    pub applied: LogPosition,
}

impl ReplicatedState for KvState {
    type Command = KvCommand;
    /// The previous value.
    type Response = Option<String>;
    type Query = KvQuery;
    type QueryResponse = KvAnswer;

    fn apply(&mut self, cmd: KvCommand, at: LogPosition) -> Option<String> {
        self.applied = at;
        match cmd {
            KvCommand::Put { key, value } => self.entries.insert(key, value),
            KvCommand::Delete { key } => self.entries.remove(&key),
        }
    }

    fn query(&self, q: &KvQuery) -> KvAnswer {
        match q {
            KvQuery::Get { key } => KvAnswer::Value(self.entries.get(key).cloned()),
            KvQuery::All => KvAnswer::All(self.entries.clone()),
        }
    }

    fn snapshot(&self) -> Result<Vec<u8>, StateError> {
        serde_json::to_vec(self).map_err(|e| StateError(e.to_string()))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateError> {
        *self = serde_json::from_slice(snapshot).map_err(|e| StateError(e.to_string()))?;
        Ok(())
    }
}
