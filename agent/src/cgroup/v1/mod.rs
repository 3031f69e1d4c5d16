//! cgroup v1 backend: one hierarchy per controller (co-mounts allowed), plus on
//! hybrid hosts the controller-less cgroup2 mount for PSI, `cpu.stat` and cgroup BPF.

pub mod blkio;
pub mod core;
pub mod cpu;
pub mod cpuacct;
pub mod cpuset;
pub mod memory;
pub mod pids;

use std::path::{Path, PathBuf};

use super::HierarchyDir;
use super::fs::{self, CgroupError, OpenMode, StatFile};
use super::layout::CgroupLayout;
use super::path::CgroupPath;
use super::stats::{CgroupStats, CpuStats, MemoryEvents, MemoryStats};
use super::v2;
use super::v2::psi::PsiFiles;

/// v1 controllers the agent reads and creates its managed cgroups in.
pub const MANAGED_CONTROLLERS: &[&str] = &["cpu", "cpuacct", "cpuset", "memory", "blkio", "pids"];

/// The v1 (or hybrid) backend.
#[derive(Debug, Clone, Default)]
pub struct V1Backend {
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    cpuset: Option<PathBuf>,
    memory: Option<PathBuf>,
    blkio: Option<PathBuf>,
    pids: Option<PathBuf>,
    unified: Option<PathBuf>,
}

impl V1Backend {
    /// Builds the backend from the host layout.
    pub fn new(layout: &CgroupLayout) -> Self {
        let p = |c: &str| layout.v1_path(c).map(Path::to_path_buf);
        V1Backend {
            cpu: p("cpu"),
            cpuacct: p("cpuacct"),
            cpuset: p("cpuset"),
            memory: p("memory"),
            blkio: p("blkio"),
            pids: p("pids"),
            unified: layout.v2.clone(),
        }
    }

    /// Mount of the v1 hierarchy holding `controller` (one of [`MANAGED_CONTROLLERS`]).
    pub fn mount(&self, controller: &str) -> Option<&Path> {
        match controller {
            "cpu" => self.cpu.as_deref(),
            "cpuacct" => self.cpuacct.as_deref(),
            "cpuset" => self.cpuset.as_deref(),
            "memory" => self.memory.as_deref(),
            "blkio" => self.blkio.as_deref(),
            "pids" => self.pids.as_deref(),
            _ => None,
        }
    }

    /// The controller-less cgroup2 mount of a hybrid host.
    pub fn unified(&self) -> Option<&Path> {
        self.unified.as_deref()
    }

    /// Distinct mounts the agent uses (co-mounted controllers once), then the unified mount.
    pub fn hierarchies(&self) -> Vec<(String, &Path)> {
        let mut out: Vec<(String, &Path)> = Vec::new();
        for c in MANAGED_CONTROLLERS {
            if let Some(m) = self.mount(c) {
                match out.iter_mut().find(|(_, p)| *p == m) {
                    Some((name, _)) => {
                        name.push(',');
                        name.push_str(c);
                    }
                    None => out.push(((*c).to_string(), m)),
                }
            }
        }
        if let Some(u) = self.unified() {
            out.push(("unified".to_string(), u));
        }
        out
    }

    /// The directories of `cg` in every hierarchy (existing or not).
    pub fn dirs(&self, cg: &CgroupPath) -> Vec<HierarchyDir> {
        self.hierarchies()
            .into_iter()
            .map(|(hierarchy, m)| HierarchyDir {
                hierarchy,
                path: cg.under(m),
            })
            .collect()
    }

    /// Creates `cg` in every hierarchy; cpuset directories get their parent's cpus/mems.
    pub fn create(&self, cg: &CgroupPath) -> Result<(), CgroupError> {
        for (_, mount) in self.hierarchies() {
            fs::create_dir(&cg.under(mount))?;
        }
        if let Some(cs) = self.cpuset.as_deref() {
            let mut parent = cs.to_path_buf();
            for prefix in cg.prefixes() {
                let dir = cs.join(prefix);
                cpuset::inherit(&dir, &parent)?;
                parent = dir;
            }
        }
        Ok(())
    }

    /// Removes `cg` from every hierarchy (missing directories are fine).
    pub fn remove(&self, cg: &CgroupPath) -> Result<(), CgroupError> {
        for (_, mount) in self.hierarchies() {
            fs::remove_dir(&cg.under(mount))?;
        }
        Ok(())
    }

    /// Moves process `pid` into `cg` in every hierarchy.
    pub fn add_pid(&self, cg: &CgroupPath, pid: u32) -> Result<(), CgroupError> {
        let pid = pid.to_string();
        for (_, mount) in self.hierarchies() {
            fs::write(&cg.under(mount).join(core::PROCS), &pid)?;
        }
        Ok(())
    }
}

/// Open stat files of one v1 cgroup.
#[derive(Debug)]
pub struct V1Stats {
    usage: Option<StatFile>,
    unified_cpu: Option<StatFile>,
    cpu_stat: Option<StatFile>,
    memory: Option<[StatFile; 4]>,
    blkio: Option<[StatFile; 2]>,
    pids: Option<StatFile>,
    psi: Option<PsiFiles>,
    unavailable: Vec<(&'static str, String)>,
}

impl V1Stats {
    /// Opens the stat files of `cg` in every hierarchy where it exists; `Gone` if none.
    pub fn open(b: &V1Backend, cg: &CgroupPath, mode: OpenMode) -> Result<Self, CgroupError> {
        let dir = |m: Option<&Path>| m.map(|m| cg.under(m)).filter(|d| d.is_dir());
        let mut unavailable = Vec::new();
        let mut absent = |area: &'static str, ctrl: &str, mount: Option<&Path>| {
            unavailable.push((
                area,
                match mount {
                    None => format!("{ctrl} hierarchy is not mounted"),
                    Some(m) => format!("no {ctrl} cgroup at {}", cg.under(m).display()),
                },
            ));
        };

