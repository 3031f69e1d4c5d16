//! The failure model of seed 000 §4.7: failures are typed system events
//! across layers and runtimes, not "a pod crashed".

use serde::{Deserialize, Serialize};
use std::fmt;

/// A runtime-level failure reported by a runtime adapter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum RuntimeFailure {
    /// A container exited abnormally.
    ContainerCrash {
        /// Exit code, if known.
        exit_code: Option<i32>,
    },
    /// A virtual machine stopped unexpectedly.
    VmExit {
        /// What the hypervisor said.
        detail: String,
    },
    /// A process exited with a non-zero code or a signal.
    ProcessExit {
        /// Exit code, if it exited.
        exit_code: Option<i32>,
        /// Signal number, if it was killed.
        signal: Option<i32>,
    },
    /// A Windows service stopped.
    WindowsServiceStopped {
        /// What the service manager said.
        detail: String,
    },
    /// The kernel's out-of-memory killer ended it: its cgroup reached its
    /// memory limit (the cgroup's `oom_kill` count rose).
    OutOfMemory {
        /// The memory limit it ran under, when it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<crate::model::resources::Bytes>,
    },
    /// The adapter could not talk to its runtime.
    AdapterCommunicationError {
        /// Error text from the adapter.
        detail: String,
    },
}

/// An infrastructure-level failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InfrastructureFailure {
    /// The node is down.
    NodeDown,
    /// The node cannot be reached.
    NetworkPartition,
}

/// Any failure the lifecycle system handles (§4.7.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Failure {
    /// Node down, network partition.
    Infrastructure {
        /// Which one.
        kind: InfrastructureFailure,
        /// The node concerned.
        node: String,
    },
    /// Container crash, VM exit, process exit, adapter error.
    Runtime(RuntimeFailure),
    /// The application itself: a failing health check, a business error.
    Application {
        /// Health check that failed, if that is how it was detected.
        check: Option<String>,
        /// What was observed.
        detail: String,
    },
    /// A D-AROS component failed.
    ControlPlane {
        /// What failed.
        detail: String,
    },
    /// A placement or security policy was violated.
    PolicyViolation {
        /// The policy.
        policy: String,
        /// How.
        detail: String,
    },
}

/// The categories of seed 000 §4.7.1 a lifecycle policy reacts to, with
/// out-of-memory kills apart from other runtime failures (restarting them
/// unchanged rarely helps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailureCategory {
    /// Node down, network partition.
    Infrastructure,
    /// Crash, exit, adapter error (not OOM).
    Runtime,
    /// Killed at its memory limit.
    OutOfMemory,
    /// Failing health check, business error.
    Application,
    /// A D-AROS component failed.
    ControlPlane,
    /// A placement or security policy (node admission) refused it.
    PolicyViolation,
}

impl fmt::Display for FailureCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureCategory::Infrastructure => "infrastructure",
            FailureCategory::Runtime => "runtime",
            FailureCategory::OutOfMemory => "outOfMemory",
            FailureCategory::Application => "application",
            FailureCategory::ControlPlane => "controlPlane",
            FailureCategory::PolicyViolation => "policyViolation",
        })
    }
}

impl Failure {
    /// Its category.
    pub fn category(&self) -> FailureCategory {
        match self {
            Failure::Infrastructure { .. } => FailureCategory::Infrastructure,
            Failure::Runtime(RuntimeFailure::OutOfMemory { .. }) => FailureCategory::OutOfMemory,
            Failure::Runtime(_) => FailureCategory::Runtime,
            Failure::Application { .. } => FailureCategory::Application,
            Failure::ControlPlane { .. } => FailureCategory::ControlPlane,
            Failure::PolicyViolation { .. } => FailureCategory::PolicyViolation,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Infrastructure { kind, node } => {
                write!(f, "infrastructure failure: {kind:?} on node {node}")
            }
            Failure::Runtime(r) => match r {
                RuntimeFailure::ContainerCrash { exit_code } => {
                    write!(
                        f,
                        "runtime failure: container crashed (exit code {exit_code:?})"
                    )
                }
                RuntimeFailure::VmExit { detail } => {
                    write!(f, "runtime failure: VM exited: {detail}")
                }
                RuntimeFailure::ProcessExit { exit_code, signal } => match (exit_code, signal) {
                    (_, Some(s)) => write!(f, "runtime failure: process killed by signal {s}"),
                    (Some(c), None) => write!(f, "runtime failure: process exited with code {c}"),
                    (None, None) => write!(f, "runtime failure: process exited"),
                },
                RuntimeFailure::WindowsServiceStopped { detail } => {
                    write!(f, "runtime failure: Windows service stopped: {detail}")
                }
                RuntimeFailure::OutOfMemory { limit } => match limit {
                    Some(l) => write!(f, "OOM: killed at its memory limit of {l}"),
                    None => write!(f, "OOM: killed by the kernel's out-of-memory killer"),
                },
                RuntimeFailure::AdapterCommunicationError { detail } => {
                    write!(f, "runtime failure: adapter communication error: {detail}")
                }
            },
            Failure::Application { check, detail } => match check {
                Some(c) => write!(f, "application failure: health check {c} failed: {detail}"),
                None => write!(f, "application failure: {detail}"),
            },
            Failure::ControlPlane { detail } => write!(f, "control plane failure: {detail}"),
            Failure::PolicyViolation { policy, detail } => {
                write!(f, "policy violation ({policy}): {detail}")
            }
        }
    }
}
