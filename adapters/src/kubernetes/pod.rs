//! Building the Pod of one workload instance from its spec: name, owner
//! labels, restart policy, node binding, D-AROS health checks as kubelet
//! probes, the resource profile as container resources, and a hash of the
//! whole desired pod to tell an unchanged pod from one to replace.
//!
//! One Pod per instance, not a Deployment: D-AROS decides replicas,
//! placement and rollout itself (seed 000 §2.4, §6); a ReplicaSet would be
//! a second controller re-creating pods behind its back. Within one pod,
//! container restarts stay with the kubelet (node-local, like the process
//! runtime's supervisor).

use super::spec::KubernetesSpec;
use crate::error::AdapterError;
use crate::instance::{InstanceKey, WorkloadInstanceSpec};
use daros_coordinator::model::health::HealthCheck;
use daros_coordinator::model::lifecycle_policy::RestartPolicy;
use daros_coordinator::model::time::DurationMs;
use daros_coordinator::{FieldError, QosClass};
use k8s_openapi::api::core::v1::{
    ExecAction, HTTPGetAction, Pod, Probe, ResourceRequirements, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// Label: tenant of the application.
pub const LABEL_TENANT: &str = "daros.io/tenant";
/// Label: application name.
pub const LABEL_APP: &str = "daros.io/app";
/// Label: workload name.
pub const LABEL_WORKLOAD: &str = "daros.io/workload";
/// Label: replica number.
pub const LABEL_REPLICA: &str = "daros.io/replica";
/// Label: init job name (init job pods only).
pub const LABEL_INIT_JOB: &str = "daros.io/init-job";
/// Label marking every object this adapter manages.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "daros";
/// Annotation: hash of the desired pod.
pub const ANNOTATION_SPEC_HASH: &str = "daros.io/spec-hash";
/// Annotation: the D-AROS QoS class the node agent enforces.
pub const ANNOTATION_QOS: &str = "daros.io/qos-class";

/// The label selector of every pod this adapter manages.
pub fn managed_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY}")
}

/// Pod name of an instance: readable, at most 63 characters, with a short
/// hash of the full key so that `a-b/c` and `a/b-c` never collide.
pub fn pod_name(key: &InstanceKey) -> String {
    let readable = match &key.init_job {
        None => format!("{}-{}-{}", key.app.name, key.workload, key.replica),
        Some(j) => format!("{}-{}-init-{j}", key.app.name, key.workload),
    };
    let h = fnv1a(key.dotted().as_bytes()) & 0xff_ffff;
    let mut prefix: String = readable.chars().take(56).collect();
    while prefix.ends_with('-') {
        prefix.pop();
    }
    format!("{prefix}-{h:06x}")
}

/// 64-bit FNV-1a: small, stable across versions and platforms.
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The owner labels of an instance.
pub fn owner_labels(key: &InstanceKey) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    l.insert(LABEL_TENANT.into(), key.app.tenant.clone());
    l.insert(LABEL_APP.into(), key.app.name.clone());
    l.insert(LABEL_WORKLOAD.into(), key.workload.clone());
    l.insert(LABEL_REPLICA.into(), key.replica.to_string());
    if let Some(j) = &key.init_job {
        l.insert(LABEL_INIT_JOB.into(), j.clone());
    }
    l
}

/// The instance a managed pod belongs to, read back from its owner labels.
pub fn owner_key(labels: &BTreeMap<String, String>) -> Option<InstanceKey> {
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    let app = daros_coordinator::model::names::AppKey::new(
        labels.get(LABEL_TENANT)?,
        labels.get(LABEL_APP)?,
    );
    let workload = labels.get(LABEL_WORKLOAD)?;
    Some(match labels.get(LABEL_INIT_JOB) {
        Some(j) => InstanceKey::init_job(app, workload, j),
        None => InstanceKey::replica(app, workload, labels.get(LABEL_REPLICA)?.parse().ok()?),
    })
}

