//! Admission and placement at cluster scale: 50 tenants, 5,000 nodes (10
//! zones x 50 racks, a GPU pool, some Windows nodes), 20,000 applications
//! with 100,000 workloads (dependencies, GuaranteedPro reservations, GPU
//! work, spread rules, every strategy). Everything is admitted, arbitrated
//! by weighted DRF and placed, decision records kept. Prints placements per
//! second on one thread.
//!
//! `cargo bench -p daros-coordinator --bench placement [-- rounds]`
//! (pin it to one core with `taskset -c 1`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use daros_coordinator::model::application::{ApplicationSpec, Budget, LatencyClass, SlaGoals};
use daros_coordinator::model::lifecycle_policy::LifecyclePolicy;
use daros_coordinator::model::node::NodeCapacity;
use daros_coordinator::model::policy::{
    Policy, PolicyRules, PolicyScope, SpreadRule, StrategyKind,
};
use daros_coordinator::model::pool::{LabelSelector, ResourcePool};
use daros_coordinator::model::ratio::Ratio;
use daros_coordinator::model::runtime::{OsType, RuntimeRequirement, RuntimeSpec, RuntimeType};
use daros_coordinator::model::tenant::{Tenant, TenantQuota};
use daros_coordinator::model::workload::{Replicas, Workload};
use daros_coordinator::*;
use std::collections::BTreeMap;
use std::time::Instant;

const TENANTS: usize = 50;
const NODES: usize = 5_000;
const APPS: usize = 20_000;
const WORKLOADS_PER_APP: usize = 5;

/// Deterministic pseudo-random numbers (xorshift), so every run builds the
/// same cluster.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn nodes(rng: &mut Rng) -> Vec<Document> {
    (0..NODES)
        .map(|i| {
            let gpu = i % 10 == 0;
            let windows = i % 20 == 7;
            let mut runtimes = vec![RuntimeType::Container];
            if !windows {
                runtimes.push(RuntimeType::Process);
                if i % 5 == 0 {
                    runtimes.push(RuntimeType::Vm);
                }
            }
            let mut labels = BTreeMap::new();
            if gpu {
                labels.insert("accelerator".to_string(), "a100".to_string());
            }
            let zone = i / 500;
            let rack = i / 10;
            Document::Node(ExecutionNode {
                name: format!("node-{i:05}"),
                capacity: NodeCapacity {
                    cpu: MilliCpu::from_cores(32),
                    memory: Bytes::from_gib(128),
                    gpu: GpuCount(if gpu { 4 } else { 0 }),
                    network_egress: Some(BytesPerSec(1_250_000_000)),
                    network_ingress: Some(BytesPerSec(1_250_000_000)),
                },
                os: if windows {
                    OsType::Windows
                } else {
                    OsType::Linux
                },
                runtimes: runtimes.into_iter().collect(),
                labels,
                failure_domains: [
                    ("zone".to_string(), format!("z{zone}")),
                    ("rack".to_string(), format!("r{rack}")),
                ]
                .into_iter()
                .collect(),
                cost_per_hour: Some(Ratio(800 + rng.below(800))),
                schedulable: true,
            })
        })
        .collect()
}

fn tenants() -> Vec<Document> {
    let strategies = [
        None,
        Some(StrategyKind::Spread),
        Some(StrategyKind::SlaAware),
        Some(StrategyKind::CostAware),
        Some(StrategyKind::FairShare),
    ];
    let mut docs = vec![
        Document::ResourcePool(ResourcePool {
            name: "gpu".into(),
            selector: LabelSelector {
                match_labels: [("accelerator".to_string(), "a100".to_string())]
                    .into_iter()
                    .collect(),
                match_expressions: Vec::new(),
            },
        }),
        Document::Policy(Policy {
            name: "platform".into(),
            scope: PolicyScope::Global,
            rules: PolicyRules {
                enable_preemption: Some(true),
                max_overcommit_ratio: Some(Ratio(1500)),
                placement_strategy: Some(StrategyKind::BinPack),
                ..Default::default()
            },
        }),
    ];
    for t in 0..TENANTS {
        docs.push(Document::Tenant(Tenant {
            name: format!("tenant-{t:02}"),
            quota: TenantQuota {
                cpu: Some(MilliCpu::from_cores(20_000)),
                memory: Some(Bytes::from_gib(80_000)),
                gpu: Some(GpuCount(200)),
                max_applications: Some(1_000),
                max_concurrent_workloads: Some(10_000),
                priority_ceiling: 1000,
                pools: Default::default(),
            },
            pools: vec!["default".into(), "gpu".into()],
            namespaces: Vec::new(),
            policy: PolicyRules {
                fair_share_weight: Some(1 + (t as u32 % 3)),
                placement_strategy: strategies[t % strategies.len()],
                min_failure_domains: (t % 7 == 0).then(|| SpreadRule {
                    key: "rack".into(),
                    count: 2,
                }),
                ..Default::default()
            },
        }));
    }
    docs
}

