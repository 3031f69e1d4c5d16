//! Draining a node (issue 19): the node is cordoned and its instances move
//! elsewhere within each workload's rollout budget (stop first within
//! maxUnavailable, or surge within maxSurge), highest priority first, never
//! by preemption; bound instances (`disconnect.replace: false`) and those no
//! other node takes stay and the drain says why; uncordon ends it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

fn app(name: &str, priority: u32, replicas: u32, cpu: &str, lifecycle: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: acme}}\nspec:\n  \
         priority: {priority}\n  lifecyclePolicy: {{restart: Always{lifecycle}}}\n  workloads:\n    \
         - {{name: w, replicas: {replicas}, runtime: {{type: process}}, resources: {{cpu: {{request: \"{cpu}\"}}, memory: {{request: 64Mi}}}}}}\n---\n"
    )
}

fn drain(c: &mut Coordinator, node: &str, now: u64) -> Result<Outcome, CoordinatorError> {
    c.apply(Command::DrainNode { name: node.into() }, t(now))
}

/// One node `n1` with `apps` running on it (every start reported Ready), then
/// `n2` (with `n2_cpu` cores) joins.
fn setup(apps: &str, n2_cpu: &str) -> Coordinator {
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
    let out = apply(&mut c, apps, 1);
    for p in started_placements(&out) {
        report_placement(&mut c, &p, ObservedState::Ready, 2);
    }
    apply(&mut c, &node_yaml("n2", n2_cpu, "8Gi", "", ""), 3);
    c
}

fn nodes_of(c: &Coordinator, k: &AppKey) -> Vec<String> {
    c.describe(k, t(0))
        .unwrap()
        .instances
        .iter()
        .map(|i| i.node.clone().unwrap_or_default())
        .collect()
}

/// Default rollout (stop first, one at a time): the drain never has more
/// than one replica of the workload down, and the app stays Running.
#[test]
fn stop_first_one_replica_at_a_time() {
    let mut c = setup(&app("web", 100, 3, "500m", ""), "4");
    let k = key("acme", "web");
    let out = drain(&mut c, "n1", 10).unwrap();
    let n1 = c.cluster().index_of("n1").unwrap();
    assert!(!c.cluster().node(n1).unwrap().takes_work(), "cordoned");
    assert!(started(&out).is_empty(), "stop first: {out:?}");
    let mut stops = stopped_placements(&out);
    assert_eq!(stops.len(), 1, "maxUnavailable 1: {out:?}");
    let mut now = 11;
    let mut moved = 0;
    let mut last_stop = 0;
    while let Some(stop) = stops.pop() {
        assert_eq!(c.phase(&k), Some(Phase::Running));
        let out = report_placement(&mut c, &stop, ObservedState::Stopped, now);
        last_stop = now;
        let starts = started_placements(&out);
        assert_eq!(starts.len(), 1, "its replacement starts on n2: {out:?}");
        assert_eq!(out.actions[0].node, "n2");
        assert!(stopped(&out).is_empty(), "one down at a time: {out:?}");
        now += 1;
        let out = report_placement(&mut c, &starts[0], ObservedState::Ready, now);
        now += 1;
        moved += 1;
        stops = stopped_placements(&out);
        assert!(stops.len() <= 1, "{out:?}");
    }
    assert_eq!(moved, 3);
    assert_eq!(nodes_of(&c, &k), ["n2", "n2", "n2"]);
    let d = c.drain("n1").unwrap();
    assert_eq!(d.moved, 3);
    assert_eq!(
        d.complete,
        Some(t(last_stop)),
        "complete once the last copy there stopped: {d:?}"
    );
    assert!(d.waiting.is_empty());
    assert_eq!(c.phase(&k), Some(Phase::Running));
    // Drain decisions say what moved where.
    let decisions: Vec<_> = c
        .decisions()
        .iter()
        .filter(|d| d.app == k && d.kind == decision::DecisionKind::Drain)
        .collect();
    assert_eq!(decisions.len(), 1, "one placement for the three");
    assert!(decisions[0].accepted);
    assert_eq!(decisions[0].placements.len(), 3);
}

/// With `maxSurge: 1` the new copy starts first and the old one stops only
/// once the new one is ready: no replica is ever down.
#[test]
fn surge_starts_the_new_copy_first() {
    let mut c = setup(&app("web", 100, 1, "500m", ", rollout: {maxSurge: 1}"), "4");
    let out = drain(&mut c, "n1", 10).unwrap();
    assert!(stopped(&out).is_empty(), "{out:?}");
    let start = started_placements(&out);
    assert_eq!(start.len(), 1);
    let out = report_placement(&mut c, &start[0], ObservedState::Ready, 11);
    let stop = stopped_placements(&out);
    assert_eq!(stop.len(), 1, "old copy stops once the new is ready");
    assert_ne!(stop[0].1, start[0].1);
    assert!(
        c.drain("n1").unwrap().complete.is_none(),
        "old copy still runs"
    );
    report_placement(&mut c, &stop[0], ObservedState::Stopped, 12);
    assert_eq!(c.drain("n1").unwrap().complete, Some(t(12)));
}

/// A bound workload stays and is named; an app no other node fits waits,
/// says why, and moves once capacity appears; higher priority moves first.
#[test]
fn what_cannot_move_waits_and_says_why() {
    let apps = format!(
        "{}{}{}",
        app("a-low", 10, 1, "2", ""),
        app("z-high", 500, 1, "2", ""),
        app("bound", 100, 1, "100m", ", disconnect: {replace: false}")
    );
    // n2 has room for one 2-core app only.
    let mut c = setup(&apps, "2");
    let out = drain(&mut c, "n1", 10).unwrap();
    assert!(
        out.events.is_empty(),
        "no preemption, no phase change: {out:?}"
    );
    let d = c.drain("n1").unwrap().clone();
    assert!(d.complete.is_none());
    let waiting = d.waiting.join("\n");
    assert!(
        waiting.contains("acme/bound/w/0: bound to its node (disconnect.replace is false)"),
        "{waiting}"
    );
    assert!(
        waiting.contains("acme/a-low: 1 instance(s) wait: no other node takes them"),
        "{waiting}"
    );
    assert!(
        !waiting.contains("acme/z-high: "),
        "the higher priority moved first: {waiting}"
    );
    let stop = stopped_placements(&out);
    assert_eq!(stop.len(), 1);
    assert_eq!(stop[0].0.app, key("acme", "z-high"));
    // Ticks without a capacity change do not try again (no decision spam).
    let before = c.decisions().len();
    c.apply(Command::Tick, t(20)).unwrap();
    assert_eq!(c.decisions().len(), before);
    assert!(
        !c.tick_due(t(20)),
        "nothing to retry until capacity changes"
    );
    // A new node: the low-priority app moves too.
    apply(&mut c, &node_yaml("n3", "4", "8Gi", "", ""), 30);
    assert!(c.tick_due(t(31)));
    let out = c.apply(Command::Tick, t(31)).unwrap();
    assert_eq!(
        stopped_placements(&out)[0].0.app,
        key("acme", "a-low"),
        "{out:?}"
    );
    // The bound one still runs on n1.
    assert_eq!(nodes_of(&c, &key("acme", "bound")), ["n1"]);
}

/// Uncordon ends the drain; a drain of an unknown node is refused.
#[test]
fn uncordon_ends_it_and_unknown_nodes_are_refused() {
    let mut c = setup(&app("web", 100, 1, "500m", ""), "4");
    drain(&mut c, "n1", 10).unwrap();
    assert!(c.drain("n1").is_some());
    c.apply(
        Command::SetNodeCondition {
            node: "n1".into(),
            condition: NodeCondition::Uncordoned,
        },
        t(11),
    )
    .unwrap();
    assert!(c.drain("n1").is_none());
    let n1 = c.cluster().index_of("n1").unwrap();
    assert!(c.cluster().node(n1).unwrap().takes_work());
    let e = drain(&mut c, "nope", 12).unwrap_err();
    assert!(matches!(e, CoordinatorError::UnknownNode(_)), "{e}");
}

/// What-if of a drain and of a node's loss: predicted on a copy (the real
/// state is untouched), naming what would move, what would wait, and which
/// applications would end up Degraded.
#[test]
fn what_if_of_a_drain_and_of_a_node_loss() {
    let apps = format!(
        "{}{}{}",
        app("a-low", 10, 1, "2", ""),
        app("z-high", 500, 1, "2", ""),
        app("bound", 100, 1, "100m", ", disconnect: {replace: false}")
    );
    let c = setup(&apps, "2");
    let before = format!("{c:?}");

    let r = c.what_if_node("n1", NodeEvent::Drain, t(10)).unwrap();
    assert_eq!(format!("{c:?}"), before, "nothing changed");
    assert!(c.drain("n1").is_none());
    let conflicts = r.conflicts.join("\n");
    assert!(
        conflicts.contains("drain waits: acme/a-low: 1 instance(s) wait: no other node takes them"),
        "{conflicts}"
    );
    assert!(
        conflicts.contains("drain waits: acme/bound/w/0: bound to its node"),
        "{conflicts}"
    );
    assert_eq!(r.phases.len(), 3, "{:?}", r.phases);
    let moved: Vec<_> = r
        .explanations
        .iter()
        .filter(|e| e.accepted)
        .map(|e| e.app.to_string())
        .collect();
    assert_eq!(moved, ["acme/z-high"]);

    // Loss: past lostAfter the high-priority app is re-placed on n2 first, the
    // low one cannot be, the bound one waits for its node.
    let r = c.what_if_node("n1", NodeEvent::Loss, t(10)).unwrap();
    assert_eq!(format!("{c:?}"), before, "nothing changed");
    let placed: Vec<(String, bool)> = r
        .explanations
        .iter()
        .map(|e| (e.app.name.clone(), e.accepted))
        .collect();
    assert_eq!(
        placed,
        [("z-high".to_string(), true), ("a-low".to_string(), false)],
        "recovery by priority: {r:?}"
    );
    let conflicts = r.conflicts.join("\n");
    assert!(
        conflicts.contains("acme/a-low: not re-placed: no node of pool default"),
        "{conflicts}"
    );
    assert!(
        conflicts.contains("acme/bound: kept on n1 until it returns (disconnect.replace: false)"),
        "{conflicts}"
    );
    assert!(!conflicts.contains("z-high"), "{conflicts}");
    assert!(
        r.suggestions.iter().any(|s| s.contains("acme/a-low")),
        "{:?}",
        r.suggestions
    );
    // Unknown node.
    assert!(c.what_if_node("nope", NodeEvent::Drain, t(10)).is_err());
}
