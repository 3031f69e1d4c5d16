//! Starting QoS enforcement in `darosd`: the service (which re-applies the
//! stored classes and starts the protection loop) and its reconcile timer.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::cgroup::ManagedRoot;
use crate::config::Config;
use crate::qos::QosService;
use crate::sensing::devices::whole_disks;

/// How the protection loop judges IO floors while iocost with latency targets
/// holds them at every IO (the loop is then the second line): over 1 s, a
/// shortfall below three quarters of the floor. The loop's holds on every
/// dip below 90 % of a 100 ms window kept the device under-used, so iocost
/// never lowered its vrate, and each release let the hog surge into a new
/// dip: in the isolation benchmark the hog kept 5 % of its throughput where
/// iocost alone kept 48–58 %, both holding the reader (p1 ≥ 94 %). A first
/// line that fails (a model or targets that do not fit the device) leaves
/// the floor far below, and the loop steps in within a second or two (500 ms
/// let its own releases' dips through: p1 77.7 %, docs/benchmarks.md).
const IO_WINDOW_BEHIND_IOCOST: Duration = Duration::from_secs(1);
const IO_THREAT_BEHIND_IOCOST: f64 = 0.75;

/// Starts the QoS service, or explains why not (`None`: the API answers 503).
/// `io_first_line`: iocost with latency targets is on for every disk.
pub fn start(
    cfg: &Config,
    root: Option<ManagedRoot>,
    io_first_line: bool,
) -> Option<Arc<QosService>> {
    if !cfg.qos.enabled {
        info!("QoS enforcement disabled ([qos] enabled = false)");
        return None;
    }
    let Some(root) = root else {
        error!("QoS enforcement unavailable: the managed cgroup root could not be created");
        return None;
    };
    let disks = whole_disks(Path::new("/sys/block"), &cfg.sensing.exclude_devices);
    let mut settings = cfg.qos.settings();
    if io_first_line {
        let p = &mut settings.protect;
        p.io_window = p.io_window.max(IO_WINDOW_BEHIND_IOCOST);
        p.io_threat_ratio = p.io_threat_ratio.min(IO_THREAT_BEHIND_IOCOST);
        info!(
            io_window = ?p.io_window,
            io_threat_ratio = p.io_threat_ratio,
            "iocost holds IO floors with latency targets; the protection loop is the second line"
        );
    }
    match QosService::open(settings, root, &cfg.agent.data_dir, disks) {
        Ok(svc) => {
            let o = svc.overview();
            // The loop's thread marks itself running a moment later ("protection
            // loop started"): say what was configured, not that race's outcome.
            info!(
                workloads = o.workloads.len(),
                protection = cfg.qos.protection,
                "QoS enforcement ready"
            );
            for n in o.protection.notes.iter().chain(&o.notes) {
                warn!(note = %n, "QoS");
            }
            Some(svc)
        }
        Err(e) => {
            error!(error = %e, "QoS enforcement unavailable");
            None
        }
    }
}

/// Re-applies every class every `interval` until `stop` turns true.
pub fn reconcile_loop(
    svc: Arc<QosService>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let s = Arc::clone(&svc);
                    if let Err(e) = tokio::task::spawn_blocking(move || s.reconcile()).await {
                        warn!(error = %e, "QoS reconcile failed");
                    }
                }
                r = stop.changed() => {
                    if r.is_err() || *stop.borrow() {
                        break;
                    }
                }
            }
        }
    })
}
