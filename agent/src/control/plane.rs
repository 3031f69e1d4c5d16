//! [`ControlPlane`]: the mesh with the replicated coordinator, the node side
//! (work in, reports out, self-registration) and the leader side (dispatch).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use daros_coordinator::access::Actor;
use daros_coordinator::{Command, ExecutionNode, Outcome, Timestamp};
use daros_gossip::mesh::{Mesh, MeshError, MeshHandle, WriteOutcome};
use daros_gossip::raft::{ConsensusError, LogPosition};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use super::state::{ControlCommand, ControlQuery, CoordinatorState, Failure, Stamped};
use super::work::WorkExecutor;
use super::{ControlError, bootstrap, dispatch, node};
use crate::config::MeshSection;

/// Describes this node for registration (called again to notice capacity changes).
pub type NodeSpecFn = Arc<dyn Fn() -> ExecutionNode + Send + Sync>;

/// What the control plane needs from darosd.
pub struct ControlSettings {
    /// `agent.data_dir` (the mesh lives in `<data_dir>/mesh`).
    pub data_dir: PathBuf,
    /// Node name (the mesh node id is derived from it).
    pub node_name: String,
    /// `[mesh]`.
    pub mesh: MeshSection,
    /// This node's description for `RegisterNode`.
    pub node_spec: NodeSpecFn,
    /// This node's latest PSI (node pressure reports).
    pub psi: super::pressure::PsiFn,
}

/// How long start waits for the node's first registration.
const REGISTER_WAIT: Duration = Duration::from_secs(5);

/// The mesh handle type of darosd.
pub type ControlMesh = MeshHandle<CoordinatorState>;

/// The running control plane of this agent.
pub struct ControlPlane {
    mesh: ControlMesh,
    node: String,
    data_dir: PathBuf,
    executor_wired: bool,
    contact: Arc<super::contact::Contact>,
    timings: Arc<super::timings::Timings>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// The Secret sealing key (server agents only).
    secret_keys: Option<Arc<super::secrets::SecretKeys>>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("node", &self.node)
            .finish()
    }
}

tokio::task_local! {
    /// Who the API request being served is for.
    static CALLER: Actor;
}

/// Runs `f` as `actor`'s request: the control plane's writes and reads in it
/// carry the caller (checked and audited by the coordinator).
pub async fn with_caller<F: std::future::Future>(actor: Actor, f: F) -> F::Output {
    CALLER.scope(actor, f).await
}

/// The caller of the request being served, if any.
pub fn caller() -> Option<Actor> {
    CALLER.try_with(Clone::clone).ok()
}

/// Milliseconds since the epoch, the proposer's stamp.
pub fn now() -> Timestamp {
    Timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    )
}

