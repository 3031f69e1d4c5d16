//! cgroup v2 `memory` controller files.

use crate::cgroup::parse::flat_keyed;
use crate::cgroup::stats::MemoryEvents;

/// Current usage in bytes.
pub const CURRENT: &str = "memory.current";
/// Breakdown (anon, file, ...).
pub const STAT: &str = "memory.stat";
/// Hierarchical event counters.
pub const EVENTS: &str = "memory.events";
/// Hard protection.
pub const MIN: &str = "memory.min";
/// Best-effort protection.
pub const LOW: &str = "memory.low";
/// Throttle limit.
pub const HIGH: &str = "memory.high";
/// Hard limit.
pub const MAX: &str = "memory.max";

/// Extracts `(anon, file)` from `memory.stat`.
pub fn parse_stat(buf: &[u8]) -> (u64, u64) {
    let (mut anon, mut file) = (0, 0);
    flat_keyed(buf, |k, v| match k {
        b"anon" => anon = v,
        b"file" => file = v,
        _ => {}
    });
    (anon, file)
}

/// Parses `memory.events`.
pub fn parse_events(buf: &[u8]) -> MemoryEvents {
    let mut e = MemoryEvents::default();
    flat_keyed(buf, |k, v| match k {
        b"low" => e.low = Some(v),
        b"high" => e.high = Some(v),
        b"max" => e.max = Some(v),
        b"oom" => e.oom = Some(v),
        b"oom_kill" => e.oom_kill = Some(v),
        _ => {}
    });
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_events() {
        let stat = b"anon 67248128\nfile 4096000\nkernel 1200000\nkernel_stack 16384\npagetables 180224\nsock 0\nshmem 0\nfile_mapped 0\nfile_dirty 0\n";
        assert_eq!(parse_stat(stat), (67_248_128, 4_096_000));
        let ev = parse_events(b"low 0\nhigh 12\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n");
        assert_eq!(ev.high, Some(12));
        assert_eq!(ev.oom_kill, Some(1));
        assert_eq!(ev.low, Some(0));
    }
}
