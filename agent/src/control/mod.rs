//! The control plane in darosd: the mesh, the raft-replicated coordinator, leader
//! dispatch of node work and the applications API.
//!
//! - [`work`]: the contract with the runtime executor (node work, reports).
//! - [`state`]: the coordinator as the raft state machine.
//! - [`bootstrap`]: credentials and addresses on first start.
//! - [`plane`]: [`ControlPlane`], started by the daemon.
//! - [`node`]: the node side (work in, reports out, registration).
//! - [`dispatch`]: the leader side.
//! - [`noop`]: the executor used when none is wired.

pub mod bootstrap;
pub mod dispatch;
pub mod node;
pub mod noop;
pub mod plane;
pub mod state;
pub mod work;

pub use plane::{ControlPlane, ControlSettings, NodeSpecFn};
pub use state::{Failure, FailureKind};

/// Errors of the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The control plane could not start.
    #[error("control plane: {0}")]
    Startup(String),
    /// No leader or no quorum right now; the write was not applied.
    #[error("control plane unavailable: {0}")]
    Unavailable(String),
    /// The coordinator refused the command or query.
    #[error(transparent)]
    Refused(#[from] Failure),
}
