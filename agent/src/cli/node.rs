//! `darosctl node`: this node's measurements; `darosctl node
//! cordon|uncordon|drain NODE` acts on a cluster node.

use std::io::Write;

use super::CliError;
use super::output::{OutputFormat, Table, bytes, duration, num, pct, print, rate_bytes};
use crate::client::Client;
use crate::model::{NodeSample, PressureSample, PsiSample};

/// Arguments of `darosctl node`.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// A verb on a cluster node; without one, this node is shown.
    #[command(subcommand)]
    pub verb: Option<super::cordon::NodeVerb>,
}

/// Runs `darosctl node`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: NodeArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    if let Some(verb) = a.verb {
        return super::cordon::node(client, fmt, verb, out).await;
    }
    let n = client.node().await?;
    print(out, fmt, &n, || render(&n))?;
    Ok(())
}

fn psi_one(name: &str, p: &Option<PressureSample>) -> String {
    match p {
        None => format!("{name} -"),
        Some(p) => match &p.full {
            Some(f) => format!("{name} some {:.1}% full {:.1}%", p.some.avg10, f.avg10),
            None => format!("{name} some {:.1}%", p.some.avg10),
        },
    }
}

/// `cpu some 1.0% full 0.0%, memory ..., io ...` (avg10), or `unavailable`.
pub fn psi_line(p: Option<&PsiSample>) -> String {
    match p {
        None => "unavailable".into(),
        Some(p) => format!(
            "{}, {}, {}",
            psi_one("cpu", &p.cpu),
            psi_one("memory", &p.memory),
            psi_one("io", &p.io)
        ),
    }
}

/// The table view of a node sample.
pub fn render(n: &NodeSample) -> String {
    let mut kv = Table::new(&["FIELD", "VALUE"], &[false, false]);
    kv.row(vec!["node".into(), n.node.clone()]);
    kv.row(vec!["kernel".into(), n.kernel.clone()]);
    kv.row(vec![
        "cpu".into(),
        format!(
            "{} of {} cores busy ({})",
            num(n.cpu.usage_cores, 2),
            n.cpu.cpus,
            pct(n.cpu.utilization)
        ),
    ]);
    kv.row(vec![
        "memory".into(),
        format!(
            "{} used of {} ({} available, {} cache)",
            bytes(n.memory.used_bytes),
            bytes(n.memory.total_bytes),
            bytes(n.memory.available_bytes),
            bytes(n.memory.cached_bytes)
        ),
    ]);
    kv.row(vec!["pressure (avg10)".into(), psi_line(n.psi.as_ref())]);
    let gpu = if n.gpu.available {
        format!(
            "{} device(s), driver {}",
            n.gpu.devices.len(),
            n.gpu.driver_version.as_deref().unwrap_or("?")
        )
    } else {
        n.gpu.reason.clone().unwrap_or_else(|| "no GPU".into())
    };
    kv.row(vec!["gpu".into(), gpu]);
    kv.row(vec!["workloads".into(), n.workloads.to_string()]);
    kv.row(vec![
        "agent".into(),
        format!(
            "darosd {} pid {} up {}, interval {}ms, last tick {:.1}ms, {} samples, {} errors",
            n.agent.version,
            n.agent.pid,
            duration(n.agent.uptime_seconds),
            n.agent.interval_ms,
            n.agent.last_sample_duration_us as f64 / 1000.0,
            n.agent.samples_total,
            n.agent.sample_errors_total
        ),
    ]);
    let mut s = kv.render();
    if !n.disks.is_empty() {
        let mut t = Table::new(
            &["DISK", "READ", "WRITE", "READS/S", "WRITES/S", "UTIL"],
            &[false, true, true, true, true, true],
        );
        for d in &n.disks {
            t.row(vec![
                d.device.clone(),
                rate_bytes(d.read_bytes_per_second),
                rate_bytes(d.write_bytes_per_second),
                num(d.reads_per_second, 1),
                num(d.writes_per_second, 1),
                pct(d.utilization),
            ]);
        }
        s.push('\n');
        s.push_str(&t.render());
    }
    if !n.network.is_empty() {
        let mut t = Table::new(
            &[
                "INTERFACE",
                "RX",
                "TX",
                "RX PKT/S",
                "TX PKT/S",
                "ERRORS",
                "DROPS",
            ],
            &[false, true, true, true, true, true, true],
        );
        for i in &n.network {
            t.row(vec![
                i.interface.clone(),
                rate_bytes(i.rx_bytes_per_second),
                rate_bytes(i.tx_bytes_per_second),
                num(i.rx_packets_per_second, 1),
                num(i.tx_packets_per_second, 1),
                (i.rx_errors_total + i.tx_errors_total).to_string(),
                (i.rx_dropped_total + i.tx_dropped_total).to_string(),
            ]);
        }
        s.push('\n');
        s.push_str(&t.render());
    }
    for d in &n.gpu.devices {
        s.push_str(&format!(
            "\nGPU {} {} ({}): util {}%, memory {} of {}, {} W, {} C, {} processes\n",
            d.index,
            d.name,
            d.uuid,
            d.utilization_gpu_percent
                .map_or("-".into(), |v| v.to_string()),
            d.memory_used_bytes.map_or("-".into(), bytes),
            d.memory_total_bytes.map_or("-".into(), bytes),
            num(d.power_watts, 1),
            d.temperature_celsius.map_or("-".into(), |v| v.to_string()),
            d.processes.len()
        ));
    }
    s
}
