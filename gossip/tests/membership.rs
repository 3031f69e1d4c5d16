//! Membership over real processes in network namespaces: join, leave, and failure detection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{DEADLINE, cluster, members, status_of};
use daros_gossip::control::ControlRequest;
use daros_gossip::testing::wait_for;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_publish_their_summary_and_leave() {
    // 1 server + 2 clients: the clients join with the client token and get certificates.
    let mut c = cluster(1, 2, 0).await;
    for k in 0..3 {
        let m = members(&c, k).await;
        assert_eq!(m.len(), 3, "node {k} sees {m:?}");
        assert!(m.iter().all(|(_, s)| s == "alive"), "node {k} sees {m:?}");
    }

    // What a member publishes reaches the others: role, address, capacity, runtimes, version,
    // and the coordinator (raft leader) with its term.
    let v = wait_for("c2 sees s1's coordinator hint", DEADLINE, || async {
        let v = c.ctl_ok(2, &ControlRequest::Members).await.ok()?;
        let s1 = v.as_array()?.iter().find(|m| m["node_id"] == "s1")?.clone();
        (!s1["coordinator"].is_null()).then_some(s1)
    })
    .await
    .unwrap();
    assert_eq!(v["role"], "server");
    assert_eq!(v["rpc_addr"], format!("{}:7100", c.net().ip(0)));
    assert!(v["capacity"]["cpu_millicores"].as_u64().unwrap() >= 1000);
    assert_eq!(v["runtimes"], serde_json::json!(["process"]));
    assert_eq!(v["agent_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["coordinator"]["leader"], "s1");
    assert!(v["generation"].as_u64().unwrap() > 0);
    // Client agents publish no hint of their own (a leader change would change every
    // member's description): c1, which has heard s1's by now, shows none.
    wait_for("c1 sees s1's coordinator hint", DEADLINE, || async {
        let v = c.ctl_ok(0, &ControlRequest::Members).await.ok()?;
        let s1 = v.as_array()?.iter().find(|m| m["node_id"] == "s1")?.clone();
        (!s1["coordinator"].is_null()).then_some(())
    })
    .await
    .unwrap();
    let v = c.ctl_ok(2, &ControlRequest::Members).await.unwrap();
    let c1 = v
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["node_id"] == "c1")
        .unwrap();
    assert_eq!(c1["role"], "client");
    assert!(c1["coordinator"].is_null(), "{c1}");

    // Graceful leave: c2 announces it and exits; the others show it as left, not dead.
    assert_eq!(
        c.ctl_ok(2, &ControlRequest::Leave).await.unwrap(),
        Value::Null
    );
    c.wait_exit(2, DEADLINE).await.unwrap();
    for k in 0..2 {
        wait_for("c2 shown as left", DEADLINE, || async {
            (status_of(&c, k, "c2").await.as_deref() == Some("left")).then_some(())
        })
        .await
        .unwrap();
    }

    // A node that comes back with a new generation replaces its old entry and is alive again.
    c.start(2).unwrap();
    c.wait_ready(2, DEADLINE).await.unwrap();
    wait_for("c2 alive again", DEADLINE, || async {
        (status_of(&c, 0, "c2").await.as_deref() == Some("alive")).then_some(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_is_marked_dead() {
    let mut c = cluster(1, 2, 0).await;
    c.kill9(1).unwrap();
    for k in [0, 2] {
        wait_for("c1 declared dead by SWIM", DEADLINE, || async {
            (status_of(&c, k, "c1").await.as_deref() == Some("dead")).then_some(())
        })
        .await
        .unwrap();
    }
    // Last heard keeps growing for the dead node, stays fresh for the live ones (a
    // reading can fall between two heartbeats of a loaded node: look until a fresh one).
    let (dead, live) = wait_for("c2 heard within the last second", DEADLINE, || async {
        let v = c.ctl_ok(0, &ControlRequest::Members).await.ok()?;
        let arr = v.as_array()?;
        let dead = arr.iter().find(|m| m["node_id"] == "c1")?.clone();
        let live = arr.iter().find(|m| m["node_id"] == "c2")?.clone();
        (live["last_heard_ms"].as_u64()? < 1000).then_some((dead, live))
    })
    .await
    .unwrap();
    assert!(dead["last_heard_ms"].as_u64().unwrap() > 1000, "{dead}");
    assert_eq!(live["status"], "alive", "{live}");
}
