//! Every lifecycle operation ends where the user expects (issue 22), and a
//! report changes only the placement it names (issue 12): reports about an
//! earlier placement of a replica, stop then start, re-apply and rollback of
//! stopped or failed applications, scale to zero, the `get apps` reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::*;

fn one_worker(extra_lifecycle: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: app, tenant: acme}}\nspec:\n  \
         lifecyclePolicy: {{restart: Always, maxRetries: 3, backoff: {{initial: 1s, max: 1s}}{extra_lifecycle}}}\n  \
         workloads:\n    - {{name: worker, runtime: {{type: process}}, resources: {{cpu: {{request: 500m}}, memory: {{request: 64Mi}}}}}}\n"
    )
}

fn cluster2() -> String {
    format!(
        "{}{}{}",
        node_yaml("n1", "4", "8Gi", "", ""),
        node_yaml("n2", "4", "8Gi", "", ""),
        tenant_yaml("acme", "")
    )
}

/// The replica moved to another node: the old node's late "stopped" names the
/// old placement and leaves the new one alone (it used to be applied to the new
/// placement, which then never started).
#[test]
fn a_report_about_an_earlier_placement_never_changes_the_new_one() {
    let mut c = Coordinator::new();
    apply(&mut c, &cluster2(), 0);
    let out = apply(&mut c, &one_worker(""), 1);
    let k = key("acme", "app");
    let first = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &first, ObservedState::Running, 2);
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let from = c.describe(&k, t(2)).unwrap().instances[0]
        .node
        .clone()
        .unwrap();

    c.apply(
        Command::SetNodeCondition {
            node: from.clone(),
            condition: NodeCondition::Down,
        },
        t(3),
    )
    .unwrap();
    // Lost after disconnect.lostAfter (30 s by default): placed elsewhere.
    let out = c.apply(Command::Tick, t(30_003)).unwrap();
    let second = started_placements(&out)
        .pop()
        .expect("re-placed and started");
    assert_eq!(second.0, first.0, "same replica, same version");
    assert_ne!(second.1, first.1, "a new placement");
    let d = c.describe(&k, t(30_003)).unwrap();
    let to = d.instances[0].node.clone().unwrap();
    assert_ne!(to, from);

    // The old node comes back and reports its copy stopped.
    let out = report_placement(&mut c, &first, ObservedState::Stopped, 30_004);
    assert!(
        out.notes.iter().any(|n| n.contains("ignored report")),
        "{:?}",
        out.notes
    );
    let d = c.describe(&k, t(30_004)).unwrap();
    assert_eq!(d.instances[0].state, ObservedState::Pending, "{d:?}");
    assert_eq!(d.instances[0].placement, second.1);
    let desired = c.desired_work();
    assert_eq!(desired[&to].instances.len(), 1, "still wanted on {to}");
    assert_eq!(desired[&to].instances[0].placement, second.1);
    assert!(desired[&from].instances.is_empty());

    // The new placement's reports count.
    report_placement(&mut c, &second, ObservedState::Running, 30_005);
    assert_eq!(
        c.describe(&k, t(30_005)).unwrap().instances[0].state,
        ObservedState::Running
    );
}

/// A rolling update: the old version's stop report is applied to the old
/// placement and the new version starts.
#[test]
fn an_update_starts_the_new_version_once_the_old_one_stopped() {
    let mut c = Coordinator::new();
    apply(&mut c, &cluster2(), 0);
    let out = apply(&mut c, &one_worker(""), 1);
    let k = key("acme", "app");
    let v1 = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &v1, ObservedState::Running, 2);
    let changed = one_worker("").replace("memory: {request: 64Mi}", "memory: {request: 65Mi}");
    let out = apply(&mut c, &changed, 3);
    assert_eq!(stopped_placements(&out), vec![v1.clone()]);
    assert!(started_placements(&out).is_empty(), "stop first");
    let out = report_placement(&mut c, &v1, ObservedState::Stopped, 4);
    let v2 = started_placements(&out).pop().expect("v2 starts");
    assert_eq!(v2.0.version, 2);
    report_placement(&mut c, &v2, ObservedState::Running, 5);
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let d = c.describe(&k, t(5)).unwrap();
    assert_eq!(d.instances[0].replacing, None, "rollout complete");
}

