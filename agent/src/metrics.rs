//! Prometheus `/metrics` on an optional TCP listener. Values are encoded from the
//! latest snapshot at scrape time, so removed workloads disappear with it.
//! Counters keep their kernel values; Prometheus computes rates and handles resets.

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::model::PsiSample;
use crate::sensing::{Latest, Snapshot};

/// Label pairs of one series.
pub(crate) type Labels = Vec<(&'static str, String)>;

/// Encodes a snapshot as metric families.
#[derive(Debug)]
pub struct SnapshotCollector {
    latest: Arc<Latest>,
}

/// Encodes one metric family of `kind` (nothing when `items` is empty); the
/// collectors of the snapshot, QoS and the datapath all go through it.
pub(crate) fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    items: Vec<(Labels, f64)>,
) -> fmt::Result {
    if items.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in items {
        if labels.is_empty() {
            put(&mut m, kind, v)?;
        } else {
            put(&mut m.encode_family(&labels)?, kind, v)?;
        }
    }
    Ok(())
}

fn put(
    m: &mut prometheus_client::encoding::MetricEncoder<'_>,
    kind: MetricType,
    v: f64,
) -> fmt::Result {
    match kind {
        MetricType::Counter => {
            m.encode_counter::<prometheus_client::encoding::NoLabelSet, f64, f64>(&v, None)
        }
        _ => m.encode_gauge(&v),
    }
}

fn psi_items(psi: &PsiSample, base: &Labels, avg: bool) -> Vec<(Labels, f64)> {
    let mut out = Vec::new();
    for (res, p) in [("cpu", &psi.cpu), ("memory", &psi.memory), ("io", &psi.io)] {
        let Some(p) = p else { continue };
        for (kind, line) in [("some", Some(p.some)), ("full", p.full)] {
            let Some(l) = line else { continue };
            let mut labels = base.clone();
            labels.push(("resource", res.into()));
            labels.push(("stall", kind.into()));
            out.push((
                labels,
                if avg {
                    l.avg10 / 100.0
                } else {
                    l.stalled_seconds_total
                },
            ));
        }
    }
    out
}

