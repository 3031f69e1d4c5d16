//! The `RuntimeAdapter` trait of seed 000 §4.5.2: the only way D-AROS
//! drives a runtime. `create` returns the instance's [`RuntimeId`]; `start`,
//! `stop`, `destroy` and `inspect` take it; `capabilities` says what the
//! adapter runs; `events` streams what happens to instances (§4.7.2).

use crate::error::AdapterError;
use crate::event::EventStream;
use crate::instance::{AdapterKind, RuntimeId, WorkloadInstanceSpec};
use crate::logs::LogLine;
use crate::status::WorkloadStatus;
use daros_coordinator::model::runtime::{OsType, RuntimeRequirement, RuntimeType};
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::time::Duration;

/// What an adapter can run and do (§4.3.1 RuntimeCapabilities).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeCapabilities {
    /// The adapter.
    pub adapter: AdapterKind,
    /// Runtime types it runs.
    pub runtime_types: Vec<RuntimeType>,
    /// Operating systems it runs them on.
    pub os: Vec<OsType>,
    /// Runs the workload's health checks (exec, http, tcp).
    pub health_checks: bool,
    /// Applies the lifecycle policy's restarts with backoff.
    pub restarts: bool,
    /// Serves logs, and follows them.
    pub logs: bool,
    /// Running instances survive a restart of the agent and are adopted.
    pub survives_agent_restart: bool,
    /// Puts processes into cgroups prepared by the agent; otherwise the
    /// agent finds the runtime's own cgroups (Kubernetes pods).
    pub joins_agent_cgroups: bool,
}

impl RuntimeCapabilities {
    /// True when the adapter runs workloads that need `req`.
    pub fn supports(&self, req: &RuntimeRequirement) -> bool {
        self.runtime_types.contains(&req.runtime_type) && self.os.contains(&req.os)
    }

    /// Refuses `req` when not supported.
    pub fn check(&self, req: &RuntimeRequirement) -> Result<(), AdapterError> {
        if self.supports(req) {
            return Ok(());
        }
        let types: Vec<String> = self.runtime_types.iter().map(ToString::to_string).collect();
        let os: Vec<String> = self.os.iter().map(ToString::to_string).collect();
        Err(AdapterError::Unsupported {
            adapter: self.adapter,
            requirement: *req,
            serves: format!("{} on {}", types.join(", "), os.join(", ")),
        })
    }
}

/// Options of [`RuntimeAdapter::destroy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestroyOptions {
    /// Grace period of the stop that precedes removal when still running.
    pub grace: Duration,
    /// Also delete the instance's logs.
    pub remove_logs: bool,
}

impl Default for DestroyOptions {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(10),
            remove_logs: false,
        }
    }
}

/// Which log lines to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogQuery {
    /// Only the last `tail` lines (all when `None`).
    pub tail: Option<usize>,
}

/// A followed log: lines as they are written, until the consumer drops it.
pub type LogStream = BoxStream<'static, Result<LogLine, AdapterError>>;

/// A runtime adapter (§4.5.2). All operations are idempotent where the
/// seed's lifecycle may repeat them: creating an existing instance with the
/// same spec returns its id, starting a running instance and stopping a
/// stopped one succeed.
pub trait RuntimeAdapter: Send + Sync {
    /// What this adapter runs (`GetRuntimeCapabilities`).
    fn capabilities(&self) -> RuntimeCapabilities;

    /// Validates `spec` and records the instance without running it
    /// (`CreateWorkload`); returns its id.
    fn create(
        &self,
        spec: &WorkloadInstanceSpec,
    ) -> impl Future<Output = Result<RuntimeId, AdapterError>> + Send;

    /// Starts the instance (`StartWorkload`); returns once it runs (or the
    /// start failed, with the reason).
    fn start(&self, id: &RuntimeId) -> impl Future<Output = Result<(), AdapterError>> + Send;

    /// Stops the instance (`StopWorkload`): SIGTERM or its runtime's
    /// equivalent, `grace` to finish, then kill. Returns once it stopped.
    fn stop(
        &self,
        id: &RuntimeId,
        grace: Duration,
    ) -> impl Future<Output = Result<(), AdapterError>> + Send;

    /// Stops the instance if needed and removes it (`DestroyWorkload`),
    /// leaving no process behind.
    fn destroy(
        &self,
        id: &RuntimeId,
        opts: DestroyOptions,
    ) -> impl Future<Output = Result<(), AdapterError>> + Send;

    /// The instance's status (`InspectWorkload`).
    fn inspect(
        &self,
        id: &RuntimeId,
    ) -> impl Future<Output = Result<WorkloadStatus, AdapterError>> + Send;

    /// Every instance this adapter knows.
    fn list(&self) -> impl Future<Output = Result<Vec<WorkloadStatus>, AdapterError>> + Send;

    /// Log lines of the instance, oldest first.
    fn logs(
        &self,
        id: &RuntimeId,
        query: LogQuery,
    ) -> impl Future<Output = Result<Vec<LogLine>, AdapterError>> + Send;

    /// The last `tail` lines, then new lines as they are written
    /// (`darosctl logs -f`).
    fn follow_logs(
        &self,
        id: &RuntimeId,
        tail: usize,
    ) -> impl Future<Output = Result<LogStream, AdapterError>> + Send;

    /// A new subscription to events about every instance of this adapter.
    fn events(&self) -> EventStream;
}