/// Stop then Start (and re-apply) bring a Terminated application back with
/// its versions and events.
#[test]
fn stop_then_start_or_reapply_runs_it_again_with_its_history() {
    let mut c = Coordinator::new();
    apply(&mut c, &cluster2(), 0);
    let out = apply(&mut c, &one_worker(""), 1);
    let k = key("acme", "app");
    let p = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &p, ObservedState::Running, 2);
    let out = operate(&mut c, &k, OperationRequest::Stop, 3).unwrap();
    assert_eq!(stopped_placements(&out), vec![p]);
    assert_eq!(c.phase(&k), Some(Phase::Terminated));
    let events_before = c.describe(&k, t(3)).unwrap().events.len();

    let out = operate(&mut c, &k, OperationRequest::Start, 4).unwrap();
    assert_eq!(
        transitions(&out),
        [
            "Terminated->Created",
            "Created->Admitted",
            "Admitted->Scheduled"
        ]
    );
    let again = started_placements(&out).pop().expect("started again");
    report_placement(&mut c, &again, ObservedState::Running, 5);
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let d = c.describe(&k, t(5)).unwrap();
    assert!(d.events.len() > events_before, "history kept: {d:?}");
    assert_eq!(d.versions.len(), 1);

    // Stopped again, a re-apply of the same spec starts it too.
    operate(&mut c, &k, OperationRequest::Stop, 6).unwrap();
    let out = apply(&mut c, &one_worker(""), 7);
    assert_eq!(
        transitions(&out),
        [
            "Terminated->Created",
            "Created->Admitted",
            "Admitted->Scheduled"
        ]
    );
    // And a changed spec applied with --no-start is recorded, not run.
    operate(&mut c, &k, OperationRequest::Stop, 8).unwrap();
    let changed = one_worker("").replace("request: 500m", "request: 400m");
    let out = c
        .apply(
            Command::Apply {
                documents: docs(&changed),
                start: false,
            },
            t(9),
        )
        .unwrap();
    assert!(started_placements(&out).is_empty());
    let d = c.describe(&k, t(9)).unwrap();
    assert_eq!(
        (d.phase, d.version, d.versions.len()),
        (Phase::Terminated, 2, 2)
    );
    assert!(
        d.events
            .last()
            .unwrap()
            .reason
            .contains("recorded while Terminated, not running"),
        "{:?}",
        d.events.last()
    );
}

/// A failed application: rollback runs it again with the older spec.
#[test]
fn rollback_is_the_way_out_of_failed() {
    let mut c = Coordinator::new();
    apply(&mut c, &cluster2(), 0);
    let out = apply(
        &mut c,
        &one_worker(", onExhausted: FailAndStopDependents"),
        1,
    );
    let k = key("acme", "app");
    let p = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &p, ObservedState::Running, 2);
    let bad = one_worker(", onExhausted: FailAndStopDependents").replace("500m", "501m");
    apply(&mut c, &bad, 3);
    let v1 = p;
    let out = report_placement(&mut c, &v1, ObservedState::Stopped, 4);
    let mut cur = started_placements(&out).pop().unwrap();
    // v2 crashes until its retries are used up: Failed.
    let mut now = 5;
    while c.phase(&k) != Some(Phase::Failed) {
        let failed = ObservedState::Exited { code: 3 };
        report_placement(&mut c, &cur, ObservedState::Running, now);
        let out = report_placement(&mut c, &cur, failed, now + 1);
        now += 2000;
        let out = if started_placements(&out).is_empty() {
            c.apply(Command::Tick, t(now)).unwrap()
        } else {
            out
        };
        if let Some(n) = started_placements(&out).pop() {
            cur = n;
        }
        assert!(now < 100_000, "never failed");
    }
    let out = c
        .apply(
            Command::Rollback {
                app: k.clone(),
                version: 1,
            },
            t(now),
        )
        .unwrap();
    assert!(
        transitions(&out).contains(&"Failed->Created".to_string()),
        "{:?}",
        transitions(&out)
    );
    let back = started_placements(&out)
        .pop()
        .expect("v1's spec runs again");
    assert_eq!(back.0.version, 3, "rolled back as version 3");
    report_placement(&mut c, &back, ObservedState::Running, now + 1);
    assert_eq!(c.phase(&k), Some(Phase::Running));
}

#[test]
fn two_documents_for_one_application_are_refused() {
    let mut c = Coordinator::new();
    apply(&mut c, &cluster2(), 0);
    let twice = format!(
        "{}---\n{}",
        one_worker(""),
        one_worker("").replace("500m", "600m")
    );
    let e = c
        .apply(
            Command::Apply {
                documents: docs(&twice),
                start: true,
            },
            t(1),
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid Application acme/app: metadata.name: documents 1 and 2 both define \
         Application acme/app; apply one of them"
    );
    assert!(c.list_apps(t(1)).is_empty(), "nothing applied");
}

/// `get apps` names the problem: a start that keeps failing, an OOM kill.
#[test]
fn the_app_list_shows_the_most_important_problem() {
    let mut c = Coordinator::new();
    apply(&mut c, &cluster2(), 0);
    let out = apply(&mut c, &one_worker(""), 1);
    let k = key("acme", "app");
    let p = started_placements(&out).pop().unwrap();
    let bad_spec = ObservedState::Failed {
        failure: Failure::PolicyViolation {
            policy: "runtimeSpec".into(),
            detail: "command /nonexistent: no such file".into(),
        },
    };
    let out = report_placement(&mut c, &p, bad_spec, 2);
    let p = started_placements(&out)
        .pop()
        .expect("restart asked (after its backoff)");
    report_placement(&mut c, &p, ObservedState::Starting, 2001);
    let reason = &c.list_apps(t(2001))[0].reason;
    assert_eq!(c.phase(&k), Some(Phase::Scheduled));
    assert_eq!(
        reason,
        "worker/0: policy violation (runtimeSpec): command /nonexistent: no such file (1 restart)"
    );

    report_placement(&mut c, &p, ObservedState::Running, 2002);
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let oom = ObservedState::Failed {
        failure: Failure::Runtime(RuntimeFailure::OutOfMemory {
            limit: Some(Bytes::from_mib(64)),
        }),
    };
    report_placement(&mut c, &p, oom, 2003);
    let reason = &c.list_apps(t(2003))[0].reason;
    assert!(
        reason.starts_with("worker/0: OOM: killed at its memory limit of 64Mi"),
        "{reason}"
    );
}

