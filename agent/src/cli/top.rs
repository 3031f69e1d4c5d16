//! `darosctl top`: a live per-workload table.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use super::CliError;
use super::output::{OutputError, OutputFormat, bytes, num};
use crate::client::Client;
use crate::config::duration::parse as parse_duration;
use crate::model::Workload;

/// Arguments of `darosctl top`.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// Refresh interval (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Stop after this many refreshes (default: run until interrupted).
    #[arg(long, short = 'n')]
    pub iterations: Option<u64>,
    /// Sort order.
    #[arg(long, value_enum, default_value_t = SortKey::Cpu)]
    pub sort: SortKey,
    /// Show at most this many workloads.
    #[arg(long)]
    pub limit: Option<usize>,
}

/// `--sort` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SortKey {
    /// CPU cores used, highest first.
    Cpu,
    /// Memory, highest first.
    Memory,
    /// IO bytes per second, highest first.
    Io,
    /// Id, ascending.
    Id,
}

fn key(w: &Workload, k: SortKey) -> f64 {
    let s = &w.sample;
    match k {
        SortKey::Cpu => s.cpu.as_ref().and_then(|c| c.usage_cores).unwrap_or(0.0),
        SortKey::Memory => s.memory.as_ref().map_or(0.0, |m| m.current_bytes as f64),
        SortKey::Io => {
            s.io.iter()
                .flatten()
                .map(|d| {
                    d.read_bytes_per_second.unwrap_or(0.0) + d.write_bytes_per_second.unwrap_or(0.0)
                })
                .sum()
        }
        SortKey::Id => 0.0,
    }
}

/// Runs `darosctl top`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: TopArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let tty = std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(a.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut i = 0u64;
    loop {
        tick.tick().await;
        let node = client.node().await?;
        let mut list = client.workloads(None).await?;
        if !matches!(a.sort, SortKey::Id) {
            list.workloads.sort_by(|x, y| {
                key(y, a.sort)
                    .total_cmp(&key(x, a.sort))
                    .then_with(|| x.id.cmp(&y.id))
            });
        }
        if let Some(l) = a.limit {
            list.workloads.truncate(l);
        }
        match fmt {
            OutputFormat::Json => {
                let line =
                    serde_json::to_string(&list).map_err(|e| OutputError::Encode(e.to_string()))?;
                writeln!(out, "{line}").map_err(OutputError::from)?;
            }
            OutputFormat::Yaml => {
                let doc = serde_yaml_ng::to_string(&list)
                    .map_err(|e| OutputError::Encode(e.to_string()))?;
                write!(out, "---\n{doc}").map_err(OutputError::from)?;
            }
            OutputFormat::Table => {
                let mut frame = String::new();
                if tty {
                    // Home the cursor and clear the screen before each frame.
                    frame.push_str("\x1b[H\x1b[2J");
                } else if i > 0 {
                    frame.push('\n');
                }
                frame.push_str(&format!(
                    "darosd on {}: cpu {}/{} cores, memory {}/{}, {} workloads, tick {:.1}ms\n\n",
                    node.node,
                    num(node.cpu.usage_cores, 2),
                    node.cpu.cpus,
                    bytes(node.memory.used_bytes),
                    bytes(node.memory.total_bytes),
                    node.workloads,
                    node.agent.last_sample_duration_us as f64 / 1000.0
                ));
                frame.push_str(&super::workloads::table(&list.workloads).render());
                write!(out, "{frame}").map_err(OutputError::from)?;
            }
        }
        out.flush().map_err(OutputError::from)?;
        i += 1;
        if a.iterations.is_some_and(|n| i >= n) {
            return Ok(());
        }
    }
}
