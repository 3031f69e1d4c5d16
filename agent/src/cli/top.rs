//! `darosctl top`: a live per-workload table.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use super::CliError;
use super::output::{OutputError, OutputFormat, Table, bytes, num, pct, rate_bytes};
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
    /// Network bytes per second (sent + received), highest first.
    Net,
    /// Run-queue wait p99 over the last interval, highest first.
    Runqueue,
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
        SortKey::Net => s.network.as_ref().map_or(0.0, |n| {
            n.egress.bytes_per_second.unwrap_or(0.0) + n.ingress.bytes_per_second.unwrap_or(0.0)
        }),
        SortKey::Runqueue => s
            .runqueue
            .as_ref()
            .and_then(|r| r.wait_p99_seconds)
            .unwrap_or(0.0),
        SortKey::Id => 0.0,
    }
}

/// Microseconds or milliseconds, for run-queue waits.
fn wait(v: Option<f64>) -> String {
    match v {
        Some(s) if s < 0.001 => format!("{:.0}us", s * 1e6),
        Some(s) => format!("{:.1}ms", s * 1e3),
        None => "-".into(),
    }
}

/// The `top` table: the workload columns plus the eBPF datapath's network
/// throughput, cap (`*` while throttled) and run-queue latency.
pub fn table(ws: &[Workload]) -> Table {
    let mut t = Table::new(
        &[
            "ID",
            "CPU",
            "THROTTLED",
            "MEMORY",
            "IO READ",
            "IO WRITE",
            "NET-TX",
            "NET-RX",
            "TX CAP",
            "RQ-P99",
            "RQ-WAIT",
            "PIDS",
            "PSI CPU",
            "PSI MEM",
        ],
        &[
            false, true, true, true, true, true, true, true, true, true, true, true, true, true,
        ],
    );
    let io = |w: &Workload, f: fn(&crate::model::workload::IoDeviceSample) -> Option<f64>| {
        w.sample
            .io
            .as_ref()
            .and_then(|d| d.iter().map(f).try_fold(0.0, |a, v| v.map(|v| a + v)))
    };
    let psi = |p: &Option<crate::model::PressureSample>| {
        p.as_ref()
            .map_or("-".into(), |p| format!("{:.1}", p.some.avg10))
    };
    for w in ws {
        let s = &w.sample;
        let cpu = s.cpu.as_ref();
        let net = s.network.as_ref();
        let rq = s.runqueue.as_ref();
        t.row(vec![
            w.id.clone(),
            num(cpu.and_then(|c| c.usage_cores), 2),
            pct(cpu
                .and_then(|c| c.throttling.as_ref())
                .and_then(|t| t.throttled_ratio)),
            s.memory
                .as_ref()
                .map_or("-".into(), |m| bytes(m.current_bytes)),
            rate_bytes(io(w, |d| d.read_bytes_per_second)),
            rate_bytes(io(w, |d| d.write_bytes_per_second)),
            rate_bytes(net.and_then(|n| n.egress.bytes_per_second)),
            rate_bytes(net.and_then(|n| n.ingress.bytes_per_second)),
            net.and_then(|n| {
                n.egress.cap_bytes_per_second.map(|c| {
                    let mark = if n.egress.throttled { "*" } else { "" };
                    format!("{}{mark}", rate_bytes(Some(c as f64)))
                })
            })
            .unwrap_or_else(|| "-".into()),
            wait(rq.and_then(|r| r.wait_p99_seconds)),
            num(rq.and_then(|r| r.wait_seconds_per_second), 2),
            s.pids.map_or("-".into(), |p| p.to_string()),
            psi(&s.psi.cpu),
            psi(&s.psi.memory),
        ]);
    }
    t
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
                frame.push_str(&table(&list.workloads).render());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::net::{NetworkSample, RunQueueSample};
    use crate::model::{WorkloadKind, WorkloadSample};

    #[test]
    fn table_shows_network_and_runqueue_columns() {
        let mut net = NetworkSample::default();
        net.egress.bytes_per_second = Some(10.0 * 1024.0 * 1024.0);
        net.egress.cap_bytes_per_second = Some(10 * 1024 * 1024);
        net.egress.throttled = true;
        net.ingress.bytes_per_second = Some(2048.0);
        let w = Workload {
            id: "managed/web".into(),
            kind: WorkloadKind::Managed,
            cgroup: "/daros/web".into(),
            paths: vec![],
            k8s_qos: None,
            managed: true,
            sample: WorkloadSample {
                network: Some(net),
                runqueue: Some(RunQueueSample {
                    wait_p99_seconds: Some(0.002048),
                    wait_seconds_per_second: Some(0.25),
                    ..RunQueueSample::default()
                }),
                ..WorkloadSample::default()
            },
        };
        let text = table(&[w]).render();
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        for h in ["NET-TX", "NET-RX", "TX CAP", "RQ-P99", "RQ-WAIT"] {
            assert!(header.contains(h), "{header}");
        }
        let row = lines.next().unwrap();
        for cell in ["10.0Mi/s", "2.0Ki/s", "10.0Mi/s*", "2.0ms", "0.25"] {
            assert!(row.contains(cell), "{cell} in {row}");
        }
    }
}
