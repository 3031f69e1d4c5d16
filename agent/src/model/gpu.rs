//! GPU state as served by the API.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// GPUs of the node, or why there are none.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct GpuReport {
    /// True when NVML initialised.
    pub available: bool,
    /// Why no GPU data is reported (`no GPU: ...`), when not available.
    pub reason: Option<String>,
    /// Driver version reported by NVML.
    pub driver_version: Option<String>,
    /// One entry per device.
    pub devices: Vec<GpuDevice>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuDevice {
    /// NVML index.
    pub index: u32,
    /// Stable identifier.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Percent of time a kernel was running over the last sample period.
    pub utilization_gpu_percent: Option<u32>,
    /// Percent of time device memory was read or written.
    pub utilization_memory_percent: Option<u32>,
    /// Installed memory.
    pub memory_total_bytes: Option<u64>,
    /// Allocated memory.
    pub memory_used_bytes: Option<u64>,
    /// Power draw.
    pub power_watts: Option<f64>,
    /// GPU die temperature.
    pub temperature_celsius: Option<u32>,
    /// Processes holding memory on the device.
    pub processes: Vec<GpuProcess>,
    /// Readings that failed on this device, with the error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuProcess {
    /// Process id (host pid namespace).
    pub pid: u32,
    /// GPU memory used by the process, where the driver reports it.
    pub used_memory_bytes: Option<u64>,
    /// The workload whose cgroup holds the process.
    pub workload: Option<String>,
}
