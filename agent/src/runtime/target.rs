//! What one executor item must be: an instance or an init-job run at an
//! attempt, and how it is turned into the adapters' [`WorkloadInstanceSpec`].
//!
//! The adapters' own restart policy is switched off (`restart: Never`): the
//! coordinator owns every restart and sends a higher attempt for it.

use daros_adapters::{CgroupPlacement, InstanceKey, Placement, WorkloadInstanceSpec};
use daros_coordinator::model::lifecycle_policy::{LifecyclePolicy, OnExhausted, RestartPolicy};
use daros_coordinator::reconcile::{InitJobId, InstanceId, JobLaunch, PlacementId, WorkloadLaunch};
use daros_coordinator::{Bytes, QosClass, ResourceProfile, Timestamp};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

use crate::control::work::{DesiredInstance, DesiredJob};
use daros_coordinator::traits::env::{EnvValue, EnvVar};

/// An instance or an init job.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "id")]
pub enum Subject {
    /// A replica (`tenant/app/workload/replica/vN`).
    Instance(InstanceId),
    /// An init job (`tenant/app/workload/init/job/vN`).
    Job(InitJobId),
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Instance(i) => write!(f, "{i}"),
            Subject::Job(j) => write!(f, "{j}"),
        }
    }
}

impl Subject {
    /// The executor's key of this subject (`instance:<id>` / `job:<id>`).
    pub fn key(&self) -> String {
        match self {
            Subject::Instance(i) => format!("instance:{i}"),
            Subject::Job(j) => format!("job:{j}"),
        }
    }

    /// The adapters' key. The version is part of the workload (or job) name
    /// (`web-v3`) so that two versions of one replica are two instances.
    pub fn instance_key(&self) -> InstanceKey {
        match self {
            Subject::Instance(i) => InstanceKey::replica(
                i.app.clone(),
                format!("{}-v{}", i.workload, i.version),
                i.replica,
            ),
            Subject::Job(j) => InstanceKey::init_job(
                j.app.clone(),
                j.workload.clone(),
                format!("{}-v{}", j.job, j.version),
            ),
        }
    }

    /// Name of its cgroup under the managed root (one path component; names are
    /// DNS labels, so the dotted key is unambiguous).
    pub fn cgroup_name(&self) -> String {
        self.instance_key().dotted()
    }

    /// Its QoS workload id (`managed/<cgroup name>`).
    pub fn qos_id(&self) -> String {
        format!("managed/{}", self.cgroup_name())
    }

    /// Its QoS workload id when it runs as a Kubernetes pod (`kubernetes/<cgroup
    /// name>`): the class is on the pod's cgroup, which the kubelet owns.
    pub fn pod_qos_id(&self) -> String {
        format!("kubernetes/{}", self.cgroup_name())
    }

    /// True for an init job.
    pub fn is_job(&self) -> bool {
        matches!(self, Subject::Job(_))
    }
}

/// How to run it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "launch")]
pub enum TargetSpec {
    /// A replica.
    Instance(Box<WorkloadLaunch>),
    /// An init job.
    Job(Box<JobLaunch>),
}

/// One desired item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// What.
    pub subject: Subject,
    /// The placement (instances; 0 for jobs): a new placement of the same
    /// subject is a new run.
    #[serde(default)]
    pub placement: PlacementId,
    /// Attempt from 1.
    pub attempt: u32,
    /// Not before this time (restart backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// How.
    pub spec: TargetSpec,
}

impl From<DesiredInstance> for Target {
    fn from(d: DesiredInstance) -> Self {
        Target {
            subject: Subject::Instance(d.instance),
            placement: d.placement,
            attempt: d.attempt,
            not_before: d.not_before,
            spec: TargetSpec::Instance(Box::new(d.launch)),
        }
    }
}

