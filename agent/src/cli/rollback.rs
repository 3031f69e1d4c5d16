//! `darosctl rollback NAME --to N`, and the application operations
//! (`darosctl operate NAME stop|start|restore|retry|scale`).

use std::io::Write;

use hyper::Method;
use serde_json::json;

use super::CliError;
use super::apply::render_write;
use super::get::{app_path, expect_query, resolve};
use super::output::{OutputFormat, print};
use crate::api::apps::WriteResult;
use crate::client::Client;

/// Arguments of `darosctl rollback`.
#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// Application name (or TENANT/NAME); with `--policy`, a policy name.
    pub name: String,
    /// NAME is a policy: write its version N again.
    #[arg(long, conflicts_with_all = ["tenant", "expect_version"])]
    pub policy: bool,
    /// Tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Version to return to (applied as a new version).
    #[arg(long = "to", value_name = "N")]
    pub to: u32,
    /// Roll back only if the application is at this version (else: conflict).
    #[arg(long, value_name = "N")]
    pub expect_version: Option<u32>,
}

/// Runs `darosctl rollback`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: RollbackArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let body = json!({ "version": a.to });
    if a.policy {
        let path = format!(
            "/v1/policies/{}/rollback",
            crate::client::encode_id(&a.name)
        );
        let r: WriteResult = client.send(Method::POST, &path, Some(&body)).await?;
        print(out, fmt, &r, || {
            render_write(
                &format!("policy {} rolled back to version {}", a.name, a.to),
                &r,
            )
        })?;
        return Ok(());
    }
    let key = resolve(client, &a.name, a.tenant.as_deref()).await?;
    let r: WriteResult = client
        .send(
            Method::POST,
            &format!(
                "{}/rollback{}",
                app_path(&key),
                expect_query(a.expect_version)
            ),
            Some(&body),
        )
        .await?;
    print(out, fmt, &r, || {
        render_write(&format!("{key} rolled back to version {}", a.to), &r)
    })?;
    Ok(())
}

/// Arguments of `darosctl operate`.
#[derive(Debug, clap::Args)]
pub struct OperateArgs {
    /// Application name (or TENANT/NAME).
    pub name: String,
    /// Tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Operate only if the application is at this version (else: conflict).
    #[arg(long, value_name = "N")]
    pub expect_version: Option<u32>,
    /// The operation.
    #[command(subcommand)]
    pub op: Operation,
}

/// Operations on an application.
#[derive(Debug, clap::Subcommand)]
pub enum Operation {
    /// Arbitrate and place an admitted application.
    Start,
    /// Stop it (Terminated).
    Stop,
    /// Leave Degraded: re-place evicted replicas.
    Restore,
    /// Run a failed application through admission again.
    Retry,
    /// Roll the rollout under way back to the version it started from.
    Abort,
    /// Let the canary of the rollout under way go on to every replica.
    Promote,
    /// Approve a workflow step waiting for approval.
    Approve {
        /// The step.
        step: String,
    },
    /// Start no further workflow step until resumed.
    Suspend,
    /// Resume a suspended workflow.
    Resume,
    /// Set a workload's replica count.
    Scale {
        /// Workload.
        workload: String,
        /// Replicas.
        replicas: u32,
    },
}

/// Runs `darosctl operate`.
pub async fn operate(
    client: &Client,
    fmt: OutputFormat,
    a: OperateArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let key = resolve(client, &a.name, a.tenant.as_deref()).await?;
    let body = match &a.op {
        Operation::Start => json!({"op": "start"}),
        Operation::Stop => json!({"op": "stop"}),
        Operation::Restore => json!({"op": "restore"}),
        Operation::Retry => json!({"op": "retry"}),
        Operation::Abort => json!({"op": "abort"}),
        Operation::Promote => json!({"op": "promote"}),
        Operation::Approve { step } => json!({"op": "approve", "step": step}),
        Operation::Suspend => json!({"op": "suspend"}),
        Operation::Resume => json!({"op": "resume"}),
        Operation::Scale { workload, replicas } => {
            json!({"op": "scale", "workload": workload, "replicas": replicas})
        }
    };
    let r: WriteResult = client
        .send(
            Method::POST,
            &format!(
                "{}/operations{}",
                app_path(&key),
                expect_query(a.expect_version)
            ),
            Some(&body),
        )
        .await?;
    print(out, fmt, &r, || {
        render_write(&format!("{key}: {}", a.op), &r)
    })?;
    Ok(())
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Operation::Start => f.write_str("start"),
            Operation::Stop => f.write_str("stop"),
            Operation::Restore => f.write_str("restore"),
            Operation::Retry => f.write_str("retry"),
            Operation::Abort => f.write_str("abort"),
            Operation::Promote => f.write_str("promote"),
            Operation::Approve { step } => write!(f, "approve step {step}"),
            Operation::Suspend => f.write_str("suspend the workflow"),
            Operation::Resume => f.write_str("resume the workflow"),
            Operation::Scale { workload, replicas } => {
                write!(f, "scale {workload} to {replicas} replica(s)")
            }
        }
    }
}
