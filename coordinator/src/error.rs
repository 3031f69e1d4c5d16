//! Errors of commands and queries: bad input or a refused operation. A
//! command that fails changes nothing.

use crate::decision::DecisionId;
use crate::field::FieldError;
use crate::lifecycle::IllegalTransition;
use crate::model::names::AppKey;

fn fields(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a command or query failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordinatorError {
    /// The caller may not do this (HTTP 403): who, what, which binding is
    /// missing.
    #[error(transparent)]
    Forbidden(#[from] crate::access::Denied),
    /// A document is invalid.
    #[error("invalid {kind} {name}: {}", fields(.errors))]
    Invalid {
        /// Document kind.
        kind: String,
        /// Object name.
        name: String,
        /// Field errors.
        errors: Vec<FieldError>,
    },
    /// An application names a tenant that does not exist.
    #[error(
        "metadata.tenant: application {app} names unknown tenant {tenant:?}; apply the Tenant first"
    )]
    UnknownTenant {
        /// The application.
        app: AppKey,
        /// The tenant named.
        tenant: String,
    },
    /// No such application.
    #[error("no application {0}")]
    UnknownApp(AppKey),
    /// No such tenant.
    #[error("no tenant {0:?}")]
    NoTenant(String),
    /// No such node.
    #[error("no node {0:?}")]
    UnknownNode(String),
    /// A node whose agent still reports it cannot be deleted.
    #[error(
        "node {0:?} is registered by a running agent and not Down: stop its agent first (to keep it and take no new work: cordon it)"
    )]
    NodeAlive(String),
    /// A node with instances placed on it cannot be deleted.
    #[error(
        "node {node:?} still holds {instances} instance(s) ({first}…): they move once lost (disconnect.lostAfter) or when their applications are stopped; delete the node then"
    )]
    NodeInUse {
        /// The node.
        node: String,
        /// How many instances.
        instances: usize,
        /// One of them (`tenant/app/workload/replica`).
        first: String,
    },
    /// No such pool.
    #[error("no resource pool {0:?}")]
    UnknownPool(String),
    /// No such policy.
    #[error("no policy {0:?}")]
    UnknownPolicy(String),
    /// No such role binding or token (`role binding x`, `token y`).
    #[error("no {0}")]
    NotFound(String),
    /// No such decision.
    #[error("no decision {0}")]
    UnknownDecision(DecisionId),
    /// No such version.
    #[error("application {app} has no version {version} (versions 1..={latest})")]
    UnknownVersion {
        /// The application.
        app: AppKey,
        /// Asked.
        version: u32,
        /// Latest existing.
        latest: u32,
    },
    /// The version existed but was compacted away by retention.
    #[error(
        "application {app}: version {version} was compacted away by retention (the oldest kept is {oldest}; `darosctl describe app` lists them)"
    )]
    VersionCompacted {
        /// The application.
        app: AppKey,
        /// Asked.
        version: u32,
        /// Oldest kept.
        oldest: u32,
    },
    /// No such workload.
    #[error("application {app} has no workload {workload:?}")]
    UnknownWorkload {
        /// The application.
        app: AppKey,
        /// Asked.
        workload: String,
    },
    /// The replica count is out of bounds.
    #[error("scale {app} workload {workload}: {reason}")]
    InvalidScale {
        /// The application.
        app: AppKey,
        /// The workload.
        workload: String,
        /// Why.
        reason: String,
    },
    /// The lifecycle refuses the operation in the current phase.
    #[error("application {app}: {source}")]
    Illegal {
        /// The application.
        app: AppKey,
        /// The refusal.
        source: IllegalTransition,
    },
    /// The application is not at the version the caller expected.
    #[error(
        "application {app} is at version {actual}, not {expected}: it changed since you read it; read it again (darosctl describe app) and retry"
    )]
    VersionConflict {
        /// The application.
        app: AppKey,
        /// Expected.
        expected: u32,
        /// Its latest version (0: it does not exist).
        actual: u32,
    },
    /// `abort` with no rollout under way.
    #[error(
        "application {0} has no rollout in progress: nothing to abort (`darosctl rollback --to N` applies an earlier version)"
    )]
    NoRollout(AppKey),
    /// `promote` with no canary waiting.
    #[error(
        "application {0} has no canary waiting for promotion (no rollout in progress, no workload with strategy: canary in it, or all promoted)"
    )]
    NothingToPromote(AppKey),
    /// A workflow operation that does not apply now.
    #[error("{0}")]
    Workflow(String),
    /// The object is still used.
    #[error("{what} is still used by {}", .by.join(", "))]
    InUse {
        /// The object.
        what: String,
        /// Its users.
        by: Vec<String>,
    },
}
