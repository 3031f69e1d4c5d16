//! The kernel's proportional IO control at darosd's start (`[qos] io_cost`):
//! iocost on for the node's disks so `io.weight` per class does the work (the
//! protection loop's `io.max` holds stay the second line), the data
//! directory's disk measured once for its model, which also gives IO floors
//! their capacity; everything restored at shutdown.

use std::path::Path;

use daros_coordinator::BytesPerSec;
use daros_iocost::node::{self, NodeIoCost, Setup};
use daros_iocost::{CalibrationPlan, ModelSource};
use tracing::warn;

use crate::cgroup::layout::{CgroupLayout, CgroupMode};
use crate::config::Config;
use crate::config::qos::IoCostMode;
use crate::model::caps::IoCostCaps;
use crate::sensing::devices::whole_disks;

/// iocost as this start set it up.
#[derive(Debug)]
pub struct IoCostStart {
    node: Option<NodeIoCost>,
    /// For `caps`.
    pub caps: IoCostCaps,
}

/// Sets iocost up as `[qos] io_cost` says; never fails the start.
pub fn start(cfg: &Config, layout: &CgroupLayout) -> IoCostStart {
    let off = |detail: String| IoCostStart {
        node: None,
        caps: IoCostCaps {
            available: false,
            detail,
            disks: Vec::new(),
        },
    };
    if !cfg.qos.enabled {
        return off("QoS enforcement is off ([qos] enabled = false)".into());
    }
    if cfg.qos.io_cost == IoCostMode::Off {
        return off("left as it is ([qos] io_cost = \"off\")".into());
    }
    let root = match (&layout.mode, &layout.v2) {
        (CgroupMode::V2, Some(root)) => root.clone(),
        _ => {
            return off(format!(
                "needs cgroup v2 with the io controller (this node is {:?}: blkio.weight is used instead)",
                layout.mode
            ));
        }
    };
    let disks: Vec<(String, u32, u32)> =
        whole_disks(Path::new("/sys/block"), &cfg.sensing.exclude_devices)
            .into_iter()
            .map(|d| (d.name, d.major, d.minor))
            .collect();
    if disks.is_empty() {
        return off("no disks found under /sys/block".into());
    }
    let setup = Setup {
        cgroup_root: root,
        sys: "/sys".into(),
        data_dir: cfg.agent.data_dir.clone(),
        disks,
        measure: cfg.qos.io_cost == IoCostMode::Measure,
        plan: CalibrationPlan::default(),
    };
    match node::enable(&setup) {
        Ok(n) => {
            let on: Vec<&str> = n
                .disks
                .iter()
                .filter(|d| d.enabled)
                .map(|d| d.name.as_str())
                .collect();
            let detail = n
                .disks
                .iter()
                .map(|d| {
                    let model = match &d.model_source {
                        ModelSource::Measured {
                            cached, took_ms, ..
                        } => format!(
                            "model measured ({}{} ms)",
                            if *cached { "cached, took " } else { "" },
                            took_ms
                        ),
                        ModelSource::Kernel { why } => format!("the kernel's model ({why})"),
                    };
                    match (&d.error, d.enabled) {
                        (Some(e), _) => format!("{}: not enabled: {e}", d.name),
                        (None, true) => format!("{} on, {model}", d.name),
                        (None, false) => format!("{}: the kernel did not enable it", d.name),
                    }
                })
                .collect::<Vec<_>>()
                .join("; ");
            IoCostStart {
                caps: IoCostCaps {
                    available: !on.is_empty(),
                    detail,
                    disks: n.disks.clone(),
                },
                node: Some(n),
            }
        }
        Err(e) => off(format!(
            "this kernel has no iocost (CONFIG_BLK_CGROUP_IOCOST): {e}"
        )),
    }
}

impl IoCostStart {
    /// IO floor capacity from the measured model where `[qos]` names none.
    pub fn fill_capacity(&self, cfg: &mut Config) {
        let Some((_, m)) = self.node.as_ref().and_then(|n| n.measured.as_ref()) else {
            return;
        };
        cfg.qos.io_read_capacity.get_or_insert(BytesPerSec(m.rbps));
        cfg.qos.io_write_capacity.get_or_insert(BytesPerSec(m.wbps));
    }

    /// The summary line for `caps`.
    pub fn summary(&self) -> String {
        format!(
            "{} iocost: {}",
            if self.caps.available {
                "available: "
            } else {
                "UNAVAILABLE:"
            },
            self.caps.detail
        )
    }

    /// Puts every disk back as it was before the agent.
    pub fn restore(&self) {
        if let Some(n) = &self.node {
            for e in n.restore() {
                warn!(error = %e, "iocost not restored");
            }
        }
    }
}
