//! Raw counters read from one cgroup, the same shape on every backend.
//!
//! `None` means the backend cannot provide the value on this host; the reader
//! says why in its `unavailable` list.

pub use super::parse::{Psi, PsiLine};

/// Raw counters of one cgroup at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupStats {
    /// CPU accounting.
    pub cpu: Option<CpuStats>,
    /// Memory accounting.
    pub memory: Option<MemoryStats>,
    /// Block IO per device (`None`: no IO accounting for this cgroup).
    pub io: Option<Vec<IoStats>>,
    /// Number of tasks.
    pub pids: Option<u64>,
    /// Pressure stall information.
    pub psi: PsiStats,
}

/// CPU counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// Total CPU time in nanoseconds.
    pub usage_ns: u64,
    /// User time in nanoseconds, where reported.
    pub user_ns: Option<u64>,
    /// System time in nanoseconds, where reported.
    pub system_ns: Option<u64>,
    /// CFS bandwidth counters, where the cpu controller is active.
    pub throttling: Option<Throttling>,
}

/// CFS bandwidth counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttling {
    /// Enforcement periods elapsed.
    pub periods: u64,
    /// Periods in which the group was throttled.
    pub throttled_periods: u64,
    /// Total time throttled in nanoseconds.
    pub throttled_ns: u64,
}

/// Memory counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Memory charged to the group (`memory.current` / `memory.usage_in_bytes`).
    pub current: u64,
    /// Anonymous memory.
    pub anon: u64,
    /// Page cache (including tmpfs/shmem).
    pub file: u64,
    /// Event counters.
    pub events: MemoryEvents,
}

/// Memory event counters (v2 `memory.events`; v1 has only `max` (failcnt) and `oom_kill`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryEvents {
    /// Reclaimed while below memory.low.
    pub low: Option<u64>,
    /// Throttled by memory.high.
    pub high: Option<u64>,
    /// Hit the limit.
    pub max: Option<u64>,
    /// OOM situations.
    pub oom: Option<u64>,
    /// Processes OOM-killed.
    pub oom_kill: Option<u64>,
}

/// IO counters for one block device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Bytes read.
    pub rbytes: u64,
    /// Bytes written.
    pub wbytes: u64,
    /// Read operations.
    pub rios: u64,
    /// Write operations.
    pub wios: u64,
    /// Bytes discarded.
    pub dbytes: u64,
    /// Discard operations.
    pub dios: u64,
}

/// Pressure of one cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiStats {
    /// CPU pressure.
    pub cpu: Option<Psi>,
    /// Memory pressure.
    pub memory: Option<Psi>,
    /// IO pressure.
    pub io: Option<Psi>,
}

impl IoStats {
    /// Finds or inserts the entry for a device in `list`.
    pub fn entry(list: &mut Vec<IoStats>, major: u32, minor: u32) -> &mut IoStats {
        let idx = match list
            .iter()
            .position(|d| d.major == major && d.minor == minor)
        {
            Some(i) => i,
            None => {
                list.push(IoStats {
                    major,
                    minor,
                    ..IoStats::default()
                });
                list.len() - 1
            }
        };
        &mut list[idx]
    }
}
