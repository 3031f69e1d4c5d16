//! Read access to the pinned network maps: usable by the owner and, without any lock, by other
//! processes (`daros-bpf stats`, tests) while the owner runs or after it died.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use aya::maps::{Array, Map, MapData, MapType, PerCpuArray};

use super::{CapStatus, NetCounters, NetStats, WorkloadNet, index::SlotIndex};
use crate::{
    abi::{self, IndexEntry, NetCfg, NetCountersRaw, NetState, NetStatsRaw},
    bpffs::PinDir,
    cgroup::CgroupId,
    error::{Error, Result},
    objects::net_names as n,
    pins::{self, MapShape},
};

pub(crate) fn shapes(max_slots: u32) -> [MapShape; 7] {
    let size = |s: usize| u32::try_from(s).unwrap_or(u32::MAX);
    [
        MapShape {
            name: n::INDEX,
            kind: MapType::Array,
            key: 4,
            value: size(size_of::<IndexEntry>()),
            max_entries: Some(abi::INDEX_SIZE),
        },
        MapShape {
            name: n::COUNTERS,
            kind: MapType::PerCpuArray,
            key: 4,
            value: size(size_of::<NetCountersRaw>()),
            max_entries: Some(max_slots),
        },
        MapShape {
            name: n::CFG,
            kind: MapType::Array,
            key: 4,
            value: size(size_of::<NetCfg>()),
            max_entries: Some(max_slots),
        },
        MapShape {
            name: n::STATE,
            kind: MapType::Array,
            key: 4,
            value: size(size_of::<NetState>()),
            max_entries: Some(max_slots),
        },
        MapShape {
            name: n::STATS,
            kind: MapType::PerCpuArray,
            key: 4,
            value: size(size_of::<NetStatsRaw>()),
            max_entries: Some(1),
        },
        MapShape {
            name: n::META,
            kind: MapType::Array,
            key: 4,
            value: size(size_of::<abi::Meta>()),
            max_entries: Some(1),
        },
        MapShape {
            name: n::EVENTS,
            kind: MapType::RingBuf,
            key: 0,
            value: 0,
            max_entries: None,
        },
    ]
}

/// Typed handles on the pinned network maps.
pub struct NetReader {
    pub(crate) dir: PathBuf,
    pub(crate) max_slots: u32,
    pub(crate) index: Array<MapData, IndexEntry>,
    pub(crate) slots: SlotIndex,
    pub(crate) counters: PerCpuArray<MapData, NetCountersRaw>,
    pub(crate) cfg: Array<MapData, NetCfg>,
    pub(crate) state: Array<MapData, NetState>,
    pub(crate) stats: PerCpuArray<MapData, NetStatsRaw>,
}

impl std::fmt::Debug for NetReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetReader")
            .field("dir", &self.dir)
            .field("max_slots", &self.max_slots)
            .finish()
    }
}

impl NetReader {
    /// Opens the network maps pinned under `pins` (read side; takes no lock).
    pub fn open(pins: &PinDir) -> Result<Self> {
        let dir = pins.sub("net");
        let meta = pins::read_meta(&dir, n::META)?;
        Self::open_dir(&dir, meta.max_slots)
    }

    pub(crate) fn open_dir(dir: &Path, max_slots: u32) -> Result<Self> {
        let [index, counters, cfg, state, stats, _meta, _events] = shapes(max_slots);
        let open = |s: &MapShape| pins::open_map(dir, s);
        let typed = |name: &'static str, e| Error::map(name, "typing", e);
        let index: Array<MapData, IndexEntry> =
            Array::try_from(Map::Array(open(&index)?)).map_err(|e| typed(n::INDEX, e))?;
        Ok(Self {
            dir: dir.to_owned(),
            max_slots,
            slots: SlotIndex::load(&index)?,
            index,
            counters: PerCpuArray::try_from(Map::PerCpuArray(open(&counters)?))
                .map_err(|e| typed(n::COUNTERS, e))?,
            cfg: Array::try_from(Map::Array(open(&cfg)?)).map_err(|e| typed(n::CFG, e))?,
            state: Array::try_from(Map::Array(open(&state)?)).map_err(|e| typed(n::STATE, e))?,
            stats: PerCpuArray::try_from(Map::PerCpuArray(open(&stats)?))
                .map_err(|e| typed(n::STATS, e))?,
        })
    }

