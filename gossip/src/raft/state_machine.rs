//! openraft's state machine side: applies committed entries to the application state and keeps
//! snapshots in redb (fsync'd).
// openraft's storage traits dictate `StorageError` (large); helpers return it too.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::sync::{Arc, RwLock};

use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, Snapshot, SnapshotMeta,
    StorageIOError,
};
use redb::{Database, ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};

use super::log_store::blocking;
use super::state::{LogPosition, ReplicatedState};
use super::types::{Applied, Entry, LogId, RaftPeer, StorageError, StoredMembership, TypeConfig};

const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_snapshot");
const META: &str = "meta";
const DATA: &str = "data";

type Meta = SnapshotMeta<u64, RaftPeer>;

fn sm_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(AnyError::error(e.to_string())).into()
}
fn snap_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_snapshot(None, AnyError::error(e.to_string())).into()
}

/// The application state plus what raft needs to know about it.
pub struct SmInner<S> {
    /// Application state.
    pub state: S,
    /// Last applied entry.
    pub last_applied: Option<LogId>,
    /// Membership as of `last_applied`.
    pub last_membership: StoredMembership,
}

/// Shared handle on the state machine.
pub type SharedState<S> = Arc<RwLock<SmInner<S>>>;

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: Meta,
}

/// openraft state machine over a [`ReplicatedState`].
pub struct StateMachineStore<S: ReplicatedState> {
    db: Arc<Database>,
    inner: SharedState<S>,
    snapshot_seq: u64,
}

impl<S: ReplicatedState> StateMachineStore<S> {
    /// Opens the store and restores the last snapshot, if any, into `state`.
    pub fn open(db: Arc<Database>, mut state: S) -> Result<Self, StorageError> {
        let txn = db.begin_write().map_err(snap_err)?;
        txn.open_table(SNAPSHOT).map_err(snap_err)?;
        txn.commit().map_err(snap_err)?;
        let mut last_applied = None;
        let mut last_membership = StoredMembership::default();
        if let Some((meta, data)) = read_snapshot(&db)? {
            state.restore(&data).map_err(sm_err)?;
            last_applied = meta.last_log_id;
            last_membership = meta.last_membership;
        }
        Ok(Self {
            db,
            inner: Arc::new(RwLock::new(SmInner {
                state,
                last_applied,
                last_membership,
            })),
            snapshot_seq: 0,
        })
    }

    /// The shared state (for local reads).
    pub fn shared(&self) -> SharedState<S> {
        self.inner.clone()
    }
}

fn read_snapshot(db: &Database) -> Result<Option<(Meta, Vec<u8>)>, StorageError> {
    let txn = db.begin_read().map_err(snap_err)?;
    let t = txn.open_table(SNAPSHOT).map_err(snap_err)?;
    let meta = match t.get(META).map_err(snap_err)? {
        Some(v) => {
            serde_json::from_slice::<StoredSnapshot>(v.value())
                .map_err(snap_err)?
                .meta
        }
        None => return Ok(None),
    };
    let data = match t.get(DATA).map_err(snap_err)? {
        Some(v) => v.value().to_vec(),
        None => return Ok(None),
    };
    Ok(Some((meta, data)))
}

async fn write_snapshot(db: Arc<Database>, meta: Meta, data: Vec<u8>) -> Result<(), StorageError> {
    let meta = serde_json::to_vec(&StoredSnapshot { meta }).map_err(snap_err)?;
    blocking(move || {
        let txn = db.begin_write().map_err(snap_err)?;
        {
            let mut t = txn.open_table(SNAPSHOT).map_err(snap_err)?;
            t.insert(META, meta.as_slice()).map_err(snap_err)?;
            t.insert(DATA, data.as_slice()).map_err(snap_err)?;
        }
        txn.commit().map_err(snap_err)
    })
    .await
}

/// Builds snapshots from a shared state.
pub struct SnapshotBuilder<S: ReplicatedState> {
    db: Arc<Database>,
    inner: SharedState<S>,
    seq: u64,
}

impl<S: ReplicatedState> RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder<S> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (job, meta) = {
            let g = self
                .inner
                .read()
                .map_err(|_| snap_err("state lock poisoned"))?;
            let job = g.state.snapshot_job();
            let id = match &g.last_applied {
                Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, self.seq),
                None => format!("empty-{}", self.seq),
            };
            let meta = Meta {
                last_log_id: g.last_applied,
                last_membership: g.last_membership.clone(),
                snapshot_id: id,
            };
            (job, meta)
        };
        // Serialized off the lock and off the async workers: a whole state
        // serialized on a worker under the lock stalled a server's runtime
        // (and its raft heartbeats) for ~200 ms at 50,000 workloads.
        let data = blocking(move || Ok(job())).await?.map_err(snap_err)?;
        write_snapshot(self.db.clone(), meta.clone(), data.clone()).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl<S: ReplicatedState> RaftStateMachine<TypeConfig> for StateMachineStore<S> {
    type SnapshotBuilder = SnapshotBuilder<S>;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let g = self
            .inner
            .read()
            .map_err(|_| sm_err("state lock poisoned"))?;
        Ok((g.last_applied, g.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = std::time::Instant::now();
        let mut g = self
            .inner
            .write()
            .map_err(|_| sm_err("state lock poisoned"))?;
        let locked = started.elapsed();
        let mut out = Vec::new();
        for e in entries {
            g.last_applied = Some(e.log_id);
            let at = LogPosition {
                term: e.log_id.leader_id.term,
                index: e.log_id.index,
            };
            let r = match e.payload {
                EntryPayload::Blank => Applied::Ok {
                    response: serde_json::Value::Null,
                },
                EntryPayload::Normal(p) => {
                    match serde_json::from_str::<S::Command>(p.payload.get()) {
                        Ok(cmd) => {
                            let resp = g.state.apply(cmd, at);
                            match serde_json::to_value(&resp) {
                                Ok(response) => Applied::Ok { response },
                                Err(e) => Applied::Rejected {
                                    reason: format!("response does not serialize: {e}"),
                                },
                            }
                        }
                        Err(err) => {
                            tracing::error!(index = at.index, error = %err, "committed entry is not a command of this state machine");
                            Applied::Rejected {
                                reason: format!(
                                    "entry {} is not a command of this state machine: {err}",
                                    at.index
                                ),
                            }
                        }
                    }
                }
                EntryPayload::Membership(m) => {
                    g.last_membership = StoredMembership::new(Some(e.log_id), m);
                    Applied::Ok {
                        response: serde_json::Value::Null,
                    }
                }
            };
            out.push(r);
        }
        let held = started.elapsed() - locked;
        if held > std::time::Duration::from_millis(100) {
            tracing::warn!(
                entries = out.len(),
                held_ms = held.as_millis() as u64,
                waited_ms = locked.as_millis() as u64,
                "applying committed entries held the state's write lock long"
            );
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshot_seq += 1;
        SnapshotBuilder {
            db: self.db.clone(),
            inner: self.inner.clone(),
            seq: self.snapshot_seq,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        {
            let mut g = self
                .inner
                .write()
                .map_err(|_| sm_err("state lock poisoned"))?;
            g.state.restore(&data).map_err(sm_err)?;
            g.last_applied = meta.last_log_id;
            g.last_membership = meta.last_membership.clone();
        }
        write_snapshot(self.db.clone(), meta.clone(), data).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(read_snapshot(&self.db)?.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
