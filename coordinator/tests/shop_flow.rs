//! The shop example end to end on one node: admission, arbitration, the
//! init job first, dependency order, readiness, restarts, failure handling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

const SHOP: &str = include_str!("../../examples/shop.yaml");

fn local_node() -> String {
    node_yaml("local", "4", "8Gi", "", "")
}

#[test]
fn shop_runs_in_dependency_order_after_its_init_job() {
    let mut c = Coordinator::new();
    apply(&mut c, &local_node(), 0);
    let out = apply(&mut c, SHOP, 1);
    let shop = key("shop-team", "shop");
    assert_eq!(
        transitions(&out),
        ["*->Created", "Created->Admitted", "Admitted->Scheduled"]
    );
    assert_eq!(c.phase(&shop), Some(Phase::Scheduled));
    // Only the init job runs first.
    let j = jobs(&out);
    assert_eq!(j.len(), 1, "{:?}", out.actions);
    assert_eq!(
        j[0].to_string(),
        "shop-team/shop/web/init/prepare-docroot/v1"
    );
    assert!(started(&out).is_empty());
    let d = c.describe(&shop, t(1)).unwrap();
    assert!(
        d.blocked
            .iter()
            .any(|b| b.workload == "web" && b.reason.contains("prepare-docroot")),
        "{:?}",
        d.blocked
    );
    assert!(
        d.blocked
            .iter()
            .any(|b| b.workload == "worker" && b.reason.contains("waiting for web")),
        "{:?}",
        d.blocked
    );

    // Init job succeeds: web starts, worker still waits.
    let out = report_job(&mut c, &j[0], ObservedState::Exited { code: 0 }, 2);
    let s = started(&out);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].to_string(), "shop-team/shop/web/0/v1");
    let web = s[0].clone();
    let out = report(&mut c, &web, ObservedState::Running, 3);
    assert!(
        started(&out).is_empty(),
        "worker must wait for web readiness"
    );
    // web has a readiness check: only Ready unblocks the worker.
    let out = report(&mut c, &web, ObservedState::Ready, 4);
    let s = started(&out);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].workload, "worker");
    let worker = s[0].clone();
    // worker has no readiness check: Running is enough for the app to run.
    let out = report(&mut c, &worker, ObservedState::Running, 5);
    assert_eq!(transitions(&out), ["Scheduled->Running"]);
    assert_eq!(c.phase(&shop), Some(Phase::Running));

    // Reports are idempotent: nothing new to do.
    let out = report(&mut c, &worker, ObservedState::Running, 6);
    assert!(out.actions.is_empty() && out.events.is_empty());
}

#[test]
fn failing_init_job_blocks_dependents_and_fails_the_app_with_its_reason() {
    let mut c = Coordinator::new();
    apply(&mut c, &local_node(), 0);
    let out = apply(&mut c, SHOP, 1);
    let shop = key("shop-team", "shop");
    let job = jobs(&out)[0].clone();
    // retries: 2 → three runs in all, with backoff (1s, then 2s).
    let out = report_job(&mut c, &job, ObservedState::Exited { code: 1 }, 1000);
    let retry = out
        .actions
        .iter()
        .find(|a| a.subject() == job.to_string())
        .unwrap();
    assert_eq!(
        retry.not_before,
        Some(t(2000)),
        "first retry after 1s backoff"
    );
    let d = c.describe(&shop, t(1000)).unwrap();
    assert!(
        d.blocked
            .iter()
            .any(|b| b.workload == "web" && b.reason.contains("retry 1 of 2")),
        "{:?}",
        d.blocked
    );
    assert!(d.blocked.iter().any(|b| b.workload == "worker"));
    report_job(&mut c, &job, ObservedState::Running, 2000);
    let out = report_job(&mut c, &job, ObservedState::Exited { code: 1 }, 2500);
    assert_eq!(
        out.actions[0].not_before,
        Some(t(4500)),
        "second retry after 2s"
    );
    report_job(&mut c, &job, ObservedState::Running, 4500);
    let out = report_job(&mut c, &job, ObservedState::Exited { code: 7 }, 5000);
    // Exhausted: web's lifecycle is the app's (FailAndStopDependents).
    assert_eq!(transitions(&out), ["Scheduled->Failed"]);
    let ev = out.events.last().unwrap();
    assert!(
        ev.reason
            .contains("init job prepare-docroot of workload web failed 3 times"),
        "{}",
        ev.reason
    );
    assert!(ev.reason.contains("exited with code 7"), "{}", ev.reason);
    assert!(started(&out).is_empty(), "nothing was ever started");
    // Failed releases the quota.
    let (_, usage) = c
        .tenants()
        .into_iter()
        .find(|(t, _)| t.name == "shop-team")
        .unwrap();
    assert_eq!(usage.workloads, 0);
    // Failed accepts a new spec, Delete and Retry; not Stop.
    let e = operate(&mut c, &shop, OperationRequest::Stop, 6).unwrap_err();
    assert!(
        e.to_string()
            .contains("Failed accepts: UpdateSpec, Delete, Retry"),
        "{e}"
    );
    // Retry goes back through admission and arbitration.
    let out = operate(&mut c, &shop, OperationRequest::Retry, 7).unwrap();
    assert_eq!(
        transitions(&out),
        [
            "Failed->Created",
            "Created->Admitted",
            "Admitted->Scheduled"
        ]
    );
    assert_eq!(jobs(&out).len(), 1);
}

