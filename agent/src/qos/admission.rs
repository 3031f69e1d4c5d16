//! Node admission of MinimalReservations: the floors of every workload under a
//! class never add up to more than the allocatable amount (capacity minus the
//! configured system reserve). Pure: the caller runs it inside the store
//! transaction that persists the result, so admission and persistence are atomic.

use std::fmt;

use daros_coordinator::{Bytes, BytesPerSec, MilliCpu, MinimalReservation};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the node offers to floors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeBudget {
    /// Online CPUs.
    pub cpu: MilliCpu,
    /// Physical memory.
    pub memory: Bytes,
    /// Read bandwidth offered to IO floors (`None`: unknown, IO read floors refused).
    pub io_read: Option<BytesPerSec>,
    /// Write bandwidth offered to IO floors.
    pub io_write: Option<BytesPerSec>,
    /// Egress bandwidth offered to network floors.
    pub network_egress: Option<BytesPerSec>,
    /// Ingress bandwidth offered to network floors.
    pub network_ingress: Option<BytesPerSec>,
    /// CPU kept for the system.
    pub reserved_cpu: MilliCpu,
    /// Memory kept for the system.
    pub reserved_memory: Bytes,
}

/// One resource's account, for the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceAccount {
    /// Resource (`cpu`, `memory`, `io.read`, `io.write`, `network.egress`, `network.ingress`).
    pub resource: String,
    /// Node capacity (`unknown` when not configured).
    pub capacity: String,
    /// System reserve.
    pub system_reserved: String,
    /// Capacity minus the reserve.
    pub allocatable: String,
    /// Sum of admitted floors.
    pub reserved: String,
    /// Base-unit numbers for scripts and metrics: allocatable (absent when unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable_value: Option<u64>,
    /// Sum of admitted floors in the base unit (millicores, bytes, bytes/s).
    pub reserved_value: u64,
}

/// A reservation refused by admission.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct AdmissionError(pub Vec<String>);

/// One resource with its quantities in the base unit.
struct Line {
    name: &'static str,
    capacity: Option<u64>,
    reserve: u64,
    get: fn(&MinimalReservation) -> Option<u64>,
    show: fn(u64) -> String,
    config_key: &'static str,
    /// What else gives the capacity, for the refusal.
    hint: &'static str,
}

fn show_cpu(v: u64) -> String {
    MilliCpu(v).to_string()
}
fn show_bytes(v: u64) -> String {
    Bytes(v).to_string()
}
fn show_rate(v: u64) -> String {
    BytesPerSec(v).to_string()
}

impl NodeBudget {
    fn lines(&self) -> [Line; 6] {
        [
            Line {
                name: "cpu",
                capacity: Some(self.cpu.get()),
                reserve: self.reserved_cpu.get(),
                get: |r| r.cpu.map(MilliCpu::get),
                show: show_cpu,
                config_key: "qos.system_reserved_cpu",
                hint: "",
            },
            Line {
                name: "memory",
                capacity: Some(self.memory.get()),
                reserve: self.reserved_memory.get(),
                get: |r| r.memory.map(Bytes::get),
                show: show_bytes,
                config_key: "qos.system_reserved_memory",
                hint: "",
            },
            Line {
                name: "io read",
                capacity: self.io_read.map(BytesPerSec::get),
                reserve: 0,
                get: |r| r.io_read.map(BytesPerSec::get),
                show: show_rate,
                config_key: "qos.io_read_capacity",
                hint: "; or, on cgroup v2, qos.io_cost = \"measure\" (the default) measures the disk",
            },
            Line {
                name: "io write",
                capacity: self.io_write.map(BytesPerSec::get),
                reserve: 0,
                get: |r| r.io_write.map(BytesPerSec::get),
                show: show_rate,
                config_key: "qos.io_write_capacity",
                hint: "; or, on cgroup v2, qos.io_cost = \"measure\" (the default) measures the disk",
            },
            Line {
                name: "network egress",
                capacity: self.network_egress.map(BytesPerSec::get),
                reserve: 0,
                get: |r| r.network_egress.map(BytesPerSec::get),
                show: show_rate,
                config_key: "qos.network_egress_capacity",
                hint: "",
            },
            Line {
                name: "network ingress",
                capacity: self.network_ingress.map(BytesPerSec::get),
                reserve: 0,
                get: |r| r.network_ingress.map(BytesPerSec::get),
                show: show_rate,
                config_key: "qos.network_ingress_capacity",
                hint: "",
            },
        ]
    }