/// Writes every metric of `snap` into `enc`.
pub fn encode_snapshot(snap: &Snapshot, enc: &mut DescriptorEncoder) -> fmt::Result {
    use MetricType::{Counter, Gauge};
    let n = &snap.node;
    let none = Labels::new;
    family(
        enc,
        "daros_agent_info",
        "Agent build and node name",
        Gauge,
        vec![(
            vec![
                ("version", n.agent.version.clone()),
                ("node", n.node.clone()),
                ("kernel", n.kernel.clone()),
            ],
            1.0,
        )],
    )?;
    family(
        enc,
        "daros_agent_samples",
        "Sampling ticks since start",
        Counter,
        vec![(none(), n.agent.samples_total as f64)],
    )?;
    family(
        enc,
        "daros_agent_sample_errors",
        "Workload or node reads that failed",
        Counter,
        vec![(none(), n.agent.sample_errors_total as f64)],
    )?;
    family(
        enc,
        "daros_agent_sample_duration_seconds",
        "Wall time of the last sampling tick",
        Gauge,
        vec![(none(), n.agent.last_sample_duration_us as f64 / 1e6)],
    )?;
    family(
        enc,
        "daros_agent_workloads",
        "Workloads sampled",
        Gauge,
        vec![(none(), snap.workloads.len() as f64)],
    )?;

    family(
        enc,
        "daros_node_cpus",
        "Online CPUs",
        Gauge,
        vec![(none(), f64::from(n.cpu.cpus))],
    )?;
    family(
        enc,
        "daros_node_cpu_seconds",
        "CPU time by mode",
        Counter,
        vec![
            (vec![("mode", "user".into())], n.cpu.user_seconds_total),
            (vec![("mode", "system".into())], n.cpu.system_seconds_total),
            (vec![("mode", "idle".into())], n.cpu.idle_seconds_total),
            (vec![("mode", "iowait".into())], n.cpu.iowait_seconds_total),
            (vec![("mode", "steal".into())], n.cpu.steal_seconds_total),
        ],
    )?;
    family(
        enc,
        "daros_node_memory_total_bytes",
        "Usable RAM",
        Gauge,
        vec![(none(), n.memory.total_bytes as f64)],
    )?;
    family(
        enc,
        "daros_node_memory_available_bytes",
        "Memory available without swapping",
        Gauge,
        vec![(none(), n.memory.available_bytes as f64)],
    )?;
    family(
        enc,
        "daros_node_memory_cached_bytes",
        "Page cache",
        Gauge,
        vec![(none(), n.memory.cached_bytes as f64)],
    )?;
    let disk = |f: fn(&crate::model::node::DiskSample) -> f64| -> Vec<(Labels, f64)> {
        n.disks
            .iter()
            .map(|d| (vec![("device", d.device.clone())], f(d)))
            .collect()
    };
    family(
        enc,
        "daros_node_disk_read_bytes",
        "Bytes read from the device",
        Counter,
        disk(|d| d.read_bytes_total as f64),
    )?;
    family(
        enc,
        "daros_node_disk_written_bytes",
        "Bytes written to the device",
        Counter,
        disk(|d| d.write_bytes_total as f64),
    )?;
    family(
        enc,
        "daros_node_disk_reads_completed",
        "Reads completed",
        Counter,
        disk(|d| d.reads_total as f64),
    )?;
    family(
        enc,
        "daros_node_disk_writes_completed",
        "Writes completed",
        Counter,
        disk(|d| d.writes_total as f64),
    )?;
    family(
        enc,
        "daros_node_disk_io_time_seconds",
        "Time the device was busy",
        Counter,
        disk(|d| d.io_time_seconds_total),
    )?;
    let net = |f: fn(&crate::model::node::NetSample) -> u64| -> Vec<(Labels, f64)> {
        n.network
            .iter()
            .map(|i| (vec![("interface", i.interface.clone())], f(i) as f64))
            .collect()
    };
    family(
        enc,
        "daros_node_network_receive_bytes",
        "Bytes received",
        Counter,
        net(|i| i.rx_bytes_total),
    )?;
    family(
        enc,
        "daros_node_network_transmit_bytes",
        "Bytes sent",
        Counter,
        net(|i| i.tx_bytes_total),
    )?;
    family(
        enc,
        "daros_node_network_receive_packets",
        "Packets received",
        Counter,
        net(|i| i.rx_packets_total),
    )?;
    family(
        enc,
        "daros_node_network_transmit_packets",
        "Packets sent",
        Counter,
        net(|i| i.tx_packets_total),
    )?;
    family(
        enc,
        "daros_node_network_receive_errors",
        "Receive errors",
        Counter,
        net(|i| i.rx_errors_total),
    )?;
    family(
        enc,
        "daros_node_network_transmit_errors",
        "Transmit errors",
        Counter,
        net(|i| i.tx_errors_total),
    )?;
    family(
        enc,
        "daros_node_network_receive_drops",
        "Received packets dropped",
        Counter,
        net(|i| i.rx_dropped_total),
    )?;
    family(
        enc,
        "daros_node_network_transmit_drops",
        "Sent packets dropped",
        Counter,
        net(|i| i.tx_dropped_total),
    )?;
    if let Some(psi) = &n.psi {
        family(
            enc,
            "daros_node_pressure_stalled_seconds",
            "Time stalled on a resource (PSI total)",
            Counter,
            psi_items(psi, &none(), false),
        )?;
        family(
            enc,
            "daros_node_pressure_avg10_ratio",
            "Share of the last 10s stalled (PSI avg10)",
            Gauge,
            psi_items(psi, &none(), true),
        )?;
    }
    family(
        enc,
        "daros_gpu_available",
        "1 when NVML reports GPUs",
        Gauge,
        vec![(none(), if n.gpu.available { 1.0 } else { 0.0 })],
    )?;
    let gpu = |f: fn(&crate::model::gpu::GpuDevice) -> Option<f64>| -> Vec<(Labels, f64)> {
        n.gpu
            .devices
            .iter()
            .filter_map(|d| {
                f(d).map(|v| {
                    (
                        vec![("gpu", d.index.to_string()), ("uuid", d.uuid.clone())],
                        v,
                    )
                })
            })
            .collect()
    };
    family(
        enc,
        "daros_gpu_utilization_ratio",
        "Share of time a kernel ran",
        Gauge,
        gpu(|d| d.utilization_gpu_percent.map(|v| f64::from(v) / 100.0)),
    )?;
    family(
        enc,
        "daros_gpu_memory_used_bytes",
        "Allocated device memory",
        Gauge,
        gpu(|d| d.memory_used_bytes.map(|v| v as f64)),
    )?;
    family(
        enc,
        "daros_gpu_memory_total_bytes",
        "Installed device memory",
        Gauge,
        gpu(|d| d.memory_total_bytes.map(|v| v as f64)),
    )?;
    family(
        enc,
        "daros_gpu_power_watts",
        "Power draw",
        Gauge,
        gpu(|d| d.power_watts),
    )?;
    family(
        enc,
        "daros_gpu_temperature_celsius",
        "GPU temperature",
        Gauge,
        gpu(|d| d.temperature_celsius.map(f64::from)),
    )?;

    let wl = |w: &crate::model::Workload| -> Labels {
        vec![("workload", w.id.clone()), ("kind", w.kind.as_str().into())]
    };
    let per = |f: &dyn Fn(&crate::model::Workload) -> Option<f64>| -> Vec<(Labels, f64)> {
        snap.workloads
            .iter()
            .filter_map(|w| f(w).map(|v| (wl(w), v)))
            .collect()
    };
    family(
        enc,
        "daros_workload_cpu_usage_seconds",
        "CPU time consumed",
        Counter,
        per(&|w| w.sample.cpu.as_ref().map(|c| c.usage_seconds_total)),
    )?;
    family(
        enc,
        "daros_workload_cpu_usage_cores",
        "CPUs used over the last interval",
        Gauge,
        per(&|w| w.sample.cpu.as_ref().and_then(|c| c.usage_cores)),
    )?;
    family(
        enc,
        "daros_workload_cpu_periods",
        "CFS enforcement periods",
        Counter,
        per(&|w| {
            w.sample
                .cpu
                .as_ref()
                .and_then(|c| c.throttling.as_ref())
                .map(|t| t.periods_total as f64)
        }),
    )?;
    family(
        enc,
        "daros_workload_cpu_throttled_periods",
        "CFS periods throttled",
        Counter,
        per(&|w| {
            w.sample
                .cpu
                .as_ref()
                .and_then(|c| c.throttling.as_ref())
                .map(|t| t.throttled_periods_total as f64)
        }),
    )?;
    family(
        enc,
        "daros_workload_cpu_throttled_seconds",
        "Time throttled by CFS bandwidth",
        Counter,
        per(&|w| {
            w.sample
                .cpu
                .as_ref()
                .and_then(|c| c.throttling.as_ref())
                .map(|t| t.throttled_seconds_total)
        }),
    )?;
    family(
        enc,
        "daros_workload_memory_bytes",
        "Memory charged to the cgroup",
        Gauge,
        per(&|w| w.sample.memory.as_ref().map(|m| m.current_bytes as f64)),
    )?;
    family(
        enc,
        "daros_workload_memory_anon_bytes",
        "Anonymous memory",
        Gauge,
        per(&|w| w.sample.memory.as_ref().map(|m| m.anon_bytes as f64)),
    )?;
    family(
        enc,
        "daros_workload_memory_file_bytes",
        "Page cache",
        Gauge,
        per(&|w| w.sample.memory.as_ref().map(|m| m.file_bytes as f64)),
    )?;
    let mut events = Vec::new();
    for w in &snap.workloads {
        let Some(m) = &w.sample.memory else { continue };
        for (ev, v) in [
            ("low", m.events.low),
            ("high", m.events.high),
            ("max", m.events.max),
            ("oom", m.events.oom),
            ("oom_kill", m.events.oom_kill),
        ] {
            if let Some(v) = v {
                let mut l = wl(w);
                l.push(("event", ev.into()));
                events.push((l, v as f64));
            }
        }
    }
    family(
        enc,
        "daros_workload_memory_events",
        "Memory events (v1: max = failcnt)",
        Counter,
        events,
    )?;
    let io = |f: fn(&crate::model::workload::IoDeviceSample) -> u64| -> Vec<(Labels, f64)> {
        let mut out = Vec::new();
        for w in &snap.workloads {
            for d in w.sample.io.iter().flatten() {
                let mut l = wl(w);
                l.push(("device", d.device.clone().unwrap_or_else(|| d.dev.clone())));
                out.push((l, f(d) as f64));
            }
        }
        out
    };
    family(
        enc,
        "daros_workload_io_read_bytes",
        "Bytes read",
        Counter,
        io(|d| d.read_bytes_total),
    )?;
    family(
        enc,
        "daros_workload_io_written_bytes",
        "Bytes written",
        Counter,
        io(|d| d.write_bytes_total),
    )?;
    family(
        enc,
        "daros_workload_io_reads",
        "Read operations",
        Counter,
        io(|d| d.reads_total),
    )?;
    family(
        enc,
        "daros_workload_io_writes",
        "Write operations",
        Counter,
        io(|d| d.writes_total),
    )?;
    family(
        enc,
        "daros_workload_pids",
        "Tasks in the cgroup",
        Gauge,
        per(&|w| w.sample.pids.map(|p| p as f64)),
    )?;
    family(
        enc,
        "daros_workload_gpu_memory_bytes",
        "GPU memory held by the workload's processes",
        Gauge,
        per(&|w| w.sample.gpu_memory_bytes.map(|b| b as f64)),
    )?;
    encode_datapath(snap, enc)?;
    let mut stalled = Vec::new();
    let mut avg = Vec::new();
    for w in &snap.workloads {
        stalled.extend(psi_items(&w.sample.psi, &wl(w), false));
        avg.extend(psi_items(&w.sample.psi, &wl(w), true));
    }
    family(
        enc,
        "daros_workload_pressure_stalled_seconds",
        "Time stalled on a resource (PSI total)",
        Counter,
        stalled,
    )?;
    family(
        enc,
        "daros_workload_pressure_avg10_ratio",
        "Share of the last 10s stalled (PSI avg10)",
        Gauge,
        avg,
    )?;
    Ok(())
}

