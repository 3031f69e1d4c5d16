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
    let m = c.metrics();
    assert_eq!(m.applications[&("acme".into(), "Scheduled".into())], 1);
    assert_eq!(m.pending[&("acme".into(), "starting".into())], 1);
    assert_eq!(m.counters.admission_to_scheduled.count, 1);
    for id in started(&out) {
        report(&mut c, &id, ObservedState::Ready, 3_500);
    }
    let m = c.metrics();
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
    let m = c.metrics();
    assert_eq!(m.applications[&("acme".into(), "Rejected".into())], 1);
    assert_eq!(m.pending[&("acme".into(), "quota.cpu".into())], 1);
    assert_eq!(m.counters.rejections["quota.cpu"], 1);

    // A crash: a runtime failure and a restart.
    let id = started(&out)[0].clone();
    let out = report(&mut c, &id, ObservedState::Exited { code: 1 }, 5_000);
    assert_eq!(started(&out).len(), 1);
    let m = c.metrics();
    assert_eq!(m.counters.failures["runtime"], 1);
    assert_eq!(m.counters.restarts, 1);
    // The same report again is not another failure.
    report(&mut c, &id, ObservedState::Exited { code: 1 }, 5_001);
    assert_eq!(c.metrics().counters.failures["runtime"], 1);

    // Node conditions.
    c.apply(
        Command::SetNodeCondition {
            node: "n2".into(),
            condition: NodeCondition::Cordoned,
        },
        t(6_000),
    )
    .unwrap();
    let m = c.metrics();
    assert_eq!((m.nodes["ready"], m.nodes["cordoned"]), (1, 1));
}
