//! The one pure transition function of the lifecycle (seed 000 §6.3 table
//! and §6.4 diagram): `(phase, input) -> next phase + actions`, or a typed
//! refusal naming what the phase accepts.
//!
//! Beyond the diagram, edges the table implies or operators need are
//! explicit here:
//! - `Failed --Retry--> Created` (the table lists Retry for Failed; it goes
//!   back through admission), and `Terminated --Start--> Created`: a stopped
//!   application starts again the same way, keeping its versions and events;
//! - `Scheduled --Stop--> Terminated` (the table lists Stop for Scheduled;
//!   §6.4.2 allows Terminated from any state);
//! - a Terminated or Failed application records a new spec version
//!   (UpdateSpec, rollback) without running it; starting it is a separate
//!   Start (or Retry);
//! - Scale is accepted wherever replicas are placed (Scheduled, Running,
//!   Degraded).
//!
//! Deleting a running application passes through Terminated first.

use super::operation::{Operation, SystemEvent};
use super::state::Phase;
use crate::lifecycle::event::Target;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What drives a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A user operation.
    Op(Operation),
    /// A system event.
    Event(SystemEvent),
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Op(o) => write!(f, "operation {o}"),
            Input::Event(e) => write!(f, "event {e}"),
        }
    }
}

/// Work the coordinator must do for a step, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LifecycleAction {
    /// Store the new spec as a new version.
    RecordVersion,
    /// Run admission on the (new) spec.
    RunAdmission,
    /// Charge the tenant's quota.
    ChargeQuota,
    /// Run arbitration and placement.
    RunArbitration,
    /// Commit the placements of the accepted decision.
    CommitPlacements,
    /// Start workloads (in dependency order).
    StartWorkloads,
    /// Replace instances version by version.
    PlanRollout,
    /// Place or remove replicas for a new replica count.
    ScaleWorkloads,
    /// Re-place instances taken away while degraded.
    RestorePlacements,
    /// Stop every workload (dependents first).
    StopWorkloads,
    /// Free node capacity.
    ReleasePlacements,
    /// Give the quota back to the tenant.
    ReleaseQuota,
    /// Forget the application.
    Cleanup,
}

/// The outcome of one legal transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Phase before.
    pub from: Phase,
    /// Phase passed through on the way (Delete of a running application
    /// goes through Terminated).
    pub via: Option<Phase>,
    /// Where it ends.
    pub to: Target,
    /// Work to do, in order.
    pub actions: Vec<LifecycleAction>,
}

/// A refused transition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{input} is not allowed in phase {phase}; {phase} accepts: {}", accepted(.phase))]
pub struct IllegalTransition {
    /// Phase the application is in.
    pub phase: Phase,
    /// What was asked.
    pub input: Input,
}

