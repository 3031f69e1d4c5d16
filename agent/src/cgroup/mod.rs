//! The cgroup layer: mode detection, one backend per cgroup version behind one
//! trait, per-controller file names, and the agent's managed subtree.
//!
//! Everything that touches cgroupfs goes through [`fs`], whose errors carry the
//! path (and the data for writes).

pub mod fs;
pub mod layout;
pub mod managed;
pub mod parse;
pub mod path;
pub mod stats;
pub mod v1;
pub mod v2;

use std::path::{Path, PathBuf};

pub use fs::{CgroupError, OpenMode};
pub use layout::{CgroupLayout, CgroupMode};
pub use managed::ManagedRoot;
pub use path::CgroupPath;
pub use stats::CgroupStats;

/// One directory making up a cgroup: the hierarchy and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HierarchyDir {
    /// Controllers of the hierarchy joined by `,`; `unified` for the hybrid cgroup2
    /// mount, `v2` for the unified tree.
    pub hierarchy: String,
    /// The directory.
    pub path: PathBuf,
}

/// Operations every cgroup backend offers. Writes are allowed only on cgroups the
/// agent manages; callers enforce that through [`ManagedRoot`].
pub trait CgroupBackend {
    /// The host mode this backend serves.
    fn mode(&self) -> CgroupMode;
    /// The directories of `cg` in every hierarchy the backend uses.
    fn dirs(&self, cg: &CgroupPath) -> Vec<HierarchyDir>;
    /// Creates `cg` in every hierarchy.
    fn create(&self, cg: &CgroupPath) -> Result<(), CgroupError>;
    /// Removes `cg` from every hierarchy.
    fn remove(&self, cg: &CgroupPath) -> Result<(), CgroupError>;
    /// Moves a process into `cg` in every hierarchy.
    fn add_pid(&self, cg: &CgroupPath, pid: u32) -> Result<(), CgroupError>;
    /// Processes in `cg` (read from the primary hierarchy).
    fn procs(&self, cg: &CgroupPath) -> Result<Vec<u32>, CgroupError>;
    /// Opens the stat files of `cg`.
    fn open_stats(&self, cg: &CgroupPath, mode: OpenMode) -> Result<StatsReader, CgroupError>;
    /// Mount points discovery walks (their union names the cgroups).
    fn walk_roots(&self) -> Vec<PathBuf>;
    /// The hierarchy whose directory identifies a cgroup (its inode changes when
    /// the cgroup is recreated).
    fn primary(&self) -> Option<&Path>;
}

/// The backend chosen at run time for this host.
#[derive(Debug, Clone)]
pub enum AnyBackend {
    /// v1 hierarchies, possibly with a controller-less cgroup2 mount (hybrid).
    V1(v1::V1Backend),
    /// The unified hierarchy.
    V2(v2::V2Backend),
}

impl AnyBackend {
    /// The backend for `layout`.
    pub fn from_layout(layout: &CgroupLayout) -> Result<Self, CgroupError> {
        match (layout.mode, &layout.v2) {
            (CgroupMode::V2, Some(root)) => Ok(AnyBackend::V2(v2::V2Backend::new(root.clone()))),
            (CgroupMode::V2, None) => Err(CgroupError::Unsupported(
                "v2 mode without a cgroup2 mount".into(),
            )),
            (CgroupMode::Hybrid | CgroupMode::V1, _) => {
                Ok(AnyBackend::V1(v1::V1Backend::new(layout)))
            }
        }
    }

    /// Detects the host layout and picks the backend.
    pub fn detect() -> Result<Self, CgroupError> {
        Self::from_layout(&CgroupLayout::detect()?)
    }
}

/// Open stat files of one cgroup, per backend.
#[derive(Debug)]
pub enum StatsReader {
    /// v1/hybrid files.
    V1(v1::V1Stats),
    /// v2 files.
    V2(v2::V2Stats),
}

