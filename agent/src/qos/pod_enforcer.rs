//! Kubernetes mode's [`PodEnforcer`] over the QoS service: a selected pod's
//! cgroup (the kubelet's, found for either cgroup driver) becomes a
//! discovered target `k8s-policy/<pod-uid>`, so admission, the knob report,
//! drift re-application, the protection loop and the restore of the original
//! values on release are the same as for `darosctl qos set`. A pod declares
//! no process limit, so the kubelet's (`--pod-max-pids`, read from the pod's
//! `pids.max`) is kept rather than replaced by "no limit".

use std::collections::BTreeMap;
use std::sync::Arc;

use daros_coordinator::{QosClass, ResourceProfile};
use daros_k8s::node::{Applied, PodEnforcer};
use daros_k8s::pod::PodFacts;

use super::apply::knob_path;
use super::knob::{Knob, KnobStatus, Resource};
use super::report::WorkloadQos;
use super::service::{QosError, QosService, SetTarget};
use super::spec::QosSpec;
use crate::runtime::kubernetes::pod_cgroup;

/// Prefix of the QoS ids of pods under a policy.
pub const PREFIX: &str = "k8s-policy/";

/// The enforcer (see the module docs).
#[derive(Debug, Clone)]
pub struct QosPodEnforcer {
    qos: Arc<QosService>,
    cgroup_root: String,
}

impl QosPodEnforcer {
    /// Pods' cgroups under the kubelet's `cgroup_root` (its `--cgroup-root`).
    pub fn new(qos: Arc<QosService>, cgroup_root: &str) -> Self {
        QosPodEnforcer {
            qos,
            cgroup_root: cgroup_root.to_string(),
        }
    }
}

fn id(uid: &str) -> String {
    format!("{PREFIX}{uid}")
}

/// The degraded knobs of the resources the pod has floors on.
fn applied(w: &WorkloadQos) -> Applied {
    let r = &w.reservation;
    let floored = |res: Resource| match res {
        Resource::Cpu => r.cpu.is_some(),
        Resource::Memory => r.memory.is_some(),
        Resource::Io => r.io_read.is_some() || r.io_write.is_some(),
        Resource::Network => r.network_egress.is_some() || r.network_ingress.is_some(),
        Resource::Pids | Resource::Gpu => false,
    };
    // The kept kubelet pids limit is not part of what the policy asks.
    let profile = ResourceProfile {
        pids: None,
        ..w.profile
    };
    Applied {
        class: w.class,
        profile,
        degraded: w
            .knobs
            .iter()
            .filter(|k| k.status == KnobStatus::Degraded && floored(k.resource))
            .map(|k| format!("{}: {}", k.knob, k.reason.as_deref().unwrap_or("degraded")))
            .collect(),
    }
}

impl PodEnforcer for QosPodEnforcer {
    fn enforced(&self) -> BTreeMap<String, Applied> {
        self.qos
            .overview()
            .workloads
            .iter()
            .filter_map(|w| Some((w.workload.strip_prefix(PREFIX)?.to_string(), applied(w))))
            .collect()
    }

    fn enforce(
        &self,
        pod: &PodFacts,
        class: QosClass,
        profile: &ResourceProfile,
    ) -> Result<Applied, String> {
        let cg =
            pod_cgroup(self.qos.backend(), &self.cgroup_root, &pod.uid, pod.qos).map_err(|e| {
                format!("{e} (is runtime.kubernetes_cgroup_root the kubelet's --cgroup-root?)")
            })?;
        let kubelet_pids = knob_path(self.qos.backend(), &cg, Knob::PidsMax)
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let profile = ResourceProfile {
            pids: kubelet_pids,
            ..*profile
        };
        let spec = QosSpec::new(class, profile, "pod").map_err(|e| {
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        self.qos
            .set(&id(&pod.uid), SetTarget::Discovered(cg), spec)
            .map(|w| applied(&w))
            .map_err(|e| e.to_string())
    }

    fn release(&self, uid: &str) -> Result<(), String> {
        match self.qos.unset(&id(uid)) {
            Ok(r) if r.errors.is_empty() => Ok(()),
            Ok(r) => Err(r.errors.join("; ")),
            Err(QosError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn held_elsewhere(&self, uid: &str) -> Option<String> {
        let by_hand = format!("k8s/{uid}");
        self.qos.get(&by_hand).map(|w| {
            format!(
                "put under {} by hand (darosctl qos set {by_hand}); policies leave it until that is unset",
                w.class
            )
        })
    }
}
