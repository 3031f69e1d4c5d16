//! An adapter's [`WorkloadStatus`] as the state the coordinator understands
//! ([`ObservedState`]), failures typed per seed 000 §4.7.

use daros_adapters::{InstanceState, RuntimeDetail, WorkloadStatus};
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::reconcile::ObservedState;

/// The observed state of the run `status` describes.
pub fn observed(status: &WorkloadStatus) -> ObservedState {
    match status.state {
        InstanceState::Created => ObservedState::Pending,
        InstanceState::Starting | InstanceState::BackOff => ObservedState::Starting,
        InstanceState::Running | InstanceState::Stopping if status.ready => ObservedState::Ready,
        InstanceState::Running | InstanceState::Stopping => ObservedState::Running,
        InstanceState::Stopped => ObservedState::Stopped,
        InstanceState::Completed => ObservedState::Exited {
            code: status.last_exit.and_then(|e| e.code).unwrap_or(0),
        },
        InstanceState::Failed => match (&status.last_failure, status.last_exit) {
            (Some(f), _) => ObservedState::Failed { failure: f.clone() },
            (None, Some(e)) => ObservedState::Failed {
                failure: Failure::Runtime(RuntimeFailure::ProcessExit {
                    exit_code: e.code,
                    signal: e.signal,
                }),
            },
            (None, None) => ObservedState::Failed {
                failure: Failure::Runtime(RuntimeFailure::AdapterCommunicationError {
                    detail: status
                        .message
                        .clone()
                        .unwrap_or_else(|| "failed without a recorded cause".into()),
                }),
            },
        },
        InstanceState::Unknown => ObservedState::Failed {
            failure: Failure::Runtime(RuntimeFailure::AdapterCommunicationError {
                detail: status
                    .message
                    .clone()
                    .unwrap_or_else(|| "the runtime cannot tell this instance's state".into()),
            }),
        },
    }
}

/// The run number of the process runtime (kubernetes: none).
pub fn generation(status: &WorkloadStatus) -> Option<u64> {
    match &status.detail {
        RuntimeDetail::Process { generation, .. } => Some(*generation),
        RuntimeDetail::Kubernetes { .. } => None,
    }
}

/// The workload's main pid (process runtime).
pub fn pid(status: &WorkloadStatus) -> Option<u32> {
    match &status.detail {
        RuntimeDetail::Process { pid, .. } => *pid,
        RuntimeDetail::Kubernetes { .. } => None,
    }
}
