//! `darosctl cordon NODE`, `darosctl uncordon NODE` and `darosctl drain
//! NODE` (also as `darosctl node cordon|uncordon|drain NODE`): a cordoned
//! node takes no new work (what runs there stays); the cordon outlives its
//! agent's restarts. A drain cordons it and moves its instances elsewhere,
//! each workload within its rollout budget; `--wait` follows it to the end.

use std::io::Write;

use hyper::Method;

use super::CliError;
use super::apply::render_write;
use super::output::{OutputFormat, print};
use crate::api::apps::WriteResult;
use crate::client::Client;
use crate::control::state::NodeView;

/// Arguments of `darosctl cordon` and `uncordon`.
#[derive(Debug, clap::Args)]
pub struct CordonArgs {
    /// Node name (`darosctl get nodes`).
    pub node: String,
}

/// Arguments of `darosctl drain`.
#[derive(Debug, clap::Args)]
pub struct DrainArgs {
    /// Node name (`darosctl get nodes`).
    pub node: String,
    /// Wait until nothing movable runs on the node any more.
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this long (with `--wait`), e.g. `90s`, `5m`.
    #[arg(long, default_value = "5m")]
    pub timeout: daros_coordinator::model::time::DurationMs,
}

/// Verbs of `darosctl node` on a cluster node.
#[derive(Debug, clap::Subcommand)]
pub enum NodeVerb {
    /// Cordon: the node takes no new work; what runs there stays.
    Cordon(CordonArgs),
    /// Uncordon: it takes new work again (ends a drain).
    Uncordon(CordonArgs),
    /// Drain: cordon and move its instances elsewhere.
    Drain(DrainArgs),
}

/// Runs `darosctl node VERB NODE`.
pub async fn node(
    client: &Client,
    fmt: OutputFormat,
    verb: NodeVerb,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match verb {
        NodeVerb::Cordon(c) => run(client, fmt, c, true, out).await,
        NodeVerb::Uncordon(c) => run(client, fmt, c, false, out).await,
        NodeVerb::Drain(d) => drain(client, fmt, d, out).await,
    }
}

/// Drains the node; with `--wait`, follows it until it is complete.
pub async fn drain(
    client: &Client,
    fmt: OutputFormat,
    a: DrainArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let path = format!("/v1/nodes/{}/drain", crate::client::encode_id(&a.node));
    let r: WriteResult = client.send(Method::POST, &path, None).await?;
    if !a.wait {
        print(out, fmt, &r, || {
            render_write(&format!("draining node {}", a.node), &r)
        })?;
        return Ok(());
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(a.timeout.0);
    let mut last = Vec::new();
    loop {
        let nodes: Vec<NodeView> = client.get("/v1/nodes").await?;
        let d = nodes
            .into_iter()
            .find(|n| n.node.name == a.node)
            .and_then(|n| n.drain)
            .ok_or_else(|| {
                CliError::Other(format!(
                    "node {} is not draining any more (uncordoned?)",
                    a.node
                ))
            })?;
        if d.complete.is_some() {
            print(out, fmt, &d, || {
                format!("node {} drained: {} instance(s) moved\n", a.node, d.moved)
            })?;
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::Other(format!(
                "node {} not drained after {}; waiting: {}",
                a.node,
                a.timeout,
                d.moving
                    .iter()
                    .chain(&d.waiting)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
        if d.waiting != last {
            for w in &d.waiting {
                tracing::info!(node = %a.node, "waiting: {w}");
            }
            last = d.waiting;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Cordons (`cordon = true`) or uncordons the node.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: CordonArgs,
    cordon: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let verb = if cordon { "cordon" } else { "uncordon" };
    let path = format!("/v1/nodes/{}/{verb}", crate::client::encode_id(&a.node));
    let r: WriteResult = client.send(Method::POST, &path, None).await?;
    print(out, fmt, &r, || {
        render_write(&format!("{verb}ed node {}", a.node), &r)
    })?;
    Ok(())
}
