//! `daros-adapter-harness`: a stand-in for darosd that drives the process
//! adapter, used by tests that kill the agent (`kill -9`) and start another
//! one on the same state directory.
//!
//! It opens the adapter (adopting what the state holds), creates and starts
//! every `--spec` file (a JSON `WorkloadInstanceSpec`), prints every
//! runtime event as one JSON line on stdout, and answers commands read
//! from stdin, one per line: `inspect <id>`, `stop <id> <grace-ms>`,
//! `destroy <id>`, `logs <id> <n>`. Replies are JSON lines too.
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use daros_adapters::adapter::{DestroyOptions, LogQuery, RuntimeAdapter};
use daros_adapters::instance::{RuntimeId, WorkloadInstanceSpec};
use daros_adapters::process::{ProcessAdapter, ProcessAdapterConfig};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Parser, Debug)]
#[command(about = "Drives the process adapter like darosd would (for tests)")]
struct Args {
    /// State directory of the adapter.
    #[arg(long)]
    state: PathBuf,
    /// Path of daros-shim (default: beside this binary).
    #[arg(long)]
    shim: Option<PathBuf>,
    /// Instance spec files (JSON) to create and start.
    #[arg(long)]
    spec: Vec<PathBuf>,
    /// Grace period of stops the adapter decides itself, in ms.
    #[arg(long, default_value_t = 2000)]
    grace_ms: u64,
}

fn out(v: &serde_json::Value) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{v}");
    let _ = o.flush();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let mut cfg = ProcessAdapterConfig::new(&args.state);
    if let Some(s) = args.shim {
        cfg.shim_path = s;
    }
    cfg.default_grace = Duration::from_millis(args.grace_ms);
    let (adapter, mut events) = ProcessAdapter::open(cfg)
        .await
        .context("opening the adapter")?;
    tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            out(&json!({ "event": ev }));
        }
    });
    for path in &args.spec {
        let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
        let spec: WorkloadInstanceSpec =
            serde_json::from_str(&text).with_context(|| path.display().to_string())?;
        let id = adapter.create(&spec).await?;
        adapter.start(&id).await?;
        out(&json!({ "started": id }));
    }
    out(&json!({ "harness": "ready", "pid": std::process::id() }));

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["inspect", id] => match id.parse::<RuntimeId>() {
                Ok(id) => adapter.inspect(&id).await.map(|s| json!({ "status": s })),
                Err(e) => Ok(json!({ "error": e.to_string() })),
            },
            ["stop", id, grace] => match (id.parse::<RuntimeId>(), grace.parse::<u64>()) {
                (Ok(id), Ok(g)) => adapter
                    .stop(&id, Duration::from_millis(g))
                    .await
                    .map(|()| json!({ "stopped": id })),
                _ => Ok(json!({ "error": "usage: stop <id> <grace-ms>" })),
            },
            ["destroy", id] => match id.parse::<RuntimeId>() {
                Ok(id) => adapter
                    .destroy(&id, DestroyOptions::default())
                    .await
                    .map(|()| json!({ "destroyed": id })),
                Err(e) => Ok(json!({ "error": e.to_string() })),
            },
            ["logs", id, n] => match (id.parse::<RuntimeId>(), n.parse::<usize>()) {
                (Ok(id), Ok(n)) => adapter
                    .logs(&id, LogQuery { tail: Some(n) })
                    .await
                    .map(|l| json!({ "logs": l })),
                _ => Ok(json!({ "error": "usage: logs <id> <n>" })),
            },
            _ => Ok(json!({ "error": format!("unknown command {line:?}") })),
        };
        out(&reply.unwrap_or_else(|e| json!({ "error": e.to_string() })));
    }
    // stdin closed: keep serving events until killed, as darosd would.
    std::future::pending::<()>().await;
    Ok(())
}
