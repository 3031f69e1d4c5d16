//! The agent's managed subtree (`daros` by default): the only cgroups it writes.
//!
//! Workloads are direct children of the managed root and exist in every
//! hierarchy the backend uses (on hybrid hosts also in the cgroup2 mount, where
//! eBPF programs attach).

use std::path::PathBuf;

use super::fs::CgroupError;
use super::path::CgroupPath;
use super::v1::blkio;
use super::{AnyBackend, CgroupBackend};

/// The managed root, created and prepared.
#[derive(Debug, Clone)]
pub struct ManagedRoot {
    backend: AnyBackend,
    root: CgroupPath,
    notes: Vec<String>,
}

impl ManagedRoot {
    /// Creates the managed root in every hierarchy and prepares it: on v2 it
    /// enables the controllers the parent offers for its children; on v1/hybrid it
    /// activates per-cgroup IO accounting on `disks`. What could not be done is
    /// kept in [`ManagedRoot::notes`].
    pub fn ensure(
        backend: AnyBackend,
        root: CgroupPath,
        disks: &[(u32, u32)],
    ) -> Result<Self, CgroupError> {
        if root.as_str().is_empty() {
            return Err(CgroupError::InvalidName {
                name: String::new(),
                reason: "the managed root must not be the hierarchy root",
            });
        }
        backend.create(&root)?;
        let notes = match &backend {
            AnyBackend::V2(b) => b.enable_subtree(&root)?,
            AnyBackend::V1(b) => match b.mount("blkio") {
                Some(m) => blkio::activate_accounting(&root.under(m), disks)
                    .into_iter()
                    .map(|e| format!("blkio accounting: {e}"))
                    .collect(),
                None => Vec::new(),
            },
        };
        Ok(ManagedRoot {
            backend,
            root,
            notes,
        })
    }

    /// The managed root's path.
    pub fn path(&self) -> &CgroupPath {
        &self.root
    }

    /// The backend in use.
    pub fn backend(&self) -> &AnyBackend {
        &self.backend
    }

    /// What could not be prepared (controllers not offered, accounting refused).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The path of workload `name` (one path component).
    pub fn workload(&self, name: &str) -> Result<CgroupPath, CgroupError> {
        self.root.join(name)
    }

    /// Creates the cgroup of workload `name` in every hierarchy.
    pub fn create_workload(&self, name: &str) -> Result<CgroupPath, CgroupError> {
        let cg = self.workload(name)?;
        self.backend.create(&cg)?;
        Ok(cg)
    }

    /// Removes the cgroup of workload `name`; fails while processes remain in it.
    pub fn remove_workload(&self, name: &str) -> Result<(), CgroupError> {
        let cg = self.workload(name)?;
        self.backend.remove(&cg)
    }

    /// Moves process `pid` into workload `name`.
    pub fn move_pid(&self, name: &str, pid: u32) -> Result<(), CgroupError> {
        let cg = self.workload(name)?;
        self.backend.add_pid(&cg, pid)
    }

    /// Names of the workloads currently under the managed root.
    pub fn workloads(&self) -> Result<Vec<String>, CgroupError> {
        let Some(primary) = self.backend.primary() else {
            return Ok(Vec::new());
        };
        let dir: PathBuf = self.root.under(primary);
        let rd = std::fs::read_dir(&dir).map_err(|source| CgroupError::Read {
            path: dir.clone(),
            source,
        })?;
        let mut names: Vec<String> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Removes the managed root itself (it must be empty); for tests and uninstall.
    pub fn remove_root(&self) -> Result<(), CgroupError> {
        self.backend.remove(&self.root)
    }
}
