//! The Kubernetes runtime (kube-rs): one Pod per workload instance (see
//! [`pod`] for why not a Deployment), created, replaced when its spec
//! changed, and deleted with a grace period; labelled with its owners
//! (`daros.io/tenant`, `daros.io/app`, `daros.io/workload`); watched with a
//! kube-runtime watcher whose observations ([`status`]) become instance
//! statuses and runtime events. [`cgroup`] finds a pod's cgroup for the
//! node agent, which applies the D-AROS class there.
//!
//! Restarts within a pod are the kubelet's (with its own backoff); the
//! adapter enforces `maxRetries` by deleting a pod that restarted more
//! often and reporting that it gave up.

pub mod cgroup;
pub mod pod;
pub mod security;
pub mod spec;
pub mod status;

use crate::adapter::{DestroyOptions, LogQuery, LogStream, RuntimeAdapter, RuntimeCapabilities};
use crate::error::AdapterError;
use crate::event::{EventBus, EventStream, RuntimeEventKind};
use crate::instance::{AdapterKind, InstanceKey, RuntimeId, WorkloadInstanceSpec};
use crate::logs::{LogLine, OutputStream};
use crate::status::{InstanceState, RuntimeDetail, WorkloadStatus};
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::model::runtime::{OsType, RuntimeType};
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use pod::{build_pod, live_hash, managed_selector, pod_name};
use spec::KubernetesSpec;
use status::{Observation, observe, retries_exceeded, transition_events};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Settings of the Kubernetes adapter.
#[derive(Debug, Clone)]
pub struct KubernetesAdapterConfig {
    /// Namespace of specs that name none.
    pub default_namespace: String,
    /// Watch only pods bound to this node (the node agent's own), or all.
    pub node: Option<String>,
    /// How often a stop looks whether the pod is gone.
    pub poll_interval: Duration,
    /// Longest wait beyond the grace period for a deleted pod to go.
    pub delete_timeout: Duration,
}

