//! `darosctl delete app NAME` and `darosctl delete node NAME`.

use std::io::Write;

use hyper::Method;

use super::CliError;
use super::apply::render_write;
use super::get::{app_path, expect_query, resolve};
use super::output::{OutputFormat, print};
use crate::api::apps::WriteResult;
use crate::client::Client;

/// Arguments of `darosctl delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// What to delete.
    #[command(subcommand)]
    pub what: DeleteWhat,
}

/// Objects.
#[derive(Debug, clap::Subcommand)]
pub enum DeleteWhat {
    /// An application (its instances are stopped).
    #[command(alias = "apps", alias = "application")]
    App {
        /// Application name (or TENANT/NAME).
        name: String,
        /// Tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Delete it only if it is at this version (else: conflict, exit 1).
        #[arg(long, value_name = "N")]
        expect_version: Option<u32>,
    },
    /// A node that is gone: declared and never registered, or Down with
    /// nothing placed on it (an alive node is refused: stop its agent first).
    #[command(alias = "nodes")]
    Node {
        /// Node name.
        name: String,
    },
}

/// Runs `darosctl delete`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: DeleteArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match a.what {
        DeleteWhat::App {
            name,
            tenant,
            expect_version,
        } => {
            let key = resolve(client, &name, tenant.as_deref()).await?;
            let path = format!("{}{}", app_path(&key), expect_query(expect_version));
            let r: WriteResult = client.send(Method::DELETE, &path, None).await?;
            print(out, fmt, &r, || render_write(&format!("deleted {key}"), &r))?;
        }
        DeleteWhat::Node { name } => {
            let path = format!("/v1/nodes/{}", crate::client::encode_id(&name));
            let r: WriteResult = client.send(Method::DELETE, &path, None).await?;
            print(out, fmt, &r, || {
                render_write(&format!("deleted node {name}"), &r)
            })?;
        }
    }
    Ok(())
}
