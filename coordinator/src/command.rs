//! Commands (what the mesh replicates through raft) and their outcome. Every
//! command is deterministic given the state and the time passed in.

use crate::decision::DecisionId;
use crate::lifecycle::LifecycleEvent;
use crate::model::names::AppKey;
use crate::model::node::ExecutionNode;
use crate::reconcile::{InitJobId, InstanceId, ObservedState, PlacementId, RuntimeAction};
use crate::spec::Document;
use serde::{Deserialize, Serialize};

/// An operation on an application (seed 000 §6.3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "op")]
pub enum OperationRequest {
    /// Arbitrate and place an admitted application.
    Start,
    /// Stop it (Terminated).
    Stop,
    /// Delete it.
    Delete,
    /// Set the replica count of a workload (within its min and max).
    Scale {
        /// Workload.
        workload: String,
        /// Replicas wanted.
        replicas: u32,
    },
    /// Leave Degraded: re-place evicted replicas, release held ones.
    Restore,
    /// Run a failed application through admission again.
    Retry,
    /// Roll the rollout under way back to the version it started from.
    Abort,
    /// Let the canary workloads of the rollout under way go on to every
    /// replica.
    Promote,
    /// Approve a workflow step waiting for approval.
    Approve {
        /// The step.
        step: String,
    },
    /// Start no further workflow step until resumed.
    Suspend,
    /// Resume a suspended workflow.
    Resume,
}

/// A change of a node's condition: its liveness, decided by the leader from
/// the mesh (`Ready`, `Down`), or its cordon, set by an operator (`Cordoned`,
/// `Uncordoned`). The two are independent: a node that comes back stays
/// cordoned if an operator cordoned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeCondition {
    /// Heard from again: takes workloads (unless cordoned), its instances are
    /// reachable again.
    Ready,
    /// Operator: takes no new workloads; running ones stay.
    Cordoned,
    /// Operator: takes new workloads again.
    Uncordoned,
    /// Silent: takes no new workloads; its instances are unreachable and lost
    /// after their `disconnect.lostAfter` (then placed elsewhere, per policy).
    Down,
}

fn yes() -> bool {
    true
}

/// A command to the coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "command")]
pub enum Command {
    /// Apply documents (nodes, pools, tenants, policies, applications). New
    /// applications are admitted and, with `start`, arbitrated together in
    /// one fair-share round; changed ones become new versions.
    Apply {
        /// Validated documents.
        documents: Vec<Document>,
        /// Start admitted applications (default true).
        #[serde(default = "yes")]
        start: bool,
    },
    /// An operation on one application.
    Operate {
        /// The application.
        app: AppKey,
        /// The operation.
        operation: OperationRequest,
    },
    /// Apply an earlier version's spec as a new version.
    Rollback {
        /// The application.
        app: AppKey,
        /// Version to return to.
        version: u32,
    },
    /// Adds or updates a node (the agent registers its own).
    RegisterNode {
        /// The node.
        node: ExecutionNode,
    },
    /// Deletes a node that is gone: declared but never registered, or Down
    /// with nothing placed on it (refused otherwise).
    DeleteNode {
        /// Node name.
        name: String,
    },
    /// Cordons a node and moves its instances elsewhere, each workload
    /// within its rollout budget (ended by `Uncordoned`).
    DrainNode {
        /// Node name.
        name: String,
    },
    /// A node's agent: the node is under resource pressure (`Some`: what it
    /// measured) or no longer (`None`).
    NodePressure {
        /// Node name.
        node: String,
        /// What is under pressure, or `None` when it ended.
        #[serde(default)]
        pressure: Option<String>,
    },
    /// Changes a node's condition.
    SetNodeCondition {
        /// Node name.
        node: String,
        /// New condition.
        condition: NodeCondition,
    },
    /// Deletes a tenant (refused while it has applications).
    DeleteTenant {
        /// Tenant name.
        name: String,
    },
    /// Writes version `version` of policy `name` again, as its next version.
    RollbackPolicy {
        /// Policy name.
        name: String,
        /// Version to return to.
        version: u32,
    },
    /// Deletes a policy.
    DeletePolicy {
        /// Policy name.
        name: String,
    },
    /// Deletes a pool (refused while in use).
    DeletePool {
        /// Pool name.
        name: String,
    },
    /// Deletes a tenant's Config (refused while a workload reads it).
    DeleteConfig {
        /// Tenant.
        tenant: String,
        /// Config name.
        name: String,
    },
    /// Deletes a tenant's Secret (refused while a workload reads it).
    DeleteSecret {
        /// Tenant.
        tenant: String,
        /// Secret name.
        name: String,
    },
    /// A runtime adapter reports an instance's state.
    ReportWorkload {
        /// The instance.
        instance: InstanceId,
        /// The placement the report is about (0: unknown, matched by version).
        #[serde(default)]
        placement: PlacementId,
        /// Its state.
        state: ObservedState,
    },
    /// Several instance reports at once (a node's batch): each observed as a
    /// [`Command::ReportWorkload`], then every application they touch planned
    /// once, not once per report — a node's batch holds many replicas of the
    /// few applications placed there.
    ReportWorkloads {
        /// The reports, oldest first.
        reports: Vec<WorkloadReport>,
    },
    /// A runtime adapter reports an init job's state.
    ReportInitJob {
        /// The job.
        job: InitJobId,
        /// The series of runs the report is about (0: unknown, matched by version).
        #[serde(default)]
        run: PlacementId,
        /// Its state (`exited` with code 0 is success).
        state: ObservedState,
    },
    /// A node's complete list of the instance placements it runs (sent
    /// periodically after the individual reports): an instance the coordinator
    /// believes live on that node whose placement is not listed is not
    /// running there, and fails with that reason.
    NodeInventory {
        /// The node.
        node: String,
        /// Placements it runs (any state).
        placements: std::collections::BTreeSet<PlacementId>,
    },
    /// Time passed: restarts whose backoff expired are due.
    Tick,
    /// How much history the coordinator keeps (every replica trims alike).
    SetRetention {
        /// The limits.
        retention: crate::state::history::Retention,
    },
    /// Binds a role to a principal (replaces a binding of that name).
    Bind {
        /// The binding.
        binding: crate::access::RoleBinding,
    },
    /// Removes a role binding.
    Unbind {
        /// Its name.
        name: String,
    },
    /// Records a bearer token (its secret's hash only).
    IssueToken {
        /// The token.
        token: crate::access::ApiToken,
    },
    /// Records in the audit trail a request an agent served on its own node
    /// (QoS writes, cluster membership): nothing else changes.
    Record {
        /// What was asked (`PUT /v1/qos/workloads/managed/web`).
        verb: String,
        /// The HTTP status it was answered with.
        status: u16,
        /// Why it was refused, when it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Revokes a bearer token (it stays listed, revoked).
    RevokeToken {
        /// Its id.
        id: String,
    },
    /// Optimistic concurrency (a pipeline's expected version, seed 000 §10.3):
    /// `then` runs only if application `app` is at `version` (its latest
    /// version number; 0: it does not exist), else nothing changes and the
    /// caller is told the version it is at.
    Expect {
        /// The application.
        app: AppKey,
        /// The version it must be at.
        version: u32,
        /// What to do then.
        then: Box<Command>,
    },
}

impl Command {
    /// `tenant/name` of a Secret document whose values are not sealed: such
    /// a command must never be proposed (the raft log would keep the value).
    pub fn plain_secret(&self) -> Option<String> {
        match self {
            Command::Apply { documents, .. } => documents.iter().find_map(|d| match d {
                Document::Secret(s) if !s.plain_keys().is_empty() => {
                    Some(format!("{}/{}", s.tenant, s.name))
                }
                _ => None,
            }),
            Command::Expect { then, .. } => then.plain_secret(),
            _ => None,
        }
    }

