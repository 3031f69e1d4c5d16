//! Canary and blue-green rollouts (issue 17, seed 000 §10): a canary runs
//! beside the old replicas, which keep their version until its health gate
//! passes (then the rollout goes on by itself) or an operator promotes it; a
//! canary that fails rolls back at once and the old instances, which never
//! stopped, are what runs again. A blue-green rollout starts the whole new
//! set beside the old one and stops the old set only once every new instance
//! is ready. Each step is a rollout decision saying why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::decision::DecisionKind;
use daros_coordinator::version::VersionOrigin;
use daros_coordinator::*;

fn app(rollout: &str, replicas: u32, env: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: app, tenant: acme}}\nspec:\n  \
         lifecyclePolicy: {{restart: Always, backoff: {{initial: 1s, max: 1s}}, rollout: {{{rollout}}}}}\n  \
         workloads:\n    - {{name: web, replicas: {replicas}, runtime: {{type: process}}, \
         resources: {{cpu: {{request: 100m}}, memory: {{request: 64Mi}}}}, \
         runtimeSpec: {{command: /bin/true, env: {{V: \"{env}\"}}}}}}\n"
    )
}

const CANARY: &str =
    "strategy: canary, canary: {replicas: 1, healthyFor: 5s}, progressDeadline: 60s";

/// Version 1 of `app(rollout, replicas)` running: its placements by replica.
fn running_v1(rollout: &str, replicas: u32) -> (Coordinator, AppKey, Vec<(InstanceId, u64)>) {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            node_yaml("n1", "4", "8Gi", "", ""),
            tenant_yaml("acme", "")
        ),
        0,
    );
    let out = apply(&mut c, &app(rollout, replicas, "1"), 1);
    let mut v1 = started_placements(&out);
    v1.sort_by_key(|(i, _)| i.replica);
    assert_eq!(v1.len(), replicas as usize);
    for p in &v1 {
        report_placement(&mut c, p, ObservedState::Running, 2);
    }
    let k = key("acme", "app");
    assert_eq!(c.phase(&k), Some(Phase::Running));
    (c, k, v1)
}

fn desired_versions(c: &Coordinator) -> Vec<(u32, u32)> {
    let mut v: Vec<(u32, u32)> = c.desired_work()["n1"]
        .instances
        .iter()
        .map(|d| (d.instance.replica, d.instance.version))
        .collect();
    v.sort();
    v
}

#[test]
fn a_canary_runs_beside_the_old_replicas_until_its_gate_passes() {
    let (mut c, k, v1) = running_v1(CANARY, 3);
    let out = apply(&mut c, &app(CANARY, 3, "2"), 1_000);
    assert!(stopped(&out).is_empty(), "nothing stops: {out:?}");
    let canary = started_placements(&out);
    assert_eq!(canary.len(), 1, "one canary: {out:?}");
    let canary = canary[0].clone();
    assert_eq!((canary.0.replica, canary.0.version), (0, 2));
    assert_eq!(
        desired_versions(&c),
        vec![(0, 1), (0, 2), (1, 1), (2, 1)],
        "every old instance runs on beside the canary"
    );
    let d = c.describe(&k, t(1_000)).unwrap();
    assert!(
        d.blocked.iter().any(|b| b.reason
            == "canary: web/1 keeps version 1 until the canary passes its health gate or an operator promotes it"),
        "{:?}",
        d.blocked
    );

    // Ready at 1.1 s: the gate passes 5 s later, not before.
    report_placement(&mut c, &canary, ObservedState::Running, 1_100);
    let out = c.apply(Command::Tick, t(6_000)).unwrap();
    assert!(
        started(&out).is_empty() && stopped(&out).is_empty(),
        "{out:?}"
    );
    assert!(reasons_of(&c, DecisionKind::Rollout).is_empty());
    let out = c.apply(Command::Tick, t(6_100)).unwrap();
    assert_eq!(
        reasons_of(&c, DecisionKind::Rollout),
        vec![
            "canary of web (1 instance(s) of version 2) passed its health gate: ready for 5s \
             without a restart; promoting"
                .to_string()
        ]
    );
    // Promoted: the canary's old copy stops, and the rest roll (default budget:
    // maxUnavailable 1, stop first).
    let mut s = stopped_placements(&out);
    s.sort_by_key(|(i, _)| i.replica);
    assert_eq!(s, vec![v1[0].clone(), v1[1].clone()], "{out:?}");
    let d = c.describe(&k, t(6_100)).unwrap();
    assert!(d.rollout.unwrap().promoted.contains("web"));

    // Drive the rest to completion.
    report_placement(&mut c, &v1[0], ObservedState::Stopped, 6_200);
    let out = report_placement(&mut c, &v1[1], ObservedState::Stopped, 6_200);
    let r1 = started_placements(&out).pop().expect("web/1 at version 2");
    let out = report_placement(&mut c, &r1, ObservedState::Running, 6_300);
    assert_eq!(stopped_placements(&out), vec![v1[2].clone()]);
    let out = report_placement(&mut c, &v1[2], ObservedState::Stopped, 6_400);
    let r2 = started_placements(&out).pop().expect("web/2 at version 2");
    report_placement(&mut c, &r2, ObservedState::Running, 6_500);
    assert!(c.describe(&k, t(6_500)).unwrap().rollout.is_none());
    assert_eq!(desired_versions(&c), vec![(0, 2), (1, 2), (2, 2)]);
    assert_eq!(
        reasons_of(&c, DecisionKind::Rollout).last().unwrap(),
        "rollout to version 2 complete after 5500ms"
    );
}

/// A canary that crashes fails the gate at once: the rollout rolls back by
/// itself, the canary stops, and the old instances — which never stopped —
/// are the application again: nothing of theirs is started or stopped.
#[test]
fn a_failing_canary_rolls_back_at_once_and_the_old_instances_stay() {
    let (mut c, k, v1) = running_v1(CANARY, 2);
    let out = apply(&mut c, &app(CANARY, 2, "2"), 1_000);
    let canary = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &canary, ObservedState::Running, 1_100);
    let out = report_placement(&mut c, &canary, ObservedState::Exited { code: 3 }, 1_500);
    let (v, spec) = c.spec(&k).unwrap();
    assert_eq!(v, 3, "rolled back as version 3");
    assert_eq!(*spec, *c.versions(&k).unwrap()[0].spec);
    assert_eq!(
        c.versions(&k).unwrap()[2].origin,
        VersionOrigin::AutoRollback { to: 1 }
    );
    assert_eq!(
        reasons_of(&c, DecisionKind::Rollout),
        vec![
            "rollout to version 2 failed: canary web/0 of version 2 failed its health gate: \
             exited with code 3; rolling back to the spec of version 1 (autoRollback)"
                .to_string()
        ]
    );
    assert!(started(&out).is_empty(), "no instance starts: {out:?}");
    assert!(
        stopped(&out).iter().all(|s| s.version == 2),
        "only the canary stops: {out:?}"
    );
    assert_eq!(desired_versions(&c), vec![(0, 1), (1, 1)]);
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let d = c.describe(&k, t(1_500)).unwrap();
    assert!(d.rollout.is_none(), "{:?}", d.rollout);
    // Reports about the old placements still count: a crash of one restarts it.
    let out = report_placement(&mut c, &v1[1], ObservedState::Exited { code: 1 }, 2_000);
    assert_eq!(started(&out), vec![v1[1].0.clone()], "{out:?}");
}

/// `autoPromote: false`: the gate passes, the rollout waits for an operator
/// (past its progress deadline without failing), `promote` lets it go on;
/// `promote` with nothing waiting is refused, naming why.
#[test]
fn an_operator_promotes_a_held_canary() {
    let lc = "strategy: canary, canary: {healthyFor: 1s, autoPromote: false}, \
              progressDeadline: 3s";
    let (mut c, k, v1) = running_v1(lc, 2);
    let out = apply(&mut c, &app(lc, 2, "2"), 1_000);
    let canary = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &canary, ObservedState::Running, 1_100);
    let out = c.apply(Command::Tick, t(2_200)).unwrap();
    assert!(stopped(&out).is_empty());
    assert!(
        reasons_of(&c, DecisionKind::Rollout)[0]
            .ends_with("waiting for `darosctl operate promote` (autoPromote: false)"),
        "{:?}",
        reasons_of(&c, DecisionKind::Rollout)
    );
    // Past the progress deadline: still waiting, not failed.
    c.apply(Command::Tick, t(10_000)).unwrap();
    let d = c.describe(&k, t(10_000)).unwrap();
    assert_eq!(d.rollout.as_ref().and_then(|r| r.failed.clone()), None);
    assert_eq!(c.spec(&k).unwrap().0, 2);

    let out = operate(&mut c, &k, OperationRequest::Promote, 10_100).unwrap();
    assert!(
        reasons_of(&c, DecisionKind::Rollout)
            .last()
            .unwrap()
            .starts_with("canary of web promoted by an operator"),
        "{:?}",
        reasons_of(&c, DecisionKind::Rollout)
    );
    let mut s = stopped_placements(&out);
    s.sort_by_key(|(i, _)| i.replica);
    assert_eq!(s, vec![v1[0].clone(), v1[1].clone()], "{out:?}");
    let e = operate(&mut c, &k, OperationRequest::Promote, 10_200).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("application acme/app has no canary waiting for promotion"),
        "{e}"
    );
}

