//! `darosd`: loads the configuration, prepares the managed cgroup root, probes
//! the host, runs the sampler thread and serves the local API (and optionally
//! Prometheus metrics) until SIGTERM/SIGINT.

pub mod args;
pub mod control;
pub mod iocost;
pub mod kubernetes;
pub mod memlock;
pub mod net;
pub mod notify;
pub mod qos;
pub mod runtime;
pub mod stall;
pub mod territory;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

/// How often the runtime adapters are probed for `daros_adapter_up`.
const ADAPTER_PROBE: Duration = Duration::from_secs(5);

use crate::api::{self, AppState};
use crate::caps;
use crate::cgroup::{AnyBackend, CgroupBackend, CgroupLayout, CgroupPath, ManagedRoot};
use crate::config::{self, Config, ConfigError, LogFormat, Overrides};
use crate::gpu::GpuCollector;
use crate::metrics;
use crate::model::caps::{Feature, ManagedRootCaps};
use crate::model::node::AgentInfo;
use crate::sensing::discovery::DiscoveryConfig;
use crate::sensing::node::ProcPaths;
use crate::sensing::{Latest, Sampler, SamplerConfig, SamplerHandle};
use args::DaemonArgs;

/// Errors that stop the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration is invalid (exit status 2).
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// Startup failed (exit status 1).
    #[error("{0}")]
    Startup(String),
}

impl DaemonError {
    /// The process exit status.
    pub fn exit_code(&self) -> u8 {
        match self {
            DaemonError::Config(_) => 2,
            DaemonError::Startup(_) => 1,
        }
    }
}

fn startup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> DaemonError + '_ {
    move |e| DaemonError::Startup(format!("{what}: {e}"))
}

fn init_logging(cfg: &Config) -> Result<(), DaemonError> {
    // The mesh libraries log every election and connection at info.
    let mut level = cfg.agent.log_level.clone();
    for quiet in ["openraft", "foca", "quinn"] {
        if !level.contains(quiet) {
            level.push_str(&format!(",{quiet}=warn"));
        }
    }
    let filter = EnvFilter::try_new(&level)
        .map_err(|e| ConfigError::invalid("agent.log_level", e.to_string()))?;
    // Colour only on a terminal: journald and redirected logs get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let res = match cfg.agent.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // A subscriber may already exist when run inside tests; that is fine.
    let _ = res;
    Ok(())
}

/// Raises the descriptor soft limit to the hard limit (sampled files stay open).
fn raise_nofile() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let cur = getrlimit(Resource::Nofile);
    if cur.current != cur.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: cur.maximum,
                maximum: cur.maximum,
            },
        );
    }
}

fn ensure_data_dir(dir: &Path) -> Result<(), DaemonError> {
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(startup("creating agent.data_dir"))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
            .map_err(startup("chmod agent.data_dir"))?;
    }
    if !dir.is_dir() {
        return Err(DaemonError::Startup(format!(
            "agent.data_dir {} is not a directory",
            dir.display()
        )));
    }
    Ok(())
}

/// `--prepare`: creates the managed root in every hierarchy (the running
/// agent, without CAP_DAC_OVERRIDE, can write below it but not at the root).
fn prepare(cfg: &Config) -> Result<(), DaemonError> {
    let root = CgroupPath::new(&cfg.cgroup.managed_root)
        .map_err(|e| ConfigError::invalid("cgroup.managed_root", e.to_string()))?;
    let layout = CgroupLayout::detect().map_err(startup("detecting cgroups"))?;
    let backend = AnyBackend::from_layout(&layout).map_err(startup("cgroup backend"))?;
    backend
        .create(&root)
        .map_err(startup("creating the managed root"))?;
    info!(managed_root = %root, mode = %layout.mode, "prepared");
    Ok(())
}

/// Claims this agent's managed root, pin directory, socket and data dir
/// (see [`territory`]).
fn claim_territory(cfg: &Config) -> Result<territory::Territory, DaemonError> {
    let abs = |p: &Path| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let mut parts = vec![
        territory::Part {
            key: "cgroup.managed_root",
            value: cfg.cgroup.managed_root.trim_matches('/').to_string(),
        },
        territory::Part {
            key: "api.socket",
            value: abs(&cfg.api.socket),
        },
        territory::Part {
            key: "agent.data_dir",
            value: abs(&cfg.agent.data_dir),
        },
    ];
    // An agent without the datapath never touches the pins.
    if cfg.net.enabled {
        parts.push(territory::Part {
            key: "net.pin_dir",
            value: abs(&cfg.net.pin_dir),
        });
    }
    let me = format!(
        "pid {}, socket {}, data dir {}, managed root {}{}",
        std::process::id(),
        parts[1].value,
        parts[2].value,
        parts[0].value,
        parts
            .get(3)
            .map(|p| format!(", pin dir {}", p.value))
            .unwrap_or_default()
    );
    territory::claim(Path::new(territory::LOCK_DIR), &parts, &me)
        .map_err(|e| DaemonError::Startup(e.to_string()))
}

