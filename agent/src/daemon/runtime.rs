//! Starting the runtime executor in `darosd`: the process adapter (re-adopting
//! what runs), the executor's store (re-adopting its items), each instance's
//! cgroup and class through the QoS service.

use std::sync::Arc;

use daros_adapters::AnyAdapter;
use daros_adapters::process::default_shim_path;
use daros_adapters::process::systemd::{Launcher, SystemdLauncher};
use tracing::{error, info, warn};

use crate::cgroup::ManagedRoot;
use crate::config::Config;
use crate::config::runtime::LauncherChoice;
use crate::qos::QosService;
use crate::runtime::{
    Executor, InstanceCgroups, KubernetesSettings, LogDefaults, RuntimeSettings, kubernetes,
};

/// The executor's settings from `[runtime]`; `node` is the mesh node id the
/// leader addresses work to.
pub fn settings(cfg: &Config, node: &str) -> RuntimeSettings {
    let r = &cfg.runtime;
    RuntimeSettings {
        node: node.to_string(),
        state_dir: r.state_dir(&cfg.agent.data_dir),
        volume_dir: r.volume_dir(),
        oom_floor: {
            let floor = crate::runtime::executor::oom_floor_here();
            if let Some(f) = floor {
                tracing::warn!(
                    floor = f,
                    "oom_score_adj of the floor classes (Guaranteed -997, GuaranteedPro -998): degraded, no CAP_SYS_RESOURCE; they get {f} (the agent's own)"
                );
            }
            floor
        },
        shim_path: r.shim_path.clone().unwrap_or_else(default_shim_path),
        stop_grace: r.stop_grace.0,
        logs: LogDefaults {
            max_size: r.log_max_size,
            max_files: r.log_max_files,
        },
        kubernetes: r.kubernetes.then(|| KubernetesSettings {
            node: r
                .kubernetes_node
                .clone()
                .unwrap_or_else(kubernetes::default_node_name),
            cgroup_root: r.kubernetes_cgroup_root.clone(),
        }),
        launcher: launcher(r.launcher, &r.slice),
    }
}

/// `runtime.launcher` resolved on this machine (`systemd` where systemd
/// does not run it is said at start, and shims are then forked).
fn launcher(choice: LauncherChoice, slice: &str) -> Launcher {
    let sd = SystemdLauncher::new(slice);
    match choice {
        LauncherChoice::Direct => Launcher::Direct,
        LauncherChoice::Auto if !sd.available() => Launcher::Direct,
        LauncherChoice::Systemd if !sd.available() => {
            error!(
                socket = %sd.socket.display(),
                "runtime.launcher = systemd, but systemd does not run this machine: shims are forked by darosd (inside its sandbox)"
            );
            Launcher::Direct
        }
        LauncherChoice::Auto | LauncherChoice::Systemd => Launcher::Systemd(sd),
    }
}

/// The Kubernetes adapter when `[runtime] kubernetes = true` and the cluster
/// can be reached; otherwise why not (logged: the process runtime still runs,
/// and this node does not offer the container runtime).
async fn kubernetes_adapter(cfg: &Config, s: &RuntimeSettings) -> Vec<AnyAdapter> {
    let Some(k) = &s.kubernetes else {
        return Vec::new();
    };
    match kubernetes::client(cfg.runtime.kubeconfig.as_deref()).await {
        Ok(client) => {
            info!(node = %k.node, cgroup_root = %k.cgroup_root, "Kubernetes runtime: pods of this node");
            vec![AnyAdapter::Kubernetes(kubernetes::adapter(client, k))]
        }
        Err(e) => {
            error!(error = %e, "Kubernetes runtime unavailable: container workloads are not placed on this node");
            Vec::new()
        }
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
    let node = crate::control::bootstrap::node_id_of(node_name)
        .map(|id| id.to_string())
        .unwrap_or_else(|_| node_name.to_string());
    if qos.is_none() {
        warn!("QoS enforcement is off: instances get their own cgroups but no class");
    }
    let s = settings(cfg, &node);
    let shim = s.shim_path.clone();
    let launcher = match &s.launcher {
        Launcher::Direct => "forked by darosd".to_string(),
        Launcher::Systemd(sd) => format!("transient systemd units in {}", sd.slice),
    };
    let extra = kubernetes_adapter(cfg, &s).await;
    match Executor::open(s, InstanceCgroups::new(root, qos), extra).await {
        Ok(e) => {
            let items = crate::control::work::WorkExecutor::current(e.as_ref()).await;
            info!(node = %node, shim = %shim.display(), %launcher, readopted = items.len(), "runtime executor ready");
            Some(e)
        }
        Err(e) => {
            error!(error = %e, "runtime executor unavailable: desired work is not run");
            None
        }
    }
}
