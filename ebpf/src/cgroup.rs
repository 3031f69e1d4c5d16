//! Cgroup v2 identity and layout: the cgroup id (the inode number of the v2 cgroup directory,
//! what `bpf_skb_cgroup_id()` and `kn->id` return) and the v2 mount, found at run time so the
//! same code runs on hybrid hosts (`/sys/fs/cgroup/unified`) and pure v2 hosts (`/sys/fs/cgroup`).

use std::{
    fmt,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// `CGROUP2_SUPER_MAGIC` from `<linux/magic.h>`.
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// A cgroup v2 id: the inode number of the cgroup's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CgroupId(pub u64);

impl fmt::Display for CgroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl CgroupId {
    /// The id of the cgroup v2 directory at `path`; fails if `path` is not on cgroup2.
    pub fn of_path(path: &Path) -> Result<Self> {
        if !is_cgroup2(path)? {
            return Err(Error::NotCgroup2(path.to_owned()));
        }
        let meta = std::fs::metadata(path).map_err(|e| Error::io("reading cgroup", path, e))?;
        Ok(Self(meta.ino()))
    }
}

fn is_cgroup2(path: &Path) -> Result<bool> {
    match rustix::fs::statfs(path) {
        Ok(st) => Ok(st.f_type as u64 == CGROUP2_SUPER_MAGIC),
        Err(e) => Err(Error::io("statfs", path, e.into())),
    }
}

/// The cgroup v2 mount of this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupRoot {
    path: PathBuf,
}

impl CgroupRoot {
    /// Finds the v2 mount: `/sys/fs/cgroup` on a pure v2 host, `/sys/fs/cgroup/unified` on a
    /// hybrid one.
    pub fn detect() -> Result<Self> {
        for candidate in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            let path = Path::new(candidate);
            if path.is_dir() && is_cgroup2(path).unwrap_or(false) {
                return Ok(Self {
                    path: path.to_owned(),
                });
            }
        }
        Err(Error::NoCgroup2)
    }

    /// Uses `path` as the v2 mount (checked).
    pub fn at(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        if !is_cgroup2(&path)? {
            return Err(Error::NotCgroup2(path));
        }
        Ok(Self { path })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The v2 cgroup of the calling process (`0::/...` in `/proc/self/cgroup`).
    pub fn current(&self) -> Result<PathBuf> {
        Self::cgroup_of(&self.path, "/proc/self/cgroup")
    }

    /// The v2 cgroup of process `pid`.
    pub fn of_pid(&self, pid: u32) -> Result<PathBuf> {
        Self::cgroup_of(&self.path, &format!("/proc/{pid}/cgroup"))
    }

    fn cgroup_of(root: &Path, file: &str) -> Result<PathBuf> {
        let text = std::fs::read_to_string(file).map_err(|e| Error::io("reading", file, e))?;
        let rel = text
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .ok_or_else(|| Error::NotCgroup2(PathBuf::from(file)))?;
        Ok(root.join(rel.trim_start_matches('/')))
    }
}

/// Moves process `pid` into the cgroup at `path` (writes `cgroup.procs`).
pub fn move_process(path: &Path, pid: u32) -> Result<()> {
    let procs = path.join("cgroup.procs");
    std::fs::write(&procs, pid.to_string()).map_err(|e| Error::io("writing", procs, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_cgroup_path_is_refused_with_its_name() {
        let err = CgroupId::of_path(Path::new("/proc")).unwrap_err();
        assert!(
            err.to_string()
                .contains("/proc is not a cgroup v2 directory"),
            "{err}"
        );
    }

    #[test]
    fn root_id_is_the_directory_inode() {
        let root = CgroupRoot::detect().expect("hosts running D-AROS have a cgroup v2 mount");
        let id = CgroupId::of_path(root.path()).unwrap();
        assert_eq!(id.0, std::fs::metadata(root.path()).unwrap().ino());
        assert!(root.current().unwrap().starts_with(root.path()));
    }
}
