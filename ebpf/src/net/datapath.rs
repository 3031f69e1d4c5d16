//! The owner of the network datapath: loads or reopens the pinned programs and maps, attaches
//! them to cgroups (pinned links, so they outlive the process), and writes the configuration.

use std::{
    collections::BTreeSet,
    fs::File,
    os::fd::AsFd,
    path::{Path, PathBuf},
};

use aya::{
    EbpfLoader,
    maps::{PerCpuValues, RingBuf},
    programs::{CgroupAttachMode, CgroupSkb, CgroupSkbAttachType, links::FdLink},
};

use super::{Direction, NetLimits, NetReader, reader::shapes};
use crate::{
    abi::{self, NetCfg, NetCountersRaw, NetState},
    bpffs::{self, OwnerLock, PinDir},
    bucket::{self, Cap},
    cgroup::CgroupId,
    error::{Error, Result},
    events::NetEvents,
    objects::{self, net_names as n},
    pins::{self, OpenOutcome, PinState},
    sys,
};

/// How to open the network datapath.
#[derive(Clone, Debug)]
pub struct NetOptions {
    /// Pin directory (the maps live in `<pins>/net`).
    pub pins: PinDir,
    /// Number of workload slots; changing it replaces the pinned maps (counters restart).
    pub max_slots: u32,
}

impl Default for NetOptions {
    fn default() -> Self {
        Self {
            pins: PinDir::production(),
            max_slots: abi::DEFAULT_MAX_SLOTS,
        }
    }
}

/// The network datapath, owned by one process at a time (an exclusive lock on the pin
/// directory; a second owner gets [`Error::Busy`]).
#[derive(Debug)]
pub struct NetDatapath {
    reader: NetReader,
    dir: PathBuf,
    egress: CgroupSkb,
    ingress: CgroupSkb,
    outcome: OpenOutcome,
    cursor: u32,
    _lock: OwnerLock,
}

fn attach_type(dir: Direction) -> CgroupSkbAttachType {
    match dir {
        Direction::Egress => CgroupSkbAttachType::Egress,
        Direction::Ingress => CgroupSkbAttachType::Ingress,
    }
}

fn prog_name(dir: Direction) -> &'static str {
    match dir {
        Direction::Egress => n::PROG_EGRESS,
        Direction::Ingress => n::PROG_INGRESS,
    }
}

fn link_name(cgroup: CgroupId, dir: Direction) -> String {
    format!("{}-{}", cgroup.0, dir.as_str())
}

fn parse_link_name(name: &str) -> Option<(CgroupId, Direction)> {
    let (id, dir) = name.split_once('-')?;
    let dir = match dir {
        "egress" => Direction::Egress,
        "ingress" => Direction::Ingress,
        _ => return None,
    };
    Some((CgroupId(id.parse().ok()?), dir))
}