impl ControlPlane {
    /// Starts the mesh (creating or joining the cluster on a first start), the
    /// node side with `executor` (a [`super::noop::NoopExecutor`] when `None`) and
    /// the leader dispatch.
    pub async fn start(
        s: ControlSettings,
        executor: Option<Arc<dyn WorkExecutor>>,
    ) -> Result<Arc<Self>, ControlError> {
        let executor_wired = executor.is_some();
        let executor: Arc<dyn WorkExecutor> =
            executor.unwrap_or_else(|| Arc::new(super::noop::NoopExecutor::default()));
        let id = bootstrap::node_id_of(&s.node_name)?;
        let cfg = bootstrap::prepare(&s.data_dir, &id, &s.mesh).await?;
        let secret_keys = super::secrets::SecretKeys::load(&bootstrap::mesh_dir(&s.data_dir))
            .map_err(|e| ControlError::Startup(format!("loading the secret sealing key: {e}")))?
            .map(Arc::new);
        let (state, applied) = CoordinatorState::new();
        let timings = state.timings();
        let mesh = Mesh::start(cfg, state)
            .await
            .map_err(|e| ControlError::Startup(format!("starting the mesh: {e}")))?;
        let plane = Arc::new(Self {
            node: id.to_string(),
            mesh: mesh.clone(),
            data_dir: s.data_dir.clone(),
            executor_wired,
            contact: Arc::default(),
            timings,
            tasks: std::sync::Mutex::default(),
            secret_keys,
        });
        let resync = node::serve_work(
            &mesh,
            id.to_string(),
            Arc::clone(&executor),
            Arc::clone(&plane.contact),
        );
        let (registered_tx, registered) = tokio::sync::oneshot::channel();
        let mut tasks = vec![
            tokio::spawn(node::forward_reports(
                Arc::clone(&plane),
                Arc::clone(&executor),
                resync,
            )),
            tokio::spawn(node::disconnect_watch(
                Arc::clone(&plane),
                Arc::clone(&executor),
            )),
            tokio::spawn(node::register_loop(
                Arc::clone(&plane),
                s.node_spec.clone(),
                registered_tx,
            )),
            tokio::spawn(super::pressure::report_loop(
                Arc::clone(&plane),
                super::pressure::Thresholds {
                    memory_full: s.mesh.pressure_memory_full,
                    io_full: s.mesh.pressure_io_full,
                    cpu_some: s.mesh.pressure_cpu_some,
                },
                s.psi.clone(),
            )),
        ];
        if mesh.consensus_status().is_some() {
            tasks.push(tokio::spawn(dispatch::leader_loop(
                Arc::clone(&plane),
                applied,
                dispatch::DispatchSettings {
                    period: s.mesh.dispatch_interval.0,
                    node_down_after: s.mesh.node_down_after.0,
                },
            )));
        }
        if let Ok(mut t) = plane.tasks.lock() {
            t.extend(tasks);
        }
        // Serve the API once this node can take workloads (or give up waiting:
        // registration goes on in the background until a leader takes it).
        if tokio::time::timeout(REGISTER_WAIT, registered)
            .await
            .is_err()
        {
            tracing::warn!(node = %id, "not registered yet (no leader reachable); retrying in the background");
        }
        info!(node = %id, cluster = %mesh.cluster_id(), role = ?mesh.role(), executor_wired, "control plane up");
        Ok(plane)
    }

    /// The mesh.
    pub fn mesh(&self) -> &ControlMesh {
        &self.mesh
    }

    /// The Secret sealing key, on a server agent.
    pub fn secret_keys(&self) -> Option<&super::secrets::SecretKeys> {
        self.secret_keys.as_deref()
    }

    /// Seals the Secret values of `docs` before they are written or
    /// simulated; refused on a client agent, which holds no key.
    pub fn seal_documents(
        &self,
        docs: &mut [daros_coordinator::spec::Document],
    ) -> Result<(), String> {
        if !docs
            .iter()
            .any(|d| matches!(d, daros_coordinator::spec::Document::Secret(_)))
        {
            return Ok(());
        }
        match &self.secret_keys {
            Some(k) => k.seal_documents(docs),
            None => Err(format!(
                "node {} is a client agent and holds no sealing key: apply Secret documents through a server agent's API",
                self.node
            )),
        }
    }

    /// This node's name in the cluster.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// `agent.data_dir`.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// When this node last had contact with the servers.
    pub fn contact(&self) -> &super::contact::Contact {
        &self.contact
    }

    /// True when a runtime executor was given (else work is accepted, not run).
    pub fn executor_wired(&self) -> bool {
        self.executor_wired
    }

    /// Writes a coordinator command through raft (forwarded to the leader),
    /// stamped with this node's clock.
    /// Inside [`with_caller`] the write is the caller's: checked against
    /// the role bindings and audited with the change.
    pub async fn write(&self, command: Command) -> Result<(Outcome, LogPosition), ControlError> {
        // Never proposed with a plain secret value (the raft log would keep it).
        if let Some(secret) = command.plain_secret() {
            return Err(ControlError::Refused(super::state::Failure {
                kind: super::state::FailureKind::Invalid,
                message: format!(
                    "Secret {secret} has values that are not sealed: apply it through the API (which seals them)"
                ),
            }));
        }
        self.write_stamped(Stamped {
            at: now(),
            leader_term: None,
            actor: caller(),
            command: ControlCommand::Coordinator { command },
        })
        .await
    }

