//! The process runtime: bare-metal processes started into the cgroups the
//! agent prepared, each owned by a detached `daros-shim` (see [`shim`]) so
//! that it keeps running, logging and having its exit recorded while the
//! agent restarts. The agent side keeps one record per instance in redb
//! ([`store`]) and one supervisor task per instance ([`supervisor`]) that
//! watches shim and workload by pidfd ([`pidfd`]), runs health checks and
//! applies restarts with backoff. A restarted agent re-adopts every
//! instance from redb without restarting it.
//!
//! State directory layout:
//! ```text
//! <state>/instances.redb             instance records
//! <state>/logs/<instance>/output.log  (+ .1, .2, ...) stdout and stderr
//! <state>/run/<instance>/<run>/       shim.json, started.json, exit.json, shim.log
//! ```

pub mod confine;
mod launch;
pub mod pidfd;
pub mod protocol;
pub mod shim;
mod sidecars;
pub mod spec;
pub mod stop;
pub mod store;
mod supervisor;
pub mod systemd;

use crate::adapter::{DestroyOptions, LogQuery, LogStream, RuntimeAdapter, RuntimeCapabilities};
use crate::error::AdapterError;
use crate::event::{EventBus, EventStream, RuntimeEventKind};
use crate::instance::{AdapterKind, RuntimeId, WorkloadInstanceSpec};
use crate::logs::{LogFollower, LogLine, read_tail};
use crate::status::{InstanceState, WorkloadStatus};
use daros_coordinator::FieldError;
use daros_coordinator::model::runtime::{OsType, RuntimeType};
use futures::StreamExt;
use protocol::SidecarPlan;
use spec::{InstanceEnv, LaunchPlan, ProcessSpec, resolve};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Desired, InstanceRecord, RECORD_VERSION, Store};
use supervisor::{Cmd, Ctx, Supervisor};
use tokio::sync::{mpsc, oneshot, watch};

/// Name of the shim binary.
pub const SHIM_BINARY: &str = "daros-shim";

/// Settings of the process adapter.
#[derive(Debug, Clone)]
pub struct ProcessAdapterConfig {
    /// State directory (records, logs, run files).
    pub state_dir: PathBuf,
    /// Path of the `daros-shim` binary.
    pub shim_path: PathBuf,
    /// Grace period of stops the adapter decides itself (failed liveness
    /// check, deadline, stop after adoption).
    pub default_grace: Duration,
    /// Longest wait for a shim's start report.
    pub launch_timeout: Duration,
    /// How shims are started (forked, or as transient systemd units).
    pub launcher: systemd::Launcher,
}

impl ProcessAdapterConfig {
    /// Defaults for state in `state_dir`, with the shim next to the running
    /// executable.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            shim_path: default_shim_path(),
            default_grace: Duration::from_secs(10),
            launch_timeout: Duration::from_secs(10),
            launcher: systemd::Launcher::Direct,
        }
    }
}

/// `daros-shim` beside the current executable (or in its parent directory,
/// where cargo puts binaries when the executable is a test).
pub fn default_shim_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let beside = dir.join(SHIM_BINARY);
    if beside.is_file() {
        return beside;
    }
    match dir.parent() {
        Some(up) if up.join(SHIM_BINARY).is_file() => up.join(SHIM_BINARY),
        _ => beside,
    }
}

struct Handle {
    spec: WorkloadInstanceSpec,
    cmd: mpsc::Sender<Cmd>,
    status: watch::Receiver<WorkloadStatus>,
}

struct Inner {
    ctx: Arc<Ctx>,
    instances: Mutex<BTreeMap<String, Handle>>,
}

/// The process runtime adapter. Cheap to clone; supervisors run as tokio
/// tasks until the last clone is dropped, and the workloads outlive it.
#[derive(Clone)]
pub struct ProcessAdapter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProcessAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessAdapter")
            .field("state_dir", &self.inner.ctx.cfg.state_dir)
            .finish_non_exhaustive()
    }
}

