//! Raft log and vote in redb. `save_vote` and `append` commit with `Durability::Immediate`
//! (fsync) before they return or signal the flush.
// openraft's storage traits dictate `StorageError` (large); helpers return it too.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, OptionalSend, StorageIOError, Vote};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::types::{Entry, LogId, StorageError, TypeConfig};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");
const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const PURGED: &str = "last_purged";

/// Sentinel for "no commit index yet".
pub(crate) const NONE: u64 = u64::MAX;

fn read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_logs(AnyError::error(e.to_string())).into()
}
fn write_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(AnyError::error(e.to_string())).into()
}
fn vote_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_vote(AnyError::error(e.to_string())).into()
}

/// The log store; clones share the database.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    committed: Arc<AtomicU64>,
}

impl LogStore {
    /// Opens (creating the tables).
    pub fn open(db: Arc<Database>) -> Result<Self, StorageError> {
        let txn = db.begin_write().map_err(write_err)?;
        txn.open_table(LOG).map_err(write_err)?;
        txn.open_table(META).map_err(write_err)?;
        txn.commit().map_err(write_err)?;
        let s = Self {
            db,
            committed: Arc::new(AtomicU64::new(NONE)),
        };
        if let Some(c) = s.meta::<LogId>(COMMITTED)? {
            s.committed.store(c.index, Ordering::Relaxed);
        }
        Ok(s)
    }

    /// Commit index as last reported by openraft (`NONE` if none).
    pub fn committed_index(&self) -> Arc<AtomicU64> {
        self.committed.clone()
    }

    fn meta<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StorageError> {
        let txn = self.db.begin_read().map_err(read_err)?;
        let t = txn.open_table(META).map_err(read_err)?;
        match t.get(key).map_err(read_err)? {
            Some(v) => serde_json::from_slice(v.value())
                .map(Some)
                .map_err(read_err),
            None => Ok(None),
        }
    }

    async fn write_meta<T: serde::Serialize>(
        &self,
        key: &'static str,
        value: &T,
        durability: Durability,
    ) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(value).map_err(write_err)?;
        let db = self.db.clone();
        blocking(move || {
            let mut txn = db.begin_write().map_err(write_err)?;
            txn.set_durability(durability).map_err(write_err)?;
            {
                let mut t = txn.open_table(META).map_err(write_err)?;
                t.insert(key, bytes.as_slice()).map_err(write_err)?;
            }
            txn.commit().map_err(write_err)
        })
        .await
    }

    /// The last log id (the last entry's, else the last purged one's).
    pub(crate) fn last_log_id(&self) -> Result<Option<LogId>, StorageError> {
        Ok(self.last_entry()?.or(self.meta(PURGED)?))
    }

    fn last_entry(&self) -> Result<Option<LogId>, StorageError> {
        let txn = self.db.begin_read().map_err(read_err)?;
        let t = txn.open_table(LOG).map_err(read_err)?;
        match t.last().map_err(read_err)? {
            Some((_, v)) => {
                let e: Entry = serde_json::from_slice(v.value()).map_err(read_err)?;
                Ok(Some(e.log_id))
            }
            None => Ok(None),
        }
    }
}

/// Runs blocking redb work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| write_err(format!("storage task failed: {e}")))?
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => Bound::Included(*e),
            Bound::Excluded(e) => Bound::Excluded(*e),
            Bound::Unbounded => Bound::Unbounded,
        };
        let txn = self.db.begin_read().map_err(read_err)?;
        let t = txn.open_table(LOG).map_err(read_err)?;
        let mut out = Vec::new();
        for item in t
            .range::<u64>((Bound::Included(start), end))
            .map_err(read_err)?
        {
            let (_, v) = item.map_err(read_err)?;
            out.push(serde_json::from_slice(v.value()).map_err(read_err)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.meta(PURGED)?;
        let last_log_id = self.last_entry()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        self.write_meta(VOTE, vote, Durability::Immediate)
            .await
            .map_err(|e| vote_err(e.to_string()))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        if let Some(c) = &committed {
            self.committed.store(c.index, Ordering::Relaxed);
        }
        // Optional in raft: made durable by the next append's fsync. Losing it only means
        // re-applying a little more of the log after a crash.
        self.write_meta(COMMITTED, &committed, Durability::None)
            .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        for e in entries {
            rows.push((e.log_id.index, serde_json::to_vec(&e).map_err(write_err)?));
        }
        let db = self.db.clone();
        let res = blocking(move || {
            let txn = db.begin_write().map_err(write_err)?;
            {
                let mut t = txn.open_table(LOG).map_err(write_err)?;
                for (i, bytes) in &rows {
                    t.insert(*i, bytes.as_slice()).map_err(write_err)?;
                }
            }
            // Durability::Immediate: on disk when commit returns.
            txn.commit().map_err(write_err)
        })
        .await;
        match res {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let db = self.db.clone();
        blocking(move || {
            let txn = db.begin_write().map_err(write_err)?;
            {
                let mut t = txn.open_table(LOG).map_err(write_err)?;
                t.retain_in::<u64, _>(log_id.index.., |_, _| false)
                    .map_err(write_err)?;
            }
            txn.commit().map_err(write_err)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(&log_id).map_err(write_err)?;
        let db = self.db.clone();
        blocking(move || {
            let txn = db.begin_write().map_err(write_err)?;
            {
                // Record the purge point first so a crash never leaves a hole unexplained.
                let mut m = txn.open_table(META).map_err(write_err)?;
                m.insert(PURGED, bytes.as_slice()).map_err(write_err)?;
                let mut t = txn.open_table(LOG).map_err(write_err)?;
                t.retain_in::<u64, _>(..=log_id.index, |_, _| false)
                    .map_err(write_err)?;
            }
            txn.commit().map_err(write_err)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use openraft::testing::{StoreBuilder, Suite};

    use super::*;
    use crate::kv::KvState;
    use crate::raft::state_machine::StateMachineStore;

    struct RedbBuilder;

    impl StoreBuilder<TypeConfig, LogStore, StateMachineStore<KvState>, tempfile::TempDir>
        for RedbBuilder
    {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore<KvState>), StorageError>
        {
            let dir = tempfile::tempdir().map_err(write_err)?;
            let db = Arc::new(Database::create(dir.path().join("t.redb")).map_err(write_err)?);
            let log = LogStore::open(db.clone())?;
            let sm = StateMachineStore::open(db, KvState::default())?;
            Ok((dir, log, sm))
        }
    }

    /// openraft's storage conformance suite against our redb log and state machine.
    #[test]
    fn openraft_storage_suite() {
        Suite::test_all(RedbBuilder).unwrap();
    }
}
