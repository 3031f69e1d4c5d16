//! [`NetService`]: opens (or reopens) the pinned datapath when darosd starts,
//! runs the reconcile thread, the floor loop and the event reader, and answers
//! what it does (`/v1/net`, capabilities, metrics).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use daros_ebpf::{
    FloorConfig, NetDatapath, NetOptions, OpenOutcome, PinDir, SchedDatapath, SchedOptions,
};
use tracing::{error, info, warn};

use super::events::EventBook;
use super::floor::{FloorLoop, FloorView};
use super::reconcile::Reconciler;
use super::source::NetSource;
use crate::cgroup::{CgroupPath, ManagedRoot};
use crate::config::Config;
use crate::model::caps::{DatapathCaps, Feature};
use crate::model::net::{DatapathPart, NetStatus, NetWorkloadStatus};
use crate::qos::QosService;

/// What the service needs from the configuration and the host.
#[derive(Debug, Clone)]
pub struct NetSettings {
    /// `[net] enabled`.
    pub enabled: bool,
    /// Pin directory.
    pub pins: PinDir,
    /// The cgroup2 mount (`/sys/fs/cgroup` on v2, `/sys/fs/cgroup/unified` on hybrid).
    pub cgroup2: Option<PathBuf>,
    /// The managed root.
    pub managed_root: CgroupPath,
    /// Floor controller parameters (capacities 0: no floors in that direction).
    pub floor: FloorConfig,
    /// Floor loop tick.
    pub floor_period: Duration,
    /// Reconcile period.
    pub reconcile_interval: Duration,
    /// Load the run-queue programs.
    pub runqueue: bool,
    /// Workload slots.
    pub max_slots: u32,
    /// Where the capacities come from, or why there are none.
    pub capacity_source: String,
}

impl NetSettings {
    /// From `[net]` (capacities fall back to `[qos] network_*_capacity`).
    pub fn from_config(cfg: &Config, cgroup2: Option<PathBuf>, managed_root: CgroupPath) -> Self {
        let n = &cfg.net;
        let cap = |link: Option<daros_coordinator::BytesPerSec>,
                   qos: Option<daros_coordinator::BytesPerSec>| {
            link.map(|v| v.get())
                .or_else(|| qos.map(|v| (v.get() as f64 / (1.0 - n.headroom)).round() as u64))
                .unwrap_or(0)
        };
        NetSettings {
            enabled: n.enabled,
            pins: PinDir::new(&n.pin_dir),
            cgroup2,
            managed_root,
            floor: FloorConfig {
                egress_capacity_bps: cap(n.egress_capacity, cfg.qos.network_egress_capacity),
                ingress_capacity_bps: cap(n.ingress_capacity, cfg.qos.network_ingress_capacity),
                headroom: n.headroom,
                ..FloorConfig::default()
            },
            floor_period: n.floor_period.0,
            reconcile_interval: n.reconcile_interval.0,
            runqueue: n.runqueue,
            max_slots: n.max_slots,
            capacity_source: "from the configuration".into(),
        }
    }
}

/// Registrations as the reconcile thread last left them, shared with the
/// sampler's source and the event reader.
#[derive(Debug, Default, Clone)]
pub struct Registered {
    /// Bumped whenever a workload is registered, re-registered or removed (a
    /// reader in another handle must rescan the index).
    pub generation: u64,
    /// Per workload id.
    pub workloads: BTreeMap<String, NetWorkloadStatus>,
    /// cgroup id → workload id (workloads and their members).
    pub by_cgroup: HashMap<u64, String>,
}

/// State shared by the service's threads and readers.
#[derive(Debug, Default)]
pub struct Shared {
    pub(crate) registered: RwLock<Arc<Registered>>,
    pub(crate) events: Mutex<EventBook>,
    pub(crate) floor: Mutex<FloorView>,
    pub(crate) notes: Mutex<Vec<String>>,
    pub(crate) node: Mutex<NodeNet>,
}