    /// The command's name (`Apply`, `ReportWorkload`, ...), for metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Apply { .. } => "Apply",
            Command::Operate { .. } => "Operate",
            Command::Rollback { .. } => "Rollback",
            Command::RegisterNode { .. } => "RegisterNode",
            Command::DeleteNode { .. } => "DeleteNode",
            Command::DrainNode { .. } => "DrainNode",
            Command::NodePressure { .. } => "NodePressure",
            Command::SetNodeCondition { .. } => "SetNodeCondition",
            Command::DeleteTenant { .. } => "DeleteTenant",
            Command::RollbackPolicy { .. } => "RollbackPolicy",
            Command::DeletePolicy { .. } => "DeletePolicy",
            Command::DeletePool { .. } => "DeletePool",
            Command::DeleteConfig { .. } => "DeleteConfig",
            Command::DeleteSecret { .. } => "DeleteSecret",
            Command::ReportWorkload { .. } => "ReportWorkload",
            Command::ReportWorkloads { .. } => "ReportWorkloads",
            Command::ReportInitJob { .. } => "ReportInitJob",
            Command::NodeInventory { .. } => "NodeInventory",
            Command::Tick => "Tick",
            Command::SetRetention { .. } => "SetRetention",
            Command::Bind { .. } => "Bind",
            Command::Unbind { .. } => "Unbind",
            Command::IssueToken { .. } => "IssueToken",
            Command::RevokeToken { .. } => "RevokeToken",
            Command::Record { .. } => "Record",
            Command::Expect { then, .. } => then.name(),
        }
    }
}

/// One instance's report in a [`Command::ReportWorkloads`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// The instance.
    pub instance: InstanceId,
    /// The placement the report is about (0: unknown, matched by version).
    #[serde(default)]
    pub placement: PlacementId,
    /// Its state.
    pub state: ObservedState,
}

/// An application change that was refused (it stays as it was).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The application.
    pub app: AppKey,
    /// Why.
    pub reason: String,
    /// Decision with the details, when there is one.
    pub decision: Option<DecisionId>,
}

/// What a command did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Lifecycle events recorded.
    pub events: Vec<LifecycleEvent>,
    /// Decisions recorded.
    pub decisions: Vec<DecisionId>,
    /// Actions for runtime adapters.
    pub actions: Vec<RuntimeAction>,
    /// Application changes refused.
    pub refusals: Vec<Refusal>,
    /// Other remarks (unchanged specs, ignored stale reports).
    pub notes: Vec<String>,
}

impl Outcome {
    /// Appends what a later command did.
    pub fn merge(&mut self, later: Outcome) {
        self.events.extend(later.events);
        self.decisions.extend(later.decisions);
        self.actions.extend(later.actions);
        self.refusals.extend(later.refusals);
        self.notes.extend(later.notes);
    }
}