impl From<DesiredJob> for Target {
    fn from(d: DesiredJob) -> Self {
        Target {
            subject: Subject::Job(d.job),
            placement: d.run,
            attempt: d.attempt,
            not_before: None,
            spec: TargetSpec::Job(Box::new(d.launch)),
        }
    }
}

/// Log rotation applied where a process RuntimeSpec names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogDefaults {
    /// Rotate a file before it passes this size.
    pub max_size: Bytes,
    /// Files kept.
    pub max_files: u32,
}

impl Target {
    /// QoS class and profile it runs under (init jobs: inferred from their resources).
    pub fn qos(&self) -> (QosClass, ResourceProfile) {
        match &self.spec {
            TargetSpec::Instance(l) => (l.qos, l.resources),
            TargetSpec::Job(l) => (QosClass::infer(&l.resources), l.resources),
        }
    }

    /// The environment its `env` trait resolved to.
    pub fn env(&self) -> &[EnvVar] {
        match &self.spec {
            TargetSpec::Instance(l) => &l.env,
            TargetSpec::Job(l) => &l.env,
        }
    }

    /// The volumes its `storage` trait asks for.
    pub fn volumes(&self) -> &[daros_coordinator::traits::storage::VolumeSpec] {
        match &self.spec {
            TargetSpec::Instance(l) => &l.volumes,
            TargetSpec::Job(l) => &l.volumes,
        }
    }

    /// What its environment lacks (an object or key gone, or a secret value
    /// that did not open): it must not start.
    pub fn missing_env(&self) -> Option<String> {
        let missing: Vec<&str> = self
            .env()
            .iter()
            .filter_map(|v| match &v.value {
                EnvValue::Missing { what } => Some(what.as_str()),
                // Still sealed: the leader that sent it could not open it.
                EnvValue::Sealed { from, .. } => Some(from.as_str()),
                _ => None,
            })
            .collect();
        (!missing.is_empty()).then(|| missing.join(", "))
    }

    /// True when it runs as a Kubernetes pod (container runtime): its cgroup is
    /// the kubelet's, not one under the managed root.
    pub fn is_pod(&self) -> bool {
        let runtime = match &self.spec {
            TargetSpec::Instance(l) => l.runtime,
            TargetSpec::Job(l) => l.runtime,
        };
        runtime.runtime_type == daros_coordinator::model::runtime::RuntimeType::Container
    }

    /// The adapters' spec, placed in `cgroup_dirs`.
    pub fn instance_spec(
        &self,
        node: &str,
        cgroup_dirs: &[PathBuf],
        logs: LogDefaults,
    ) -> WorkloadInstanceSpec {
        let (qos, resources) = self.qos();
        let placement = Placement {
            node: Some(node.to_string()),
            cgroup: CgroupPlacement::dirs(cgroup_dirs),
            oom_score_adj: Some(oom_score_adj(qos)),
        };
        let never = LifecyclePolicy {
            restart: RestartPolicy::Never,
            max_retries: Some(0),
            ..LifecyclePolicy::default()
        };
        let (security, namespace) = match &self.spec {
            TargetSpec::Instance(l) => (l.security.clone(), l.namespace.clone()),
            TargetSpec::Job(l) => (l.security.clone(), l.namespace.clone()),
        };
        let (runtime, image, health_checks, deadline, mut runtime_spec, lifecycle) =
            match &self.spec {
                TargetSpec::Instance(l) => (
                    l.runtime,
                    l.image.clone(),
                    l.health_checks.clone(),
                    None,
                    l.runtime_spec.clone(),
                    never,
                ),
                TargetSpec::Job(l) => (
                    l.runtime,
                    l.image.clone(),
                    Vec::new(),
                    l.timeout,
                    l.runtime_spec.clone(),
                    LifecyclePolicy {
                        on_exhausted: OnExhausted::FailAndStopDependents,
                        ..never
                    },
                ),
            };
        if runtime.runtime_type == daros_coordinator::model::runtime::RuntimeType::Process
            && let Some(obj) = runtime_spec.value_mut().as_object_mut()
        {
            if !obj.contains_key("logs") {
                obj.insert(
                    "logs".into(),
                    serde_json::json!({"maxSize": logs.max_size.0, "maxFiles": logs.max_files}),
                );
            }
            // The env trait's variables win over runtimeSpec.env's.
            let values = self.env().iter().filter_map(|v| match &v.value {
                EnvValue::Text { text } => Some((v.name.clone(), text.clone())),
                EnvValue::Opened { value, .. } => {
                    Some((v.name.clone(), value.expose().to_string()))
                }
                EnvValue::Sealed { .. } | EnvValue::Missing { .. } => None,
            });
            let mut env = obj
                .get("env")
                .and_then(|e| e.as_object())
                .cloned()
                .unwrap_or_default();
            if !self.env().is_empty() {
                for (k, v) in values {
                    env.insert(k, serde_json::Value::String(v));
                }
                obj.insert("env".into(), serde_json::Value::Object(env));
            }
        }
        WorkloadInstanceSpec {
            key: self.subject.instance_key(),
            runtime,
            image,
            qos,
            resources,
            lifecycle,
            health_checks,
            deadline,
            runtime_spec,
            placement,
            security,
            namespace,
            // Mounted by the executor just before it creates the instance.
            volumes: Vec::new(),
            sidecars: match &self.spec {
                TargetSpec::Instance(l) => l.sidecars.clone(),
                TargetSpec::Job(_) => Vec::new(),
            },
        }
    }
}

