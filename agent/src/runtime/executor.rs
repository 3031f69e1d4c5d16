//! The node executor: converges the node on the leader's [`NodeWork`] through
//! the runtime adapters, one reconcile worker per instance or job run.
//!
//! Each worker owns one item (instance or init-job run) and drives it toward
//! its desired [`Target`]: a higher attempt launches a new run (after
//! `not_before`), no target tears it down (stop with grace, destroy, release
//! class and reservation, remove its cgroup). Adapter events only trigger an
//! `inspect`; the state reported is always the adapter's current one, for the
//! current run only (older runs' events are ignored by their generation).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use daros_adapters::process::{ProcessAdapter, ProcessAdapterConfig};
use daros_adapters::{
    AdapterError, AdapterSet, AnyAdapter, DestroyOptions, InstanceState, RuntimeAdapter,
    RuntimeEventKind, RuntimeId, WorkloadInstanceSpec, WorkloadStatus,
};
use daros_coordinator::model::failure::{Failure, InfrastructureFailure, RuntimeFailure};
use daros_coordinator::reconcile::{ObservedState, PlacementId};
use tokio::sync::{broadcast, watch};
use tracing::{info, warn};

use super::cgroups::InstanceCgroups;
use super::kubernetes::{KubernetesSettings, pod_cgroup, pod_identity};
use super::observe::{generation, observed};
use super::store::{ExecStore, ItemRecord};
use super::target::{LogDefaults, Subject, Target, TargetSpec};
use crate::control::work::{BoxFuture, ExecError, NodeReport, NodeWork, WorkExecutor};

/// Settings of the executor (from `[runtime]`).
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// This node's name (work for another node is refused).
    pub node: String,
    /// State directory (executor and process-adapter records, logs).
    pub state_dir: std::path::PathBuf,
    /// Where the `storage` trait's volumes live.
    pub volume_dir: std::path::PathBuf,
    /// The `daros-shim` binary.
    pub shim_path: std::path::PathBuf,
    /// Grace between SIGTERM and SIGKILL when stopping.
    pub stop_grace: Duration,
    /// Log rotation where a RuntimeSpec names none.
    pub logs: LogDefaults,
    /// The Kubernetes runtime, when this node has one.
    pub kubernetes: Option<KubernetesSettings>,
    /// How shims start (forked, or as transient systemd units).
    pub launcher: daros_adapters::process::systemd::Launcher,
    /// The lowest `oom_score_adj` this agent may give (`None`: any). Without
    /// CAP_SYS_RESOURCE the kernel refuses a value below the agent's own, and
    /// a floor class asking for one would not start at all.
    pub oom_floor: Option<i32>,
}

/// The lowest `oom_score_adj` a process with `/proc/self/status` text
/// `status` and its own value `own` may give its children: `None` with
/// CAP_SYS_RESOURCE.
pub fn oom_floor(status: &str, own: i32) -> Option<i32> {
    let held = crate::caps::bpf::held_capabilities(status);
    (!held.iter().any(|c| c == "CAP_SYS_RESOURCE")).then_some(own)
}

/// [`oom_floor`] of this process.
pub fn oom_floor_here() -> Option<i32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    oom_floor(&status, own)
}

/// Name of the executor's store in the state directory.
pub const STORE_FILE: &str = "executor.redb";

#[derive(Debug)]
struct Item {
    rec: ItemRecord,
    // The oldest run generation whose status belongs to the current attempt;
    // None while the worker is between runs (events are then ignored).
    min_generation: Option<u64>,
}