    pub(super) async fn write_raw(
        &self,
        command: ControlCommand,
    ) -> Result<(Outcome, LogPosition), ControlError> {
        self.write_stamped(Stamped {
            at: now(),
            leader_term: None,
            actor: None,
            command,
        })
        .await
    }

    /// Writes a decision this server made as the leader of `term` (fenced by it:
    /// refused if committed in any other term).
    pub(super) async fn write_as_leader(
        &self,
        term: u64,
        command: Command,
    ) -> Result<(Outcome, LogPosition), ControlError> {
        self.write_stamped(Stamped {
            at: now(),
            leader_term: Some(term),
            actor: None,
            command: ControlCommand::Coordinator { command },
        })
        .await
    }

    async fn write_stamped(&self, s: Stamped) -> Result<(Outcome, LogPosition), ControlError> {
        let started = std::time::Instant::now();
        let c = self.mesh.write(s).await;
        self.timings.proposed(started.elapsed());
        let c = c.map_err(ControlError::from_mesh)?;
        let outcome = c.response.map_err(ControlError::Refused)?;
        Ok((outcome, c.at))
    }

    /// This server's local timings.
    pub fn timings(&self) -> &super::timings::Timings {
        &self.timings
    }

    /// A linearizable read of the coordinator; inside [`with_caller`], what
    /// the caller may read of it.
    pub async fn query(&self, q: ControlQuery) -> Result<Value, ControlError> {
        let q = match caller() {
            Some(actor) => ControlQuery::As {
                actor,
                now: now(),
                read: Box::new(q),
            },
            None => q,
        };
        self.mesh
            .read(q)
            .await
            .map_err(ControlError::from_mesh_read)?
            .map_err(ControlError::Refused)
    }

    /// Stops the background tasks and leaves the mesh (announced in gossip).
    pub async fn shutdown(&self) {
        if let Ok(mut t) = self.tasks.lock() {
            for task in t.drain(..) {
                task.abort();
            }
        }
        self.mesh.leave().await;
    }
}

impl ControlError {
    /// Maps a mesh error of a write: bad input → invalid; otherwise whether the
    /// write was refused before any proposal, may have been applied, or is not
    /// this agent's to make.
    pub fn from_mesh(e: MeshError) -> Self {
        if let Some(f) = Self::invalid(&e) {
            return f;
        }
        match e.write_outcome() {
            WriteOutcome::NotApplied => ControlError::NotApplied(e.to_string()),
            WriteOutcome::Unknown => ControlError::OutcomeUnknown(e.to_string()),
            WriteOutcome::Forbidden => ControlError::Forbidden(e.to_string()),
        }
    }

    /// Maps a mesh error of a read (a read changes nothing).
    pub fn from_mesh_read(e: MeshError) -> Self {
        if let Some(f) = Self::invalid(&e) {
            return f;
        }
        match e.write_outcome() {
            WriteOutcome::Forbidden => ControlError::Forbidden(e.to_string()),
            _ => ControlError::Unavailable(e.to_string()),
        }
    }

    fn invalid(e: &MeshError) -> Option<Self> {
        use super::state::FailureKind;
        let (kind, message) = match e.consensus() {
            Some(ConsensusError::Invalid(m)) => (FailureKind::Invalid, m),
            Some(ConsensusError::TooLarge { size, limit }) => (
                FailureKind::Invalid,
                format!("request of {size} bytes exceeds the {limit} byte limit"),
            ),
            // A membership change the cluster's shape refuses (the last
            // voter) is a conflict with the current state, not an outage.
            Some(ConsensusError::Membership(m)) => (FailureKind::Conflict, m),
            _ => return None,
        };
        Some(ControlError::Refused(Failure { kind, message }))
    }
}

/// Waits until `rx` changes or `period` passes.
pub(super) async fn changed_or(rx: &mut watch::Receiver<LogPosition>, period: Duration) {
    let _ = tokio::time::timeout(period, rx.changed()).await;
}