/// Node-wide datapath counters, refreshed by the sampler's source.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeNet {
    /// Bytes of unregistered cgroups below attach points.
    pub unregistered_bytes: u64,
    /// Events lost.
    pub events_lost: u64,
}

impl Shared {
    /// The current registrations.
    pub fn registered(&self) -> Arc<Registered> {
        match self.registered.read() {
            Ok(g) => Arc::clone(&g),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    pub(crate) fn publish(&self, r: Registered) {
        let r = Arc::new(r);
        match self.registered.write() {
            Ok(mut g) => *g = r,
            Err(p) => *p.into_inner() = r,
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What `open` produced and `start` consumes.
#[derive(Debug, Default)]
struct Owned {
    net: Option<NetDatapath>,
    sched: Option<SchedDatapath>,
}

#[derive(Debug, Default)]
struct Running {
    stops: Vec<mpsc::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The agent's eBPF datapath.
#[derive(Debug)]
pub struct NetService {
    settings: NetSettings,
    network: DatapathPart,
    runqueue: DatapathPart,
    floors_detail: (bool, String),
    shared: Arc<Shared>,
    owned: Mutex<Owned>,
    running: Mutex<Running>,
}

fn outcome(o: &OpenOutcome) -> String {
    match o {
        OpenOutcome::Fresh => "fresh: programs loaded and pinned".into(),
        OpenOutcome::Reopened => "reopened: pinned programs, maps and links reused".into(),
        OpenOutcome::Upgraded { previous } => {
            format!("upgraded: programs of build {previous:x} replaced in place, maps kept")
        }
        OpenOutcome::Replaced { reason } => format!("replaced: {reason}"),
    }
}

/// An operator-facing reason for a failed open.
fn explain(e: &daros_ebpf::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut chain = e.to_string();
    while let Some(s) = source {
        let part = s.to_string();
        // aya repeats the inner message in some outer ones
        if !chain.contains(&part) {
            chain.push_str(&format!(": {part}"));
        }
        source = s.source();
    }
    let denied = chain.contains("Operation not permitted") || chain.contains("Permission denied");
    if denied {
        format!(
            "{chain} (darosd needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, or CAP_SYS_ADMIN, to load eBPF programs)"
        )
    } else {
        chain
    }
}

impl NetService {
    /// Opens the datapath: mounts bpffs when needed and reopens the pins of an
    /// earlier run (counters and caps kept) or loads fresh. Never fails: a host
    /// that cannot run it gets a service whose parts say why.
    pub fn open(settings: NetSettings) -> Arc<Self> {
        let mut owned = Owned::default();
        let (network, runqueue) = if !settings.enabled {
            let off = DatapathPart {
                available: false,
                detail: "disabled ([net] enabled = false)".into(),
            };
            (off.clone(), off)
        } else if settings.cgroup2.is_none() {
            let off = DatapathPart {
                available: false,
                detail: "no cgroup2 mount: cgroup eBPF programs attach to cgroup v2 directories and tasks are keyed by their cgroup2 cgroup".into(),
            };
            (off.clone(), off)
        } else {
            let network = match NetDatapath::open(&NetOptions {
                pins: settings.pins.clone(),
                max_slots: settings.max_slots,
            }) {
                Ok(n) => {
                    let d = outcome(n.outcome());
                    owned.net = Some(n);
                    DatapathPart {
                        available: true,
                        detail: d,
                    }
                }
                Err(e) => DatapathPart {
                    available: false,
                    detail: explain(&e),
                },
            };
            let runqueue = if !settings.runqueue {
                DatapathPart {
                    available: false,
                    detail: "disabled ([net] runqueue = false)".into(),
                }
            } else {
                match SchedDatapath::open(&SchedOptions {
                    pins: settings.pins.clone(),
                }) {
                    Ok(s) => {
                        let d = outcome(s.outcome());
                        owned.sched = Some(s);
                        DatapathPart {
                            available: true,
                            detail: d,
                        }
                    }
                    Err(e) => DatapathPart {
                        available: false,
                        detail: explain(&e),
                    },
                }
            };
            (network, runqueue)
        };
        for (part, p) in [("network", &network), ("runqueue", &runqueue)] {
            if p.available {
                info!(part, pins = %settings.pins.path().display(), detail = %p.detail, "eBPF datapath ready");
            } else if settings.enabled {
                error!(part, reason = %p.detail, "eBPF datapath unavailable; reported as unavailable per workload");
            } else {
                info!(part, "eBPF datapath disabled");
            }
        }
        let f = &settings.floor;
        let floors_detail = if !network.available {
            (
                false,
                format!("network datapath unavailable: {}", network.detail),
            )
        } else if f.egress_capacity_bps == 0 && f.ingress_capacity_bps == 0 {
            (
                false,
                format!(
                    "no capacity known ({}): set [net] egress_capacity / ingress_capacity to enforce network floors",
                    settings.capacity_source
                ),
            )
        } else {
            (
                true,
                format!(
                    "egress capacity {} B/s, ingress capacity {} B/s ({}), headroom {}, tick {} ms",
                    f.egress_capacity_bps,
                    f.ingress_capacity_bps,
                    settings.capacity_source,
                    f.headroom,
                    settings.floor_period.as_millis()
                ),
            )
        };
        Arc::new(NetService {
            settings,
            network,
            runqueue,
            floors_detail,
            shared: Arc::new(Shared::default()),
            owned: Mutex::new(owned),
            running: Mutex::new(Running::default()),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &NetSettings {
        &self.settings
    }

    /// State shared with the threads.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The network part.
    pub fn network(&self) -> &DatapathPart {
        &self.network
    }

    /// The run-queue part.
    pub fn runqueue(&self) -> &DatapathPart {
        &self.runqueue
    }

    /// Capabilities as started.
    pub fn caps(&self) -> DatapathCaps {
        let f = |p: &DatapathPart| Feature {
            available: p.available,
            detail: p.detail.clone(),
        };
        DatapathCaps {
            network: f(&self.network),
            runqueue: f(&self.runqueue),
            floors: Feature {
                available: self.floors_detail.0,
                detail: self.floors_detail.1.clone(),
            },
        }
    }

    /// A sampler source filling each workload's network and run-queue figures.
    pub fn source(self: &Arc<Self>) -> Box<dyn crate::sensing::WorkloadSource> {
        Box::new(NetSource::new(Arc::clone(self)))
    }

    /// Starts the reconcile thread (attachments and caps follow the managed
    /// workloads and `qos`'s classes), the floor loop and the event reader.
    /// Must run inside the tokio runtime.
    pub fn start(self: &Arc<Self>, qos: Option<Arc<QosService>>, managed: Option<ManagedRoot>) {
        let Owned { net, sched } = std::mem::take(&mut *lock(&self.owned));
        let mut running = lock(&self.running);
        let Some(mut net) = net else {
            // Run-queue statistics need no attachments; still prune gone cgroups.
            if let Some(sched) = sched {
                let (tx, rx) = mpsc::channel();
                let rec = Reconciler::new(
                    None,
                    Some(sched),
                    self.settings.clone(),
                    Arc::clone(&self.shared),
                    None,
                    qos,
                    managed,
                );
                match spawn("daros-net-reconcile", move || rec.run(rx)) {
                    Ok(h) => {
                        running.stops.push(tx);
                        running.threads.push(h);
                    }
                    Err(e) => error!(error = %e, "cannot start the datapath reconcile thread"),
                }
            }
            return;
        };
        match net.take_events() {
            Ok(events) => {
                if events.lost_before_open() > 0 {
                    warn!(
                        lost = events.lost_before_open(),
                        "network events were lost while no reader ran"
                    );
                }
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                running.tasks.push(tokio::spawn(async move {
                    if let Err(e) = events.run(Some(tx)).await {
                        error!(error = %e, "network event reader stopped");
                    }
                }));
                running.tasks.push(tokio::spawn(super::events::consume(
                    rx,
                    Arc::clone(&self.shared),
                )));
            }
            Err(e) => {
                error!(error = %e, "cannot read network events; throttle and drop events are not reported");
                lock(&self.shared.notes).push(format!("network events unavailable: {e}"));
            }
        }
        let net = Arc::new(Mutex::new(net));
        let floor_tx = if self.floors_detail.0 {
            match FloorLoop::new(
                self.settings.floor,
                Arc::clone(&net),
                self.settings.floor_period,
                Arc::clone(&self.shared),
            ) {
                Ok((floor, updates)) => {
                    let (tx, rx) = mpsc::channel();
                    match spawn("daros-net-floor", move || floor.run(rx)) {
                        Ok(h) => {
                            running.stops.push(tx);
                            running.threads.push(h);
                            Some(updates)
                        }
                        Err(e) => {
                            error!(error = %e, "cannot start the floor loop");
                            None
                        }
                    }
                }
                Err(e) => {
                    error!(error = %e, "floor loop refused its configuration");
                    lock(&self.shared.notes).push(format!("floor loop not started: {e}"));
                    None
                }
            }
        } else {
            None
        };
        let (tx, rx) = mpsc::channel();
        let rec = Reconciler::new(
            Some(net),
            sched,
            self.settings.clone(),
            Arc::clone(&self.shared),
            floor_tx,
            qos,
            managed,
        );
        match spawn("daros-net-reconcile", move || rec.run(rx)) {
            Ok(h) => {
                // Stopped first: the floor loop must not get a new set while it stops.
                running.stops.insert(0, tx);
                running.threads.insert(0, h);
            }
            Err(e) => error!(error = %e, "cannot start the datapath reconcile thread"),
        }
    }

    /// Stops the threads. The floor loop lifts its caps (nothing keeps them
    /// current without the agent); class limits, counting and attachments stay
    /// pinned and keep working.
    pub fn shutdown(&self) {
        let r = std::mem::take(&mut *lock(&self.running));
        for (stop, thread) in r.stops.into_iter().zip(r.threads) {
            let _ = stop.send(());
            let _ = thread.join();
        }
        for t in r.tasks {
            t.abort();
        }
    }

    /// `GET /v1/net`.
    pub fn status(&self) -> NetStatus {
        let reg = self.shared.registered();
        let floor = lock(&self.shared.floor).status(&self.settings, &self.floors_detail);
        let (events, recent) = {
            let book = lock(&self.shared.events);
            (book.counts, book.recent())
        };
        let node = *lock(&self.shared.node);
        let mut workloads: Vec<NetWorkloadStatus> = reg.workloads.values().cloned().collect();
        let (caps, since) = {
            let f = lock(&self.shared.floor);
            (f.caps.clone(), f.since.clone())
        };
        for w in &mut workloads {
            if let Some(id) = w.cgroup_id {
                w.egress_floor_cap_bytes_per_second = caps.get(&(id, 0)).copied();
                w.ingress_floor_cap_bytes_per_second = caps.get(&(id, 1)).copied();
                w.egress_floor_capped_since_ns = since.get(&(id, 0)).copied();
                w.ingress_floor_capped_since_ns = since.get(&(id, 1)).copied();
            }
        }
        NetStatus {
            enabled: self.settings.enabled,
            network: self.network.clone(),
            runqueue: self.runqueue.clone(),
            floors: floor,
            pin_dir: self.settings.pins.path().display().to_string(),
            cgroup2_mount: self
                .settings
                .cgroup2
                .as_ref()
                .map(|p| p.display().to_string()),
            workloads,
            events,
            recent_events: recent,
            unregistered_bytes_total: node.unregistered_bytes,
            events_lost_total: node.events_lost,
            notes: lock(&self.shared.notes).clone(),
        }
    }
}

impl Drop for NetService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(f)
}
