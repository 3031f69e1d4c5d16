//! `darosctl get apps`.

use std::io::Write;

use daros_coordinator::{AppKey, AppSummary};

use super::CliError;
use super::output::{OutputFormat, Table, print};
use crate::client::{Client, ClientError};

/// Arguments of `darosctl get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// What to list.
    #[command(subcommand)]
    pub what: GetWhat,
}

/// Lists.
#[derive(Debug, clap::Subcommand)]
pub enum GetWhat {
    /// Applications with phase, version and ready instances.
    #[command(alias = "app", alias = "applications")]
    Apps,
    /// Nodes registered with the coordinator.
    #[command(alias = "node")]
    Nodes,
    /// Tenants with what their applications hold.
    #[command(alias = "tenant")]
    Tenants,
    /// Policies.
    #[command(alias = "policy")]
    Policies,
    /// Resource pools with their nodes.
    #[command(alias = "pool")]
    Pools,
    /// A tenant's Configs with their keys.
    #[command(alias = "config")]
    Configs {
        /// Tenant.
        #[arg(long)]
        tenant: String,
    },
    /// Volumes of the storage trait on this node.
    #[command(alias = "volume")]
    Volumes,
    /// An application's workflow steps with their status.
    #[command(alias = "workflows")]
    Workflow {
        /// Application (`tenant/name`, or a name).
        name: String,
        /// Tenant of the application.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// A tenant's Secrets with their keys (values are never shown).
    #[command(alias = "secret")]
    Secrets {
        /// Tenant.
        #[arg(long)]
        tenant: String,
    },
}

/// `GET /v1/apps`.
pub async fn apps(client: &Client) -> Result<Vec<AppSummary>, ClientError> {
    client.get("/v1/apps").await
}

/// The application named `name` (`tenant/name`, or a name with `--tenant`, or a
/// name unique across tenants).
pub async fn resolve(
    client: &Client,
    name: &str,
    tenant: Option<&str>,
) -> Result<AppKey, CliError> {
    if let Some(k) = AppKey::parse(name) {
        return Ok(k);
    }
    if let Some(t) = tenant {
        return Ok(AppKey::new(t, name));
    }
    let found: Vec<AppKey> = apps(client)
        .await?
        .into_iter()
        .map(|s| s.app)
        .filter(|k| k.name == name)
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Ok(AppKey::new("default", name)),
        many => Err(CliError::Other(format!(
            "{name} exists in several tenants ({}); use --tenant or tenant/name",
            many.iter()
                .map(|k| k.tenant.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// `?expectVersion=N` for a change conditional on the application's version.
pub fn expect_query(version: Option<u32>) -> String {
    version.map_or_else(String::new, |v| format!("?expectVersion={v}"))
}

/// Path of an application's routes.
pub fn app_path(k: &AppKey) -> String {
    format!(
        "/v1/apps/{}/{}",
        crate::client::encode_id(&k.tenant),
        crate::client::encode_id(&k.name)
    )
}

/// Runs `darosctl get`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: GetArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match a.what {
        GetWhat::Nodes => {
            let list: Vec<crate::control::state::NodeView> = client.get("/v1/nodes").await?;
            print(out, fmt, &list, || {
                let mut t = Table::new(
                    &[
                        "NAME",
                        "STATUS",
                        "CPU",
                        "MEMORY",
                        "GPU",
                        "RUNTIMES",
                        "SCHEDULABLE",
                    ],
                    &[false, false, true, true, true, false, false],
                );
                for v in &list {
                    let n = &v.node;
                    let status = match v.down_since {
                        _ if !v.registered => "NotYetSeen".into(),
                        Some(t) => format!("Down since {}", super::output::local_time(t)),
                        None => match &v.pressure {
                            Some(p) => format!("Ready, under pressure ({})", p.detail),
                            None => "Ready".into(),
                        },
                    };
                    t.row(vec![
                        n.name.clone(),
                        status,
                        n.capacity.cpu.to_string(),
                        super::output::bytes(n.capacity.memory.0),
                        n.capacity.gpu.0.to_string(),
                        n.runtimes
                            .iter()
                            .map(|r| format!("{r:?}").to_lowercase())
                            .collect::<Vec<_>>()
                            .join(","),
                        if !v.registered {
                            "no (no agent registered it)".into()
                        } else if let Some(d) = &v.drain {
                            match d.complete {
                                Some(_) => "no (drained)".into(),
                                None => format!(
                                    "no (draining: {} moving, {} waiting)",
                                    d.moving.len(),
                                    d.waiting.len()
                                ),
                            }
                        } else if !n.schedulable {
                            "no (cordoned)".into()
                        } else if v.down_since.is_some() {
                            "no (down)".into()
                        } else {
                            "yes".into()
                        },
                    ]);
                }
                t.render()
            })?;
        }
        GetWhat::Tenants => {
            let list: Vec<crate::control::state::TenantView> = client.get("/v1/tenants").await?;
            print(out, fmt, &list, || {
                let mut t = Table::new(
                    &["NAME", "APPS", "INSTANCES", "CPU", "MEMORY", "QUOTA"],
                    &[false, true, true, true, true, false],
                );
                for v in &list {
                    t.row(vec![
                        v.tenant.name.clone(),
                        v.usage.apps.to_string(),
                        v.usage.workloads.to_string(),
                        daros_coordinator::MilliCpu(v.usage.request.cpu).to_string(),
                        super::output::bytes(v.usage.request.memory),
                        serde_json::to_string(&v.tenant.quota).unwrap_or_default(),
                    ]);
                }
                t.render()
            })?;
        }
        GetWhat::Policies => {
            let list: Vec<daros_coordinator::model::policy::Policy> =
                client.get("/v1/policies").await?;
            print(out, fmt, &list, || {
                let mut t = Table::new(&["NAME", "SCOPE", "RULES"], &[false, false, false]);
                for p in &list {
                    t.row(vec![
                        p.name.clone(),
                        serde_json::to_string(&p.scope).unwrap_or_default(),
                        serde_json::to_string(&p.rules).unwrap_or_default(),
                    ]);
                }
                t.render()
            })?;
        }
        GetWhat::Pools => {
            let list: Vec<crate::control::state::PoolView> = client.get("/v1/pools").await?;
            print(out, fmt, &list, || {
                let mut t = Table::new(
                    &["NAME", "NODES", "CPU", "MEMORY", "SELECTOR"],
                    &[false, true, true, true, false],
                );
                for p in &list {
                    t.row(vec![
                        p.pool.name.clone(),
                        p.nodes.len().to_string(),
                        daros_coordinator::MilliCpu(p.capacity.cpu).to_string(),
                        super::output::bytes(p.capacity.memory),
                        serde_json::to_string(&p.pool.selector).unwrap_or_default(),
                    ]);
                }
                t.render()
            })?;
        }
        GetWhat::Workflow { name, tenant } => {
            let key = resolve(client, &name, tenant.as_deref()).await?;
            let d: daros_coordinator::AppDescription = client.get(&app_path(&key)).await?;
            if d.workflow.is_empty() {
                return Err(CliError::Other(format!(
                    "{key} has no workflow (its workloads deploy by their dependsOn)"
                )));
            }
            print(out, fmt, &d.workflow, || {
                let mut t = Table::new(
                    &["STEP", "TYPE", "GROUP", "PHASE", "RUNS", "NODE", "MESSAGE"],
                    &[false, false, false, false, true, false, false],
                );
                for s in &d.workflow {
                    t.row(vec![
                        s.name.clone(),
                        s.kind.clone(),
                        s.group.clone().unwrap_or_default(),
                        s.phase.clone(),
                        s.attempts.to_string(),
                        s.node.clone().unwrap_or_default(),
                        s.message.clone(),
                    ]);
                }
                let mut text = t.render();
                if d.workflow_suspended {
                    text.push_str("(suspended: `darosctl operate NAME resume`)\n");
                }
                text
            })?;
        }
        GetWhat::Volumes => {
            let list: Vec<crate::runtime::volumes::VolumeInfo> = client.get("/v1/volumes").await?;
            print(out, fmt, &list, || {
                let mut t = Table::new(
                    &["ID", "SIZE", "ON DISK", "MOUNTED AT"],
                    &[false, true, true, false],
                );
                for v in &list {
                    t.row(vec![
                        v.id.clone(),
                        super::output::bytes(v.size_bytes),
                        super::output::bytes(v.allocated_bytes),
                        v.mounted_at.clone().unwrap_or_else(|| "-".into()),
                    ]);
                }
                t.render()
            })?;
        }
        GetWhat::Configs { tenant } => {
            let path = format!("/v1/tenants/{}/configs", crate::client::encode_id(&tenant));
            let list: Vec<daros_coordinator::model::config::Config> = client.get(&path).await?;
            print(out, fmt, &list, || {
                let mut t = Table::new(&["NAME", "KEYS"], &[false, false]);
                for c in &list {
                    t.row(vec![
                        c.name.clone(),
                        c.data.keys().cloned().collect::<Vec<_>>().join(","),
                    ]);
                }
                t.render()
            })?;
        }
        GetWhat::Secrets { tenant } => {
            let path = format!("/v1/tenants/{}/secrets", crate::client::encode_id(&tenant));
            let list: Vec<daros_coordinator::state::objects::SecretView> =
                client.get(&path).await?;
            print(out, fmt, &list, || {
                let mut t = Table::new(&["NAME", "KEYS"], &[false, false]);
                for s in &list {
                    t.row(vec![s.name.clone(), s.keys.join(",")]);
                }
                t.render()
            })?;
        }
        GetWhat::Apps => {
            let list = apps(client).await?;
            print(out, fmt, &list, || {
                let mut t = Table::new(
                    &[
                        "TENANT", "NAME", "PHASE", "VERSION", "READY", "PRIORITY", "POOL", "REASON",
                    ],
                    &[false, false, false, true, true, true, false, false],
                );
                for s in &list {
                    t.row(vec![
                        s.app.tenant.clone(),
                        s.app.name.clone(),
                        s.phase.to_string(),
                        s.version.to_string(),
                        format!("{}/{}", s.ready, s.instances),
                        s.priority.to_string(),
                        s.pool.clone(),
                        s.reason.clone(),
                    ]);
                }
                if t.is_empty() {
                    "no applications\n".into()
                } else {
                    t.render()
                }
            })?;
        }
    }
    Ok(())
}
