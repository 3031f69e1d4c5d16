//! What the agent asks an adapter to run: one instance (replica, or init
//! job) of a workload, with its policy and placement already resolved, and
//! the id the adapter hands back for it (seed 000 §4.6, `RuntimeID`).

use crate::placement::Placement;
use daros_coordinator::QosClass;
use daros_coordinator::ResourceProfile;
use daros_coordinator::model::health::HealthCheck;
use daros_coordinator::model::lifecycle_policy::{LifecyclePolicy, OnExhausted, RestartPolicy};
use daros_coordinator::model::names::AppKey;
use daros_coordinator::model::runtime::{RuntimeRequirement, RuntimeSpec};
use daros_coordinator::model::time::DurationMs;
use daros_coordinator::model::workload::{InitJob, Workload};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which adapter owns an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdapterKind {
    /// Bare-metal processes ([`crate::process`]).
    Process,
    /// Kubernetes pods ([`crate::kubernetes`]).
    Kubernetes,
}

impl fmt::Display for AdapterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AdapterKind::Process => "process",
            AdapterKind::Kubernetes => "kubernetes",
        })
    }
}

/// The id an adapter assigns to an instance: `process:<tenant>.<app>.<workload>.<replica>`
/// or `kubernetes:<namespace>/<pod>`. Deterministic, so that creating the
/// same instance twice finds the first one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RuntimeId {
    /// Owning adapter.
    pub adapter: AdapterKind,
    /// Adapter-specific name.
    pub name: String,
}

impl RuntimeId {
    /// An id of `adapter` named `name`.
    pub fn new(adapter: AdapterKind, name: impl Into<String>) -> Self {
        Self {
            adapter,
            name: name.into(),
        }
    }
}

impl fmt::Display for RuntimeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.adapter, self.name)
    }
}

/// A runtime id string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid runtime id {0:?}: expected process:<name> or kubernetes:<namespace>/<pod>")]
pub struct RuntimeIdError(pub String);

impl FromStr for RuntimeId {
    type Err = RuntimeIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || RuntimeIdError(s.to_string());
        let (kind, name) = s.split_once(':').ok_or_else(err)?;
        let adapter = match kind {
            "process" => AdapterKind::Process,
            "kubernetes" => AdapterKind::Kubernetes,
            _ => return Err(err()),
        };
        if name.is_empty() || name.contains(['\0', '\n']) || name.contains("..") {
            return Err(err());
        }
        Ok(Self::new(adapter, name))
    }
}

impl TryFrom<String> for RuntimeId {
    type Error = RuntimeIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<RuntimeId> for String {
    fn from(id: RuntimeId) -> String {
        id.to_string()
    }
}

/// Which instance of which workload: application, workload, replica and,
/// for an init job, its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceKey {
    /// Tenant and application.
    pub app: AppKey,
    /// Workload name within the application.
    pub workload: String,
    /// Replica number (0 for init jobs).
    pub replica: u32,
    /// Set when this instance is an init job of the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_job: Option<String>,
}

impl InstanceKey {
    /// Replica `replica` of `workload` in `app`.
    pub fn replica(app: AppKey, workload: impl Into<String>, replica: u32) -> Self {
        Self {
            app,
            workload: workload.into(),
            replica,
            init_job: None,
        }
    }

    /// Init job `job` of `workload` in `app`.
    pub fn init_job(app: AppKey, workload: impl Into<String>, job: impl Into<String>) -> Self {
        Self {
            app,
            workload: workload.into(),
            replica: 0,
            init_job: Some(job.into()),
        }
    }

    /// Dot-joined name: names are DNS labels (no dots), so it is unambiguous
    /// and safe as a file name: `tenant.app.workload.3` or
    /// `tenant.app.workload.init.job`.
    pub fn dotted(&self) -> String {
        match &self.init_job {
            None => format!(
                "{}.{}.{}.{}",
                self.app.tenant, self.app.name, self.workload, self.replica
            ),
            Some(j) => format!(
                "{}.{}.{}.init.{j}",
                self.app.tenant, self.app.name, self.workload
            ),
        }
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.init_job {
            None => write!(f, "{}/{}#{}", self.app, self.workload, self.replica),
            Some(j) => write!(f, "{}/{} init job {j}", self.app, self.workload),
        }
    }
}

/// Everything an adapter needs to run one instance. Built by the agent from
/// the coordinator's [`Workload`] with [`WorkloadInstanceSpec::replica`] or
/// [`WorkloadInstanceSpec::init_job`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadInstanceSpec {
    /// Which instance this is.
    pub key: InstanceKey,
    /// Runtime type and OS.
    pub runtime: RuntimeRequirement,
    /// Image or binary allowed by policy; the runtime spec must run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The class the node enforces.
    pub qos: QosClass,
    /// Requests, limits, reservations.
    #[serde(default)]
    pub resources: ResourceProfile,
    /// Restart and failure handling, already resolved against the
    /// application default.
    pub lifecycle: LifecyclePolicy,
    /// Health checks the adapter runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
    /// Longest one run may take (init jobs); a run past it is a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DurationMs>,
    /// The opaque runtime description, parsed by the adapter only.
    #[serde(default)]
    pub runtime_spec: RuntimeSpec,
    /// Where it runs: node and cgroups prepared by the agent.
    #[serde(default)]
    pub placement: Placement,
    /// What the runtime enforces (user, capabilities, no_new_privs,
    /// system-call filter, writable paths; a Kubernetes namespace default).
    #[serde(default)]
    pub security: daros_coordinator::model::security::SecurityContext,
    /// Namespace for pods when the RuntimeSpec names none (the tenant's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Volumes the agent mounted for it (`storage` trait).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
    /// Processes that share its lifecycle, cgroup and logs (`sidecar` trait).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<daros_coordinator::traits::sidecar::SidecarSpec>,
}

