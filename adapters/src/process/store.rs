//! The process adapter's durable memory (redb): one record per instance,
//! with what a restarted agent needs to adopt it — spec, run number, shim
//! and workload identities (pid + start time), restart count, last exit.
//! Commits are durable (fsync) before they return.

use super::protocol::StartedRecord;
use crate::error::AdapterError;
use crate::instance::{RuntimeId, WorkloadInstanceSpec};
use crate::status::{ExitStatus, InstanceState};
use daros_coordinator::model::failure::Failure;
use daros_coordinator::model::time::Timestamp;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const INSTANCES: TableDefinition<&str, &[u8]> = TableDefinition::new("process_instances");

/// Schema version of [`InstanceRecord`].
pub const RECORD_VERSION: u32 = 1;

/// What the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Desired {
    /// Keep it running (per its lifecycle policy).
    Running,
    /// Keep it stopped.
    Stopped,
}

/// One instance, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRecord {
    /// Schema version.
    pub version: u32,
    /// Id.
    pub id: RuntimeId,
    /// The spec it was created with.
    pub spec: WorkloadInstanceSpec,
    /// Running or stopped, as asked.
    pub desired: Desired,
    /// Last known state.
    pub state: InstanceState,
    /// Run number of the current or last run (0 before the first start).
    pub generation: u64,
    /// Shim and workload of the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<StartedRecord>,
    /// Restarts in the current retry window.
    pub restarts: u32,
    /// Restarts over the instance's whole life.
    #[serde(default)]
    pub total_restarts: u32,
    /// How the last run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<ExitStatus>,
    /// The last failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<Failure>,
    /// When the pending restart is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_restart_at: Option<Timestamp>,
    /// Why it is in its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The redb database of instance records.
#[derive(Debug, Clone)]
pub struct Store {
    db: Arc<Database>,
    path: PathBuf,
}

impl Store {
    /// Opens (creating) the database at `path`. Only one agent may hold it.
    pub fn open(path: &Path) -> Result<Self, AdapterError> {
        let db = Database::create(path).map_err(|e| Self::err(path, e))?;
        let me = Self {
            db: Arc::new(db),
            path: path.to_path_buf(),
        };
        let tx = me.db.begin_write().map_err(|e| me.e(e))?;
        tx.open_table(INSTANCES).map_err(|e| me.e(e))?;
        tx.commit().map_err(|e| me.e(e))?;
        Ok(me)
    }

    fn err(path: &Path, e: impl std::fmt::Display) -> AdapterError {
        AdapterError::Store {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }

    fn e(&self, e: impl std::fmt::Display) -> AdapterError {
        Self::err(&self.path, e)
    }

    /// Writes `rec` durably.
    pub fn put(&self, rec: &InstanceRecord) -> Result<(), AdapterError> {
        let data = serde_json::to_vec(rec).map_err(|e| self.e(e))?;
        let key = rec.id.name.clone();
        let tx = self.db.begin_write().map_err(|e| self.e(e))?;
        {
            let mut t = tx.open_table(INSTANCES).map_err(|e| self.e(e))?;
            t.insert(key.as_str(), data.as_slice())
                .map_err(|e| self.e(e))?;
        }
        tx.commit().map_err(|e| self.e(e))
    }

    /// Removes the record of `id`.
    pub fn delete(&self, id: &RuntimeId) -> Result<(), AdapterError> {
        let tx = self.db.begin_write().map_err(|e| self.e(e))?;
        {
            let mut t = tx.open_table(INSTANCES).map_err(|e| self.e(e))?;
            t.remove(id.name.as_str()).map_err(|e| self.e(e))?;
        }
        tx.commit().map_err(|e| self.e(e))
    }

    /// Every record; one that cannot be read is skipped with a warning
    /// naming it (the others are still adopted).
    pub fn load_all(&self) -> Result<Vec<InstanceRecord>, AdapterError> {
        let tx = self.db.begin_read().map_err(|e| self.e(e))?;
        let t = tx.open_table(INSTANCES).map_err(|e| self.e(e))?;
        let mut out = Vec::new();
        for item in t.iter().map_err(|e| self.e(e))? {
            let (k, v) = item.map_err(|e| self.e(e))?;
            match serde_json::from_slice::<InstanceRecord>(v.value()) {
                Ok(r) if r.version == RECORD_VERSION => out.push(r),
                Ok(r) => tracing::warn!(
                    instance = k.value(),
                    version = r.version,
                    "skipping record of unknown version"
                ),
                Err(e) => {
                    tracing::warn!(instance = k.value(), error = %e, "skipping unreadable record")
                }
            }
        }
        Ok(out)
    }
}
