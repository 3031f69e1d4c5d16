//! `darosctl qos set|get|unset|events`: QoS classes and floors of workloads.

use std::io::Write;
use std::path::PathBuf;

use daros_coordinator::{
    Bytes, BytesPerSec, DedicatedCpus, MilliCpu, QosClass, QuantityError, ResourceProfile,
};
use hyper::Method;
use serde_json::json;

use super::CliError;
use super::output::{OutputFormat, Table, print};
use crate::client::{Client, encode_id};
use crate::qos::report::EventList;
use crate::qos::{QosOverview, UnsetReport, WorkloadQos};

/// Arguments of `darosctl qos`.
#[derive(Debug, clap::Args)]
pub struct QosArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: QosCommand,
}

/// `darosctl qos` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum QosCommand {
    /// Put a workload under a class, or (with --pid and --name) a process into a new managed workload.
    #[command(
        after_help = "Examples:\n  darosctl qos set web --class GuaranteedPro --cpu-min 1 --mem-min 512Mi\n  darosctl qos set systemd/nginx.service --class Burstable --cpu-request 500m --mem-limit 1Gi\n  darosctl qos set --pid 4242 --name batch --class BestEffort --cpu-limit 2\nFor Guaranteed classes a missing request or limit takes the other, or the reservation."
    )]
    Set(Box<SetArgs>),
    /// Show every workload under a class, or one workload's knobs.
    Get(GetArgs),
    /// Remove a workload's class: a discovered cgroup gets its original values back.
    Unset(UnsetArgs),
    /// Show the protection loop's events (holds, releases, floors restored).
    Events,
}

fn cpu(s: &str) -> Result<MilliCpu, QuantityError> {
    s.parse()
}
fn bytes(s: &str) -> Result<Bytes, QuantityError> {
    s.parse()
}
fn rate(s: &str) -> Result<BytesPerSec, QuantityError> {
    s.parse()
}

/// Parses a class name, case-insensitively.
pub fn parse_class(s: &str) -> Result<QosClass, String> {
    let all = [
        QosClass::GuaranteedPro,
        QosClass::Guaranteed,
        QosClass::Burstable,
        QosClass::BestEffort,
    ];
    let norm = |x: &str| x.to_ascii_lowercase().replace(['-', '_'], "");
    all.into_iter()
        .find(|c| norm(&c.to_string()) == norm(s))
        .ok_or_else(|| format!("unknown class {s:?}; expected one of GuaranteedPro, Guaranteed, Burstable, BestEffort"))
}

/// Arguments of `darosctl qos set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// Workload: managed/<name> (or just <name>), systemd/<unit>, k8s/<pod-uid>.
    #[arg(required_unless_present = "pid", conflicts_with = "pid")]
    pub workload: Option<String>,
    /// Move this process (repeatable) into a new managed workload named by --name.
    #[arg(long, requires = "name")]
    pub pid: Vec<u32>,
    /// Name of the managed workload created for --pid.
    #[arg(long, requires = "pid")]
    pub name: Option<String>,
    /// QoS class: GuaranteedPro, Guaranteed, Burstable or BestEffort.
    #[arg(long, value_parser = parse_class)]
    pub class: QosClass,
    /// Profile file (YAML or JSON ResourceProfile); the flags below override it.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// CPU floor (MinimalReservation), e.g. 1, 500m.
    #[arg(long, value_parser = cpu, value_name = "CPU")]
    pub cpu_min: Option<MilliCpu>,
    /// CPU request.
    #[arg(long, value_parser = cpu, value_name = "CPU")]
    pub cpu_request: Option<MilliCpu>,
    /// CPU limit.
    #[arg(long, value_parser = cpu, value_name = "CPU")]
    pub cpu_limit: Option<MilliCpu>,
    /// Memory floor, e.g. 512Mi.
    #[arg(long, value_parser = bytes, value_name = "BYTES")]
    pub mem_min: Option<Bytes>,
    /// Memory request.
    #[arg(long, value_parser = bytes, value_name = "BYTES")]
    pub mem_request: Option<Bytes>,
    /// Memory limit.
    #[arg(long, value_parser = bytes, value_name = "BYTES")]
    pub mem_limit: Option<Bytes>,
    /// Read bandwidth floor, e.g. 20MB/s.
    #[arg(long, value_parser = rate, value_name = "RATE")]
    pub io_read_min: Option<BytesPerSec>,
    /// Write bandwidth floor.
    #[arg(long, value_parser = rate, value_name = "RATE")]
    pub io_write_min: Option<BytesPerSec>,
    /// Read bandwidth limit (per device).
    #[arg(long, value_parser = rate, value_name = "RATE")]
    pub io_read_limit: Option<BytesPerSec>,
    /// Write bandwidth limit (per device).
    #[arg(long, value_parser = rate, value_name = "RATE")]
    pub io_write_limit: Option<BytesPerSec>,
    /// Egress bandwidth floor.
    #[arg(long, value_parser = rate, value_name = "RATE")]
    pub net_egress_min: Option<BytesPerSec>,
    /// Ingress bandwidth floor.
    #[arg(long, value_parser = rate, value_name = "RATE")]
    pub net_ingress_min: Option<BytesPerSec>,
    /// Maximum number of tasks.
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// Dedicated cores (cpuset).
    #[arg(long, value_name = "N")]
    pub dedicated_cpus: Option<u32>,
}

