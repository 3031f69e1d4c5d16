//! cgroup v1 `cpuset` controller files.
//!
//! A new v1 cpuset starts with empty `cpus`/`mems` and refuses tasks until they
//! are set, so the agent copies the parent's values into each cgroup it creates.

use std::path::Path;

use crate::cgroup::fs::{self, CgroupError};

/// CPUs the group may run on.
pub const CPUS: &str = "cpuset.cpus";
/// Memory nodes the group may allocate from.
pub const MEMS: &str = "cpuset.mems";
/// `1`: no sibling may share these CPUs (needs an exclusive parent).
pub const CPU_EXCLUSIVE: &str = "cpuset.cpu_exclusive";

/// Copies `cpus` and `mems` from `parent` into `dir` where `dir`'s are empty.
pub fn inherit(dir: &Path, parent: &Path) -> Result<(), CgroupError> {
    for f in [CPUS, MEMS] {
        let own = fs::read_string(&dir.join(f))?;
        if own.trim().is_empty() {
            let value = fs::read_string(&parent.join(f))?;
            let value = value.trim();
            if !value.is_empty() {
                fs::write(&dir.join(f), value)?;
            }
        }
    }
    Ok(())
}
