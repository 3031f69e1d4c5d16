//! Starting the runtime executor in `darosd`: the process adapter (re-adopting
//! what runs), the executor's store (re-adopting its items), each instance's
//! cgroup and class through the QoS service.

use std::sync::Arc;

use daros_adapters::process::default_shim_path;
use tracing::{error, info, warn};

use crate::cgroup::ManagedRoot;
use crate::config::Config;
use crate::qos::QosService;
use crate::runtime::{Executor, InstanceCgroups, LogDefaults, RuntimeSettings};

/// The executor's settings from `[runtime]`; `node` is the mesh node id the
/// leader addresses work to.
pub fn settings(cfg: &Config, node: &str) -> RuntimeSettings {
    let r = &cfg.runtime;
    RuntimeSettings {
        node: node.to_string(),
        state_dir: r.state_dir(&cfg.agent.data_dir),
        shim_path: r.shim_path.clone().unwrap_or_else(default_shim_path),
        stop_grace: r.stop_grace.0,
        logs: LogDefaults {
            max_size: r.log_max_size,
            max_files: r.log_max_files,
        },
    }
}

/// Starts the executor, or says why not (`None`: work is accepted and not run).
pub async fn start(
    cfg: &Config,
    node_name: &str,
    root: Option<ManagedRoot>,
    qos: Option<Arc<QosService>>,
) -> Option<Arc<Executor>> {
    if !cfg.runtime.enabled {
        info!("runtime executor disabled ([runtime] enabled = false)");
        return None;
    }
    if cfg.runtime.kubernetes {
        warn!(
            "[runtime] kubernetes = true: the Kubernetes adapter is not wired into darosd yet; only the process runtime runs"
        );
    }
    let node = crate::control::bootstrap::node_id_of(node_name)
        .map(|id| id.to_string())
        .unwrap_or_else(|_| node_name.to_string());
    if qos.is_none() {
        warn!("QoS enforcement is off: instances get their own cgroups but no class");
    }
    let s = settings(cfg, &node);
    let shim = s.shim_path.clone();
    match Executor::open(s, InstanceCgroups::new(root, qos), Vec::new()).await {
        Ok(e) => {
            let items = crate::control::work::WorkExecutor::current(e.as_ref()).await;
            info!(node = %node, shim = %shim.display(), readopted = items.len(), "runtime executor ready");
            Some(e)
        }
        Err(e) => {
            error!(error = %e, "runtime executor unavailable: desired work is not run");
            None
        }
    }
}