/// Blue-green: both new instances start beside the old ones; the first ready
/// stops nothing; the second ready stops both old ones at once.
#[test]
fn blue_green_switches_only_when_the_whole_new_set_is_ready() {
    let lc = "strategy: blueGreen, progressDeadline: 60s";
    let (mut c, k, v1) = running_v1(lc, 2);
    let out = apply(&mut c, &app(lc, 2, "2"), 1_000);
    assert!(stopped(&out).is_empty(), "{out:?}");
    let mut green = started_placements(&out);
    green.sort_by_key(|(i, _)| i.replica);
    assert_eq!(green.len(), 2, "the whole new set starts: {out:?}");
    assert_eq!(desired_versions(&c), vec![(0, 1), (0, 2), (1, 1), (1, 2)]);
    let out = report_placement(&mut c, &green[1], ObservedState::Running, 1_100);
    assert!(stopped(&out).is_empty(), "one ready is not all: {out:?}");
    let out = report_placement(&mut c, &green[0], ObservedState::Running, 1_200);
    let mut s = stopped_placements(&out);
    s.sort_by_key(|(i, _)| i.replica);
    assert_eq!(s, v1, "the old set stops together");
    assert_eq!(
        reasons_of(&c, DecisionKind::Rollout),
        vec![
            "blue-green switch of web: all 2 instance(s) of version 2 ready; stopping version 1"
                .to_string()
        ]
    );
    for p in &v1 {
        report_placement(&mut c, p, ObservedState::Stopped, 1_300);
    }
    assert!(c.describe(&k, t(1_300)).unwrap().rollout.is_none());
    assert_eq!(desired_versions(&c), vec![(0, 2), (1, 2)]);
}