impl NetDatapath {
    /// Mounts bpffs if needed, then reuses the pins of an earlier run (same build: reopened;
    /// same map layout: programs replaced in place, counters kept) or loads and pins fresh.
    pub fn open(opts: &NetOptions) -> Result<Self> {
        opts.pins.create()?;
        let dir = opts.pins.sub("net");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
        let lock = OwnerLock::acquire(&dir)?;
        let hash = objects::object_hash(objects::net());
        let programs = [n::PROG_EGRESS, n::PROG_INGRESS];
        let empty = std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true);
        let state = if empty {
            PinState::Missing
        } else {
            pins::inspect(
                &dir,
                n::META,
                abi::NET_ABI,
                hash,
                opts.max_slots,
                &shapes(opts.max_slots),
                &programs,
            )
        };
        let outcome = match state {
            PinState::Missing => {
                load_fresh(&dir, opts.max_slots, hash)?;
                OpenOutcome::Fresh
            }
            PinState::Current => OpenOutcome::Reopened,
            PinState::SameAbi { previous } => {
                upgrade(&dir, opts.max_slots, hash)?;
                OpenOutcome::Upgraded { previous }
            }
            PinState::Incompatible { reason } => {
                tracing::warn!(dir = %dir.display(), %reason, "pinned network datapath not reusable; replacing it (counters restart)");
                bpffs::clear_contents(&dir)?;
                load_fresh(&dir, opts.max_slots, hash)?;
                OpenOutcome::Replaced { reason }
            }
        };
        let reader = NetReader::open_dir(&dir, opts.max_slots)?;
        let load = |d: Direction| {
            CgroupSkb::from_pin(pins::prog_path(&dir, prog_name(d)), attach_type(d))
                .map_err(|e| Error::program(prog_name(d), "opening pin", e))
        };
        let egress = load(Direction::Egress)?;
        let ingress = load(Direction::Ingress)?;
        tracing::info!(dir = %dir.display(), outcome = ?outcome, "network datapath ready");
        Ok(Self {
            reader,
            dir,
            egress,
            ingress,
            outcome,
            cursor: 0,
            _lock: lock,
        })
    }

    /// What [`NetDatapath::open`] found and did.
    pub fn outcome(&self) -> &OpenOutcome {
        &self.outcome
    }

    /// Read access to counters and configuration.
    pub fn reader(&self) -> &NetReader {
        &self.reader
    }

    /// Attaches both programs to the cgroup at `cgroup` (idempotent). The links are pinned: they
    /// stay attached when this process exits or dies. Attach points must not contain one
    /// another, or packets below both would be counted twice.
    pub fn attach(&mut self, cgroup: &Path) -> Result<CgroupId> {
        let id = CgroupId::of_path(cgroup)?;
        let attached = self.attachments()?;
        if !attached.contains(&id) {
            check_overlap(cgroup, &attached)?;
        }
        let links = pins::link_dir(&self.dir);
        std::fs::create_dir_all(&links).map_err(|e| Error::io("creating", &links, e))?;
        let file = File::open(cgroup).map_err(|e| Error::io("opening cgroup", cgroup, e))?;
        for dir in Direction::ALL {
            let pin = links.join(link_name(id, dir));
            if pin.exists() {
                continue;
            }
            let prog = match dir {
                Direction::Egress => &mut self.egress,
                Direction::Ingress => &mut self.ingress,
            };
            let link_id = prog
                .attach(file.as_fd(), attach_type(dir), CgroupAttachMode::Single)
                .map_err(|e| Error::program(prog_name(dir), "attaching", e))?;
            let link = prog
                .take_link(link_id)
                .map_err(|e| Error::program(prog_name(dir), "taking link", e))?;
            let fd_link = FdLink::try_from(link).map_err(|e| Error::Link {
                path: pin.clone(),
                source: Box::new(e),
            })?;
            fd_link.pin(&pin).map_err(|e| Error::pin(&pin, e))?;
            tracing::info!(cgroup = %cgroup.display(), id = %id, direction = dir.as_str(), "attached");
        }
        Ok(id)
    }

    /// Detaches the programs from a cgroup (removes its link pins). Returns whether any were.
    pub fn detach(&mut self, cgroup: CgroupId) -> Result<bool> {
        let mut any = false;
        for dir in Direction::ALL {
            let pin = pins::link_dir(&self.dir).join(link_name(cgroup, dir));
            if pin.exists() {
                std::fs::remove_file(&pin).map_err(|e| Error::io("unpinning", &pin, e))?;
                any = true;
            }
        }
        Ok(any)
    }

    /// Cgroups the programs are attached to.
    pub fn attachments(&self) -> Result<BTreeSet<CgroupId>> {
        Ok(pins::list_links(&self.dir)?
            .into_iter()
            .filter_map(|(name, _)| parse_link_name(&name).map(|(id, _)| id))
            .collect())
    }

    /// Registers `cgroup` as a workload or updates its caps. A new workload starts from zero
    /// counters; an existing one keeps counters, bucket state and any floor cap.
    pub fn set_workload(&mut self, cgroup: CgroupId, limits: &NetLimits) -> Result<()> {
        for dir in Direction::ALL {
            if let Some(cap) = limits.cap(dir) {
                cap.validate()?;
            }
        }
        let keys = self.reader.keys()?;
        if let Some(&slot) = keys.get(&cgroup.0) {
            let mut cfg = self.reader.cfg_at(slot)?;
            if cfg.cgroup_id != cgroup.0 {
                return Err(Error::AlreadyMember {
                    cgroup,
                    owner: CgroupId(cfg.cgroup_id),
                });
            }
            for dir in Direction::ALL {
                let floor = nonzero(cfg.dir[dir.index()].floor_cap_bps);
                cfg.dir[dir.index()] = dir_cfg(limits.cap(dir), floor, dir, limits.ingress_ecn)?;
            }
            return self.write_cfg(slot, &cfg);
        }
        let slot = self.free_slot(&keys)?;
        let mut cfg = NetCfg {
            cgroup_id: cgroup.0,
            ..NetCfg::default()
        };
        for dir in Direction::ALL {
            cfg.dir[dir.index()] = dir_cfg(limits.cap(dir), None, dir, limits.ingress_ecn)?;
        }
        self.reset_slot(slot)?;
        self.write_cfg(slot, &cfg)?;
        let NetReader { index, slots, .. } = &mut self.reader;
        slots.insert(index, cgroup.0, slot)?;
        tracing::info!(cgroup = %cgroup, slot, "workload registered");
        Ok(())
    }

    /// Counts (and caps) the sockets of cgroup `member` as part of `workload`, e.g. a
    /// workload's sub-cgroups.
    pub fn add_member(&mut self, workload: CgroupId, member: CgroupId) -> Result<()> {
        let keys = self.reader.keys()?;
        let slot = *keys
            .get(&workload.0)
            .ok_or(Error::UnknownWorkload(workload))?;
        if let Some(&other) = keys.get(&member.0) {
            if other == slot {
                return Ok(());
            }
            let owner = CgroupId(self.reader.cfg_at(other)?.cgroup_id);
            return Err(Error::AlreadyMember {
                cgroup: member,
                owner,
            });
        }
        let NetReader { index, slots, .. } = &mut self.reader;
        slots.insert(index, member.0, slot)
    }

    /// Stops counting `member` as part of its workload.
    pub fn remove_member(&mut self, member: CgroupId) -> Result<bool> {
        let keys = self.reader.keys()?;
        let Some(&slot) = keys.get(&member.0) else {
            return Ok(false);
        };
        if self.reader.cfg_at(slot)?.cgroup_id == member.0 {
            return Ok(false); // that is a workload, not a member
        }
        let NetReader { index, slots, .. } = &mut self.reader;
        slots.remove(index, member.0)
    }

    /// Unregisters a workload and its members. Returns whether it was registered.
    pub fn remove_workload(&mut self, cgroup: CgroupId) -> Result<bool> {
        let keys = self.reader.keys()?;
        let Some(&slot) = keys.get(&cgroup.0) else {
            return Ok(false);
        };
        if self.reader.cfg_at(slot)?.cgroup_id != cgroup.0 {
            return Err(Error::UnknownWorkload(cgroup));
        }
        let NetReader { index, slots, .. } = &mut self.reader;
        for (key, s) in &keys {
            if *s == slot {
                slots.remove(index, *key)?;
            }
        }
        self.write_cfg(slot, &NetCfg::default())?;
        tracing::info!(cgroup = %cgroup, slot, "workload removed");
        Ok(true)
    }

    /// Sets (Some) or lifts (None) the floor controller's cap on one direction of a workload.
    /// The enforced cap is the tighter of this and the operator's cap.
    pub fn set_floor_cap(
        &mut self,
        cgroup: CgroupId,
        dir: Direction,
        rate_bps: Option<u64>,
    ) -> Result<()> {
        let slot = self
            .reader
            .slots
            .slot(cgroup.0)
            .ok_or(Error::UnknownWorkload(cgroup))?;
        let mut cfg = self.reader.cfg_at(slot)?;
        let cur = cfg.dir[dir.index()];
        let configured = bucket::configured_cap(&cur);
        let ecn = cur.flags & abi::CFG_F_ECN != 0;
        let floor = rate_bps.map(|r| r.clamp(bucket::MIN_RATE_BPS, bucket::MAX_RATE_BPS));
        let new = dir_cfg(configured, floor, dir, ecn)?;
        if cur.ns_per_byte == 0 && new.ns_per_byte != 0 {
            // The workload is being capped because it already takes more than its share:
            // start with the bucket spent, so the cap bites now instead of after a full
            // burst and debt window at line rate.
            let mut state = self
                .reader
                .state
                .get(&slot, 0)
                .map_err(|e| Error::map(n::STATE, "reading", e))?;
            state.dir[dir.index()].tat_ns =
                crate::floor_runner::monotonic_ns() + new.burst_ns + new.debt_ns;
            self.reader
                .state
                .set(slot, state, 0)
                .map_err(|e| Error::map(n::STATE, "writing", e))?;
        }
        cfg.dir[dir.index()] = new;
        self.write_cfg(slot, &cfg)
    }

    /// The ring buffer of throttle and drop events. Only one reader may consume it.
    pub fn take_events(&mut self) -> Result<NetEvents> {
        let shape = shapes(self.reader.max_slots)[6];
        let data = pins::open_map(&self.dir, &shape)?;
        let ring = RingBuf::try_from(aya::maps::Map::RingBuf(data))
            .map_err(|e| Error::map(n::EVENTS, "opening ring buffer", e))?;
        let stats = self.reader.stats.get(&0, 0).ok();
        let lost = stats.map_or(0, |v| v.iter().map(|s| s.events_lost).sum());
        Ok(NetEvents::new(ring, lost))
    }

    pub(crate) fn program(&self, dir: Direction) -> &CgroupSkb {
        match dir {
            Direction::Egress => &self.egress,
            Direction::Ingress => &self.ingress,
        }
    }

    fn write_cfg(&mut self, slot: u32, cfg: &NetCfg) -> Result<()> {
        self.reader
            .cfg
            .set(slot, cfg, 0)
            .map_err(|e| Error::map(n::CFG, "writing", e))
    }

    fn reset_slot(&mut self, slot: u32) -> Result<()> {
        let cpus = aya::util::nr_cpus().map_err(|(path, e)| Error::io("reading", path, e))?;
        let zeros = PerCpuValues::try_from(vec![NetCountersRaw::default(); cpus]).map_err(|e| {
            Error::io(
                "sizing per-CPU values",
                "/sys/devices/system/cpu/possible",
                e,
            )
        })?;
        self.reader
            .counters
            .set(slot, zeros, 0)
            .map_err(|e| Error::map(n::COUNTERS, "resetting", e))?;
        self.reader
            .state
            .set(slot, NetState::default(), 0)
            .map_err(|e| Error::map(n::STATE, "resetting", e))
    }

    /// Next free slot after the last one handed out, so a freed slot is not reused while a
    /// packet that looked it up just before the removal may still be counting into it.
    fn free_slot(&mut self, keys: &std::collections::BTreeMap<u64, u32>) -> Result<u32> {
        let used: BTreeSet<u32> = keys.values().copied().collect();
        let max = self.reader.max_slots;
        for i in 0..max {
            let slot = (self.cursor + i) % max;
            if !used.contains(&slot) {
                self.cursor = (slot + 1) % max;
                return Ok(slot);
            }
        }
        Err(Error::SlotsFull(max))
    }
}