impl ProcessAdapter {
    /// Opens the state in `cfg.state_dir` and adopts every instance found
    /// there: running ones are watched again (not restarted), ones that
    /// ended while no agent watched have their exit handled per policy.
    /// The returned subscription sees the adoption events.
    pub async fn open(cfg: ProcessAdapterConfig) -> Result<(Self, EventStream), AdapterError> {
        for d in ["", "logs", "run"] {
            let p = cfg.state_dir.join(d);
            std::fs::create_dir_all(&p).map_err(|e| AdapterError::io(&p, e))?;
        }
        if !cfg.shim_path.is_file() {
            return Err(AdapterError::io(
                &cfg.shim_path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "daros-shim binary not found"),
            ));
        }
        let store = Store::open(&cfg.state_dir.join("instances.redb"))?;
        let records = store.load_all()?;
        let events = EventBus::new(4096);
        let sub = events.subscribe();
        let ctx = Arc::new(Ctx { cfg, store, events });
        let me = Self {
            inner: Arc::new(Inner {
                ctx,
                instances: Mutex::new(BTreeMap::new()),
            }),
        };
        let mut adopted = Vec::new();
        for rec in records {
            let plan = plan_for(&rec.spec).map_err(|e| e.to_string());
            tracing::info!(instance = %rec.id, state = %rec.state, "adopting instance");
            let (done, rx) = oneshot::channel();
            me.spawn_supervisor(rec, plan, Some(done));
            adopted.push(rx);
        }
        // Statuses read right after open are the adopted ones (a running instance without
        // readiness checks is ready again), not the placeholders of unstarted supervisors.
        for rx in adopted {
            let _ = rx.await;
        }
        Ok((me, sub))
    }

    fn spawn_supervisor(
        &self,
        rec: InstanceRecord,
        plan: Result<LaunchPlan, String>,
        adopted: Option<oneshot::Sender<()>>,
    ) {
        let (tx, rx) = mpsc::channel(16);
        let name = rec.id.name.clone();
        let spec = rec.spec.clone();
        let (sup, status) = Supervisor::new(Arc::clone(&self.inner.ctx), rec, plan, rx);
        tokio::spawn(sup.run(adopted));
        if let Ok(mut m) = self.inner.instances.lock() {
            m.insert(
                name,
                Handle {
                    spec,
                    cmd: tx,
                    status,
                },
            );
        }
    }

    fn handle(
        &self,
        id: &RuntimeId,
    ) -> Result<(mpsc::Sender<Cmd>, watch::Receiver<WorkloadStatus>), AdapterError> {
        if id.adapter != AdapterKind::Process {
            return Err(AdapterError::NotFound(id.clone()));
        }
        let m = self
            .inner
            .instances
            .lock()
            .map_err(|_| AdapterError::Closed)?;
        m.get(&id.name)
            .map(|h| (h.cmd.clone(), h.status.clone()))
            .ok_or_else(|| AdapterError::NotFound(id.clone()))
    }

    async fn request(
        &self,
        id: &RuntimeId,
        make: impl FnOnce(oneshot::Sender<Result<(), AdapterError>>) -> Cmd,
    ) -> Result<(), AdapterError> {
        let (tx, _) = self.handle(id)?;
        let (reply, rx) = oneshot::channel();
        tx.send(make(reply))
            .await
            .map_err(|_| AdapterError::Closed)?;
        rx.await.map_err(|_| AdapterError::Closed)?
    }

    /// Directory of the logs of instance `id`.
    pub fn log_dir(&self, id: &RuntimeId) -> PathBuf {
        self.inner.ctx.log_dir(&id.name)
    }

    fn checked_log_dir(&self, id: &RuntimeId) -> Result<PathBuf, AdapterError> {
        let dir = self.log_dir(id);
        // Logs outlive a destroy that keeps them.
        if self.handle(id).is_err() && !dir.is_dir() {
            return Err(AdapterError::NotFound(id.clone()));
        }
        Ok(dir)
    }
}