/// The kernel's OOM preference per class: the floor classes are killed last,
/// best effort first (the values Kubernetes uses for its classes).
pub fn oom_score_adj(class: QosClass) -> i32 {
    match class {
        QosClass::GuaranteedPro => -998,
        QosClass::Guaranteed => -997,
        QosClass::Burstable => 500,
        QosClass::BestEffort => 1000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_separate_instances_and_cgroups() {
        let a = Subject::Instance("acme/shop/web/0/v1".parse().unwrap());
        let b = Subject::Instance("acme/shop/web/0/v2".parse().unwrap());
        assert_ne!(a.cgroup_name(), b.cgroup_name());
        assert_eq!(a.cgroup_name(), "acme.shop.web-v1.0");
        assert_eq!(a.qos_id(), "managed/acme.shop.web-v1.0");
        let j = Subject::Job("acme/shop/web/init/migrate/v1".parse().unwrap());
        assert_eq!(j.cgroup_name(), "acme.shop.web.init.migrate-v1");
        assert_eq!(j.key(), "job:acme/shop/web/init/migrate/v1");
    }

    #[test]
    fn adapter_restarts_are_off_and_logs_default() {
        let launch: JobLaunch = serde_json::from_value(serde_json::json!({
            "runtime": {"type": "process", "os": "linux"},
            "resources": {},
            "timeout": "30s",
            "runtimeSpec": {"command": "/bin/true"}
        }))
        .unwrap();
        let t = Target {
            subject: Subject::Job("acme/shop/web/init/migrate/v1".parse().unwrap()),
            placement: 0,
            attempt: 1,
            not_before: None,
            spec: TargetSpec::Job(Box::new(launch)),
        };
        let s = t.instance_spec(
            "n1",
            &[PathBuf::from("/sys/fs/cgroup/memory/daros/x")],
            LogDefaults {
                max_size: Bytes::from_mib(1),
                max_files: 3,
            },
        );
        assert_eq!(s.lifecycle.restart, RestartPolicy::Never);
        assert!(s.is_job());
        assert_eq!(s.runtime_spec.value()["logs"]["maxFiles"], 3);
        assert_eq!(
            s.placement.cgroup.procs_files,
            [PathBuf::from("/sys/fs/cgroup/memory/daros/x/cgroup.procs")]
        );
        assert_eq!(s.placement.oom_score_adj, Some(1000));
    }
}
