//! Control-plane metrics as the user would expect them to move (issue 16):
//! phase gauges, pending by reason for a quota refusal, failure and restart
//! counters after a crash, latency histograms, node conditions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

#[test]
fn metrics_follow_what_happens() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{}",
            node_yaml("n1", "4", "8Gi", "", ""),
            node_yaml("n2", "4", "8Gi", "", ""),
            tenant_yaml("acme", "quota: {cpu: \"3\"}")
        ),
        0,
    );
    let out = apply(
        &mut c,
        &app_yaml("acme", "web", 1, &[("w", "1", 2, &[])]),
        1_000,
    );
    let m = c.metrics(t(10_000));
    assert_eq!(m.applications[&("acme".into(), "Scheduled".into())], 1);
    assert_eq!(m.pending[&("acme".into(), "starting".into())], 1);
    assert_eq!(m.pending_instances[&("acme".into(), "starting".into())], 2);
    assert_eq!(m.counters.admission_to_scheduled.count, 1);
    for id in started(&out) {
        report(&mut c, &id, ObservedState::Ready, 3_500);
    }
    let m = c.metrics(t(10_000));
    assert_eq!(m.applications[&("acme".into(), "Running".into())], 1);
    assert!(m.pending.is_empty(), "{:?}", m.pending);
    let h = &m.counters.scheduled_to_running;
    assert_eq!((h.count, h.sum_ms), (1, 2_500));
    assert_eq!(h.buckets[4], 1, "2.5 s falls in the le=2.5 bucket");
    assert_eq!(m.counters.transitions["Running/system"], 1);
    assert_eq!(m.instances.values().sum::<u64>(), 2);
    assert_eq!(m.quota[&("acme".into(), "cpu".into())], (2.0, Some(3.0)));
    assert_eq!(m.nodes["ready"], 2);

    // Over quota: refused, counted, and pending by its rule.
    apply(
        &mut c,
        &app_yaml("acme", "big", 1, &[("w", "2", 1, &[])]),
        4_000,
    );
    let m = c.metrics(t(10_000));
    assert_eq!(m.applications[&("acme".into(), "Rejected".into())], 1);
    assert_eq!(m.pending[&("acme".into(), "quota.cpu".into())], 1);
    assert_eq!(m.counters.rejections["quota.cpu"], 1);

    // A crash: a runtime failure and a restart.
    let id = started(&out)[0].clone();
    let out = report(&mut c, &id, ObservedState::Exited { code: 1 }, 5_000);
    assert_eq!(started(&out).len(), 1);
    let m = c.metrics(t(10_000));
    assert_eq!(m.counters.failures["runtime"], 1);
    assert_eq!(m.counters.restarts, 1);
    assert_eq!(
        m.pending_instances
            .get(&("acme".into(), "restarting".into())),
        Some(&1),
        "{:?}",
        m.pending_instances
    );
    // The same report again is not another failure.
    report(&mut c, &id, ObservedState::Exited { code: 1 }, 5_001);
    assert_eq!(c.metrics(t(10_000)).counters.failures["runtime"], 1);

    // Node conditions.
    c.apply(
        Command::SetNodeCondition {
            node: "n2".into(),
            condition: NodeCondition::Cordoned,
        },
        t(6_000),
    )
    .unwrap();
    let m = c.metrics(t(10_000));
    assert_eq!((m.nodes["ready"], m.nodes["cordoned"]), (1, 1));
}

fn sla_app(version_cpu: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: api, tenant: acme}}\nspec:\n  sla: {{availability: \"99%\"}}\n  workloads:\n    - name: w\n      runtime: {{type: process}}\n      resources: {{cpu: {{request: \"{version_cpu}\"}}, memory: {{request: 64Mi}}}}\n      replicas: {{min: 1, max: 3}}\n---\n"
    )
}