    /// Number of workload slots.
    pub fn max_slots(&self) -> u32 {
        self.max_slots
    }

    /// Rereads the workload index (a reader in another process than the owner sees
    /// workloads registered after it opened only after this).
    pub fn refresh(&mut self) -> Result<()> {
        self.slots = SlotIndex::load(&self.index)?;
        Ok(())
    }

    /// Every key of the workload index: cgroup id -> slot.
    pub(crate) fn keys(&self) -> Result<BTreeMap<u64, u32>> {
        Ok(self.slots.keys())
    }

    pub(crate) fn cfg_at(&self, slot: u32) -> Result<NetCfg> {
        self.cfg
            .get(&slot, 0)
            .map_err(|e| Error::map(n::CFG, "reading", e))
    }

    pub(crate) fn counters_at(&self, slot: u32) -> Result<NetCounters> {
        let values = self
            .counters
            .get(&slot, 0)
            .map_err(|e| Error::map(n::COUNTERS, "reading", e))?;
        let mut out = NetCounters::default();
        for cpu in values.iter() {
            out.egress.add(&cpu.dir[abi::EGRESS]);
            out.ingress.add(&cpu.dir[abi::INGRESS]);
        }
        Ok(out)
    }

    /// Counters of the workload whose cgroup is `cgroup` (or a member of it).
    pub fn counters(&self, cgroup: CgroupId) -> Result<NetCounters> {
        let slot = self
            .slots
            .slot(cgroup.0)
            .ok_or(Error::UnknownWorkload(cgroup))?;
        self.counters_at(slot)
    }

    /// One workload with counters and cap state.
    pub fn workload(&self, cgroup: CgroupId) -> Result<WorkloadNet> {
        let keys = self.keys()?;
        let slot = *keys.get(&cgroup.0).ok_or(Error::UnknownWorkload(cgroup))?;
        self.describe(slot, &keys)
    }

    /// All registered workloads.
    pub fn workloads(&self) -> Result<Vec<WorkloadNet>> {
        let keys = self.keys()?;
        let mut slots: Vec<u32> = keys.values().copied().collect();
        slots.sort_unstable();
        slots.dedup();
        slots.into_iter().map(|s| self.describe(s, &keys)).collect()
    }

    fn describe(&self, slot: u32, keys: &BTreeMap<u64, u32>) -> Result<WorkloadNet> {
        let cfg = self.cfg_at(slot)?;
        let state = self
            .state
            .get(&slot, 0)
            .map_err(|e| Error::map(n::STATE, "reading", e))?;
        let members = keys
            .iter()
            .filter(|(k, s)| **s == slot && **k != cfg.cgroup_id)
            .map(|(k, _)| CgroupId(*k))
            .collect();
        Ok(WorkloadNet {
            cgroup: CgroupId(cfg.cgroup_id),
            members,
            counters: self.counters_at(slot)?,
            egress: CapStatus::from_cfg(
                &cfg.dir[abi::EGRESS],
                state.dir[abi::EGRESS].throttled_since_ns,
            ),
            ingress: CapStatus::from_cfg(
                &cfg.dir[abi::INGRESS],
                state.dir[abi::INGRESS].throttled_since_ns,
            ),
        })
    }

    /// Node-wide counters.
    pub fn stats(&self) -> Result<NetStats> {
        let values = self
            .stats
            .get(&0, 0)
            .map_err(|e| Error::map(n::STATS, "reading", e))?;
        let mut out = NetStats::default();
        for cpu in values.iter() {
            out.unknown_packets += cpu.unknown_packets;
            out.unknown_bytes += cpu.unknown_bytes;
            out.events_lost += cpu.events_lost;
        }
        Ok(out)
    }
}
