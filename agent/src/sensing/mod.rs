//! The sensing loop: node counters from `/proc`, workload counters from cgroups,
//! GPUs from NVML, turned into rates once per interval and published as an
//! immutable [`Snapshot`].

pub mod devices;
pub mod discovery;
pub mod node;
pub mod rate;
pub mod runner;
pub mod workload;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tracing::{debug, info, warn};

use crate::cgroup::{AnyBackend, CgroupBackend, CgroupError, CgroupMode, OpenMode};
use crate::gpu::GpuCollector;
use crate::gpu::mapping::{CgroupLine, WorkloadIndex, cgroup_of_pid};
use crate::model::node::AgentInfo;
use crate::model::{NodeSample, Workload, WorkloadKind};

use devices::DeviceNames;
use discovery::{DiscoveryConfig, discover};
use node::{NodeSensor, ProcPaths};
use workload::Tracked;

pub use runner::{Latest, SamplerHandle};

/// Stat files per workload at most (v1 with PSI), for the descriptor budget.
const FILES_PER_WORKLOAD: u64 = 12;
/// Descriptors kept free for sockets, logs and the rest of the agent.
const FD_RESERVE: u64 = 512;

/// Sampler settings.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Node name reported in samples.
    pub node_name: String,
    /// How often discovery runs.
    pub discovery_interval: Duration,
    /// What discovery looks for.
    pub discovery: DiscoveryConfig,
    /// Block device name prefixes to leave out of node disks.
    pub exclude_devices: Vec<String>,
    /// Interface name prefixes to leave out of node network.
    pub exclude_interfaces: Vec<String>,
    /// Static agent facts copied into every node sample.
    pub agent: AgentInfo,
    /// Where `/proc` and `/sys/block` are.
    pub paths: ProcPaths,
}

/// Everything measured at one tick.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The node.
    pub node: NodeSample,
    /// Workloads sorted by id.
    pub workloads: Vec<Workload>,
}

impl Snapshot {
    /// A workload by id.
    pub fn workload(&self, id: &str) -> Option<&Workload> {
        self.workloads
            .binary_search_by(|w| w.id.as_str().cmp(id))
            .ok()
            .map(|i| &self.workloads[i])
    }
}

/// A source of per-workload figures sampled outside cgroupfs (the eBPF
/// datapath's network and run-queue statistics). It fills its fields of each
/// workload's sample, or says in `unavailable` why it cannot.
pub trait WorkloadSource: Send + std::fmt::Debug {
    /// Fills `workloads` (sorted by id) at the end of a tick.
    fn fill(&mut self, workloads: &mut [Workload]);
}

/// Samples the node and its workloads.
#[derive(Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    backend: AnyBackend,
    node: NodeSensor,
    gpu: GpuCollector,
    names: DeviceNames,
    tracked: BTreeMap<String, Tracked>,
    last_discovery: Option<Instant>,
    buf: Vec<u8>,
    fd_limit: u64,
    kernel: String,
    started: Instant,
    samples_total: u64,
    errors_total: u64,
    last_duration: Duration,
    pid_line: CgroupLine,
    truncated_logged: bool,
    sources: Vec<Box<dyn WorkloadSource>>,
}

impl Sampler {
    /// A sampler over `backend`, reading GPUs through `gpu`.
    pub fn new(
        cfg: SamplerConfig,
        backend: AnyBackend,
        gpu: GpuCollector,
    ) -> Result<Self, CgroupError> {
        let node = NodeSensor::new(
            cfg.paths.clone(),
            cfg.exclude_devices.clone(),
            cfg.exclude_interfaces.clone(),
        )?;
        let fd_limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let pid_line = match &backend {
            AnyBackend::V2(_) => CgroupLine::Unified,
            AnyBackend::V1(b) => {
                let c = ["memory", "cpuacct", "cpu", "pids"]
                    .into_iter()
                    .find(|c| b.mount(c).is_some());
                c.map_or(CgroupLine::Unified, |c| CgroupLine::V1(c.to_string()))
            }
        };
        Ok(Sampler {
            kernel: rustix::system::uname()
                .release()
                .to_string_lossy()
                .into_owned(),
            cfg,
            backend,
            node,
            gpu,
            names: DeviceNames::default(),
            tracked: BTreeMap::new(),
            last_discovery: None,
            buf: Vec::with_capacity(16 * 1024),
            fd_limit,
            started: Instant::now(),
            samples_total: 0,
            errors_total: 0,
            last_duration: Duration::ZERO,
            pid_line,
            truncated_logged: false,
            sources: Vec::new(),
        })
    }

    /// The cgroup mode sampled.
    pub fn mode(&self) -> CgroupMode {
        self.backend.mode()
    }

    /// Whole disks of the node (for IO accounting activation).
    pub fn disks(&self) -> Vec<(u32, u32)> {
        self.node
            .disks()
            .iter()
            .map(|d| (d.major, d.minor))
            .collect()
    }

    /// Adds a source whose figures are merged into every workload sample.
    pub fn add_source(&mut self, source: Box<dyn WorkloadSource>) {
        self.sources.push(source);
    }

