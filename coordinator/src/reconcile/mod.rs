//! Reconciliation (seed 000 §6.5): instance and job bookkeeping, what
//! runtimes report, the actions for them, and the pure planner.

pub mod action;
pub mod instance;
pub mod observed;
pub mod plan;

pub use action::{ActionKind, JobLaunch, RuntimeAction, WorkloadLaunch};
pub use instance::{
    AppRuntime, Instance, InstanceKey, JobKey, JobStatus, PlacementId, Replaced, Requested,
};
pub use observed::{InitJobId, InstanceId, ObservedState};
pub use plan::{Blocked, Plan, PlanInput, RolloutStep, RolloutStepKind, plan};
