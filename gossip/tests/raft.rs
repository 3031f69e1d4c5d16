//! Raft among server agents over real processes, QUIC and redb: failover after `kill -9`,
//! a partitioned minority leader, fencing of coordinator commands, and server add/remove.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::{DEADLINE, cluster, put, read_all};
use daros_gossip::NodeId;
use daros_gossip::control::{ControlRequest, ControlResponse};
use daros_gossip::testing::{TestCluster, wait_for};
use serde_json::{Value, json};

async fn all(c: &TestCluster, via: usize) -> BTreeMap<String, String> {
    let v = c.ctl_ok(via, &read_all()).await.unwrap();
    serde_json::from_value(v).unwrap()
}

async fn write_until_ok(c: &TestCluster, via: usize, key: &str, value: &str) -> Value {
    wait_for(
        &format!("write {key} via {}", c.id(via)),
        DEADLINE,
        || async { c.ctl_ok(via, &put(key, value)).await.ok() },
    )
    .await
    .unwrap()
}

fn echo(node: &str, n: u64) -> ControlRequest {
    ControlRequest::Command {
        node_id: NodeId::new(node).unwrap(),
        method: "agent.echo".into(),
        body: json!({ "n": n }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_of_the_leader_elects_a_new_leader_that_serves_writes() {
    // s1..s3 servers, c1 client agent.
    let mut c = cluster(3, 1, 0).await;
    let (leader, term) = c.wait_leader(&[0, 1, 2], DEADLINE).await.unwrap();
    write_until_ok(&c, 3, "before", "1").await;

    c.kill9(leader).unwrap();
    let killed_at = Instant::now();
    let rest: Vec<usize> = (0..3).filter(|k| *k != leader).collect();
    let (new_leader, new_term) = c.wait_leader(&rest, DEADLINE).await.unwrap();
    assert_ne!(new_leader, leader);
    assert!(new_term > term, "term {new_term} after {term}");
    // The client agent's write is forwarded to the new leader and acknowledged.
    let ack = write_until_ok(&c, 3, "after", "2").await;
    println!(
        "failover: write acknowledged {:?} after kill -9",
        killed_at.elapsed()
    );
    assert_eq!(ack["at"]["term"].as_u64().unwrap(), new_term);
    let state = all(&c, 3).await;
    assert_eq!(state.get("before").map(String::as_str), Some("1"));
    assert_eq!(state.get("after").map(String::as_str), Some("2"));

    // The killed server comes back from its redb files and catches up.
    c.start(leader).unwrap();
    c.wait_ready(leader, DEADLINE).await.unwrap();
    let commit = c.status(new_leader).await.unwrap()["commit_index"]
        .as_u64()
        .unwrap();
    wait_for("restarted server caught up", DEADLINE, || async {
        let r = c.ctl_ok(leader, &ControlRequest::Raft).await.ok()?;
        (r["last_applied"].as_u64()? >= commit && r["role"] == "follower").then_some(())
    })
    .await
    .unwrap();
    // Reads through the restarted server are linearizable (read index from the leader).
    assert_eq!(all(&c, leader).await, state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_minority_leader_cannot_commit_and_its_commands_are_fenced() {
    let c = cluster(3, 1, 0).await;
    let agent = 3;
    let (old, old_term) = c.wait_leader(&[0, 1, 2], DEADLINE).await.unwrap();
    write_until_ok(&c, agent, "a", "1").await;
    // The agent obeys the current coordinator and records its term.
    let r = c.ctl_ok(old, &echo("c1", 1)).await.unwrap();
    assert_eq!(r["fence"]["term"].as_u64().unwrap(), old_term);

    // Cut the leader off from the other servers; it still reaches the agent.
    let majority: Vec<usize> = (0..3).filter(|k| *k != old).collect();
    for &k in &majority {
        c.net().block(old, k).unwrap();
    }
    // The majority elects a new leader in a higher term.
    let (new, new_term) = c.wait_leader(&majority, DEADLINE).await.unwrap();
    assert!(new_term > old_term);
    // The old leader cannot commit: its write times out unacknowledged.
    let minority_write = c.ctl(old, &put("lost", "x")).await.unwrap();
    match &minority_write {
        ControlResponse::Error { message, .. } => {
            assert!(
                message.contains("not committed") || message.contains("not the leader"),
                "{message}"
            )
        }
        ControlResponse::Ok(v) => panic!("minority leader committed a write: {v}"),
    }
    // The majority serves writes meanwhile (through the agent's forwarding).
    write_until_ok(&c, agent, "b", "2").await;

    // The new coordinator commands the agent; afterwards the old one is refused as stale.
    let r = c.ctl_ok(new, &echo("c1", 2)).await.unwrap();
    assert_eq!(r["fence"]["term"].as_u64().unwrap(), new_term);
    let refused = c.ctl(old, &echo("c1", 3)).await.unwrap();
    match refused {
        ControlResponse::Error { kind, message, .. } => {
            println!("old coordinator's command refused: {kind}: {message}");
            assert!(
                kind == "stale_term" || message.contains("not the leader"),
                "old leader's command not fenced: {kind} {message}"
            );
            if kind == "stale_term" {
                assert!(
                    message.contains(&format!("already accepted term {new_term}")),
                    "{message}"
                );
            }
        }
        ControlResponse::Ok(v) => panic!("agent obeyed a deposed coordinator: {v}"),
    }
    let fence = c.ctl_ok(agent, &ControlRequest::Fence).await.unwrap();
    assert_eq!(fence["term"].as_u64().unwrap(), new_term);

    // Heal: the old leader steps down, and its unacknowledged entry is gone.
    for &k in &majority {
        c.net().unblock(old, k).unwrap();
    }
    wait_for("old leader follows the new one", DEADLINE, || async {
        let (l, t) = c.leader_seen_by(old).await?;
        (l == c.id(new) && t >= new_term).then_some(())
    })
    .await
    .unwrap();
    let state = all(&c, old).await;
    assert_eq!(state.get("a").map(String::as_str), Some("1"));
    assert_eq!(state.get("b").map(String::as_str), Some("2"));
    assert!(
        !state.contains_key("lost"),
        "unacknowledged minority write survived: {state:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_removed_and_added_back() {
    let c = cluster(3, 0, 0).await;
    let voters = |v: &Value| -> Vec<String> {
        v["servers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["voter"] == true)
            .map(|s| s["node_id"].as_str().unwrap().to_string())
            .collect()
    };
    // Removal is forwarded to the leader from any server.
    c.ctl_ok(
        1,
        &ControlRequest::RemoveServer {
            node_id: NodeId::new("s3").unwrap(),
        },
    )
    .await
    .unwrap();
    wait_for("s3 removed", DEADLINE, || async {
        let s = c.status(0).await?;
        (voters(&s) == ["s1", "s2"]).then_some(())
    })
    .await
    .unwrap();
    write_until_ok(&c, 0, "two-voters", "ok").await;

    c.ctl_ok(
        0,
        &ControlRequest::AddServer {
            node_id: NodeId::new("s3").unwrap(),
            rpc_addr: None,
        },
    )
    .await
    .unwrap();
    wait_for("s3 voter again", DEADLINE, || async {
        let s = c.status(0).await?;
        (voters(&s) == ["s1", "s2", "s3"]).then_some(())
    })
    .await
    .unwrap();
    write_until_ok(&c, 2, "three-voters", "ok").await;
    // Bad requests are refused with the reason.
    let e = c
        .ctl_ok(
            0,
            &ControlRequest::RemoveServer {
                node_id: NodeId::new("nope").unwrap(),
            },
        )
        .await
        .unwrap_err();
    assert!(e.contains("not a raft member"), "{e}");
    let status = c.status(2).await.unwrap();
    assert!(
        status["servers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["healthy"] == true),
        "{status}"
    );
}
