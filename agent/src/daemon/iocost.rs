//! The kernel's proportional IO control at darosd's start (`[qos] io_cost`):
//! iocost on for the node's disks so `io.weight` per class does the work (the
//! protection loop's `io.max` holds stay the second line), the data
//! directory's disk measured once for its model, which also gives IO floors
//! their capacity; measured again on an operator's request
//! (`POST /v1/iocost/calibrate`); everything restored at shutdown.

use std::path::Path;

use daros_coordinator::BytesPerSec;
use daros_iocost::node::{self, NodeIoCost, Setup};
use daros_iocost::{CalibrationPlan, IoCostError, ModelSource};
use tracing::warn;

use crate::cgroup::layout::{CgroupLayout, CgroupMode};
use crate::config::Config;
use crate::config::qos::IoCostMode;
use crate::model::caps::IoCostCaps;
use crate::sensing::devices::whole_disks;

/// Why the disk was not measured again.
#[derive(Debug, thiserror::Error)]
pub enum RecalibrateError {
    /// iocost is off or unavailable, or no disk of this node is measured.
    #[error("nothing to measure: {0}")]
    NothingToMeasure(String),
    /// The calibration ran and failed; the previous model stays.
    #[error("the disk was not measured again, the previous model stays: {0}")]
    Failed(String),
}

/// iocost as darosd set it up.
#[derive(Debug)]
pub struct IoCost {
    /// What `enable` was given (`None`: iocost is off or unavailable).
    setup: Option<Setup>,
    node: Option<NodeIoCost>,
    /// IO floor capacity (read, write) came from the measured model.
    capacity_from_model: (bool, bool),
    /// For `caps`.
    pub caps: IoCostCaps,
}

/// Sets iocost up as `[qos] io_cost` says; never fails the start.
pub fn start(cfg: &Config, layout: &CgroupLayout) -> IoCost {
    let off = |detail: String| IoCost {
        setup: None,
        node: None,
        capacity_from_model: (false, false),
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
        latency_factor: cfg.qos.io_cost_latency_factor,
    };
    match node::enable(&setup) {
        Ok(n) => IoCost {
            caps: caps_of(&n),
            node: Some(n),
            setup: Some(setup),
            capacity_from_model: (false, false),
        },
        Err(e) => off(format!(
            "this kernel has no iocost (CONFIG_BLK_CGROUP_IOCOST): {e}"
        )),
    }
}

/// What `caps` shows of `n`.
fn caps_of(n: &NodeIoCost) -> IoCostCaps {
    let on = n.disks.iter().filter(|d| d.enabled).count();
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
            let model = match &d.qos {
                Some(t) => format!(
                    "{model}, p{} latency targets {} µs read / {} µs write, vrate {}–{} %",
                    t.rpct, t.rlat_us, t.wlat_us, t.min_pct, t.max_pct
                ),
                None => model,
            };
            match (&d.error, d.enabled) {
                (Some(e), _) => format!("{}: not enabled: {e}", d.name),
                (None, true) => format!("{} on, {model}", d.name),
                (None, false) => format!("{}: the kernel did not enable it", d.name),
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    IoCostCaps {
        available: on > 0,
        detail,
        disks: n.disks.clone(),
    }
}

impl IoCost {
    /// Whether iocost runs with latency targets on every disk it is on (and on
    /// one at least): then it is the first line for IO floors and the
    /// protection loop the second.
    pub fn latency_targets_everywhere(&self) -> bool {
        self.node.as_ref().is_some_and(|n| {
            let mut on = n.disks.iter().filter(|d| d.enabled).peekable();
            on.peek().is_some() && on.all(|d| d.qos.is_some())
        })
    }

    /// IO floor capacity from the measured model where `[qos]` names none.
    pub fn fill_capacity(&mut self, cfg: &mut Config) {
        // Also when nothing was measured yet: a measurement on request fills it.
        self.capacity_from_model = (
            cfg.qos.io_read_capacity.is_none(),
            cfg.qos.io_write_capacity.is_none(),
        );
        let Some((_, m)) = self.node.as_ref().and_then(|n| n.measured.as_ref()) else {
            return;
        };
        cfg.qos.io_read_capacity.get_or_insert(BytesPerSec(m.rbps));
        cfg.qos.io_write_capacity.get_or_insert(BytesPerSec(m.wbps));
    }

    /// Measures the data directory's disk again and puts the new model in
    /// force (blocking: a bounded calibration, ~8 s in the VM). Returns the
    /// IO floor capacity that follows from it (read, write), for the sides
    /// `[qos]` does not name. On error nothing changed.
    pub fn recalibrate(
        &mut self,
    ) -> Result<(Option<BytesPerSec>, Option<BytesPerSec>), RecalibrateError> {
        let Some(setup) = &self.setup else {
            return Err(RecalibrateError::NothingToMeasure(format!(
                "iocost is not in use: {}",
                self.caps.detail
            )));
        };
        let n = node::remeasure(setup).map_err(|e| match e {
            IoCostError::NotApplicable(why) => RecalibrateError::NothingToMeasure(why),
            e => RecalibrateError::Failed(e.to_string()),
        })?;
        let capacity = n.measured.as_ref().map_or((None, None), |(_, m)| {
            (
                self.capacity_from_model.0.then_some(BytesPerSec(m.rbps)),
                self.capacity_from_model.1.then_some(BytesPerSec(m.wbps)),
            )
        });
        self.caps = caps_of(&n);
        self.node = Some(n);
        Ok(capacity)
    }

    /// The summary line for `caps`.
    pub fn summary(&self) -> String {
        Self::summary_of(&self.caps)
    }

    /// The summary line of `caps`.
    pub fn summary_of(caps: &IoCostCaps) -> String {
        format!(
            "{} iocost: {}",
            if caps.available {
                "available: "
            } else {
                "UNAVAILABLE:"
            },
            caps.detail
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
