//! Node-level sample.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::gpu::GpuReport;
use super::pressure::PsiSample;

/// Everything the agent measured about the node at one tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeSample {
    /// Node name (hostname unless configured).
    pub node: String,
    /// Kernel release.
    pub kernel: String,
    /// When the sample was taken, milliseconds since the Unix epoch.
    pub sampled_at_unix_ms: u64,
    /// CPU.
    pub cpu: NodeCpu,
    /// Memory.
    pub memory: NodeMemory,
    /// Whole block devices.
    pub disks: Vec<DiskSample>,
    /// Network interfaces.
    pub network: Vec<NetSample>,
    /// Node pressure from `/proc/pressure` (`None`: kernel without PSI).
    pub psi: Option<PsiSample>,
    /// GPUs.
    pub gpu: GpuReport,
    /// Number of workloads sampled.
    pub workloads: usize,
    /// The agent itself.
    pub agent: AgentInfo,
}

/// Node CPU.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NodeCpu {
    /// Online CPUs.
    pub cpus: u32,
    /// CPUs busy on average over the last interval (`None` on the first sample).
    pub usage_cores: Option<f64>,
    /// `usage_cores / cpus` (0..1).
    pub utilization: Option<f64>,
    /// Time in user mode (including nice).
    pub user_seconds_total: f64,
    /// Time in kernel mode (including irq and softirq).
    pub system_seconds_total: f64,
    /// Idle time.
    pub idle_seconds_total: f64,
    /// Idle while waiting for IO.
    pub iowait_seconds_total: f64,
    /// Time stolen by the hypervisor.
    pub steal_seconds_total: f64,
}

/// Node memory (from `/proc/meminfo`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NodeMemory {
    /// Usable RAM.
    pub total_bytes: u64,
    /// Estimate of memory available for new work without swapping.
    pub available_bytes: u64,
    /// `total - available`.
    pub used_bytes: u64,
    /// Unused RAM.
    pub free_bytes: u64,
    /// Page cache.
    pub cached_bytes: u64,
    /// Block device buffers.
    pub buffers_bytes: u64,
    /// Swap size.
    pub swap_total_bytes: u64,
    /// Unused swap.
    pub swap_free_bytes: u64,
}

/// One block device (from `/proc/diskstats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DiskSample {
    /// Kernel name (`vda`, `nvme0n1`).
    pub device: String,
    /// `MAJ:MIN`.
    pub dev: String,
    /// Completed reads.
    pub reads_total: u64,
    /// Completed writes.
    pub writes_total: u64,
    /// Bytes read.
    pub read_bytes_total: u64,
    /// Bytes written.
    pub write_bytes_total: u64,
    /// Time the device was busy.
    pub io_time_seconds_total: f64,
    /// Read throughput over the last interval.
    pub read_bytes_per_second: Option<f64>,
    /// Write throughput over the last interval.
    pub write_bytes_per_second: Option<f64>,
    /// Read operations per second.
    pub reads_per_second: Option<f64>,
    /// Write operations per second.
    pub writes_per_second: Option<f64>,
    /// Share of the interval the device was busy (0..1).
    pub utilization: Option<f64>,
}

/// One network interface (from `/proc/net/dev`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NetSample {
    /// Interface name.
    pub interface: String,
    /// Bytes received.
    pub rx_bytes_total: u64,
    /// Bytes sent.
    pub tx_bytes_total: u64,
    /// Packets received.
    pub rx_packets_total: u64,
    /// Packets sent.
    pub tx_packets_total: u64,
    /// Receive errors.
    pub rx_errors_total: u64,
    /// Transmit errors.
    pub tx_errors_total: u64,
    /// Received packets dropped.
    pub rx_dropped_total: u64,
    /// Sent packets dropped.
    pub tx_dropped_total: u64,
    /// Receive throughput over the last interval.
    pub rx_bytes_per_second: Option<f64>,
    /// Send throughput over the last interval.
    pub tx_bytes_per_second: Option<f64>,
    /// Packets received per second.
    pub rx_packets_per_second: Option<f64>,
    /// Packets sent per second.
    pub tx_packets_per_second: Option<f64>,
}

/// The running agent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct AgentInfo {
    /// Agent version.
    pub version: String,
    /// Process id of darosd.
    pub pid: u32,
    /// Seconds since the agent started.
    pub uptime_seconds: f64,
    /// Local API socket.
    pub socket: String,
    /// State directory.
    pub data_dir: String,
    /// Managed cgroup root (relative to each hierarchy).
    pub managed_root: String,
    /// Sampling interval.
    pub interval_ms: u64,
    /// Address of the Prometheus listener, if enabled.
    pub metrics_listen: Option<String>,
    /// Wall time the last sampling tick took.
    pub last_sample_duration_us: u64,
    /// Ticks since start.
    pub samples_total: u64,
    /// Workload reads that failed since start (other than removed cgroups).
    pub sample_errors_total: u64,
}
