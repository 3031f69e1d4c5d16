//! Core files of every v1 cgroup directory.

/// Processes (thread-group leaders) in the cgroup; writing a pid moves the whole process.
pub const PROCS: &str = "cgroup.procs";
/// Children inherit `cpuset` configuration when set to 1.
pub const CLONE_CHILDREN: &str = "cgroup.clone_children";
