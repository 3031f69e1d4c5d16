//! Outsider probe: acts as a host on the network without valid credentials and reports what it
//! could read or do. Used by the security tests; useful to operators to check a cluster refuses
//! unauthenticated traffic.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chitchat::transport::UdpTransport;
use chitchat::{ChitchatConfig, ChitchatHandle, ChitchatId, Deserializable, FailureDetectorConfig};
use clap::{Parser, Subcommand, ValueEnum};
use daros_gossip::membership::{GossipKey, Keyring, SealStats, SealedUdpTransport};
use daros_gossip::rpc::{Request, RpcClient, Target};
use daros_gossip::{NodeId, Role};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "daros-mesh-probe",
    about = "Probe a D-AROS mesh as an outsider"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Listen for gossip sent to `--listen` (make it a seed of the nodes) and try to join the
    /// gossip of `--target` with a plaintext and a wrong-key chitchat instance.
    Gossip {
        /// Tap address; the next two ports host the intruders.
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        target: SocketAddr,
        #[arg(long)]
        cluster_id: String,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// The real key (hex), only to prove the captured datagrams are real gossip.
        #[arg(long)]
        control_key_hex: Option<String>,
    },
    /// Call RPC methods without a valid certificate.
    Rpc {
        #[arg(long)]
        target: SocketAddr,
        /// Node id of the target (TLS server name).
        #[arg(long)]
        node: String,
        /// The cluster CA certificate (public) so that the server is trusted.
        #[arg(long)]
        ca_cert: PathBuf,
        #[arg(long)]
        cluster_id: String,
        #[arg(long, value_enum)]
        mode: Mode,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    /// No client certificate.
    None,
    /// A certificate from a self-made CA claiming to be server `s1`.
    Foreign,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<Value> {
    match cli.cmd {
        Cmd::Gossip {
            listen,
            target,
            cluster_id,
            seconds,
            control_key_hex,
        } => gossip(listen, target, cluster_id, seconds, control_key_hex).await,
        Cmd::Rpc {
            target,
            node,
            ca_cert,
            cluster_id,
            mode,
        } => rpc(target, node, ca_cert, cluster_id, mode).await,
    }
}

async fn intruder(
    id: &str,
    listen: SocketAddr,
    target: SocketAddr,
    cluster_id: &str,
    transport: &dyn chitchat::transport::Transport,
) -> anyhow::Result<ChitchatHandle> {
    let config = ChitchatConfig {
        chitchat_id: ChitchatId::new(id, 1, listen),
        cluster_id: cluster_id.to_string(),
        gossip_interval: Duration::from_millis(100),
        listen_addr: listen,
        seed_nodes: vec![target.to_string()],
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: Duration::from_secs(60),
        catchup_callback: None,
        extra_liveness_predicate: None,
    };
    // Claim a server role with an RPC address, as a member would.
    let kv = vec![
        ("role".to_string(), "server".to_string()),
        ("rpc".to_string(), format!("{}:7100", listen.ip())),
    ];
    chitchat::spawn_chitchat(config, kv, transport).await
}

async fn known_nodes(h: &ChitchatHandle, me: &str) -> Vec<String> {
    h.with_chitchat(|c| {
        c.node_states()
            .keys()
            .map(|id| id.node_id.to_string())
            .filter(|n| n != me)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    })
    .await
}

async fn gossip(
    listen: SocketAddr,
    target: SocketAddr,
    cluster_id: String,
    seconds: u64,
    control_key_hex: Option<String>,
) -> anyhow::Result<Value> {
    let tap = tokio::net::UdpSocket::bind(listen)
        .await
        .context("tap socket")?;
    let plain_addr = SocketAddr::new(listen.ip(), listen.port() + 1);
    let keyed_addr = SocketAddr::new(listen.ip(), listen.port() + 2);
    let plain = intruder(
        "intruder-plain",
        plain_addr,
        target,
        &cluster_id,
        &UdpTransport,
    )
    .await?;
    let wrong = Keyring::new(&GossipKey::generate(1), &[]);
    let wrong_transport = SealedUdpTransport::new(wrong.clone(), Arc::new(SealStats::default()));
    let keyed = intruder(
        "intruder-key",
        keyed_addr,
        target,
        &cluster_id,
        &wrong_transport,
    )
    .await?;
    let real = match control_key_hex {
        Some(hex) => {
            let key: GossipKey =
                serde_json::from_value(json!({"epoch": 1, "key": hex})).context("control key")?;
            Some(Keyring::new(&key, &[]))
        }
        None => None,
    };
    let (mut received, mut bytes, mut plain_decoded, mut wrong_opened, mut real_opened) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut buf = vec![0u8; 65_536];
    let end = Instant::now() + Duration::from_secs(seconds);
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        let Ok(Ok((n, _from))) = tokio::time::timeout(left, tap.recv_from(&mut buf)).await else {
            break;
        };
        received += 1;
        bytes += n as u64;
        let mut cursor: &[u8] = &buf[..n];
        if chitchat::ChitchatMessage::deserialize(&mut cursor).is_ok() {
            plain_decoded += 1;
        }
        if wrong.open(&buf[..n]).is_ok() {
            wrong_opened += 1;
        }
        if real.as_ref().is_some_and(|k| k.open(&buf[..n]).is_ok()) {
            real_opened += 1;
        }
    }
    let plain_seen = known_nodes(&plain, "intruder-plain").await;
    let keyed_seen = known_nodes(&keyed, "intruder-key").await;
    Ok(json!({
        "tap": {
            "received": received,
            "bytes": bytes,
            "decoded_as_plain_chitchat": plain_decoded,
            "opened_with_wrong_key": wrong_opened,
            "opened_with_real_key": real_opened,
        },
        "plaintext_intruder_sees": plain_seen,
        "wrong_key_intruder_sees": keyed_seen,
    }))
}