fn nonzero(v: u64) -> Option<u64> {
    (v != 0).then_some(v)
}

fn dir_cfg(
    configured: Option<Cap>,
    floor: Option<u64>,
    dir: Direction,
    ecn: bool,
) -> Result<abi::BucketCfg> {
    let floor_cap = floor.map(Cap::rate);
    let effective = bucket::tighter(configured, floor_cap);
    Ok(bucket::bucket_cfg(
        effective,
        configured,
        floor,
        ecn && dir == Direction::Ingress,
    )?)
}

/// Refuses attach points that contain, or are contained in, existing ones.
fn check_overlap(cgroup: &Path, attached: &BTreeSet<CgroupId>) -> Result<()> {
    if attached.is_empty() {
        return Ok(());
    }
    let overlap = |other: CgroupId| Error::OverlappingAttach {
        path: cgroup.to_owned(),
        other,
    };
    let mut cur = cgroup.parent();
    while let Some(dir) = cur {
        match CgroupId::of_path(dir) {
            Ok(id) if attached.contains(&id) => return Err(overlap(id)),
            Ok(_) => cur = dir.parent(),
            Err(_) => break, // left the cgroup2 mount
        }
    }
    let mut stack = vec![cgroup.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let path = entry.path();
                if let Ok(id) = CgroupId::of_path(&path)
                    && attached.contains(&id)
                {
                    return Err(overlap(id));
                }
                stack.push(path);
            }
        }
    }
    Ok(())
}

