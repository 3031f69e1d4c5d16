//! Errors of adapter operations, and how they map to the failure model of
//! seed 000 §4.7 when they concern a running workload.

use crate::instance::{AdapterKind, RuntimeId};
use crate::status::InstanceState;
use daros_coordinator::FieldError;
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::model::runtime::RuntimeRequirement;
use std::path::PathBuf;

/// An adapter operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// The runtime spec, placement or policy of an instance is not usable;
    /// each error names its field.
    #[error("invalid instance spec: {}", join(.0))]
    InvalidSpec(Vec<FieldError>),
    /// This adapter does not run that runtime type or OS.
    #[error("the {adapter} adapter cannot run {requirement} workloads (it runs {serves})")]
    Unsupported {
        /// The adapter asked.
        adapter: AdapterKind,
        /// What the workload needs.
        requirement: RuntimeRequirement,
        /// What the adapter serves.
        serves: String,
    },
    /// No instance has this id.
    #[error("no instance {0}")]
    NotFound(RuntimeId),
    /// The id exists with a different spec.
    #[error("instance {0} already exists with a different spec: destroy it first")]
    Conflict(RuntimeId),
    /// The operation does not apply in the instance's state.
    #[error("cannot {op} instance {id}: it is {state}")]
    InvalidState {
        /// The instance.
        id: RuntimeId,
        /// The operation.
        op: &'static str,
        /// Its state.
        state: InstanceState,
    },
    /// Starting the workload failed; `stage` says which step.
    #[error("starting {id} failed at {stage}: {reason}")]
    Launch {
        /// The instance.
        id: RuntimeId,
        /// The step (`spawn shim`, `join cgroup`, `set user`, `exec`...).
        stage: String,
        /// What went wrong.
        reason: String,
    },
    /// A file or directory of the adapter's state could not be used.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The instance store (redb) failed.
    #[error("instance store {}: {reason}", path.display())]
    Store {
        /// The database file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The Kubernetes API failed or could not be reached.
    #[error("kubernetes API: {op}: {source}")]
    Kube {
        /// What the adapter was doing.
        op: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The adapter is shutting down.
    #[error("the adapter is shutting down")]
    Closed,
}

fn join(errs: &[FieldError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl AdapterError {
    /// An I/O error at `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// One invalid field.
    pub fn field(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidSpec(vec![FieldError::new(path, reason)])
    }

    /// A short code for metrics (`invalid-spec`, `launch`, `kube` ...).
    pub fn code(&self) -> &'static str {
        match self {
            AdapterError::InvalidSpec(_) => "invalid-spec",
            AdapterError::Unsupported { .. } => "unsupported",
            AdapterError::NotFound(_) => "not-found",
            AdapterError::Conflict(_) => "conflict",
            AdapterError::InvalidState { .. } => "invalid-state",
            AdapterError::Launch { .. } => "launch",
            AdapterError::Io { .. } => "io",
            AdapterError::Store { .. } => "store",
            AdapterError::Kube { .. } => "kube",
            AdapterError::Closed => "closed",
        }
    }

    /// The failure (§4.7) this error means for a workload, when it means
    /// one: the runtime could not be reached or could not start the workload
    /// (`AdapterCommunicationError`), or
    /// its state could not be kept (`ControlPlane`). Spec and usage errors
    /// are refusals, not failures.
    pub fn as_failure(&self) -> Option<Failure> {
        match self {
            // §4.7 has no "could not start" kind: the adapter could not make
            // its runtime do what was asked, the nearest is a communication
            // error, with the stage and reason in the detail.
            AdapterError::Kube { .. } | AdapterError::Launch { .. } => Some(Failure::Runtime(
                RuntimeFailure::AdapterCommunicationError {
                    detail: self.to_string(),
                },
            )),
            AdapterError::Io { .. } | AdapterError::Store { .. } => Some(Failure::ControlPlane {
                detail: self.to_string(),
            }),
            _ => None,
        }
    }
}
