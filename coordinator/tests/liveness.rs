//! Node liveness as committed facts (issue 12): Down makes instances
//! unreachable, not lost; they are lost (and placed elsewhere) only after their
//! `disconnect.lostAfter`; Ready brings the node back and any leader can write
//! it; a node's own registration never uncordons it or clears its cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

fn app(disconnect: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: app, tenant: acme}}\nspec:\n  \
         lifecyclePolicy: {{restart: Always{disconnect}}}\n  workloads:\n    \
         - {{name: w, runtime: {{type: process}}, resources: {{cpu: {{request: 500m}}, memory: {{request: 64Mi}}}}}}\n"
    )
}

fn setup(disconnect: &str) -> (Coordinator, AppKey, String, (InstanceId, u64)) {
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
    let out = apply(&mut c, &app(disconnect), 1);
    let p = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &p, ObservedState::Ready, 2);
    let k = key("acme", "app");
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let node = c.describe(&k, t(2)).unwrap().instances[0]
        .node
        .clone()
        .unwrap();
    (c, k, node, p)
}

fn condition(c: &mut Coordinator, node: &str, condition: NodeCondition, now: u64) -> Outcome {
    c.apply(
        Command::SetNodeCondition {
            node: node.into(),
            condition,
        },
        t(now),
    )
    .unwrap()
}

/// A node silent for a while (a GC pause, a SIGSTOP, an agent restart) comes back
/// before its instances are lost: nothing moved, the app is Running again.
#[test]
fn a_node_back_before_lost_after_keeps_its_instances() {
    let (mut c, k, node, p) = setup("");
    let out = condition(&mut c, &node, NodeCondition::Down, 10);
    assert!(
        started(&out).is_empty() && stopped(&out).is_empty(),
        "{out:?}"
    );
    assert_eq!(c.phase(&k), Some(Phase::Degraded));
    let reason = &c.list_apps(t(10))[0].reason;
    assert_eq!(reason, &format!("w/0 unreachable: node {node} is down"));
    let d = c.describe(&k, t(10)).unwrap();
    assert_eq!(d.instances[0].unreachable_since, Some(t(10)));
    let n = c.cluster().index_of(&node).unwrap();
    assert_eq!(c.cluster().node(n).unwrap().down, Some(t(10)));
    // No new work goes to a Down node.
    assert!(!c.cluster().node(n).unwrap().takes_work());

    let out = condition(&mut c, &node, NodeCondition::Ready, 20_000);
    assert!(
        started(&out).is_empty() && stopped(&out).is_empty(),
        "{out:?}"
    );
    assert_eq!(c.phase(&k), Some(Phase::Running), "{out:?}");
    let d = c.describe(&k, t(20_000)).unwrap();
    assert_eq!(d.instances[0].placement, p.1, "the same placement");
    assert_eq!(d.instances[0].node.as_deref(), Some(node.as_str()));
    // Past what would have been lostAfter, nothing happens either.
    let out = c.apply(Command::Tick, t(60_000)).unwrap();
    assert!(started(&out).is_empty(), "{out:?}");
}

/// `replace: false` keeps the instance on its node however long it is down.
#[test]
fn replace_false_waits_for_the_node() {
    let (mut c, k, node, p) = setup(", disconnect: {lostAfter: 5s, replace: false}");
    condition(&mut c, &node, NodeCondition::Down, 10);
    let out = c.apply(Command::Tick, t(600_000)).unwrap();
    assert!(started(&out).is_empty(), "{out:?}");
    let d = c.describe(&k, t(600_000)).unwrap();
    assert_eq!(d.instances[0].placement, p.1);
    assert!(
        c.list_apps(t(600_000))[0].reason.contains("unreachable"),
        "{:?}",
        c.list_apps(t(600_000))
    );
    // lostAfter: 5s with replace (the default) moves it after 5 s.
    let (mut c, k, node, p) = setup(", disconnect: {lostAfter: 5s}");
    condition(&mut c, &node, NodeCondition::Down, 10);
    assert!(
        started(&c.apply(Command::Tick, t(5_000)).unwrap()).is_empty(),
        "not before 5 s"
    );
    let out = c.apply(Command::Tick, t(5_010)).unwrap();
    let moved = started_placements(&out).pop().expect("moved");
    assert_ne!(moved.1, p.1);
    let d = c.describe(&k, t(5_010)).unwrap();
    assert_ne!(d.instances[0].node.as_deref(), Some(node.as_str()));
    // The returning node is told to stop its copy (it is not in its work).
    condition(&mut c, &node, NodeCondition::Ready, 6_000);
    assert!(c.desired_work()[&node].instances.is_empty());
}