/// Parses and resolves the spec's RuntimeSpec for this host.
fn plan_for(spec: &WorkloadInstanceSpec) -> Result<LaunchPlan, AdapterError> {
    let mut ps = ProcessSpec::parse(&spec.runtime_spec.0, "runtimeSpec")?;
    // The security block may name the user instead of the RuntimeSpec.
    if ps.user.is_none() {
        ps.user.clone_from(&spec.security.run_as_user);
    }
    if ps.group.is_none() {
        ps.group.clone_from(&spec.security.run_as_group);
    }
    let plan = resolve(
        &ps,
        "runtimeSpec",
        spec.image.as_deref(),
        &InstanceEnv {
            tenant: &spec.key.app.tenant,
            app: &spec.key.app.name,
            workload: &spec.key.workload,
            replica: spec.key.replica,
        },
    )?;
    let root = plan
        .uid
        .map_or_else(|| rustix::process::geteuid().is_root(), |u| u == 0);
    if spec.security.run_as_non_root && root {
        return Err(AdapterError::field(
            "runtimeSpec.user",
            "runs as root; the security baseline requires a non-root user (runAsNonRoot)",
        ));
    }
    // Volumes: named in the environment, writable under a read-only root.
    let mut security = spec.security.clone();
    let mut env = plan.env.clone();
    for v in &spec.volumes {
        let path = v.path.display().to_string();
        env.retain(|(k, _)| k != &v.env);
        env.push((v.env.clone(), path.clone()));
        if let Some(w) = security.writable_paths.as_mut() {
            w.push(path);
        }
    }
    let sidecars = sidecar_plans(spec, &env)?;
    Ok(LaunchPlan {
        security,
        env,
        sidecars,
        ..plan
    })
}