impl Default for KubernetesAdapterConfig {
    fn default() -> Self {
        Self {
            default_namespace: "default".into(),
            node: None,
            poll_interval: Duration::from_millis(500),
            delete_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Desired {
    Running,
    Stopped,
}

#[derive(Debug, Clone)]
struct Instance {
    id: RuntimeId,
    spec: WorkloadInstanceSpec,
    namespace: String,
    name: String,
    pod: Pod,
    desired: Desired,
    observed: Option<Observation>,
    state: InstanceState,
    last_failure: Option<Failure>,
    message: Option<String>,
    gave_up: bool,
    started: bool,
}

impl Instance {
    fn status(&self) -> WorkloadStatus {
        let o = self.observed.as_ref();
        WorkloadStatus {
            id: self.id.clone(),
            key: self.spec.key.clone(),
            state: self.state,
            ready: o.is_some_and(|o| o.ready) && self.state == InstanceState::Running,
            restarts: o.map_or(0, |o| o.restarts),
            started_at: None,
            last_exit: o.and_then(|o| o.last_exit),
            last_failure: self.last_failure.clone(),
            next_restart_at: None,
            message: self
                .message
                .clone()
                .or_else(|| o.and_then(|o| o.message.clone())),
            detail: RuntimeDetail::Kubernetes {
                namespace: self.namespace.clone(),
                pod: self.name.clone(),
                uid: o.and_then(|o| o.uid.clone()),
                phase: o.and_then(|o| o.phase.clone()),
                qos_class: o.and_then(|o| o.qos_class.clone()),
                node: o.and_then(|o| o.node.clone()),
            },
        }
    }
}

struct Inner {
    client: kube::Client,
    cfg: KubernetesAdapterConfig,
    events: EventBus,
    instances: Mutex<BTreeMap<String, Instance>>,
}

/// The Kubernetes runtime adapter. Cheap to clone.
#[derive(Clone)]
pub struct KubernetesAdapter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KubernetesAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesAdapter")
            .field("cfg", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

fn kube_err(op: impl Into<String>, e: kube::Error) -> AdapterError {
    AdapterError::Kube {
        op: op.into(),
        source: Box::new(e),
    }
}

fn watch_expired(e: &watcher::Error) -> bool {
    // The API server ends an expired watch with an ERROR event of code
    // 410; kube's watcher then lists again.
    matches!(e, watcher::Error::WatchError(s) if s.code == 410)
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl KubernetesAdapter {
    /// An adapter on `client` (for a cluster: `kube::Client::try_default()`).
    /// Call [`Self::watch`] and run it to follow pod changes.
    pub fn new(client: kube::Client, cfg: KubernetesAdapterConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                cfg,
                events: EventBus::new(4096),
                instances: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.inner.client.clone(), ns)
    }

    fn with<T>(
        &self,
        id: &RuntimeId,
        f: impl FnOnce(&mut Instance) -> T,
    ) -> Result<T, AdapterError> {
        if id.adapter != AdapterKind::Kubernetes {
            return Err(AdapterError::NotFound(id.clone()));
        }
        let mut m = self
            .inner
            .instances
            .lock()
            .map_err(|_| AdapterError::Closed)?;
        m.get_mut(&id.name)
            .map(f)
            .ok_or_else(|| AdapterError::NotFound(id.clone()))
    }

    fn emit(&self, inst: &Instance, kind: RuntimeEventKind) {
        self.inner.events.emit(&inst.id, Some(&inst.spec.key), kind);
    }

    /// Follows every managed pod (on this node, when configured) until the
    /// returned future is dropped; watch errors are retried with backoff
    /// and reported once as adapter communication failures.
    pub async fn watch(self) {
        let mut wc = watcher::Config::default().labels(&managed_selector());
        if let Some(n) = &self.inner.cfg.node {
            wc = wc.fields(&format!("spec.nodeName={n}"));
        }
        let stream = watcher(Api::<Pod>::all(self.inner.client.clone()), wc).default_backoff();
        futures::pin_mut!(stream);
        let mut failing = false;
        // Pods seen during a (re-)list: an instance whose pod is not among
        // them lost it while the watch was down.
        let mut listed: Option<std::collections::BTreeSet<String>> = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(watcher::Event::Apply(p)) => {
                    failing = false;
                    self.observe_pod(&p);
                }
                Ok(watcher::Event::Init) => {
                    listed = Some(std::collections::BTreeSet::new());
                }
                Ok(watcher::Event::InitApply(p)) => {
                    failing = false;
                    if let (Some(l), Some(ns), Some(name)) =
                        (listed.as_mut(), &p.metadata.namespace, &p.metadata.name)
                    {
                        l.insert(format!("{ns}/{name}"));
                    }
                    self.observe_pod(&p);
                }
                Ok(watcher::Event::InitDone) => {
                    failing = false;
                    if let Some(l) = listed.take() {
                        self.missing_after_list(&l);
                    }
                }
                Ok(watcher::Event::Delete(p)) => {
                    failing = false;
                    self.pod_gone(&p);
                }
                Err(e) if watch_expired(&e) => {
                    // 410: the resource version is too old; the watcher
                    // lists again. Normal protocol, not a failure.
                    tracing::debug!(error = %e, "pod watch expired, relisting");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watching pods failed");
                    if !failing {
                        failing = true;
                        self.communication_failure(&e.to_string());
                    }
                }
            }
        }
    }

    /// Every pod carrying this adapter's owner labels (on this node, when
    /// configured), with its instance id and owner, whether or not this
    /// agent knows the instance: after a restart, the agent re-creates and
    /// starts the instances it still wants (adopting their pods) and
    /// destroys the rest, so that no pod is left behind.
    pub async fn managed_pods(&self) -> Result<Vec<(RuntimeId, InstanceKey)>, AdapterError> {
        let mut lp = kube::api::ListParams::default().labels(&managed_selector());
        if let Some(n) = &self.inner.cfg.node {
            lp = lp.fields(&format!("spec.nodeName={n}"));
        }
        let pods = Api::<Pod>::all(self.inner.client.clone())
            .list(&lp)
            .await
            .map_err(|e| kube_err("list managed pods", e))?;
        Ok(pods
            .items
            .iter()
            .filter_map(|p| {
                let ns = p.metadata.namespace.as_ref()?;
                let name = p.metadata.name.as_ref()?;
                let key = pod::owner_key(p.metadata.labels.as_ref()?)?;
                Some((
                    RuntimeId::new(AdapterKind::Kubernetes, format!("{ns}/{name}")),
                    key,
                ))
            })
            .collect())
    }

    /// Forgets and deletes a managed pod this agent has no instance for
    /// (found by [`Self::managed_pods`]).
    pub async fn delete_orphan(&self, id: &RuntimeId, grace: Duration) -> Result<(), AdapterError> {
        let (ns, name) = id
            .name
            .split_once('/')
            .ok_or_else(|| AdapterError::NotFound(id.clone()))?;
        let api = self.pods(ns);
        let secs = u32::try_from(grace.as_secs()).unwrap_or(u32::MAX);
        match api
            .delete(name, &DeleteParams::default().grace_period(secs))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(kube_err(format!("delete pod {}", id.name), e)),
        }
    }

    fn communication_failure(&self, detail: &str) {
        let Ok(mut m) = self.inner.instances.lock() else {
            return;
        };
        for inst in m.values_mut().filter(|i| i.desired == Desired::Running) {
            let f = Failure::Runtime(RuntimeFailure::AdapterCommunicationError {
                detail: format!("watching pods: {detail}"),
            });
            inst.last_failure = Some(f.clone());
            inst.state = InstanceState::Unknown;
            let inst = inst.clone();
            self.emit(&inst, RuntimeEventKind::Failed { failure: f });
        }
    }

    // Applies one observation of a live pod; deletes it when it restarted
    // more often than its policy allows.
    fn observe_pod(&self, pod: &Pod) {
        let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return;
        };
        let key = format!("{ns}/{name}");
        let give_up = {
            let Ok(mut m) = self.inner.instances.lock() else {
                return;
            };
            let Some(inst) = m.get_mut(&key) else { return };
            let next = observe(pod);
            let prev = inst.observed.take().filter(|p| p.uid == next.uid);
            let events = transition_events(prev.as_ref(), &next, &inst.spec.lifecycle);
            for ev in &events {
                if let RuntimeEventKind::Failed { failure } = ev {
                    inst.last_failure = Some(failure.clone());
                }
                if matches!(ev, RuntimeEventKind::Started { .. }) {
                    inst.started = true;
                }
            }
            inst.state = if inst.gave_up {
                InstanceState::Failed
            } else {
                next.state
            };
            inst.message = None;
            let exceeded = !inst.gave_up && retries_exceeded(&next, &inst.spec.lifecycle);
            if exceeded {
                inst.gave_up = true;
                inst.state = InstanceState::Failed;
                inst.desired = Desired::Stopped;
                inst.message = Some(format!(
                    "restarted {} times, more than maxRetries {}: pod deleted",
                    next.restarts,
                    inst.spec.lifecycle.max_retries.unwrap_or_default()
                ));
            }
            inst.observed = Some(next);
            let snapshot = inst.clone();
            for ev in events {
                if snapshot.gave_up && matches!(ev, RuntimeEventKind::GaveUp { .. }) {
                    continue;
                }
                self.emit(&snapshot, ev);
            }
            exceeded.then_some(snapshot)
        };
        if let Some(inst) = give_up {
            let restarts = inst.observed.as_ref().map_or(0, |o| o.restarts);
            self.emit(
                &inst,
                RuntimeEventKind::GaveUp {
                    restarts,
                    on_exhausted: inst.spec.lifecycle.on_exhausted,
                },
            );
            let api = self.pods(&inst.namespace);
            let name = inst.name.clone();
            tokio::spawn(async move {
                if let Err(e) = api.delete(&name, &DeleteParams::default()).await
                    && !is_status(&e, 404)
                {
                    tracing::warn!(pod = %name, error = %e, "deleting a pod past its retries failed");
                }
            });
        }
    }

