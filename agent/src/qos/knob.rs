//! What the QoS layer sets: one [`Knob`] per cgroup interface file (v2 or v1),
//! plus the floors that no single file holds (enforced by the protection loop or
//! the eBPF datapath). A [`KnobPlan`] says what to do with a knob; a
//! [`KnobReport`] says what happened.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cgroup::v1;
use crate::cgroup::v2;

/// The resource a knob belongs to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// CPU time and cores.
    Cpu,
    /// Memory.
    Memory,
    /// Block IO.
    Io,
    /// Process count.
    Pids,
    /// Network bandwidth.
    Network,
    /// GPU devices.
    Gpu,
}

impl Resource {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::Io => "io",
            Resource::Pids => "pids",
            Resource::Network => "network",
            Resource::Gpu => "gpu",
        }
    }
}

/// A cgroup file the QoS layer writes, or a floor held by a mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Knob {
    /// v2 `cpu.weight`.
    CpuWeight,
    /// v2 `cpu.max`.
    CpuMax,
    /// v2 `cpuset.cpus`.
    CpusetCpus,
    /// v2 `cpuset.cpus.partition`.
    CpusetPartition,
    /// v2 `memory.min`.
    MemoryMin,
    /// v2 `memory.low`.
    MemoryLow,
    /// v2 `memory.high`.
    MemoryHigh,
    /// v2 `memory.max`.
    MemoryMax,
    /// v2 `io.weight`.
    IoWeight,
    /// v2 `io.bfq.weight`.
    IoBfqWeight,
    /// v2 `io.max`.
    IoMax,
    /// `pids.max` (v1 and v2).
    PidsMax,
    /// v1 `cpu.shares`.
    CpuShares,
    /// v1 `cpu.cfs_period_us`.
    CpuCfsPeriod,
    /// v1 `cpu.cfs_quota_us`.
    CpuCfsQuota,
    /// v1 `cpuset.cpus`.
    V1CpusetCpus,
    /// v1 `cpuset.cpu_exclusive`.
    V1CpuExclusive,
    /// v1 `memory.soft_limit_in_bytes`.
    MemorySoftLimit,
    /// v1 `memory.limit_in_bytes`.
    MemoryLimit,
    /// v1 `blkio.weight` / `blkio.bfq.weight`.
    BlkioWeight,
    /// v1 `blkio.throttle.read_bps_device`.
    BlkioReadBps,
    /// v1 `blkio.throttle.write_bps_device`.
    BlkioWriteBps,
    /// CPU floor (no kernel file: cpu weight plus the protection loop).
    CpuFloor,
    /// Memory floor on v1 (v1 has no `memory.min`).
    V1MemoryFloor,
    /// Memory throttle limit on v1 (v1 has no `memory.high`).
    V1MemoryHigh,
    /// Read bandwidth floor (protection loop).
    IoReadFloor,
    /// Write bandwidth floor (protection loop).
    IoWriteFloor,
    /// Egress bandwidth floor/cap (eBPF datapath).
    NetworkEgress,
    /// Ingress bandwidth floor/cap (eBPF datapath).
    NetworkIngress,
    /// GPU devices.
    Gpu,
}

/// Which hierarchy a file lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Home {
    /// The unified (v2) tree.
    V2,
    /// A v1 hierarchy, named by its controller.
    V1(&'static str),
    /// No file: a mechanism.
    None,
}

