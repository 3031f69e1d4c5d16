//! The closed set of adapters (style: a closed enum where the set is
//! closed) and the routing the agent needs: by runtime requirement for
//! `create`, by id for everything else.

use crate::adapter::{DestroyOptions, LogQuery, LogStream, RuntimeAdapter, RuntimeCapabilities};
use crate::error::AdapterError;
use crate::event::EventStream;
use crate::instance::{AdapterKind, RuntimeId, WorkloadInstanceSpec};
use crate::kubernetes::KubernetesAdapter;
use crate::logs::LogLine;
use crate::process::ProcessAdapter;
use crate::status::WorkloadStatus;
use daros_coordinator::model::runtime::RuntimeRequirement;
use std::time::Duration;

/// One adapter of either kind.
#[derive(Debug, Clone)]
pub enum AnyAdapter {
    /// Bare-metal processes.
    Process(ProcessAdapter),
    /// Kubernetes pods.
    Kubernetes(KubernetesAdapter),
}

macro_rules! delegate {
    ($self:ident, $a:ident => $e:expr) => {
        match $self {
            AnyAdapter::Process($a) => $e,
            AnyAdapter::Kubernetes($a) => $e,
        }
    };
}

impl AnyAdapter {
    /// Which kind it is.
    pub fn kind(&self) -> AdapterKind {
        match self {
            AnyAdapter::Process(_) => AdapterKind::Process,
            AnyAdapter::Kubernetes(_) => AdapterKind::Kubernetes,
        }
    }
}

impl RuntimeAdapter for AnyAdapter {
    fn capabilities(&self) -> RuntimeCapabilities {
        delegate!(self, a => a.capabilities())
    }
    async fn create(&self, spec: &WorkloadInstanceSpec) -> Result<RuntimeId, AdapterError> {
        delegate!(self, a => a.create(spec).await)
    }
    async fn start(&self, id: &RuntimeId) -> Result<(), AdapterError> {
        delegate!(self, a => a.start(id).await)
    }
    async fn stop(&self, id: &RuntimeId, grace: Duration) -> Result<(), AdapterError> {
        delegate!(self, a => a.stop(id, grace).await)
    }
    async fn destroy(&self, id: &RuntimeId, opts: DestroyOptions) -> Result<(), AdapterError> {
        delegate!(self, a => a.destroy(id, opts).await)
    }
    async fn inspect(&self, id: &RuntimeId) -> Result<WorkloadStatus, AdapterError> {
        delegate!(self, a => a.inspect(id).await)
    }
    async fn list(&self) -> Result<Vec<WorkloadStatus>, AdapterError> {
        delegate!(self, a => a.list().await)
    }
    async fn logs(&self, id: &RuntimeId, query: LogQuery) -> Result<Vec<LogLine>, AdapterError> {
        delegate!(self, a => a.logs(id, query).await)
    }
    async fn follow_logs(&self, id: &RuntimeId, tail: usize) -> Result<LogStream, AdapterError> {
        delegate!(self, a => a.follow_logs(id, tail).await)
    }
    fn events(&self) -> EventStream {
        delegate!(self, a => a.events())
    }
}

/// The adapters of one agent, itself an adapter: `create` goes to the
/// first adapter that runs the spec's runtime requirement, every other
/// operation to the adapter named in the id, `list` and `events` span all.
#[derive(Debug, Clone, Default)]
pub struct AdapterSet {
    adapters: Vec<AnyAdapter>,
    stats: std::sync::Arc<crate::stats::AdapterStats>,
}

