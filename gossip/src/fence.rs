//! Fencing of coordinator commands: every command carries the coordinator's raft `(term,
//! index)`; an agent durably records the highest term it accepted and refuses older ones, so a
//! deposed leader cannot command agents that already obey its successor.

use std::sync::{Arc, Mutex};

use redb::{Database, ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};

const FENCE: TableDefinition<&str, &[u8]> = TableDefinition::new("fence");
const HIGHEST: &str = "highest";

/// The coordinator's position when it issued a command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FenceToken {
    /// Raft term of the issuing leader.
    pub term: u64,
    /// Raft commit index at the leader when it issued the command.
    pub index: u64,
}

/// Fencing errors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FenceError {
    /// The command comes from an older term than one already accepted.
    #[error(
        "stale coordinator term {presented} (index {presented_index}): this agent already accepted term {highest}"
    )]
    Stale {
        /// Term carried by the refused command.
        presented: u64,
        /// Index carried by the refused command.
        presented_index: u64,
        /// Highest term accepted so far.
        highest: u64,
    },
    /// The fence record could not be read or written.
    #[error("fence store: {0}")]
    Store(String),
}

/// The highest accepted term, persisted (fsync'd) before a newer term is acted upon.
pub struct FenceGuard {
    db: Arc<Database>,
    highest: Mutex<FenceToken>,
}

fn store<E: std::fmt::Display>(e: E) -> FenceError {
    FenceError::Store(e.to_string())
}

impl FenceGuard {
    /// Opens the guard on the node's database.
    pub fn open(db: Arc<Database>) -> Result<Self, FenceError> {
        let txn = db.begin_write().map_err(store)?;
        txn.open_table(FENCE).map_err(store)?;
        txn.commit().map_err(store)?;
        let read = db.begin_read().map_err(store)?;
        let table = read.open_table(FENCE).map_err(store)?;
        let highest = match table.get(HIGHEST).map_err(store)? {
            Some(v) => serde_json::from_slice(v.value()).map_err(store)?,
            None => FenceToken::default(),
        };
        Ok(Self {
            db,
            highest: Mutex::new(highest),
        })
    }

    /// Highest token accepted so far.
    pub fn highest(&self) -> FenceToken {
        self.highest.lock().map(|g| *g).unwrap_or_default()
    }

    /// Accepts `token` if its term is not older than the highest accepted; records a newer term
    /// durably before returning.
    pub fn admit(&self, token: FenceToken) -> Result<(), FenceError> {
        let mut highest = self
            .highest
            .lock()
            .map_err(|_| FenceError::Store("fence lock poisoned".into()))?;
        if token.term < highest.term {
            return Err(FenceError::Stale {
                presented: token.term,
                presented_index: token.index,
                highest: highest.term,
            });
        }
        if token > *highest {
            let bytes = serde_json::to_vec(&token).map_err(store)?;
            let txn = self.db.begin_write().map_err(store)?;
            {
                let mut t = txn.open_table(FENCE).map_err(store)?;
                t.insert(HIGHEST, bytes.as_slice()).map_err(store)?;
            }
            // Durability::Immediate (redb's default): fsync'd when commit returns.
            txn.commit().map_err(store)?;
            *highest = token;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(term: u64, index: u64) -> FenceToken {
        FenceToken { term, index }
    }

    #[test]
    fn stale_terms_are_refused_and_the_record_survives_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.redb");
        {
            let db = Arc::new(Database::create(&path).unwrap());
            let g = FenceGuard::open(db).unwrap();
            g.admit(t(3, 10)).unwrap();
            g.admit(t(3, 9)).unwrap(); // same term: accepted
            g.admit(t(5, 1)).unwrap();
            assert_eq!(
                g.admit(t(4, 100)),
                Err(FenceError::Stale {
                    presented: 4,
                    presented_index: 100,
                    highest: 5
                })
            );
        }
        let db = Arc::new(Database::create(&path).unwrap());
        let g = FenceGuard::open(db).unwrap();
        assert_eq!(g.highest(), t(5, 1));
        assert!(g.admit(t(4, 1)).is_err());
        g.admit(t(6, 1)).unwrap();
    }
}
