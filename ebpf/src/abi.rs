//! `#[repr(C)]` mirrors of the structs in `src/bpf/cg_abi.h`, shared with the eBPF programs
//! through maps and the event ring buffer. A unit test checks every size and field offset
//! against the layout clang computed for the BPF target (`$OUT_DIR/c_layout.rs`).

#![allow(missing_docs)] // field meanings are documented once, in cg_abi.h

/// Version of the network maps' layouts; bumped with `CG_NET_ABI` in `cg_abi.h`.
pub const NET_ABI: u32 = 2;
/// Version of the scheduler maps' layouts; bumped with `CG_SCHED_ABI` in `cg_abi.h`.
pub const SCHED_ABI: u32 = 1;
/// Index of the egress half in per-direction arrays.
pub const EGRESS: usize = 0;
/// Index of the ingress half in per-direction arrays.
pub const INGRESS: usize = 1;
/// Default number of workload slots (`CG_MAX_WORKLOADS`).
pub const DEFAULT_MAX_SLOTS: u32 = 1024;
/// Capacity of the cgroup-id keyed scheduler map (`CG_MAX_CGROUP_KEYS`).
pub const MAX_CGROUP_KEYS: u32 = 4096;
/// log2 of the workload index size (`CG_INDEX_BITS`).
pub const INDEX_BITS: u32 = 14;
/// Entries of the workload index.
pub const INDEX_SIZE: u32 = 1 << INDEX_BITS;
/// Positions probed from a cgroup id's home position.
pub const INDEX_PROBES: u32 = 4;
/// Multiplier of the index hash (`CG_INDEX_MULT`).
pub const INDEX_MULT: u64 = 0x9E37_79B9_7F4A_7C15;

/// Home position of a cgroup id in the workload index, as the program computes it.
pub fn index_home(cgroup_id: u64) -> u32 {
    (cgroup_id.wrapping_mul(INDEX_MULT) >> (64 - INDEX_BITS)) as u32
}

/// Fixed point of [`BucketCfg::ns_per_byte`].
pub const NS_PER_BYTE_SHIFT: u32 = 20;
/// [`BucketCfg::flags`]: mark ECN CE on ingress packets while in debt.
pub const CFG_F_ECN: u32 = 1;
/// Number of log2 buckets in [`SchedStats::wait_hist`].
pub const HIST_SLOTS: usize = 32;

