//! Shared by the multi-node tests.
#![allow(dead_code)]

use std::time::Duration;

use daros_gossip::control::ControlRequest;
use daros_gossip::testing::{NodeProgram, TestCluster, netns};
use serde_json::Value;

/// The node program under test. Switching the tests to darosd is this one line.
pub fn program() -> NodeProgram {
    NodeProgram::mesh_node(env!("CARGO_BIN_EXE_daros-mesh-node"))
}

/// Raft timing used by the tests (the defaults of the node).
pub const TIMING: &[&str] = &[];

/// Generous deadline for conditions on a busy 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Fails loudly where network namespaces cannot be created: these tests must run as root.
pub fn require_netns() {
    if let Err(e) = netns::available() {
        panic!("multi-node tests need root and iproute2 (network namespaces): {e}");
    }
}

/// A formed cluster of `servers` server agents and `clients` client agents.
pub async fn cluster(servers: usize, clients: usize, spare: usize) -> TestCluster {
    require_netns();
    let mut c =
        TestCluster::new(program(), servers, clients, spare, TIMING).expect("cluster setup");
    c.form(DEADLINE).await.expect("cluster formation");
    c
}

/// Members as node `k` sees them: (id, status) pairs.
pub async fn members(c: &TestCluster, k: usize) -> Vec<(String, String)> {
    let v = c
        .ctl_ok(k, &ControlRequest::Members)
        .await
        .unwrap_or(Value::Null);
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| {
                    Some((
                        m.get("node_id")?.as_str()?.to_string(),
                        m.get("status")?.as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Status of `id` as seen by node `k`.
pub async fn status_of(c: &TestCluster, k: usize, id: &str) -> Option<String> {
    members(c, k)
        .await
        .into_iter()
        .find(|(n, _)| n == id)
        .map(|(_, s)| s)
}

/// A key-value put command.
pub fn put(key: &str, value: &str) -> ControlRequest {
    ControlRequest::Write {
        command: serde_json::json!({"op": "put", "key": key, "value": value}),
    }
}

/// A read of every key.
pub fn read_all() -> ControlRequest {
    ControlRequest::Read {
        query: serde_json::json!({"op": "all"}),
    }
}
