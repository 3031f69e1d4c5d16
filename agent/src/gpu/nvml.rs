//! NVML implementation of [`GpuSource`] (nvml-wrapper dlopens libnvidia-ml at run time).

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;

use super::{GpuReading, GpuSource};

/// Library names tried in order (the unversioned name needs the dev package).
const LIBRARIES: &[&str] = &["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// Reads GPUs through NVML.
pub struct NvmlSource {
    nvml: Nvml,
}

impl NvmlSource {
    /// Initialises NVML from `library` or the default names; the error says why
    /// there is no GPU.
    pub fn init(library: Option<&str>) -> Result<Self, String> {
        let candidates: Vec<&str> = match library {
            Some(l) => vec![l],
            None => LIBRARIES.to_vec(),
        };
        let mut errors = Vec::new();
        for lib in candidates {
            match Nvml::builder().lib_path(std::ffi::OsStr::new(lib)).init() {
                Ok(nvml) => return Ok(NvmlSource { nvml }),
                Err(e) => errors.push(format!("{lib}: {e}")),
            }
        }
        Err(format!(
            "no GPU: NVML did not initialise ({})",
            errors.join("; ")
        ))
    }
}

impl GpuSource for NvmlSource {
    fn driver_version(&mut self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    fn read(&mut self) -> Result<Vec<GpuReading>, String> {
        let count = self.nvml.device_count().map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(count as usize);
        for index in 0..count {
            let dev = match self.nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    out.push(GpuReading {
                        index,
                        errors: vec![format!("device: {e}")],
                        ..GpuReading::default()
                    });
                    continue;
                }
            };
            let mut r = GpuReading {
                index,
                ..GpuReading::default()
            };
            let mut errors = Vec::new();
            match dev.uuid() {
                Ok(u) => r.uuid = u,
                Err(e) => errors.push(fmt_err("uuid", e)),
            }
            match dev.name() {
                Ok(n) => r.name = n,
                Err(e) => errors.push(fmt_err("name", e)),
            }
            match dev.utilization_rates() {
                Ok(u) => {
                    r.utilization_gpu = Some(u.gpu);
                    r.utilization_memory = Some(u.memory);
                }
                Err(e) => errors.push(fmt_err("utilization", e)),
            }
            match dev.memory_info() {
                Ok(m) => {
                    r.memory_total = Some(m.total);
                    r.memory_used = Some(m.used);
                }
                Err(e) => errors.push(fmt_err("memory", e)),
            }
            match dev.power_usage() {
                Ok(p) => r.power_mw = Some(p),
                Err(e) => errors.push(fmt_err("power", e)),
            }
            match dev.temperature(TemperatureSensor::Gpu) {
                Ok(t) => r.temperature_c = Some(t),
                Err(e) => errors.push(fmt_err("temperature", e)),
            }
            let compute = dev.running_compute_processes();
            let graphics = dev.running_graphics_processes();
            for list in [compute, graphics] {
                match list {
                    Ok(ps) => {
                        for p in ps {
                            let used = match p.used_gpu_memory {
                                UsedGpuMemory::Used(b) => Some(b),
                                UsedGpuMemory::Unavailable => None,
                            };
                            match r.processes.iter_mut().find(|(pid, _)| *pid == p.pid) {
                                Some(e) => e.1 = e.1.max(used),
                                None => r.processes.push((p.pid, used)),
                            }
                        }
                    }
                    Err(e) => errors.push(fmt_err("processes", e)),
                }
            }
            r.errors = errors;
            out.push(r);
        }
        Ok(out)
    }
}

fn fmt_err(what: &str, e: nvml_wrapper::error::NvmlError) -> String {
    format!("{what}: {e}")
}