/// `Expect`: the command runs only at the expected version; a stale expectation
/// changes nothing and names the version the application is at.
#[test]
fn an_expected_version_guards_a_change() {
    let mut c = Coordinator::new();
    apply(&mut c, &cluster2(), 0);
    let k = key("acme", "app");
    let guarded = |version, yaml: &str| Command::Expect {
        app: k.clone(),
        version,
        then: Box::new(Command::Apply {
            documents: docs(yaml),
            start: false,
        }),
    };
    // 0: it must not exist yet.
    c.apply(guarded(0, &one_worker("")), t(1)).unwrap();
    let e = c.apply(guarded(0, &one_worker("")), t(2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "application acme/app is at version 1, not 0: it changed since you read it; read it \
         again (darosctl describe app) and retry"
    );
    let v2 = one_worker("").replace("500m", "600m");
    c.apply(guarded(1, &v2), t(3)).unwrap();
    let v3 = one_worker("").replace("500m", "700m");
    assert!(c.apply(guarded(1, &v3), t(4)).is_err(), "stale: it is at 2");
    let d = c.describe(&k, t(4)).unwrap();
    assert_eq!(d.versions.len(), 2, "the stale change was not recorded");
}

/// A non-critical workload (`critical: false`) does not hold Running back:
/// the application runs once its critical workloads are ready.
#[test]
fn non_critical_workloads_do_not_hold_running_back() {
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
    let out = apply(
        &mut c,
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: app, tenant: acme}\nspec:\n  \
         workloads:\n    - {name: web, runtime: {type: process}, resources: {cpu: {request: 100m}}}\n    \
         - {name: warmer, critical: false, runtime: {type: process}, resources: {cpu: {request: 100m}}}\n",
        1,
    );
    let k = key("acme", "app");
    let ids = started(&out);
    let web = ids.iter().find(|i| i.workload == "web").unwrap().clone();
    let warmer = ids.iter().find(|i| i.workload == "warmer").unwrap().clone();
    report(&mut c, &warmer, ObservedState::Starting, 2);
    assert_eq!(c.phase(&k), Some(Phase::Scheduled));
    let out = report(&mut c, &web, ObservedState::Ready, 3);
    assert_eq!(transitions(&out), ["Scheduled->Running"], "{out:?}");
    let ev = c.events_of(&k).into_iter().last().unwrap().clone();
    assert!(
        ev.reason.contains("all 1 critical workloads ready"),
        "{ev:?}"
    );
}

/// `CreationFailed` (Created -> Failed, seed §6.4 "创建异常"): an application
/// naming a pool that does not exist (yet) has not been refused on its merits
/// (Rejected) but could not be created; once the pool exists, `retry` admits
/// and places it. A refusal on the merits stays Rejected. (An unknown tenant
/// is refused at apply, before anything is created.)
#[test]
fn a_missing_pool_is_a_creation_failure_retried_later() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            node_yaml("n1", "4", "8Gi", "disk: nvme", ""),
            tenant_yaml("acme", "pools: [default, fast]")
        ),
        0,
    );
    let out = apply(
        &mut c,
        &app_yaml("acme", "app", 1, &[("w", "1", 1, &[])])
            .replace("  priority: 1\n", "  priority: 1\n  pool: fast\n"),
        1,
    );
    assert_eq!(transitions(&out), ["*->Created", "Created->Failed"]);
    assert_eq!(
        out.events[1].reason,
        "creation failed: pool: pool fast does not exist; create it, then `darosctl operate acme/app retry`"
    );
    let k = key("acme", "app");
    apply(
        &mut c,
        "apiVersion: daros.io/v1\nkind: ResourcePool\nmetadata: {name: fast}\n\
         spec: {selector: {matchLabels: {disk: nvme}}}\n",
        2,
    );
    let out = operate(&mut c, &k, OperationRequest::Retry, 3).unwrap();
    assert_eq!(
        transitions(&out),
        [
            "Failed->Created",
            "Created->Admitted",
            "Admitted->Scheduled"
        ]
    );
    // Over quota is a refusal: Rejected.
    apply(&mut c, &tenant_yaml("small", "quota: {cpu: \"1\"}"), 5);
    let out = apply(
        &mut c,
        &app_yaml("small", "big", 1, &[("w", "2", 1, &[])]),
        6,
    );
    assert_eq!(transitions(&out), ["*->Created", "Created->Rejected"]);
}