fn foreign_identity(
    cluster_id: &str,
) -> anyhow::Result<(
    Vec<CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
)> {
    let ca = daros_gossip::pki::ClusterCa::init(cluster_id)?;
    let creds = ca.issue_local(&NodeId::new("s1")?, Role::Server)?;
    Ok((vec![creds.cert_der()?], creds.key_der()?))
}

async fn rpc(
    target: SocketAddr,
    node: String,
    ca_cert: PathBuf,
    cluster_id: String,
    mode: Mode,
) -> anyhow::Result<Value> {
    let pem = std::fs::read(&ca_cert).with_context(|| ca_cert.display().to_string())?;
    let ca = CertificateDer::from_pem_slice(&pem).context("CA certificate")?;
    let identity = match mode {
        Mode::None => None,
        Mode::Foreign => Some(foreign_identity(&cluster_id)?),
    };
    let cfg = daros_gossip::tls::client_config_parts(ca, identity)?;
    let endpoint = quinn::Endpoint::client((std::net::Ipv4Addr::UNSPECIFIED, 0).into())?;
    let client = RpcClient::new(endpoint, cfg, 1 << 20);
    let t = Target::new(target, node);
    let fence = daros_gossip::fence::FenceToken {
        term: 1 << 40,
        index: 1,
    };
    let calls = vec![
        Request::new("mesh.status", Value::Null),
        Request::new(
            "mesh.propose",
            json!({"op": "put", "key": "pwned", "value": "1"}),
        ),
        Request::new("mesh.query", json!({"op": "all"})),
        Request::new("raft.vote", json!({})),
        Request {
            method: "agent.echo".into(),
            fence: Some(fence),
            body: json!({"pwned": true}),
        },
    ];
    let mut results = Vec::new();
    for req in calls {
        let r = client.call(&t, &req, Duration::from_secs(3)).await;
        results.push(match r {
            Ok(v) => json!({"method": req.method, "ok": true, "body": v}),
            Err(e) => {
                json!({"method": req.method, "ok": false, "code": e.code, "message": e.message})
            }
        });
    }
    Ok(json!({ "results": results }))
}
