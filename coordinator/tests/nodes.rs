//! A node as its agent measures it and as an operator declares it (issue
//! 23): a `Node` document may reserve capacity, label, cost and cordon a
//! registered node but never add capacity or runtimes; a node only declared
//! is listed and takes no work until its agent registers; a node that is
//! gone can be deleted, one that is alive or still holds instances cannot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

fn declare(c: &mut Coordinator, yaml: &str, now: u64) -> Result<Outcome, CoordinatorError> {
    c.apply(
        Command::Apply {
            documents: docs(yaml),
            start: true,
        },
        t(now),
    )
}

fn measured(name: &str, cpu: &str, mem: &str) -> ExecutionNode {
    match docs(&node_yaml(name, cpu, mem, "", "")).pop() {
        Some(Document::Node(n)) => n,
        _ => unreachable!(),
    }
}

fn node_doc(name: &str, cpu: &str, mem: &str, extra: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Node\nmetadata: {{name: {name}, labels: {{team: web}}}}\nspec:\n  \
         capacity: {{cpu: \"{cpu}\", memory: {mem}}}\n  runtimes: [process]\n{extra}"
    )
}

fn one_app(c: &mut Coordinator, now: u64) -> Outcome {
    apply(c, &tenant_yaml("acme", ""), now);
    apply(
        c,
        &app_yaml("acme", "a", 100, &[("w", "500m", 1, &[])]),
        now + 1,
    )
}

#[test]
fn a_document_reserves_but_never_adds_capacity() {
    let mut c = Coordinator::new();
    c.apply(
        Command::RegisterNode {
            node: measured("n1", "2", "4Gi"),
        },
        t(0),
    )
    .unwrap();
    let e = declare(&mut c, &node_doc("n1", "1000", "10Ti", ""), 1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("spec.capacity.cpu: 1000 is more than node n1 reports (2)"),
        "{e}"
    );
    assert!(e.contains("spec.capacity.memory"), "{e}");
    let i = c.cluster().index_of("n1").unwrap();
    assert_eq!(
        c.cluster().node(i).unwrap().spec.capacity.cpu.to_string(),
        "2"
    );
    // Runtimes it does not have are refused too.
    let e = declare(
        &mut c,
        &node_doc("n1", "1", "1Gi", "").replace("[process]", "[process, vm]"),
        2,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("spec.runtimes: node n1 does not run vm"), "{e}");
    // A reservation, a label and a cost apply, and survive its agent's restart.
    declare(
        &mut c,
        &node_doc("n1", "1500m", "2Gi", "  costPerHour: \"0.5\"\n"),
        3,
    )
    .unwrap();
    c.apply(
        Command::RegisterNode {
            node: measured("n1", "2", "4Gi"),
        },
        t(4),
    )
    .unwrap();
    let n = &c.cluster().node(i).unwrap().spec;
    assert_eq!(n.capacity.cpu.to_string(), "1500m");
    assert_eq!(n.capacity.memory.to_string(), "2Gi");
    assert_eq!(n.labels.get("team").map(String::as_str), Some("web"));
    assert_eq!(
        n.cost_per_hour.map(|r| r.to_string()).as_deref(),
        Some("0.5")
    );
    // A node that shrank is held to what it has now.
    c.apply(
        Command::RegisterNode {
            node: measured("n1", "1", "4Gi"),
        },
        t(5),
    )
    .unwrap();
    let n = &c.cluster().node(i).unwrap().spec;
    assert_eq!(n.capacity.cpu.to_string(), "1");
    assert_eq!(c.measured_node("n1").unwrap().capacity.cpu.to_string(), "1");
}

#[test]
fn a_declared_node_takes_no_work_until_its_agent_registers() {
    let mut c = Coordinator::new();
    declare(&mut c, &node_doc("ghost-node", "64", "256Gi", ""), 0).unwrap();
    let g = c.cluster().index_of("ghost-node").unwrap();
    assert!(!c.cluster().node(g).unwrap().registered);
    assert!(!c.cluster().node(g).unwrap().takes_work());
    let out = one_app(&mut c, 1);
    assert!(
        started(&out).is_empty(),
        "nothing placed on a ghost: {out:?}"
    );
    let k = key("acme", "a");
    let reason = c.list_apps(t(2))[0].reason.clone();
    assert!(
        reason.contains("node not yet seen (declared, no agent registered it): 1"),
        "{reason}"
    );
    assert!(
        c.describe(&k, t(2))
            .unwrap()
            .instances
            .iter()
            .all(|i| i.node.is_none())
    );
    // Its agent registers: the pending app is placed there.
    c.apply(
        Command::RegisterNode {
            node: measured("ghost-node", "8", "16Gi"),
        },
        t(3),
    )
    .unwrap();
    let n = c.cluster().node(g).unwrap();
    assert!(n.registered && n.takes_work());
    assert_eq!(
        n.spec.capacity.cpu.to_string(),
        "8",
        "declared 64, measured 8"
    );
    let out = apply(
        &mut c,
        &app_yaml("acme", "b", 100, &[("w", "500m", 1, &[])]),
        4,
    );
    assert_eq!(started_placements(&out).len(), 1, "{out:?}");
    assert_eq!(
        c.describe(&key("acme", "b"), t(4)).unwrap().instances[0]
            .node
            .as_deref(),
        Some("ghost-node")
    );
}

#[test]
fn only_a_node_that_is_gone_and_empty_can_be_deleted() {
    let mut c = Coordinator::new();
    let delete = |c: &mut Coordinator, name: &str, now| {
        c.apply(Command::DeleteNode { name: name.into() }, t(now))
    };
    declare(&mut c, &node_doc("ghost", "4", "8Gi", ""), 0).unwrap();
    c.apply(
        Command::RegisterNode {
            node: measured("n1", "4", "8Gi"),
        },
        t(0),
    )
    .unwrap();
    let out = one_app(&mut c, 1);
    let p = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &p, ObservedState::Ready, 3);
    // A ghost goes at once; its name is free again.
    delete(&mut c, "ghost", 4).unwrap();
    assert!(c.cluster().index_of("ghost").is_none());
    assert!(c.cluster().live_nodes().all(|n| n.spec.name != "ghost"));
    assert!(matches!(
        delete(&mut c, "ghost", 5),
        Err(CoordinatorError::UnknownNode(_))
    ));
    // An alive node is refused.
    let e = delete(&mut c, "n1", 6).unwrap_err();
    assert!(matches!(e, CoordinatorError::NodeAlive(_)), "{e}");
    // Down but still holding the instance: refused, naming it.
    c.apply(
        Command::SetNodeCondition {
            node: "n1".into(),
            condition: NodeCondition::Down,
        },
        t(7),
    )
    .unwrap();
    let e = delete(&mut c, "n1", 8).unwrap_err().to_string();
    assert!(e.contains("still holds 1 instance(s) (acme/a/w/0"), "{e}");
    // Once the app is gone, the node can go; past decisions still name it.
    c.apply(
        Command::Operate {
            app: key("acme", "a"),
            operation: OperationRequest::Delete,
        },
        t(9),
    )
    .unwrap();
    let k = key("acme", "a");
    let _ = c.describe(&k, t(9));
    delete(&mut c, "n1", 10).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.cluster().live_nodes().count(), 0);
    assert!(c.desired_work().is_empty());
}
