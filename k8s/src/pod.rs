//! What the node agent needs of a pod: who it is, its labels, its Kubernetes
//! QoS class and its cpu and memory requests and limits summed over its
//! containers (what the kubelet writes on the pod's cgroup).

use daros_coordinator::{Bytes, MilliCpu, ResourceBounds};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// Label the Kubernetes adapter puts on the pods D-AROS itself runs; those
/// are under their application's class already and policies leave them.
pub const LABEL_DAROS_APP: &str = "daros.io/app";

/// Kubernetes' QoS class of a pod (`status.qosClass`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum KubeQos {
    /// Nothing requested.
    BestEffort,
    /// Some request.
    Burstable,
    /// Requests equal limits.
    Guaranteed,
}

impl KubeQos {
    /// Every class, most protected first.
    pub const ALL: [KubeQos; 3] = [Self::Guaranteed, Self::Burstable, Self::BestEffort];

    /// Reads `status.qosClass`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Guaranteed" => Some(Self::Guaranteed),
            "Burstable" => Some(Self::Burstable),
            "BestEffort" => Some(Self::BestEffort),
            _ => None,
        }
    }

    /// As Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
            Self::BestEffort => "BestEffort",
        }
    }
}

/// A pod as the node agent sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `status.qosClass` (none before the kubelet or API server set it).
    pub qos: Option<KubeQos>,
    /// `status.phase`.
    pub phase: String,
    /// CPU requests and limits summed over the containers (a container
    /// without a limit makes the pod's limit none).
    pub cpu: ResourceBounds<MilliCpu>,
    /// Memory, likewise.
    pub memory: ResourceBounds<Bytes>,
    /// Run by D-AROS itself (label `daros.io/app`).
    pub daros_owned: bool,
    /// Quantities that could not be read (`spec.containers[0].resources.limits.cpu: ...`).
    pub problems: Vec<String>,
}

impl PodFacts {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// True once the pod has ended: its cgroup is gone or going.
    pub fn ended(&self) -> bool {
        matches!(self.phase.as_str(), "Succeeded" | "Failed")
    }

    /// Reads a pod; `None` without a UID, name or namespace (not yet
    /// stored by the API server).
    pub fn of(pod: &Pod) -> Option<Self> {
        let m = &pod.metadata;
        let status = pod.status.as_ref();
        let mut f = PodFacts {
            uid: m.uid.clone()?,
            namespace: m.namespace.clone()?,
            name: m.name.clone()?,
            labels: m.labels.clone().unwrap_or_default(),
            qos: status
                .and_then(|s| s.qos_class.as_deref())
                .and_then(KubeQos::parse),
            phase: status
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into()),
            cpu: ResourceBounds::default(),
            memory: ResourceBounds::default(),
            daros_owned: false,
            problems: Vec::new(),
        };
        f.daros_owned = f.labels.contains_key(LABEL_DAROS_APP);
        let containers = pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let (mut cpu_req, mut cpu_lim) = (Some(MilliCpu(0)), Some(MilliCpu(0)));
        let (mut mem_req, mut mem_lim) = (Some(Bytes(0)), Some(Bytes(0)));
        for (i, c) in containers.iter().enumerate() {
            let r = c.resources.as_ref();
            let get = |which: &str, name: &str| -> Option<&Quantity> {
                r.and_then(|r| match which {
                    "requests" => r.requests.as_ref(),
                    _ => r.limits.as_ref(),
                })
                .and_then(|m| m.get(name))
            };
            let path =
                |which: &str, name: &str| format!("spec.containers[{i}].resources.{which}.{name}");
            // Kubernetes defaults a missing request to the limit.
            let cpu_l = read::<MilliCpu>(get("limits", "cpu"), &path("limits", "cpu"), &mut f);
            let cpu_r = read::<MilliCpu>(get("requests", "cpu"), &path("requests", "cpu"), &mut f)
                .or(cpu_l);
            let mem_l = read::<Bytes>(get("limits", "memory"), &path("limits", "memory"), &mut f);
            let mem_r = read::<Bytes>(
                get("requests", "memory"),
                &path("requests", "memory"),
                &mut f,
            )
            .or(mem_l);
            cpu_req = add(cpu_req, cpu_r.or(Some(MilliCpu(0))), |a, b| {
                MilliCpu(a.0.saturating_add(b.0))
            });
            cpu_lim = add(cpu_lim, cpu_l, |a, b| MilliCpu(a.0.saturating_add(b.0)));
            mem_req = add(mem_req, mem_r.or(Some(Bytes(0))), |a, b| {
                Bytes(a.0.saturating_add(b.0))
            });
            mem_lim = add(mem_lim, mem_l, |a, b| Bytes(a.0.saturating_add(b.0)));
        }
        let nonzero_cpu = |v: Option<MilliCpu>| v.filter(|c| c.0 > 0);
        let nonzero_mem = |v: Option<Bytes>| v.filter(|b| b.0 > 0);
        let empty = containers.is_empty();
        f.cpu = ResourceBounds {
            request: nonzero_cpu(cpu_req),
            limit: if empty { None } else { nonzero_cpu(cpu_lim) },
            ..ResourceBounds::default()
        };
        f.memory = ResourceBounds {
            request: nonzero_mem(mem_req),
            limit: if empty { None } else { nonzero_mem(mem_lim) },
            ..ResourceBounds::default()
        };
        Some(f)
    }
}

