//! The Kubernetes runtime in darosd: the API client (from `[runtime]
//! kubeconfig`, `KUBECONFIG`/`~/.kube/config`, or the in-cluster service
//! account), the adapter bound to this node's pods, and where the kubelet
//! put a pod's cgroup, so that the instance's class is applied there.

use std::path::{Path, PathBuf};

use daros_adapters::kubernetes::cgroup::{KubeQos, find_pod_cgroup};
use daros_adapters::kubernetes::{KubernetesAdapter, KubernetesAdapterConfig};
use daros_adapters::{RuntimeDetail, WorkloadStatus};

use crate::cgroup::{CgroupBackend, CgroupPath};

/// Settings of the Kubernetes runtime (from `[runtime]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesSettings {
    /// This node's name in Kubernetes: pods are bound to it and only its pods
    /// are watched.
    pub node: String,
    /// The kubelet's `--cgroup-root` (`/` by default).
    pub cgroup_root: String,
}

/// A client for the cluster: `kubeconfig` when given, otherwise kube's
/// inference (`KUBECONFIG`, `~/.kube/config`, in-cluster service account).
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, String> {
    // One process-wide TLS provider; quinn and kube both use rustls.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| format!("runtime.kubeconfig {}: {e}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("runtime.kubeconfig {}: {e}", p.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            format!("no Kubernetes configuration (KUBECONFIG, ~/.kube/config or in-cluster): {e}")
        })?,
    };
    kube::Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))
}

/// The adapter for this node's pods, its watch running until the runtime
/// shuts down.
pub fn adapter(client: kube::Client, s: &KubernetesSettings) -> KubernetesAdapter {
    let a = KubernetesAdapter::new(
        client,
        KubernetesAdapterConfig {
            node: Some(s.node.clone()),
            ..KubernetesAdapterConfig::default()
        },
    );
    tokio::spawn(a.clone().watch());
    a
}

/// The host name, as the kubelet names its node by default.
pub fn default_node_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .to_lowercase()
}

/// The pod's UID and Kubernetes QoS class from its status, once it has them.
pub fn pod_identity(st: &WorkloadStatus) -> Option<(String, Option<KubeQos>)> {
    match &st.detail {
        RuntimeDetail::Kubernetes {
            uid: Some(uid),
            qos_class,
            ..
        } => Some((uid.clone(), qos_class.as_deref().and_then(KubeQos::parse))),
        _ => None,
    }
}

/// The cgroup (relative to the hierarchy roots) of pod `uid` under the
/// kubelet's `cgroup_root`. Only reads directories.
pub fn pod_cgroup(
    backend: &impl CgroupBackend,
    cgroup_root: &str,
    uid: &str,
    qos: Option<KubeQos>,
) -> Result<CgroupPath, String> {
    let base = CgroupPath::new(cgroup_root).map_err(|e| e.to_string())?;
    let roots: Vec<PathBuf> = backend.dirs(&base).into_iter().map(|d| d.path).collect();
    let found = find_pod_cgroup(&roots, uid, qos).map_err(|e| e.to_string())?;
    let rel = found
        .dirs
        .first()
        .and_then(|d| roots.iter().find_map(|r| d.strip_prefix(r).ok()))
        .ok_or_else(|| format!("no cgroup for pod {uid} under {cgroup_root}"))?;
    let mut path = base;
    for c in rel.components() {
        path = path
            .join(&c.as_os_str().to_string_lossy())
            .map_err(|e| e.to_string())?;
    }
    Ok(path)
}
