//! Workloads and their samples.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pressure::PsiSample;

/// Where a workload came from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    /// A cgroup under the agent's managed root (id `managed/<name>`).
    Managed,
    /// A Kubernetes pod cgroup under kubepods (id `k8s/<pod-uid>`); observed only.
    KubernetesPod,
    /// A systemd unit cgroup (id `systemd/<unit>`); observed only.
    SystemdUnit,
}

impl WorkloadKind {
    /// The id prefix and the name used in `darosctl` output.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Managed => "managed",
            WorkloadKind::KubernetesPod => "k8s",
            WorkloadKind::SystemdUnit => "systemd",
        }
    }
}

/// A workload: a cgroup the agent samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Workload {
    /// Stable id: `managed/<name>`, `k8s/<pod-uid>` or `systemd/<unit>`.
    pub id: String,
    /// Origin.
    pub kind: WorkloadKind,
    /// Cgroup path relative to each hierarchy root (e.g. `/daros/web`).
    pub cgroup: String,
    /// The directories that make up the cgroup (one per hierarchy on v1/hybrid).
    pub paths: Vec<String>,
    /// Kubernetes QoS class of a pod (`guaranteed`, `burstable`, `besteffort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s_qos: Option<String>,
    /// True for cgroups the agent manages (writes); false for observed ones.
    pub managed: bool,
    /// Latest sample.
    pub sample: WorkloadSample,
}

/// The list served by `/v1/workloads`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct WorkloadList {
    /// When the sample was taken, milliseconds since the Unix epoch.
    pub sampled_at_unix_ms: u64,
    /// Workloads sorted by id.
    pub workloads: Vec<Workload>,
}

/// Counters and rates of one workload at one tick. Rates are `None` on the first
/// sample and after a counter went backwards (reset or cgroup recreated).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct WorkloadSample {
    /// CPU.
    pub cpu: Option<CpuSample>,
    /// Memory.
    pub memory: Option<MemorySample>,
    /// Block IO per device.
    pub io: Option<Vec<IoDeviceSample>>,
    /// Tasks in the cgroup.
    pub pids: Option<u64>,
    /// Pressure stall information.
    pub psi: PsiSample,
    /// GPU memory held by the workload's processes.
    pub gpu_memory_bytes: Option<u64>,
    /// Network traffic, caps and throttling (eBPF datapath; managed workloads and
    /// those under a class).
    #[serde(default)]
    pub network: Option<super::net::NetworkSample>,
    /// Run-queue latency and on-CPU time (eBPF datapath).
    #[serde(default)]
    pub runqueue: Option<super::net::RunQueueSample>,
    /// Areas this workload cannot report on this host, with the reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable: BTreeMap<String, String>,
}

/// CPU of a workload.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct CpuSample {
    /// CPU time consumed.
    pub usage_seconds_total: f64,
    /// User CPU time, where reported.
    pub user_seconds_total: Option<f64>,
    /// System CPU time, where reported.
    pub system_seconds_total: Option<f64>,
    /// CPUs used on average over the last interval.
    pub usage_cores: Option<f64>,
    /// CFS bandwidth enforcement, where the cpu controller is active.
    pub throttling: Option<ThrottlingSample>,
}

/// CFS bandwidth counters.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ThrottlingSample {
    /// Enforcement periods elapsed.
    pub periods_total: u64,
    /// Periods in which the workload was throttled.
    pub throttled_periods_total: u64,
    /// Time throttled.
    pub throttled_seconds_total: f64,
    /// Share of the last interval's periods that were throttled (0..1).
    pub throttled_ratio: Option<f64>,
}

/// Memory of a workload.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct MemorySample {
    /// Memory charged to the cgroup.
    pub current_bytes: u64,
    /// Anonymous memory.
    pub anon_bytes: u64,
    /// Page cache (including shmem).
    pub file_bytes: u64,
    /// Event counters (v1 reports only `max` and `oom_kill`).
    pub events: MemoryEventsSample,
}

/// Memory event counters.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct MemoryEventsSample {
    /// Reclaimed below memory.low.
    pub low: Option<u64>,
    /// Throttled by memory.high.
    pub high: Option<u64>,
    /// Hit the limit (v1: failcnt).
    pub max: Option<u64>,
    /// Out-of-memory situations.
    pub oom: Option<u64>,
    /// OOM kills.
    pub oom_kill: Option<u64>,
}

/// Block IO of a workload on one device.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct IoDeviceSample {
    /// `MAJ:MIN`.
    pub dev: String,
    /// Kernel device name, where known.
    pub device: Option<String>,
    /// Bytes read.
    pub read_bytes_total: u64,
    /// Bytes written.
    pub write_bytes_total: u64,
    /// Read operations.
    pub reads_total: u64,
    /// Write operations.
    pub writes_total: u64,
    /// Bytes discarded.
    pub discard_bytes_total: u64,
    /// Read throughput over the last interval.
    pub read_bytes_per_second: Option<f64>,
    /// Write throughput over the last interval.
    pub write_bytes_per_second: Option<f64>,
    /// Read operations per second.
    pub reads_per_second: Option<f64>,
    /// Write operations per second.
    pub writes_per_second: Option<f64>,
}