    fn missing_after_list(&self, listed: &std::collections::BTreeSet<String>) {
        let gone: Vec<Instance> = match self.inner.instances.lock() {
            Ok(m) => m
                .iter()
                .filter(|(k, i)| i.started && !listed.contains(*k))
                .map(|(_, i)| i.clone())
                .collect(),
            Err(_) => return,
        };
        for inst in gone {
            self.pod_gone(&pod_stub(&inst));
        }
    }

    fn pod_gone(&self, pod: &Pod) {
        let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return;
        };
        let Ok(mut m) = self.inner.instances.lock() else {
            return;
        };
        let Some(inst) = m.get_mut(&format!("{ns}/{name}")) else {
            return;
        };
        if inst.desired == Desired::Running
            && !inst.gave_up
            && inst.state != InstanceState::Completed
        {
            // Deleted or evicted behind our back.
            let f = Failure::Runtime(RuntimeFailure::ContainerCrash { exit_code: None });
            inst.state = InstanceState::Failed;
            inst.message = Some(format!("pod {ns}/{name} was deleted outside D-AROS"));
            inst.last_failure = Some(f.clone());
            let snap = inst.clone();
            self.emit(&snap, RuntimeEventKind::Failed { failure: f });
        }
    }

    // Reports an error that is a failure (§4.7) as an event, and returns it.
    fn report(&self, inst: &Instance, err: AdapterError) -> AdapterError {
        if let Some(f) = err.as_failure() {
            let _ = self.with(&inst.id, |i| i.last_failure = Some(f.clone()));
            self.emit(inst, RuntimeEventKind::Failed { failure: f });
        }
        err
    }

    async fn wait_gone(
        &self,
        api: &Api<Pod>,
        name: &str,
        within: Duration,
    ) -> Result<(), AdapterError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match api.get_opt(name).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) => {}
                Err(e) => return Err(kube_err(format!("get pod {name}"), e)),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AdapterError::Launch {
                    id: RuntimeId::new(AdapterKind::Kubernetes, name),
                    stage: "delete pod".into(),
                    reason: format!("pod {name} still exists after {}s", within.as_secs()),
                });
            }
            tokio::time::sleep(self.inner.cfg.poll_interval).await;
        }
    }

    async fn delete_pod(&self, inst: &Instance, grace: Duration) -> Result<(), AdapterError> {
        let api = self.pods(&inst.namespace);
        let secs = u32::try_from(grace.as_secs()).unwrap_or(u32::MAX);
        match api
            .delete(&inst.name, &DeleteParams::default().grace_period(secs))
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => return Err(kube_err(format!("delete pod {}", inst.id.name), e)),
        }
        self.wait_gone(&api, &inst.name, grace + self.inner.cfg.delete_timeout)
            .await
    }
}