/// A volume the agent prepared for an instance: the process finds its
/// directory in `env`, owned by its user and writable under a read-only root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    /// Volume name (from the spec).
    pub name: String,
    /// Where it is mounted.
    pub path: std::path::PathBuf,
    /// The variable naming `path` (`DAROS_VOLUME_DATA`).
    pub env: String,
}

impl WorkloadInstanceSpec {
    /// Replica `replica` of workload `w`, with the application's lifecycle
    /// policy `app_policy` where the workload has none, and its QoS class
    /// inferred from its resources where it names none.
    pub fn replica(
        app: &AppKey,
        app_policy: &LifecyclePolicy,
        w: &Workload,
        replica: u32,
        placement: Placement,
    ) -> Self {
        Self {
            key: InstanceKey::replica(app.clone(), &w.name, replica),
            runtime: w.runtime,
            image: w.image.clone(),
            qos: w.qos.unwrap_or_else(|| QosClass::infer(&w.resources)),
            resources: w.resources,
            lifecycle: w.lifecycle.unwrap_or(*app_policy),
            health_checks: w.health_checks.clone(),
            deadline: None,
            runtime_spec: w.runtime_spec.clone(),
            placement,
            security: daros_coordinator::policy::security::context_of(
                &w.security,
                &Default::default(),
            ),
            namespace: None,
            volumes: Vec::new(),
            sidecars: daros_coordinator::traits::sidecar::sidecars(&w.traits),
        }
    }

    /// Init job `job` of workload `w`: run until it succeeds, retried
    /// `job.retries` times on failure with its backoff; when retries run out
    /// the workload's dependents must not start (`FailAndStopDependents`).
    pub fn init_job(app: &AppKey, w: &Workload, job: &InitJob, placement: Placement) -> Self {
        Self {
            key: InstanceKey::init_job(app.clone(), &w.name, &job.name),
            runtime: job.runtime.unwrap_or(w.runtime),
            image: job.image.clone(),
            qos: QosClass::infer(&job.resources),
            resources: job.resources,
            lifecycle: LifecyclePolicy {
                restart: RestartPolicy::OnFailure,
                max_retries: Some(job.retries),
                backoff: job.backoff,
                on_exhausted: OnExhausted::FailAndStopDependents,
                ..LifecyclePolicy::default()
            },
            health_checks: Vec::new(),
            deadline: job.timeout,
            runtime_spec: job.runtime_spec.clone(),
            placement,
            security: daros_coordinator::policy::security::context_of(
                &w.security,
                &Default::default(),
            ),
            namespace: None,
            volumes: Vec::new(),
            sidecars: Vec::new(),
        }
    }

    /// True for a run-to-completion instance (an init job).
    pub fn is_job(&self) -> bool {
        self.key.init_job.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::model::runtime::{OsType, RuntimeType};

    #[test]
    fn runtime_ids_round_trip_and_refuse_garbage() {
        let id = RuntimeId::new(AdapterKind::Process, "acme.shop.web.0");
        assert_eq!(id.to_string(), "process:acme.shop.web.0");
        assert_eq!(
            "process:acme.shop.web.0".parse::<RuntimeId>(),
            Ok(id.clone())
        );
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"process:acme.shop.web.0\"");
        for bad in ["acme", "vm:x", "process:", "process:../x"] {
            assert!(bad.parse::<RuntimeId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn init_jobs_restart_on_failure_with_their_retries() {
        let app = AppKey::new("acme", "shop");
        let mut w = Workload::new(
            "web",
            RuntimeRequirement {
                runtime_type: RuntimeType::Process,
                os: OsType::Linux,
            },
        );
        let job: InitJob = serde_json::from_value(serde_json::json!({
            "name": "migrate", "retries": 2, "timeout": "30s",
            "runtimeSpec": {"command": "/bin/true"}
        }))
        .unwrap();
        w.init_jobs.push(job.clone());
        let s = WorkloadInstanceSpec::init_job(&app, &w, &job, Placement::default());
        assert_eq!(s.key.dotted(), "acme.shop.web.init.migrate");
        assert_eq!(s.lifecycle.restart, RestartPolicy::OnFailure);
        assert_eq!(s.lifecycle.max_retries, Some(2));
        assert_eq!(s.deadline, Some(DurationMs::from_secs(30)));
        assert!(s.is_job());
        let r = WorkloadInstanceSpec::replica(
            &app,
            &LifecyclePolicy::default(),
            &w,
            2,
            Placement::default(),
        );
        assert_eq!(r.key.dotted(), "acme.shop.web.2");
        assert_eq!(r.qos, QosClass::BestEffort);
    }
}
