//! D-AROS coordinator: the application runtime's decision logic (seed 000,
//! with components and init jobs from seed 002).
//!
//! Pure and deterministic: no I/O, no clock reads (time is passed in), no
//! randomness, `BTreeMap` iteration wherever order reaches a decision. The
//! state changes only through [`Coordinator::apply`] with a [`Command`], so
//! the mesh can replicate commands through raft; queries take `&self`.
//!
//! Modules, in the order a request meets them:
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Who may do what: principals, roles, bindings, tokens.
pub mod access;
/// Admission control: validity, quota, global filters.
pub mod admission;
/// Tenant fair share, priority, preemption, gang placement.
pub mod arbitration;
/// Commands and outcomes.
pub mod command;
/// Decision records and explanations.
pub mod decision;
/// Command and query errors.
pub mod error;
/// Field-addressed validation errors.
pub mod field;
/// Registered job types that workflow steps run.
pub mod jobs;
/// Lifecycle phases and the transition function.
pub mod lifecycle;
/// The seed concepts as types.
pub mod model;
/// Placement strategies and the capacity-indexed search.
pub mod placement;
/// Policy resolution across scopes and evaluation records.
pub mod policy;
/// Runtime reports, actions and the reconcile planner.
pub mod reconcile;
/// Spec files (YAML/JSON) with field-path errors.
pub mod spec;
/// The coordinator state.
pub mod state;
/// Traits: declarative add-ons on workloads, by registered handler.
pub mod traits;
/// Spec versions and rollback.
pub mod version;
/// What-if simulation.
pub mod whatif;
/// Workflows: ordered steps of an application's deployment.
pub mod workflow;

pub use command::{Command, NodeCondition, OperationRequest, Outcome, Refusal, WorkloadReport};
pub use decision::{Decision, DecisionId, Explanation};
pub use error::CoordinatorError;
pub use field::FieldError;
pub use lifecycle::{LifecycleEvent, Phase, Trigger};
pub use model::application::Application;
pub use model::names::AppKey;
pub use model::node::ExecutionNode;
pub use model::qos::{MinimalReservation, QosClass};
pub use model::resources::{
    Bytes, BytesPerSec, DedicatedCpus, GpuCount, IoProfile, MilliCpu, NetworkProfile, Quantity,
    QuantityError, ResourceBounds, ResourceProfile,
};
pub use model::time::Timestamp;
pub use reconcile::{InitJobId, InstanceId, ObservedState, RuntimeAction};
pub use spec::{Document, Format};
pub use state::{AppDescription, AppSummary, Coordinator, CoordinatorConfig};
pub use whatif::{NodeEvent, WhatIfReport};
