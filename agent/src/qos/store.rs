//! The QoS state of the node, persisted in redb (`<data_dir>/qos.redb`): which
//! workloads are under which class with which profile, and what a discovered
//! cgroup's knobs held before the agent first wrote them. Every commit is
//! durable (fsync) before it returns; admission runs inside the transaction
//! that persists it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::admission::{AdmissionError, NodeBudget};
use super::spec::QosSpec;

const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("qos_entries");

/// How a workload came under a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// A cgroup under the managed root (`managed/<name>`), created if missing.
    Managed,
    /// A managed cgroup created for a process the operator adopted.
    Adopted,
    /// A discovered cgroup (systemd unit, pod) the operator explicitly put under a
    /// class: written only while the entry exists, its old values restored after.
    Discovered,
}

/// A knob file's content before the agent first wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Original {
    /// Absolute path of the file.
    pub path: PathBuf,
    /// Its content then.
    pub content: String,
}

/// One workload under a class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Workload id (`managed/web`, `systemd/nginx.service`, `k8s/<uid>`).
    pub id: String,
    /// Cgroup path relative to the hierarchy roots.
    pub cgroup: String,
    /// How it came under a class.
    pub kind: TargetKind,
    /// Class and profile.
    pub spec: QosSpec,
    /// When it was set, ms since the Unix epoch.
    pub set_at_unix_ms: u64,
    /// Dedicated cores assigned to it (stable across restarts).
    #[serde(default)]
    pub dedicated: BTreeSet<u32>,
    /// Discovered cgroups only: knob contents before the first write.
    #[serde(default)]
    pub originals: Vec<Original>,
    /// Adopted only: the processes moved in.
    #[serde(default)]
    pub pids: Vec<u32>,
}

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, read or written.
    #[error("QoS state store {path}: {reason}")]
    Db {
        /// Database file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// Admission refused the entry; nothing was written.
    #[error(transparent)]
    Refused(#[from] AdmissionError),
}

/// The redb database holding the entries.
#[derive(Debug)]
pub struct QosStore {
    db: Database,
    path: PathBuf,
}

impl QosStore {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let err = |e: String| StoreError::Db {
            path: path.to_path_buf(),
            reason: e,
        };
        let db = Database::create(path).map_err(|e| err(e.to_string()))?;
        let txn = db.begin_write().map_err(|e| err(e.to_string()))?;
        txn.open_table(ENTRIES).map_err(|e| err(e.to_string()))?;
        txn.commit().map_err(|e| err(e.to_string()))?;
        Ok(QosStore {
            db,
            path: path.to_path_buf(),
        })
    }

    fn err<E: std::fmt::Display>(&self) -> impl Fn(E) -> StoreError + '_ {
        move |e| StoreError::Db {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    /// Every entry, and a message for each record that cannot be decoded (kept
    /// in the file, left out of the result).
    pub fn load(&self) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
        let txn = self.db.begin_read().map_err(self.err())?;
        let t = txn.open_table(ENTRIES).map_err(self.err())?;
        let mut out = Vec::new();
        let mut bad = Vec::new();
        for item in t.iter().map_err(self.err())? {
            let (k, v) = item.map_err(self.err())?;
            match serde_json::from_slice::<Entry>(v.value()) {
                Ok(e) => out.push(e),
                Err(e) => bad.push(format!(
                    "QoS record {:?} in {} cannot be read: {e}",
                    k.value(),
                    self.path.display()
                )),
            }
        }
        Ok((out, bad))
    }

    /// Persists `entry` if its reservation fits next to every other stored entry;
    /// the check and the write are one transaction.
    pub fn admit_and_put(&self, budget: &NodeBudget, entry: &Entry) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(self.err())?;
        {
            let mut t = txn.open_table(ENTRIES).map_err(self.err())?;
            let mut others = Vec::new();
            for item in t.iter().map_err(self.err())? {
                let (k, v) = item.map_err(self.err())?;
                if k.value() == entry.id {
                    continue;
                }
                // An unreadable record still holds its floor: count what can be read of it.
                if let Ok(e) = serde_json::from_slice::<Entry>(v.value()) {
                    others.push(e.spec.reservation());
                }
            }
            budget.admit(others.iter(), &entry.spec.reservation())?;
            let bytes = serde_json::to_vec(entry).map_err(self.err())?;
            t.insert(entry.id.as_str(), bytes.as_slice())
                .map_err(self.err())?;
        }
        txn.commit().map_err(self.err())
    }

    /// Persists `entry` without admission (updates that keep the same reservation).
    pub fn put(&self, entry: &Entry) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(self.err())?;
        {
            let mut t = txn.open_table(ENTRIES).map_err(self.err())?;
            let bytes = serde_json::to_vec(entry).map_err(self.err())?;
            t.insert(entry.id.as_str(), bytes.as_slice())
                .map_err(self.err())?;
        }
        txn.commit().map_err(self.err())
    }

    /// Removes the entry of `id`; true if it existed.
    pub fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let txn = self.db.begin_write().map_err(self.err())?;
        let existed = {
            let mut t = txn.open_table(ENTRIES).map_err(self.err())?;
            t.remove(id).map_err(self.err())?.is_some()
        };
        txn.commit().map_err(self.err())?;
        Ok(existed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::{Bytes, MilliCpu, QosClass, ResourceProfile};

    fn entry(id: &str, mem_gib: u64) -> Entry {
        let p: ResourceProfile = serde_json::from_str(&format!(
            r#"{{"cpu":{{"request":"1"}},"memory":{{"reservation":"{mem_gib}Gi"}}}}"#
        ))
        .unwrap();
        Entry {
            id: id.into(),
            cgroup: format!("daros/{id}"),
            kind: TargetKind::Managed,
            spec: QosSpec::new(QosClass::GuaranteedPro, p, "p").unwrap(),
            set_at_unix_ms: 1,
            dedicated: BTreeSet::new(),
            originals: vec![],
            pids: vec![],
        }
    }

    fn budget() -> NodeBudget {
        NodeBudget {
            cpu: MilliCpu::from_cores(8),
            memory: Bytes::from_gib(4),
            reserved_memory: Bytes::from_gib(1),
            ..NodeBudget::default()
        }
    }

    #[test]
    fn admission_is_atomic_with_persisting_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qos.redb");
        {
            let s = QosStore::open(&path).unwrap();
            s.admit_and_put(&budget(), &entry("a", 2)).unwrap();
            let e = s.admit_and_put(&budget(), &entry("b", 2)).unwrap_err();
            assert!(
                e.to_string()
                    .contains("memory reservation 2Gi refused: 2Gi of 3Gi allocatable"),
                "{e}"
            );
            // Replacing `a` does not count its old floor.
            s.admit_and_put(&budget(), &entry("a", 3)).unwrap();
        }
        let s = QosStore::open(&path).unwrap();
        let (all, bad) = s.load().unwrap();
        assert!(bad.is_empty());
        assert_eq!(all.len(), 1, "the refused entry was never written");
        assert_eq!(all[0].spec.reservation().memory, Some(Bytes::from_gib(3)));
        assert!(s.remove("a").unwrap());
        assert!(!s.remove("a").unwrap());
        assert!(s.load().unwrap().0.is_empty());
    }

    #[test]
    fn unreadable_record_is_reported_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qos.redb");
        let s = QosStore::open(&path).unwrap();
        s.put(&entry("good", 1)).unwrap();
        {
            let txn = s.db.begin_write().unwrap();
            {
                let mut t = txn.open_table(ENTRIES).unwrap();
                t.insert("broken", b"{not json".as_slice()).unwrap();
            }
            txn.commit().unwrap();
        }
        let (all, bad) = s.load().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(bad.len(), 1);
        assert!(bad[0].contains("\"broken\""), "{}", bad[0]);
    }
}