pub(super) struct Core {
    settings: RuntimeSettings,
    adapters: AdapterSet,
    cgroups: InstanceCgroups,
    store: ExecStore,
    items: tokio::sync::Mutex<BTreeMap<String, Item>>,
    workers: Mutex<BTreeMap<String, watch::Sender<Option<Target>>>>,
    reports: broadcast::Sender<NodeReport>,
    exec: tokio::sync::Mutex<()>,
    kube: Option<daros_adapters::kubernetes::KubernetesAdapter>,
    /// The `storage` trait's volumes on this node.
    volumes: super::volumes::Volumes,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn report_of(rec: &ItemRecord) -> NodeReport {
    match &rec.target.subject {
        Subject::Instance(i) => NodeReport::Instance {
            instance: i.clone(),
            placement: rec.placement,
            attempt: rec.attempt,
            state: rec.state.clone(),
        },
        Subject::Job(j) => NodeReport::InitJob {
            job: j.clone(),
            run: rec.placement,
            attempt: rec.attempt,
            state: rec.state.clone(),
        },
    }
}

/// Where a job run's results are kept: per series of runs (`@run`), so that a
/// retried application's jobs run again instead of replaying a kept result.
fn result_key(t: &Target) -> String {
    match t.placement {
        0 => t.subject.to_string(),
        run => format!("{}@{run}", t.subject),
    }
}

fn comm_failure(detail: String) -> Failure {
    Failure::Runtime(RuntimeFailure::AdapterCommunicationError { detail })
}

fn is_live(s: &WorkloadStatus) -> bool {
    matches!(
        s.state,
        InstanceState::Starting
            | InstanceState::Running
            | InstanceState::BackOff
            | InstanceState::Stopping
    )
}

/// The runtime executor (implements [`WorkExecutor`]). Dropping it leaves the
/// workloads running (they survive an agent restart and are re-adopted).
pub struct Executor {
    core: Arc<Core>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("node", &self.core.settings.node)
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// The `storage` trait's volumes on this node.
    pub fn volumes(&self) -> &super::volumes::Volumes {
        &self.core.volumes
    }

    /// Opens the process adapter (re-adopting its instances) plus `extra`
    /// adapters, the executor's store, and re-adopts every item recorded there:
    /// running instances are watched again (same pids, not restarted), put back
    /// under their class if needed, and their current states reported. Adapter
    /// instances without a record (a crash between create and record) are
    /// destroyed.
    pub async fn open(
        settings: RuntimeSettings,
        cgroups: InstanceCgroups,
        extra: Vec<AnyAdapter>,
    ) -> Result<Arc<Self>, ExecError> {
        std::fs::create_dir_all(&settings.state_dir).map_err(|e| {
            ExecError::Internal(format!("creating {}: {e}", settings.state_dir.display()))
        })?;
        let mut pcfg = ProcessAdapterConfig::new(settings.state_dir.join("process"));
        pcfg.shim_path = settings.shim_path.clone();
        pcfg.default_grace = settings.stop_grace;
        pcfg.launcher = settings.launcher.clone();
        let (process, _adoption) = ProcessAdapter::open(pcfg)
            .await
            .map_err(|e| ExecError::Internal(format!("process adapter: {e}")))?;
        let mut adapters = AdapterSet::new().with(AnyAdapter::Process(process));
        let mut kube = None;
        for a in extra {
            if let AnyAdapter::Kubernetes(k) = &a {
                kube = Some(k.clone());
            }
            adapters = adapters.with(a);
        }
        let store = ExecStore::open(&settings.state_dir.join(STORE_FILE))
            .map_err(|e| ExecError::Internal(e.to_string()))?;
        let (reports, _) = broadcast::channel(4096);
        let volumes = super::volumes::Volumes::new(&settings.volume_dir);
        let core = Arc::new(Core {
            volumes,
            settings,
            adapters,
            cgroups,
            store,
            items: tokio::sync::Mutex::new(BTreeMap::new()),
            workers: Mutex::new(BTreeMap::new()),
            reports,
            exec: tokio::sync::Mutex::new(()),
            kube,
        });
        Core::spawn_pump(&core);
        core.readopt().await?;
        Ok(Arc::new(Self { core }))
    }