/// Arguments of `darosctl qos get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// One workload (managed/<name> or <name>, systemd/<unit>, ...).
    pub workload: Option<String>,
}

/// Arguments of `darosctl qos unset`.
#[derive(Debug, clap::Args)]
pub struct UnsetArgs {
    /// The workload.
    pub workload: String,
}

/// `web` → `managed/web`; ids with a `/` are kept.
pub fn workload_id(w: &str) -> String {
    let w = w.trim_matches('/');
    if w.contains('/') {
        w.to_string()
    } else {
        format!("managed/{w}")
    }
}

fn profile(a: &SetArgs) -> Result<ResourceProfile, CliError> {
    let mut p = match &a.file {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| CliError::Other(format!("{}: {e}", f.display())))?;
            serde_yaml_ng::from_str::<ResourceProfile>(&text)
                .map_err(|e| CliError::Other(format!("{}: {e}", f.display())))?
        }
        None => ResourceProfile::default(),
    };
    fn set<T>(slot: &mut Option<T>, v: Option<T>) {
        if v.is_some() {
            *slot = v;
        }
    }
    set(&mut p.cpu.reservation, a.cpu_min);
    set(&mut p.cpu.request, a.cpu_request);
    set(&mut p.cpu.limit, a.cpu_limit);
    set(&mut p.memory.reservation, a.mem_min);
    set(&mut p.memory.request, a.mem_request);
    set(&mut p.memory.limit, a.mem_limit);
    set(&mut p.io.read.reservation, a.io_read_min);
    set(&mut p.io.write.reservation, a.io_write_min);
    set(&mut p.io.read.limit, a.io_read_limit);
    set(&mut p.io.write.limit, a.io_write_limit);
    set(&mut p.network.egress.reservation, a.net_egress_min);
    set(&mut p.network.ingress.reservation, a.net_ingress_min);
    if a.pids.is_some() {
        p.pids = a.pids;
    }
    if let Some(n) = a.dedicated_cpus {
        p.dedicated_cpus = DedicatedCpus::Cores(n);
    }
    Ok(p)
}

