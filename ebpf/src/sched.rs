//! Per-cgroup on-CPU time and run-queue latency from `tp_btf` programs on `sched_switch`,
//! `sched_wakeup` and `sched_wakeup_new`. Every cgroup whose tasks run gets an entry (keyed by
//! the task's v2 cgroup id); the owner prunes entries of cgroups that are gone.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use aya::{
    Btf, EbpfLoader,
    maps::{HashMap as BpfHashMap, Map, MapData, MapType, PerCpuArray},
    programs::{BtfTracePoint, links::FdLink},
};
use serde::Serialize;

use crate::{
    abi::{self, HIST_SLOTS, SchedStatsRaw, TaskTs},
    bpffs::{self, OwnerLock, PinDir},
    cgroup::CgroupId,
    error::{Error, Result},
    objects::{self, sched_names as n},
    pins::{self, MapShape, OpenOutcome, PinState},
};

/// (program, tracepoint) pairs.
const PROGRAMS: [(&str, &str); 3] = [
    (n::PROG_SWITCH, "sched_switch"),
    (n::PROG_WAKEUP, "sched_wakeup"),
    (n::PROG_WAKEUP_NEW, "sched_wakeup_new"),
];

fn shapes() -> [MapShape; 4] {
    let size = |s: usize| u32::try_from(s).unwrap_or(u32::MAX);
    [
        MapShape {
            name: n::STATS,
            kind: MapType::Hash,
            key: 8,
            value: size(size_of::<SchedStatsRaw>()),
            max_entries: Some(abi::MAX_CGROUP_KEYS),
        },
        MapShape {
            name: n::OVERFLOW,
            kind: MapType::PerCpuArray,
            key: 4,
            value: 8,
            max_entries: Some(1),
        },
        MapShape {
            name: n::TASK_TS,
            kind: MapType::TaskStorage,
            key: 4,
            value: size(size_of::<TaskTs>()),
            max_entries: Some(0),
        },
        MapShape {
            name: n::META,
            kind: MapType::Array,
            key: 4,
            value: size(size_of::<abi::Meta>()),
            max_entries: Some(1),
        },
    ]
}

/// Scheduler statistics of one cgroup since its entry was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SchedStats {
    /// Time its tasks spent on a CPU as the scheduler charged it (the growth of each task's
    /// `sum_exec_runtime`, the source of `cpu.stat`), added when a task is switched out.
    pub oncpu_ns: u64,
    /// Number of times one of its tasks was switched out.
    pub slices: u64,
    /// Total run-queue wait: from wakeup or preemption to running.
    pub wait_ns: u64,
    /// Number of waits.
    pub waits: u64,
    /// Longest single wait.
    pub wait_max_ns: u64,
    /// `wait_hist[i]`: waits in `[2^i, 2^(i+1))` microseconds (`[0]` also holds < 1 us).
    pub wait_hist: [u64; HIST_SLOTS],
}

impl From<SchedStatsRaw> for SchedStats {
    fn from(r: SchedStatsRaw) -> Self {
        Self {
            oncpu_ns: r.oncpu_ns,
            slices: r.slices,
            wait_ns: r.wait_ns,
            waits: r.waits,
            wait_max_ns: r.wait_max_ns,
            wait_hist: r.wait_hist,
        }
    }
}

impl SchedStats {
    /// Mean run-queue wait.
    pub fn wait_mean(&self) -> Option<Duration> {
        (self.waits > 0).then(|| Duration::from_nanos(self.wait_ns / self.waits))
    }

    /// Upper bound of the histogram bucket holding quantile `q` (0..=1) of the waits.
    pub fn wait_quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.wait_hist.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, count) in self.wait_hist.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Duration::from_micros(1u64 << (i + 1)));
            }
        }
        None
    }

    /// Difference to an earlier reading (the max is not windowed and is kept as is).
    pub fn since(&self, earlier: &Self) -> Self {
        let mut hist = [0; HIST_SLOTS];
        for (i, h) in hist.iter_mut().enumerate() {
            *h = self.wait_hist[i].saturating_sub(earlier.wait_hist[i]);
        }
        Self {
            oncpu_ns: self.oncpu_ns.saturating_sub(earlier.oncpu_ns),
            slices: self.slices.saturating_sub(earlier.slices),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
            waits: self.waits.saturating_sub(earlier.waits),
            wait_max_ns: self.wait_max_ns,
            wait_hist: hist,
        }
    }
}

/// Read access to the pinned scheduler maps.
pub struct SchedReader {
    stats: BpfHashMap<MapData, u64, SchedStatsRaw>,
    overflow: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for SchedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedReader").finish_non_exhaustive()
    }
}

