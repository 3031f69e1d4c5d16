//! `[net]`: the eBPF datapath (network accounting, caps and floors; run-queue latency).

use std::path::PathBuf;
use std::time::Duration;

use daros_coordinator::BytesPerSec;
use serde::{Deserialize, Serialize};

use super::validate::range;
use super::{Config, ConfigError, HumanDuration};

/// `[net]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetSection {
    /// Run the eBPF datapath. When false (or when the host cannot), network and
    /// run-queue figures are reported as unavailable with the reason.
    pub enabled: bool,
    /// Where programs, maps and links are pinned (on bpffs; mounted when needed).
    /// Pins outlive darosd: counting and caps go on while it restarts.
    pub pin_dir: PathBuf,
    /// Egress bandwidth of the node, for network floors (no egress floors without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_capacity: Option<BytesPerSec>,
    /// Ingress bandwidth of the node, for network floors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingress_capacity: Option<BytesPerSec>,
    /// Share of the capacity never handed out (0–0.5): per-packet headers the L3
    /// counters do not see, and estimation error.
    pub headroom: f64,
    /// Tick of the floor loop (1ms–50ms).
    pub floor_period: HumanDuration,
    /// How often attachments and caps follow workloads and classes (50ms–60s).
    pub reconcile_interval: HumanDuration,
    /// Load the run-queue programs (`tp_btf` on `sched_switch`/`sched_wakeup`).
    pub runqueue: bool,
    /// Workload slots of the network maps (16–8192); changing it resets the counters.
    pub max_slots: u32,
}

impl Default for NetSection {
    fn default() -> Self {
        NetSection {
            enabled: true,
            pin_dir: PathBuf::from(daros_ebpf::bpffs::DEFAULT_PIN_DIR),
            egress_capacity: None,
            ingress_capacity: None,
            headroom: 0.10,
            floor_period: HumanDuration(daros_ebpf::floor_runner::DEFAULT_PERIOD),
            reconcile_interval: HumanDuration(Duration::from_millis(500)),
            runqueue: true,
            max_slots: daros_ebpf::abi::DEFAULT_MAX_SLOTS,
        }
    }
}

impl NetSection {
    /// What network floors may add up to in QoS admission, per direction: the
    /// explicit `[qos] network_*_capacity`, else the usable part of the link
    /// (`capacity × (1 − headroom)`, what the floor loop can hold).
    pub fn admission_capacity(
        &self,
        explicit: Option<BytesPerSec>,
        link: Option<BytesPerSec>,
    ) -> Option<BytesPerSec> {
        let usable = |l: BytesPerSec| (l.get() as f64 * (1.0 - self.headroom)).round() as u64;
        explicit.or_else(|| link.map(|l| BytesPerSec(usable(l))))
    }
}