/// Resolves the sidecars: their program (checked against their image),
/// arguments, and the workload's environment with theirs on top. They run
/// as the workload's user, in its directory, into its log: a runtimeSpec
/// of theirs that says otherwise is refused.
fn sidecar_plans(
    spec: &WorkloadInstanceSpec,
    base_env: &[(String, String)],
) -> Result<Vec<SidecarPlan>, AdapterError> {
    let mut out = Vec::new();
    let mut errs = Vec::new();
    for (i, s) in spec.sidecars.iter().enumerate() {
        let path = format!("sidecars[{i}].runtimeSpec");
        let ps = match ProcessSpec::parse(&s.runtime_spec.0, &path) {
            Ok(ps) => ps,
            Err(AdapterError::InvalidSpec(e)) => {
                errs.extend(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        for (set, field) in [
            (ps.user.is_some(), "user"),
            (ps.group.is_some(), "group"),
            (ps.working_dir.is_some(), "workingDir"),
            (ps.logs.is_some(), "logs"),
        ] {
            if set {
                errs.push(FieldError::new(
                    format!("{path}.{field}"),
                    "a sidecar runs as its instance's user, in its directory, into its log",
                ));
            }
        }
        let plan = match resolve(
            &ps,
            &path,
            Some(&s.image),
            &InstanceEnv {
                tenant: &spec.key.app.tenant,
                app: &spec.key.app.name,
                workload: &spec.key.workload,
                replica: spec.key.replica,
            },
        ) {
            Ok(p) => p,
            Err(AdapterError::InvalidSpec(e)) => {
                errs.extend(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut env: std::collections::BTreeMap<String, String> =
            base_env.iter().cloned().collect();
        env.extend(ps.env.clone());
        out.push(SidecarPlan {
            name: s.name.clone(),
            program: plan.program,
            args: plan.args,
            env: env.into_iter().collect(),
        });
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(AdapterError::InvalidSpec(errs))
    }
}

/// Hands each volume's root to the user the instance runs as (a fresh
/// ext4 root belongs to root).
fn own_volumes(spec: &WorkloadInstanceSpec, plan: &LaunchPlan) -> Result<(), AdapterError> {
    for v in &spec.volumes {
        std::os::unix::fs::chown(&v.path, plan.uid, plan.gid).map_err(|e| {
            AdapterError::field(
                format!("volumes.{}", v.name),
                format!("giving {} to the workload's user: {e}", v.path.display()),
            )
        })?;
    }
    Ok(())
}

fn validate(spec: &WorkloadInstanceSpec) -> Result<LaunchPlan, AdapterError> {
    let mut errs: Vec<FieldError> = spec.placement.validate("placement");
    for (i, c) in spec.health_checks.iter().enumerate() {
        errs.extend(c.validate(&format!("healthChecks[{i}]")));
    }
    errs.extend(spec.lifecycle.validate("lifecycle"));
    match plan_for(spec) {
        Ok(plan) if errs.is_empty() => Ok(plan),
        Ok(_) => Err(AdapterError::InvalidSpec(errs)),
        Err(AdapterError::InvalidSpec(more)) => {
            errs.extend(more);
            Err(AdapterError::InvalidSpec(errs))
        }
        Err(e) => Err(e),
    }
}

impl RuntimeAdapter for ProcessAdapter {
    fn capabilities(&self) -> RuntimeCapabilities {
        RuntimeCapabilities {
            adapter: AdapterKind::Process,
            runtime_types: vec![RuntimeType::Process],
            os: vec![OsType::Linux],
            health_checks: true,
            restarts: true,
            logs: true,
            survives_agent_restart: true,
            joins_agent_cgroups: true,
        }
    }

    async fn create(&self, spec: &WorkloadInstanceSpec) -> Result<RuntimeId, AdapterError> {
        self.capabilities().check(&spec.runtime)?;
        let plan = validate(spec)?;
        own_volumes(spec, &plan)?;
        let id = RuntimeId::new(AdapterKind::Process, spec.key.dotted());
        {
            let m = self
                .inner
                .instances
                .lock()
                .map_err(|_| AdapterError::Closed)?;
            if let Some(h) = m.get(&id.name) {
                return if &h.spec == spec {
                    Ok(id)
                } else {
                    Err(AdapterError::Conflict(id))
                };
            }
        }
        let rec = InstanceRecord {
            version: RECORD_VERSION,
            id: id.clone(),
            spec: spec.clone(),
            desired: Desired::Stopped,
            state: InstanceState::Created,
            generation: 0,
            run: None,
            restarts: 0,
            total_restarts: 0,
            last_exit: None,
            last_failure: None,
            next_restart_at: None,
            message: None,
        };
        self.inner.ctx.store.put(&rec)?;
        self.spawn_supervisor(rec, Ok(plan), None);
        self.inner
            .ctx
            .events
            .emit(&id, Some(&spec.key), RuntimeEventKind::Created);
        Ok(id)
    }

    async fn start(&self, id: &RuntimeId) -> Result<(), AdapterError> {
        self.request(id, Cmd::Start).await
    }

    async fn stop(&self, id: &RuntimeId, grace: Duration) -> Result<(), AdapterError> {
        self.request(id, |reply| Cmd::Stop { grace, reply }).await
    }

    async fn destroy(&self, id: &RuntimeId, opts: DestroyOptions) -> Result<(), AdapterError> {
        self.request(id, |reply| Cmd::Destroy { opts, reply })
            .await?;
        if let Ok(mut m) = self.inner.instances.lock() {
            m.remove(&id.name);
        }
        Ok(())
    }

    async fn inspect(&self, id: &RuntimeId) -> Result<WorkloadStatus, AdapterError> {
        let (_, status) = self.handle(id)?;
        let st = status.borrow().clone();
        Ok(st)
    }

    async fn list(&self) -> Result<Vec<WorkloadStatus>, AdapterError> {
        let m = self
            .inner
            .instances
            .lock()
            .map_err(|_| AdapterError::Closed)?;
        Ok(m.values().map(|h| h.status.borrow().clone()).collect())
    }

    async fn logs(&self, id: &RuntimeId, query: LogQuery) -> Result<Vec<LogLine>, AdapterError> {
        let dir = self.checked_log_dir(id)?;
        let d = dir.clone();
        tokio::task::spawn_blocking(move || read_tail(&d, query.tail))
            .await
            .map_err(|_| AdapterError::Closed)?
            .map_err(|e| AdapterError::io(dir, e))
    }

    async fn follow_logs(&self, id: &RuntimeId, tail: usize) -> Result<LogStream, AdapterError> {
        let dir = self.checked_log_dir(id)?;
        let d = dir.clone();
        let (lines, follower) =
            tokio::task::spawn_blocking(move || LogFollower::start(&d, Some(tail)))
                .await
                .map_err(|_| AdapterError::Closed)?
                .map_err(|e| AdapterError::io(&dir, e))?;
        let head = futures::stream::iter(lines.into_iter().map(Ok));
        let rest = follower
            .into_stream()
            .map(move |r| r.map_err(|e| AdapterError::io(&dir, e)));
        Ok(head.chain(rest).boxed())
    }

    fn events(&self) -> EventStream {
        self.inner.ctx.events.subscribe()
    }
}
