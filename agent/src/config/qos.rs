//! `[qos]`: QoS enforcement, the protection loop and the node budget for floors.

use std::time::Duration;

use daros_coordinator::{Bytes, BytesPerSec, MilliCpu};
use serde::{Deserialize, Serialize};

use super::validate::range;
use super::{ConfigError, HumanDuration};
use crate::qos::QosSettings;
use crate::qos::protect::ProtectConfig;

/// `[qos]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QosSection {
    /// Apply QoS classes (the API refuses changes when false).
    pub enabled: bool,
    /// Run the protection loop (holds BestEffort, then Burstable, while a floor is short).
    pub protection: bool,
    /// Tick of the protection loop's sampler (1ms–1s).
    pub sample_interval: HumanDuration,
    /// Window over which CPU usage and stall are judged (at least the sample interval).
    pub window: HumanDuration,
    /// The protection loop's own CPU, as a share of one core (0.001–1): where a
    /// tick costs more than this share of `sample_interval` (many workloads, a
    /// slow or emulated machine), the loop ticks less often; `darosctl qos
    /// status` shows the interval it keeps.
    pub protection_cpu_budget: f64,
    /// Time the reserved workloads must be comfortable before each release step.
    pub hold_time: HumanDuration,
    /// How often every class is re-applied (drift correction).
    pub reconcile_interval: HumanDuration,
    /// CPU kept out of floors for the system (`"500m"`, `"1"`).
    pub system_reserved_cpu: MilliCpu,
    /// Memory kept out of floors for the system (`"1Gi"`).
    pub system_reserved_memory: Bytes,
    /// Read bandwidth IO floors may add up to; without it read floors are refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_read_capacity: Option<BytesPerSec>,
    /// Write bandwidth IO floors may add up to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_write_capacity: Option<BytesPerSec>,
    /// Egress bandwidth network floors may add up to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_egress_capacity: Option<BytesPerSec>,
    /// Ingress bandwidth network floors may add up to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_ingress_capacity: Option<BytesPerSec>,
    /// The kernel's proportional IO control (iocost) on the node's disks.
    pub io_cost: IoCostMode,
    /// iocost's latency targets on a measured disk, in idle p95 latencies
    /// (1–64): higher leaves more of the disk to low weights, lower protects more.
    pub io_cost_latency_factor: u32,
}

/// `[qos] io_cost`: what the agent does with blk-iocost (cgroup v2 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoCostMode {
    /// Enable iocost on every disk; the disk holding the data directory gets a
    /// model measured once (a few seconds of direct IO, cached), which also
    /// gives IO floors their capacity; other disks the kernel's model.
    #[default]
    Measure,
    /// Enable iocost with the kernel's built-in model on every disk.
    Kernel,
    /// Leave iocost as it is (`io.weight` then does nothing unless the operator
    /// enabled iocost; IO floors rely on the protection loop's `io.max`).
    Off,
}

impl Default for QosSection {
    fn default() -> Self {
        let s = QosSettings::default();
        let p = ProtectConfig::default();
        QosSection {
            enabled: true,
            protection: s.protection,
            sample_interval: HumanDuration(p.sample_interval),
            window: HumanDuration(p.window),
            protection_cpu_budget: p.cpu_budget,
            hold_time: HumanDuration(p.policy.hold_time),
            reconcile_interval: HumanDuration(Duration::from_secs(10)),
            system_reserved_cpu: s.system_reserved_cpu,
            system_reserved_memory: s.system_reserved_memory,
            io_read_capacity: None,
            io_write_capacity: None,
            network_egress_capacity: None,
            network_ingress_capacity: None,
            io_cost: IoCostMode::default(),
            io_cost_latency_factor: daros_iocost::LATENCY_FACTOR,
        }
    }
}

impl QosSection {
    /// The service settings.
    pub fn settings(&self) -> QosSettings {
        let mut protect = ProtectConfig {
            sample_interval: self.sample_interval.0,
            window: self.window.0,
            io_window: self.window.0 * 2,
            cpu_budget: self.protection_cpu_budget,
            ..ProtectConfig::default()
        };
        protect.policy.hold_time = self.hold_time.0;
        protect.policy.escalate_after = self.window.0 * 2;
        QosSettings {
            protection: self.protection,
            protect,
            system_reserved_cpu: self.system_reserved_cpu,
            system_reserved_memory: self.system_reserved_memory,
            io_read_capacity: self.io_read_capacity,
            io_write_capacity: self.io_write_capacity,
            network_egress_capacity: self.network_egress_capacity,
            network_ingress_capacity: self.network_ingress_capacity,
        }
    }
}

