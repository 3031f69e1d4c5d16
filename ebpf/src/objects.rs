//! The eBPF objects compiled by `build.rs` from `src/bpf/*.bpf.c`, embedded in the crate, and
//! the names of their maps and programs.

/// cgroup_skb accounting and caps (`net.bpf.c`).
pub fn net() -> &'static [u8] {
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/net.bpf.o"))
}

/// Scheduler tracepoints (`sched.bpf.c`).
pub fn sched() -> &'static [u8] {
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sched.bpf.o"))
}

/// A cgroup_skb program that only returns "pass": the benchmark's baseline (`noop.bpf.c`).
pub fn noop() -> &'static [u8] {
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/noop.bpf.o"))
}

/// FNV-1a over an object: identifies the exact build of the programs in the pinned meta map.
pub fn object_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

pub(crate) mod net_names {
    pub const INDEX: &str = "cg_index";
    pub const COUNTERS: &str = "cg_counters";
    pub const CFG: &str = "cg_cfg";
    pub const STATE: &str = "cg_state";
    pub const STATS: &str = "cg_net_stats";
    pub const META: &str = "cg_net_meta";
    pub const EVENTS: &str = "cg_events";
    pub const PROG_EGRESS: &str = "cg_egress";
    pub const PROG_INGRESS: &str = "cg_ingress";
}

pub(crate) mod sched_names {
    pub const STATS: &str = "cg_sched";
    pub const OVERFLOW: &str = "cg_sched_overflow";
    pub const TASK_TS: &str = "cg_task_ts";
    pub const META: &str = "cg_sched_meta";
    pub const PROG_SWITCH: &str = "cg_sched_switch";
    pub const PROG_WAKEUP: &str = "cg_sched_wakeup";
    pub const PROG_WAKEUP_NEW: &str = "cg_sched_wakeup_new";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_bpf_elf_files() {
        for obj in [net(), sched(), noop()] {
            assert_eq!(&obj[..4], b"\x7fELF");
            assert_eq!(
                u16::from_le_bytes([obj[18], obj[19]]),
                247,
                "e_machine = EM_BPF"
            );
        }
        assert_ne!(object_hash(net()), object_hash(sched()));
    }
}