impl RuntimeAdapter for KubernetesAdapter {
    fn capabilities(&self) -> RuntimeCapabilities {
        RuntimeCapabilities {
            adapter: AdapterKind::Kubernetes,
            runtime_types: vec![RuntimeType::Container],
            os: vec![OsType::Linux, OsType::Windows],
            health_checks: true,
            restarts: true,
            logs: true,
            survives_agent_restart: true,
            joins_agent_cgroups: false,
        }
    }

    async fn create(&self, spec: &WorkloadInstanceSpec) -> Result<RuntimeId, AdapterError> {
        self.capabilities().check(&spec.runtime)?;
        let ks = KubernetesSpec::parse(&spec.runtime_spec.0, "runtimeSpec")?;
        let mut errs = Vec::new();
        for (i, c) in spec.health_checks.iter().enumerate() {
            errs.extend(c.validate(&format!("healthChecks[{i}]")));
        }
        errs.extend(spec.lifecycle.validate("lifecycle"));
        // Admission refuses the storage trait for pods; a spec that has
        // volumes anyway is refused, not run without them.
        if !spec.volumes.is_empty() {
            errs.push(daros_coordinator::FieldError::new(
                "volumes",
                "the kubernetes adapter does not mount agent volumes (use a PersistentVolumeClaim in the pod spec)",
            ));
        }
        if !errs.is_empty() {
            return Err(AdapterError::InvalidSpec(errs));
        }
        // The spec's namespace (admission checked the tenant owns it), else
        // the tenant's, else the adapter's default.
        let namespace = ks
            .namespace
            .clone()
            .or_else(|| spec.namespace.clone())
            .unwrap_or_else(|| self.inner.cfg.default_namespace.clone());
        let pod = build_pod(spec, &ks, &namespace)?;
        let name = pod_name(&spec.key);
        let id = RuntimeId::new(AdapterKind::Kubernetes, format!("{namespace}/{name}"));
        let inst = Instance {
            id: id.clone(),
            spec: spec.clone(),
            namespace,
            name,
            pod,
            desired: Desired::Stopped,
            observed: None,
            state: InstanceState::Created,
            last_failure: None,
            message: None,
            gave_up: false,
            started: false,
        };
        {
            let mut m = self
                .inner
                .instances
                .lock()
                .map_err(|_| AdapterError::Closed)?;
            if let Some(old) = m.get(&id.name) {
                return if &old.spec == spec {
                    Ok(id)
                } else {
                    Err(AdapterError::Conflict(id))
                };
            }
            m.insert(id.name.clone(), inst.clone());
        }
        self.emit(&inst, RuntimeEventKind::Created);
        Ok(id)
    }

