//! `darosctl net`: the eBPF datapath — status and counted workloads, recent
//! events, and `cleanup`, the documented removal of everything it pinned
//! (works without a running darosd).

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::CliError;
use super::output::{OutputFormat, Table, print};
use crate::client::Client;
use crate::model::net::{NetEventView, NetStatus};

/// Arguments of `darosctl net`.
#[derive(Debug, clap::Args)]
pub struct NetArgs {
    /// What to show or do (default: status).
    #[command(subcommand)]
    pub command: Option<NetCommand>,
}

/// `darosctl net` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum NetCommand {
    /// Datapath parts, floor loop and the workloads it counts (the default).
    Status,
    /// Recent throttle and drop events.
    Events,
    /// Remove every pinned eBPF program, map and link: detaches the datapath from
    /// every cgroup and lifts every cap. Runs without darosd (stop it first).
    Cleanup(CleanupArgs),
}

/// Arguments of `darosctl net cleanup`. No default directory: removing a
/// production agent's pins by leaving out a flag would lift every cap on the
/// node, so the directory is named, or read from the agent's configuration.
#[derive(Debug, clap::Args)]
#[group(id = "which", required = true, args = ["pin_dir", "config"])]
pub struct CleanupArgs {
    /// The pin directory (`[net] pin_dir`).
    #[arg(long, value_name = "DIR", conflicts_with = "config")]
    pub pin_dir: Option<PathBuf>,
    /// The agent's configuration, whose `[net] pin_dir` (with `DAROS_NET_PIN_DIR`) is used.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Remove even while a darosd holds the datapath (it loses counting and caps).
    #[arg(long)]
    pub force: bool,
}

/// What `cleanup` did.
#[derive(Debug, Clone, Serialize)]
pub struct CleanupReport {
    /// The directory.
    pub pin_dir: String,
    /// Pins removed.
    pub removed: usize,
}

/// Runs `darosctl net`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: NetArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match a.command.unwrap_or(NetCommand::Status) {
        NetCommand::Status => {
            let s: NetStatus = client.get("/v1/net").await?;
            print(out, fmt, &s, || render(&s))?;
        }
        NetCommand::Events => {
            let s: NetStatus = client.get("/v1/net").await?;
            print(out, fmt, &s.recent_events, || events(&s.recent_events))?;
        }
        NetCommand::Cleanup(c) => {
            let report = cleanup(&c)?;
            print(out, fmt, &report, || {
                format!(
                    "removed {} pins under {} (programs detached, caps lifted)\n",
                    report.removed, report.pin_dir
                )
            })?;
        }
    }
    Ok(())
}

/// The directory `c` names, or its configuration's.
fn pin_dir(c: &CleanupArgs) -> Result<PathBuf, CliError> {
    match (&c.pin_dir, &c.config) {
        (Some(d), _) => Ok(d.clone()),
        (None, Some(f)) => crate::config::load(&crate::config::Overrides::from_process(
            Some(f.clone()),
            Vec::new(),
        ))
        .map(|cfg| cfg.net.pin_dir)
        .map_err(|e| CliError::Other(format!("{}: {e}", f.display()))),
        (None, None) => Err(CliError::Other(
            "name the pin directory: --pin-dir DIR, or --config FILE for the agent's [net] pin_dir"
                .into(),
        )),
    }
}

/// Removes the pins under the directory `c` names.
pub fn cleanup(c: &CleanupArgs) -> Result<CleanupReport, CliError> {
    let dir = pin_dir(c)?;
    let pins = daros_ebpf::PinDir::new(&dir);
    match daros_ebpf::cleanup(&pins, c.force) {
        Ok(removed) => Ok(CleanupReport {
            pin_dir: dir.display().to_string(),
            removed,
        }),
        Err(e @ daros_ebpf::Error::Busy(_)) => Err(CliError::Other(format!(
            "{e}: darosd runs the datapath; stop it (systemctl stop darosd) or pass --force"
        ))),
        Err(e) => Err(CliError::Other(format!("cleaning {}: {e}", dir.display()))),
    }
}

fn rate(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| super::output::rate_bytes(Some(v as f64)))
}