    pub(super) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The adapters (for logs and inspection).
    pub fn adapters(&self) -> &AdapterSet {
        &self.core.adapters
    }
}

impl Core {
    fn spawn_pump(core: &Arc<Core>) {
        let mut events = core.adapters.events();
        let weak: Weak<Core> = Arc::downgrade(core);
        tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                let Some(core) = weak.upgrade() else { break };
                match ev.kind {
                    RuntimeEventKind::Lagged { missed } => {
                        warn!(
                            missed,
                            "runtime events lagged; re-inspecting every instance"
                        );
                        let keys: Vec<String> = core.items.lock().await.keys().cloned().collect();
                        for k in keys {
                            core.observe(&k).await;
                        }
                    }
                    _ => {
                        let key = core
                            .items
                            .lock()
                            .await
                            .iter()
                            .find(|(_, it)| it.rec.runtime_id.as_ref() == Some(&ev.id))
                            .map(|(k, _)| k.clone());
                        if let Some(k) = key {
                            core.observe(&k).await;
                        }
                    }
                }
            }
        });
    }

    fn persist(&self, key: &str, rec: &ItemRecord) {
        if let Err(e) = self.store.put_item(key, rec) {
            warn!(item = key, error = %e, "cannot record runtime state");
        }
        if rec.target.subject.is_job()
            && rec.state.has_ended()
            && let Err(e) =
                self.store
                    .put_job_result(&result_key(&rec.target), rec.attempt, &rec.state)
        {
            warn!(item = key, error = %e, "cannot keep the job result");
        }
    }

    fn publish(&self, rec: &ItemRecord) {
        let _ = self.reports.send(report_of(rec));
    }

    /// Sets the state of `key`'s current attempt, persisting and reporting a change.
    fn set_state(&self, key: &str, item: &mut Item, state: ObservedState) {
        if item.rec.state != state {
            info!(item = key, attempt = item.rec.attempt, state = %state.describe(), "runtime state");
            item.rec.state = state;
            self.persist(key, &item.rec);
            self.publish(&item.rec);
        }
    }

    /// Reads the adapter's status of `key` and reports it if it belongs to the
    /// current run and changed.
    async fn observe(&self, key: &str) {
        let mut items = self.items.lock().await;
        let Some(item) = items.get_mut(key) else {
            return;
        };
        let (Some(min), Some(rid)) = (item.min_generation, item.rec.runtime_id.clone()) else {
            return;
        };
        let st = match self.adapters.inspect(&rid).await {
            Ok(s) => s,
            Err(AdapterError::NotFound(_)) => {
                self.set_state(
                    key,
                    item,
                    ObservedState::Failed {
                        failure: comm_failure(format!("the runtime no longer knows {rid}")),
                    },
                );
                return;
            }
            Err(e) => {
                warn!(item = key, error = %e, "inspect failed");
                return;
            }
        };
        if generation(&st).is_some_and(|g| g < min) {
            return;
        }
        if st.state == InstanceState::Running
            && item.rec.target.is_pod()
            && !self.cgroups.classed(&item.rec.target.subject)
            && let Err(failure) = self.class_pod(&item.rec.target, &st).await
        {
            self.set_state(key, item, ObservedState::Failed { failure });
            return;
        }
        let mut state = observed(&st);
        if state.is_failure()
            && let Some(base) = item.rec.oom_kills_at_launch
        {
            let (c, s) = (self.cgroups.clone(), item.rec.target.subject.clone());
            let now = tokio::task::spawn_blocking(move || c.oom_kills(&s))
                .await
                .ok()
                .flatten();
            if now.is_some_and(|n| n > base) {
                let limit = item.rec.target.qos().1.memory.limit;
                state = ObservedState::Failed {
                    failure: Failure::Runtime(RuntimeFailure::OutOfMemory { limit }),
                };
            }
        }
        self.set_state(key, item, state);
    }

    /// Puts a running pod's cgroup (the kubelet's) under the instance's class.
    /// The kubelet makes it before the containers start; a short wait covers
    /// a slow cgroupfs. Not finding it is a failure naming every path tried.
    async fn class_pod(&self, t: &Target, st: &WorkloadStatus) -> Result<(), Failure> {
        let Some((uid, pod_qos)) = pod_identity(st) else {
            return Ok(()); // no UID yet: classed on a later observation
        };
        let root = self
            .settings
            .kubernetes
            .as_ref()
            .map_or_else(|| "/".to_string(), |k| k.cgroup_root.clone());
        let (class, profile) = t.qos();
        let cgroups = self.cgroups.clone();
        let subject = t.subject.clone();
        let r = tokio::task::spawn_blocking(move || {
            let Some(backend) = cgroups.backend() else {
                return Ok(());
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            let cg = loop {
                match pod_cgroup(backend, &root, &uid, pod_qos) {
                    Ok(cg) => break cg,
                    Err(e) if std::time::Instant::now() >= deadline => {
                        return Err(Failure::ControlPlane {
                            detail: format!(
                                "the class of {subject} cannot be applied: {e} (is runtime.kubernetes_cgroup_root the kubelet's --cgroup-root?)"
                            ),
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            };
            info!(item = %subject, cgroup = %cg.as_str(), %class, "pod under its class");
            cgroups.class_pod(&subject, cg, class, profile)
        })
        .await;
        r.unwrap_or_else(|e| {
            Err(Failure::ControlPlane {
                detail: format!("classing the pod: {e}"),
            })
        })
    }

    async fn readopt(self: &Arc<Self>) -> Result<(), ExecError> {
        let (recs, bad) = self
            .store
            .items()
            .map_err(|e| ExecError::Internal(e.to_string()))?;
        for b in bad {
            warn!(note = %b, "runtime store");
        }
        let mut known = Vec::new();
        for (key, rec) in recs {
            let mut item = Item {
                rec,
                min_generation: None,
            };
            if let Some(rid) = item.rec.runtime_id.clone() {
                known.push(rid.clone());
                match self.adapters.inspect(&rid).await {
                    Ok(st) => {
                        item.min_generation = Some(generation(&st).unwrap_or(0));
                        let live = is_live(&st);
                        if live && !self.cgroups.classed(&item.rec.target.subject) {
                            // The class was lost (QoS store reset): put it back.
                            let (class, profile) = item.rec.target.qos();
                            let c = self.cgroups.clone();
                            let s = item.rec.target.subject.clone();
                            let r =
                                tokio::task::spawn_blocking(move || c.prepare(&s, class, profile))
                                    .await;
                            if !matches!(r, Ok(Ok(_))) {
                                warn!(item = %key, "cannot put a re-adopted instance back under its class");
                            }
                        }
                        info!(item = %key, runtime = %rid, pid = ?super::observe::pid(&st), state = ?st.state, "re-adopted");
                        let state = observed(&st);
                        if item.rec.state != state {
                            item.rec.state = state;
                            self.persist(&key, &item.rec);
                        }
                    }
                    Err(AdapterError::NotFound(_))
                        if item.rec.target.is_pod() && !item.rec.state.has_ended() =>
                    {
                        // The Kubernetes adapter keeps no records: creating the
                        // instance again adopts its unchanged pod.
                        let spec = self.spec_of(&item.rec.target, &[]);
                        let adopted = match self.adapters.create(&spec).await {
                            Ok(_) => self.adapters.start(&rid).await,
                            Err(e) => Err(e),
                        };
                        match adopted {
                            Ok(()) => {
                                item.min_generation = Some(0);
                                info!(item = %key, runtime = %rid, "pod re-adopted");
                            }
                            Err(e) => {
                                warn!(item = %key, error = %e, "pod not re-adopted");
                                item.rec.state = ObservedState::Failed {
                                    failure: comm_failure(format!(
                                        "lost across an agent restart: {e}"
                                    )),
                                };
                                self.persist(&key, &item.rec);
                            }
                        }
                    }
                    Err(e) => {
                        warn!(item = %key, error = %e, "recorded instance unknown to its runtime");
                        if !item.rec.state.has_ended() {
                            item.rec.state = ObservedState::Failed {
                                failure: comm_failure(format!("lost across an agent restart: {e}")),
                            };
                            self.persist(&key, &item.rec);
                        }
                    }
                }
            }
            let target = item.rec.target.clone();
            self.items.lock().await.insert(key.clone(), item);
            // The pump drops events of items not yet inserted (a health check passing
            // right after the inspect above): look once more now that it would see them.
            self.observe(&key).await;
            self.spawn_worker(key, target);
        }
        if let Some(k) = &self.kube {
            match k.managed_pods().await {
                Ok(pods) => {
                    for (id, _) in pods.into_iter().filter(|(id, _)| !known.contains(id)) {
                        warn!(runtime = %id, "pod without an executor record: deleting it");
                        if let Err(e) = k.delete_orphan(&id, self.settings.stop_grace).await {
                            warn!(runtime = %id, error = %e, "deleting an orphan pod");
                        }
                    }
                }
                Err(e) => warn!(error = %e, "listing this node's pods"),
            }
        }
        if let Ok(all) = self.adapters.list().await {
            for st in all {
                if !known.contains(&st.id) {
                    warn!(runtime = %st.id, "instance without an executor record: destroying it");
                    let _ = self
                        .adapters
                        .destroy(
                            &st.id,
                            DestroyOptions {
                                grace: self.settings.stop_grace,
                                remove_logs: true,
                            },
                        )
                        .await;
                }
            }
        }
        Ok(())
    }

    fn spawn_worker(self: &Arc<Self>, key: String, target: Target) {
        let (tx, rx) = watch::channel(Some(target));
        lock(&self.workers).insert(key.clone(), tx);
        let core = Arc::clone(self);
        tokio::spawn(async move { core.work(key, rx).await });
    }

    /// The (placement, attempt) launched for `key`: a target above it is a
    /// new run (a higher attempt, or a new placement of the same subject).
    async fn launched(&self, key: &str) -> (PlacementId, u32) {
        self.items
            .lock()
            .await
            .get(key)
            .map_or((0, 0), |i| (i.rec.placement, i.rec.attempt))
    }

    async fn work(self: Arc<Self>, key: String, mut rx: watch::Receiver<Option<Target>>) {
        loop {
            let want = rx.borrow_and_update().clone();
            match want {
                None => {
                    self.teardown(&key).await;
                    let mut w = lock(&self.workers);
                    if w.get(&key).is_some_and(|tx| tx.borrow().is_none()) {
                        w.remove(&key);
                        return;
                    }
                    continue;
                }
                Some(t) if (t.placement, t.attempt) > self.launched(&key).await => {
                    if let Some(nb) = t.not_before {
                        let wait = nb.0.saturating_sub(daros_adapters::time::now().0);
                        if wait > 0 {
                            tokio::select! {
                                () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                                r = rx.changed() => {
                                    if r.is_err() {
                                        return;
                                    }
                                    continue;
                                }
                            }
                        }
                    }
                    self.launch(&key, &t).await;
                }
                Some(t) => {
                    let mut items = self.items.lock().await;
                    if let Some(it) = items.get_mut(&key)
                        && it.rec.target != t
                    {
                        it.rec.target = t;
                        self.persist(&key, &it.rec);
                    }
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    async fn fail(&self, key: &str, failure: Failure) {
        let mut items = self.items.lock().await;
        if let Some(it) = items.get_mut(key) {
            it.min_generation = None;
            warn!(item = key, attempt = it.rec.attempt, %failure, "run failed");
            self.set_state(key, it, ObservedState::Failed { failure });
        }
    }

    /// Runs attempt `t.attempt` of `key`: stops a previous run, prepares the
    /// cgroup and class, creates and starts through the adapter.
    async fn launch(&self, key: &str, t: &Target) {
        let subject = t.subject.clone();
        if subject.is_job() {
            match self.store.job_result(&result_key(t), t.attempt) {
                Ok(Some(res)) => {
                    let mut items = self.items.lock().await;
                    let it = items.entry(key.to_string()).or_insert_with(|| Item {
                        rec: ItemRecord {
                            target: t.clone(),
                            placement: t.placement,
                            attempt: t.attempt,
                            runtime_id: None,
                            cgroup: subject.cgroup_name(),
                            state: res.clone(),
                            oom_kills_at_launch: None,
                        },
                        min_generation: None,
                    });
                    it.rec.target = t.clone();
                    it.rec.attempt = t.attempt;
                    it.rec.state = res;
                    self.persist(key, &it.rec);
                    self.publish(&it.rec);
                    return;
                }
                Ok(None) => {}
                Err(e) => warn!(item = key, error = %e, "reading kept job results"),
            }
        }
        // 1. A previous run of this item ends first.
        let old = {
            let mut items = self.items.lock().await;
            items.get_mut(key).and_then(|it| {
                it.min_generation = None;
                it.rec.runtime_id.clone()
            })
        };
        if let Some(rid) = &old
            && let Ok(st) = self.adapters.inspect(rid).await
            && is_live(&st)
        {
            info!(item = key, runtime = %rid, "stopping the previous attempt");
            if let Err(e) = self.adapters.stop(rid, self.settings.stop_grace).await {
                warn!(item = key, error = %e, "stopping the previous attempt");
            }
        }
        // 2. The attempt is recorded before anything is created.
        {
            let mut items = self.items.lock().await;
            let it = items.entry(key.to_string()).or_insert_with(|| Item {
                rec: ItemRecord {
                    target: t.clone(),
                    placement: t.placement,
                    attempt: 0,
                    runtime_id: None,
                    cgroup: subject.cgroup_name(),
                    state: ObservedState::Pending,
                    oom_kills_at_launch: None,
                },
                min_generation: None,
            });
            it.rec.target = t.clone();
            it.rec.placement = t.placement;
            it.rec.attempt = t.attempt;
            it.rec.state = ObservedState::Pending;
            self.set_state(key, it, ObservedState::Starting);
        }
        // 3. Its cgroup under its class (admission of its reservation); a pod's
        // cgroup is the kubelet's, classed once it runs (see `observe`).
        let (class, profile) = t.qos();
        let c = self.cgroups.clone();
        let s = subject.clone();
        let pod = t.is_pod();
        let prepared = tokio::task::spawn_blocking(move || {
            if pod {
                Ok((Vec::new(), None))
            } else {
                c.prepare(&s, class, profile).map(|d| (d, c.oom_kills(&s)))
            }
        })
        .await;
        let dirs = match prepared {
            Ok(Ok((d, oom_kills))) => {
                if let Some(it) = self.items.lock().await.get_mut(key) {
                    it.rec.oom_kills_at_launch = oom_kills;
                }
                d
            }
            Ok(Err(f)) => return self.fail(key, f).await,
            Err(e) => {
                return self
                    .fail(
                        key,
                        Failure::ControlPlane {
                            detail: format!("preparing the cgroup: {e}"),
                        },
                    )
                    .await;
            }
        };
        // 4. Create (a changed spec under the same id replaces the old instance),
        // unless its environment cannot be had.
        if let Some(what) = t.missing_env() {
            return self
                .fail(
                    key,
                    Failure::PolicyViolation {
                        policy: "traits.env".into(),
                        detail: format!("its environment is not available: {what}"),
                    },
                )
                .await;
        }
        let mut spec = self.spec_of(t, &dirs);
        if !t.volumes().is_empty() {
            let (v, s, asked) = (self.volumes.clone(), subject.clone(), t.volumes().to_vec());
            match tokio::task::spawn_blocking(move || v.prepare(&s, &asked)).await {
                Ok(Ok(mounts)) => spec.volumes = mounts,
                Ok(Err(e)) => return self.fail(key, volume_failure(e)).await,
                Err(e) => return self.fail(key, volume_failure(e)).await,
            }
        }
        let rid = match self.adapters.create(&spec).await {
            Ok(id) => id,
            Err(AdapterError::Conflict(id)) => {
                let _ = self
                    .adapters
                    .destroy(
                        &id,
                        DestroyOptions {
                            grace: self.settings.stop_grace,
                            remove_logs: false,
                        },
                    )
                    .await;
                match self.adapters.create(&spec).await {
                    Ok(id) => id,
                    Err(e) => return self.fail(key, adapter_failure(&e)).await,
                }
            }
            Err(e) => return self.fail(key, adapter_failure(&e)).await,
        };
        let before = self
            .adapters
            .inspect(&rid)
            .await
            .ok()
            .and_then(|s| generation(&s))
            .unwrap_or(0);
        {
            let mut items = self.items.lock().await;
            if let Some(it) = items.get_mut(key) {
                it.rec.runtime_id = Some(rid.clone());
                it.min_generation = Some(before + 1);
                self.persist(key, &it.rec);
            }
        }
        // 5. Start; the outcome arrives as events (or the launch error here).
        match self.adapters.start(&rid).await {
            Ok(()) => self.observe(key).await,
            Err(e) => self.fail(key, adapter_failure(&e)).await,
        }
    }

    /// The adapters' spec of `t` in `dirs`; a pod is bound to this node's
    /// Kubernetes name.
    fn spec_of(&self, t: &Target, dirs: &[std::path::PathBuf]) -> WorkloadInstanceSpec {
        let node = match &self.settings.kubernetes {
            Some(k) if t.is_pod() => &k.node,
            _ => &self.settings.node,
        };
        let mut spec = t.instance_spec(node, dirs, self.settings.logs);
        // Degraded, not refused: the class keeps the agent's own value.
        if let (Some(floor), Some(v)) = (self.settings.oom_floor, spec.placement.oom_score_adj)
            && v < floor
        {
            spec.placement.oom_score_adj = Some(floor);
        }
        spec
    }

    /// Stops and destroys `key`'s instance, releases its class and reservation
    /// and removes its cgroup and record.
    async fn teardown(&self, key: &str) {
        let rec = {
            let mut items = self.items.lock().await;
            match items.get_mut(key) {
                Some(it) => {
                    it.min_generation = None;
                    it.rec.clone()
                }
                None => return,
            }
        };
        if let Some(rid) = &rec.runtime_id {
            let opts = DestroyOptions {
                grace: self.settings.stop_grace,
                remove_logs: true,
            };
            match self.adapters.destroy(rid, opts).await {
                Ok(()) | Err(AdapterError::NotFound(_)) => {}
                Err(e) => warn!(item = key, error = %e, "destroying"),
            }
        }
        let c = self.cgroups.clone();
        let s = rec.target.subject.clone();
        match tokio::task::spawn_blocking(move || c.release(&s, Duration::from_secs(5))).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(item = key, error = %e, "cleanup left something behind"),
            Err(e) => warn!(item = key, error = %e, "cleanup"),
        }
        let mut items = self.items.lock().await;
        if let Some(mut it) = items.remove(key) {
            if let Err(e) = self.store.delete_item(key) {
                warn!(item = key, error = %e, "cannot remove the runtime record");
            }
            info!(item = key, "removed");
            if !it.rec.state.has_ended() {
                it.rec.state = ObservedState::Stopped;
                self.publish(&it.rec);
            }
        }
    }

    async fn execute(self: &Arc<Self>, work: NodeWork) -> Result<(), ExecError> {
        let _serial = self.exec.lock().await;
        if work.node != self.settings.node {
            return Err(ExecError::WrongNode {
                expected: self.settings.node.clone(),
                got: work.node,
            });
        }
        if let Some(applied) = self
            .store
            .fence()
            .map_err(|e| ExecError::Internal(e.to_string()))?
        {
            if work.fence < applied {
                return Err(ExecError::Stale {
                    term: work.fence.term,
                    index: work.fence.index,
                    applied_term: applied.term,
                    applied_index: applied.index,
                });
            }
            if work.fence > applied {
                self.store
                    .put_fence(work.fence)
                    .map_err(|e| ExecError::Internal(e.to_string()))?;
            }
        } else {
            self.store
                .put_fence(work.fence)
                .map_err(|e| ExecError::Internal(e.to_string()))?;
        }
        let mut desired: BTreeMap<String, Target> = BTreeMap::new();
        for i in work.instances {
            let t = Target::from(i);
            desired.insert(t.subject.key(), t);
        }
        for j in work.jobs {
            let t = Target::from(j);
            desired.insert(t.subject.key(), t);
        }
        let mut spawn = Vec::new();
        {
            let workers = lock(&self.workers);
            for (k, tx) in workers.iter() {
                if !desired.contains_key(k) {
                    tx.send_if_modified(|cur| cur.take().is_some());
                }
            }
            for (k, t) in desired {
                match workers.get(&k) {
                    Some(tx) => {
                        tx.send_if_modified(|cur| {
                            if cur.as_ref() == Some(&t) {
                                false
                            } else {
                                *cur = Some(t);
                                true
                            }
                        });
                    }
                    None => spawn.push((k, t)),
                }
            }
        }
        for (k, t) in spawn {
            self.spawn_worker(k, t);
        }
        Ok(())
    }

    /// Stops live instances whose `stop_on_client_after` is at most `silent`;
    /// each run ends as failed by a network partition (its later events are
    /// ignored), so the coordinator restarts it if it still wants it.
    async fn stop_disconnected(&self, silent: Duration) -> Vec<String> {
        let silent_ms = u64::try_from(silent.as_millis()).unwrap_or(u64::MAX);
        let due: Vec<(String, RuntimeId)> = {
            let mut items = self.items.lock().await;
            items
                .iter_mut()
                .filter_map(|(k, it)| {
                    let TargetSpec::Instance(l) = &it.rec.target.spec else {
                        return None;
                    };
                    let after = l.stop_on_client_after?;
                    if silent_ms < after.0 || !it.rec.state.is_live() {
                        return None;
                    }
                    let rid = it.rec.runtime_id.clone()?;
                    it.min_generation = None;
                    Some((k.clone(), rid))
                })
                .collect()
        };
        for (k, rid) in &due {
            if let Err(e) = self.adapters.stop(rid, self.settings.stop_grace).await {
                warn!(item = %k, error = %e, "stopping a disconnected instance");
            }
            let mut items = self.items.lock().await;
            if let Some(it) = items.get_mut(k) {
                let failure = Failure::Infrastructure {
                    kind: InfrastructureFailure::NetworkPartition,
                    node: self.settings.node.clone(),
                };
                self.set_state(k, it, ObservedState::Failed { failure });
            }
        }
        due.into_iter().map(|(k, _)| k).collect()
    }

    async fn current(&self) -> Vec<NodeReport> {
        self.items
            .lock()
            .await
            .values()
            .filter(|it| it.rec.attempt > 0)
            .map(|it| report_of(&it.rec))
            .collect()
    }

    pub(super) async fn runtime_ids(&self) -> Vec<(Subject, Option<RuntimeId>)> {
        self.items
            .lock()
            .await
            .values()
            .map(|it| (it.rec.target.subject.clone(), it.rec.runtime_id.clone()))
            .collect()
    }
}

fn volume_failure(e: impl std::fmt::Display) -> Failure {
    Failure::ControlPlane {
        detail: format!("preparing its volumes: {e}"),
    }
}

fn adapter_failure(e: &AdapterError) -> Failure {
    match e {
        AdapterError::InvalidSpec(_) => Failure::PolicyViolation {
            policy: "runtimeSpec".into(),
            detail: e.to_string(),
        },
        _ => e
            .as_failure()
            .unwrap_or_else(|| comm_failure(e.to_string())),
    }
}

impl WorkExecutor for Executor {
    fn execute(&self, work: NodeWork) -> BoxFuture<'_, Result<(), ExecError>> {
        Box::pin(async move { self.core.execute(work).await })
    }

    fn subscribe(&self) -> broadcast::Receiver<NodeReport> {
        self.core.reports.subscribe()
    }

    fn current(&self) -> BoxFuture<'_, Vec<NodeReport>> {
        Box::pin(async move { self.core.current().await })
    }

    fn stop_disconnected(&self, silent: Duration) -> BoxFuture<'_, Vec<String>> {
        Box::pin(async move { self.core.stop_disconnected(silent).await })
    }
}

#[cfg(test)]
mod oom_tests {
    use super::oom_floor;

    #[test]
    fn the_floor_applies_only_without_cap_sys_resource() {
        // CapEff of the development hosts: everything but CAP_SYS_RESOURCE (bit 24).
        let without = "CapEff:\t000001fffeffffff\n";
        let with = "CapEff:\t000001ffffffffff\n";
        assert_eq!(oom_floor(without, -900), Some(-900));
        assert_eq!(oom_floor(with, -900), None);
    }
}