/// Checks `[net]` (and its agreement with `[qos]`).
pub fn validate(c: &Config) -> Result<(), ConfigError> {
    let n = &c.net;
    if !n.pin_dir.is_absolute() {
        return Err(ConfigError::invalid(
            "net.pin_dir",
            format!(
                "must be an absolute path on bpffs (e.g. \"/sys/fs/bpf/daros\"), got {:?}",
                n.pin_dir.display().to_string()
            ),
        ));
    }
    if n.pin_dir.parent().is_none() {
        return Err(ConfigError::invalid(
            "net.pin_dir",
            "must be a directory below the bpffs mount, not /",
        ));
    }
    if !(0.0..=0.5).contains(&n.headroom) {
        return Err(ConfigError::invalid(
            "net.headroom",
            format!("must be between 0 and 0.5, got {}", n.headroom),
        ));
    }
    range(
        "net.floor_period",
        n.floor_period.0,
        Duration::from_millis(1),
        Duration::from_millis(50),
    )?;
    range(
        "net.reconcile_interval",
        n.reconcile_interval.0,
        Duration::from_millis(50),
        Duration::from_secs(60),
    )?;
    if !(16..=8192).contains(&n.max_slots) {
        return Err(ConfigError::invalid(
            "net.max_slots",
            format!("must be between 16 and 8192, got {}", n.max_slots),
        ));
    }
    for (key, qos_key, link, explicit) in [
        (
            "net.egress_capacity",
            "qos.network_egress_capacity",
            n.egress_capacity,
            c.qos.network_egress_capacity,
        ),
        (
            "net.ingress_capacity",
            "qos.network_ingress_capacity",
            n.ingress_capacity,
            c.qos.network_ingress_capacity,
        ),
    ] {
        let Some(link) = link else { continue };
        if link.is_zero() {
            return Err(ConfigError::invalid(
                key,
                "must be greater than 0 (leave it out when unknown)",
            ));
        }
        if link.get() < daros_ebpf::bucket::MIN_RATE_BPS * 10 {
            return Err(ConfigError::invalid(
                key,
                format!("{link} is too small to share between workloads (at least 10kB/s)"),
            ));
        }
        let usable = n.admission_capacity(None, Some(link)).unwrap_or_default();
        if let Some(e) = explicit
            && e > usable
        {
            return Err(ConfigError::invalid(
                qos_key,
                format!(
                    "{e} exceeds what the floor loop can hold of {key} = {link} with net.headroom = {} ({usable}); lower it or leave it out",
                    n.headroom
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Overrides, load};

    fn load_text(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("agent.toml");
        std::fs::write(&p, text).unwrap();
        load(&Overrides {
            file: Some(p),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            ..Overrides::default()
        })
    }

    #[test]
    fn defaults_are_valid() {
        let c = Config::default();
        validate(&c).unwrap();
        assert_eq!(c.net.pin_dir, PathBuf::from("/sys/fs/bpf/daros"));
        assert_eq!(c.net.floor_period.0, Duration::from_millis(10));
        assert!(c.net.enabled && c.net.runqueue);
    }

    #[test]
    fn values_from_file_and_environment() {
        let c = load_text(
            "[net]\negress_capacity = \"1Gbit/s\"\nheadroom = 0.2\n",
            &[
                ("DAROS_NET_PIN_DIR", "/sys/fs/bpf/daros-test-x"),
                ("DAROS_NET_INGRESS_CAPACITY", "50MB/s"),
                ("DAROS_NET_ENABLED", "false"),
            ],
        )
        .unwrap();
        assert_eq!(c.net.egress_capacity, Some(BytesPerSec(125_000_000)));
        assert_eq!(c.net.ingress_capacity, Some(BytesPerSec(50_000_000)));
        assert_eq!(c.net.pin_dir, PathBuf::from("/sys/fs/bpf/daros-test-x"));
        assert!(!c.net.enabled);
        // admission defaults to the usable part of the link
        assert_eq!(
            c.net.admission_capacity(None, c.net.egress_capacity),
            Some(BytesPerSec(100_000_000))
        );
        assert_eq!(
            c.net
                .admission_capacity(Some(BytesPerSec(7)), c.net.egress_capacity),
            Some(BytesPerSec(7))
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases = [
            (
                "[net]\npin_dir = \"bpf/daros\"\n",
                "net.pin_dir",
                "absolute",
            ),
            (
                "[net]\nheadroom = 0.9\n",
                "net.headroom",
                "between 0 and 0.5",
            ),
            (
                "[net]\nfloor_period = \"200ms\"\n",
                "net.floor_period",
                "between",
            ),
            (
                "[net]\nreconcile_interval = \"10ms\"\n",
                "net.reconcile_interval",
                "between",
            ),
            ("[net]\nmax_slots = 3\n", "net.max_slots", "between 16"),
            (
                "[net]\negress_capacity = \"0\"\n",
                "net.egress_capacity",
                "greater than 0",
            ),
            (
                "[net]\negress_capacity = \"1kB/s\"\n",
                "net.egress_capacity",
                "too small",
            ),
            (
                "[net]\negress_capacity = \"100MB/s\"\n[qos]\nnetwork_egress_capacity = \"95MB/s\"\n",
                "qos.network_egress_capacity",
                "exceeds what the floor loop can hold",
            ),
            (
                "[net]\negres_capacity = \"1\"\n",
                "net.egres_capacity",
                "unknown",
            ),
            (
                "[net]\ningress_capacity = \"fast\"\n",
                "net.ingress_capacity",
                "bandwidth",
            ),
        ];
        for (text, key, part) in cases {
            let e = load_text(text, &[]).unwrap_err();
            assert_eq!(e.key(), Some(key), "{text}: {e}");
            assert!(e.to_string().contains(part), "{text}: {e}");
        }
        // explicit admission capacity within the usable link is fine
        load_text(
            "[net]\negress_capacity = \"100MB/s\"\n[qos]\nnetwork_egress_capacity = \"80MB/s\"\n",
            &[],
        )
        .unwrap();
    }
}