    async fn start(&self, id: &RuntimeId) -> Result<(), AdapterError> {
        let inst = self.with(id, |i| {
            i.desired = Desired::Running;
            i.gave_up = false;
            i.clone()
        })?;
        let api = self.pods(&inst.namespace);
        let want = live_hash(&inst.pod).map(str::to_string);
        let live = match api.get_opt(&inst.name).await {
            Ok(l) => l,
            Err(e) => return Err(self.report(&inst, kube_err(format!("get pod {id}"), e))),
        };
        if let Some(p) = &live {
            if p.metadata.deletion_timestamp.is_some() {
                return Err(AdapterError::Launch {
                    id: id.clone(),
                    stage: "create pod".into(),
                    reason: format!(
                        "pod {} is still terminating; start again once it is gone",
                        id.name
                    ),
                });
            }
            if live_hash(p).map(str::to_string) == want {
                // Ours, unchanged: adopt it (an agent restart).
                let o = observe(p);
                let gen_ = u64::from(o.restarts) + 1;
                self.with(id, |i| {
                    i.state = o.state;
                    i.started = o.running;
                    i.observed = Some(o);
                })?;
                self.emit(
                    &inst,
                    RuntimeEventKind::Adopted {
                        pid: None,
                        generation: gen_,
                    },
                );
                return Ok(());
            }
            // Changed spec: pods are immutable, replace it.
            tracing::info!(instance = %id, "pod spec changed: replacing the pod");
            if let Err(e) = self.delete_pod(&inst, Duration::from_secs(30)).await {
                return Err(self.report(&inst, e));
            }
        }
        let created = match api.create(&PostParams::default(), &inst.pod).await {
            Ok(p) => p,
            Err(kube::Error::Api(s)) if s.code == 400 || s.code == 422 => {
                return Err(AdapterError::field(
                    "runtimeSpec.podTemplate",
                    format!("the API server refused the pod: {}", s.message),
                ));
            }
            Err(e) => return Err(self.report(&inst, kube_err(format!("create pod {id}"), e))),
        };
        self.with(id, |i| {
            i.state = InstanceState::Starting;
            i.observed = None;
        })?;
        self.observe_pod(&created);
        Ok(())
    }

