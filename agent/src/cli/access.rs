//! `darosctl access`: role bindings and bearer tokens (issue 15).
//! `list`; `bind NAME --principal P --role R [--tenant T]`; `unbind NAME`;
//! `token issue --principal P [--expires 30d]` (prints the secret once);
//! `token revoke ID`.

use std::io::Write;

use daros_coordinator::access::Role;
use daros_coordinator::model::time::DurationMs;
use hyper::Method;
use serde_json::json;

use super::CliError;
use super::apply::render_write;
use super::output::{OutputFormat, Table, print};
use crate::api::apps::WriteResult;
use crate::api::audit::Issued;
use crate::client::Client;
use crate::control::state::AccessView;

/// Arguments of `darosctl access`.
#[derive(Debug, clap::Args)]
pub struct AccessArgs {
    /// What to do.
    #[command(subcommand)]
    pub verb: AccessVerb,
}

/// Verbs of `darosctl access`.
#[derive(Debug, clap::Subcommand)]
pub enum AccessVerb {
    /// Role bindings and tokens.
    List,
    /// Bind a role to a principal, everywhere or in one tenant.
    Bind {
        /// Binding name.
        name: String,
        /// `user:alice`, `uid:1001`, `node:n2`, `root`.
        #[arg(long)]
        principal: String,
        /// PlatformAdmin, TenantAdmin, Developer, Operator or Viewer.
        #[arg(long, value_parser = parse_role)]
        role: Role,
        /// The tenant it holds in (everywhere when unset).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Remove a role binding.
    Unbind {
        /// Binding name.
        name: String,
    },
    /// Bearer tokens.
    #[command(subcommand)]
    Token(TokenVerb),
}

/// `darosctl access token`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenVerb {
    /// Issue a token for a principal; prints its secret (shown this once).
    Issue {
        /// What it acts as (`user:ci`).
        #[arg(long)]
        principal: String,
        /// Lifetime (`12h`, `30d`); until revoked when unset.
        #[arg(long)]
        expires: Option<DurationMs>,
    },
    /// Revoke a token.
    Revoke {
        /// Token id.
        id: String,
    },
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::ALL
        .into_iter()
        .find(|r| r.to_string().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            format!("{s:?}: one of PlatformAdmin, TenantAdmin, Developer, Operator, Viewer")
        })
}

/// Runs `darosctl access`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: AccessArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match a.verb {
        AccessVerb::List => {
            let v: AccessView = client.get("/v1/access").await?;
            print(out, fmt, &v, || {
                let mut t = Table::new(&["BINDING", "PRINCIPAL", "ROLE", "TENANT"], &[false; 4]);
                for b in &v.bindings {
                    t.row(vec![
                        b.name.clone(),
                        b.principal.clone(),
                        b.role.to_string(),
                        b.tenant.clone().unwrap_or_else(|| "*".into()),
                    ]);
                }
                let mut s = t.render();
                if !v.tokens.is_empty() {
                    let mut k =
                        Table::new(&["TOKEN", "PRINCIPAL", "EXPIRES", "REVOKED"], &[false; 4]);
                    for tk in &v.tokens {
                        let at = |t: Option<daros_coordinator::Timestamp>| {
                            t.map_or("-".into(), |t| crate::control::cloud_events::rfc3339(t.0))
                        };
                        k.row(vec![
                            tk.id.clone(),
                            tk.principal.clone(),
                            at(tk.expires),
                            at(tk.revoked),
                        ]);
                    }
                    s.push('\n');
                    s.push_str(&k.render());
                }
                s
            })?;
        }
        AccessVerb::Bind {
            name,
            principal,
            role,
            tenant,
        } => {
            let body =
                json!({"name": name, "principal": principal, "role": role, "tenant": tenant});
            let r: WriteResult = client
                .send(Method::POST, "/v1/access/bindings", Some(&body))
                .await?;
            print(out, fmt, &r, || {
                render_write(&format!("role binding {name}"), &r)
            })?;
        }
        AccessVerb::Unbind { name } => {
            let path = format!("/v1/access/bindings/{}", crate::client::encode_id(&name));
            let r: WriteResult = client.send(Method::DELETE, &path, None).await?;
            print(out, fmt, &r, || {
                render_write(&format!("role binding {name} removed"), &r)
            })?;
        }
        AccessVerb::Token(TokenVerb::Issue { principal, expires }) => {
            let body =
                json!({"principal": principal, "expiresInSeconds": expires.map(|d| d.0 / 1000)});
            let r: Issued = client
                .send(Method::POST, "/v1/access/tokens", Some(&body))
                .await?;
            print(out, fmt, &r, || {
                format!(
                    "token {} for {} (shown once; pass it as --token or DAROS_API_TOKEN):\n{}\n",
                    r.id, r.principal, r.token
                )
            })?;
        }
        AccessVerb::Token(TokenVerb::Revoke { id }) => {
            let path = format!("/v1/access/tokens/{}", crate::client::encode_id(&id));
            let r: WriteResult = client.send(Method::DELETE, &path, None).await?;
            print(out, fmt, &r, || {
                render_write(&format!("token {id} revoked"), &r)
            })?;
        }
    }
    Ok(())
}
