//! `darosctl`: the command line for the local agent. One file per subcommand;
//! every command supports `-o json` and `-o yaml`.

pub mod access;
pub mod apply;
pub mod audit;
pub mod caps;
pub mod cluster;
pub mod completions;
pub mod cordon;
pub mod delete;
pub mod describe;
pub mod explain;
pub mod get;
pub mod logs;
pub mod man;
pub mod members;
pub mod net;
pub mod node;
pub mod output;
pub mod qos;
pub mod rollback;
pub mod top;
pub mod whatif;
pub mod workloads;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::client::{Client, ClientError};
use output::{OutputError, OutputFormat};

/// Default socket of the local agent.
pub const DEFAULT_SOCKET: &str = "/run/daros/agent.sock";

/// Command line of `darosctl`.
#[derive(Debug, Parser)]
#[command(
    name = "darosctl",
    version,
    about = "Inspect the local D-AROS agent (darosd) over its unix socket",
    after_help = "Exit status: 0 success, 1 error, 2 usage error, 3 not found, 4 darosd unreachable."
)]
pub struct Cli {
    /// Socket of the local darosd.
    #[arg(long, global = true, env = "DAROS_API_SOCKET", default_value = DEFAULT_SOCKET, value_name = "PATH")]
    pub socket: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Bearer token (`daros-tk.<id>.<secret>`, from `darosctl access token
    /// issue`) to act as its principal instead of the socket's uid.
    #[arg(
        long,
        global = true,
        env = "DAROS_API_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show this node (CPU, memory, disks, network, pressure, GPUs, agent),
    /// or `node cordon|uncordon|drain NODE` on a cluster node.
    Node(node::NodeArgs),
    /// List workloads, or show one by id.
    Workloads(workloads::WorkloadsArgs),
    /// Live per-workload table, redrawn every interval.
    Top(top::TopArgs),
    /// Show what the host offers: cgroup mode and controllers, PSI, eBPF, GPU.
    Caps(caps::CapsArgs),
    /// QoS classes and floors: set, get, unset, protection events.
    Qos(qos::QosArgs),
    /// eBPF datapath: status, events, and `cleanup` (removes every pin; no agent needed).
    Net(net::NetArgs),
    /// Apply YAML/JSON documents (tenants, policies, pools, nodes, applications).
    Apply(apply::ApplyArgs),
    /// List objects: `get apps`.
    Get(get::GetArgs),
    /// Describe an object: `describe app NAME`.
    Describe(describe::DescribeArgs),
    /// Explain an application's latest (or a given) decision.
    Explain(explain::ExplainArgs),
    /// Predict what applying documents would do; changes nothing.
    #[command(name = "what-if")]
    WhatIf(whatif::WhatIfArgs),
    /// Delete an object: `delete app|node|tenant|policy|pool NAME`.
    Delete(delete::DeleteArgs),
    /// Cordon a node: it takes no new work; what runs there stays.
    Cordon(cordon::CordonArgs),
    /// Uncordon a node: it takes new work again (ends a drain).
    Uncordon(cordon::CordonArgs),
    /// Drain a node: cordon it and move its instances elsewhere, each
    /// workload within its rollout budget.
    Drain(cordon::DrainArgs),

    /// Return an application to an earlier version (as a new version).
    Rollback(rollback::RollbackArgs),
    /// Operate on an application: start, stop, restore, retry, abort (a rollout), scale.
    Operate(rollback::OperateArgs),
    /// Workload logs: `logs tenant/app/workload [-f] [--tail N]`.
    Logs(logs::LogsArgs),
    /// Mesh members and their liveness.
    Members(members::MembersArgs),
    /// Cluster status, join tokens, raft servers.
    Cluster(cluster::ClusterArgs),
    /// Who may do what: role bindings and bearer tokens.
    Access(access::AccessArgs),
    /// The audit trail (`audit report` for a summary per tenant).
    Audit(audit::AuditArgs),
    /// Print a shell completion script.
    Completions(completions::CompletionsArgs),
    /// Print the man page (or write all pages to a directory).
    Man(man::ManArgs),
}

/// Errors of `darosctl`.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Talking to darosd failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Printing failed.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl CliError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Client(ClientError::Api { status: 404, .. }) => 3,
            CliError::Client(ClientError::Connect { .. } | ClientError::Timeout(_)) => 4,
            _ => 1,
        }
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    let client = Client::new(cli.socket.clone()).with_token(cli.token.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Other(format!("starting runtime: {e}")))?;
    let out = &mut std::io::stdout().lock();
    match cli.command {
        Command::Node(a) => rt.block_on(node::run(&client, cli.output, a, out)),
        Command::Workloads(a) => rt.block_on(workloads::run(&client, cli.output, a, out)),
        Command::Top(a) => rt.block_on(top::run(&client, cli.output, a, out)),
        Command::Caps(a) => rt.block_on(caps::run(&client, cli.output, a, out)),
        Command::Qos(a) => rt.block_on(qos::run(&client, cli.output, a, out)),
        Command::Net(a) => rt.block_on(net::run(&client, cli.output, a, out)),
        Command::Apply(a) => rt.block_on(apply::run(&client, cli.output, a, out)),
        Command::Get(a) => rt.block_on(get::run(&client, cli.output, a, out)),
        Command::Describe(a) => rt.block_on(describe::run(&client, cli.output, a, out)),
        Command::Explain(a) => rt.block_on(explain::run(&client, cli.output, a, out)),
        Command::WhatIf(a) => rt.block_on(whatif::run(&client, cli.output, a, out)),
        Command::Delete(a) => rt.block_on(delete::run(&client, cli.output, a, out)),
        Command::Cordon(a) => rt.block_on(cordon::run(&client, cli.output, a, true, out)),
        Command::Uncordon(a) => rt.block_on(cordon::run(&client, cli.output, a, false, out)),
        Command::Drain(a) => rt.block_on(cordon::drain(&client, cli.output, a, out)),
        Command::Rollback(a) => rt.block_on(rollback::run(&client, cli.output, a, out)),
        Command::Operate(a) => rt.block_on(rollback::operate(&client, cli.output, a, out)),
        Command::Logs(a) => rt.block_on(logs::run(&client, cli.output, a, out)),
        Command::Members(a) => rt.block_on(members::run(&client, cli.output, a, out)),
        Command::Cluster(a) => rt.block_on(cluster::run(&client, cli.output, a, out)),
        Command::Access(a) => rt.block_on(access::run(&client, cli.output, a, out)),
        Command::Audit(a) => rt.block_on(audit::run(&client, cli.output, a, out)),
        Command::Completions(a) => completions::run(a, out),
        Command::Man(a) => man::run(a, out),
    }
}
