//! Per-category `onFailure` (issue 19, seed 000 §4.7): a workload reacts to
//! each failure category — infrastructure, runtime, outOfMemory, application,
//! controlPlane, policyViolation — by restarting (the default), holding for
//! an operator, or failing the application; `restore` releases what is held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::*;

fn app(lifecycle: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: app, tenant: acme}}\nspec:\n  \
         lifecyclePolicy: {{restart: Always{lifecycle}}}\n  workloads:\n    \
         - {{name: w, runtime: {{type: process}}, resources: {{cpu: {{request: 500m}}, memory: {{request: 64Mi}}}}}}\n"
    )
}

/// The app with `lifecycle` running on one of two nodes: its placement.
fn running(lifecycle: &str) -> (Coordinator, AppKey, (InstanceId, u64)) {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{}",
            node_yaml("n1", "4", "8Gi", "", ""),
            node_yaml("n2", "4", "8Gi", "", ""),
            tenant_yaml("acme", "")
        ),
        0,
    );
    let out = apply(&mut c, &app(lifecycle), 1);
    let p = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &p, ObservedState::Ready, 2);
    let k = key("acme", "app");
    assert_eq!(c.phase(&k), Some(Phase::Running));
    (c, k, p)
}

fn oom() -> ObservedState {
    ObservedState::Failed {
        failure: Failure::Runtime(RuntimeFailure::OutOfMemory { limit: None }),
    }
}

fn refused() -> ObservedState {
    ObservedState::Failed {
        failure: Failure::PolicyViolation {
            policy: "node-admission".into(),
            detail: "memory floor 2Gi exceeds the 1Gi free".into(),
        },
    }
}

/// A policy violation fails the application at once (a restart would be
/// refused the same way); other failures still restart.
#[test]
fn a_policy_violation_can_fail_the_app_at_once() {
    let (mut c, k, p) = running(", onFailure: {policyViolation: FailAndStopDependents}");
    let out = report_placement(&mut c, &p, ObservedState::Exited { code: 1 }, 3);
    assert_eq!(started(&out).len(), 1, "a crash restarts: {out:?}");
    let p = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &p, ObservedState::Ready, 2000);
    let out = report_placement(&mut c, &p, refused(), 2001);
    assert!(started(&out).is_empty(), "{out:?}");
    assert_eq!(c.phase(&k), Some(Phase::Failed));
    let last = out.events.last().unwrap();
    assert!(
        last.reason
            .contains("(onFailure.policyViolation: FailAndStopDependents)"),
        "{}",
        last.reason
    );
}

/// An OOM kill held for an operator: no restart, Degraded saying so; a
/// runtime crash still restarts; `restore` starts it again.
#[test]
fn an_oom_kill_can_wait_for_an_operator() {
    let (mut c, k, p) = running(", onFailure: {outOfMemory: WaitForOperator}");
    let out = report_placement(&mut c, &p, oom(), 3);
    assert!(started(&out).is_empty(), "held: {out:?}");
    assert_eq!(c.phase(&k), Some(Phase::Degraded));
    let reason = &c.list_apps(t(3))[0].reason;
    assert!(
        reason.contains("onFailure.outOfMemory: WaitForOperator"),
        "{reason}"
    );
    // Time does not release it.
    let out = c.apply(Command::Tick, t(600_000)).unwrap();
    assert!(started(&out).is_empty(), "{out:?}");
    let out = operate(&mut c, &k, OperationRequest::Restore, 600_001).unwrap();
    let p = started_placements(&out).pop().expect("restore starts it");
    report_placement(&mut c, &p, ObservedState::Ready, 600_002);
    assert_eq!(c.phase(&k), Some(Phase::Running));
}

/// `runtime` set and `outOfMemory` not: an OOM follows `runtime`.
#[test]
fn out_of_memory_defaults_to_the_runtime_rule() {
    let (mut c, k, p) = running(", onFailure: {runtime: FailAndStopDependents}");
    report_placement(&mut c, &p, oom(), 3);
    assert_eq!(c.phase(&k), Some(Phase::Failed));
}

/// Lost with its node: held (not re-placed, not even when capacity comes)
/// until `restore`, or the application fails.
#[test]
fn a_lost_instance_can_be_held_or_fail_the_app() {
    let (mut c, k, p) =
        running(", onFailure: {infrastructure: WaitForOperator}, disconnect: {lostAfter: 5s}");
    let node = c.describe(&k, t(2)).unwrap().instances[0]
        .node
        .clone()
        .unwrap();
    c.apply(
        Command::SetNodeCondition {
            node: node.clone(),
            condition: NodeCondition::Down,
        },
        t(10),
    )
    .unwrap();
    let out = c.apply(Command::Tick, t(5_011)).unwrap();
    assert!(started(&out).is_empty(), "held, not re-placed: {out:?}");
    assert_eq!(c.phase(&k), Some(Phase::Degraded));
    let d = c.describe(&k, t(5_011)).unwrap();
    assert!(d.instances[0].node.is_none(), "its allocation is released");
    // New capacity does not re-place it either.
    apply(&mut c, &node_yaml("n3", "4", "8Gi", "", ""), 6_000);
    let out = c.apply(Command::Tick, t(6_001)).unwrap();
    assert!(started(&out).is_empty(), "{out:?}");
    let out = operate(&mut c, &k, OperationRequest::Restore, 7_000).unwrap();
    let moved = started_placements(&out)
        .pop()
        .unwrap_or_else(|| panic!("restore re-places it: {out:?}"));
    assert_ne!(moved.1, p.1);
    assert_ne!(out.actions.last().unwrap().node, node);

    let (mut c, k, _) = running(
        ", onFailure: {infrastructure: FailAndStopDependents}, disconnect: {lostAfter: 5s}",
    );
    let node = c.describe(&k, t(2)).unwrap().instances[0]
        .node
        .clone()
        .unwrap();
    c.apply(
        Command::SetNodeCondition {
            node,
            condition: NodeCondition::Down,
        },
        t(10),
    )
    .unwrap();
    c.apply(Command::Tick, t(5_011)).unwrap();
    assert_eq!(c.phase(&k), Some(Phase::Failed));
}

/// Bad input names the field.
#[test]
fn unknown_categories_and_actions_are_refused_with_their_path() {
    let e =
        daros_coordinator::spec::parse(&app(", onFailure: {oom: WaitForOperator}"), Format::Yaml)
            .unwrap_err();
    let s = e.to_string();
    assert!(s.contains("spec.lifecyclePolicy.onFailure.oom"), "{s}");
    assert!(s.contains("unknown field `oom`"), "{s}");
    let e = daros_coordinator::spec::parse(&app(", onFailure: {runtime: Ignore}"), Format::Yaml)
        .unwrap_err();
    let s = e.to_string();
    assert!(s.contains("spec.lifecyclePolicy.onFailure.runtime"), "{s}");
    assert!(s.contains("Ignore"), "{s}");
}