/// Checks `[qos]`.
pub fn validate(q: &QosSection) -> Result<(), ConfigError> {
    range(
        "qos.sample_interval",
        q.sample_interval.0,
        Duration::from_millis(1),
        Duration::from_secs(1),
    )?;
    range(
        "qos.window",
        q.window.0,
        Duration::from_millis(5),
        Duration::from_secs(10),
    )?;
    if q.window.0 < q.sample_interval.0 * 2 {
        return Err(ConfigError::invalid(
            "qos.window",
            format!(
                "must be at least twice qos.sample_interval ({}), got \"{}\"",
                q.sample_interval, q.window
            ),
        ));
    }
    if !(0.001..=1.0).contains(&q.protection_cpu_budget) {
        return Err(ConfigError::invalid(
            "qos.protection_cpu_budget",
            format!(
                "must be a share of one core between 0.001 and 1, got {}",
                q.protection_cpu_budget
            ),
        ));
    }
    range(
        "qos.hold_time",
        q.hold_time.0,
        Duration::from_millis(100),
        Duration::from_secs(3600),
    )?;
    range(
        "qos.reconcile_interval",
        q.reconcile_interval.0,
        Duration::from_secs(1),
        Duration::from_secs(3600),
    )?;
    if !(1..=64).contains(&q.io_cost_latency_factor) {
        return Err(ConfigError::invalid(
            "qos.io_cost_latency_factor",
            format!(
                "must be between 1 and 64 idle p95 latencies, got {}",
                q.io_cost_latency_factor
            ),
        ));
    }
    for (key, v) in [
        ("qos.io_read_capacity", q.io_read_capacity),
        ("qos.io_write_capacity", q.io_write_capacity),
        ("qos.network_egress_capacity", q.network_egress_capacity),
        ("qos.network_ingress_capacity", q.network_ingress_capacity),
    ] {
        if v.is_some_and(|v| v.is_zero()) {
            return Err(ConfigError::invalid(
                key,
                "must be greater than 0 (leave it out when unknown)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides, load};

    #[test]
    fn defaults_are_valid_and_map_to_settings() {
        let q = QosSection::default();
        validate(&q).unwrap();
        let s = q.settings();
        assert_eq!(s.protect.sample_interval, Duration::from_millis(10));
        assert_eq!(s.system_reserved_memory, Bytes::from_mib(512));
    }

    #[test]
    fn bad_values_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("agent.toml");
        let cases = [
            (
                "[qos]\nsystem_reserved_memory = \"1Q\"\n",
                "qos.system_reserved_memory",
                "unknown unit",
            ),
            (
                "[qos]\nsample_interval = \"5s\"\n",
                "qos.sample_interval",
                "between",
            ),
            (
                "[qos]\nwindow = \"15ms\"\nsample_interval = \"10ms\"\n",
                "qos.window",
                "twice",
            ),
            (
                "[qos]\nprotection_cpu_budget = 2.0\n",
                "qos.protection_cpu_budget",
                "between 0.001 and 1",
            ),
            (
                "[qos]\nio_read_capacity = \"0\"\n",
                "qos.io_read_capacity",
                "greater than 0",
            ),
            (
                "[qos]\nio_cost_latency_factor = 0\n",
                "qos.io_cost_latency_factor",
                "between 1 and 64",
            ),
            ("[qos]\nprotecton = false\n", "qos.protecton", "unknown key"),
        ];
        for (text, key, part) in cases {
            std::fs::write(&p, text).unwrap();
            let e = load(&Overrides {
                file: Some(p.clone()),
                ..Overrides::default()
            })
            .unwrap_err();
            assert_eq!(e.key(), Some(key), "{text}: {e}");
            assert!(e.to_string().contains(part), "{text}: {e}");
        }
        std::fs::write(
            &p,
            "[qos]\nsystem_reserved_cpu = \"1500m\"\nio_read_capacity = \"200MB/s\"\n",
        )
        .unwrap();
        let c: Config = load(&Overrides {
            file: Some(p.clone()),
            env: vec![
                ("DAROS_QOS_HOLD_TIME".into(), "5s".into()),
                ("DAROS_QOS_IO_COST_LATENCY_FACTOR".into(), "12".into()),
            ],
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(c.qos.system_reserved_cpu, MilliCpu(1500));
        assert_eq!(c.qos.io_read_capacity, Some(BytesPerSec(200_000_000)));
        assert_eq!(c.qos.hold_time.0, Duration::from_secs(5));
        assert_eq!(c.qos.io_cost_latency_factor, 12);
    }
}