/// Cordon and cost are the operator's: a node's re-registration (an agent
/// restart) and its return from Down keep them.
#[test]
fn registration_and_return_keep_the_operators_cordon_and_cost() {
    let (mut c, _k, node, _p) = setup("");
    let yaml = format!(
        "apiVersion: daros.io/v1\nkind: Node\nmetadata: {{name: {node}}}\nspec:\n  \
         capacity: {{cpu: \"4\", memory: 8Gi}}\n  runtimes: [container, process]\n  costPerHour: \"2.5\"\n"
    );
    // The operator's document (not a registration).
    c.apply(
        Command::Apply {
            documents: docs(&yaml),
            start: true,
        },
        t(3),
    )
    .unwrap();
    condition(&mut c, &node, NodeCondition::Cordoned, 4);
    let n = c.cluster().index_of(&node).unwrap();
    let mut own = c.cluster().node(n).unwrap().spec.clone();
    own.schedulable = true;
    own.cost_per_hour = None;
    c.apply(Command::RegisterNode { node: own }, t(5)).unwrap();
    let spec = &c.cluster().node(n).unwrap().spec;
    assert!(!spec.schedulable, "still cordoned");
    assert_eq!(
        spec.cost_per_hour.map(|r| r.to_string()).as_deref(),
        Some("2.5")
    );
    condition(&mut c, &node, NodeCondition::Down, 6);
    condition(&mut c, &node, NodeCondition::Ready, 7);
    assert!(
        !c.cluster().node(n).unwrap().spec.schedulable,
        "Ready is not uncordon"
    );
    condition(&mut c, &node, NodeCondition::Uncordoned, 8);
    assert!(c.cluster().node(n).unwrap().takes_work());
}

/// A node's inventory: an instance believed live there but absent from the list
/// fails with that reason (the app stops claiming a process that does not exist);
/// listed ones, and a Down node's inventory, change nothing.
#[test]
fn an_instance_absent_from_its_nodes_inventory_fails() {
    let (mut c, k, node, p) = setup("");
    let inventory = |c: &mut Coordinator, placements: &[u64], now| {
        c.apply(
            Command::NodeInventory {
                node: node.clone(),
                placements: placements.iter().copied().collect(),
            },
            t(now),
        )
        .unwrap()
    };
    let out = inventory(&mut c, &[p.1], 3);
    assert_eq!(out, Outcome::default(), "listed: nothing to do");
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let out = inventory(&mut c, &[], 4);
    assert_eq!(transitions(&out), ["Running->Degraded"], "{out:?}");
    let reason = &c.list_apps(t(4))[0].reason;
    assert!(
        reason.contains(&format!(
            "w/0: control plane failure: not running on node {node}: absent from its inventory"
        )),
        "{reason}"
    );
    // A restart is asked for the same placement (its node still takes it).
    assert_eq!(started_placements(&out).pop().map(|s| s.1), Some(p.1));
    // A Down node's inventory is not taken.
    let (mut c, k, node, _) = setup("");
    condition(&mut c, &node, NodeCondition::Down, 3);
    let out = c
        .apply(
            Command::NodeInventory {
                node: node.clone(),
                placements: Default::default(),
            },
            t(4),
        )
        .unwrap();
    assert_eq!(out, Outcome::default());
    assert!(
        c.describe(&k, t(4)).unwrap().instances[0]
            .unreachable_since
            .is_some()
    );
}

/// A node that can run nothing (its agent has no runtime executor) still
/// registers itself — it is listed, and no workload is placed on it — while
/// an operator's Node document must name its runtimes.
#[test]
fn a_node_without_runtimes_registers_and_takes_no_work() {
    let mut c = Coordinator::new();
    let node: ExecutionNode = serde_json::from_value(serde_json::json!({
        "name": "bare", "capacity": {"cpu": "8", "memory": "16Gi"}, "runtimes": []
    }))
    .unwrap();
    c.apply(Command::RegisterNode { node }, t(0)).unwrap();
    assert!(c.cluster().nodes().iter().any(|n| n.spec.name == "bare"));
    apply(&mut c, &tenant_yaml("acme", ""), 1);
    let out = c
        .apply(
            Command::Apply {
                documents: docs(&app_yaml("acme", "a", 100, &[("w", "100m", 1, &[])])),
                start: true,
            },
            t(2),
        )
        .unwrap();
    assert!(started(&out).is_empty(), "{out:?}");
    let e = daros_coordinator::spec::parse(
        "apiVersion: daros.io/v1\nkind: Node\nmetadata: {name: doc}\nspec:\n  \
         capacity: {cpu: \"2\", memory: 1Gi}\n  runtimes: []\n",
        Format::Yaml,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("runtimes"), "{e}");
}
