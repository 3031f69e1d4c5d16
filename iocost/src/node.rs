//! Turning iocost on for a node's disks and putting them back: the kernel's
//! proportional IO control makes `io.weight` work; the model is the one
//! measured on the disk that holds the agent's data directory (cached), the
//! kernel's own elsewhere. What each disk had before is written to the data
//! directory before the first change, so a restart after a crash still
//! restores the operator's settings rather than ours.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::cache::{self, Cached};
use crate::calibrate::{self, CalibrationPlan};
use crate::device::{self, Device};
use crate::error::IoCostError;
use crate::model::{LinearModel, ModelLine, QosLine, QosTargets, parse_model, parse_qos};

/// The root cgroup's iocost parameter files.
pub const QOS_FILE: &str = "io.cost.qos";
/// The root cgroup's cost model file.
pub const MODEL_FILE: &str = "io.cost.model";
/// The originals, under the cache directory.
const ORIGINALS: &str = "originals.json";

/// What to do.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The cgroup2 mount (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// sysfs (`/sys`).
    pub sys: PathBuf,
    /// The agent's data directory (calibration, cache, originals).
    pub data_dir: PathBuf,
    /// Whole disks to put under iocost (`name`, major, minor).
    pub disks: Vec<(String, u32, u32)>,
    /// Measure the data directory's disk (else the kernel's model everywhere).
    pub measure: bool,
    /// How long and large a calibration is.
    pub plan: CalibrationPlan,
    /// Latency targets are this many idle p95 latencies ([`crate::LATENCY_FACTOR`]).
    pub latency_factor: u32,
}

/// Where a disk's cost model comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "source")]
pub enum ModelSource {
    /// Measured on this node (now or cached from an earlier run).
    Measured {
        /// Read from the cache rather than measured at this start.
        cached: bool,
        /// How long the calibration took.
        took_ms: u64,
        /// When it was measured (Unix ms).
        at_unix_ms: u64,
    },
    /// The kernel's built-in parameters for the device's kind.
    Kernel {
        /// Why not measured.
        why: String,
    },
}

/// One disk under iocost, as read back from the kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DiskCost {
    /// Kernel name.
    pub name: String,
    /// `MAJ:MIN`.
    pub dev: String,
    /// `io.cost.qos` says `enable=1` for it.
    pub enabled: bool,
    /// The model's origin.
    pub model_source: ModelSource,
    /// The coefficients the kernel uses, as `io.cost.model` shows them.
    pub model: Option<LinearModel>,
    /// The latency targets and vrate bounds written with a measured model
    /// (none: the kernel's own, `ctrl=auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosTargets>,
    /// `io.cost.qos` for it as the kernel shows it now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_line: Option<String>,
    /// What failed for this disk, if anything.
    pub error: Option<String>,
}

/// What was there before, per disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Original {
    major: u32,
    minor: u32,
    qos: Option<QosLine>,
    model: Option<ModelLine>,
}

/// iocost as this agent set it up.
#[derive(Debug, Clone)]
pub struct NodeIoCost {
    root: PathBuf,
    data_dir: PathBuf,
    /// Every disk, read back after the changes.
    pub disks: Vec<DiskCost>,
    /// The measured model of the data directory's disk, if any.
    pub measured: Option<(String, LinearModel)>,
}