fn workload(rng: &mut Rng, app: usize, j: usize, gpu: bool) -> Workload {
    let windows = app.is_multiple_of(23);
    let mut w = Workload::new(
        format!("w{j}"),
        RuntimeRequirement {
            runtime_type: if windows || j.is_multiple_of(2) {
                RuntimeType::Container
            } else {
                RuntimeType::Process
            },
            os: if windows {
                OsType::Windows
            } else {
                OsType::Linux
            },
        },
    );
    let cpu = 100 + rng.below(19) * 100;
    let mem = (128 + rng.below(31) * 128) << 20;
    w.image = Some(format!("registry.example.com/app{app}/w{j}:1"));
    w.resources.cpu.request = Some(MilliCpu(cpu));
    w.resources.memory.request = Some(Bytes(mem));
    if j == 0 && app.is_multiple_of(5) {
        // GuaranteedPro: request == limit with a MinimalReservation.
        w.qos = Some(QosClass::GuaranteedPro);
        w.resources.cpu.limit = Some(MilliCpu(cpu));
        w.resources.cpu.reservation = Some(MilliCpu(cpu / 2));
        w.resources.memory.limit = Some(Bytes(mem));
        w.resources.memory.reservation = Some(Bytes(mem / 2));
    } else {
        w.resources.cpu.limit = Some(MilliCpu(cpu * 2));
    }
    if gpu && j == 1 {
        w.resources.gpu.request = Some(GpuCount(1));
    }
    if j > 0 && rng.below(2) == 0 {
        w.depends_on = vec![format!("w{}", rng.below(j as u64))];
    }
    w.replicas = Replicas { min: 1, max: 3 };
    w.runtime_spec = RuntimeSpec::new(serde_json::json!({"command": "/bin/true"}));
    w
}

fn apps(rng: &mut Rng) -> Vec<Document> {
    (0..APPS)
        .map(|a| {
            let gpu = a % 47 == 3;
            let workloads = (0..WORKLOADS_PER_APP)
                .map(|j| workload(rng, a, j, gpu))
                .collect();
            Document::Application(Application {
                name: format!("app-{a:05}"),
                tenant: format!("tenant-{:02}", a % TENANTS),
                labels: BTreeMap::new(),
                spec: ApplicationSpec {
                    priority: rng.below(1000) as u32,
                    pool: gpu.then(|| "gpu".to_string()),
                    sla: SlaGoals {
                        latency: Some(match a % 3 {
                            0 => LatencyClass::Critical,
                            1 => LatencyClass::Standard,
                            _ => LatencyClass::Batch,
                        }),
                        ..Default::default()
                    },
                    qos: None,
                    budget: Budget::default(),
                    lifecycle_policy: LifecyclePolicy::default(),
                    policy: PolicyRules::default(),
                    workloads,
                    workflow: None,
                },
            })
        })
        .collect()
}

/// CPU time of this thread (user + system), from /proc, in seconds: the
/// machine is shared, so wall time alone would count other processes.
fn thread_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

struct Run {
    first_failure: Option<String>,
    cpu: f64,
    secs: f64,
    placed: usize,
    scheduled: usize,
    failed: usize,
    decisions: usize,
    events: usize,
}

