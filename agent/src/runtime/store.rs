//! The executor's own state in redb (`<state_dir>/executor.redb`): the last
//! applied fence, one record per instance or job run it owns (so that a
//! restarted darosd knows what it launched, at which attempt, in which
//! cgroup), and the kept result of every init-job attempt (an attempt runs at
//! most once). Every commit is durable before it returns.

use std::path::{Path, PathBuf};

use daros_adapters::RuntimeId;
use daros_coordinator::reconcile::{ObservedState, PlacementId};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::target::Target;
use crate::control::work::FenceToken;

const ITEMS: TableDefinition<&str, &[u8]> = TableDefinition::new("runtime_items");
const JOB_RESULTS: TableDefinition<&str, &[u8]> = TableDefinition::new("runtime_job_results");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("runtime_meta");
const FENCE: &str = "fence";

/// One instance or job the executor owns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemRecord {
    /// What it must be (the last desired target).
    pub target: Target,
    /// The placement launched (instances).
    #[serde(default)]
    pub placement: PlacementId,
    /// The attempt launched (0: none yet).
    pub attempt: u32,
    /// The adapter's id once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_id: Option<RuntimeId>,
    /// Its cgroup under the managed root (one path component).
    pub cgroup: String,
    /// Last observed state of `attempt`.
    pub state: ObservedState,
    /// OOM kills counted in its cgroup when `attempt` was launched: a failure
    /// after the count rose is an out-of-memory kill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kills_at_launch: Option<u64>,
}

/// Decoded records by key, and a message per record that cannot be decoded.
pub type LoadedItems = (Vec<(String, ItemRecord)>, Vec<String>);

/// Store failures.
#[derive(Debug, thiserror::Error)]
#[error("runtime state store {path}: {reason}")]
pub struct StoreError {
    /// Database file.
    pub path: PathBuf,
    /// What failed.
    pub reason: String,
}

/// The executor's redb database.
#[derive(Debug)]
pub struct ExecStore {
    db: Database,
    path: PathBuf,
}

fn job_key(job: &str, attempt: u32) -> String {
    format!("{job}#{attempt}")
}

