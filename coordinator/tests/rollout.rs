//! Rollouts (issue 20): a surge starts the new instance before it stops the
//! old one; a new version that cannot run fails its rollout, not the
//! application, and rolls back by itself to the version it started from
//! while the old replica keeps running (and is then the rolled-back version's
//! instance as it is); without autoRollback it holds until an operator
//! aborts; the default still stops first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::decision::DecisionKind;
use daros_coordinator::lifecycle::Target;
use daros_coordinator::version::VersionOrigin;
use daros_coordinator::*;

fn worker(lifecycle: &str, env: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: app, tenant: acme}}\nspec:\n  \
         lifecyclePolicy: {{{lifecycle}}}\n  \
         workloads:\n    - {{name: web, runtime: {{type: process}}, \
         resources: {{cpu: {{request: 500m}}, memory: {{request: 64Mi}}}}, \
         runtimeSpec: {{command: /bin/true, env: {{V: \"{env}\"}}}}}}\n"
    )
}

const SURGE: &str = "restart: Always, backoff: {initial: 1s, max: 1s}, \
                     rollout: {maxSurge: 1, maxUnavailable: 0, progressDeadline: 10s}";

fn running_v1(lifecycle: &str) -> (Coordinator, AppKey, (InstanceId, u64)) {
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
    let out = apply(&mut c, &worker(lifecycle, "1"), 1);
    let v1 = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &v1, ObservedState::Running, 2);
    let k = key("acme", "app");
    assert_eq!(c.phase(&k), Some(Phase::Running));
    (c, k, v1)
}

#[test]
fn a_surge_starts_the_new_instance_before_it_stops_the_old_one() {
    let (mut c, k, v1) = running_v1(SURGE);
    let out = apply(&mut c, &worker(SURGE, "2"), 10);
    assert!(stopped(&out).is_empty(), "nothing stops first: {out:?}");
    let v2 = started_placements(&out).pop().expect("v2 started");
    assert_eq!(v2.0.version, 2);
    let desired = &c.desired_work()["n1"].instances;
    let versions: Vec<u32> = desired.iter().map(|d| d.instance.version).collect();
    assert_eq!(versions, vec![1, 2], "both run during the surge");
    assert!(c.describe(&k, t(10)).unwrap().rollout.is_some());

    // v2 ready: now v1 stops.
    let out = report_placement(&mut c, &v2, ObservedState::Running, 11);
    assert_eq!(stopped_placements(&out), vec![v1.clone()]);
    assert_eq!(c.desired_work()["n1"].instances.len(), 1);
    // v1 stopped: the rollout is complete, recorded with its duration.
    report_placement(&mut c, &v1, ObservedState::Stopped, 12);
    let d = c.describe(&k, t(12)).unwrap();
    assert!(d.rollout.is_none(), "{d:?}");
    assert_eq!(d.instances[0].replacing, None);
    assert_eq!(c.phase(&k), Some(Phase::Running));
    assert_eq!(
        reasons_of(&c, DecisionKind::Rollout),
        vec!["rollout to version 2 complete after 2ms".to_string()]
    );
    // Never Degraded on the way.
    assert!(
        c.events_of(&k)
            .iter()
            .all(|e| e.to != Target::Phase(Phase::Degraded)),
        "{:?}",
        c.events_of(&k)
    );
}

/// The new version crashes forever (restart Always, no retry limit): at its
/// progress deadline the rollout fails and rolls back by itself; the old
/// replica ran throughout and stops only when the rollback's instance is ready.
#[test]
fn a_crashing_version_rolls_back_by_itself_at_its_deadline() {
    let (mut c, k, v1) = running_v1(SURGE);
    let out = apply(&mut c, &worker(SURGE, "2"), 1_000);
    let v2 = started_placements(&out).pop().unwrap();
    let mut now = 1_001;
    let mut pending = v2.clone();
    // Crash, restart after its 1 s backoff, crash... until the deadline.
    loop {
        let out = report_placement(&mut c, &pending, ObservedState::Exited { code: 1 }, now);
        assert!(!stopped(&out).contains(&v1.0), "v1 keeps running");
        if now + 1_000 >= 11_000 {
            break;
        }
        now += 1_000;
        let out = c.apply(Command::Tick, t(now)).unwrap();
        if let Some(s) = started_placements(&out).pop() {
            pending = s;
        }
        assert_eq!(c.spec(&k).unwrap().0, 2, "no rollback before the deadline");
    }
    let out = c.apply(Command::Tick, t(11_001)).unwrap();
    // Version 3 has version 1's spec: v1, which ran throughout, is version 3's
    // instance as it is (no copy of it starts); v2 is stopped.
    let (v, spec) = c.spec(&k).unwrap();
    assert_eq!(v, 3);
    assert_eq!(
        *spec,
        *c.versions(&k).unwrap()[0].spec,
        "version 3 is version 1's spec"
    );
    assert_eq!(
        c.versions(&k).unwrap()[2].origin,
        VersionOrigin::AutoRollback { to: 1 }
    );
    let reasons = reasons_of(&c, DecisionKind::Rollout);
    assert!(
        reasons[0].starts_with(
            "rollout to version 2 failed: workload web did not complete its rollout to version 2 \
             within its progress deadline 10s; rolling back to the spec of version 1"
        ),
        "{reasons:?}"
    );
    assert!(
        stopped(&out).iter().any(|s| s.version == 2),
        "v2 stopped: {out:?}"
    );
    assert!(!stopped(&out).contains(&v1.0), "v1 still serves");
    assert!(started(&out).is_empty(), "v1 is kept, not copied: {out:?}");
    let desired: Vec<u32> = c.desired_work()["n1"]
        .instances
        .iter()
        .map(|d| d.instance.version)
        .collect();
    assert_eq!(desired, vec![1]);
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let d = c.describe(&k, t(11_001)).unwrap();
    assert!(d.rollout.is_none());
    assert_eq!(d.instances[0].replacing, None);
    // It is still watched: its crash restarts it (at version 1, its spec).
    let out = report_placement(&mut c, &v1, ObservedState::Exited { code: 1 }, 11_100);
    assert_eq!(started(&out), vec![v1.0.clone()], "{out:?}");
}

/// With a retry limit and FailAndStopDependents, a new version that exhausts
/// its restarts used to fail the application and tear the old replica down;
/// now it fails the rollout, which rolls back at once.
#[test]
fn exhausted_restarts_of_a_new_version_roll_back_instead_of_failing_the_app() {
    let lc = "restart: Always, maxRetries: 1, backoff: {initial: 1s, max: 1s}, \
              onExhausted: FailAndStopDependents, rollout: {maxSurge: 1, maxUnavailable: 0}";
    let (mut c, k, v1) = running_v1(lc);
    let out = apply(&mut c, &worker(lc, "2"), 100);
    let v2 = started_placements(&out).pop().unwrap();
    let out = report_placement(&mut c, &v2, ObservedState::Exited { code: 1 }, 101);
    assert_eq!(
        started(&out),
        vec![v2.0.clone()],
        "one restart, after backoff"
    );
    c.apply(Command::Tick, t(1_101)).unwrap();
    let out = report_placement(&mut c, &v2, ObservedState::Exited { code: 1 }, 1_102);
    assert!(!stopped(&out).contains(&v1.0), "{out:?}");
    assert_ne!(c.phase(&k), Some(Phase::Failed));
    assert_eq!(c.spec(&k).unwrap().0, 3, "rolled back as version 3");
    assert!(
        reasons_of(&c, DecisionKind::Rollout)[0]
            .contains("web/0 exited with code 1 after 1 restarts"),
        "{:?}",
        reasons_of(&c, DecisionKind::Rollout)
    );
}

/// autoRollback off: the failed rollout holds (v1 keeps running) and says how
/// to get out; `abort` rolls back; `abort` with nothing under way is refused.
#[test]
fn without_auto_rollback_a_failed_rollout_holds_until_aborted() {
    let lc = "restart: Always, maxRetries: 0, rollout: {maxSurge: 1, maxUnavailable: 0, autoRollback: false}";
    let (mut c, k, v1) = running_v1(lc);
    let out = apply(&mut c, &worker(lc, "2"), 100);
    let v2 = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &v2, ObservedState::Exited { code: 1 }, 101);
    assert_eq!(c.spec(&k).unwrap().0, 2, "no rollback");
    assert!(
        c.desired_work()["n1"]
            .instances
            .iter()
            .any(|d| d.instance == v1.0)
    );
    let d = c.describe(&k, t(102)).unwrap();
    let r = d.rollout.expect("still under way");
    assert!(r.failed.is_some());
    assert!(
        reasons_of(&c, DecisionKind::Rollout)[0].contains("holding (autoRollback is off)"),
        "{:?}",
        reasons_of(&c, DecisionKind::Rollout)
    );
    let out = operate(&mut c, &k, OperationRequest::Abort, 200).unwrap();
    assert_eq!(c.spec(&k).unwrap().0, 3);
    assert_eq!(
        c.versions(&k).unwrap()[2].origin,
        VersionOrigin::Rollback { to: 1 }
    );
    assert!(started(&out).is_empty(), "v1 goes on as version 3: {out:?}");
    assert!(!stopped(&out).contains(&v1.0), "{out:?}");
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let e = operate(&mut c, &k, OperationRequest::Abort, 300).unwrap_err();
    assert_eq!(
        e.to_string(),
        "application acme/app has no rollout in progress: nothing to abort \
         (`darosctl rollback --to N` applies an earlier version)"
    );
}

/// The default strategy stops the old instance first (a fixed host port could
/// not be bound twice).
#[test]
fn by_default_the_old_instance_stops_first() {
    let lc = "restart: Always";
    let (mut c, _k, v1) = running_v1(lc);
    let out = apply(&mut c, &worker(lc, "2"), 100);
    assert_eq!(stopped_placements(&out), vec![v1.clone()]);
    assert!(started(&out).is_empty(), "{out:?}");
    let out = report_placement(&mut c, &v1, ObservedState::Stopped, 101);
    assert_eq!(started(&out).pop().unwrap().version, 2);
}