/// Upper bounds (microseconds) of the run-queue wait histogram buckets
/// exported; each is a bucket edge of the datapath's log2 histogram.
const RUNQUEUE_BUCKETS_US: [u64; 10] =
    [2, 8, 32, 128, 512, 2_048, 8_192, 32_768, 131_072, 1_048_576];

/// Network and run-queue families of the eBPF datapath.
fn encode_datapath(snap: &Snapshot, enc: &mut DescriptorEncoder) -> fmt::Result {
    use crate::model::net::NetDirectionSample;
    use MetricType::{Counter, Gauge};
    let wl = |w: &crate::model::Workload| -> Labels {
        vec![("workload", w.id.clone()), ("kind", w.kind.as_str().into())]
    };
    let net = |f: fn(&NetDirectionSample) -> Option<f64>| -> Vec<(Labels, f64)> {
        let mut out = Vec::new();
        for w in &snap.workloads {
            let Some(n) = &w.sample.network else { continue };
            for (dir, d) in [("egress", &n.egress), ("ingress", &n.ingress)] {
                if let Some(v) = f(d) {
                    let mut l = wl(w);
                    l.push(("direction", dir.into()));
                    out.push((l, v));
                }
            }
        }
        out
    };
    family(
        enc,
        "daros_workload_network_bytes",
        "Bytes passed by the workload's sockets (L3, eBPF cgroup_skb)",
        Counter,
        net(|d| Some(d.bytes_total as f64)),
    )?;
    family(
        enc,
        "daros_workload_network_packets",
        "Packets passed (a GSO/TSO skb counts once)",
        Counter,
        net(|d| Some(d.packets_total as f64)),
    )?;
    family(
        enc,
        "daros_workload_network_dropped_bytes",
        "Bytes dropped by the workload's cap",
        Counter,
        net(|d| Some(d.dropped_bytes_total as f64)),
    )?;
    family(
        enc,
        "daros_workload_network_dropped_packets",
        "Packets dropped by the workload's cap",
        Counter,
        net(|d| Some(d.dropped_packets_total as f64)),
    )?;
    family(
        enc,
        "daros_workload_network_marked_packets",
        "Packets passed with congestion notification (egress) or ECN CE (ingress)",
        Counter,
        net(|d| Some(d.marked_packets_total as f64)),
    )?;
    family(
        enc,
        "daros_workload_network_cap_bytes_per_second",
        "Cap in force (the tighter of the class limit and the floor loop's cap)",
        Gauge,
        net(|d| d.cap_bytes_per_second.map(|v| v as f64)),
    )?;
    family(
        enc,
        "daros_workload_network_throttled",
        "1 while the workload is over its bucket in that direction",
        Gauge,
        net(|d| Some(if d.throttled { 1.0 } else { 0.0 })),
    )?;
    family(
        enc,
        "daros_workload_network_throttle_episodes",
        "Throttle episodes seen since the agent started",
        Counter,
        net(|d| Some(d.throttle_episodes_total as f64)),
    )?;
    let rq = |f: fn(&crate::model::net::RunQueueSample) -> Option<f64>| -> Vec<(Labels, f64)> {
        snap.workloads
            .iter()
            .filter_map(|w| w.sample.runqueue.as_ref().and_then(f).map(|v| (wl(w), v)))
            .collect()
    };
    family(
        enc,
        "daros_workload_oncpu_seconds",
        "Time the workload's tasks ran on a CPU (eBPF sched_switch)",
        Counter,
        rq(|r| Some(r.oncpu_seconds_total)),
    )?;
    family(
        enc,
        "daros_workload_runqueue_wait_max_seconds",
        "Longest run-queue wait since the datapath first saw the cgroup",
        Gauge,
        rq(|r| Some(r.wait_max_seconds)),
    )?;
    family(
        enc,
        "daros_workload_runqueue_wait_p99_seconds",
        "99th percentile run-queue wait over the last sampling interval (log2 bucket bound)",
        Gauge,
        rq(|r| r.wait_p99_seconds),
    )?;
    let with_rq: Vec<&crate::model::Workload> = snap
        .workloads
        .iter()
        .filter(|w| w.sample.runqueue.is_some())
        .collect();
    if !with_rq.is_empty() {
        let mut m = enc.encode_descriptor(
            "daros_workload_runqueue_wait_seconds",
            "Run-queue wait of the workload's tasks, from wakeup or preemption to running",
            None,
            MetricType::Histogram,
        )?;
        for w in with_rq {
            let Some(r) = &w.sample.runqueue else {
                continue;
            };
            let mut buckets = Vec::with_capacity(RUNQUEUE_BUCKETS_US.len() + 1);
            let mut slot = 0usize;
            for bound in RUNQUEUE_BUCKETS_US {
                // slot i holds waits in [2^i, 2^(i+1)) us: its upper edge is 2^(i+1)
                let mut n = 0;
                while slot < r.wait_histogram.len() && (2u64 << slot) <= bound {
                    n += r.wait_histogram[slot];
                    slot += 1;
                }
                buckets.push((bound as f64 / 1e6, n));
            }
            let rest: u64 = r.wait_histogram.iter().skip(slot).sum();
            buckets.push((f64::INFINITY, rest));
            let count: u64 = r.wait_histogram.iter().sum();
            let labels = wl(w);
            m.encode_family(&labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    r.wait_seconds_total,
                    count,
                    &buckets,
                    None,
                )?;
        }
    }
    Ok(())
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        encode_snapshot(&self.latest.get(), &mut enc)
    }
}