    /// Runs discovery now and reconciles the tracked set.
    pub fn discover(&mut self) {
        let roots: Vec<PathBuf> = self.backend.walk_roots();
        let result = discover(&roots, &self.cfg.discovery);
        if result.truncated > 0 && !self.truncated_logged {
            warn!(
                truncated = result.truncated,
                max = self.cfg.discovery.max_workloads,
                "discovery found more workloads than discovery.max_workloads; the rest are not sampled"
            );
            self.truncated_logged = true;
        }
        self.tracked
            .retain(|id, _| result.workloads.contains_key(id));
        let primary = self.backend.primary().map(PathBuf::from);
        for (id, d) in result.workloads {
            let inode = primary
                .as_ref()
                .and_then(|p| std::fs::metadata(d.cgroup.under(p)).ok())
                .map(|m| m.ino());
            if let Some(t) = self.tracked.get(&id) {
                if t.inode == inode {
                    continue;
                }
                debug!(workload = %id, "cgroup recreated; counters restart");
            }
            let budget = (self.tracked.len() as u64 + 1) * FILES_PER_WORKLOAD + FD_RESERVE;
            let mode = if budget <= self.fd_limit {
                OpenMode::KeepOpen
            } else {
                OpenMode::Reopen
            };
            match self.backend.open_stats(&d.cgroup, mode) {
                Ok(reader) => {
                    let paths = self
                        .backend
                        .dirs(&d.cgroup)
                        .into_iter()
                        .filter(|h| h.path.is_dir())
                        .map(|h| h.path.display().to_string())
                        .collect();
                    if !self.tracked.contains_key(&id) {
                        info!(workload = %id, cgroup = %d.cgroup, "workload discovered");
                    }
                    self.tracked
                        .insert(id, Tracked::new(d, paths, inode, reader));
                }
                Err(e) if e.is_gone() => {
                    self.tracked.remove(&id);
                }
                Err(e) => {
                    self.errors_total += 1;
                    warn!(workload = %id, error = %e, "cannot open workload cgroup");
                }
            }
        }
        self.node.refresh_devices();
        self.last_discovery = Some(Instant::now());
    }

    /// Takes one sample of everything (running discovery when it is due).
    pub fn tick(&mut self) -> Snapshot {
        let start = Instant::now();
        if self
            .last_discovery
            .is_none_or(|t| start.duration_since(t) >= self.cfg.discovery_interval)
        {
            self.discover();
        }
        let sampled_at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));

        let node = match self.node.read(&mut self.buf, Instant::now()) {
            Ok(n) => n,
            Err(e) => {
                self.errors_total += 1;
                warn!(error = %e, "reading node counters failed");
                node::NodeReading::default()
            }
        };

        let mut workloads = Vec::with_capacity(self.tracked.len());
        let mut gone = Vec::new();
        for (id, t) in &mut self.tracked {
            match t.sample(&mut self.buf, &mut self.names) {
                Ok(sample) => {
                    t.error_logged = false;
                    workloads.push(Workload {
                        id: id.clone(),
                        kind: t.info.kind,
                        cgroup: t.info.cgroup.to_string(),
                        paths: t.paths.clone(),
                        k8s_qos: t.info.k8s_qos.clone(),
                        managed: t.info.kind == WorkloadKind::Managed,
                        sample,
                    });
                }
                Err(e) if e.is_gone() => gone.push(id.clone()),
                Err(e) => {
                    self.errors_total += 1;
                    if !t.error_logged {
                        warn!(workload = %id, error = %e, "sampling workload failed");
                        t.error_logged = true;
                    }
                }
            }
        }
        for id in gone {
            info!(workload = %id, "workload cgroup removed");
            self.tracked.remove(&id);
        }

        let gpu = if self.gpu.available() {
            let index = WorkloadIndex::new(
                self.tracked
                    .iter()
                    .map(|(id, t)| (t.info.cgroup.clone(), id.clone()))
                    .collect(),
            );
            let proc_root = self.node.proc_root().to_path_buf();
            let line = self.pid_line.clone();
            let report = self.gpu.collect(|pid| {
                cgroup_of_pid(&proc_root, pid, &line)
                    .and_then(|cg| index.lookup(&cg).map(str::to_string))
            });
            let by_workload = crate::gpu::memory_by_workload(&report);
            for w in &mut workloads {
                w.sample.gpu_memory_bytes =
                    Some(by_workload.get(w.id.as_str()).copied().unwrap_or(0));
            }
            report
        } else {
            self.gpu.collect(|_| None)
        };

        for source in &mut self.sources {
            source.fill(&mut workloads);
        }

        self.samples_total += 1;
        let mut agent = self.cfg.agent.clone();
        agent.uptime_seconds = self.started.elapsed().as_secs_f64();
        agent.samples_total = self.samples_total;
        agent.sample_errors_total = self.errors_total;
        agent.last_sample_duration_us =
            u64::try_from(self.last_duration.as_micros()).unwrap_or(u64::MAX);
        let snapshot = Snapshot {
            node: NodeSample {
                node: self.cfg.node_name.clone(),
                kernel: self.kernel.clone(),
                sampled_at_unix_ms,
                cpu: node.cpu,
                memory: node.memory,
                disks: node.disks,
                network: node.network,
                psi: node.psi,
                gpu,
                workloads: workloads.len(),
                agent,
            },
            workloads,
        };
        self.last_duration = start.elapsed();
        snapshot
    }
}
