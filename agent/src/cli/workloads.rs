//! `darosctl workloads [ID]`.

use std::io::Write;

use super::CliError;
use super::output::{OutputFormat, Table, bytes, num, pct, print, rate_bytes};
use crate::client::Client;
use crate::model::{PressureSample, Workload, WorkloadKind};

/// Arguments of `darosctl workloads`.
#[derive(Debug, clap::Args)]
pub struct WorkloadsArgs {
    /// Show one workload (e.g. managed/web, k8s/<pod-uid>, systemd/sshd.service).
    pub id: Option<String>,
    /// Only workloads of this kind.
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,
}

/// `--kind` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    /// Cgroups under the agent's managed root.
    Managed,
    /// Kubernetes pods.
    K8s,
    /// systemd units.
    Systemd,
}

impl From<KindArg> for WorkloadKind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Managed => WorkloadKind::Managed,
            KindArg::K8s => WorkloadKind::KubernetesPod,
            KindArg::Systemd => WorkloadKind::SystemdUnit,
        }
    }
}

/// Runs `darosctl workloads`.
pub async fn run(
    client: &Client,
    fmt: OutputFormat,
    a: WorkloadsArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match a.id {
        Some(id) => {
            let w = client.workload(&id).await?;
            print(out, fmt, &w, || render_one(&w))?;
        }
        None => {
            let list = client.workloads(a.kind.map(Into::into)).await?;
            print(out, fmt, &list, || table(&list.workloads).render())?;
        }
    }
    Ok(())
}

fn avg10(p: &Option<PressureSample>) -> String {
    p.as_ref()
        .map_or("-".into(), |p| format!("{:.1}", p.some.avg10))
}

/// Sum of a per-device rate.
fn io_sum(
    w: &Workload,
    f: fn(&crate::model::workload::IoDeviceSample) -> Option<f64>,
) -> Option<f64> {
    let devs = w.sample.io.as_ref()?;
    devs.iter()
        .map(f)
        .try_fold(0.0, |acc, v| v.map(|v| acc + v))
}

/// The workload table used by `workloads` and `top`.
pub fn table(ws: &[Workload]) -> Table {
    let mut t = Table::new(
        &[
            "ID",
            "CPU",
            "THROTTLED",
            "MEMORY",
            "ANON",
            "FILE",
            "IO READ",
            "IO WRITE",
            "PIDS",
            "PSI CPU",
            "PSI MEM",
            "PSI IO",
        ],
        &[
            false, true, true, true, true, true, true, true, true, true, true, true,
        ],
    );
    for w in ws {
        let s = &w.sample;
        let cpu = s.cpu.as_ref();
        let mem = s.memory.as_ref();
        t.row(vec![
            w.id.clone(),
            num(cpu.and_then(|c| c.usage_cores), 2),
            pct(cpu
                .and_then(|c| c.throttling.as_ref())
                .and_then(|t| t.throttled_ratio)),
            mem.map_or("-".into(), |m| bytes(m.current_bytes)),
            mem.map_or("-".into(), |m| bytes(m.anon_bytes)),
            mem.map_or("-".into(), |m| bytes(m.file_bytes)),
            rate_bytes(io_sum(w, |d| d.read_bytes_per_second)),
            rate_bytes(io_sum(w, |d| d.write_bytes_per_second)),
            s.pids.map_or("-".into(), |p| p.to_string()),
            avg10(&s.psi.cpu),
            avg10(&s.psi.memory),
            avg10(&s.psi.io),
        ]);
    }
    t
}

fn render_one(w: &Workload) -> String {
    let s = &w.sample;
    let mut kv = Table::new(&["FIELD", "VALUE"], &[false, false]);
    kv.row(vec!["id".into(), w.id.clone()]);
    kv.row(vec!["kind".into(), w.kind.as_str().into()]);
    kv.row(vec!["cgroup".into(), w.cgroup.clone()]);
    kv.row(vec!["managed".into(), w.managed.to_string()]);
    if let Some(q) = &w.k8s_qos {
        kv.row(vec!["k8s qos".into(), q.clone()]);
    }
    if let Some(c) = &s.cpu {
        kv.row(vec![
            "cpu".into(),
            format!(
                "{} cores, {:.2}s total",
                num(c.usage_cores, 3),
                c.usage_seconds_total
            ),
        ]);
        if let Some(t) = &c.throttling {
            kv.row(vec![
                "throttling".into(),
                format!(
                    "{} of {} periods, {:.3}s, last interval {}",
                    t.throttled_periods_total,
                    t.periods_total,
                    t.throttled_seconds_total,
                    pct(t.throttled_ratio)
                ),
            ]);
        }
    }
    if let Some(m) = &s.memory {
        kv.row(vec![
            "memory".into(),
            format!(
                "{} (anon {}, file {})",
                bytes(m.current_bytes),
                bytes(m.anon_bytes),
                bytes(m.file_bytes)
            ),
        ]);
        let ev: Vec<String> = [
            ("low", m.events.low),
            ("high", m.events.high),
            ("max", m.events.max),
            ("oom", m.events.oom),
            ("oom_kill", m.events.oom_kill),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| format!("{n} {v}")))
        .collect();
        kv.row(vec!["memory events".into(), ev.join(", ")]);
    }
    if let Some(p) = s.pids {
        kv.row(vec!["pids".into(), p.to_string()]);
    }
    kv.row(vec![
        "pressure (avg10)".into(),
        super::node::psi_line(Some(&s.psi)),
    ]);
    if let Some(g) = s.gpu_memory_bytes {
        kv.row(vec!["gpu memory".into(), bytes(g)]);
    }
    for (area, why) in &s.unavailable {
        kv.row(vec![format!("unavailable: {area}"), why.clone()]);
    }
    for p in &w.paths {
        kv.row(vec!["path".into(), p.clone()]);
    }
    let mut out = kv.render();
    if let Some(io) = &s.io {
        let mut t = Table::new(
            &[
                "DEVICE",
                "READ",
                "WRITE",
                "READS/S",
                "WRITES/S",
                "READ TOTAL",
                "WRITE TOTAL",
            ],
            &[false, true, true, true, true, true, true],
        );
        for d in io {
            t.row(vec![
                d.device.clone().unwrap_or_else(|| d.dev.clone()),
                rate_bytes(d.read_bytes_per_second),
                rate_bytes(d.write_bytes_per_second),
                num(d.reads_per_second, 1),
                num(d.writes_per_second, 1),
                bytes(d.read_bytes_total),
                bytes(d.write_bytes_total),
            ]);
        }
        if !t.is_empty() {
            out.push('\n');
            out.push_str(&t.render());
        }
    }
    out
}