// None in either makes the sum none (one container without a limit leaves
// the pod without one).
fn add<T: Copy>(a: Option<T>, b: Option<T>, f: impl Fn(T, T) -> T) -> Option<T> {
    Some(f(a?, b?))
}

fn read<T: std::str::FromStr>(q: Option<&Quantity>, path: &str, f: &mut PodFacts) -> Option<T>
where
    T::Err: std::fmt::Display,
{
    let q = q?;
    match q.0.parse::<T>() {
        Ok(v) => Some(v),
        Err(e) => {
            f.problems.push(format!("{path}: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn sums_containers_and_defaults_requests_to_limits() {
        let p = pod(json!({
            "metadata": {"name": "web-0", "namespace": "shop", "uid": "u1", "labels": {"tier": "web"}},
            "spec": {"containers": [
                {"name": "a", "image": "x", "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}},
                {"name": "b", "image": "x", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "250m", "memory": "64Mi"}}}
            ]},
            "status": {"phase": "Running", "qosClass": "Guaranteed"}
        }));
        let f = PodFacts::of(&p).unwrap();
        assert_eq!(f.cpu.request, Some(MilliCpu(750)));
        assert_eq!(f.cpu.limit, Some(MilliCpu(750)));
        assert_eq!(f.memory.request, Some(Bytes::from_mib(192)));
        assert_eq!(f.memory.limit, Some(Bytes::from_mib(192)));
        assert_eq!(f.qos, Some(KubeQos::Guaranteed));
        assert_eq!(f.key(), "shop/web-0");
        assert!(!f.daros_owned && !f.ended());
    }

    #[test]
    fn a_container_without_a_limit_leaves_the_pod_without_one_and_bad_quantities_are_named() {
        let p = pod(json!({
            "metadata": {"name": "w", "namespace": "n", "uid": "u", "labels": {"daros.io/app": "shop"}},
            "spec": {"containers": [
                {"name": "a", "image": "x", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}},
                {"name": "b", "image": "x", "resources": {"requests": {"memory": "lots"}}}
            ]},
            "status": {"phase": "Succeeded", "qosClass": "Burstable"}
        }));
        let f = PodFacts::of(&p).unwrap();
        assert_eq!(f.cpu.request, Some(MilliCpu(100)));
        assert_eq!(f.cpu.limit, None);
        assert_eq!(f.memory.request, None);
        assert_eq!(f.problems.len(), 1);
        assert!(
            f.problems[0].starts_with("spec.containers[1].resources.requests.memory"),
            "{:?}",
            f.problems
        );
        assert!(f.daros_owned && f.ended());
    }
}