/// Runs `darosctl qos`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: QosArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match a.command {
        QosCommand::Set(s) => {
            let p = profile(&s)?;
            let w: WorkloadQos = match (&s.workload, &s.name) {
                (Some(w), _) => {
                    let id = workload_id(w);
                    let body = json!({ "class": s.class, "profile": p });
                    client
                        .send(
                            Method::PUT,
                            &format!("/v1/qos/workloads/{}", encode_id(&id)),
                            Some(&body),
                        )
                        .await?
                }
                (None, Some(name)) => {
                    let body =
                        json!({ "name": name, "pids": s.pid, "class": s.class, "profile": p });
                    client
                        .send(Method::POST, "/v1/qos/adopt", Some(&body))
                        .await?
                }
                (None, None) => {
                    return Err(CliError::Other(
                        "give a workload, or --pid with --name".into(),
                    ));
                }
            };
            print(out, fmt, &w, || render_one(&w))?;
        }
        QosCommand::Get(g) => match g.workload {
            Some(w) => {
                let id = workload_id(&w);
                let q: WorkloadQos = client
                    .get(&format!("/v1/qos/workloads/{}", encode_id(&id)))
                    .await?;
                print(out, fmt, &q, || render_one(&q))?;
            }
            None => {
                let o: QosOverview = client.get("/v1/qos").await?;
                print(out, fmt, &o, || render_overview(&o))?;
            }
        },
        QosCommand::Unset(u) => {
            let id = workload_id(&u.workload);
            let r: UnsetReport = client
                .send(
                    Method::DELETE,
                    &format!("/v1/qos/workloads/{}", encode_id(&id)),
                    None,
                )
                .await?;
            print(out, fmt, &r, || {
                let mut s = format!("{}: class removed\n", r.workload);
                for l in &r.restored {
                    s.push_str(&format!("  restored {l}\n"));
                }
                for e in &r.errors {
                    s.push_str(&format!("  FAILED {e}\n"));
                }
                s
            })?;
        }
        QosCommand::Events => {
            let e: EventList = client.get("/v1/qos/events").await?;
            print(out, fmt, &e, || {
                let mut t = Table::new(
                    &["AT", "EVENT", "RESOURCE", "LEVEL", "REACTION", "DETAIL"],
                    &[false, false, false, true, true, false],
                );
                for ev in &e.events {
                    t.row(vec![
                        super::output::local_time(daros_coordinator::Timestamp(ev.at_unix_ms)),
                        format!("{:?}", ev.kind).to_lowercase(),
                        ev.resource.as_str().into(),
                        ev.level.to_string(),
                        ev.reaction_ms.map_or("-".into(), |m| format!("{m:.0}ms")),
                        ev.detail.clone(),
                    ]);
                }
                t.render()
            })?;
        }
    }
    Ok(())
}

