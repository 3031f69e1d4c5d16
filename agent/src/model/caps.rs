//! Host capabilities as served by `/v1/capabilities`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cgroup::CgroupMode;

/// What this host offers the agent, and what it does not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Capabilities {
    /// Running kernel.
    pub kernel: KernelInfo,
    /// cgroup mounts and controllers.
    pub cgroup: CgroupCaps,
    /// Node pressure stall information (`/proc/pressure`).
    pub psi: Feature,
    /// eBPF.
    pub bpf: BpfCaps,
    /// GPU (NVML).
    pub gpu: Feature,
    /// The agent's eBPF datapath as it started (network, run-queue, floors).
    #[serde(default)]
    pub datapath: DatapathCaps,
    /// The kernel's proportional IO control on the node's disks, as darosd set it up.
    #[serde(default)]
    pub io_cost: IoCostCaps,
    /// Whether the agent's own pages are locked in memory (`agent.lock_memory`).
    #[serde(default = "Feature::unreported")]
    pub memory_lock: Feature,
    /// One line per fact, for people.
    pub summary: Vec<String>,
}

/// A yes/no capability with the evidence or the reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Feature {
    /// Whether it can be used.
    pub available: bool,
    /// Where it is, or why not.
    pub detail: String,
}

impl Feature {
    /// An available feature.
    pub fn yes(detail: impl Into<String>) -> Self {
        Feature {
            available: true,
            detail: detail.into(),
        }
    }

    /// What an agent that predates a capability reports for it.
    pub fn unreported() -> Self {
        Feature::no("not reported by this agent")
    }

    /// An unavailable feature.
    pub fn no(detail: impl Into<String>) -> Self {
        Feature {
            available: false,
            detail: detail.into(),
        }
    }
}

/// Kernel identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelInfo {
    /// `uname -r`.
    pub release: String,
    /// `uname -v`.
    pub version: String,
    /// `uname -m`.
    pub machine: String,
}

/// cgroup facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CgroupCaps {
    /// v2, hybrid or v1.
    pub mode: CgroupMode,
    /// The cgroup2 mount (the whole tree on v2, the controller-less one on hybrid).
    pub v2_mount: Option<String>,
    /// Controllers offered at the cgroup2 root (`cgroup.controllers`).
    pub v2_controllers: Vec<String>,
    /// Every controller the kernel knows, and where it can be used.
    pub controllers: Vec<ControllerCap>,
    /// Per-cgroup pressure files.
    pub per_cgroup_psi: Feature,
    /// Where cgroup eBPF programs attach.
    pub bpf_attach: Feature,
    /// The agent's managed root, once prepared.
    pub managed_root: Option<ManagedRootCaps>,
}

/// One cgroup controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControllerCap {
    /// Controller name.
    pub name: String,
    /// `v1`, `v2` or `none`.
    pub hierarchy: String,
    /// Mount point of its hierarchy.
    pub path: Option<String>,
    /// Whether the agent can use it.
    pub usable: bool,
    /// Why (not).
    pub detail: String,
}

/// The managed root after preparation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedRootCaps {
    /// Relative path (e.g. `/daros`).
    pub path: String,
    /// Directories per hierarchy.
    pub dirs: Vec<String>,
    /// What could not be prepared.
    pub notes: Vec<String>,
}

/// eBPF facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BpfCaps {
    /// `bpf(2)` loads a program (tested with a 2-instruction socket filter).
    pub syscall: Feature,
    /// A `cgroup_skb` program loads (network floors and caps need it).
    pub cgroup_skb: Feature,
    /// Kernel BTF for CO-RE (`/sys/kernel/btf/vmlinux`).
    pub btf: Feature,
    /// bpffs mounted at `/sys/fs/bpf` (for pins that survive restarts).
    pub bpffs: Feature,
    /// JIT compiler.
    pub jit: Feature,
    /// kprobe perf events.
    pub kprobes: Feature,
    /// Relevant capabilities held by the agent (`CAP_BPF`, ...).
    pub capabilities: Vec<String>,
}

/// blk-iocost on the node's disks (`[qos] io_cost`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IoCostCaps {
    /// iocost is on for at least one disk.
    pub available: bool,
    /// What was done, or why not.
    pub detail: String,
    /// Each disk as the kernel reports it after the agent's changes.
    #[serde(default)]
    pub disks: Vec<daros_iocost::DiskCost>,
}

impl Default for IoCostCaps {
    fn default() -> Self {
        IoCostCaps {
            available: false,
            detail: "not set up (only darosd does)".into(),
            disks: Vec::new(),
        }
    }
}

/// The eBPF datapath, as darosd started it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DatapathCaps {
    /// Per-workload network accounting and caps (cgroup_skb programs).
    pub network: Feature,
    /// Per-workload run-queue latency and on-CPU time (tp_btf programs).
    pub runqueue: Feature,
    /// Network floors (the floor loop).
    pub floors: Feature,
}

impl Default for DatapathCaps {
    fn default() -> Self {
        let no = || Feature::no("not started (only darosd runs the datapath)");
        DatapathCaps {
            network: no(),
            runqueue: no(),
            floors: no(),
        }
    }
}
