//! What `inspect` answers: the observed state of one instance, in the terms
//! of seed 000 §4.6 (Ready / Error / Stopped) with the details an operator
//! needs to act.

use crate::instance::{InstanceKey, RuntimeId};
use daros_coordinator::model::failure::Failure;
use daros_coordinator::model::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// How a run of an instance ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitStatus {
    /// Exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// Signal number, when it was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0) && self.signal.is_none()
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (_, Some(s)) => write!(f, "killed by signal {s}"),
            (Some(c), None) => write!(f, "exit code {c}"),
            (None, None) => f.write_str("unknown exit"),
        }
    }
}

/// Where an instance is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InstanceState {
    /// Created, never started.
    Created,
    /// Start in progress.
    Starting,
    /// Running.
    Running,
    /// Ended; waiting for the backoff delay before the next restart.
    BackOff,
    /// Stop in progress.
    Stopping,
    /// Stopped on request.
    Stopped,
    /// Ran to completion (exit 0) and is not restarted: a finished job.
    Completed,
    /// Failed and not restarted (policy `Never`, or retries exhausted).
    Failed,
    /// The adapter cannot tell (its runtime does not answer).
    Unknown,
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The three-valued status of seed 000 §4.6.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InstanceHealth {
    /// Running and ready (or a job that completed).
    Ready,
    /// Not ready, failing, restarting or unknown.
    Error,
    /// Not running by request (or never started).
    Stopped,
}

/// Runtime-specific facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "runtime")]
pub enum RuntimeDetail {
    /// A host process and its shim.
    #[serde(rename_all = "camelCase")]
    Process {
        /// Pid of the workload process (also its process group).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// Pid of its `daros-shim`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shim_pid: Option<u32>,
        /// Run number: 1 for the first start, +1 per restart.
        generation: u64,
        /// Directory of its log files.
        log_dir: PathBuf,
    },
    /// A Kubernetes pod.
    #[serde(rename_all = "camelCase")]
    Kubernetes {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
        /// Pod UID (finds its cgroup), once created.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uid: Option<String>,
        /// Pod phase as reported by the kubelet.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
        /// Kubernetes QoS class (`Guaranteed`, `Burstable`, `BestEffort`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        qos_class: Option<String>,
        /// Node the pod is bound to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
}

/// Observed status of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// The instance.
    pub id: RuntimeId,
    /// Which workload instance it is.
    pub key: InstanceKey,
    /// Where it is in its life.
    pub state: InstanceState,
    /// Passing its readiness checks (true while running without any).
    pub ready: bool,
    /// Restarts so far (reset after a long enough clean run).
    pub restarts: u32,
    /// When the current or last run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// How the last run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<ExitStatus>,
    /// The last failure (§4.7), kept until a run succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<Failure>,
    /// When the next restart is due (state `BackOff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_restart_at: Option<Timestamp>,
    /// Why it is in this state, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Runtime-specific facts.
    pub detail: RuntimeDetail,
}

impl WorkloadStatus {
    /// Ready / Error / Stopped, as §4.6.1 summarises an instance.
    pub fn health(&self) -> InstanceHealth {
        match self.state {
            InstanceState::Running if self.ready => InstanceHealth::Ready,
            InstanceState::Completed => InstanceHealth::Ready,
            InstanceState::Created | InstanceState::Stopped => InstanceHealth::Stopped,
            _ => InstanceHealth::Error,
        }
    }
}