/// Event kinds (`CG_EV_*`).
pub const EV_THROTTLE_START: u32 = 1;
pub const EV_THROTTLE_STOP: u32 = 2;
pub const EV_DROPS: u32 = 3;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexEntry {
    pub cgroup_id: u64,
    pub slot: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirCountersRaw {
    pub bytes: u64,
    pub packets: u64,
    pub drop_bytes: u64,
    pub drop_packets: u64,
    pub marked_packets: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetCountersRaw {
    pub dir: [DirCountersRaw; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketCfg {
    pub ns_per_byte: u64,
    pub burst_ns: u64,
    pub debt_ns: u64,
    pub rate_bps: u64,
    pub configured_bps: u64,
    pub floor_cap_bps: u64,
    pub burst_bytes: u64,
    pub configured_burst: u64,
    pub configured_debt_ms: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetCfg {
    pub cgroup_id: u64,
    pub _reserved: u64,
    pub dir: [BucketCfg; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketState {
    pub tat_ns: u64,
    pub throttled_since_ns: u64,
    pub last_drop_event_ns: u64,
    pub unreported_drops: u64,
    pub _pad: [u64; 4],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetState {
    pub dir: [BucketState; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStatsRaw {
    pub unknown_packets: u64,
    pub unknown_bytes: u64,
    pub events_lost: u64,
    pub _pad: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub abi: u32,
    pub max_slots: u32,
    pub object_hash: u64,
    pub created_unix_ns: u64,
    pub _reserved: [u64; 5],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventRaw {
    pub ts_ns: u64,
    pub cgroup_id: u64,
    pub kind: u32,
    pub dir: u32,
    pub value: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedStatsRaw {
    pub oncpu_ns: u64,
    pub slices: u64,
    pub wait_ns: u64,
    pub waits: u64,
    pub wait_max_ns: u64,
    pub _pad: [u64; 3],
    pub wait_hist: [u64; HIST_SLOTS],
}

impl Default for SchedStatsRaw {
    fn default() -> Self {
        Self {
            oncpu_ns: 0,
            slices: 0,
            wait_ns: 0,
            waits: 0,
            wait_max_ns: 0,
            _pad: [0; 3],
            wait_hist: [0; HIST_SLOTS],
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskTs {
    pub enqueued_ns: u64,
    pub runtime_seen: u64,
}

macro_rules! pod {
    ($($t:ty),+) => {$(
        // SAFETY: #[repr(C)], only u32/u64 fields and arrays of them, no padding holes
        // (checked against the C layout by the test below), every bit pattern is valid.
        #[allow(unsafe_code)]
        unsafe impl aya::Pod for $t {}
    )+};
}
pod!(
    IndexEntry,
    DirCountersRaw,
    NetCountersRaw,
    BucketCfg,
    NetCfg,
    BucketState,
    NetState,
    NetStatsRaw,
    Meta,
    EventRaw,
    SchedStatsRaw,
    TaskTs
);

impl EventRaw {
    /// Decodes a ring buffer record; `None` if it is shorter than the struct.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let field = |at: usize, n: usize| bytes.get(at..at + n);
        let u64_at = |at| {
            field(at, 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_ne_bytes)
        };
        let u32_at = |at| {
            field(at, 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_ne_bytes)
        };
        Some(Self {
            ts_ns: u64_at(0)?,
            cgroup_id: u64_at(8)?,
            kind: u32_at(16)?,
            dir: u32_at(20)?,
            value: u64_at(24)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// (C struct name, size, [(field, offset)]) as clang laid them out for `-target bpf`.
    type Layout = (&'static str, usize, &'static [(&'static str, usize)]);
    const C_LAYOUT: &[Layout] = include!(concat!(env!("OUT_DIR"), "/c_layout.rs"));

    macro_rules! rust_layout {
        ($($c:literal => $t:ty { $($f:ident),* $(,)? }),+ $(,)?) => {
            vec![$(($c, size_of::<$t>(), vec![$((stringify!($f), offset_of!($t, $f))),*])),+]
        };
    }

    #[test]
    fn rust_mirrors_match_the_c_layout() {
        let rust = rust_layout!(
            "cg_index_entry" => IndexEntry { cgroup_id, slot, _pad },
            "cg_dir_counters" => DirCountersRaw { bytes, packets, drop_bytes, drop_packets, marked_packets },
            "cg_net_counters" => NetCountersRaw { dir },
            "cg_bucket_cfg" => BucketCfg { ns_per_byte, burst_ns, debt_ns, rate_bps, configured_bps, floor_cap_bps, burst_bytes, configured_burst, configured_debt_ms, flags },
            "cg_net_cfg" => NetCfg { cgroup_id, _reserved, dir },
            "cg_bucket_state" => BucketState { tat_ns, throttled_since_ns, last_drop_event_ns, unreported_drops, _pad },
            "cg_net_state" => NetState { dir },
            "cg_net_stats" => NetStatsRaw { unknown_packets, unknown_bytes, events_lost, _pad },
            "cg_meta" => Meta { abi, max_slots, object_hash, created_unix_ns, _reserved },
            "cg_event" => EventRaw { ts_ns, cgroup_id, kind, dir, value },
            "cg_sched_stats" => SchedStatsRaw { oncpu_ns, slices, wait_ns, waits, wait_max_ns, _pad, wait_hist },
            "cg_task_ts" => TaskTs { enqueued_ns, runtime_seen },
        );
        assert_eq!(
            C_LAYOUT.len(),
            rust.len(),
            "every C struct has a mirror: {C_LAYOUT:?}"
        );
        for (name, c_size, c_fields) in C_LAYOUT {
            let (_, r_size, r_fields) = rust
                .iter()
                .find(|(n, _, _)| n == name)
                .unwrap_or_else(|| panic!("no Rust mirror for struct {name}"));
            assert_eq!(c_size, r_size, "size of {name}");
            let c: Vec<(&str, usize)> = c_fields.to_vec();
            let r: Vec<(&str, usize)> = r_fields.clone();
            assert_eq!(c, r, "fields and offsets of {name}");
        }
    }

    #[test]
    fn abi_constants_match_the_header() {
        let header = include_str!("bpf/cg_abi.h");
        let define = |name: &str| -> u64 {
            let line = header
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("{name} not in cg_abi.h"));
            let value = line.split_whitespace().nth(2).unwrap();
            value.trim_end_matches("ULL").parse().unwrap()
        };
        assert_eq!(define("CG_NET_ABI"), u64::from(NET_ABI));
        assert_eq!(define("CG_SCHED_ABI"), u64::from(SCHED_ABI));
        assert_eq!(define("CG_MAX_WORKLOADS"), u64::from(DEFAULT_MAX_SLOTS));
        assert_eq!(define("CG_MAX_CGROUP_KEYS"), u64::from(MAX_CGROUP_KEYS));
        assert_eq!(define("CG_NS_PER_BYTE_SHIFT"), u64::from(NS_PER_BYTE_SHIFT));
        assert_eq!(define("CG_INDEX_BITS"), u64::from(INDEX_BITS));
        assert_eq!(define("CG_INDEX_PROBES"), u64::from(INDEX_PROBES));
        let mult = header
            .lines()
            .find(|l| l.starts_with("#define CG_INDEX_MULT "))
            .unwrap();
        let mult = mult
            .split_whitespace()
            .nth(2)
            .unwrap()
            .trim_end_matches("ULL")
            .trim_start_matches("0x");
        assert_eq!(u64::from_str_radix(mult, 16).unwrap(), INDEX_MULT);
        assert_eq!(define("CG_HIST_SLOTS"), HIST_SLOTS as u64);
        assert_eq!(define("CG_CFG_F_ECN"), u64::from(CFG_F_ECN));
        assert_eq!(define("CG_EV_THROTTLE_START"), u64::from(EV_THROTTLE_START));
        assert_eq!(define("CG_EV_THROTTLE_STOP"), u64::from(EV_THROTTLE_STOP));
        assert_eq!(define("CG_EV_DROPS"), u64::from(EV_DROPS));
    }

    #[test]
    fn event_decodes_from_ring_buffer_bytes() {
        let ev = EventRaw {
            ts_ns: 7,
            cgroup_id: 42,
            kind: EV_DROPS,
            dir: 1,
            value: 9,
        };
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&ev.ts_ns.to_ne_bytes());
        bytes.extend_from_slice(&ev.cgroup_id.to_ne_bytes());
        bytes.extend_from_slice(&ev.kind.to_ne_bytes());
        bytes.extend_from_slice(&ev.dir.to_ne_bytes());
        bytes.extend_from_slice(&ev.value.to_ne_bytes());
        assert_eq!(EventRaw::from_bytes(&bytes), Some(ev));
        assert_eq!(EventRaw::from_bytes(&bytes[..31]), None);
    }
}
