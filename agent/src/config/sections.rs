//! The configuration sections and their defaults.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::HumanDuration;

/// The whole configuration. Later areas add their own section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The agent process.
    pub agent: AgentSection,
    /// The local API.
    pub api: ApiSection,
    /// Sampling.
    pub sensing: SensingSection,
    /// cgroups.
    pub cgroup: CgroupSection,
    /// Workload discovery.
    pub discovery: DiscoverySection,
    /// Prometheus endpoint.
    pub metrics: MetricsSection,
    /// GPU collection.
    pub gpu: GpuSection,
    /// QoS enforcement.
    pub qos: super::qos::QosSection,
    /// eBPF datapath: network accounting, caps and floors; run-queue latency.
    pub net: super::net::NetSection,
    /// Control plane mesh: gossip, RPC, raft; single-node cluster by default.
    pub mesh: super::mesh::MeshSection,
    /// Runtime executor and adapters.
    pub runtime: super::runtime::RuntimeSection,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[agent]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// Node name; the hostname when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// State directory (created if missing).
    pub data_dir: PathBuf,
    /// `tracing` filter directive (`info`, `daros_agent=debug`).
    pub log_level: String,
    /// Log format.
    pub log_format: LogFormat,
    /// Keep the agent's own pages in memory (`mlockall` on fault), so that the
    /// protection loop never waits on a refault under the memory pressure it
    /// is there to manage. Needs CAP_IPC_LOCK; a refusal is reported in `caps`.
    pub lock_memory: bool,
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            node_name: None,
            data_dir: PathBuf::from("/var/lib/daros"),
            log_level: "info".into(),
            log_format: LogFormat::Text,
            lock_memory: true,
        }
    }
}

/// `[api]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSection {
    /// Unix socket of the local API (mode 0660).
    pub socket: PathBuf,
    /// Group owning the socket, so its members can use `darosctl` without root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
    /// How long a client may take to send a request's line and headers
    /// (1s–5m); the connection is closed after it (also on the metrics port).
    pub header_timeout: HumanDuration,
    /// How long a client may take to send a request's body (1s–10m): 408.
    pub body_timeout: HumanDuration,
}

impl Default for ApiSection {
    fn default() -> Self {
        ApiSection {
            socket: PathBuf::from("/run/daros/agent.sock"),
            socket_group: None,
            header_timeout: HumanDuration(Duration::from_secs(10)),
            body_timeout: HumanDuration(Duration::from_secs(30)),
        }
    }
}

/// `[sensing]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SensingSection {
    /// Sampling interval (100ms–60s).
    pub interval: HumanDuration,
    /// Block device name prefixes left out of node disks.
    pub exclude_devices: Vec<String>,
    /// Network interface name prefixes left out of node network.
    pub exclude_interfaces: Vec<String>,
}

impl Default for SensingSection {
    fn default() -> Self {
        SensingSection {
            interval: HumanDuration(Duration::from_secs(1)),
            exclude_devices: vec!["loop".into(), "ram".into(), "zram".into()],
            exclude_interfaces: Vec::new(),
        }
    }
}

/// `[cgroup]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CgroupSection {
    /// The agent's managed root, relative to each hierarchy (`daros` →
    /// `/sys/fs/cgroup/daros` on v2, `/sys/fs/cgroup/<ctrl>/daros` on v1).
    pub managed_root: String,
}

impl Default for CgroupSection {
    fn default() -> Self {
        CgroupSection {
            managed_root: "daros".into(),
        }
    }
}

/// `[discovery]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoverySection {
    /// How often the cgroup trees are walked (1s–1h, at least `sensing.interval`).
    pub interval: HumanDuration,
    /// Report Kubernetes pods.
    pub kubernetes: bool,
    /// Top-level cgroups holding pods.
    pub kubepods_roots: Vec<String>,
    /// Report systemd units.
    pub systemd: bool,
    /// Unit types reported (`service`, `slice`, `scope`, `socket`, `mount`, `swap`).
    pub systemd_unit_types: Vec<String>,
    /// Upper bound on sampled workloads.
    pub max_workloads: usize,
}

impl Default for DiscoverySection {
    fn default() -> Self {
        DiscoverySection {
            interval: HumanDuration(Duration::from_secs(5)),
            kubernetes: true,
            kubepods_roots: vec!["kubepods.slice".into(), "kubepods".into()],
            systemd: true,
            systemd_unit_types: vec!["service".into(), "slice".into()],
            max_workloads: 4096,
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// TCP address serving Prometheus `/metrics` (`127.0.0.1:9464`); off when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Append lifecycle events and decisions as CloudEvents (one JSON per
    /// line, fsync'd) to this file while this agent is the leader; off when
    /// unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_file: Option<std::path::PathBuf>,
    /// POST them in CloudEvents batches (`application/cloudevents-batch+json`)
    /// to this `http://host:port/path` while this agent is the leader; off
    /// when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_url: Option<String>,
}

/// `[gpu]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuSection {
    /// Collect GPU metrics through NVML when a driver is present.
    pub enabled: bool,
    /// NVML library to load instead of `libnvidia-ml.so.1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
}

impl Default for GpuSection {
    fn default() -> Self {
        GpuSection {
            enabled: true,
            library: None,
        }
    }
}

impl Config {
    /// The sampling interval.
    pub fn interval(&self) -> Duration {
        self.sensing.interval.0
    }
}