    /// Checks `new` against the floors already admitted (`others`, which must not
    /// include the workload being replaced).
    pub fn admit<'a>(
        &self,
        others: impl Iterator<Item = &'a MinimalReservation> + Clone,
        new: &MinimalReservation,
    ) -> Result<(), AdmissionError> {
        let mut refusals = Vec::new();
        for l in self.lines() {
            let Some(asked) = (l.get)(new).filter(|v| *v > 0) else {
                continue;
            };
            let taken: u64 = others.clone().filter_map(l.get).sum();
            let Some(cap) = l.capacity else {
                refusals.push(format!(
                    "{} reservation {} refused: the node's {} capacity is unknown (set {}{})",
                    l.name,
                    (l.show)(asked),
                    l.name,
                    l.config_key,
                    l.hint
                ));
                continue;
            };
            let allocatable = cap.saturating_sub(l.reserve);
            if taken.saturating_add(asked) > allocatable {
                refusals.push(format!(
                    "{} reservation {} refused: {} of {} allocatable already reserved (capacity {}, system reserve {})",
                    l.name,
                    (l.show)(asked),
                    (l.show)(taken),
                    (l.show)(allocatable),
                    (l.show)(cap),
                    (l.show)(l.reserve)
                ));
            }
        }
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(AdmissionError(refusals))
        }
    }

    /// The account of every resource given the admitted floors.
    pub fn accounts<'a>(
        &self,
        all: impl Iterator<Item = &'a MinimalReservation> + Clone,
    ) -> Vec<ResourceAccount> {
        self.lines()
            .into_iter()
            .map(|l| {
                let reserved: u64 = all.clone().filter_map(l.get).sum();
                let allocatable = l.capacity.map(|c| c.saturating_sub(l.reserve));
                ResourceAccount {
                    resource: l.name.replace(' ', "."),
                    capacity: l.capacity.map_or_else(|| "unknown".into(), l.show),
                    system_reserved: (l.show)(l.reserve),
                    allocatable: allocatable.map_or_else(|| "unknown".into(), l.show),
                    reserved: (l.show)(reserved),
                    allocatable_value: allocatable,
                    reserved_value: reserved,
                }
            })
            .collect()
    }
}

impl fmt::Display for ResourceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} of {} allocatable reserved",
            self.resource, self.reserved, self.allocatable
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> NodeBudget {
        NodeBudget {
            cpu: MilliCpu::from_cores(4),
            memory: Bytes::from_gib(24),
            reserved_cpu: MilliCpu(500),
            reserved_memory: Bytes::from_gib(8),
            io_read: Some(BytesPerSec(100_000_000)),
            ..NodeBudget::default()
        }
    }

    fn mem(g: u64) -> MinimalReservation {
        MinimalReservation {
            memory: Some(Bytes::from_gib(g)),
            ..Default::default()
        }
    }

    #[test]
    fn refusal_carries_the_numbers() {
        let b = budget();
        let existing = [mem(10), mem(4)];
        let e = b.admit(existing.iter(), &mem(6)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "memory reservation 6Gi refused: 14Gi of 16Gi allocatable already reserved (capacity 24Gi, system reserve 8Gi)"
        );
        assert!(
            b.admit(existing.iter(), &mem(2)).is_ok(),
            "exactly allocatable fits"
        );
        assert!(
            b.admit(existing.iter(), &MinimalReservation::default())
                .is_ok()
        );
    }

    #[test]
    fn every_resource_is_checked_and_unknown_capacity_refuses() {
        let b = budget();
        let big = MinimalReservation {
            cpu: Some(MilliCpu(3600)),
            io_read: Some(BytesPerSec(200_000_000)),
            io_write: Some(BytesPerSec(1)),
            ..Default::default()
        };
        let e = b.admit([].iter(), &big).unwrap_err();
        assert_eq!(e.0.len(), 3, "{e}");
        assert!(
            e.0[0].starts_with("cpu reservation 3600m refused: 0 of 3500m allocatable"),
            "{e}"
        );
        assert!(
            e.0[1].starts_with("io read reservation 200M/s refused"),
            "{e}"
        );
        assert!(
            e.0[2].contains(
                "capacity is unknown (set qos.io_write_capacity; or, on cgroup v2, qos.io_cost"
            ),
            "{e}"
        );
    }

    #[test]
    fn accounts_sum_floors() {
        let b = budget();
        let all = [mem(10), mem(4)];
        let acc = b.accounts(all.iter());
        let m = acc.iter().find(|a| a.resource == "memory").unwrap();
        assert_eq!(
            (m.reserved.as_str(), m.allocatable.as_str()),
            ("14Gi", "16Gi")
        );
        assert_eq!(m.allocatable_value, Some(16 << 30));
        let n = acc.iter().find(|a| a.resource == "network.egress").unwrap();
        assert_eq!(n.capacity, "unknown");
        assert_eq!(m.to_string(), "memory: 14Gi of 16Gi allocatable reserved");
    }
}
