//! Resource vectors and per-instance demands as placement counts them.

use crate::model::application::Application;
use crate::model::qos::{MinimalReservation, QosClass};
use crate::model::resources::ResourceProfile;
use crate::model::runtime::RuntimeRequirement;
use crate::model::workload::Workload;
use serde::{Deserialize, Serialize};

/// cpu (millicores), memory (bytes) and gpus as plain integers.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ResVec {
    /// Millicores.
    pub cpu: u64,
    /// Bytes.
    pub memory: u64,
    /// Devices.
    pub gpu: u64,
}

impl ResVec {
    /// Component-wise sum (saturating).
    #[must_use]
    pub fn plus(self, o: ResVec) -> ResVec {
        ResVec {
            cpu: self.cpu.saturating_add(o.cpu),
            memory: self.memory.saturating_add(o.memory),
            gpu: self.gpu.saturating_add(o.gpu),
        }
    }

    /// Component-wise difference (clamped at zero).
    #[must_use]
    pub fn minus(self, o: ResVec) -> ResVec {
        ResVec {
            cpu: self.cpu.saturating_sub(o.cpu),
            memory: self.memory.saturating_sub(o.memory),
            gpu: self.gpu.saturating_sub(o.gpu),
        }
    }

    /// `n` times this vector.
    #[must_use]
    pub fn times(self, n: u64) -> ResVec {
        ResVec {
            cpu: self.cpu.saturating_mul(n),
            memory: self.memory.saturating_mul(n),
            gpu: self.gpu.saturating_mul(n),
        }
    }

    /// Component-wise maximum.
    #[must_use]
    pub fn max(self, o: ResVec) -> ResVec {
        ResVec {
            cpu: self.cpu.max(o.cpu),
            memory: self.memory.max(o.memory),
            gpu: self.gpu.max(o.gpu),
        }
    }

    /// True when every component is at most `o`'s.
    pub fn fits_in(self, o: ResVec) -> bool {
        self.cpu <= o.cpu && self.memory <= o.memory && self.gpu <= o.gpu
    }

    /// Dominant share of `self` in `cap`, in parts per billion (the DRF
    /// measure); dimensions with zero capacity are ignored.
    pub fn dominant_share_ppb(self, cap: ResVec) -> u64 {
        let share = |a: u64, c: u64| {
            if c == 0 {
                0
            } else {
                (u128::from(a) * 1_000_000_000 / u128::from(c)) as u64
            }
        };
        share(self.cpu, cap.cpu)
            .max(share(self.memory, cap.memory))
            .max(share(self.gpu, cap.gpu))
    }

    /// Human form: `cpu 1500m, memory 2Gi, gpu 1`.
    pub fn describe(self) -> String {
        use crate::model::resources::{Bytes, MilliCpu};
        let mut s = format!("cpu {}, memory {}", MilliCpu(self.cpu), Bytes(self.memory));
        if self.gpu > 0 {
            s.push_str(&format!(", gpu {}", self.gpu));
        }
        s
    }
}

/// What one instance asks of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    /// Requests (counted against capacity, cpu subject to overcommit).
    pub request: ResVec,
    /// Floors that are never overcommitted: reservations and dedicated cores.
    pub reserve: ResVec,
    /// Network reservations (egress, ingress), bytes/s.
    pub net_reserve: (u64, u64),
    /// Runtime and OS.
    pub runtime: RuntimeRequirement,
    /// QoS class.
    pub qos: QosClass,
}

impl Demand {
    /// Demand of one replica of `w` in `app`. Replica 0 also runs the init
    /// jobs first, so it asks the component-wise maximum of both.
    pub fn of(app: &Application, w: &Workload, replica: u32) -> Demand {
        let mut request = profile_request(&w.resources);
        if replica == 0 {
            for (_, j) in w.all_init_jobs() {
                request = request.max(profile_request(&j.resources));
            }
        }
        let m = MinimalReservation::from_profile(&w.resources);
        let dedicated = w.resources.dedicated_cores().unwrap_or(0) * 1000;
        Demand {
            request,
            reserve: ResVec {
                cpu: m.cpu.map_or(0, |c| c.get()).max(dedicated),
                memory: m.memory.map_or(0, |b| b.get()),
                gpu: 0,
            },
            net_reserve: (
                m.network_egress.map_or(0, |b| b.get()),
                m.network_ingress.map_or(0, |b| b.get()),
            ),
            runtime: w.runtime,
            qos: app.qos_of(w),
        }
    }

    /// True for classes that interfere with latency-critical neighbours.
    pub fn is_noisy(&self) -> bool {
        matches!(self.qos, QosClass::BestEffort | QosClass::Burstable)
    }
}

fn profile_request(p: &ResourceProfile) -> ResVec {
    ResVec {
        cpu: p.cpu_demand().get(),
        memory: p.memory_demand().get(),
        gpu: u64::from(p.gpu_demand().get()),
    }
}