impl ExecStore {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let err = |e: String| StoreError {
            path: path.to_path_buf(),
            reason: e,
        };
        let db = Database::create(path).map_err(|e| err(e.to_string()))?;
        let txn = db.begin_write().map_err(|e| err(e.to_string()))?;
        txn.open_table(ITEMS).map_err(|e| err(e.to_string()))?;
        txn.open_table(JOB_RESULTS)
            .map_err(|e| err(e.to_string()))?;
        txn.open_table(META).map_err(|e| err(e.to_string()))?;
        txn.commit().map_err(|e| err(e.to_string()))?;
        Ok(Self {
            db,
            path: path.to_path_buf(),
        })
    }

    fn err<E: std::fmt::Display>(&self) -> impl Fn(E) -> StoreError + '_ {
        move |e| StoreError {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    fn put(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
        value: &[u8],
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(self.err())?;
        {
            let mut t = txn.open_table(table).map_err(self.err())?;
            t.insert(key, value).map_err(self.err())?;
        }
        txn.commit().map_err(self.err())
    }

    fn get(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.db.begin_read().map_err(self.err())?;
        let t = txn.open_table(table).map_err(self.err())?;
        Ok(t.get(key).map_err(self.err())?.map(|v| v.value().to_vec()))
    }

    /// The last applied fence.
    pub fn fence(&self) -> Result<Option<FenceToken>, StoreError> {
        match self.get(META, FENCE)? {
            Some(v) => serde_json::from_slice(&v).map(Some).map_err(self.err()),
            None => Ok(None),
        }
    }

    /// Records the last applied fence.
    pub fn put_fence(&self, f: FenceToken) -> Result<(), StoreError> {
        let v = serde_json::to_vec(&f).map_err(self.err())?;
        self.put(META, FENCE, &v)
    }

    /// Every item record, and a message for each that cannot be decoded.
    pub fn items(&self) -> Result<LoadedItems, StoreError> {
        let txn = self.db.begin_read().map_err(self.err())?;
        let t = txn.open_table(ITEMS).map_err(self.err())?;
        let mut out = Vec::new();
        let mut bad = Vec::new();
        for item in t.iter().map_err(self.err())? {
            let (k, v) = item.map_err(self.err())?;
            match serde_json::from_slice::<ItemRecord>(v.value()) {
                Ok(r) => out.push((k.value().to_string(), r)),
                Err(e) => bad.push(format!(
                    "runtime record {:?} cannot be read: {e}",
                    k.value()
                )),
            }
        }
        Ok((out, bad))
    }

    /// Writes the record of `key`.
    pub fn put_item(&self, key: &str, rec: &ItemRecord) -> Result<(), StoreError> {
        let v = serde_json::to_vec(rec).map_err(self.err())?;
        self.put(ITEMS, key, &v)
    }

    /// Removes the record of `key`.
    pub fn delete_item(&self, key: &str) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(self.err())?;
        {
            let mut t = txn.open_table(ITEMS).map_err(self.err())?;
            t.remove(key).map_err(self.err())?;
        }
        txn.commit().map_err(self.err())
    }

    /// Keeps the final result of a job attempt.
    pub fn put_job_result(
        &self,
        job: &str,
        attempt: u32,
        state: &ObservedState,
    ) -> Result<(), StoreError> {
        let v = serde_json::to_vec(state).map_err(self.err())?;
        self.put(JOB_RESULTS, &job_key(job, attempt), &v)
    }

    /// The kept result of a job attempt.
    pub fn job_result(&self, job: &str, attempt: u32) -> Result<Option<ObservedState>, StoreError> {
        match self.get(JOB_RESULTS, &job_key(job, attempt))? {
            Some(v) => serde_json::from_slice(&v).map(Some).map_err(self.err()),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::target::{Subject, TargetSpec};

    #[test]
    fn records_fence_and_job_results_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("executor.redb");
        let launch: daros_coordinator::reconcile::JobLaunch =
            serde_json::from_value(serde_json::json!({
                "runtime": {"type": "process", "os": "linux"},
                "resources": {},
                "runtimeSpec": {"command": "/bin/true"}
            }))
            .unwrap();
        let rec = ItemRecord {
            target: Target {
                subject: Subject::Job("acme/shop/web/init/migrate/v1".parse().unwrap()),
                placement: 0,
                attempt: 2,
                not_before: None,
                spec: TargetSpec::Job(Box::new(launch)),
            },
            placement: 0,
            attempt: 2,
            runtime_id: None,
            cgroup: "acme.shop.web.init.migrate-v1".into(),
            state: ObservedState::Starting,
            oom_kills_at_launch: None,
        };
        {
            let s = ExecStore::open(&path).unwrap();
            assert_eq!(s.fence().unwrap(), None);
            s.put_fence(FenceToken { term: 3, index: 9 }).unwrap();
            s.put_item("k", &rec).unwrap();
            s.put_job_result(
                "acme/shop/web/init/migrate/v1",
                2,
                &ObservedState::Exited { code: 0 },
            )
            .unwrap();
        }
        let s = ExecStore::open(&path).unwrap();
        assert_eq!(s.fence().unwrap(), Some(FenceToken { term: 3, index: 9 }));
        let (items, bad) = s.items().unwrap();
        assert!(bad.is_empty());
        assert_eq!(items, vec![("k".to_string(), rec)]);
        assert_eq!(
            s.job_result("acme/shop/web/init/migrate/v1", 2).unwrap(),
            Some(ObservedState::Exited { code: 0 })
        );
        assert_eq!(
            s.job_result("acme/shop/web/init/migrate/v1", 1).unwrap(),
            None
        );
        s.delete_item("k").unwrap();
        assert!(s.items().unwrap().0.is_empty());
    }
}
