//! cgroup v1 `pids` controller files (same names as on v2).

pub use crate::cgroup::v2::pids::{CURRENT, MAX};
