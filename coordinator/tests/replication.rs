//! Commands and outcomes are data: a replica fed the JSON of the commands
//! (as the mesh replicates them through raft) reaches the same state and
//! produces the same outcomes, and outcomes survive a JSON round trip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

const SHOP: &str = include_str!("../../examples/shop.yaml");
const CLUSTER: &str = include_str!("../../examples/cluster.yaml");

#[test]
fn replayed_json_commands_give_the_same_state_and_outcomes() {
    let mut leader = Coordinator::new();
    let mut follower = Coordinator::new();
    let mut log: Vec<(String, u64)> = Vec::new();
    let mut outcomes = Vec::new();
    let mut run = |c: &mut Coordinator, cmd: Command, now: u64| {
        log.push((serde_json::to_string(&cmd).unwrap(), now));
        let out = c.apply(cmd, t(now)).unwrap();
        outcomes.push(serde_json::to_string(&out).unwrap());
        out
    };
    let cluster = docs(&format!(
        "{CLUSTER}---\n{}",
        node_yaml("local", "8", "16Gi", "", "rack: r9")
    ));
    run(
        &mut leader,
        Command::Apply {
            documents: cluster.clone(),
            start: true,
        },
        0,
    );
    // The declared nodes' agents register them.
    for d in cluster {
        if let Document::Node(node) = d {
            run(&mut leader, Command::RegisterNode { node }, 0);
        }
    }
    let out = run(
        &mut leader,
        Command::Apply {
            documents: docs(SHOP),
            start: true,
        },
        1,
    );
    let job = jobs(&out)[0].clone();
    let out = run(
        &mut leader,
        Command::ReportInitJob {
            job,
            run: 0,
            state: ObservedState::Exited { code: 0 },
        },
        2,
    );
    let web = started(&out)[0].clone();
    run(
        &mut leader,
        Command::ReportWorkload {
            instance: web,
            placement: 0,
            state: ObservedState::Ready,
        },
        3,
    );
    run(
        &mut leader,
        Command::Operate {
            app: key("shop-team", "shop"),
            operation: OperationRequest::Stop,
        },
        4,
    );
    // The follower applies the commands it received as JSON.
    let mut replayed = Vec::new();
    for (json, now) in &log {
        let cmd: Command = serde_json::from_str(json).unwrap();
        let out = follower.apply(cmd, t(*now)).unwrap();
        replayed.push(serde_json::to_string(&out).unwrap());
    }
    assert_eq!(replayed, outcomes);
    assert_eq!(leader.list_apps(t(0)), follower.list_apps(t(0)));
    assert_eq!(leader.decisions(), follower.decisions());
    assert_eq!(leader.events(), follower.events());
    // Outcomes are data too.
    for o in &outcomes {
        let back: Outcome = serde_json::from_str(o).unwrap();
        assert_eq!(&serde_json::to_string(&back).unwrap(), o);
    }
    // Explanations and descriptions serialise for `-o json`.
    let d = leader
        .explain(leader.latest_decision(&key("shop-team", "shop")).unwrap())
        .unwrap();
    let back: Explanation = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
    assert_eq!(back, d);
    let desc = leader.describe(&key("shop-team", "shop"), t(5)).unwrap();
    assert_eq!(desc.phase, Phase::Terminated);
    assert!(
        serde_json::to_string(&desc)
            .unwrap()
            .contains("\"phase\":\"Terminated\"")
    );
}
