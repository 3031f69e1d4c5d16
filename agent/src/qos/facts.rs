//! What the mapping needs to know about the node and the target cgroup, as
//! plain data (so the mapping stays pure), and the probes that read it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::cgroup::v2::{core, cpuset, io, memory};
use crate::cgroup::{AnyBackend, CgroupMode, CgroupPath, fs, v1};
use crate::sensing::devices::Disk;

/// Node-wide facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// cgroup mode.
    pub mode: CgroupMode,
    /// Online CPU ids.
    pub cpus: BTreeSet<u32>,
    /// Physical memory (`MemTotal`).
    pub memory_bytes: u64,
    /// Page size (memory knobs are rounded down to it).
    pub page_size: u64,
    /// Whole disks the IO knobs apply to.
    pub disks: Vec<DiskFacts>,
    /// The cgroup2 mount has `memory_recursiveprot`.
    pub memory_recursiveprot: bool,
    /// The protection loop runs.
    pub protection: bool,
    /// What the eBPF datapath enforces for network bounds.
    pub network: NetworkFacts,
}

/// The eBPF datapath as the QoS report needs it: network caps and floors
/// are its work, not a cgroup file's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkFacts {
    /// It does not run: why.
    Off(String),
    /// It counts and caps (cgroup_skb token buckets); floors run or not.
    On {
        /// The floor loop runs (`Err`: why not).
        floors: Result<(), String>,
    },
}

impl Default for NetworkFacts {
    fn default() -> Self {
        NetworkFacts::Off("the eBPF datapath has not started on this agent".into())
    }
}

/// One whole disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFacts {
    /// Kernel name.
    pub name: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Active IO scheduler (`none`, `mq-deadline`, `bfq`, ...).
    pub scheduler: String,
    /// iocost is enabled on it (`io.cost.qos` `enable=1`).
    pub io_cost: bool,
}

impl DiskFacts {
    /// `MAJ:MIN`.
    pub fn dev(&self) -> String {
        format!("{}:{}", self.major, self.minor)
    }
}

/// Memory protection of an ancestor outside the managed subtree (never written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AncestorProtection {
    /// Cgroup path.
    pub path: String,
    /// Its `memory.min` (`None`: no memory controller there).
    pub memory_min: Option<u64>,
    /// Its `memory.low`.
    pub memory_low: Option<u64>,
}

/// Which cores a workload may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuAssignment {
    /// Cores dedicated to it, or why none could be found.
    Dedicated(Result<BTreeSet<u32>, String>),
    /// The shared pool: the parent's cores minus every dedicated one.
    Pool(BTreeSet<u32>),
    /// Nothing is dedicated anywhere: the parent's cores (v2 writes empty =
    /// inherit; v1 needs the list).
    Inherit(BTreeSet<u32>),
}

/// Facts about the cgroup being configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFacts {
    /// Cgroup path (for messages).
    pub cgroup: String,
    /// v2: controllers available to it (`cgroup.controllers`); v1: controllers
    /// whose hierarchy holds it.
    pub controllers: BTreeSet<String>,
    /// Optional interface files present (`io.bfq.weight`, `cpuset.cpus.partition`,
    /// `blkio.weight`, `blkio.bfq.weight`).
    pub files: BTreeSet<String>,
    /// Ancestors outside the managed subtree, nearest first (the root excluded).
    pub ancestors: Vec<AncestorProtection>,
    /// Memory floor the nearest outside ancestor must cover (this workload's, or
    /// the whole managed subtree's for managed workloads).
    pub subtree_min: u64,
    /// Same for `memory.low`.
    pub subtree_low: u64,
    /// Cores.
    pub cpus: CpuAssignment,
    /// The parent is a cpuset partition root (v2).
    pub parent_partition_root: bool,
}

impl TargetFacts {
    /// Facts for a cgroup with every controller and no outside ancestors (tests, docs).
    pub fn unconstrained(cgroup: &str, controllers: &[&str]) -> Self {
        TargetFacts {
            cgroup: cgroup.to_string(),
            controllers: controllers.iter().map(|c| (*c).to_string()).collect(),
            files: BTreeSet::new(),
            ancestors: Vec::new(),
            subtree_min: 0,
            subtree_low: 0,
            cpus: CpuAssignment::Inherit(BTreeSet::new()),
            parent_partition_root: false,
        }
    }
}

/// Parses `/proc/meminfo`'s `MemTotal` in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?;
        let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
        kb.checked_mul(1024)
    })
}

/// The bracketed entry of a `queue/scheduler` file (`[none] mq-deadline` → `none`).
pub fn active_scheduler(text: &str) -> String {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .unwrap_or("none")
        .to_string()
}

/// True when a mountinfo text mounts cgroup2 at `mount` with `memory_recursiveprot`.
pub fn recursiveprot(mountinfo: &str, mount: &Path) -> bool {
    mountinfo.lines().any(|l| {
        let Some((left, right)) = l.split_once(" - ") else {
            return false;
        };
        let mp = left.split(' ').nth(4).map(Path::new);
        let mut r = right.split(' ');
        r.next() == Some("cgroup2")
            && mp == Some(mount)
            && r.nth(1)
                .is_some_and(|o| o.split(',').any(|x| x == "memory_recursiveprot"))
    })
}

