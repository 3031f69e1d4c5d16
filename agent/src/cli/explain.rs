//! `darosctl explain NAME`: the latest decision of an application, explained.

use std::io::Write;

use daros_coordinator::Explanation;

use super::CliError;
use super::get::{app_path, resolve};
use super::output::{OutputFormat, print};
use crate::client::Client;

/// Arguments of `darosctl explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// Application name (or TENANT/NAME).
    pub name: String,
    /// Tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Decision number (default: the latest).
    #[arg(long)]
    pub decision: Option<u64>,
}

/// Runs `darosctl explain`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: ExplainArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let key = resolve(client, &a.name, a.tenant.as_deref()).await?;
    let mut path = format!("{}/explain", app_path(&key));
    if let Some(d) = a.decision {
        path.push_str(&format!("?decision={d}"));
    }
    let e: Explanation = client.get(&path).await?;
    print(out, fmt, &e, || e.render_with(&super::output::local_time))?;
    Ok(())
}
