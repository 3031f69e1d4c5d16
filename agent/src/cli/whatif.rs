//! `darosctl what-if -f FILE`: predicts applying documents; `darosctl
//! what-if --node-loss NODE` / `--drain NODE`: predicts losing or draining a
//! node. Changes nothing.

use std::io::Write;
use std::path::PathBuf;

use daros_coordinator::WhatIfReport;
use hyper::Method;

use super::CliError;
use super::apply::read_documents;
use super::output::{OutputFormat, print};
use crate::client::Client;

/// Arguments of `darosctl what-if`.
#[derive(Debug, clap::Args)]
#[group(id = "what", required = true, multiple = false)]
pub struct WhatIfArgs {
    /// File with YAML or JSON documents (`-` reads standard input).
    #[arg(short = 'f', long = "filename", value_name = "FILE", group = "what")]
    pub file: Option<PathBuf>,
    /// Predict losing this node (silent past every instance's lostAfter).
    #[arg(long, value_name = "NODE", group = "what")]
    pub node_loss: Option<String>,
    /// Predict draining this node.
    #[arg(long, value_name = "NODE", group = "what")]
    pub drain: Option<String>,
}

/// Runs `darosctl what-if`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: WhatIfArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let node = |n: &str, event: &str| {
        format!(
            "/v1/nodes/{}/whatif?event={event}",
            crate::client::encode_id(n)
        )
    };
    let r: WhatIfReport = match (a.file, a.node_loss, a.drain) {
        (Some(f), _, _) => {
            let text = read_documents(&f)?;
            client.send_text(Method::POST, "/v1/whatif", text).await?
        }
        (_, Some(n), _) => client.get(&node(&n, "loss")).await?,
        (_, _, Some(n)) => client.get(&node(&n, "drain")).await?,
        (None, None, None) => {
            return Err(CliError::Other(
                "what-if needs -f FILE, --node-loss NODE or --drain NODE".into(),
            ));
        }
    };
    print(out, fmt, &r, || r.render())?;
    Ok(())
}