        let cpuacct_dir = dir(b.cpuacct.as_deref());
        let unified_dir = dir(b.unified.as_deref());
        let usage = match &cpuacct_dir {
            Some(d) => mode.open_optional(d.join(cpuacct::USAGE))?,
            None => None,
        };
        // Without a cpuacct cgroup, the unified mount's cpu.stat still has usage.
        let unified_cpu = match (&usage, &unified_dir) {
            (None, Some(u)) => mode.open_optional(u.join(v2::cpu::STAT))?,
            _ => None,
        };
        if usage.is_none() && unified_cpu.is_none() {
            absent("cpu", "cpuacct", b.cpuacct.as_deref());
        }
        let cpu_stat = match dir(b.cpu.as_deref()) {
            Some(d) => mode.open_optional(d.join(cpu::STAT))?,
            None => None,
        };
        if cpu_stat.is_none() {
            absent("cpu_throttling", "cpu", b.cpu.as_deref());
        }
        let memory = match dir(b.memory.as_deref()) {
            Some(d) => Some([
                mode.open(d.join(memory::USAGE))?,
                mode.open(d.join(memory::STAT))?,
                mode.open(d.join(memory::FAILCNT))?,
                mode.open(d.join(memory::OOM_CONTROL))?,
            ]),
            None => {
                absent("memory", "memory", b.memory.as_deref());
                None
            }
        };
        let blkio = match dir(b.blkio.as_deref()) {
            Some(d) => Some([
                mode.open(d.join(blkio::IO_SERVICE_BYTES))?,
                mode.open(d.join(blkio::IO_SERVICED))?,
            ]),
            None => {
                absent("io", "blkio", b.blkio.as_deref());
                None
            }
        };
        let pids = match dir(b.pids.as_deref()) {
            Some(d) => mode.open_optional(d.join(pids::CURRENT))?,
            None => None,
        };
        if pids.is_none() {
            absent("pids", "pids", b.pids.as_deref());
        }
        let psi = match &unified_dir {
            Some(u) => Some(PsiFiles::open(u, mode)?).filter(|p| !p.is_empty()),
            None => None,
        };
        if psi.is_none() {
            unavailable.push((
                "psi",
                match b.unified.as_deref() {
                    None => {
                        "cgroup v1 has no per-cgroup pressure files and no cgroup2 mount exists"
                            .to_string()
                    }
                    Some(u) => format!(
                        "per-cgroup pressure exists only in the cgroup2 mount; no {} there",
                        cg.under(u).display()
                    ),
                },
            ));
        }
        if usage.is_none()
            && unified_cpu.is_none()
            && memory.is_none()
            && pids.is_none()
            && blkio.is_none()
        {
            return Err(CgroupError::Gone {
                path: PathBuf::from(cg.to_string()),
            });
        }
        Ok(V1Stats {
            usage,
            unified_cpu,
            cpu_stat,
            memory,
            blkio,
            pids,
            psi,
            unavailable,
        })
    }

    /// What this cgroup cannot report, with the reason.
    pub fn unavailable(&self) -> &[(&'static str, String)] {
        &self.unavailable
    }

    /// Reads every open file into `out`.
    pub fn read(&mut self, buf: &mut Vec<u8>, out: &mut CgroupStats) -> Result<(), CgroupError> {
        let throttling = match &mut self.cpu_stat {
            Some(f) => {
                f.read_into(buf)?;
                cpu::parse_stat(buf)
            }
            None => None,
        };
        out.cpu = if let Some(f) = &mut self.usage {
            Some(CpuStats {
                usage_ns: f.read_u64(buf)?,
                user_ns: None,
                system_ns: None,
                throttling,
            })
        } else if let Some(f) = &mut self.unified_cpu {
            f.read_into(buf)?;
            v2::cpu::parse_stat(buf).map(|c| CpuStats { throttling, ..c })
        } else {
            None
        };
        out.memory = match &mut self.memory {
            Some([usage, stat, failcnt, oom]) => {
                let current = usage.read_u64(buf)?;
                stat.read_into(buf)?;
                let (anon, file) = memory::parse_stat(buf);
                let max = failcnt.read_u64(buf)?;
                oom.read_into(buf)?;
                Some(MemoryStats {
                    current,
                    anon,
                    file,
                    events: MemoryEvents {
                        max: Some(max),
                        oom_kill: memory::parse_oom_kill(buf),
                        ..MemoryEvents::default()
                    },
                })
            }
            None => None,
        };
        match &mut self.blkio {
            Some([bytes, ops]) => {
                let list = out.io.get_or_insert_with(Vec::new);
                list.clear();
                bytes.read_into(buf)?;
                blkio::parse_rwstat(buf, blkio::Counting::Bytes, list);
                ops.read_into(buf)?;
                blkio::parse_rwstat(buf, blkio::Counting::Ops, list);
            }
            None => out.io = None,
        }
        out.pids = match &mut self.pids {
            Some(f) => Some(f.read_u64(buf)?),
            None => None,
        };
        match &mut self.psi {
            Some(p) => p.read(buf, &mut out.psi),
            None => {
                out.psi = Default::default();
                Ok(())
            }
        }
    }
}