/// Turns iocost on for `setup.disks`. `Err` only when the kernel has no iocost
/// (no `io.cost.qos` in the cgroup2 root): nothing was changed then.
pub fn enable(setup: &Setup) -> Result<NodeIoCost, IoCostError> {
    let qos_path = setup.cgroup_root.join(QOS_FILE);
    let model_path = setup.cgroup_root.join(MODEL_FILE);
    let qos_now =
        std::fs::read_to_string(&qos_path).map_err(|e| IoCostError::io(&qos_path, "read", e))?;
    let model_now = std::fs::read_to_string(&model_path).unwrap_or_default();
    let originals_path = setup.data_dir.join(cache::DIR).join(ORIGINALS);
    // What each disk had before the agent's first change: saved once, kept across
    // restarts (an unreadable file counts as no operator settings; `restore` says so).
    let originals: Vec<Original> = if originals_path.exists() {
        std::fs::read(&originals_path)
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or_default()
    } else {
        let (q, m) = (parse_qos(&qos_now), parse_model(&model_now));
        let originals: Vec<Original> = setup
            .disks
            .iter()
            .map(|(_, major, minor)| Original {
                major: *major,
                minor: *minor,
                qos: q
                    .iter()
                    .find(|l| (l.major, l.minor) == (*major, *minor))
                    .cloned(),
                model: m
                    .iter()
                    .find(|l| (l.major, l.minor) == (*major, *minor))
                    .cloned(),
            })
            .collect();
        cache::write_atomic(
            &originals_path,
            &serde_json::to_vec_pretty(&originals).unwrap_or_default(),
        )?;
        originals
    };
    // An operator's own latency targets (`ctrl=user` before the agent) stay.
    let operators_targets = |major: u32, minor: u32| {
        originals
            .iter()
            .any(|o| (o.major, o.minor) == (major, minor) && o.qos.as_ref().is_some_and(|q| q.user))
    };

    let (measured, why_not) = if setup.measure {
        match measured_model(setup) {
            Ok(m) => (Some(m), None),
            Err(why) => (None, Some(why)),
        }
    } else {
        (
            None,
            Some("measurement off ([qos] io_cost = \"kernel\")".to_string()),
        )
    };
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut targets: Vec<(String, QosTargets)> = Vec::new();
    for (name, major, minor) in &setup.disks {
        let mut qos = None;
        if let Some((_, c, _)) = measured.as_ref().filter(|(d, _, _)| d.name == *name) {
            let line = c.measured.model.render(*major, *minor);
            if let Err(e) = std::fs::write(&model_path, &line) {
                errors.push((
                    name.clone(),
                    format!("writing {line:?} to {}: {e}", model_path.display()),
                ));
            } else if !operators_targets(*major, *minor) {
                // Latency targets only with the model they were measured with, and
                // never over an operator's own (`enable=1` alone keeps them).
                qos = c.measured.idle_latency.map(|l| {
                    QosTargets::from_idle(l.read_p95_us, l.write_p95_us, setup.latency_factor)
                });
            }
        }
        if let Some(t) = qos {
            targets.push((name.clone(), t));
        }
        let line = qos.map_or_else(
            || format!("{major}:{minor} enable=1"),
            |t| t.render(*major, *minor),
        );
        if let Err(e) = std::fs::write(&qos_path, &line) {
            errors.push((
                name.clone(),
                format!("writing {line:?} to {}: {e}", qos_path.display()),
            ));
        }
    }

    // What the kernel says now.
    let q = parse_qos(&std::fs::read_to_string(&qos_path).unwrap_or_default());
    let m = parse_model(&std::fs::read_to_string(&model_path).unwrap_or_default());
    let disks = setup
        .disks
        .iter()
        .map(|(name, major, minor)| {
            let mine = measured.as_ref().filter(|(d, _, _)| d.name == *name);
            DiskCost {
                name: name.clone(),
                dev: format!("{major}:{minor}"),
                enabled: q
                    .iter()
                    .any(|l| (l.major, l.minor) == (*major, *minor) && l.enabled),
                model_source: match mine {
                    Some((_, c, cached)) => ModelSource::Measured {
                        cached: *cached,
                        took_ms: c.measured.took_ms,
                        at_unix_ms: c.at_unix_ms,
                    },
                    None => ModelSource::Kernel {
                        why: why_not.clone().unwrap_or_else(|| {
                            "the agent's data directory is on another disk".to_string()
                        }),
                    },
                },
                model: m
                    .iter()
                    .find(|l| (l.major, l.minor) == (*major, *minor))
                    .map(|l| l.model),
                qos: targets.iter().find(|(n, _)| n == name).map(|(_, t)| *t),
                qos_line: q
                    .iter()
                    .find(|l| (l.major, l.minor) == (*major, *minor))
                    .map(|l| l.params.clone()),
                error: errors
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, e)| e.clone()),
            }
        })
        .collect::<Vec<_>>();
    for d in &disks {
        match &d.error {
            Some(e) => warn!(disk = %d.name, error = %e, "iocost not enabled"),
            None => {
                info!(disk = %d.name, enabled = d.enabled, model = ?d.model, qos = ?d.qos_line, source = ?d.model_source, "iocost")
            }
        }
    }
    Ok(NodeIoCost {
        root: setup.cgroup_root.clone(),
        data_dir: setup.data_dir.clone(),
        measured: measured.map(|(d, c, _)| (d.name, c.measured.model)),
        disks,
    })
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The data directory's disk's model: cached (`true`), or measured now and cached.
fn measured_model(setup: &Setup) -> Result<(Device, Cached, bool), String> {
    let dev = data_disk(setup)?;
    if let Some(c) = cache::load(&setup.data_dir, &dev) {
        return Ok((dev, c, true));
    }
    info!(disk = %dev.name, phase = ?setup.plan.phase, "measuring the disk's IO cost model (once; cached in the data directory)");
    measure_now(setup, dev).map(|(d, c)| (d, c, false))
}

