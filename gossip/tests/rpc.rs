//! The QUIC RPC layer end to end on loopback: mutual TLS, access by certificate role,
//! request/response and server-push, size limits, wire version, fencing, and the join.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use daros_gossip::config::MeshConfig;
use daros_gossip::fence::FenceToken;
use daros_gossip::join::{init_cluster, join_cluster, pki_dir};
use daros_gossip::kv::{KvCommand, KvState};
use daros_gossip::mesh::{Mesh, MeshHandle};
use daros_gossip::pki::{ClusterCa, JoinToken, NodeCredentials};
use daros_gossip::rpc::{Access, CallContext, ErrorCode, PushSink, Request, RpcClient, Target};
use daros_gossip::{NodeId, Role, tls};
use serde_json::{Value, json};

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn config(dir: &Path, seeds: Vec<SocketAddr>, bootstrap: bool) -> MeshConfig {
    let mut c = MeshConfig::new(
        dir,
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
    );
    c.seeds = seeds;
    c.bootstrap = bootstrap;
    c.max_frame = 1 << 20;
    c
}

struct Pair {
    _dir: tempfile::TempDir,
    server: MeshHandle<KvState>,
    client: MeshHandle<KvState>,
    server_cfg: MeshConfig,
    server_creds: NodeCredentials,
    client_creds: NodeCredentials,
}

async fn pair() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let sdir = dir.path().join("s1");
    let cdir = dir.path().join("c1");
    init_cluster(&sdir, "t", &NodeId::new("s1").unwrap()).unwrap();
    let ca = ClusterCa::load(&pki_dir(&sdir)).unwrap();
    ca.issue_local(&NodeId::new("c1").unwrap(), Role::Client)
        .unwrap()
        .save(&pki_dir(&cdir))
        .unwrap();
    let server_cfg = config(&sdir, vec![], true);
    let server = Mesh::start(server_cfg.clone(), KvState::default())
        .await
        .unwrap();
    let client = Mesh::start(
        config(&cdir, vec![server_cfg.gossip_addr()], false),
        KvState::default(),
    )
    .await
    .unwrap();
    for h in [&server, &client] {
        h.handle("test.echo", Access::Member, |ctx: CallContext, body: Value| async move {
            Ok(json!({"body": body, "peer": ctx.peer}))
        });
        h.handle("test.servers_only", Access::Server, |_c, _b| async move {
            Ok(Value::Null)
        });
        h.handle_command("test.cmd", |ctx: CallContext, _b| async move {
            Ok(json!({"fence": ctx.fence}))
        });
        h.handle_stream(
            "test.count",
            Access::Member,
            |_c, body: Value, sink: PushSink| async move {
                for i in 0..body["n"].as_u64().unwrap_or(0) {
                    sink.send(json!(i)).await?;
                }
                Ok(())
            },
        );
    }
    // Wait until the client sees the server in gossip (addresses come from there).
    for _ in 0..100 {
        if client
            .members()
            .await
            .iter()
            .any(|m| m.node_id.as_str() == "s1")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Pair {
        server_creds: NodeCredentials::load(&pki_dir(&sdir)).unwrap(),
        client_creds: NodeCredentials::load(&pki_dir(&cdir)).unwrap(),
        _dir: dir,
        server,
        client,
        server_cfg,
    }
}