/// The desired Pod of `spec` (whose RuntimeSpec is `ks`) in `namespace`.
pub fn build_pod(
    spec: &WorkloadInstanceSpec,
    ks: &KubernetesSpec,
    namespace: &str,
) -> Result<Pod, AdapterError> {
    let mut errs = Vec::new();
    let base = "runtimeSpec.podTemplate";
    let mut meta = ks.pod_template.metadata.clone().unwrap_or_default();
    let mut pod_spec = ks.pod_template.spec.clone().unwrap_or_default();

    let mut labels = meta.labels.take().unwrap_or_default();
    for (k, v) in owner_labels(&spec.key) {
        if let Some(old) = labels.get(&k)
            && old != &v
        {
            errs.push(FieldError::new(
                format!("{base}.metadata.labels.{k}"),
                format!("is set by D-AROS to {v:?}, the template says {old:?}"),
            ));
        }
        labels.insert(k, v);
    }
    let mut annotations = meta.annotations.take().unwrap_or_default();
    annotations.insert(ANNOTATION_QOS.into(), spec.qos.to_string());

    let restart = match spec.lifecycle.restart {
        RestartPolicy::Always => "Always",
        RestartPolicy::OnFailure => "OnFailure",
        RestartPolicy::Never => "Never",
    };
    match pod_spec.restart_policy.as_deref() {
        Some(r) if r != restart => errs.push(FieldError::new(
            format!("{base}.spec.restartPolicy"),
            format!("{r} contradicts the lifecycle policy ({restart}); leave it out"),
        )),
        _ => pod_spec.restart_policy = Some(restart.into()),
    }
    if let Some(node) = &spec.placement.node {
        match pod_spec.node_name.as_deref() {
            Some(n) if n != node => errs.push(FieldError::new(
                format!("{base}.spec.nodeName"),
                format!("{n} contradicts the placement on node {node}"),
            )),
            _ => pod_spec.node_name = Some(node.clone()),
        }
    }
    if let Some(d) = spec.deadline {
        pod_spec.active_deadline_seconds = Some(i64::try_from(secs_ceil(d)).unwrap_or(i64::MAX));
    }

    let single = pod_spec.containers.len() == 1;
    if let Some(first) = pod_spec.containers.first_mut() {
        if let Some(img) = &spec.image
            && first.image.as_deref() != Some(img.as_str())
        {
            errs.push(FieldError::new(
                format!("{base}.spec.containers[0].image"),
                format!(
                    "{} is not the workload's image {img}",
                    first.image.as_deref().unwrap_or("(none)")
                ),
            ));
        }
        for (i, c) in spec.health_checks.iter().enumerate() {
            let slot = match c.kind {
                daros_coordinator::model::health::CheckKind::Liveness => &mut first.liveness_probe,
                daros_coordinator::model::health::CheckKind::Readiness => {
                    &mut first.readiness_probe
                }
            };
            if slot.is_some() {
                errs.push(FieldError::new(
                    format!("healthChecks[{i}]"),
                    "the pod template already has this kind of probe on its first container; keep one",
                ));
            } else {
                *slot = Some(probe(c));
            }
        }
        if single && first.resources.is_none() {
            first.resources = resources(spec);
        }
    }
    errs.extend(super::security::apply(&mut pod_spec, &spec.security, base));
    if !errs.is_empty() {
        return Err(AdapterError::InvalidSpec(errs));
    }
    meta.name = Some(pod_name(&spec.key));
    meta.namespace = Some(namespace.to_string());
    meta.labels = Some(labels);
    meta.annotations = Some(annotations);
    meta.generate_name = None;
    let mut pod = Pod {
        metadata: meta,
        spec: Some(pod_spec),
        status: None,
    };
    let hash = spec_hash(&pod);
    if let Some(a) = pod.metadata.annotations.as_mut() {
        a.insert(ANNOTATION_SPEC_HASH.into(), hash);
    }
    Ok(pod)
}

/// Hash of a desired pod (without its own hash annotation).
pub fn spec_hash(pod: &Pod) -> String {
    let mut p = pod.clone();
    if let Some(a) = p.metadata.annotations.as_mut() {
        a.remove(ANNOTATION_SPEC_HASH);
    }
    let data = serde_json::to_vec(&(&p.metadata.labels, &p.metadata.annotations, &p.spec))
        .unwrap_or_default();
    format!("{:016x}", fnv1a(&data))
}

/// The spec hash a live pod carries.
pub fn live_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_SPEC_HASH)
        .map(String::as_str)
}

fn secs_ceil(d: DurationMs) -> u64 {
    d.0.div_ceil(1000).max(1)
}

fn secs_i32(d: DurationMs) -> i32 {
    i32::try_from(secs_ceil(d)).unwrap_or(i32::MAX)
}

/// A D-AROS health check as a kubelet probe (kubelet counts in whole
/// seconds: durations are rounded up).
pub fn probe(c: &HealthCheck) -> Probe {
    Probe {
        exec: c.exec.as_ref().map(|e| ExecAction {
            command: Some(e.command.clone()),
        }),
        http_get: c.http.as_ref().map(|h| HTTPGetAction {
            path: Some(h.path.clone()),
            port: IntOrString::Int(i32::from(h.port)),
            ..HTTPGetAction::default()
        }),
        tcp_socket: c.tcp.as_ref().map(|t| TCPSocketAction {
            port: IntOrString::Int(i32::from(t.port)),
            ..TCPSocketAction::default()
        }),
        period_seconds: Some(secs_i32(c.period)),
        timeout_seconds: Some(secs_i32(c.timeout)),
        failure_threshold: Some(i32::try_from(c.failure_threshold.max(1)).unwrap_or(i32::MAX)),
        initial_delay_seconds: Some(i32::try_from(c.initial_delay.0 / 1000).unwrap_or(i32::MAX)),
        ..Probe::default()
    }
}

/// Container resources from the resource profile (cpu, memory), so that
/// the pod's Kubernetes QoS class matches: GuaranteedPro and Guaranteed
/// have request == limit.
fn resources(spec: &WorkloadInstanceSpec) -> Option<ResourceRequirements> {
    let r = &spec.resources;
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    if let Some(v) = r.cpu.request {
        requests.insert("cpu".to_string(), Quantity(format!("{}m", v.0)));
    }
    if let Some(v) = r.cpu.limit {
        limits.insert("cpu".to_string(), Quantity(format!("{}m", v.0)));
    }
    if let Some(v) = r.memory.request {
        requests.insert("memory".to_string(), Quantity(v.0.to_string()));
    }
    if let Some(v) = r.memory.limit {
        limits.insert("memory".to_string(), Quantity(v.0.to_string()));
    }
    if requests.is_empty() && limits.is_empty() {
        return None;
    }
    Some(ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    })
}

/// The Kubernetes QoS class a D-AROS class corresponds to.
pub fn kubernetes_qos(q: QosClass) -> &'static str {
    match q {
        QosClass::GuaranteedPro | QosClass::Guaranteed => "Guaranteed",
        QosClass::Burstable => "Burstable",
        QosClass::BestEffort => "BestEffort",
    }
}

/// Metadata of a pod to look up by name.
pub fn pod_meta(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..ObjectMeta::default()
    }
}