/// The disk holding the data directory, if it is one of `setup.disks`.
fn data_disk(setup: &Setup) -> Result<Device, String> {
    let dev = device::disk_of(&setup.sys, &setup.data_dir)?;
    if !setup.disks.iter().any(|(n, _, _)| *n == dev.name) {
        return Err(format!(
            "the agent's data directory is on {}, which is not among the disks it manages",
            dev.name
        ));
    }
    Ok(dev)
}

/// Measures the data directory's disk again (an operator's request: the disk
/// changed, or the first measurement ran under load), caches the new model in
/// place of the old one and writes it to the kernel. On any failure nothing
/// was changed: the previous model stays cached and in force.
pub fn remeasure(setup: &Setup) -> Result<NodeIoCost, IoCostError> {
    if !setup.measure {
        return Err(IoCostError::NotApplicable(
            "[qos] io_cost = \"kernel\": the kernel's model is used, nothing is measured".into(),
        ));
    }
    let dev = data_disk(setup).map_err(IoCostError::NotApplicable)?;
    info!(disk = %dev.name, phase = ?setup.plan.phase, "measuring the disk's IO cost model again (on request)");
    let (dev, c) = measure_now(setup, dev).map_err(IoCostError::Calibration)?;
    if cache::load(&setup.data_dir, &dev).map(|x| x.at_unix_ms) != Some(c.at_unix_ms) {
        return Err(IoCostError::Calibration(
            "the new model could not be cached in the data directory; the previous one stays"
                .into(),
        ));
    }
    let mut n = enable(setup)?;
    // enable() found the model in the cache: it was measured just now.
    for d in n.disks.iter_mut().filter(|d| d.name == dev.name) {
        if let ModelSource::Measured { cached, .. } = &mut d.model_source {
            *cached = false;
        }
    }
    Ok(n)
}

/// Runs the calibration on `dev` (the data directory's disk) and caches it.
fn measure_now(setup: &Setup, dev: Device) -> Result<(Device, Cached), String> {
    let scratch = setup.data_dir.join(cache::DIR);
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let measured = calibrate::measure(&scratch, &setup.plan).map_err(|e| e.to_string())?;
    let c = Cached {
        device: dev.clone(),
        measured,
        at_unix_ms: unix_ms(),
    };
    if let Err(e) = cache::store(&setup.data_dir, &c) {
        warn!(error = %e, "the measured IO cost model is not cached");
    }
    Ok((dev, c))
}

impl NodeIoCost {
    /// Puts every disk back as it was before the first change and forgets the
    /// originals; returns what could not be written.
    pub fn restore(&self) -> Vec<String> {
        restore(&self.root, &self.data_dir)
    }
}

/// Restores the originals saved in `data_dir` (if any) into `cgroup_root`.
pub fn restore(cgroup_root: &Path, data_dir: &Path) -> Vec<String> {
    let path = data_dir.join(cache::DIR).join(ORIGINALS);
    let Ok(text) = std::fs::read(&path) else {
        return Vec::new();
    };
    let Ok(originals) = serde_json::from_slice::<Vec<Original>>(&text) else {
        return vec![format!(
            "{}: unreadable; iocost left as it is",
            path.display()
        )];
    };
    let mut errors = Vec::new();
    let mut write = |file: &str, line: String| {
        let p = cgroup_root.join(file);
        if let Err(e) = std::fs::write(&p, &line) {
            errors.push(format!("writing {line:?} to {}: {e}", p.display()));
        }
    };
    for o in &originals {
        let dev = format!("{}:{}", o.major, o.minor);
        write(
            MODEL_FILE,
            o.model
                .as_ref()
                .map_or_else(|| format!("{dev} ctrl=auto"), ModelLine::restore_line),
        );
        write(
            QOS_FILE,
            o.qos.as_ref().map_or_else(
                || format!("{dev} enable=0 ctrl=auto"),
                QosLine::restore_line,
            ),
        );
    }
    if errors.is_empty() {
        let _ = std::fs::remove_file(&path);
    }
    errors
}