/// A green set that never gets ready fails at its deadline; the rollback
/// keeps the blue set running and stops the green one.
#[test]
fn a_green_set_that_is_not_ready_in_time_rolls_back_to_the_running_blue_set() {
    let lc = "strategy: blueGreen, progressDeadline: 5s";
    let (mut c, k, _v1) = running_v1(lc, 2);
    let out = apply(&mut c, &app(lc, 2, "2"), 1_000);
    let green = started_placements(&out);
    report_placement(&mut c, &green[0], ObservedState::Running, 1_100);
    let out = c.apply(Command::Tick, t(6_000)).unwrap();
    assert_eq!(c.spec(&k).unwrap().0, 3);
    assert!(started(&out).is_empty(), "{out:?}");
    assert_eq!(stopped(&out).len(), 2, "the green set stops: {out:?}");
    assert_eq!(desired_versions(&c), vec![(0, 1), (1, 1)]);
    assert!(
        reasons_of(&c, DecisionKind::Rollout)[0]
            .contains("within its progress deadline 5s; rolling back"),
        "{:?}",
        reasons_of(&c, DecisionKind::Rollout)
    );
}

#[test]
fn bad_strategy_fields_are_refused_with_their_paths() {
    for (rollout, path, words) in [
        (
            "strategy: canary, canary: {replicas: 0}",
            "spec.lifecyclePolicy.rollout.canary.replicas",
            "at least 1",
        ),
        (
            "strategy: blueGreen, canary: {replicas: 1}",
            "spec.lifecyclePolicy.rollout.canary",
            "only with strategy: canary",
        ),
        (
            "strategy: purple",
            "spec.lifecyclePolicy.rollout.strategy",
            "unknown variant `purple`",
        ),
    ] {
        let err = spec::parse(&app(rollout, 1, "1"), Format::Yaml)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(path) && err.contains(words),
            "{rollout}: {err}"
        );
    }
}
