//! `darosctl caps`.

use std::io::Write;
use std::time::Duration;

use super::CliError;
use super::output::{OutputError, OutputFormat, Table, print};
use crate::client::Client;
use crate::model::Capabilities;

/// Arguments of `darosctl caps`.
#[derive(Debug, clap::Args)]
pub struct CapsArgs {
    /// First measure the data directory's disk again for iocost's model (a
    /// bounded run of a few seconds; the new model is put in force and IO floor
    /// capacity taken from it follows). Needs platform-admin.
    #[arg(long)]
    pub calibrate_io: bool,
}

/// The longest a calibration may take: a fill of at most 10 s plus five
/// phases, on a busy disk.
const CALIBRATION_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `darosctl caps`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: CapsArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    if a.calibrate_io {
        let io = client
            .clone()
            .with_timeout(CALIBRATION_TIMEOUT)
            .calibrate_io()
            .await?;
        if fmt == OutputFormat::Table {
            writeln!(out, "measured again: {}\n", io.detail).map_err(OutputError::from)?;
        }
    }
    let c = client.capabilities().await?;
    print(out, fmt, &c, || render(&c))?;
    Ok(())
}

fn render(c: &Capabilities) -> String {
    let mut s = String::new();
    for l in &c.summary {
        s.push_str(l);
        s.push('\n');
    }
    let mut t = Table::new(
        &["CONTROLLER", "HIERARCHY", "USABLE", "PATH", "DETAIL"],
        &[false, false, false, false, false],
    );
    for ctl in &c.cgroup.controllers {
        t.row(vec![
            ctl.name.clone(),
            ctl.hierarchy.clone(),
            if ctl.usable { "yes" } else { "no" }.into(),
            ctl.path.clone().unwrap_or_else(|| "-".into()),
            ctl.detail.clone(),
        ]);
    }
    s.push('\n');
    s.push_str(&t.render());
    if let Some(m) = &c.cgroup.managed_root {
        s.push_str(&format!("\nmanaged root {}\n", m.path));
        for d in &m.dirs {
            s.push_str(&format!("  {d}\n"));
        }
        for n in &m.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
    }
    s
}
