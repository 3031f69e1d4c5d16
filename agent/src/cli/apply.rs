//! `darosctl apply -f FILE`: applies documents through the coordinator.

use std::io::{Read, Write};
use std::path::PathBuf;

use hyper::Method;

use super::CliError;
use super::output::{OutputFormat, print};
use crate::api::apps::WriteResult;
use crate::client::Client;

/// Arguments of `darosctl apply`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// File with YAML or JSON documents (`-` reads standard input).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Admit applications without starting them.
    #[arg(long)]
    pub no_start: bool,
    /// Apply only if the (one) application in the file is at this version (0: it
    /// does not exist yet); otherwise nothing changes and the conflict is reported.
    #[arg(long, value_name = "N")]
    pub expect_version: Option<u32>,
}

/// Reads `-f FILE` (or standard input for `-`).
pub fn read_documents(file: &PathBuf) -> Result<String, CliError> {
    if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| CliError::Other(format!("reading standard input: {e}")))?;
        return Ok(s);
    }
    std::fs::read_to_string(file)
        .map_err(|e| CliError::Other(format!("reading {}: {e}", file.display())))
}

/// Renders a write's outcome for people.
pub fn render_write(what: &str, r: &WriteResult) -> String {
    let mut s = format!("{what} (raft term {} index {})\n", r.term, r.index);
    for e in &r.outcome.events {
        s.push_str(&format!(
            "  event: {} {} -> {}: {}\n",
            e.app,
            e.from.map_or("-".to_string(), |p| p.to_string()),
            e.to,
            e.reason
        ));
    }
    for d in &r.outcome.decisions {
        s.push_str(&format!("  decision: {d}\n"));
    }
    for f in &r.outcome.refusals {
        s.push_str(&format!("  refused: {}: {}\n", f.app, f.reason));
    }
    for n in &r.outcome.notes {
        s.push_str(&format!("  note: {n}\n"));
    }
    s
}

/// Fails (exit 1) after printing when applications were refused.
pub fn refusals(r: &WriteResult) -> Result<(), CliError> {
    if r.outcome.refusals.is_empty() {
        Ok(())
    } else {
        Err(CliError::Other(format!(
            "{} application change(s) refused",
            r.outcome.refusals.len()
        )))
    }
}

/// Runs `darosctl apply`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: ApplyArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let text = read_documents(&a.file)?;
    let mut query = Vec::new();
    if a.no_start {
        query.push("start=false".to_string());
    }
    if let Some(v) = a.expect_version {
        query.push(format!("expectVersion={v}"));
    }
    let path = if query.is_empty() {
        "/v1/apps".to_string()
    } else {
        format!("/v1/apps?{}", query.join("&"))
    };
    let r: WriteResult = client.send_text(Method::POST, &path, text).await?;
    print(out, fmt, &r, || render_write("applied", &r))?;
    refusals(&r)
}
