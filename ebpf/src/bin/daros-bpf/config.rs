//! The `run` configuration file (TOML). Unknown fields are refused, and every error names
//! the field, e.g.:
//!
//! ```toml
//! pin_dir = "/sys/fs/bpf/daros"
//! attach = ["daros.slice"]            # relative to the cgroup v2 mount, or absolute
//!
//! [[workload]]
//! cgroup = "daros.slice/web"
//! class = "GuaranteedPro"
//! egress_floor_bps = 80_000_000
//!
//! [[workload]]
//! cgroup = "daros.slice/batch"
//! class = "BestEffort"
//! egress_cap_bps = 50_000_000
//!
//! [floor]
//! egress_capacity_bps = 200_000_000
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use daros_ebpf::{Cap, FloorConfig, NetClass, NetLimits, bpffs::DEFAULT_PIN_DIR};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where everything is pinned.
    #[serde(default = "default_pin_dir")]
    pub pin_dir: PathBuf,
    /// The cgroup v2 mount; detected when absent.
    pub cgroup_root: Option<PathBuf>,
    /// Cgroups to attach the network programs to.
    #[serde(default)]
    pub attach: Vec<PathBuf>,
    /// Workload slots.
    #[serde(default = "default_slots")]
    pub max_slots: u32,
    /// Load the scheduler programs.
    #[serde(default = "default_true")]
    pub sched: bool,
    /// Workloads (the complete set: registered workloads not listed are removed).
    #[serde(default)]
    pub workload: Vec<Workload>,
    /// Network floors.
    pub floor: Option<Floor>,
}

fn default_pin_dir() -> PathBuf {
    PathBuf::from(DEFAULT_PIN_DIR)
}

fn default_slots() -> u32 {
    daros_ebpf::abi::DEFAULT_MAX_SLOTS
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub cgroup: PathBuf,
    pub class: Option<NetClass>,
    pub egress_cap_bps: Option<u64>,
    pub ingress_cap_bps: Option<u64>,
    pub burst_bytes: Option<u64>,
    pub debt_ms: Option<u64>,
    #[serde(default)]
    pub ingress_ecn: bool,
    pub egress_floor_bps: Option<u64>,
    pub ingress_floor_bps: Option<u64>,
    #[serde(default)]
    pub members: Vec<PathBuf>,
}

impl Workload {
    pub fn limits(&self) -> NetLimits {
        let cap = |rate: Option<u64>| {
            rate.map(|rate_bps| Cap {
                rate_bps,
                burst_bytes: self.burst_bytes,
                debt_ms: self.debt_ms,
            })
        };
        NetLimits {
            egress: cap(self.egress_cap_bps),
            ingress: cap(self.ingress_cap_bps),
            ingress_ecn: self.ingress_ecn,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Floor {
    #[serde(default)]
    pub egress_capacity_bps: u64,
    #[serde(default)]
    pub ingress_capacity_bps: u64,
    pub headroom: Option<f64>,
    pub active_bps: Option<u64>,
    pub idle_after_ms: Option<u64>,
    pub lift_after_ms: Option<u64>,
    pub min_cap_bps: Option<u64>,
    /// Tick of the floor loop.
    #[serde(default = "default_period")]
    pub period_ms: u64,
}

fn default_period() -> u64 {
    10
}

impl Floor {
    pub fn config(&self) -> FloorConfig {
        let d = FloorConfig::default();
        FloorConfig {
            egress_capacity_bps: self.egress_capacity_bps,
            ingress_capacity_bps: self.ingress_capacity_bps,
            headroom: self.headroom.unwrap_or(d.headroom),
            active_bps: self.active_bps.unwrap_or(d.active_bps),
            idle_after_ms: self.idle_after_ms.unwrap_or(d.idle_after_ms),
            lift_after_ms: self.lift_after_ms.unwrap_or(d.lift_after_ms),
            min_cap_bps: self.min_cap_bps.unwrap_or(d.min_cap_bps),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let cfg: Self =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if let Some(f) = &cfg.floor {
            anyhow::ensure!(
                (1..=1000).contains(&f.period_ms),
                "{}: floor.period_ms = {}: must be 1..=1000",
                path.display(),
                f.period_ms
            );
        }
        Ok(cfg)
    }
}

/// `path` if absolute, else relative to the cgroup mount.
pub fn resolve(root: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        root.join(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_named() {
        let e =
            toml::from_str::<Config>("[[workload]]\ncgroup = \"a\"\negress_cap = 5\n").unwrap_err();
        assert!(e.to_string().contains("egress_cap"), "{e}");
        let e = toml::from_str::<Config>("[[workload]]\ncgroup = \"a\"\nclass = \"Gold\"\n")
            .unwrap_err();
        assert!(e.to_string().contains("Gold"), "{e}");
    }

    #[test]
    fn example_parses() {
        let cfg: Config = toml::from_str(
            "attach = [\"x\"]\n[[workload]]\ncgroup = \"x/a\"\nclass = \"BestEffort\"\negress_cap_bps = 1000000\n[floor]\negress_capacity_bps = 5\n",
        )
        .unwrap();
        assert_eq!(cfg.pin_dir, PathBuf::from(DEFAULT_PIN_DIR));
        assert_eq!(cfg.workload[0].limits().egress, Some(Cap::rate(1_000_000)));
        assert_eq!(cfg.floor.unwrap().period_ms, 10);
    }
}
