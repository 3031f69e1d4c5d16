//! `darosctl cordon NODE` and `darosctl uncordon NODE`: a cordoned node
//! takes no new work (what runs there stays); the cordon outlives its
//! agent's restarts.

use std::io::Write;

use hyper::Method;

use super::CliError;
use super::apply::render_write;
use super::output::{OutputFormat, print};
use crate::api::apps::WriteResult;
use crate::client::Client;

/// Arguments of `darosctl cordon` and `uncordon`.
#[derive(Debug, clap::Args)]
pub struct CordonArgs {
    /// Node name (`darosctl get nodes`).
    pub node: String,
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
