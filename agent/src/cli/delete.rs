//! `darosctl delete app|node|tenant|policy|pool NAME`.

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
    /// A tenant (refused while it has applications).
    #[command(alias = "tenants")]
    Tenant {
        /// Tenant name.
        name: String,
    },
    /// A policy.
    #[command(alias = "policies")]
    Policy {
        /// Policy name.
        name: String,
    },
    /// A resource pool (refused while an application or tenant uses it).
    #[command(alias = "pools")]
    Pool {
        /// Pool name.
        name: String,
    },
    /// A volume of this node and its data (refused while its instance runs).
    #[command(alias = "volumes")]
    Volume {
        /// Volume id (`darosctl get volumes`).
        id: String,
    },
    /// A tenant's Config (refused while a workload reads it).
    #[command(alias = "configs")]
    Config {
        /// Config name.
        name: String,
        /// Tenant.
        #[arg(long)]
        tenant: String,
    },
    /// A tenant's Secret (refused while a workload reads it).
    #[command(alias = "secrets")]
    Secret {
        /// Secret name.
        name: String,
        /// Tenant.
        #[arg(long)]
        tenant: String,
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
        DeleteWhat::Node { name } => remove(client, fmt, out, "nodes", "node", &name).await?,
        DeleteWhat::Tenant { name } => remove(client, fmt, out, "tenants", "tenant", &name).await?,
        DeleteWhat::Policy { name } => {
            remove(client, fmt, out, "policies", "policy", &name).await?
        }
        DeleteWhat::Pool { name } => remove(client, fmt, out, "pools", "pool", &name).await?,
        DeleteWhat::Volume { id } => {
            let path = format!("/v1/volumes/{}", crate::client::encode_id(&id));
            let left: Vec<crate::runtime::volumes::VolumeInfo> =
                client.send(Method::DELETE, &path, None).await?;
            print(out, fmt, &left, || format!("deleted volume {id}\n"))?;
        }
        DeleteWhat::Config { name, tenant } => {
            let collection = format!("tenants/{}/configs", crate::client::encode_id(&tenant));
            remove(client, fmt, out, &collection, "config", &name).await?
        }
        DeleteWhat::Secret { name, tenant } => {
            let collection = format!("tenants/{}/secrets", crate::client::encode_id(&tenant));
            remove(client, fmt, out, &collection, "secret", &name).await?
        }
    }
    Ok(())
}

/// `DELETE /v1/<collection>/<name>`, said as "deleted <kind> <name>".
async fn remove(
    client: &Client,
    fmt: OutputFormat,
    out: &mut impl Write,
    collection: &str,
    kind: &str,
    name: &str,
) -> Result<(), CliError> {
    let path = format!("/v1/{collection}/{}", crate::client::encode_id(name));
    let r: WriteResult = client.send(Method::DELETE, &path, None).await?;
    print(out, fmt, &r, || {
        render_write(&format!("deleted {kind} {name}"), &r)
    })?;
    Ok(())
}