impl Knob {
    /// The name shown to people: the file name, or `floor.<resource>` for floors.
    pub fn name(self) -> &'static str {
        match self {
            Knob::CpuWeight => v2::cpu::WEIGHT,
            Knob::CpuMax => v2::cpu::MAX,
            Knob::CpusetCpus | Knob::V1CpusetCpus => v2::cpuset::CPUS,
            Knob::CpusetPartition => v2::cpuset::CPUS_PARTITION,
            Knob::MemoryMin => v2::memory::MIN,
            Knob::MemoryLow => v2::memory::LOW,
            Knob::MemoryHigh => v2::memory::HIGH,
            Knob::MemoryMax => v2::memory::MAX,
            Knob::IoWeight => v2::io::WEIGHT,
            Knob::IoBfqWeight => v2::io::BFQ_WEIGHT,
            Knob::IoMax => v2::io::MAX,
            Knob::PidsMax => v2::pids::MAX,
            Knob::CpuShares => v1::cpu::SHARES,
            Knob::CpuCfsPeriod => v1::cpu::CFS_PERIOD_US,
            Knob::CpuCfsQuota => v1::cpu::CFS_QUOTA_US,
            Knob::V1CpuExclusive => v1::cpuset::CPU_EXCLUSIVE,
            Knob::MemorySoftLimit => v1::memory::SOFT_LIMIT,
            Knob::MemoryLimit => v1::memory::LIMIT,
            Knob::BlkioWeight => v1::blkio::WEIGHT,
            Knob::BlkioReadBps => v1::blkio::READ_BPS_DEVICE,
            Knob::BlkioWriteBps => v1::blkio::WRITE_BPS_DEVICE,
            Knob::CpuFloor => "floor.cpu",
            Knob::V1MemoryFloor => "floor.memory",
            Knob::V1MemoryHigh => "memory.high (v1)",
            Knob::IoReadFloor => "floor.io.read",
            Knob::IoWriteFloor => "floor.io.write",
            Knob::NetworkEgress => "network.egress",
            Knob::NetworkIngress => "network.ingress",
            Knob::Gpu => "gpu",
        }
    }

    /// The resource the knob controls.
    pub fn resource(self) -> Resource {
        match self {
            Knob::CpuWeight
            | Knob::CpuMax
            | Knob::CpusetCpus
            | Knob::CpusetPartition
            | Knob::CpuShares
            | Knob::CpuCfsPeriod
            | Knob::CpuCfsQuota
            | Knob::V1CpusetCpus
            | Knob::V1CpuExclusive
            | Knob::CpuFloor => Resource::Cpu,
            Knob::MemoryMin
            | Knob::MemoryLow
            | Knob::MemoryHigh
            | Knob::MemoryMax
            | Knob::MemorySoftLimit
            | Knob::MemoryLimit
            | Knob::V1MemoryFloor
            | Knob::V1MemoryHigh => Resource::Memory,
            Knob::IoWeight
            | Knob::IoBfqWeight
            | Knob::IoMax
            | Knob::BlkioWeight
            | Knob::BlkioReadBps
            | Knob::BlkioWriteBps
            | Knob::IoReadFloor
            | Knob::IoWriteFloor => Resource::Io,
            Knob::PidsMax => Resource::Pids,
            Knob::NetworkEgress | Knob::NetworkIngress => Resource::Network,
            Knob::Gpu => Resource::Gpu,
        }
    }

    /// The hierarchy holding the file.
    pub fn home(self) -> Home {
        match self {
            Knob::CpuWeight
            | Knob::CpuMax
            | Knob::CpusetCpus
            | Knob::CpusetPartition
            | Knob::MemoryMin
            | Knob::MemoryLow
            | Knob::MemoryHigh
            | Knob::MemoryMax
            | Knob::IoWeight
            | Knob::IoBfqWeight
            | Knob::IoMax => Home::V2,
            Knob::PidsMax => Home::V1("pids"),
            Knob::CpuShares | Knob::CpuCfsPeriod | Knob::CpuCfsQuota => Home::V1("cpu"),
            Knob::V1CpusetCpus | Knob::V1CpuExclusive => Home::V1("cpuset"),
            Knob::MemorySoftLimit | Knob::MemoryLimit => Home::V1("memory"),
            Knob::BlkioWeight | Knob::BlkioReadBps | Knob::BlkioWriteBps => Home::V1("blkio"),
            Knob::CpuFloor
            | Knob::V1MemoryFloor
            | Knob::V1MemoryHigh
            | Knob::IoReadFloor
            | Knob::IoWriteFloor
            | Knob::NetworkEgress
            | Knob::NetworkIngress
            | Knob::Gpu => Home::None,
        }
    }

    /// The controller a v2 file needs (`cpu.weight` → `cpu`).
    pub fn v2_controller(self) -> Option<&'static str> {
        match self.home() {
            Home::V2 => self.name().split('.').next(),
            _ => None,
        }
    }

    /// True for files holding one value per device (written line by line).
    pub fn per_device(self) -> bool {
        matches!(self, Knob::IoMax | Knob::BlkioReadBps | Knob::BlkioWriteBps)
    }
}

impl std::fmt::Display for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What to do with one knob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanAction {
    /// Write each value in its own `write(2)` (per-device files take one line
    /// per device) and read the file back.
    Write(Vec<String>),
    /// Write and read back, but report degraded: the kernel accepts the value
    /// and it has no effect here (io.weight without a weight-based IO controller).
    WriteInert {
        /// Values to write.
        values: Vec<String>,
        /// Why it does nothing.
        reason: String,
    },
    /// Not written.
    Degraded(String),
    /// Held by a mechanism rather than a file of this cgroup.
    Mechanism {
        /// True when the mechanism is active.
        enforced: bool,
        /// How the floor is held, or why it is not.
        how: String,
    },
}