impl SchedReader {
    /// Opens the maps pinned under `pins` (read side; takes no lock).
    pub fn open(pins: &PinDir) -> Result<Self> {
        Self::open_dir(&pins.sub("sched"))
    }

    fn open_dir(dir: &Path) -> Result<Self> {
        let [stats, overflow, _, _] = shapes();
        Ok(Self {
            stats: BpfHashMap::try_from(Map::HashMap(pins::open_map(dir, &stats)?))
                .map_err(|e| Error::map(n::STATS, "typing", e))?,
            overflow: PerCpuArray::try_from(Map::PerCpuArray(pins::open_map(dir, &overflow)?))
                .map_err(|e| Error::map(n::OVERFLOW, "typing", e))?,
        })
    }

    /// Statistics of one cgroup; `None` if none of its tasks ran since the programs started.
    pub fn get(&self, cgroup: CgroupId) -> Result<Option<SchedStats>> {
        match self.stats.get(&cgroup.0, 0) {
            Ok(v) => Ok(Some(v.into())),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(Error::map(n::STATS, "reading", e)),
        }
    }

    /// Statistics of every cgroup seen.
    pub fn all(&self) -> Result<Vec<(CgroupId, SchedStats)>> {
        self.stats
            .iter()
            .map(|item| {
                item.map(|(k, v)| (CgroupId(k), v.into()))
                    .map_err(|e| Error::map(n::STATS, "iterating", e))
            })
            .collect()
    }

    /// Cgroups that could not get an entry because the map was full.
    pub fn overflow(&self) -> Result<u64> {
        let v = self
            .overflow
            .get(&0, 0)
            .map_err(|e| Error::map(n::OVERFLOW, "reading", e))?;
        Ok(v.iter().sum())
    }
}

/// How to open the scheduler datapath.
#[derive(Clone, Debug)]
pub struct SchedOptions {
    /// Pin directory (the maps live in `<pins>/sched`).
    pub pins: PinDir,
}

impl Default for SchedOptions {
    fn default() -> Self {
        Self {
            pins: PinDir::production(),
        }
    }
}

/// The scheduler datapath, owned by one process at a time.
#[derive(Debug)]
pub struct SchedDatapath {
    reader: SchedReader,
    dir: PathBuf,
    outcome: OpenOutcome,
    _lock: OwnerLock,
}

impl SchedDatapath {
    /// Reopens the pinned programs, maps and links of an earlier run, or loads, attaches and
    /// pins them. Tracing links cannot be updated in place, so an upgrade re-attaches them
    /// (statistics are kept; events during the microseconds in between are missed).
    pub fn open(opts: &SchedOptions) -> Result<Self> {
        opts.pins.create()?;
        let dir = opts.pins.sub("sched");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
        let lock = OwnerLock::acquire(&dir)?;
        let hash = objects::object_hash(objects::sched());
        let names: Vec<&str> = PROGRAMS.iter().map(|(p, _)| *p).collect();
        let empty = std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true);
        let state = if empty {
            PinState::Missing
        } else {
            pins::inspect(&dir, n::META, abi::SCHED_ABI, hash, 0, &shapes(), &names)
        };
        let outcome = match state {
            PinState::Missing => {
                load(&dir, hash, false)?;
                OpenOutcome::Fresh
            }
            PinState::Current => {
                relink_missing(&dir)?;
                OpenOutcome::Reopened
            }
            PinState::SameAbi { previous } => {
                load(&dir, hash, true)?;
                OpenOutcome::Upgraded { previous }
            }
            PinState::Incompatible { reason } => {
                tracing::warn!(dir = %dir.display(), %reason, "pinned scheduler datapath not reusable; replacing it");
                bpffs::clear_contents(&dir)?;
                load(&dir, hash, false)?;
                OpenOutcome::Replaced { reason }
            }
        };
        let reader = SchedReader::open_dir(&dir)?;
        tracing::info!(dir = %dir.display(), outcome = ?outcome, "scheduler datapath ready");
        Ok(Self {
            reader,
            dir,
            outcome,
            _lock: lock,
        })
    }

    /// What [`SchedDatapath::open`] found and did.
    pub fn outcome(&self) -> &OpenOutcome {
        &self.outcome
    }

    /// Read access.
    pub fn reader(&self) -> &SchedReader {
        &self.reader
    }

    /// Removes the entries of cgroups for which `keep` returns false (cgroups that are gone).
    pub fn retain(&mut self, keep: impl Fn(CgroupId) -> bool) -> Result<usize> {
        let stale: Vec<u64> = self
            .reader
            .stats
            .keys()
            .filter_map(std::result::Result::ok)
            .filter(|k| !keep(CgroupId(*k)))
            .collect();
        for k in &stale {
            self.reader
                .stats
                .remove(k)
                .map_err(|e| Error::map(n::STATS, "removing", e))?;
        }
        Ok(stale.len())
    }

    /// The pin directory of this datapath.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn kernel_btf() -> Result<Btf> {
    Btf::from_sys_fs().map_err(|e| Error::Btf(Box::new(e)))
}