fn render(s: &NetStatus) -> String {
    let mut o = String::new();
    let part = |name: &str, available: bool, detail: &str| {
        format!(
            "{name:<9} {}  {detail}\n",
            if available { "yes" } else { "NO " }
        )
    };
    o.push_str(&part("network", s.network.available, &s.network.detail));
    o.push_str(&part("runqueue", s.runqueue.available, &s.runqueue.detail));
    o.push_str(&part("floors", s.floors.running, &s.floors.detail));
    o.push_str(&format!(
        "pins {}; cgroup2 {}; events: {} throttle starts, {} drop reports ({} drops), {} lost\n",
        s.pin_dir,
        s.cgroup2_mount.as_deref().unwrap_or("-"),
        s.events.throttle_starts,
        s.events.drop_reports,
        s.events.drops,
        s.events_lost_total
    ));
    if s.floors.running {
        let f = &s.floors;
        o.push_str(&format!(
            "floor loop: {} ticks, {} cap writes, {} errors; egress {} (budget {}/s, demand {}/s{}), ingress {}\n",
            f.ticks_total,
            f.cap_writes_total,
            f.errors_total,
            if f.egress.capping { "capping" } else { "idle" },
            super::output::bytes(f.egress.budget_bytes_per_second),
            super::output::bytes(f.egress.demand_bytes_per_second),
            match f.egress.shortfall_reserve_bytes_per_second {
                0 => String::new(),
                r => format!(
                    ", {}/s held back: floors fell short on a full link",
                    super::output::bytes(r)
                ),
            },
            if f.ingress.capping { "capping" } else { "idle" },
        ));
    }
    for n in &s.notes {
        o.push_str(&format!("note: {n}\n"));
    }
    let mut t = Table::new(
        &[
            "WORKLOAD",
            "CLASS",
            "CGROUP ID",
            "TX LIMIT",
            "RX LIMIT",
            "TX FLOOR",
            "RX FLOOR",
            "FLOOR CAP TX",
            "FLOOR CAP RX",
            "STATUS",
        ],
        &[
            false, false, true, true, true, true, true, true, true, false,
        ],
    );
    for w in &s.workloads {
        t.row(vec![
            w.workload.clone(),
            w.class.clone().unwrap_or_else(|| "-".into()),
            w.cgroup_id.map_or("-".into(), |i| i.to_string()),
            rate(w.egress_limit_bytes_per_second),
            rate(w.ingress_limit_bytes_per_second),
            rate(w.egress_floor_bytes_per_second),
            rate(w.ingress_floor_bytes_per_second),
            rate(w.egress_floor_cap_bytes_per_second),
            rate(w.ingress_floor_cap_bytes_per_second),
            match (&w.error, w.attached) {
                (Some(e), _) => e.clone(),
                (None, true) => "counted".into(),
                (None, false) => "not attached".into(),
            },
        ]);
    }
    o.push('\n');
    o.push_str(&t.render());
    o
}

fn events(ev: &[NetEventView]) -> String {
    let mut t = Table::new(
        &["MONOTONIC", "WORKLOAD", "DIRECTION", "EVENT", "DETAIL"],
        &[true, false, false, false, false],
    );
    for e in ev {
        t.row(vec![
            format!("{:.3}", e.monotonic_ns as f64 / 1e9),
            e.workload
                .clone()
                .unwrap_or_else(|| format!("cgroup {}", e.cgroup_id)),
            e.direction.clone(),
            e.kind.clone(),
            match (e.duration_ms, e.count) {
                (Some(d), _) => format!("{d:.1} ms"),
                (_, Some(c)) => format!("{c} dropped"),
                _ => String::new(),
            },
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_of_a_missing_directory_removes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let r = cleanup(&CleanupArgs {
            pin_dir: Some(dir.path().join("none")),
            config: None,
            force: false,
        })
        .unwrap();
        assert_eq!(r.removed, 0);
        // From the agent's configuration.
        let cfg = dir.path().join("agent.toml");
        let pins = dir.path().join("configured");
        std::fs::write(
            &cfg,
            format!("[net]\npin_dir = {:?}\n", pins.display().to_string()),
        )
        .unwrap();
        let r = cleanup(&CleanupArgs {
            pin_dir: None,
            config: Some(cfg),
            force: false,
        })
        .unwrap();
        assert_eq!(r.pin_dir, pins.display().to_string());
    }

    #[test]
    fn cleanup_names_no_default_directory() {
        use clap::Parser;
        let e = crate::cli::Cli::try_parse_from(["darosctl", "net", "cleanup"]).unwrap_err();
        assert!(e.to_string().contains("--pin-dir"), "{e}");
    }

    #[test]
    fn status_table_names_unavailable_parts_and_errors() {
        let mut s = NetStatus::default();
        s.network.detail = "bpf(): Operation not permitted".into();
        s.workloads.push(crate::model::net::NetWorkloadStatus {
            workload: "managed/web".into(),
            error: Some("attaching: busy".into()),
            ..Default::default()
        });
        let text = render(&s);
        assert!(
            text.contains("network   NO   bpf(): Operation not permitted"),
            "{text}"
        );
        assert!(text.contains("attaching: busy"), "{text}");
    }
}
