//! `darosctl cluster status|init|join|add-server|remove-server`.

use std::io::Write;

use hyper::Method;
use serde_json::{Value, json};

use super::CliError;
use super::output::{OutputFormat, Table, print};
use crate::api::cluster::ClusterView;
use crate::client::Client;

/// Arguments of `darosctl cluster`.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// What to do.
    #[command(subcommand)]
    pub cmd: ClusterCmd,
}

/// Cluster subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterCmd {
    /// Leader, term, commit index and health of the servers.
    Status,
    /// Print the join tokens (the cluster is created when darosd first starts).
    Init,
    /// How to join another cluster (done at start with --join/--server).
    Join {
        /// Join token.
        token: Option<String>,
        /// Server agent RPC address.
        #[arg(long)]
        server: Option<String>,
    },
    /// Make a server agent (joined with a server token) a raft voter.
    AddServer {
        /// Node id.
        node: String,
        /// Its RPC address (default: from gossip).
        #[arg(long)]
        rpc_addr: Option<std::net::SocketAddr>,
    },
    /// Remove a server agent from the raft voters.
    RemoveServer {
        /// Node id.
        node: String,
    },
    /// Set how much history the coordinator keeps (a limit left out takes its default).
    Retention {
        /// Lifecycle events, all applications together (default 10000).
        #[arg(long)]
        events: Option<usize>,
        /// Decision records (default 2000).
        #[arg(long)]
        decisions: Option<usize>,
        /// Policy evaluations (default 2000).
        #[arg(long)]
        evaluations: Option<usize>,
        /// Versions per application (default 50; versions in use are kept).
        #[arg(long)]
        versions: Option<usize>,
        /// Audit records (default 100000; what goes is announced by a record).
        #[arg(long)]
        audit: Option<usize>,
    },
}

fn render_status(v: &ClusterView) -> String {
    let s = &v.status;
    let mut out = format!(
        "cluster {}  node {} ({})\nleader {}  term {}  commit index {}  applied {}  fence {}/{}\n\n",
        v.cluster_id,
        v.node_id,
        v.role,
        s.leader
            .as_ref()
            .map_or("none".to_string(), |l| l.to_string()),
        s.term,
        s.commit_index.map_or("-".into(), |i| i.to_string()),
        s.last_applied.map_or("-".into(), |i| i.to_string()),
        v.fence.term,
        v.fence.index,
    );
    let mut t = Table::new(
        &["SERVER", "RPC", "VOTER", "MATCHED", "GOSSIP", "HEALTHY"],
        &[false, false, false, true, false, false],
    );
    for p in &s.servers {
        t.row(vec![
            p.node_id.to_string(),
            p.rpc_addr.clone(),
            if p.voter { "yes" } else { "no" }.into(),
            p.matched_index.map_or("-".into(), |i| i.to_string()),
            p.gossip
                .map_or("-".into(), |g| format!("{g:?}").to_lowercase()),
            if p.healthy { "yes" } else { "no" }.into(),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// Runs `darosctl cluster`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: ClusterArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match a.cmd {
        ClusterCmd::Status => {
            let v: ClusterView = client.get("/v1/cluster").await?;
            print(out, fmt, &v, || render_status(&v))?;
        }
        ClusterCmd::Retention {
            events,
            decisions,
            evaluations,
            versions,
            audit,
        } => {
            let mut body = serde_json::Map::new();
            for (k, v) in [
                ("events", events),
                ("decisions", decisions),
                ("evaluations", evaluations),
                ("versions", versions),
                ("audit", audit),
            ] {
                if let Some(v) = v {
                    body.insert(k.into(), json!(v));
                }
            }
            let r: crate::api::apps::WriteResult = client
                .send(
                    Method::PUT,
                    "/v1/cluster/retention",
                    Some(&Value::Object(body)),
                )
                .await?;
            print(out, fmt, &r, || {
                crate::cli::apply::render_write("retention set", &r)
            })?;
        }
        ClusterCmd::Init => {
            let v: Value = client.send(Method::POST, "/v1/cluster/init", None).await?;
            print(out, fmt, &v, || {
                let f = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
                format!(
                    "cluster {}\nserver rpc address {}\nclient token: {}\nserver token: {}\njoin with: darosd --join TOKEN --server {}\n",
                    f("cluster_id"),
                    f("rpc_addr"),
                    f("client_token"),
                    f("server_token"),
                    f("rpc_addr")
                )
            })?;
        }
        ClusterCmd::Join { token, server } => {
            let body = json!({ "token": token, "server": server });
            let v: Value = client
                .send(Method::POST, "/v1/cluster/join", Some(&body))
                .await?;
            print(out, fmt, &v, || format!("{v}\n"))?;
        }
        ClusterCmd::AddServer { node, rpc_addr } => {
            let body = json!({ "node": node, "rpc_addr": rpc_addr });
            let v: Value = client
                .send(Method::POST, "/v1/cluster/servers", Some(&body))
                .await?;
            print(out, fmt, &v, || {
                format!("server {node} added to the voters\n")
            })?;
        }
        ClusterCmd::RemoveServer { node } => {
            let v: Value = client
                .send(
                    Method::DELETE,
                    &format!("/v1/cluster/servers/{}", crate::client::encode_id(&node)),
                    None,
                )
                .await?;
            print(out, fmt, &v, || format!("server {node} removed\n"))?;
        }
    }
    Ok(())
}