fn raw_client(creds: Option<&NodeCredentials>, ca: &NodeCredentials, max: usize) -> RpcClient {
    let cfg = tls::client_config_parts(
        ca.ca_der().unwrap(),
        creds.map(|c| (vec![c.cert_der().unwrap()], c.key_der().unwrap())),
    )
    .unwrap();
    let ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    RpcClient::new(ep, cfg, max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_streams_and_authorization_by_certificate() {
    let p = pair().await;
    let s1 = NodeId::new("s1").unwrap();
    let c1 = NodeId::new("c1").unwrap();
    // Request/response: the handler sees the caller's verified identity.
    let r = p
        .client
        .call(&s1, "test.echo", json!({"x": 1}))
        .await
        .unwrap();
    assert_eq!(r["body"]["x"], 1);
    assert_eq!(r["peer"]["node_id"], "c1");
    assert_eq!(r["peer"]["role"], "client");
    // Role-based access: a client agent may not call server-only methods.
    let e = p
        .client
        .call(&s1, "test.servers_only", Value::Null)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("for server agents"), "{e}");
    p.server.call(&c1, "test.echo", Value::Null).await.unwrap();
    let e = p
        .client
        .call(&s1, "no.such.method", Value::Null)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no method"), "{e}");

    // Server-push stream.
    let mut sub = p
        .client
        .subscribe(&s1, "test.count", json!({"n": 5}))
        .await
        .unwrap();
    let mut got = Vec::new();
    while let Some(item) = sub.next().await {
        got.push(item.unwrap().as_u64().unwrap());
    }
    assert_eq!(got, vec![0, 1, 2, 3, 4]);

    // Writes from a client agent are forwarded to the leader; reads are linearizable.
    let w = p
        .client
        .write(KvCommand::Put {
            key: "k".into(),
            value: "v".into(),
        })
        .await
        .unwrap();
    assert!(w.at.index > 0);
    let v = p
        .client
        .read(daros_gossip::kv::KvQuery::Get { key: "k".into() })
        .await
        .unwrap();
    assert_eq!(v, daros_gossip::kv::KvAnswer::Value(Some("v".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_are_limited_and_versioned() {
    let p = pair().await;
    let t = Target::new(p.server_cfg.rpc_addr(), "s1");
    // A client allowed to send 8 MiB meets a server limited to 1 MiB: refused, by the server.
    let big = raw_client(Some(&p.client_creds), &p.server_creds, 8 << 20);
    let body = json!({"blob": "x".repeat(2 << 20)});
    let e = big
        .call(
            &t,
            &Request::new("test.echo", body),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::TooLarge, "{e}");
    assert!(e.message.contains("exceeds the 1048576 byte limit"), "{e}");
    // The connection stays usable for well-sized calls.
    big.call(
        &t,
        &Request::new("test.echo", json!(1)),
        Duration::from_secs(5),
    )
    .await
    .unwrap();

    // A frame of another wire version is answered with unsupported_version.
    let cfg = tls::client_config(&p.client_creds).unwrap();
    let ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = ep.connect_with(cfg, t.addr, "s1").unwrap().await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let payload = br#"{"method":"test.echo","body":1}"#;
    let mut frame = vec![9u8];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    send.write_all(&frame).await.unwrap();
    send.finish().unwrap();
    let reply: daros_gossip::rpc::Reply = daros_gossip::rpc::frame::read(&mut recv, 1 << 20)
        .await
        .unwrap()
        .unwrap();
    match reply {
        daros_gossip::rpc::Reply::Err { error } => {
            assert_eq!(error.code, ErrorCode::UnsupportedVersion, "{error}")
        }
        other => panic!("version 9 accepted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_commands_need_a_server_identity_and_a_current_term() {
    let p = pair().await;
    let c1 = NodeId::new("c1").unwrap();
    // The coordinator's command carries its (term, index).
    let r = p
        .server
        .command(&c1, "test.cmd", Value::Null)
        .await
        .unwrap();
    let term = r["fence"]["term"].as_u64().unwrap();
    assert!(term >= 1);
    assert_eq!(p.client.fence_highest().term, term);
    // A client agent cannot command; a command needs a fence.
    let t = Target::new(
        p.client
            .members()
            .await
            .iter()
            .find(|m| m.node_id == c1)
            .unwrap()
            .rpc_addr
            .unwrap(),
        "c1",
    );
    let as_server = raw_client(Some(&p.server_creds), &p.server_creds, 1 << 20);
    let as_client = raw_client(Some(&p.client_creds), &p.server_creds, 1 << 20);
    let fenced = |term: u64| Request {
        method: "test.cmd".into(),
        fence: Some(FenceToken { term, index: 1 }),
        body: Value::Null,
    };
    let e = as_client
        .call(&t, &fenced(term), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Forbidden, "{e}");
    let e = as_server
        .call(
            &t,
            &Request::new("test.cmd", Value::Null),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::FenceRequired, "{e}");
    // A newer term is accepted and recorded; the older one is then refused explicitly.
    as_server
        .call(&t, &fenced(term + 5), Duration::from_secs(5))
        .await
        .unwrap();
    let e = as_server
        .call(&t, &fenced(term), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::StaleTerm, "{e}");
    assert_eq!(e.detail.unwrap()["highest_term"], term + 5);
    // Anonymous callers reach the port but nothing beyond the join.
    let anon = raw_client(None, &p.server_creds, 1 << 20);
    let e = anon
        .call(
            &t,
            &Request::new("test.echo", Value::Null),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unauthenticated, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_issues_certificates_only_for_valid_tokens() {
    let p = pair().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = ClusterCa::load(&pki_dir(&p.server_cfg.data_dir)).unwrap();
    let server = p.server_cfg.rpc_addr();
    let good: JoinToken = ca.join_token(Role::Client).unwrap();
    let mut bad = good.clone();
    bad.secret[0] ^= 1;
    let e = join_cluster(
        &dir.path().join("a"),
        &NodeId::new("a").unwrap(),
        server,
        &bad,
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("join refused"), "{e}");
    let mut pinned = good.clone();
    pinned.ca_fingerprint[0] ^= 1;
    let e = join_cluster(
        &dir.path().join("b"),
        &NodeId::new("b").unwrap(),
        server,
        &pinned,
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("pinned by the join token"), "{e}");
    // A valid token: a client certificate, no CA key.
    let creds = join_cluster(
        &dir.path().join("c"),
        &NodeId::new("c").unwrap(),
        server,
        &good,
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(creds.role, Role::Client);
    assert!(!ClusterCa::exists(&pki_dir(&dir.path().join("c"))));
    // A server token: a server certificate and the CA material, stored 0600.
    let st = ca.join_token(Role::Server).unwrap();
    let sc = join_cluster(
        &dir.path().join("s"),
        &NodeId::new("s9").unwrap(),
        server,
        &st,
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(sc.role, Role::Server);
    let again = ClusterCa::load(&pki_dir(&dir.path().join("s"))).unwrap();
    again.verify_token(&good).unwrap();
    // Joining twice into the same data dir is refused.
    let e = join_cluster(
        &dir.path().join("c"),
        &NodeId::new("c").unwrap(),
        server,
        &good,
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("already holds credentials"), "{e}");
}