impl StatsReader {
    /// Reads the counters into `out`, reusing `buf`.
    pub fn read(&mut self, buf: &mut Vec<u8>, out: &mut CgroupStats) -> Result<(), CgroupError> {
        match self {
            StatsReader::V1(r) => r.read(buf, out),
            StatsReader::V2(r) => r.read(buf, out),
        }
    }

    /// Areas this cgroup cannot report, with the reason.
    pub fn unavailable(&self) -> &[(&'static str, String)] {
        match self {
            StatsReader::V1(r) => r.unavailable(),
            StatsReader::V2(r) => r.unavailable(),
        }
    }
}

fn parse_procs(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

impl CgroupBackend for AnyBackend {
    fn mode(&self) -> CgroupMode {
        match self {
            AnyBackend::V1(b) if b.unified().is_some() => CgroupMode::Hybrid,
            AnyBackend::V1(_) => CgroupMode::V1,
            AnyBackend::V2(_) => CgroupMode::V2,
        }
    }

    fn dirs(&self, cg: &CgroupPath) -> Vec<HierarchyDir> {
        match self {
            AnyBackend::V1(b) => b.dirs(cg),
            AnyBackend::V2(b) => vec![HierarchyDir {
                hierarchy: "v2".into(),
                path: b.dir(cg),
            }],
        }
    }

    fn create(&self, cg: &CgroupPath) -> Result<(), CgroupError> {
        match self {
            AnyBackend::V1(b) => b.create(cg),
            AnyBackend::V2(b) => b.create(cg),
        }
    }

    fn remove(&self, cg: &CgroupPath) -> Result<(), CgroupError> {
        match self {
            AnyBackend::V1(b) => b.remove(cg),
            AnyBackend::V2(b) => b.remove(cg),
        }
    }

    fn add_pid(&self, cg: &CgroupPath, pid: u32) -> Result<(), CgroupError> {
        match self {
            AnyBackend::V1(b) => b.add_pid(cg, pid),
            AnyBackend::V2(b) => b.add_pid(cg, pid),
        }
    }

    fn procs(&self, cg: &CgroupPath) -> Result<Vec<u32>, CgroupError> {
        let Some(primary) = self.primary() else {
            return Ok(Vec::new());
        };
        let text = fs::read_string(&cg.under(primary).join(v2::core::PROCS))?;
        Ok(parse_procs(&text))
    }

    fn open_stats(&self, cg: &CgroupPath, mode: OpenMode) -> Result<StatsReader, CgroupError> {
        match self {
            AnyBackend::V1(b) => v1::V1Stats::open(b, cg, mode).map(StatsReader::V1),
            AnyBackend::V2(b) => v2::V2Stats::open(&b.dir(cg), mode).map(StatsReader::V2),
        }
    }

    fn walk_roots(&self) -> Vec<PathBuf> {
        match self {
            AnyBackend::V1(b) => b
                .hierarchies()
                .into_iter()
                .map(|(_, p)| p.to_path_buf())
                .collect(),
            AnyBackend::V2(b) => vec![b.root().to_path_buf()],
        }
    }

    fn primary(&self) -> Option<&Path> {
        match self {
            AnyBackend::V1(b) => b
                .mount("memory")
                .or_else(|| b.mount("cpuacct"))
                .or_else(|| b.mount("cpu"))
                .or_else(|| b.mount("pids"))
                .or_else(|| b.unified()),
            AnyBackend::V2(b) => Some(b.root()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procs_parsing() {
        assert_eq!(parse_procs("12\n34\n\n"), vec![12, 34]);
    }

    #[test]
    fn backend_matches_host_mode() {
        let layout = CgroupLayout::detect().unwrap();
        let b = AnyBackend::from_layout(&layout).unwrap();
        assert_eq!(b.mode(), layout.mode);
        assert!(b.primary().is_some());
        assert!(!b.walk_roots().is_empty());
    }
}
