//! GPU sensing behind the [`GpuSource`] trait: NVML on GPU nodes, nothing
//! elsewhere ("no GPU" with the reason), and a named fake for tests.
//! Per-process GPU memory is attributed to workloads by the process's cgroup.

pub mod fake;
pub mod mapping;
pub mod nvml;

use crate::model::gpu::{GpuDevice, GpuProcess, GpuReport};

/// What one device reported at one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReading {
    /// Device index.
    pub index: u32,
    /// Stable id.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Kernel-busy percent.
    pub utilization_gpu: Option<u32>,
    /// Memory-busy percent.
    pub utilization_memory: Option<u32>,
    /// Installed memory.
    pub memory_total: Option<u64>,
    /// Allocated memory.
    pub memory_used: Option<u64>,
    /// Power draw in milliwatts.
    pub power_mw: Option<u32>,
    /// Temperature in °C.
    pub temperature_c: Option<u32>,
    /// `(pid, used bytes)` of processes on the device.
    pub processes: Vec<(u32, Option<u64>)>,
    /// Readings that failed.
    pub errors: Vec<String>,
}

/// A source of GPU readings.
pub trait GpuSource: Send {
    /// Driver version, if known.
    fn driver_version(&mut self) -> Option<String>;
    /// Reads every device; per-field failures go into [`GpuReading::errors`].
    fn read(&mut self) -> Result<Vec<GpuReading>, String>;
}

/// Turns a [`GpuSource`] (or its absence) into [`GpuReport`]s.
pub struct GpuCollector {
    source: Option<Box<dyn GpuSource>>,
    reason: Option<String>,
    driver: Option<String>,
}

impl std::fmt::Debug for GpuCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuCollector")
            .field("available", &self.source.is_some())
            .field("reason", &self.reason)
            .finish()
    }
}

impl GpuCollector {
    /// No GPU, for `reason`.
    pub fn none(reason: impl Into<String>) -> Self {
        GpuCollector {
            source: None,
            reason: Some(reason.into()),
            driver: None,
        }
    }

    /// Collects from `source`.
    pub fn with_source(mut source: Box<dyn GpuSource>) -> Self {
        let driver = source.driver_version();
        GpuCollector {
            source: Some(source),
            reason: None,
            driver,
        }
    }

    /// NVML if it initialises, otherwise "no GPU" with NVML's error.
    pub fn detect(library: Option<&str>) -> Self {
        match nvml::NvmlSource::init(library) {
            Ok(s) => Self::with_source(Box::new(s)),
            Err(reason) => Self::none(reason),
        }
    }

    /// True when a source is present.
    pub fn available(&self) -> bool {
        self.source.is_some()
    }

    /// Why no GPU is reported.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Reads the devices and attributes processes with `workload_of(pid)`.
    pub fn collect(&mut self, mut workload_of: impl FnMut(u32) -> Option<String>) -> GpuReport {
        let Some(source) = self.source.as_mut() else {
            return GpuReport {
                available: false,
                reason: self.reason.clone(),
                driver_version: None,
                devices: Vec::new(),
            };
        };
        match source.read() {
            Err(e) => GpuReport {
                available: true,
                reason: Some(format!("reading GPUs failed: {e}")),
                driver_version: self.driver.clone(),
                devices: Vec::new(),
            },
            Ok(readings) => GpuReport {
                available: true,
                reason: None,
                driver_version: self.driver.clone(),
                devices: readings
                    .into_iter()
                    .map(|r| GpuDevice {
                        index: r.index,
                        uuid: r.uuid,
                        name: r.name,
                        utilization_gpu_percent: r.utilization_gpu,
                        utilization_memory_percent: r.utilization_memory,
                        memory_total_bytes: r.memory_total,
                        memory_used_bytes: r.memory_used,
                        power_watts: r.power_mw.map(|mw| f64::from(mw) / 1000.0),
                        temperature_celsius: r.temperature_c,
                        processes: r
                            .processes
                            .into_iter()
                            .map(|(pid, used)| GpuProcess {
                                pid,
                                used_memory_bytes: used,
                                workload: workload_of(pid),
                            })
                            .collect(),
                        errors: r.errors,
                    })
                    .collect(),
            },
        }
    }
}

/// GPU memory per workload id, summed over devices and processes.
pub fn memory_by_workload(report: &GpuReport) -> std::collections::HashMap<&str, u64> {
    let mut m = std::collections::HashMap::new();
    for d in &report.devices {
        for p in &d.processes {
            if let (Some(w), Some(bytes)) = (p.workload.as_deref(), p.used_memory_bytes) {
                *m.entry(w).or_insert(0) += bytes;
            }
        }
    }
    m
}
