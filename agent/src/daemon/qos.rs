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

/// Starts the QoS service, or explains why not (`None`: the API answers 503).
pub fn start(cfg: &Config, root: Option<ManagedRoot>) -> Option<Arc<QosService>> {
    if !cfg.qos.enabled {
        info!("QoS enforcement disabled ([qos] enabled = false)");
        return None;
    }
    let Some(root) = root else {
        error!("QoS enforcement unavailable: the managed cgroup root could not be created");
        return None;
    };
    let disks = whole_disks(Path::new("/sys/block"), &cfg.sensing.exclude_devices);
    match QosService::open(cfg.qos.settings(), root, &cfg.agent.data_dir, disks) {
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