/// Loads the programs against the (possibly pinned) maps, pins them and attaches them with
/// pinned links; `replace` first removes the old program and link pins.
fn load(dir: &Path, hash: u64, replace: bool) -> Result<()> {
    let btf = kernel_btf()?;
    let mut loader = EbpfLoader::new();
    let shapes = shapes();
    let paths: Vec<PathBuf> = shapes.iter().map(|s| pins::map_path(dir, s.name)).collect();
    for (shape, path) in shapes.iter().zip(&paths) {
        loader.map_pin_path(shape.name, path.as_path());
    }
    loader.allow_unsupported_maps(); // aya 0.14 has no typed TASK_STORAGE map
    let mut ebpf = loader.load(objects::sched()).map_err(|e| Error::Load {
        object: "sched",
        source: Box::new(e),
    })?;
    let links = pins::link_dir(dir);
    std::fs::create_dir_all(&links).map_err(|e| Error::io("creating", &links, e))?;
    for (name, tp) in PROGRAMS {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| {
                Error::program(
                    name,
                    "finding in object",
                    aya::programs::ProgramError::NotLoaded,
                )
            })?
            .try_into()
            .map_err(|e| Error::program(name, "typing", e))?;
        prog.load(tp, &btf)
            .map_err(|e| Error::program(name, "loading", e))?;
        let prog_pin = pins::prog_path(dir, name);
        let link_pin = links.join(tp);
        if replace {
            for p in [&link_pin, &prog_pin] {
                if p.exists() {
                    std::fs::remove_file(p).map_err(|e| Error::io("unpinning", p, e))?;
                }
            }
        }
        prog.pin(&prog_pin).map_err(|e| Error::pin(&prog_pin, e))?;
        attach_and_pin(prog, name, &link_pin)?;
    }
    pins::write_meta(dir, n::META, &pins::new_meta(abi::SCHED_ABI, hash, 0))
}

fn attach_and_pin(prog: &mut BtfTracePoint, name: &str, link_pin: &Path) -> Result<()> {
    let id = prog
        .attach()
        .map_err(|e| Error::program(name, "attaching", e))?;
    let link = prog
        .take_link(id)
        .map_err(|e| Error::program(name, "taking link", e))?;
    FdLink::from(link)
        .pin(link_pin)
        .map_err(|e| Error::pin(link_pin, e))?;
    Ok(())
}

/// After a crash between pinning a program and its link, attach what is missing.
fn relink_missing(dir: &Path) -> Result<()> {
    let links = pins::link_dir(dir);
    std::fs::create_dir_all(&links).map_err(|e| Error::io("creating", &links, e))?;
    for (name, tp) in PROGRAMS {
        let link_pin = links.join(tp);
        if link_pin.exists() {
            continue;
        }
        let mut prog = BtfTracePoint::from_pin(pins::prog_path(dir, name))
            .map_err(|e| Error::program(name, "opening pin", e))?;
        attach_and_pin(&mut prog, name, &link_pin)?;
        tracing::warn!(tracepoint = tp, "scheduler link was missing; re-attached");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_reads_bucket_upper_bounds() {
        let mut s = SchedStats::default();
        s.wait_hist[0] = 90; // < 2 us
        s.wait_hist[10] = 10; // [1024, 2048) us
        assert_eq!(s.wait_quantile(0.5), Some(Duration::from_micros(2)));
        assert_eq!(s.wait_quantile(0.9), Some(Duration::from_micros(2)));
        assert_eq!(s.wait_quantile(0.95), Some(Duration::from_micros(2048)));
        assert_eq!(SchedStats::default().wait_quantile(0.5), None);
    }

    #[test]
    fn since_subtracts_and_keeps_max() {
        let a = SchedStats {
            oncpu_ns: 10,
            waits: 1,
            wait_max_ns: 5,
            ..SchedStats::default()
        };
        let b = SchedStats {
            oncpu_ns: 25,
            waits: 4,
            wait_max_ns: 9,
            ..SchedStats::default()
        };
        let d = b.since(&a);
        assert_eq!((d.oncpu_ns, d.waits, d.wait_max_ns), (15, 3, 9));
        assert_eq!(d.wait_mean(), Some(Duration::ZERO));
    }
}
