//! cgroup v1 `cpuacct` controller files.

/// Total CPU time of the group and its descendants, in nanoseconds.
pub const USAGE: &str = "cpuacct.usage";
/// User CPU time in nanoseconds.
pub const USAGE_USER: &str = "cpuacct.usage_user";
/// System CPU time in nanoseconds.
pub const USAGE_SYS: &str = "cpuacct.usage_sys";