fn floors(w: &WorkloadQos) -> String {
    let r = &w.reservation;
    let mut parts = Vec::new();
    if let Some(c) = r.cpu {
        parts.push(format!("cpu {c}"));
    }
    if let Some(m) = r.memory {
        parts.push(format!("mem {m}"));
    }
    if let Some(v) = r.io_read {
        parts.push(format!("read {v}"));
    }
    if let Some(v) = r.io_write {
        parts.push(format!("write {v}"));
    }
    if let Some(v) = r.network_egress {
        parts.push(format!("egress {v}"));
    }
    if let Some(v) = r.network_ingress {
        parts.push(format!("ingress {v}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn render_one(w: &WorkloadQos) -> String {
    let mut s = format!(
        "{}  {}  {} ({:?})  floors: {}  {} enforced, {} degraded\n",
        w.workload,
        w.class,
        w.cgroup,
        w.kind,
        floors(w),
        w.enforced,
        w.degraded
    );
    if let Some(c) = &w.dedicated_cpus {
        s.push_str(&format!("dedicated cpus: {c}\n"));
    }
    let mut t = Table::new(
        &["KNOB", "REQUESTED", "APPLIED", "STATUS", "REASON"],
        &[false; 5],
    );
    for k in &w.knobs {
        t.row(vec![
            k.knob.clone(),
            k.requested.clone(),
            k.applied.clone().unwrap_or_else(|| "-".into()),
            k.status.as_str().into(),
            k.reason
                .clone()
                .or_else(|| k.note.clone())
                .unwrap_or_default(),
        ]);
    }
    s.push_str(&t.render());
    if !w.holds.is_empty() {
        s.push_str("held by the protection loop:\n");
        for h in &w.holds {
            s.push_str(&format!(
                "  {} {} = {}\n",
                h.resource.as_str(),
                h.knob,
                h.value
            ));
        }
    }
    s
}

fn render_overview(o: &QosOverview) -> String {
    let mut t = Table::new(
        &[
            "WORKLOAD", "CLASS", "FLOORS", "ENFORCED", "DEGRADED", "HELD",
        ],
        &[false, false, false, true, true, false],
    );
    for w in &o.workloads {
        t.row(vec![
            w.workload.clone(),
            w.class.to_string(),
            floors(w),
            w.enforced.to_string(),
            w.degraded.to_string(),
            if w.holds.is_empty() {
                "-".into()
            } else {
                w.holds
                    .iter()
                    .map(|h| h.resource.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            },
        ]);
    }
    let mut s = format!("cgroup {} · managed root {}\n", o.mode, o.managed_root);
    s.push_str(&t.render());
    let mut a = Table::new(
        &[
            "RESOURCE",
            "RESERVED",
            "ALLOCATABLE",
            "CAPACITY",
            "SYSTEM RESERVE",
        ],
        &[false, true, true, true, true],
    );
    for r in &o.admission {
        a.row(vec![
            r.resource.clone(),
            r.reserved.clone(),
            r.allocatable.clone(),
            r.capacity.clone(),
            r.system_reserved.clone(),
        ]);
    }
    s.push('\n');
    s.push_str(&a.render());
    let p = &o.protection;
    s.push_str(&format!(
        "\nprotection: {} · every {} · PSI triggers {} · levels {}\n",
        if p.running { "running" } else { "off" },
        every(p),
        p.psi_triggers.len(),
        p.levels
            .iter()
            .map(|(r, l)| format!("{r}={l}"))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    for n in p.notes.iter().chain(&o.notes) {
        s.push_str(&format!("  note: {n}\n"));
    }
    s
}

/// The loop's interval, and the configured one when its CPU budget stretched it.
fn every(p: &crate::qos::protect::ProtectionStatus) -> String {
    if p.interval_ms > p.sample_interval_ms * 1.05 {
        format!(
            "{:.0} ms (set {:.0} ms; a tick costs {:.0} µs, over the CPU budget)",
            p.interval_ms, p.sample_interval_ms, p.tick_cost_us
        )
    } else {
        format!("{:.0} ms", p.sample_interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(subcommand)]
        c: QosCommand,
    }

    #[test]
    fn set_flags_build_the_profile() {
        let t = T::try_parse_from([
            "x",
            "set",
            "web",
            "--class",
            "guaranteedpro",
            "--cpu-min",
            "1",
            "--mem-min",
            "512Mi",
            "--io-read-min",
            "20MB/s",
            "--pids",
            "64",
        ])
        .unwrap();
        let QosCommand::Set(s) = t.c else { panic!() };
        assert_eq!(s.class, QosClass::GuaranteedPro);
        let p = profile(&s).unwrap();
        assert_eq!(p.cpu.reservation, Some(MilliCpu(1000)));
        assert_eq!(p.memory.reservation, Some(Bytes::from_mib(512)));
        assert_eq!(p.io.read.reservation, Some(BytesPerSec(20_000_000)));
        assert_eq!(p.pids, Some(64));
        assert_eq!(workload_id("web"), "managed/web");
        assert_eq!(workload_id("systemd/x.service"), "systemd/x.service");
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let e = T::try_parse_from(["x", "set", "web", "--class", "Gold"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--class") && e.contains("unknown class \"Gold\""),
            "{e}"
        );
        let e = T::try_parse_from([
            "x",
            "set",
            "web",
            "--class",
            "BestEffort",
            "--mem-min",
            "12Q",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("--mem-min") && e.contains("unknown unit"), "{e}");
        let e = T::try_parse_from(["x", "set", "--pid", "1", "--class", "BestEffort"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--name"), "{e}");
        assert!(
            T::try_parse_from([
                "x",
                "set",
                "web",
                "--pid",
                "1",
                "--name",
                "n",
                "--class",
                "BestEffort"
            ])
            .is_err()
        );
    }
}