/// Runs the daemon until it is asked to stop.
pub fn run(args: DaemonArgs) -> Result<(), DaemonError> {
    let cfg = config::load(&Overrides::from_process(args.config.clone(), args.flags()))?;
    if args.check_config {
        let text = toml::to_string_pretty(&cfg).map_err(startup("printing configuration"))?;
        print!("{text}");
        return Ok(());
    }
    init_logging(&cfg)?;
    if args.prepare {
        return prepare(&cfg);
    }
    raise_nofile();
    // Before the runtime's threads: their stacks are locked as they are used.
    let memory_lock = memlock::lock(cfg.agent.lock_memory);
    if memory_lock.available {
        info!(detail = %memory_lock.detail, "memory lock");
    } else {
        warn!(detail = %memory_lock.detail, "memory lock");
    }
    // Before anything of the territory is touched (data dir, socket,
    // managed root, pins).
    let _territory = claim_territory(&cfg)?;
    ensure_data_dir(&cfg.agent.data_dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("darosd")
        .enable_all()
        .build()
        .map_err(startup("starting the async runtime"))?;
    rt.block_on(serve(cfg, memory_lock))
}

async fn serve(mut cfg: Config, memory_lock: Feature) -> Result<(), DaemonError> {
    let stalls = stall::StallProbe::spawn();
    // The node's bandwidth, when no configuration names it: the link speed.
    let capacity_source = crate::net::link::derive(
        &mut cfg,
        std::path::Path::new("/proc/net/route"),
        std::path::Path::new("/sys/class/net"),
    );
    info!(source = %capacity_source, "network capacity for floors");
    let (listener, socket_guard) =
        api::socket::bind(&cfg.api.socket, cfg.api.socket_group.as_deref())
            .map_err(|e| DaemonError::Startup(e.to_string()))?;
    let metrics_listener = match &cfg.metrics.listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| DaemonError::Startup(format!("metrics.listen {addr}: {e}")))?,
        ),
        None => None,
    };
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());

    let layout = CgroupLayout::detect().map_err(startup("detecting cgroups"))?;
    let backend = AnyBackend::from_layout(&layout).map_err(startup("cgroup backend"))?;
    let gpu = if cfg.gpu.enabled {
        GpuCollector::detect(cfg.gpu.library.as_deref())
    } else {
        GpuCollector::none("no GPU: collection disabled (gpu.enabled = false)")
    };
    let gpu_feature = if gpu.available() {
        Feature::yes("NVML initialised")
    } else {
        Feature::no(gpu.reason().unwrap_or("no GPU"))
    };
    let managed_root = CgroupPath::new(&cfg.cgroup.managed_root)
        .map_err(|e| ConfigError::invalid("cgroup.managed_root", e.to_string()))?;
    let node_name: String = cfg.agent.node_name.clone().unwrap_or_else(|| {
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned()
    });
    let interval = cfg.interval();
    let sampler_cfg = SamplerConfig {
        node_name: node_name.clone(),
        discovery_interval: cfg.discovery.interval.0,
        discovery: DiscoveryConfig {
            managed_root: managed_root.clone(),
            kubernetes: cfg.discovery.kubernetes,
            kubepods_roots: cfg.discovery.kubepods_roots.clone(),
            systemd: cfg.discovery.systemd,
            systemd_unit_types: cfg.discovery.systemd_unit_types.clone(),
            max_workloads: cfg.discovery.max_workloads,
        },
        exclude_devices: cfg.sensing.exclude_devices.clone(),
        exclude_interfaces: cfg.sensing.exclude_interfaces.clone(),
        agent: AgentInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            socket: cfg.api.socket.display().to_string(),
            data_dir: cfg.agent.data_dir.display().to_string(),
            managed_root: managed_root.to_string(),
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            metrics_listen: metrics_addr.map(|a| a.to_string()),
            ..AgentInfo::default()
        },
        paths: ProcPaths::default(),
    };
    let mut sampler = Sampler::new(sampler_cfg, backend.clone(), gpu)
        .map_err(startup("opening node counters"))?;
    let datapath = net::open(&cfg, &layout, &managed_root, capacity_source);
    sampler.add_source(datapath.source());

    let mut managed = None;
    let (notes, dirs) =
        match ManagedRoot::ensure(backend.clone(), managed_root.clone(), &sampler.disks()) {
            Ok(m) => {
                managed = Some(m.clone());
                for n in m.notes() {
                    warn!(note = %n, "managed root degraded");
                }
                let dirs = backend
                    .dirs(&managed_root)
                    .into_iter()
                    .map(|d| d.path.display().to_string())
                    .collect();
                (m.notes().to_vec(), dirs)
            }
            Err(e) => {
                error!(error = %e, "cannot create the managed cgroup root; only observing");
                (
                    vec![format!("cannot create the managed root: {e}")],
                    Vec::new(),
                )
            }
        };
    // Before the QoS service: its facts and IO floor capacity follow iocost.
    let mut io_cost = iocost::start(&cfg, &layout);
    let mut caps = caps::probe(&layout, gpu_feature);
    caps.datapath = datapath.caps();
    caps.summary.extend(net::summary(&caps.datapath));
    caps.summary.push(io_cost.summary());
    caps.io_cost = io_cost.caps.clone();
    caps.summary.push(format!(
        "memory lock: {}{}",
        if memory_lock.available { "" } else { "no: " },
        memory_lock.detail
    ));
    caps.memory_lock = memory_lock;
    caps.cgroup.managed_root = Some(ManagedRootCaps {
        path: managed_root.to_string(),
        dirs,
        notes,
    });
    for line in &caps.summary {
        info!("{line}");
    }

    let first = sampler.tick();
    let latest = Arc::new(Latest::new(first));
    let handle = SamplerHandle::spawn(sampler, interval, Arc::clone(&latest))
        .map_err(startup("starting the sampler"))?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut qos_cfg = net::qos_config(&cfg);
    io_cost.fill_capacity(&mut qos_cfg);
    let io_first_line = io_cost.latency_targets_everywhere();
    let io_cost = api::caps::IoCostState::new(io_cost);
    let qos = qos::start(&qos_cfg, managed.clone(), io_first_line);
    let runtime_root = managed.clone();
    datapath.start(qos.clone(), managed);
    // The QoS report says what the datapath does for network bounds.
    if let Some(q) = &qos {
        let st = datapath.status();
        q.set_network(if st.network.available {
            crate::qos::facts::NetworkFacts::On {
                floors: if st.floors.running {
                    Ok(())
                } else {
                    Err(st.floors.detail)
                },
            }
        } else {
            crate::qos::facts::NetworkFacts::Off(st.network.detail)
        });
    }
    // The runtime executor runs this node's desired work; without it the
    // control plane accepts work and runs nothing (NoopExecutor, logged).
    let runtime = runtime::start(&cfg, &node_name, runtime_root, qos.clone()).await;
    let kube_mode = kubernetes::start(&cfg, qos.as_ref(), stop_rx.clone()).await;
    let executor: Option<Arc<dyn crate::control::work::WorkExecutor>> = runtime
        .clone()
        .map(|e| e as Arc<dyn crate::control::work::WorkExecutor>);
    // The runtime types this node registers: what its adapters run (none
    // without a runtime executor, so nothing is placed where nothing can run).
    let runtimes = runtime
        .as_ref()
        .map(|e| {
            e.adapters()
                .all_capabilities()
                .into_iter()
                .flat_map(|c| c.runtime_types)
                .collect()
        })
        .unwrap_or_default();
    let control = control::start(&cfg, &node_name, Arc::clone(&latest), executor, runtimes).await;
    let state = AppState {
        latest: Arc::clone(&latest),
        caps: Arc::new(caps),
        interval,
        qos: qos.clone(),
        net: Some(Arc::clone(&datapath)),
        control: control.clone(),
        runtime: runtime.clone(),
        io_cost: Some(Arc::clone(&io_cost)),
    };
    let api_server = tokio::spawn(api::serve::serve(
        listener,
        api::router(state, cfg.api.body_timeout.0),
        cfg.api.header_timeout.0,
        stop_rx.clone(),
    ));
    let mut qos_metrics: Vec<Box<dyn prometheus_client::collector::Collector>> = qos
        .iter()
        .map(|q| {
            Box::new(crate::qos::metrics::QosCollector::new(Arc::clone(q)))
                as Box<dyn prometheus_client::collector::Collector>
        })
        .collect();
    qos_metrics.push(Box::new(crate::net::metrics::NetCollector::new(
        Arc::clone(&datapath),
    )));
    let adapter_probe = runtime.as_ref().map(|e| {
        qos_metrics.push(Box::new(crate::runtime::adapter_metrics::AdapterCollector(
            e.adapters().stats(),
        )));
        tokio::spawn(crate::runtime::adapter_metrics::probe_loop(
            Arc::downgrade(e),
            ADAPTER_PROBE,
        ))
    });
    let event_sinks = control
        .as_ref()
        .map(|plane| start_event_sinks(&cfg, plane, &mut qos_metrics))
        .unwrap_or_default();
    let control_metrics = control.as_ref().map(|plane| {
        let m = Arc::new(crate::control::metrics::ControlMetrics::default());
        qos_metrics.push(Box::new(crate::control::metrics::ControlCollector(
            Arc::clone(&m),
        )));
        tokio::spawn(Arc::clone(&m).refresh_loop(Arc::clone(plane), Duration::from_secs(1)))
    });
    let qos_reconcile = qos
        .as_ref()
        .map(|q| qos::reconcile_loop(Arc::clone(q), cfg.qos.reconcile_interval.0, stop_rx.clone()));
    qos_metrics.push(Box::new(stall::StallCollector(stalls)));
    let metrics_server = metrics_listener.map(|l| {
        tokio::spawn(api::serve::serve(
            l,
            metrics::router_with(Arc::clone(&latest), qos_metrics),
            cfg.api.header_timeout.0,
            stop_rx.clone(),
        ))
    });
    let watchdog = tokio::spawn(notify::watchdog(Arc::clone(&latest), interval));
    info!(
        socket = %cfg.api.socket.display(),
        metrics = ?metrics_addr,
        mode = %layout.mode,
        managed_root = %managed_root,
        "darosd ready"
    );
    notify::ready(&format!(
        "sampling every {}, serving {}",
        config::duration::format(interval),
        cfg.api.socket.display()
    ));

    wait_for_signal().await?;
    info!("shutting down");
    notify::stopping();
    let _ = stop_tx.send(true);
    watchdog.abort();
    for t in control_metrics
        .iter()
        .chain(adapter_probe.iter())
        .chain(event_sinks.iter())
    {
        t.abort();
    }
    let grace = Duration::from_secs(5);
    if tokio::time::timeout(grace, api_server).await.is_err() {
        warn!("API connections still open after {grace:?}; closing");
    }
    if let Some(m) = metrics_server {
        let _ = tokio::time::timeout(grace, m).await;
    }
    if let Some(r) = qos_reconcile {
        let _ = tokio::time::timeout(grace, r).await;
    }
    if let Some(k) = kube_mode {
        let _ = tokio::time::timeout(grace, k).await;
    }
    if let Some(c) = &control {
        c.shutdown().await;
    }
    if let Some(q) = &qos {
        // Holds are released so no workload stays throttled without the agent.
        q.shutdown();
    }
    // The disks' iocost settings as they were before the agent.
    io_cost.restore();
    // Floor caps are lifted; class limits, counting and attachments stay pinned.
    datapath.shutdown();
    handle.stop();
    drop(socket_guard);
    info!("stopped");
    Ok(())
}

