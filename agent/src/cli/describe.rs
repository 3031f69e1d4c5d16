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
    /// A policy: what is in force and its versions.
    #[command(alias = "policies")]
    Policy {
        /// Policy name.
        name: String,
    },
}

/// Runs `darosctl describe`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: DescribeArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match a.what {
        DescribeWhat::App { name, tenant } => {
            let key = resolve(client, &name, tenant.as_deref()).await?;
            let d: AppDescription = client.get(&app_path(&key)).await?;
            print(out, fmt, &d, || d.render_with(&super::output::local_time))?;
        }
        DescribeWhat::Policy { name } => {
            let path = format!("/v1/policies/{}", crate::client::encode_id(&name));
            let v: crate::control::state::PolicyView = client.get(&path).await?;
            print(out, fmt, &v, || {
                let mut o = match &v.policy {
                    Some(p) => format!(
                        "policy {name} in force: scope {}, rules {}\n",
                        serde_json::to_string(&p.scope).unwrap_or_default(),
                        serde_json::to_string(&p.rules).unwrap_or_default()
                    ),
                    None => format!("policy {name}: deleted\n"),
                };
                o.push_str("versions:\n");
                for ver in &v.versions {
                    let what = match &ver.policy {
                        Some(p) => serde_json::to_string(&p.rules).unwrap_or_default(),
                        None => "deleted".into(),
                    };
                    let origin = ver
                        .rollback_of
                        .map(|r| format!(" (rollback to {r})"))
                        .unwrap_or_default();
                    o.push_str(&format!(
                        "  {:>3}  {}  {what}{origin}\n",
                        ver.version,
                        super::output::local_time(ver.time)
                    ));
                }
                o
            })?;
        }
    }
    Ok(())
}