fn accepted(p: &Phase) -> String {
    let ops = allowed_operations(*p);
    if ops.is_empty() {
        "no operations".into()
    } else {
        ops.iter()
            .map(|o| o.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Operations each phase accepts (§6.3.1 table, with the edges listed in
/// the module comment; Rejected accepts Delete, its cleanup edge in §6.4,
/// and a re-apply replaces it). docs/coordinator.md prints this table.
pub fn allowed_operations(phase: Phase) -> &'static [Operation] {
    use Operation::*;
    match phase {
        Phase::Created => &[UpdateSpec, Delete],
        Phase::Admitted => &[UpdateSpec, Delete, Start],
        Phase::Scheduled => &[UpdateSpec, Delete, Stop, Scale],
        Phase::Running => &[UpdateSpec, Delete, Stop, Scale],
        Phase::Degraded => &[UpdateSpec, Delete, Stop, Scale, Restore],
        Phase::Terminated => &[UpdateSpec, Delete, Start],
        Phase::Failed => &[UpdateSpec, Delete, Retry],
        Phase::Rejected => &[Delete],
    }
}

/// True when `phase` accepts `op`.
pub fn accepts(phase: Phase, op: Operation) -> bool {
    allowed_operations(phase).contains(&op)
}

/// The transition function.
pub fn transition(phase: Phase, input: Input) -> Result<Step, IllegalTransition> {
    use LifecycleAction as A;
    use Phase as P;
    let step = |to: Target, actions: &[A]| Step {
        from: phase,
        via: None,
        to,
        actions: actions.to_vec(),
    };
    let stay = |actions: &[A]| step(Target::Phase(phase), actions);
    let go = |p: Phase, actions: &[A]| step(Target::Phase(p), actions);
    let stop_all = [A::StopWorkloads, A::ReleasePlacements, A::ReleaseQuota];
    let illegal = || IllegalTransition { phase, input };
    match input {
        Input::Op(op) => {
            if !accepts(phase, op) {
                return Err(illegal());
            }
            Ok(match (phase, op) {
                (P::Created | P::Admitted, Operation::UpdateSpec) => {
                    stay(&[A::RecordVersion, A::RunAdmission])
                }
                (P::Scheduled | P::Running | P::Degraded, Operation::UpdateSpec) => stay(&[
                    A::RecordVersion,
                    A::RunAdmission,
                    A::RunArbitration,
                    A::PlanRollout,
                ]),
                (P::Terminated | P::Failed, Operation::UpdateSpec) => stay(&[A::RecordVersion]),
                (P::Admitted, Operation::Start) => stay(&[A::RunArbitration]),
                (P::Terminated, Operation::Start) => go(P::Created, &[A::RunAdmission]),
                (P::Scheduled | P::Running | P::Degraded, Operation::Scale) => {
                    stay(&[A::ScaleWorkloads])
                }
                (P::Degraded, Operation::Restore) => stay(&[A::RestorePlacements]),
                (P::Scheduled | P::Running | P::Degraded, Operation::Stop) => {
                    go(P::Terminated, &stop_all)
                }
                (P::Scheduled | P::Running | P::Degraded, Operation::Delete) => Step {
                    from: phase,
                    via: Some(P::Terminated),
                    to: Target::Removed,
                    actions: vec![
                        A::StopWorkloads,
                        A::ReleasePlacements,
                        A::ReleaseQuota,
                        A::Cleanup,
                    ],
                },
                (P::Admitted, Operation::Delete) => {
                    step(Target::Removed, &[A::ReleaseQuota, A::Cleanup])
                }
                (_, Operation::Delete) => step(Target::Removed, &[A::Cleanup]),
                (P::Failed, Operation::Retry) => go(P::Created, &[A::RunAdmission]),
                _ => return Err(illegal()),
            })
        }
        Input::Event(ev) => {
            use SystemEvent as E;
            Ok(match (phase, ev) {
                (P::Created, E::AdmissionPassed) => go(P::Admitted, &[A::ChargeQuota]),
                (P::Created, E::AdmissionFailed) => go(P::Rejected, &[]),
                (P::Created, E::CreationFailed) => go(P::Failed, &[]),
                (P::Admitted, E::ArbitrationSucceeded) => {
                    go(P::Scheduled, &[A::CommitPlacements, A::StartWorkloads])
                }
                (P::Admitted, E::ArbitrationFailed) => go(P::Failed, &[A::ReleaseQuota]),
                (P::Scheduled, E::ExecutionSucceeded) => go(P::Running, &[]),
                (P::Scheduled, E::ExecutionFailed) => go(P::Failed, &stop_all),
                (P::Running, E::Degrade) => go(P::Degraded, &[]),
                (P::Degraded, E::Recovered) => go(P::Running, &[]),
                (P::Running | P::Degraded, E::Finished) => {
                    go(P::Terminated, &[A::ReleasePlacements, A::ReleaseQuota])
                }
                (P::Scheduled | P::Running | P::Degraded, E::Evicted) => {
                    go(P::Terminated, &stop_all)
                }
                (P::Running | P::Degraded, E::RuntimeFailed) => go(P::Failed, &stop_all),
                _ => return Err(illegal()),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Phase as P;
    use SystemEvent as E;

    fn to(p: Phase, i: Input) -> Option<Target> {
        transition(p, i).ok().map(|s| s.to)
    }

    /// Every edge of the §6.4 diagram, and nothing else, for system events.
    #[test]
    fn diagram_edges_exactly() {
        let edges = [
            (P::Created, E::AdmissionPassed, P::Admitted),
            (P::Created, E::AdmissionFailed, P::Rejected),
            (P::Created, E::CreationFailed, P::Failed),
            (P::Admitted, E::ArbitrationSucceeded, P::Scheduled),
            (P::Admitted, E::ArbitrationFailed, P::Failed),
            (P::Scheduled, E::ExecutionSucceeded, P::Running),
            (P::Scheduled, E::ExecutionFailed, P::Failed),
            (P::Running, E::Degrade, P::Degraded),
            (P::Running, E::Finished, P::Terminated),
            (P::Running, E::Evicted, P::Terminated),
            (P::Running, E::RuntimeFailed, P::Failed),
            (P::Degraded, E::Recovered, P::Running),
            (P::Degraded, E::Finished, P::Terminated),
            (P::Degraded, E::Evicted, P::Terminated),
            (P::Degraded, E::RuntimeFailed, P::Failed),
            (P::Scheduled, E::Evicted, P::Terminated),
        ];
        let all_events = [
            E::AdmissionPassed,
            E::AdmissionFailed,
            E::CreationFailed,
            E::ArbitrationSucceeded,
            E::ArbitrationFailed,
            E::ExecutionSucceeded,
            E::ExecutionFailed,
            E::Degrade,
            E::Recovered,
            E::Finished,
            E::Evicted,
            E::RuntimeFailed,
        ];
        for p in Phase::ALL {
            for e in all_events {
                let want = edges
                    .iter()
                    .find(|(f, ev, _)| *f == p && *ev == e)
                    .map(|(_, _, t)| Target::Phase(*t));
                assert_eq!(to(p, Input::Event(e)), want, "{p} + {e}");
            }
        }
    }

    /// The §6.3 table: each phase accepts exactly its listed operations.
    #[test]
    fn table_operations_exactly() {
        use Operation::*;
        let all = [UpdateSpec, Delete, Start, Stop, Scale, Restore, Retry];
        for p in Phase::ALL {
            for op in all {
                let r = transition(p, Input::Op(op));
                assert_eq!(r.is_ok(), allowed_operations(p).contains(&op), "{p} {op}");
                if let Err(e) = r {
                    assert!(e.to_string().contains("is not allowed in phase"), "{e}");
                }
            }
        }
        assert_eq!(
            to(P::Running, Input::Op(Stop)),
            Some(Target::Phase(P::Terminated))
        );
        assert_eq!(
            to(P::Failed, Input::Op(Retry)),
            Some(Target::Phase(P::Created))
        );
        let del = transition(P::Running, Input::Op(Delete)).unwrap();
        assert_eq!((del.via, del.to), (Some(P::Terminated), Target::Removed));
        assert_eq!(to(P::Rejected, Input::Op(Delete)), Some(Target::Removed));
    }

    #[test]
    fn refusal_lists_what_is_accepted() {
        let e = transition(P::Terminated, Input::Op(Operation::Stop)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "operation Stop is not allowed in phase Terminated; Terminated accepts: UpdateSpec, Delete, Start"
        );
    }

    /// A stopped application starts again through admission; a Terminated or
    /// Failed one records a new spec without running it.
    #[test]
    fn stopped_and_failed_applications_come_back() {
        let start = transition(P::Terminated, Input::Op(Operation::Start)).unwrap();
        assert_eq!(start.to, Target::Phase(P::Created));
        assert_eq!(start.actions, vec![LifecycleAction::RunAdmission]);
        for p in [P::Terminated, P::Failed] {
            let up = transition(p, Input::Op(Operation::UpdateSpec)).unwrap();
            assert_eq!(up.to, Target::Phase(p), "{p}");
            assert_eq!(up.actions, vec![LifecycleAction::RecordVersion], "{p}");
        }
        for p in [P::Scheduled, P::Running, P::Degraded] {
            assert_eq!(
                to(p, Input::Op(Operation::Scale)),
                Some(Target::Phase(p)),
                "{p}"
            );
        }
    }
}
