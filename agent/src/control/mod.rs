//! The control plane in darosd: the mesh, the raft-replicated coordinator, leader
//! dispatch of node work and the applications API.
//!
//! - [`work`]: the contract with the runtime executor (node work, reports).
//! - [`work_digest`]: work a node already holds is confirmed by digest, not re-sent.
//! - [`state`]: the coordinator as the raft state machine.
//! - [`bootstrap`]: credentials and addresses on first start.
//! - [`plane`]: [`ControlPlane`], started by the daemon.
//! - [`node`]: the node side (work in, reports out, registration).
//! - [`dispatch`]: the leader side.
//! - [`noop`]: the executor used when none is wired.
//! - [`contact`]: when this node last had contact with the servers.

mod access;
pub mod bootstrap;
pub mod cloud_events;
pub mod contact;
pub mod dispatch;
mod dispatch_due;
mod dispatch_work;
pub mod event_sink;
pub mod metrics;
pub mod node;
pub mod noop;
pub mod plane;
pub mod pressure;
pub mod secrets;
pub mod sla_metrics;
pub mod state;
pub mod timings;
pub mod transport_metrics;
pub mod work;
pub mod work_digest;

pub use plane::{ControlPlane, ControlSettings, NodeSpecFn};
pub use state::{Failure, FailureKind};

/// Errors of the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The control plane could not start.
    #[error("control plane: {0}")]
    Startup(String),
    /// A read no leader can answer now.
    #[error("no leader can answer this read now: {0}")]
    Unavailable(String),
    /// A write refused before anything was proposed: nothing changed.
    #[error(
        "not applied (nothing was changed): {0}; retry when a leader is reachable (darosctl cluster status)"
    )]
    NotApplied(String),
    /// A write proposed (or delivered to the leader) whose answer never came.
    #[error(
        "outcome unknown: the write was proposed but no answer came ({0}); it may still be applied: read the state (darosctl get, describe) before retrying"
    )]
    OutcomeUnknown(String),
    /// This agent or its role may not do this.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The coordinator refused the command or query.
    #[error(transparent)]
    Refused(#[from] Failure),
}
