//! The workload index: cgroup id -> slot, an array the program probes by open addressing
//! (`cg_find_slot` in `net.bpf.c`). Userspace keeps a copy, so lookups cost no syscall and an
//! insert knows the free positions; the array is scanned once when opened.

use std::collections::BTreeMap;

use aya::maps::{Array, MapData};

use crate::{
    abi::{INDEX_PROBES, INDEX_SIZE, IndexEntry, index_home},
    error::{Error, Result},
    objects::net_names as n,
};

/// In-memory copy of the index: cgroup id -> (position, slot).
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotIndex {
    entries: BTreeMap<u64, (u32, u32)>,
    taken: BTreeMap<u32, u64>,
}

impl SlotIndex {
    pub(crate) fn load(map: &Array<MapData, IndexEntry>) -> Result<Self> {
        let mut index = Self::default();
        for (pos, item) in map.iter().enumerate() {
            let e = item.map_err(|e| Error::map(n::INDEX, "scanning", e))?;
            if e.cgroup_id != 0 {
                let pos = u32::try_from(pos).unwrap_or(u32::MAX);
                index.entries.insert(e.cgroup_id, (pos, e.slot));
                index.taken.insert(pos, e.cgroup_id);
            }
        }
        Ok(index)
    }

    pub(crate) fn slot(&self, cgroup_id: u64) -> Option<u32> {
        self.entries.get(&cgroup_id).map(|(_, s)| *s)
    }

    /// cgroup id -> slot.
    pub(crate) fn keys(&self) -> BTreeMap<u64, u32> {
        self.entries.iter().map(|(k, (_, s))| (*k, *s)).collect()
    }

    pub(crate) fn insert(
        &mut self,
        map: &mut Array<MapData, IndexEntry>,
        cgroup_id: u64,
        slot: u32,
    ) -> Result<()> {
        let home = index_home(cgroup_id);
        let pos = (0..INDEX_PROBES)
            .map(|i| (home + i) % INDEX_SIZE)
            .find(|p| !self.taken.contains_key(p))
            .ok_or(Error::IndexFull {
                cgroup: cgroup_id,
                probes: INDEX_PROBES,
            })?;
        // {0, slot} first: a concurrent reader never sees the new id with an old slot.
        let write = |map: &mut Array<MapData, IndexEntry>, e: IndexEntry| {
            map.set(pos, e, 0)
                .map_err(|e| Error::map(n::INDEX, "writing", e))
        };
        write(
            map,
            IndexEntry {
                cgroup_id: 0,
                slot,
                _pad: 0,
            },
        )?;
        write(
            map,
            IndexEntry {
                cgroup_id,
                slot,
                _pad: 0,
            },
        )?;
        self.entries.insert(cgroup_id, (pos, slot));
        self.taken.insert(pos, cgroup_id);
        Ok(())
    }

    pub(crate) fn remove(
        &mut self,
        map: &mut Array<MapData, IndexEntry>,
        cgroup_id: u64,
    ) -> Result<bool> {
        let Some((pos, slot)) = self.entries.remove(&cgroup_id) else {
            return Ok(false);
        };
        self.taken.remove(&pos);
        map.set(
            pos,
            IndexEntry {
                cgroup_id: 0,
                slot,
                _pad: 0,
            },
            0,
        )
        .map_err(|e| Error::map(n::INDEX, "clearing", e))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::abi::{INDEX_SIZE, index_home};

    #[test]
    fn sequential_cgroup_ids_spread_over_the_index() {
        // Inode numbers of cgroups created one after another are close together.
        let mut homes: Vec<u32> = (5000..6024u64).map(index_home).collect();
        assert!(homes.iter().all(|h| *h < INDEX_SIZE));
        homes.sort_unstable();
        homes.dedup();
        assert!(
            homes.len() > 1000,
            "1024 ids -> {} distinct homes",
            homes.len()
        );
    }
}