    async fn stop(&self, id: &RuntimeId, grace: Duration) -> Result<(), AdapterError> {
        let inst = self.with(id, |i| {
            i.desired = Desired::Stopped;
            i.state = InstanceState::Stopping;
            i.clone()
        })?;
        self.delete_pod(&inst, grace).await?;
        let snap = self.with(id, |i| {
            i.state = InstanceState::Stopped;
            i.message = Some("stopped on request: pod deleted".into());
            i.clone()
        })?;
        self.emit(&snap, RuntimeEventKind::Stopped);
        Ok(())
    }

    async fn destroy(&self, id: &RuntimeId, opts: DestroyOptions) -> Result<(), AdapterError> {
        let inst = self.with(id, |i| {
            i.desired = Desired::Stopped;
            i.clone()
        })?;
        self.delete_pod(&inst, opts.grace).await?;
        if let Ok(mut m) = self.inner.instances.lock() {
            m.remove(&id.name);
        }
        self.emit(&inst, RuntimeEventKind::Destroyed);
        Ok(())
    }

    async fn inspect(&self, id: &RuntimeId) -> Result<WorkloadStatus, AdapterError> {
        let inst = self.with(id, |i| i.clone())?;
        if inst.desired == Desired::Running {
            match self.pods(&inst.namespace).get_opt(&inst.name).await {
                Ok(Some(p)) => self.observe_pod(&p),
                Ok(None) => self.pod_gone(&crate::kubernetes::pod_stub(&inst)),
                Err(e) => return Err(kube_err(format!("get pod {id}"), e)),
            }
        }
        self.with(id, |i| i.status())
    }

    async fn list(&self) -> Result<Vec<WorkloadStatus>, AdapterError> {
        let m = self
            .inner
            .instances
            .lock()
            .map_err(|_| AdapterError::Closed)?;
        Ok(m.values().map(Instance::status).collect())
    }

    async fn logs(&self, id: &RuntimeId, query: LogQuery) -> Result<Vec<LogLine>, AdapterError> {
        let inst = self.with(id, |i| i.clone())?;
        let lp = LogParams {
            timestamps: true,
            tail_lines: query.tail.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            ..LogParams::default()
        };
        let text = self
            .pods(&inst.namespace)
            .logs(&inst.name, &lp)
            .await
            .map_err(|e| kube_err(format!("logs of pod {id}"), e))?;
        Ok(text.lines().map(parse_kubelet_line).collect())
    }

    async fn follow_logs(&self, id: &RuntimeId, tail: usize) -> Result<LogStream, AdapterError> {
        let inst = self.with(id, |i| i.clone())?;
        let lp = LogParams {
            timestamps: true,
            follow: true,
            tail_lines: Some(i64::try_from(tail).unwrap_or(i64::MAX)),
            ..LogParams::default()
        };
        let op = format!("logs of pod {id}");
        let reader = self
            .pods(&inst.namespace)
            .log_stream(&inst.name, &lp)
            .await
            .map_err(|e| kube_err(op.clone(), e))?;
        let lines = reader
            .lines()
            .map_ok(|l| parse_kubelet_line(&l))
            .map_err(move |e| AdapterError::Kube {
                op: op.clone(),
                source: Box::new(kube::Error::ReadEvents(e)),
            });
        Ok(lines.boxed())
    }

    fn events(&self) -> EventStream {
        self.inner.events.subscribe()
    }
}

/// A pod object carrying only the name and namespace of `inst`.
fn pod_stub(inst: &Instance) -> Pod {
    Pod {
        metadata: pod::pod_meta(&inst.name, &inst.namespace),
        ..Pod::default()
    }
}

/// Reads a kubelet log line with `timestamps=true`: `<RFC3339> <text>`.
/// The kubelet merges stdout and stderr; lines are reported as stdout.
fn parse_kubelet_line(line: &str) -> LogLine {
    let (time, text) = line
        .split_once(' ')
        .and_then(|(t, rest)| crate::time::parse_rfc3339_nanos(t).map(|n| (n, rest)))
        .unwrap_or((0, line));
    LogLine {
        time,
        stream: OutputStream::Stdout,
        partial: false,
        text: text.to_string(),
    }
}
