//! Standalone mesh node: the mesh library with the key-value state machine, a local control
//! socket, and a fenced demo command. The multi-node tests launch it until darosd embeds the mesh.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use daros_gossip::NodeId;
use daros_gossip::config::MeshConfig;
use daros_gossip::control::{self, ControlClient, ControlRequest, ControlResponse};
use daros_gossip::join::{self, pki_dir};
use daros_gossip::kv::KvState;
use daros_gossip::membership::{LocalInfo, Resources};
use daros_gossip::mesh::Mesh;
use daros_gossip::pki::{JoinToken, NodeCredentials};
use daros_gossip::raft::RaftTiming;
use daros_gossip::rpc::{Access, CallContext, RpcError};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "daros-mesh-node",
    version,
    about = "D-AROS mesh node (standalone)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a cluster (CA, gossip key, join tokens) on this server node; prints the tokens.
    Init {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        node_id: NodeId,
        #[arg(long)]
        cluster_id: String,
    },
    /// Print the join tokens (server nodes).
    Tokens {
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Join a cluster through a server agent and store the credentials.
    Join {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        node_id: NodeId,
        #[arg(long)]
        server: SocketAddr,
        #[arg(long)]
        token: String,
    },
    /// Run the node until `leave` on the control socket or SIGTERM.
    Run(Box<RunArgs>),
    /// Send one JSON request to a node's control socket and print the answer.
    Ctl {
        #[arg(long)]
        control: PathBuf,
        /// Request, e.g. '{"op":"status"}'.
        request: String,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    #[arg(long)]
    data_dir: PathBuf,
    #[arg(long)]
    rpc_listen: SocketAddr,
    #[arg(long)]
    rpc_advertise: Option<SocketAddr>,
    #[arg(long)]
    gossip_listen: SocketAddr,
    #[arg(long)]
    gossip_advertise: Option<SocketAddr>,
    /// Gossip seed (repeatable).
    #[arg(long = "seed")]
    seeds: Vec<SocketAddr>,
    /// Form a one-member raft cluster if never initialized (the first server).
    #[arg(long)]
    bootstrap: bool,
    /// Join through this server agent first if the data dir has no credentials.
    #[arg(long)]
    join: Option<SocketAddr>,
    #[arg(long)]
    token: Option<String>,
    /// Node id (needed with --join).
    #[arg(long)]
    node_id: Option<NodeId>,
    /// Control socket path.
    #[arg(long)]
    control: PathBuf,
    #[arg(long, default_value_t = 500)]
    gossip_interval_ms: u64,
    #[arg(long, default_value_t = RaftTiming::default().heartbeat_ms)]
    heartbeat_ms: u64,
    #[arg(long, default_value_t = RaftTiming::default().election_min_ms)]
    election_min_ms: u64,
    #[arg(long, default_value_t = RaftTiming::default().election_max_ms)]
    election_max_ms: u64,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn,foca=warn,quinn=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Init {
            data_dir,
            node_id,
            cluster_id,
        } => {
            let out = join::init_cluster(&data_dir, &cluster_id, &node_id)?;
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        Cmd::Tokens { data_dir } => {
            println!(
                "{}",
                serde_json::to_string_pretty(&join::tokens(&data_dir)?)?
            );
        }
        Cmd::Join {
            data_dir,
            node_id,
            server,
            token,
        } => {
            let token: JoinToken = token.parse()?;
            let creds =
                join::join_cluster(&data_dir, &node_id, server, &token, Duration::from_secs(10))
                    .await?;
            println!(
                "{}",
                json!({"node_id": creds.node_id, "role": creds.role, "cluster_id": creds.cluster_id})
            );
        }
        Cmd::Ctl { control, request } => {
            let req: ControlRequest =
                serde_json::from_str(&request).context("control request JSON")?;
            let resp = ControlClient::new(control).request(&req).await?;
            println!("{}", serde_json::to_string_pretty(&resp)?);
            if matches!(resp, ControlResponse::Error { .. }) {
                return Ok(ExitCode::FAILURE);
            }
        }
        Cmd::Run(args) => run_node(*args).await?,
    }
    Ok(ExitCode::SUCCESS)
}

fn local_info() -> LocalInfo {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024);
    let capacity = Resources {
        cpu_millicores: cpus * 1000,
        memory_bytes: mem,
        gpus: 0,
        net_mbps: 0,
    };
    LocalInfo {
        allocatable: capacity.clone(),
        capacity,
        runtimes: vec!["process".into()],
        agent_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

async fn run_node(a: RunArgs) -> anyhow::Result<()> {
    if !NodeCredentials::exist(&pki_dir(&a.data_dir)) {
        let (Some(server), Some(token), Some(node)) = (a.join, &a.token, &a.node_id) else {
            bail!(
                "{} has no credentials: run `init`, or pass --join, --token and --node-id",
                a.data_dir.display()
            );
        };
        let token: JoinToken = token.parse()?;
        join::join_cluster(&a.data_dir, node, server, &token, Duration::from_secs(10)).await?;
    }
    let mut cfg = MeshConfig::new(&a.data_dir, a.rpc_listen, a.gossip_listen);
    cfg.rpc_advertise = a.rpc_advertise;
    cfg.gossip_advertise = a.gossip_advertise;
    cfg.seeds = a.seeds;
    cfg.bootstrap = a.bootstrap;
    cfg.gossip_interval = Duration::from_millis(a.gossip_interval_ms);
    cfg.raft = RaftTiming {
        heartbeat_ms: a.heartbeat_ms,
        election_min_ms: a.election_min_ms,
        election_max_ms: a.election_max_ms,
    };
    let mesh = Mesh::start(cfg, KvState::default()).await?;
    let me = mesh.node_id().clone();
    // Demo agent command: fenced, answers with what it accepted.
    let me2 = me.clone();
    mesh.handle_command("agent.echo", move |ctx: CallContext, body: Value| {
        let me = me2.clone();
        async move {
            Ok::<_, RpcError>(
                json!({ "node": me, "fence": ctx.fence, "from": ctx.peer, "body": body }),
            )
        }
    });
    mesh.handle(
        "agent.ping",
        Access::Member,
        move |ctx: CallContext, _b: Value| async move {
            Ok::<_, RpcError>(json!({ "pong": true, "peer": ctx.peer }))
        },
    );
    let watcher = mesh.clone();
    mesh.handle_stream(
        "agent.watch_members",
        Access::Member,
        move |_ctx, body: Value, sink: daros_gossip::rpc::PushSink| {
            let m = watcher.clone();
            async move {
                let n = body.get("count").and_then(Value::as_u64).unwrap_or(3);
                for _ in 0..n {
                    let members = serde_json::to_value(m.members().await)
                        .map_err(|e| RpcError::internal(e.to_string()))?;
                    sink.send(members).await?;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(())
            }
        },
    );
    mesh.set_local_info(&local_info()).await;

    let ctl = tokio::spawn({
        let path = a.control.clone();
        let m = mesh.clone();
        async move { control::serve(&path, m).await }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tracing::info!(node = %me, control = %a.control.display(), "node ready");
    tokio::select! {
        r = ctl => {
            r.context("control task")??;
            tracing::info!("left the cluster");
        }
        _ = term.recv() => {
            tracing::info!("SIGTERM: leaving the cluster");
            mesh.leave().await;
        }
    }
    let _ = std::fs::remove_file(&a.control);
    Ok(())
}
