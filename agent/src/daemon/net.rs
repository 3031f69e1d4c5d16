//! Starting the eBPF datapath in `darosd`: settings from `[net]`, the QoS
//! admission budget for network floors, and the capability lines.

use std::sync::Arc;

use crate::cgroup::{CgroupLayout, CgroupPath};
use crate::config::Config;
use crate::model::caps::{DatapathCaps, Feature};
use crate::net::{NetService, NetSettings};

/// Opens (or reopens) the datapath; never fails (see [`NetService::open`]).
pub fn open(
    cfg: &Config,
    layout: &CgroupLayout,
    managed_root: &CgroupPath,
    capacity_source: String,
) -> Arc<NetService> {
    let mut s = NetSettings::from_config(cfg, layout.v2.clone(), managed_root.clone());
    s.capacity_source = capacity_source;
    NetService::open(s)
}

/// The configuration QoS runs with: without an explicit `[qos]
/// network_*_capacity`, network floors are admitted against what the floor
/// loop can hold of `[net] *_capacity` (when the datapath is enabled).
pub fn qos_config(cfg: &Config) -> Config {
    let mut c = cfg.clone();
    if cfg.net.enabled {
        c.qos.network_egress_capacity = cfg
            .net
            .admission_capacity(cfg.qos.network_egress_capacity, cfg.net.egress_capacity);
        c.qos.network_ingress_capacity = cfg
            .net
            .admission_capacity(cfg.qos.network_ingress_capacity, cfg.net.ingress_capacity);
    }
    c
}

/// Lines for the capability summary.
pub fn summary(d: &DatapathCaps) -> Vec<String> {
    let line = |name: &str, f: &Feature| {
        format!(
            "{} {name}: {}",
            if f.available {
                "available:  "
            } else {
                "UNAVAILABLE:"
            },
            f.detail
        )
    };
    vec![
        line("eBPF network datapath", &d.network),
        line("eBPF run-queue statistics", &d.runqueue),
        line("network floors", &d.floors),
    ]
}
