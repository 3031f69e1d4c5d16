//! `darosctl describe app NAME`: phase, events, versions, instances.

use std::io::Write;

use daros_coordinator::AppDescription;

use super::CliError;
use super::get::{app_path, resolve};
use super::output::{OutputFormat, print};
use crate::client::Client;

/// Arguments of `darosctl describe`.
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// What to describe.
    #[command(subcommand)]
    pub what: DescribeWhat,
}

/// Objects.
#[derive(Debug, clap::Subcommand)]
pub enum DescribeWhat {
    /// An application (NAME or TENANT/NAME).
    #[command(alias = "apps", alias = "application")]
    App {
        /// Application name.
        name: String,
        /// Tenant (default: the only tenant having an application of that name, else `default`).
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// Runs `darosctl describe`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: DescribeArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let DescribeWhat::App { name, tenant } = a.what;
    let key = resolve(client, &name, tenant.as_deref()).await?;
    let d: AppDescription = client.get(&app_path(&key)).await?;
    print(out, fmt, &d, || d.render_with(&super::output::local_time))?;
    Ok(())
}