fn load_fresh(dir: &Path, max_slots: u32, hash: u64) -> Result<()> {
    let mut loader = EbpfLoader::new();
    let shapes = shapes(max_slots);
    let paths: Vec<PathBuf> = shapes.iter().map(|s| pins::map_path(dir, s.name)).collect();
    for (shape, path) in shapes.iter().zip(&paths) {
        loader.map_pin_path(shape.name, path.as_path());
    }
    for name in [n::COUNTERS, n::CFG, n::STATE] {
        loader.map_max_entries(name, max_slots);
    }
    let mut ebpf = loader.load(objects::net()).map_err(|e| Error::Load {
        object: "net",
        source: Box::new(e),
    })?;
    for dir_ in Direction::ALL {
        let name = prog_name(dir_);
        let prog: &mut CgroupSkb = ebpf
            .program_mut(name)
            .ok_or_else(|| missing_program(name))?
            .try_into()
            .map_err(|e| Error::program(name, "typing", e))?;
        prog.load()
            .map_err(|e| Error::program(name, "loading", e))?;
        let path = pins::prog_path(dir, name);
        prog.pin(&path).map_err(|e| Error::pin(&path, e))?;
    }
    // Written last: a start that died half way leaves no valid meta and is redone.
    pins::write_meta(dir, n::META, &pins::new_meta(abi::NET_ABI, hash, max_slots))
}

