//! Starting Kubernetes mode in `darosd` (`[runtime] kubernetes_policies`):
//! the policies and profiles of the API server enforced on this node's pods
//! through the QoS service (`daros_k8s::node`, `qos::pod_enforcer`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::error;

use crate::config::Config;
use crate::qos::QosService;
use crate::qos::pod_enforcer::QosPodEnforcer;
use crate::runtime::kubernetes;

/// How often a pass runs without changes (re-reads knobs, finds late cgroups).
pub const RESYNC: Duration = Duration::from_secs(30);

/// Spawns Kubernetes mode, or says why not (logged).
pub async fn start(
    cfg: &Config,
    qos: Option<&Arc<QosService>>,
    stop: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let r = &cfg.runtime;
    if !r.kubernetes_policies {
        return None;
    }
    let Some(qos) = qos else {
        error!(
            "runtime.kubernetes_policies is on but QoS enforcement is off: no policy is enforced on this node"
        );
        return None;
    };
    let client = match kubernetes::client(r.kubeconfig.as_deref()).await {
        Ok(c) => c,
        Err(e) => {
            error!(error = %e, "Kubernetes mode unavailable: no policy is enforced on this node");
            return None;
        }
    };
    let node = r
        .kubernetes_node
        .clone()
        .unwrap_or_else(kubernetes::default_node_name);
    let enforcer = Arc::new(QosPodEnforcer::new(
        Arc::clone(qos),
        &r.kubernetes_cgroup_root,
    ));
    Some(tokio::spawn(daros_k8s::node::run(
        client,
        daros_k8s::node::NodeAgentConfig {
            node,
            resync: RESYNC,
        },
        enforcer,
        stop,
    )))
}