#[test]
fn crash_restarts_with_backoff_then_fails_and_stops_dependents() {
    let mut c = Coordinator::new();
    apply(&mut c, &local_node(), 0);
    let out = apply(&mut c, SHOP, 1);
    let shop = key("shop-team", "shop");
    let job = jobs(&out)[0].clone();
    let out = report_job(&mut c, &job, ObservedState::Exited { code: 0 }, 2);
    let web = started(&out)[0].clone();
    report(&mut c, &web, ObservedState::Ready, 3);
    let worker = c
        .describe(&shop, t(3))
        .unwrap()
        .instances
        .iter()
        .find(|i| i.id.workload == "worker")
        .unwrap()
        .id
        .clone();
    report(&mut c, &worker, ObservedState::Running, 4);
    assert_eq!(c.phase(&shop), Some(Phase::Running));

    // web crashes: Degraded, restart after 1s.
    let crash = ObservedState::Failed {
        failure: model::failure::Failure::Runtime(model::failure::RuntimeFailure::ProcessExit {
            exit_code: Some(137),
            signal: None,
        }),
    };
    let out = report(&mut c, &web, crash.clone(), 10_000);
    assert_eq!(transitions(&out), ["Running->Degraded"]);
    assert!(
        out.events[0].reason.contains("web/0"),
        "{}",
        out.events[0].reason
    );
    let restart = &out.actions[0];
    assert_eq!(restart.not_before, Some(t(11_000)));
    // It comes back: Running again by itself.
    report(&mut c, &web, ObservedState::Running, 11_000);
    let out = report(&mut c, &web, ObservedState::Ready, 11_100);
    assert_eq!(transitions(&out), ["Degraded->Running"]);
    // Keeps crashing quickly: maxRetries 5 then FailAndStopDependents.
    let mut now = 12_000;
    let mut last = Outcome::default();
    for _ in 0..6 {
        last = report(&mut c, &web, crash.clone(), now);
        if c.phase(&shop) == Some(Phase::Failed) {
            break;
        }
        now += 60_000;
        report(&mut c, &web, ObservedState::Running, now);
        now += 10;
    }
    assert_eq!(c.phase(&shop), Some(Phase::Failed), "{:?}", last.events);
    let stops = stopped(&last);
    // The dependent (worker) is stopped first.
    assert_eq!(stops[0].workload, "worker", "{stops:?}");
    assert!(
        last.actions[0].reason.contains("depends on web"),
        "{}",
        last.actions[0].reason
    );
}

#[test]
fn stop_and_delete_go_through_terminated() {
    let mut c = Coordinator::new();
    apply(&mut c, &local_node(), 0);
    apply(&mut c, SHOP, 1);
    let shop = key("shop-team", "shop");
    let out = operate(&mut c, &shop, OperationRequest::Delete, 2).unwrap();
    assert_eq!(
        transitions(&out),
        ["Scheduled->Terminated", "Terminated->[deleted]"]
    );
    assert_eq!(c.phase(&shop), None);
    assert!(c.cluster().nodes()[0].instances.is_empty());
    assert_eq!(
        c.events_of(&shop).len(),
        5,
        "the audit log keeps the history"
    );
}