/// A registry holding the snapshot collector.
pub fn registry(latest: Arc<Latest>) -> Registry {
    registry_with(latest, Vec::new())
}

/// A registry holding the snapshot collector and `extra` ones (QoS, ...).
pub fn registry_with(latest: Arc<Latest>, extra: Vec<Box<dyn Collector>>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(SnapshotCollector { latest }));
    for c in extra {
        r.register_collector(c);
    }
    r
}

/// Renders the registry in the OpenMetrics text format.
pub fn render(registry: &Registry) -> Result<String, fmt::Error> {
    let mut out = String::with_capacity(64 * 1024);
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// Converts OpenMetrics text into the classic Prometheus text format (0.0.4):
/// counter families are named with their `_total` suffix and `# EOF` is dropped.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut pending_help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(h) = pending_help.take() {
                out.push_str(h);
                out.push('\n');
            }
            pending_help = Some(line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if kind == "counter" && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            if let Some(h) = pending_help.take() {
                let text = h.splitn(4, ' ').nth(3).unwrap_or("");
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves OpenMetrics to clients that ask for it (Prometheus does), the classic
/// text format to everyone else (curl, promtool).
async fn metrics(State(reg): State<Arc<Registry>>, headers: axum::http::HeaderMap) -> Response {
    let wants_openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    match render(&reg) {
        Ok(body) if wants_openmetrics => {
            ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response()
        }
        Ok(body) => (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            to_prometheus_text(&body),
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "encoding metrics failed").into_response(),
    }
}

/// The router of the metrics listener (`GET /metrics`).
pub fn router(latest: Arc<Latest>) -> Router {
    router_with(latest, Vec::new())
}

/// The router of the metrics listener with `extra` collectors.
pub fn router_with(latest: Arc<Latest>, extra: Vec<Box<dyn Collector>>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, "only /metrics is served here\n") })
        .with_state(Arc::new(registry_with(latest, extra)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_get_total_names_in_prometheus_text() {
        let om = "# HELP a_seconds CPU time.\n# TYPE a_seconds counter\na_seconds_total{x=\"1\"} 2.0\n# HELP b Gauge.\n# TYPE b gauge\nb 1.0\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_seconds_total CPU time.\n# TYPE a_seconds_total counter\na_seconds_total{x=\"1\"} 2.0\n# HELP b Gauge.\n# TYPE b gauge\nb 1.0\n"
        );
    }
}