/// Same map layout, new programs: load them against the pinned maps and swap them into the
/// pinned links with BPF_LINK_UPDATE, so no packet is missed or counted twice.
fn upgrade(dir: &Path, max_slots: u32, hash: u64) -> Result<()> {
    let mut loader = EbpfLoader::new();
    let shapes = shapes(max_slots);
    let paths: Vec<PathBuf> = shapes.iter().map(|s| pins::map_path(dir, s.name)).collect();
    for (shape, path) in shapes.iter().zip(&paths) {
        loader.map_pin_path(shape.name, path.as_path());
    }
    let mut ebpf = loader.load(objects::net()).map_err(|e| Error::Load {
        object: "net",
        source: Box::new(e),
    })?;
    let links = pins::list_links(dir)?;
    for dir_ in Direction::ALL {
        let name = prog_name(dir_);
        let prog: &mut CgroupSkb = ebpf
            .program_mut(name)
            .ok_or_else(|| missing_program(name))?
            .try_into()
            .map_err(|e| Error::program(name, "typing", e))?;
        prog.load()
            .map_err(|e| Error::program(name, "loading", e))?;
        let prog_fd = prog.fd().map_err(|e| Error::program(name, "fd", e))?;
        for (link, path) in &links {
            if parse_link_name(link).is_some_and(|(_, d)| d == dir_) {
                let fd = sys::obj_get(path)?;
                match sys::link_update(fd.as_fd(), prog_fd.as_fd(), link) {
                    Err(Error::Syscall { source, .. })
                        if source.raw_os_error() == Some(libc::ENOLINK) =>
                    {
                        // Its cgroup was removed while nobody owned the pins: the link is
                        // dead and only the pin keeps it; nothing to carry over.
                        std::fs::remove_file(path).map_err(|e| Error::io("unpinning", path, e))?;
                        tracing::info!(link = %link, "severed link unpinned (its cgroup is gone)");
                    }
                    r => r?,
                }
            }
        }
        let path = pins::prog_path(dir, name);
        if path.exists() {
            std::fs::remove_file(&path).map_err(|e| Error::io("unpinning", &path, e))?;
        }
        prog.pin(&path).map_err(|e| Error::pin(&path, e))?;
    }
    tracing::info!(dir = %dir.display(), links = links.len(), "network programs upgraded in place");
    pins::write_meta(dir, n::META, &pins::new_meta(abi::NET_ABI, hash, max_slots))
}

fn missing_program(name: &str) -> Error {
    Error::program(
        name,
        "finding in object",
        aya::programs::ProgramError::NotLoaded,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_round_trip() {
        for dir in Direction::ALL {
            let name = link_name(CgroupId(4242), dir);
            assert_eq!(parse_link_name(&name), Some((CgroupId(4242), dir)));
        }
        assert_eq!(parse_link_name("x-egress"), None);
        assert_eq!(parse_link_name("12-sideways"), None);
    }
}
