//! `pids` controller files (same names on v1 and v2).

/// Number of tasks.
pub const CURRENT: &str = "pids.current";
/// Task limit.
pub const MAX: &str = "pids.max";