#[test]
fn convergence_sla_attainment_and_job_queue_time() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            node_yaml("n1", "8", "8Gi", "", ""),
            tenant_yaml("acme", "")
        ),
        0,
    );
    let api = key("acme", "api");
    let out = apply(&mut c, &sla_app("500m"), 1_000);
    let first = started(&out);
    assert_eq!(first.len(), 1);
    // Running (not yet ready) is not converged.
    report(&mut c, &first[0], ObservedState::Running, 1_500);
    assert!(c.metrics(t(1_500)).counters.convergence.is_empty());
    report(&mut c, &first[0], ObservedState::Ready, 2_000);
    let m = c.metrics(t(2_000));
    let h = &m.counters.convergence["create"];
    assert_eq!((h.count, h.sum_ms), (1, 1_000));

    // Scaling to 2 converges once the new replica is ready.
    let out = operate(
        &mut c,
        &api,
        OperationRequest::Scale {
            workload: "w".into(),
            replicas: 2,
        },
        3_000,
    )
    .unwrap();
    let second = started(&out);
    assert_eq!(second.len(), 1);
    report(&mut c, &second[0], ObservedState::Ready, 4_500);
    let h = &c.metrics(t(4_500)).counters.convergence["scale"];
    assert_eq!((h.count, h.sum_ms), (1, 1_500));

    // Availability: Running from 1.5 s (running without readiness checks
    // counts as up for the phase; the replica is not yet *converged*); a crash at 10 s degrades it until
    // the replica is back at 12 s.
    let out = report(&mut c, &first[0], ObservedState::Exited { code: 1 }, 10_000);
    assert_eq!(c.phase(&api), Some(Phase::Degraded));
    let again = started(&out);
    assert_eq!(again.len(), 1, "{:?}", out.actions);
    report(&mut c, &again[0], ObservedState::Ready, 12_000);
    assert_eq!(c.phase(&api), Some(Phase::Running));
    let m = c.metrics(t(22_000));
    let (attained, target) = m.availability[&("acme".into(), "api".into())];
    assert_eq!(target, 0.99);
    assert_eq!(
        c.describe(&api, t(22_000))
            .unwrap()
            .events
            .iter()
            .find(|e| e.to == lifecycle::Target::Phase(Phase::Running))
            .unwrap()
            .time,
        t(1_500),
        "Scheduled -> Running at the first Running report"
    );
    // 8.5 s + 10 s up, 2 s down.
    assert!(
        (attained.unwrap() - 18.5 / 20.5).abs() < 1e-9,
        "{attained:?}"
    );

    // An update stopped before it converged is abandoned, not observed.
    let out = apply(&mut c, &sla_app("600m"), 30_000);
    assert!(!started(&out).is_empty() || !out.actions.is_empty());
    operate(&mut c, &api, OperationRequest::Stop, 31_000).unwrap();
    let m = c.metrics(t(40_000));
    assert!(!m.counters.convergence.contains_key("update"));
    assert_eq!(m.counters.convergence_abandoned["update"], 1);
    // Stopped time does not count against it.
    let (attained, _) = m.availability[&("acme".into(), "api".into())];
    assert!(
        (attained.unwrap() - 27.5 / 29.5).abs() < 1e-9,
        "{attained:?}"
    );
}

#[test]
fn init_job_queue_time_is_the_time_placed_before_it_started() {
    let mut c = Coordinator::new();
    apply(&mut c, &node_yaml("local", "4", "8Gi", "", ""), 0);
    let out = apply(&mut c, include_str!("../../examples/shop.yaml"), 1_000);
    let j = jobs(&out);
    assert_eq!(j.len(), 1);
    report_job(&mut c, &j[0], ObservedState::Running, 1_750);
    report_job(&mut c, &j[0], ObservedState::Exited { code: 0 }, 4_000);
    let m = c.metrics(t(4_000));
    let q = &m.counters.job_queue_time;
    assert_eq!((q.count, q.sum_ms), (1, 750));
    let r = &m.counters.job_run_time;
    assert_eq!((r.count, r.sum_ms), (1, 2_250));
    assert_eq!(m.counters.job_runs["succeeded"], 1);
}