/// Reads the node facts.
pub fn probe_node(backend: &AnyBackend, disks: &[Disk], protection: bool) -> NodeFacts {
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| cpuset::parse_list(&t))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            (0..n).collect()
        });
    let memory_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_mem_total(&t))
        .unwrap_or(0);
    let v2_root = match backend {
        AnyBackend::V2(b) => Some(b.root().to_path_buf()),
        AnyBackend::V1(_) => None,
    };
    let cost = v2_root
        .as_ref()
        .and_then(|r| fs::read_string(&r.join(io::COST_QOS)).ok())
        .unwrap_or_default();
    let disks = disks
        .iter()
        .map(|d| DiskFacts {
            name: d.name.clone(),
            major: d.major,
            minor: d.minor,
            scheduler: std::fs::read_to_string(format!("/sys/block/{}/queue/scheduler", d.name))
                .map(|t| active_scheduler(&t))
                .unwrap_or_else(|_| "unknown".into()),
            io_cost: io::cost_enabled(&cost, d.major, d.minor),
        })
        .collect();
    let memory_recursiveprot = v2_root.as_ref().is_some_and(|r| {
        std::fs::read_to_string(crate::cgroup::layout::MOUNTINFO)
            .is_ok_and(|t| recursiveprot(&t, r))
    });
    NodeFacts {
        mode: crate::cgroup::CgroupBackend::mode(backend),
        cpus,
        memory_bytes,
        page_size: rustix::param::page_size() as u64,
        disks,
        memory_recursiveprot,
        protection,
        network: NetworkFacts::default(),
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    let t = fs::read_string(path).ok()?;
    crate::cgroup::parse::single_u64(t.as_bytes())
}

/// Optional files looked for in a target.
const OPTIONAL_FILES: &[&str] = &[
    io::BFQ_WEIGHT,
    cpuset::CPUS_PARTITION,
    v1::blkio::WEIGHT,
    v1::blkio::BFQ_WEIGHT,
];

/// Reads the facts of `cg`; `outside_from` is the top of the subtree the agent
/// may write (the managed root for managed workloads, `cg` itself for an
/// adopted discovered cgroup): its ancestors are reported, never written.
pub fn probe_target(
    backend: &AnyBackend,
    cg: &CgroupPath,
    outside_from: &CgroupPath,
    subtree_min: u64,
    subtree_low: u64,
    cpus: CpuAssignment,
) -> TargetFacts {
    let mut controllers = BTreeSet::new();
    let mut files = BTreeSet::new();
    let mut ancestors = Vec::new();
    let mut parent_partition_root = false;
    match backend {
        AnyBackend::V2(b) => {
            let dir = b.dir(cg);
            if let Ok(t) = fs::read_string(&dir.join(core::CONTROLLERS)) {
                controllers.extend(core::controller_list(&t));
            }
            for f in OPTIONAL_FILES {
                if dir.join(f).exists() {
                    files.insert((*f).to_string());
                }
            }
            let parent: PathBuf = dir.parent().map(Path::to_path_buf).unwrap_or_default();
            parent_partition_root = fs::read_string(&parent.join(cpuset::CPUS_PARTITION))
                .is_ok_and(|t| cpuset::is_partition_root(&t));
            // Ancestors above the writable subtree, nearest first, root excluded.
            let prefixes: Vec<&str> = outside_from.prefixes().collect();
            for p in prefixes.iter().rev().skip(1) {
                let d = b.root().join(p);
                ancestors.push(AncestorProtection {
                    path: format!("/{p}"),
                    memory_min: read_u64(&d.join(memory::MIN)),
                    memory_low: read_u64(&d.join(memory::LOW)),
                });
            }
        }
        AnyBackend::V1(b) => {
            for c in v1::MANAGED_CONTROLLERS {
                if let Some(m) = b.mount(c) {
                    let d = cg.under(m);
                    if d.is_dir() {
                        controllers.insert((*c).to_string());
                        for f in OPTIONAL_FILES {
                            if d.join(f).exists() {
                                files.insert((*f).to_string());
                            }
                        }
                    }
                }
            }
        }
    }
    TargetFacts {
        cgroup: cg.to_string(),
        controllers,
        files,
        ancestors,
        subtree_min,
        subtree_low,
        cpus,
        parent_partition_root,
    }
}

/// The cores of `cg`'s parent (v2 `cpuset.cpus.effective`, v1 `cpuset.cpus`).
pub fn parent_cpus(backend: &AnyBackend, parent: &CgroupPath) -> Option<BTreeSet<u32>> {
    let text = match backend {
        AnyBackend::V2(b) => fs::read_string(&b.dir(parent).join(cpuset::CPUS_EFFECTIVE)).ok()?,
        AnyBackend::V1(b) => {
            fs::read_string(&parent.under(b.mount("cpuset")?).join(v1::cpuset::CPUS)).ok()?
        }
    };
    cpuset::parse_list(&text).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(
            parse_mem_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000 * 1024)
        );
        assert_eq!(parse_mem_total("nothing"), None);
        assert_eq!(active_scheduler("[none] mq-deadline kyber bfq\n"), "none");
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq"),
            "mq-deadline"
        );
        let mi = "25 21 0:22 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert!(recursiveprot(mi, Path::new("/sys/fs/cgroup")));
        assert!(!recursiveprot(mi, Path::new("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn this_host_probes() {
        let b = AnyBackend::detect().unwrap();
        let n = probe_node(&b, &[], true);
        assert!(!n.cpus.is_empty());
        assert!(n.memory_bytes > 0 && n.page_size >= 4096);
    }
}