fn run(batches: usize, start_apps: bool) -> Run {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut c = Coordinator::new();
    // Every decision record and event is kept, as the figures always assumed.
    let all = usize::MAX / 2;
    c.apply(
        Command::SetRetention {
            retention: daros_coordinator::state::history::Retention {
                events: all,
                decisions: all,
                evaluations: all,
                versions: all,
                audit: all,
            },
        },
        Timestamp(0),
    )
    .unwrap();
    // Each node registers itself, as its agent does.
    for d in nodes(&mut rng) {
        if let Document::Node(node) = d {
            c.apply(Command::RegisterNode { node }, Timestamp(0))
                .unwrap();
        }
    }
    c.apply(
        Command::Apply {
            documents: tenants(),
            start: true,
        },
        Timestamp(0),
    )
    .unwrap();
    let all = apps(&mut rng);
    let per = all.len().div_ceil(batches);
    let chunks: Vec<Vec<Document>> = all.chunks(per).map(<[Document]>::to_vec).collect();
    let cpu0 = thread_cpu_seconds().unwrap_or(0.0);
    let start = Instant::now();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let out = c
            .apply(
                Command::Apply {
                    documents: chunk,
                    start: start_apps,
                },
                Timestamp(1 + i as u64),
            )
            .unwrap();
        // The outcome (events, decisions, start actions) is part of the work.
        std::hint::black_box(out);
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_seconds().unwrap_or(0.0) - cpu0;
    let apps = c.list_apps(Timestamp(0));
    let instances: usize = apps.iter().map(|a| a.instances as usize).sum();
    let first_failure = apps
        .iter()
        .find(|a| matches!(a.phase, Phase::Failed | Phase::Rejected))
        .map(|a| format!("{}: {}", a.app, a.reason));
    Run {
        first_failure,
        cpu,
        secs,
        placed: instances,
        scheduled: apps
            .iter()
            .filter(|a| matches!(a.phase, Phase::Scheduled | Phase::Admitted))
            .count(),
        failed: apps.iter().filter(|a| a.phase == Phase::Failed).count(),
        decisions: c.decisions().len(),
        events: c.events().len(),
    }
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3);
    println!(
        "coordinator placement: {TENANTS} tenants, {NODES} nodes, {APPS} applications x {WORKLOADS_PER_APP} workloads"
    );
    let x = run(1, false);
    println!(
        "  admission only (no placement), 20,000 applications: {:.3} s wall, {:.2} s on-CPU = {:.0} applications admitted per CPU-second",
        x.secs,
        x.cpu,
        x.scheduled as f64 / x.cpu.max(0.01)
    );
    for (label, batches) in [
        ("one round of 20,000 applications", 1),
        ("50 rounds of 400 applications", 50),
    ] {
        let mut rates = Vec::new();
        let mut cpu_rates = Vec::new();
        for r in 0..rounds {
            let x = run(batches, true);
            if r == 0
                && let Some(why) = &x.first_failure
            {
                println!("    first failed application: {why}");
            }
            let rate = x.placed as f64 / x.secs;
            let cpu_rate = x.placed as f64 / x.cpu.max(0.01);
            rates.push(rate);
            cpu_rates.push(cpu_rate);
            println!(
                "  {label}, run {}: {} placements in {:.3} s wall, {:.2} s on-CPU = {:.0} placements/s wall, {:.0} per CPU-second ({} apps scheduled, {} failed; {} decisions, {} events kept)",
                r + 1,
                x.placed,
                x.secs,
                x.cpu,
                rate,
                cpu_rate,
                x.scheduled,
                x.failed,
                x.decisions,
                x.events
            );
        }
        rates.sort_by(f64::total_cmp);
        cpu_rates.sort_by(f64::total_cmp);
        println!(
            "  {label}: wall min {:.0} / median {:.0} / max {:.0}; per CPU-second min {:.0} / median {:.0} / max {:.0} placements/s",
            rates[0],
            rates[rates.len() / 2],
            rates[rates.len() - 1],
            cpu_rates[0],
            cpu_rates[cpu_rates.len() / 2],
            cpu_rates[cpu_rates.len() - 1]
        );
    }
}