impl AdapterSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `a` (one adapter per kind: a second of a kind replaces the first).
    #[must_use]
    pub fn with(mut self, a: AnyAdapter) -> Self {
        self.adapters.retain(|x| x.kind() != a.kind());
        self.adapters.push(a);
        self
    }

    /// The adapter that runs `req`.
    pub fn for_runtime(&self, req: &RuntimeRequirement) -> Result<&AnyAdapter, AdapterError> {
        self.adapters
            .iter()
            .find(|a| a.capabilities().supports(req))
            .ok_or_else(|| AdapterError::Unsupported {
                adapter: AdapterKind::Process,
                requirement: *req,
                serves: if self.adapters.is_empty() {
                    "nothing: no adapter is configured on this node".into()
                } else {
                    self.adapters
                        .iter()
                        .map(|a| {
                            let c = a.capabilities();
                            let t: Vec<String> =
                                c.runtime_types.iter().map(ToString::to_string).collect();
                            format!("{}: {}", c.adapter, t.join(", "))
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                },
            })
    }

    /// The adapter that owns `id`.
    pub fn for_id(&self, id: &RuntimeId) -> Result<&AnyAdapter, AdapterError> {
        self.adapters
            .iter()
            .find(|a| a.kind() == id.adapter)
            .ok_or_else(|| AdapterError::NotFound(id.clone()))
    }

    /// Operations counted by outcome and the last probes (health).
    pub fn stats(&self) -> std::sync::Arc<crate::stats::AdapterStats> {
        self.stats.clone()
    }

    /// Probes each adapter (a `list` of what it runs) and records whether
    /// it answered.
    pub async fn probe(&self) {
        for a in &self.adapters {
            let r = a.list().await;
            self.stats.probed(a.kind(), &r);
        }
    }

    /// What each adapter runs.
    pub fn all_capabilities(&self) -> Vec<RuntimeCapabilities> {
        self.adapters
            .iter()
            .map(RuntimeAdapter::capabilities)
            .collect()
    }
}

impl RuntimeAdapter for AdapterSet {
    fn capabilities(&self) -> RuntimeCapabilities {
        // The union; per-adapter detail is in `all_capabilities`.
        let all = self.all_capabilities();
        let mut c = RuntimeCapabilities {
            adapter: all.first().map_or(AdapterKind::Process, |c| c.adapter),
            runtime_types: Vec::new(),
            os: Vec::new(),
            health_checks: all.iter().all(|c| c.health_checks),
            restarts: all.iter().all(|c| c.restarts),
            logs: all.iter().all(|c| c.logs),
            survives_agent_restart: all.iter().all(|c| c.survives_agent_restart),
            joins_agent_cgroups: all.iter().any(|c| c.joins_agent_cgroups),
        };
        for a in all {
            for t in a.runtime_types {
                if !c.runtime_types.contains(&t) {
                    c.runtime_types.push(t);
                }
            }
            for o in a.os {
                if !c.os.contains(&o) {
                    c.os.push(o);
                }
            }
        }
        c
    }
    async fn create(&self, spec: &WorkloadInstanceSpec) -> Result<RuntimeId, AdapterError> {
        let a = self.for_runtime(&spec.runtime)?;
        let r = a.create(spec).await;
        self.stats.count(a.kind(), "create", &r);
        r
    }
    async fn start(&self, id: &RuntimeId) -> Result<(), AdapterError> {
        let r = self.for_id(id)?.start(id).await;
        self.stats.count(id.adapter, "start", &r);
        r
    }
    async fn stop(&self, id: &RuntimeId, grace: Duration) -> Result<(), AdapterError> {
        let r = self.for_id(id)?.stop(id, grace).await;
        self.stats.count(id.adapter, "stop", &r);
        r
    }
    async fn destroy(&self, id: &RuntimeId, opts: DestroyOptions) -> Result<(), AdapterError> {
        let r = self.for_id(id)?.destroy(id, opts).await;
        self.stats.count(id.adapter, "destroy", &r);
        r
    }
    async fn inspect(&self, id: &RuntimeId) -> Result<WorkloadStatus, AdapterError> {
        let r = self.for_id(id)?.inspect(id).await;
        self.stats.count(id.adapter, "inspect", &r);
        r
    }
    async fn list(&self) -> Result<Vec<WorkloadStatus>, AdapterError> {
        let mut out = Vec::new();
        for a in &self.adapters {
            let r = a.list().await;
            self.stats.count(a.kind(), "list", &r);
            self.stats.probed(a.kind(), &r);
            out.extend(r?);
        }
        Ok(out)
    }
    async fn logs(&self, id: &RuntimeId, query: LogQuery) -> Result<Vec<LogLine>, AdapterError> {
        self.for_id(id)?.logs(id, query).await
    }
    async fn follow_logs(&self, id: &RuntimeId, tail: usize) -> Result<LogStream, AdapterError> {
        self.for_id(id)?.follow_logs(id, tail).await
    }
    fn events(&self) -> EventStream {
        EventStream::merge(self.adapters.iter().map(RuntimeAdapter::events))
    }
}
