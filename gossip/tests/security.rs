//! A host without a valid certificate or gossip key can neither join, nor read the gossip, nor
//! command: real processes in network namespaces, the outsider being a probe process on its
//! own host of the test network.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;

use common::{DEADLINE, members, program, read_all, require_netns};
use daros_gossip::control::ControlRequest;
use daros_gossip::testing::{GOSSIP_PORT, RPC_PORT, TestCluster};
use serde_json::Value;

const PROBE: &str = env!("CARGO_BIN_EXE_daros-mesh-probe");
const NODE: &str = env!("CARGO_BIN_EXE_daros-mesh-node");

fn run_json(c: &TestCluster, host: usize, program: &str, args: &[String]) -> Value {
    let out = c.exec_in(host, Path::new(program), args).unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs a join from the outsider host; returns (succeeded, stderr).
fn try_join(c: &TestCluster, outsider: usize, node: &str, token: &str) -> (bool, String) {
    let dir = c.dir().join(format!("outsider-{node}-{}", token.len()));
    let args: Vec<String> = [
        "join",
        "--data-dir",
        dir.to_str().unwrap(),
        "--node-id",
        node,
        "--server",
        &format!("{}:{RPC_PORT}", c.net().ip(0)),
        "--token",
        token,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = c.exec_in(outsider, Path::new(NODE), &args).unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn replace_field(token: &str, field: usize, value: &str) -> String {
    let mut p: Vec<&str> = token.split('.').collect();
    p[field] = value;
    p.join(".")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outsiders_cannot_join_read_gossip_or_command() {
    require_netns();
    // s1 (server), c1 (client agent), host 2 = outsider without credentials.
    let mut c = TestCluster::new(program(), 1, 1, 1, common::TIMING).unwrap();
    let outsider = 2;
    let tap: SocketAddr = format!("{}:{GOSSIP_PORT}", c.net().ip(outsider))
        .parse()
        .unwrap();
    // The nodes gossip to the outsider's address as a seed, so it receives real gossip.
    for k in 0..2 {
        c.spec_mut(k).seeds.push(tap);
    }
    c.form(DEADLINE).await.unwrap();
    c.ctl_ok(1, &common::put("secret", "42")).await.unwrap();

    // --- cannot read or inject gossip ---
    let key_file: Value = serde_json::from_str(
        &std::fs::read_to_string(c.spec(0).data_dir.join("pki/node.json")).unwrap(),
    )
    .unwrap();
    let real_key = key_file["gossip_keys"][0]["key"]
        .as_str()
        .unwrap()
        .to_string();
    let g = run_json(
        &c,
        outsider,
        PROBE,
        &[
            "gossip".into(),
            "--listen".into(),
            tap.to_string(),
            "--target".into(),
            c.spec(0).gossip_addr().to_string(),
            "--cluster-id".into(),
            c.tokens.cluster_id.clone(),
            // Long enough for a member's periodic announce to a seed that is not up (8.4 s).
            "--seconds".into(),
            "10".into(),
            "--control-key-hex".into(),
            real_key,
        ],
    );
    println!("gossip probe: {g}");
    let tap_r = &g["tap"];
    let received = tap_r["received"].as_u64().unwrap();
    assert!(received > 0, "the nodes never gossiped to the tap: {g}");
    // Every captured datagram is real gossip (opens with the cluster key) ...
    assert_eq!(
        tap_r["opened_with_real_key"].as_u64().unwrap(),
        received,
        "{g}"
    );
    // ... and none of it is readable without the key.
    assert_eq!(tap_r["decoded_as_plain_chitchat"], 0, "{g}");
    assert_eq!(tap_r["opened_with_wrong_key"], 0, "{g}");
    // Intruders that gossip (plaintext, or sealed with a wrong key) learn nothing ...
    assert_eq!(g["plaintext_intruder_sees"], serde_json::json!([]), "{g}");
    assert_eq!(g["wrong_key_intruder_sees"], serde_json::json!([]), "{g}");
    // ... are not taken as members, and their datagrams are counted as refused.
    for k in 0..2 {
        let m = members(&c, k).await;
        assert!(
            m.iter().all(|(id, _)| !id.starts_with("intruder")),
            "node {k}: {m:?}"
        );
        assert_eq!(m.len(), 2, "node {k}: {m:?}");
    }
    let stats = c.ctl_ok(0, &ControlRequest::Stats).await.unwrap();
    assert!(stats["rejected_total"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats["rejected_auth"].as_u64().unwrap() > 0, "{stats}");

    // --- cannot call or command without a cluster certificate ---
    let ca = c.spec(0).data_dir.join("pki/ca.crt");
    for (target, node) in [(0usize, "s1"), (1, "c1")] {
        for mode in ["none", "foreign"] {
            let r = run_json(
                &c,
                outsider,
                PROBE,
                &[
                    "rpc".into(),
                    "--target".into(),
                    format!("{}:{RPC_PORT}", c.net().ip(target)),
                    "--node".into(),
                    node.into(),
                    "--ca-cert".into(),
                    ca.display().to_string(),
                    "--cluster-id".into(),
                    c.tokens.cluster_id.clone(),
                    "--mode".into(),
                    mode.into(),
                ],
            );
            println!("rpc probe {node} {mode}: {r}");
            for call in r["results"].as_array().unwrap() {
                assert_eq!(call["ok"], false, "{node} {mode}: {call}");
                let code = call["code"].as_str().unwrap();
                match mode {
                    // Reached the server, refused for lack of identity.
                    "none" => assert_eq!(code, "unauthenticated", "{call}"),
                    // A foreign certificate fails the handshake: seen at the first read.
                    _ => assert!(matches!(code, "transport" | "unreachable"), "{call}"),
                }
            }
        }
    }
    let state = c.ctl_ok(0, &read_all()).await.unwrap();
    assert_eq!(state, serde_json::json!({"secret": "42"}));
    let fence = c.ctl_ok(1, &ControlRequest::Fence).await.unwrap();
    assert!(fence["term"].as_u64().unwrap() < 1 << 40, "{fence}");

    // --- cannot join without a valid token ---
    let token = c.tokens.client_token.clone();
    let (ok, err) = try_join(
        &c,
        outsider,
        "x1",
        &replace_field(&token, 2, &"ab".repeat(32)),
    );
    assert!(!ok && err.contains("join refused"), "wrong secret: {err}");
    let (ok, err) = try_join(
        &c,
        outsider,
        "x2",
        &replace_field(&token, 3, &"cd".repeat(32)),
    );
    assert!(
        !ok && err.contains("pinned by the join token"),
        "wrong CA pin: {err}"
    );
    let (ok, err) = try_join(&c, outsider, "x3", &replace_field(&token, 1, "server"));
    assert!(
        !ok && err.contains("not valid for role server"),
        "role escalation: {err}"
    );
    let (ok, err) = try_join(&c, outsider, "c1", &token);
    assert!(
        !ok && err.contains("in use by a live member"),
        "duplicate id: {err}"
    );
    // The genuine token works (the refusals above were about the credentials, not the path).
    let (ok, err) = try_join(&c, outsider, "x4", &token);
    assert!(ok, "valid join failed: {err}");
}