async fn wait_for_signal() -> Result<(), DaemonError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term =
        signal(SignalKind::terminate()).map_err(startup("installing SIGTERM handler"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(startup("installing SIGINT handler"))?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// Starts the configured events sinks (`[metrics] events_file`,
/// `events_url`) and registers their counters.
fn start_event_sinks(
    cfg: &Config,
    plane: &Arc<crate::control::ControlPlane>,
    collectors: &mut Vec<Box<dyn prometheus_client::collector::Collector>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    use crate::control::event_sink::{HttpSink, Sink, SinkCollector, SinkStats};
    let mut sinks = Vec::new();
    if let Some(f) = &cfg.metrics.events_file {
        sinks.push(Sink::File(f.clone()));
    }
    if let Some(u) = &cfg.metrics.events_url {
        match HttpSink::new(u) {
            Ok(h) => sinks.push(Sink::Http(h)),
            Err(e) => warn!(error = %e, "metrics.events_url: events are not shipped"),
        }
    }
    if sinks.is_empty() {
        return Vec::new();
    }
    let stats = Arc::new(SinkStats::default());
    collectors.push(Box::new(SinkCollector(
        Arc::clone(&stats),
        sinks.iter().map(Sink::name).collect(),
    )));
    sinks
        .into_iter()
        .map(|s| {
            tokio::spawn(crate::control::event_sink::run(
                Arc::clone(plane),
                s,
                Arc::clone(&stats),
            ))
        })
        .collect()
}
