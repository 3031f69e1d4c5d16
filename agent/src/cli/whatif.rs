//! `darosctl what-if -f FILE`: predicts applying documents; changes nothing.

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
pub struct WhatIfArgs {
    /// File with YAML or JSON documents (`-` reads standard input).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
}

/// Runs `darosctl what-if`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: WhatIfArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let text = read_documents(&a.file)?;
    let r: WhatIfReport = client.send_text(Method::POST, "/v1/whatif", text).await?;
    print(out, fmt, &r, || r.render())?;
    Ok(())
}