/// One planned knob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnobPlan {
    /// The knob.
    pub knob: Knob,
    /// What the class and profile ask, in words (`reservation 512Mi`, `no limit`).
    pub requested: String,
    /// What to do.
    pub action: PlanAction,
}

impl KnobPlan {
    /// A write of one value.
    pub fn write(knob: Knob, requested: impl Into<String>, value: impl Into<String>) -> Self {
        KnobPlan {
            knob,
            requested: requested.into(),
            action: PlanAction::Write(vec![value.into()]),
        }
    }

    /// A knob that is not written, with the reason.
    pub fn degraded(knob: Knob, requested: impl Into<String>, reason: impl Into<String>) -> Self {
        KnobPlan {
            knob,
            requested: requested.into(),
            action: PlanAction::Degraded(reason.into()),
        }
    }

    /// The values this plan writes.
    pub fn values(&self) -> &[String] {
        match &self.action {
            PlanAction::Write(v) | PlanAction::WriteInert { values: v, .. } => v,
            _ => &[],
        }
    }
}

/// Whether a knob holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KnobStatus {
    /// Written and read back equal, or held by an active mechanism.
    Enforced,
    /// Not in effect as requested; `reason` says why.
    Degraded,
}

impl KnobStatus {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            KnobStatus::Enforced => "enforced",
            KnobStatus::Degraded => "degraded",
        }
    }
}

/// The outcome of one knob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct KnobReport {
    /// File name (`memory.min`) or floor name (`floor.cpu`).
    pub knob: String,
    /// Resource.
    pub resource: Resource,
    /// What the class and profile ask.
    pub requested: String,
    /// The value in effect, as read back from the kernel (or the mechanism).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    /// Enforced or degraded.
    pub status: KnobStatus,
    /// Why it is degraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How a floor without a kernel file is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl KnobReport {
    /// An enforced knob.
    pub fn enforced(plan: &KnobPlan, applied: impl Into<String>) -> Self {
        KnobReport {
            knob: plan.knob.name().to_string(),
            resource: plan.knob.resource(),
            requested: plan.requested.clone(),
            applied: Some(applied.into()),
            status: KnobStatus::Enforced,
            reason: None,
            note: None,
        }
    }

    /// A degraded knob.
    pub fn degraded(plan: &KnobPlan, applied: Option<String>, reason: impl Into<String>) -> Self {
        KnobReport {
            knob: plan.knob.name().to_string(),
            resource: plan.knob.resource(),
            requested: plan.requested.clone(),
            applied,
            status: KnobStatus::Degraded,
            reason: Some(reason.into()),
            note: None,
        }
    }

    /// The applied value as a number where it is one (`max` → +∞), for metrics.
    pub fn applied_number(&self) -> Option<f64> {
        let a = self.applied.as_deref()?.trim();
        if a == "max" {
            return Some(f64::INFINITY);
        }
        if let Some((q, p)) = v2::cpu::parse_max(a) {
            return Some(q.map_or(f64::INFINITY, |q| q as f64 / p as f64));
        }
        if let Some(w) = v2::io::parse_default_weight(a) {
            return Some(w as f64);
        }
        a.parse::<f64>().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_homes_and_controllers() {
        assert_eq!(Knob::MemoryMin.name(), "memory.min");
        assert_eq!(Knob::MemoryMin.v2_controller(), Some("memory"));
        assert_eq!(Knob::CpusetPartition.v2_controller(), Some("cpuset"));
        assert_eq!(Knob::IoBfqWeight.v2_controller(), Some("io"));
        assert_eq!(Knob::CpuShares.home(), Home::V1("cpu"));
        assert_eq!(Knob::CpuFloor.home(), Home::None);
        assert_eq!(Knob::BlkioReadBps.resource(), Resource::Io);
        assert!(Knob::IoMax.per_device() && !Knob::IoWeight.per_device());
    }

    #[test]
    fn applied_numbers() {
        let plan = KnobPlan::write(Knob::CpuMax, "limit 1500m", "150000 100000");
        let r = KnobReport::enforced(&plan, "150000 100000");
        assert_eq!(r.applied_number(), Some(1.5));
        let r = KnobReport::enforced(&plan, "max 100000");
        assert_eq!(r.applied_number(), Some(f64::INFINITY));
        let r = KnobReport::enforced(&plan, "536870912");
        assert_eq!(r.applied_number(), Some(536_870_912.0));
        let r = KnobReport::enforced(&plan, "default 1000");
        assert_eq!(r.applied_number(), Some(1000.0));
        let r = KnobReport::degraded(&plan, None, "x");
        assert_eq!(r.applied_number(), None);
    }
}
