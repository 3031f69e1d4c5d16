//! The coordinator as the raft state machine.
//!
//! Every command carries the time stamped by the proposer, so applying it is
//! deterministic on every replica (apply never reads a clock). A snapshot is
//! the coordinator's state itself (CBOR: its maps have structured keys), so
//! restoring it costs what the state weighs, not what its history did;
//! snapshots of earlier versions (the JSON journal of every applied command)
//! are still restored by replaying them.

use std::collections::BTreeMap;

use daros_coordinator::access::Actor;
use daros_coordinator::spec::Document;
use daros_coordinator::state::desired::{DesiredWork, RunStatus};
use daros_coordinator::state::work_changes::{WorkCursor, WorkUpdate};
use daros_coordinator::{
    AppKey, Command, CoordinatorError, DecisionId, Outcome, Timestamp, WorkloadReport,
};
use daros_gossip::raft::{LogPosition, ReplicatedState, SnapshotJob, StateError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use super::work::NodeReport;

/// What the raft log carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum ControlCommand {
    /// A coordinator command.
    Coordinator {
        /// The command.
        command: Command,
    },
    /// A node agent's report; dropped when stale (older attempt) or repeated
    /// (same attempt and state already recorded).
    Report {
        /// Reporting node.
        node: String,
        /// The report.
        report: NodeReport,
    },
    /// Several reports of one node at once, each applied as a [`Self::Report`]
    /// (a report the coordinator refuses does not stop the others): what the
    /// node gathered while its previous write was in flight.
    Reports {
        /// Reporting node.
        node: String,
        /// The reports, oldest first.
        reports: Vec<NodeReport>,
    },
    /// A node's whole current state (every item it runs): each report as
    /// above, then instances believed live there but absent fail.
    Inventory {
        /// Reporting node.
        node: String,
        /// Every item it knows.
        reports: Vec<NodeReport>,
    },
}

/// A command with the proposer's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamped {
    /// Proposer's time (ms since the epoch).
    pub at: Timestamp,
    /// A leader's own decision (liveness, ticks) made while leading this term:
    /// applied only if committed in that very term, so a deposed leader's
    /// decision, forwarded to its successor, changes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_term: Option<u64>,
    /// Who asked, for a caller's request (checked against the role bindings
    /// and audited in the same entry); `None` for the agents' own writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Actor>,
    /// The command.
    pub command: ControlCommand,
}

/// Kind of a failure, for the HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailureKind {
    /// Bad input (400).
    Invalid,
    /// No such object (404).
    NotFound,
    /// Refused in the current state (409).
    Conflict,
    /// The caller may not do this (403).
    Forbidden,
}

/// A refused command or query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// Kind.
    pub kind: FailureKind,
    /// Message naming the field or object and the reason.
    pub message: String,
}

impl From<CoordinatorError> for Failure {
    fn from(e: CoordinatorError) -> Self {
        let kind = match &e {
            CoordinatorError::Invalid { .. }
            | CoordinatorError::UnknownTenant { .. }
            | CoordinatorError::InvalidScale { .. } => FailureKind::Invalid,
            CoordinatorError::UnknownApp(_)
            | CoordinatorError::NoTenant(_)
            | CoordinatorError::UnknownNode(_)
            | CoordinatorError::UnknownPool(_)
            | CoordinatorError::UnknownPolicy(_)
            | CoordinatorError::UnknownDecision(_)
            | CoordinatorError::UnknownVersion { .. }
            | CoordinatorError::VersionCompacted { .. }
            | CoordinatorError::UnknownWorkload { .. }
            | CoordinatorError::NotFound(_) => FailureKind::NotFound,
            CoordinatorError::Forbidden(_) => FailureKind::Forbidden,
            _ => FailureKind::Conflict,
        };
        Failure {
            kind,
            message: e.to_string(),
        }
    }
}

/// A read of the coordinator state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "query")]
pub enum ControlQuery {
    /// Every application.
    Apps {
        /// Reader's time (what waits is planned at it).
        #[serde(default)]
        now: Timestamp,
    },
    /// One application at a time.
    Describe {
        /// Application.
        app: AppKey,
        /// Reader's time.
        now: Timestamp,
    },
    /// A decision of an application (its latest when `decision` is none).
    Explain {
        /// Application.
        app: AppKey,
        /// Decision number.
        decision: Option<u64>,
    },
    /// Predicts applying documents; changes nothing.
    WhatIf {
        /// Documents.
        documents: Vec<Document>,
        /// Reader's time.
        now: Timestamp,
    },
    /// Predicts a node's loss or drain; changes nothing.
    WhatIfNode {
        /// Node name.
        node: String,
        /// What happens to it.
        event: daros_coordinator::NodeEvent,
        /// Reader's time.
        now: Timestamp,
    },
    /// Registered nodes.
    Nodes,
    /// Lifecycle events and decisions after the given cursors (the events
    /// feed).
    Feed {
        /// Events with a sequence number above this.
        after_event: u64,
        /// Decisions with an id above this.
        after_decision: u64,
        /// At most this many of each.
        limit: usize,
    },
    /// Tenants with what their applications hold.
    Tenants,
    /// A tenant's Configs.
    Configs {
        /// Tenant.
        tenant: String,
    },
    /// A tenant's Secrets, keys only.
    Secrets {
        /// Tenant.
        tenant: String,
    },
    /// Policies.
    Policies,
    /// Resource pools with their member nodes and capacity.
    Pools,
    /// One policy: in force (if it is) and its versions.
    Policy {
        /// Policy name.
        name: String,
    },
    /// The audit trail (Platform Admins: all of it; Tenant Admins: what
    /// touched their tenants).
    Audit {
        /// Which records.
        filter: daros_coordinator::state::audit::AuditFilter,
    },
    /// Role bindings and tokens (without hashes).
    Access,
    /// Whether the caller may do what `need` says (`what` names it in the
    /// refusal): the check of routes that act on this node only.
    Authorize {
        /// What is needed.
        need: daros_coordinator::access::Need,
        /// The request, for the message.
        what: String,
    },
    /// `query` asked by `actor` at `now`: checked and filtered to what the
    /// caller may read.
    As {
        /// Who asks.
        actor: Actor,
        /// Reader's time (token expiry).
        now: Timestamp,
        /// The read.
        read: Box<ControlQuery>,
    },
}

/// Role bindings and tokens as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccessView {
    /// Bindings.
    pub bindings: Vec<daros_coordinator::access::RoleBinding>,
    /// Tokens (Platform Admins only).
    pub tokens: Vec<daros_coordinator::access::token::TokenView>,
}

/// A policy as described: what is in force and every recorded version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyView {
    /// The policy in force (none once deleted).
    pub policy: Option<daros_coordinator::model::policy::Policy>,
    /// Its versions, oldest first.
    pub versions: Vec<daros_coordinator::state::policy_versions::PolicyVersion>,
}

/// A tenant as listed: its spec and what its admitted applications hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantView {
    /// The tenant.
    pub tenant: daros_coordinator::model::tenant::Tenant,
    /// Applications, instances and requests charged to its quota.
    pub usage: daros_coordinator::admission::Charge,
}

/// A resource pool as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    /// The pool.
    pub pool: daros_coordinator::model::pool::ResourcePool,
    /// Nodes it selects.
    pub nodes: Vec<String>,
    /// Capacity of those that take work.
    pub capacity: daros_coordinator::placement::ResVec,
}

/// A page of the events feed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feed {
    /// Lifecycle events, oldest first.
    pub events: Vec<daros_coordinator::LifecycleEvent>,
    /// Decisions, oldest first.
    pub decisions: Vec<daros_coordinator::Decision>,
    /// For a reader who sees some tenants only: the event sequence and the
    /// decision id scanned up to (a reader resumes from them, so that other
    /// tenants' items never stall it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scanned: Option<(u64, u64)>,
}

/// Registered node as listed by the state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// The node as placement sees it: what its agent measured with an
    /// operator's `Node` document on top (`schedulable` is the cordon).
    pub node: daros_coordinator::ExecutionNode,
    /// Since when the leader has it Down (silent); absent while Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_since: Option<Timestamp>,
    /// Its agent registered it; false for a node only a document declared
    /// (listed as not yet seen, takes no work).
    #[serde(default = "yes")]
    pub registered: bool,
    /// The capacity its agent measured, when it registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<daros_coordinator::model::node::NodeCapacity>,
    /// Its drain, when one was asked (until uncordoned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<daros_coordinator::state::drain::Drain>,
    /// Under resource pressure, as its agent reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<daros_coordinator::state::pressure::NodePressure>,
}

fn yes() -> bool {
    true
}

/// The replicated coordinator.
pub struct CoordinatorState {
    coord: daros_coordinator::Coordinator,
    changes: u64,
    applied: watch::Sender<LogPosition>,
    timings: std::sync::Arc<super::timings::Timings>,
}

impl std::fmt::Debug for CoordinatorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorState")
            .field("changes", &self.changes)
            .finish()
    }
}

/// Version of the snapshot format written now.
const SNAPSHOT_FORMAT: u32 = 2;

/// What a snapshot holds.
#[derive(Serialize, Deserialize)]
struct Snapshot<C> {
    /// [`SNAPSHOT_FORMAT`].
    format: u32,
    /// Commands that changed the state so far.
    changes: u64,
    /// The state.
    coordinator: C,
}

/// Serializes a snapshot of `coord`.
fn write_snapshot(
    changes: u64,
    coord: &daros_coordinator::Coordinator,
) -> Result<Vec<u8>, StateError> {
    let mut out = Vec::new();
    ciborium::into_writer(
        &Snapshot {
            format: SNAPSHOT_FORMAT,
            changes,
            coordinator: coord,
        },
        &mut out,
    )
    .map_err(|e| StateError(format!("writing the snapshot: {e}")))?;
    Ok(out)
}

impl Default for CoordinatorState {
    fn default() -> Self {
        Self::new().0
    }
}

impl CoordinatorState {
    /// An empty state and a receiver of the last applied position.
    pub fn new() -> (Self, watch::Receiver<LogPosition>) {
        let (tx, rx) = watch::channel(LogPosition::default());
        (
            Self {
                coord: daros_coordinator::Coordinator::new(),
                changes: 0,
                applied: tx,
                timings: std::sync::Arc::default(),
            },
            rx,
        )
    }

    /// This server's local timings (shared with the metrics).
    pub fn timings(&self) -> std::sync::Arc<super::timings::Timings> {
        std::sync::Arc::clone(&self.timings)
    }

    /// The coordinator (for reads with [`daros_gossip::mesh::MeshHandle::read_with`]).
    pub fn coordinator(&self) -> &daros_coordinator::Coordinator {
        &self.coord
    }

    /// Commands that changed the state so far.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Desired work of every registered node.
    pub fn desired_work(&self) -> BTreeMap<String, DesiredWork> {
        self.coord.desired_work()
    }

    /// The desired work a reader at `cursor` lacks (see
    /// [`daros_coordinator::Coordinator::desired_work_since`]).
    pub fn desired_work_since(&self, cursor: Option<WorkCursor>) -> (WorkCursor, WorkUpdate) {
        self.coord.desired_work_since(cursor)
    }

    fn run(&mut self, s: &Stamped, index: u64) -> Result<Option<Outcome>, Failure> {
        execute(&mut self.coord, s, index)
    }
}

/// Applies one journaled command to `coord` (the same way when it is first
/// applied and when a snapshot's journal is replayed); `None` when it changed
/// nothing (stale or repeated reports).
fn execute(
    coord: &mut daros_coordinator::Coordinator,
    s: &Stamped,
    index: u64,
) -> Result<Option<Outcome>, Failure> {
    match (&s.command, &s.actor) {
        (ControlCommand::Coordinator { command }, Some(actor)) => {
            Ok(Some(coord.apply_as(actor, index, command.clone(), s.at)?))
        }
        (_, Some(actor)) => Err(Failure {
            kind: FailureKind::Forbidden,
            message: format!("{actor}: only node agents report"),
        }),
        (ControlCommand::Coordinator { command }, None) => {
            Ok(Some(coord.apply(command.clone(), s.at)?))
        }
        (ControlCommand::Report { node, report }, None) => {
            match report_command(coord, report).filter(|_| from_its_node(coord, node, report)) {
                Some(c) => Ok(Some(coord.apply(c, s.at)?)),
                None => Ok(None),
            }
        }
        (ControlCommand::Reports { node, reports }, None) => {
            let mut out = Outcome::default();
            let changed = apply_reports(coord, node, reports, s.at, &mut out, false)?;
            Ok(changed.then_some(out))
        }
        (ControlCommand::Inventory { node, reports }, None) => {
            let mut out = Outcome::default();
            let mut changed = apply_reports(coord, node, reports, s.at, &mut out, true)?;
            let placements = placements_of(reports);
            let o = coord.apply(
                Command::NodeInventory {
                    node: node.clone(),
                    placements,
                },
                s.at,
            )?;
            changed |= o != Outcome::default();
            merge(&mut out, o);
            Ok(changed.then_some(out))
        }
    }
}

/// Applies a node's reports in order, the fresh ones only: each run of
/// instance reports as one `ReportWorkloads` (every application they touch
/// planned once: a node's batch holds many replicas of the few applications
/// placed there, and planning each after every report cost a Running report
/// 65-79 µs at 1,000 nodes), init job reports one by one. A refused command
/// fails the whole write when `strict` (an inventory); otherwise it is skipped
/// and the rest apply. True when something was applied.
fn apply_reports(
    coord: &mut daros_coordinator::Coordinator,
    node: &str,
    reports: &[NodeReport],
    at: Timestamp,
    out: &mut Outcome,
    strict: bool,
) -> Result<bool, Failure> {
    let mut changed = false;
    let mut batch: Vec<WorkloadReport> = Vec::new();
    let mut apply = |coord: &mut daros_coordinator::Coordinator,
                     c: Command,
                     out: &mut Outcome|
     -> Result<(), Failure> {
        match coord.apply(c, at) {
            Ok(o) => {
                merge(out, o);
                changed = true;
                Ok(())
            }
            Err(e) if strict => Err(e.into()),
            Err(_) => Ok(()),
        }
    };
    for r in reports {
        if !from_its_node(coord, node, r) {
            continue;
        }
        match report_command(coord, r) {
            Some(Command::ReportWorkload {
                instance,
                placement,
                state,
            }) => {
                // Judged against the state before the batch: the same
                // report twice in one batch counts once.
                let again = batch
                    .iter()
                    .rev()
                    .find(|b| b.instance == instance && b.placement == placement)
                    .is_some_and(|b| b.state == state);
                if !again {
                    batch.push(WorkloadReport {
                        instance,
                        placement,
                        state,
                    });
                }
            }
            Some(c) => {
                if !batch.is_empty() {
                    let reports = std::mem::take(&mut batch);
                    apply(coord, Command::ReportWorkloads { reports }, out)?;
                }
                apply(coord, c, out)?;
            }
            None => {}
        }
    }
    if !batch.is_empty() {
        apply(coord, Command::ReportWorkloads { reports: batch }, out)?;
    }
    Ok(changed)
}

/// The placements an inventory lists.
fn placements_of(
    reports: &[NodeReport],
) -> std::collections::BTreeSet<daros_coordinator::reconcile::PlacementId> {
    reports
        .iter()
        .filter_map(|r| match r {
            NodeReport::Instance { placement, .. } => Some(*placement),
            NodeReport::InitJob { .. } => None,
        })
        .collect()
}

/// Whether a node's write would change nothing: every report is stale,
/// repeated or not its node's to make, and (an inventory) nothing believed
/// live there is absent. `execute` drops exactly these.
fn changes_nothing(c: &daros_coordinator::Coordinator, s: &Stamped) -> bool {
    if s.actor.is_some() || s.leader_term.is_some() {
        return false;
    }
    let quiet = |node: &str, reports: &[NodeReport]| {
        reports
            .iter()
            .all(|r| !from_its_node(c, node, r) || report_command(c, r).is_none())
    };
    match &s.command {
        ControlCommand::Coordinator { .. } => false,
        ControlCommand::Report { node, report } => quiet(node, std::slice::from_ref(report)),
        ControlCommand::Reports { node, reports } => quiet(node, reports),
        ControlCommand::Inventory { node, reports } => {
            quiet(node, reports)
                && c.absent_from_inventory(node, &placements_of(reports))
                    .is_empty()
        }
    }
}

fn merge(into: &mut Outcome, o: Outcome) {
    into.events.extend(o.events);
    into.decisions.extend(o.decisions);
    into.actions.extend(o.actions);
    into.refusals.extend(o.refusals);
    into.notes.extend(o.notes);
}

/// False when the report is about a run the coordinator knows to be placed
/// on another node: a node reports only what it runs.
fn from_its_node(c: &daros_coordinator::Coordinator, node: &str, r: &NodeReport) -> bool {
    use daros_coordinator::state::desired::ReportTarget;
    let target = match r {
        NodeReport::Instance {
            instance,
            placement,
            ..
        } => ReportTarget::Instance(instance, *placement),
        NodeReport::InitJob { job, .. } => ReportTarget::Job(job),
    };
    c.report_node(&target).is_none_or(|n| n == node)
}

/// The coordinator command of a report, or `None` when it is stale or already
/// recorded.
fn report_command(c: &daros_coordinator::Coordinator, r: &NodeReport) -> Option<Command> {
    {
        let fresh = |st: Option<RunStatus>, attempt: u32, state: &_| {
            st.is_some_and(|st| attempt >= st.attempt && attempt > 0 && &st.observed != state)
        };
        match r {
            NodeReport::Instance {
                instance,
                placement,
                attempt,
                state,
            } => fresh(c.instance_status(instance, *placement), *attempt, state).then(|| {
                Command::ReportWorkload {
                    instance: instance.clone(),
                    placement: *placement,
                    state: state.clone(),
                }
            }),
            NodeReport::InitJob {
                job,
                run,
                attempt,
                state,
            } => fresh(c.job_status(job, *run), *attempt, state).then(|| Command::ReportInitJob {
                job: job.clone(),
                run: *run,
                state: state.clone(),
            }),
        }
    }
}

impl CoordinatorState {
    pub(super) fn answer(&self, q: &ControlQuery) -> Result<Value, Failure> {
        let c = &self.coord;
        let json = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| Failure {
                kind: FailureKind::Conflict,
                message: format!("encoding the answer: {e}"),
            })
        };
        match q {
            ControlQuery::Apps { now } => json(serde_json::to_value(c.list_apps(*now))),
            ControlQuery::Describe { app, now } => {
                json(serde_json::to_value(c.describe(app, *now)?))
            }
            ControlQuery::Explain { app, decision } => {
                let id = match decision {
                    Some(d) => DecisionId(*d),
                    None => c.latest_decision(app)?,
                };
                json(serde_json::to_value(c.explain(id)?))
            }
            ControlQuery::WhatIf { documents, now } => {
                json(serde_json::to_value(c.what_if(documents.clone(), *now)?))
            }
            ControlQuery::WhatIfNode { node, event, now } => {
                json(serde_json::to_value(c.what_if_node(node, *event, *now)?))
            }
            ControlQuery::Nodes => json(serde_json::to_value(
                c.cluster()
                    .live_nodes()
                    .map(|n| NodeView {
                        node: n.spec.clone(),
                        down_since: n.down,
                        registered: n.registered,
                        measured: c.measured_node(&n.spec.name).map(|m| m.capacity),
                        drain: c.drain(&n.spec.name).cloned(),
                        pressure: c.node_pressure(&n.spec.name).cloned(),
                    })
                    .collect::<Vec<_>>(),
            )),
            ControlQuery::Feed {
                after_event,
                after_decision,
                limit,
            } => json(serde_json::to_value(Feed {
                events: c.events_after(*after_event, *limit),
                decisions: c.decisions_after(*after_decision, *limit),
                scanned: None,
            })),
            ControlQuery::Audit { filter } => {
                json(serde_json::to_value(c.audit_page(filter, None)))
            }
            ControlQuery::Access => {
                let (bindings, tokens) = c.access_view();
                json(serde_json::to_value(AccessView { bindings, tokens }))
            }
            ControlQuery::Authorize { .. } => Ok(Value::Null),
            ControlQuery::As { actor, now, read } => {
                super::access::answer_as(self, actor, *now, read)
            }
            ControlQuery::Tenants => json(serde_json::to_value(
                c.tenants()
                    .into_iter()
                    .map(|(t, usage)| TenantView {
                        tenant: t.clone(),
                        usage,
                    })
                    .collect::<Vec<_>>(),
            )),
            ControlQuery::Policies => json(serde_json::to_value(c.policies().collect::<Vec<_>>())),
            ControlQuery::Configs { tenant } => json(serde_json::to_value(
                c.tenant_objects().configs(Some(tenant)),
            )),
            ControlQuery::Secrets { tenant } => json(serde_json::to_value(
                c.tenant_objects().secrets(Some(tenant)),
            )),
            ControlQuery::Policy { name } => {
                let versions = c.policy_versions(name).map(<[_]>::to_vec);
                let policy = c.policies().find(|p| &p.name == name).cloned();
                if policy.is_none() && versions.is_none() {
                    return Err(
                        daros_coordinator::CoordinatorError::UnknownPolicy(name.clone()).into(),
                    );
                }
                json(serde_json::to_value(PolicyView {
                    policy,
                    versions: versions.unwrap_or_default(),
                }))
            }
            ControlQuery::Pools => json(serde_json::to_value(
                c.cluster()
                    .pools()
                    .values()
                    .map(|p| PoolView {
                        pool: p.spec.clone(),
                        nodes: p
                            .members
                            .iter()
                            .map(|&i| c.cluster().name(i).to_string())
                            .collect(),
                        capacity: p.cap,
                    })
                    .collect::<Vec<_>>(),
            )),
        }
    }
}

/// The command's kind in timings and metrics.
fn command_kind(c: &ControlCommand) -> &'static str {
    match c {
        ControlCommand::Coordinator { command } => command.name(),
        ControlCommand::Report { .. } => "Report",
        ControlCommand::Reports { .. } => "Reports",
        ControlCommand::Inventory { .. } => "Inventory",
    }
}

impl ReplicatedState for CoordinatorState {
    type Command = Stamped;
    type Response = Result<Outcome, Failure>;
    type Query = ControlQuery;
    type QueryResponse = Result<Value, Failure>;

    fn apply(&mut self, cmd: Stamped, at: LogPosition) -> Self::Response {
        if let Some(t) = cmd.leader_term
            && t != at.term
        {
            self.applied.send_replace(at);
            return Err(Failure {
                kind: FailureKind::Conflict,
                message: format!(
                    "refused: a decision of the leader of term {t} committed in term {}; \
                     the leader that made it no longer leads",
                    at.term
                ),
            });
        }
        let started = std::time::Instant::now();
        let r = self.run(&cmd, at.index);
        self.timings
            .applied(command_kind(&cmd.command), started.elapsed());
        // Only commands that changed the state count: a refused command
        // changes nothing, and a dropped report did not reach it.
        if matches!(r, Ok(Some(_))) {
            self.changes += 1;
        }
        self.applied.send_replace(at);
        r.map(Option::unwrap_or_default)
    }

    fn query(&self, q: &ControlQuery) -> Self::QueryResponse {
        self.answer(q)
    }

    fn unchanged_by(&self, cmd: &Stamped) -> Option<Self::Response> {
        if !changes_nothing(&self.coord, cmd) {
            return None;
        }
        self.timings.unchanged(command_kind(&cmd.command));
        Some(Ok(Outcome::default()))
    }

    fn admit_command(cmd: Stamped, peer: &daros_gossip::PeerIdentity) -> Result<Stamped, String> {
        super::access::admit_command(cmd, peer)
    }

    fn admit_query(
        q: ControlQuery,
        peer: &daros_gossip::PeerIdentity,
    ) -> Result<ControlQuery, String> {
        super::access::admit_query(q, peer)
    }

    fn snapshot(&self) -> Result<Vec<u8>, StateError> {
        let out = write_snapshot(self.changes, &self.coord)?;
        self.timings.snapshot(out.len());
        Ok(out)
    }

    /// A copy of the coordinator (a clone takes a fraction of serializing it),
    /// serialized after the state's lock is released.
    fn snapshot_job(&self) -> SnapshotJob {
        let (coord, changes, timings) = (
            self.coord.clone(),
            self.changes,
            std::sync::Arc::clone(&self.timings),
        );
        Box::new(move || {
            let out = write_snapshot(changes, &coord)?;
            timings.snapshot(out.len());
            Ok(out)
        })
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateError> {
        if snapshot.first() == Some(&b'[') {
            return self.restore_journal(snapshot);
        }
        let s: Snapshot<daros_coordinator::Coordinator> = ciborium::from_reader(snapshot)
            .map_err(|e| StateError(format!("reading the snapshot: {e}")))?;
        if s.format != SNAPSHOT_FORMAT {
            return Err(StateError(format!(
                "snapshot format {} is not {SNAPSHOT_FORMAT}: written by another darosd version",
                s.format
            )));
        }
        self.coord = s.coordinator;
        self.changes = s.changes;
        Ok(())
    }
}

impl CoordinatorState {
    /// A snapshot of format 1: the JSON journal, replayed.
    fn restore_journal(&mut self, snapshot: &[u8]) -> Result<(), StateError> {
        let journal: Vec<Stamped> =
            serde_json::from_slice(snapshot).map_err(|e| StateError(e.to_string()))?;
        let mut coord = daros_coordinator::Coordinator::new();
        for s in &journal {
            execute(&mut coord, s, 0)
                .map_err(|e| StateError(format!("replaying the journal: {e}")))?;
        }
        self.coord = coord;
        self.changes = journal.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::ObservedState;
    use daros_coordinator::state::desired::DesiredStart;

    const SHOP: &str = include_str!("../../../examples/shop.yaml");

    /// The shop applied (and started) at t=1000.
    fn shop_command() -> Stamped {
        let documents = daros_coordinator::spec::parse(SHOP, daros_coordinator::Format::Yaml)
            .expect("shop.yaml parses");
        Stamped {
            at: Timestamp(1_000),
            leader_term: None,
            actor: None,
            command: ControlCommand::Coordinator {
                command: Command::Apply {
                    documents,
                    start: true,
                },
            },
        }
    }

    /// Node `n1` (8 CPUs, process runtime) registering at t=500.
    fn register_n1_command() -> Stamped {
        let node: daros_coordinator::ExecutionNode = serde_json::from_value(serde_json::json!({
            "name": "n1", "capacity": {"cpu": "8", "memory": "16Gi"}, "runtimes": ["process"]
        }))
        .unwrap();
        Stamped {
            at: Timestamp(500),
            leader_term: None,
            actor: None,
            command: ControlCommand::Coordinator {
                command: Command::RegisterNode { node },
            },
        }
    }

    fn apply_shop(s: &mut CoordinatorState, index: u64) -> Result<Outcome, Failure> {
        s.apply(shop_command(), LogPosition { term: 1, index })
    }

    /// Applies a coordinator tick at t=3000, index 3.
    fn tick_at_3s(s: &mut CoordinatorState) {
        tick_at(s, 3, 3_000);
    }

    /// Applies the registration of node `n1` at index 1.
    fn register_n1(s: &mut CoordinatorState) {
        s.apply(register_n1_command(), LogPosition { term: 1, index: 1 })
            .unwrap();
    }

    #[test]
    fn snapshot_restore_reaches_the_same_state() {
        let (mut a, rx) = CoordinatorState::new();
        register_n1(&mut a);
        apply_shop(&mut a, 2).unwrap();
        assert_eq!(rx.borrow().index, 2);
        let snap = a.snapshot().unwrap();
        let (mut b, _) = CoordinatorState::new();
        b.restore(&snap).unwrap();
        let q = ControlQuery::Describe {
            app: AppKey::new("shop-team", "shop"),
            now: Timestamp(2_000),
        };
        assert_eq!(a.query(&q).unwrap(), b.query(&q).unwrap());
        assert_eq!(a.desired_work(), b.desired_work());
        assert!(
            !a.desired_work()["n1"].jobs.is_empty() || !a.desired_work()["n1"].instances.is_empty()
        );
        // The restored state is the same state: it snapshots to the same bytes,
        // and goes on the same way.
        assert_eq!(b.snapshot().unwrap(), snap);
        assert_eq!(b.changes(), a.changes());
        let next = |s: &mut CoordinatorState| {
            tick_at_3s(s);
            s.snapshot().unwrap()
        };
        assert_eq!(next(&mut a), next(&mut b));
    }

    /// A snapshot taken in two steps (a copy under the lock, serialized after)
    /// is the snapshot of the moment of the copy: the same bytes, and a write
    /// applied between the copy and the serialization is not in it.
    #[test]
    fn a_snapshot_in_two_steps_is_the_state_at_the_copy() {
        let (mut a, _rx) = CoordinatorState::new();
        register_n1(&mut a);
        apply_shop(&mut a, 2).unwrap();
        let whole = a.snapshot().unwrap();
        let job = a.snapshot_job();
        tick_at_3s(&mut a);
        assert_eq!(job().unwrap(), whole);
        assert_ne!(a.snapshot().unwrap(), whole, "the tick changed the state");
    }

    /// A data dir written by an earlier darosd holds a JSON journal: it is
    /// replayed into the same state.
    #[test]
    fn a_journal_snapshot_of_format_1_is_replayed() {
        let (mut a, _) = CoordinatorState::new();
        register_n1(&mut a);
        apply_shop(&mut a, 2).unwrap();
        let journal = vec![register_n1_command(), shop_command()];
        let (mut b, _) = CoordinatorState::new();
        b.restore(&serde_json::to_vec(&journal).unwrap()).unwrap();
        assert_eq!(b.snapshot().unwrap(), a.snapshot().unwrap());
        let e = b.restore(b"\xa1\x00").unwrap_err();
        assert!(e.to_string().contains("reading the snapshot"), "{e}");
    }

    fn report(s: &mut CoordinatorState, index: u64, d: &DesiredStart, state: ObservedState) {
        s.apply(
            Stamped {
                at: Timestamp(1_000 + index),
                leader_term: None,
                actor: None,
                command: ControlCommand::Report {
                    node: "n1".into(),
                    report: NodeReport::Instance {
                        instance: d.instance.clone(),
                        placement: d.placement,
                        attempt: d.attempt,
                        state,
                    },
                },
            },
            LogPosition { term: 1, index },
        )
        .unwrap();
    }

    /// The leader's copy of the work, patched commit by commit, stays what
    /// reading every node's work afresh gives, and names the nodes changed.
    #[test]
    fn a_patched_copy_of_the_work_is_the_work() {
        use super::super::dispatch_work::WorkCopy;
        use std::collections::BTreeSet;
        let (mut s, _) = CoordinatorState::new();
        register_n1(&mut s);
        let at = |index| LogPosition { term: 1, index };
        let (cursor, update) = s.desired_work_since(None);
        let WorkUpdate::All(all) = update else {
            panic!("a first read reads every node");
        };
        let mut copy = WorkCopy::new(at(1), cursor, all);
        let matches = |copy: &WorkCopy, s: &CoordinatorState| {
            let patched: BTreeMap<String, DesiredWork> = copy
                .nodes()
                .iter()
                .map(|(n, r)| (n.clone(), (*r.work).clone()))
                .collect();
            patched == s.desired_work()
        };
        // Reports change only applications: only their nodes are read.
        let patch = |copy: &mut WorkCopy, s: &CoordinatorState, index| {
            let (cursor, update) = s.desired_work_since(Some(copy.cursor()));
            assert!(matches!(update, WorkUpdate::Nodes(_)), "{update:?}");
            copy.patch(at(index), cursor, update)
        };
        // The shop brings its tenant: every node's work may change.
        apply_shop(&mut s, 2).unwrap();
        let (cursor, update) = s.desired_work_since(Some(copy.cursor()));
        assert!(matches!(update, WorkUpdate::All(_)));
        copy.patch(at(2), cursor, update);
        assert!(matches(&copy, &s));

        s.apply(init_job_done(&s), at(3)).unwrap();
        assert_eq!(patch(&mut copy, &s, 3), BTreeSet::from(["n1".to_string()]));
        assert!(matches(&copy, &s));
        let web = desired(&s, "web").expect("web desired");
        report(&mut s, 4, &web, ObservedState::Ready);
        let _ = patch(&mut copy, &s, 4);
        let worker = desired(&s, "worker").expect("worker desired");
        report(&mut s, 5, &worker, ObservedState::Ready);
        let _ = patch(&mut copy, &s, 5);
        assert!(matches(&copy, &s));

        // A tick with nothing due: the same revision.
        let before = copy.nodes()["n1"].clone();
        tick_at(&mut s, 6, 1_100);
        assert!(patch(&mut copy, &s, 6).is_empty());
        assert_eq!(copy.nodes()["n1"], before);

        // A failure asks a restart: a new attempt, a new revision.
        let failed = ObservedState::Failed {
            failure: daros_coordinator::model::failure::Failure::Application {
                check: None,
                detail: "exited 1".into(),
            },
        };
        report(&mut s, 7, &worker, failed);
        let _ = patch(&mut copy, &s, 7);
        tick_at(&mut s, 8, 60_000);
        let _ = patch(&mut copy, &s, 8);
        assert!(matches(&copy, &s));
        assert_ne!(copy.nodes()["n1"], before, "{:?}", s.desired_work());
    }

    /// n1's report that the shop's first init job exited 0 (at t=1003).
    fn init_job_done(s: &CoordinatorState) -> Stamped {
        let job = s.desired_work()["n1"].jobs[0].clone();
        Stamped {
            at: Timestamp(1_003),
            leader_term: None,
            actor: None,
            command: ControlCommand::Report {
                node: "n1".into(),
                report: NodeReport::InitJob {
                    job: job.job,
                    run: job.run,
                    attempt: 1,
                    state: ObservedState::Exited { code: 0 },
                },
            },
        }
    }

    fn tick_at(s: &mut CoordinatorState, index: u64, now: u64) {
        let tick = Stamped {
            at: Timestamp(now),
            leader_term: None,
            actor: None,
            command: ControlCommand::Coordinator {
                command: Command::Tick,
            },
        };
        s.apply(tick, LogPosition { term: 1, index }).unwrap();
    }

    fn desired(s: &CoordinatorState, workload: &str) -> Option<DesiredStart> {
        s.desired_work()["n1"]
            .instances
            .iter()
            .find(|i| i.instance.workload == workload)
            .cloned()
    }

    /// The shop admitted with `n1` registered, and `n1`'s report that the
    /// shop's init job exited 0 (not yet applied).
    fn shop_on_n1() -> (CoordinatorState, NodeReport) {
        let (mut s, _) = CoordinatorState::new();
        register_n1(&mut s);
        apply_shop(&mut s, 2).unwrap();
        let job = s.desired_work()["n1"].jobs[0].clone();
        let exited = NodeReport::InitJob {
            job: job.job.clone(),
            run: job.run,
            attempt: job.attempt,
            state: ObservedState::Exited { code: 0 },
        };
        (s, exited)
    }

    /// A node's batch of reports applies each one as a single report would:
    /// one for another node's placement or a stale one is dropped, the others
    /// still land (issue 18: an agent sends what gathered during its last write).
    #[test]
    fn a_batch_of_reports_applies_each_and_drops_only_the_bad_ones() {
        let (mut s, exited) = shop_on_n1();
        let batch = |s: &mut CoordinatorState, index: u64, reports: Vec<NodeReport>| {
            s.apply(
                Stamped {
                    at: Timestamp(1_000 + index),
                    leader_term: None,
                    actor: None,
                    command: ControlCommand::Reports {
                        node: "n1".into(),
                        reports,
                    },
                },
                LogPosition { term: 1, index },
            )
            .unwrap()
        };
        batch(&mut s, 3, vec![exited]);
        let web = desired(&s, "web").unwrap();
        let ready = |d: &DesiredStart, placement: u64, attempt: u32| NodeReport::Instance {
            instance: d.instance.clone(),
            placement,
            attempt,
            state: ObservedState::Ready,
        };
        batch(
            &mut s,
            4,
            vec![
                ready(&web, web.placement + 1000, web.attempt),
                ready(&web, web.placement, web.attempt),
            ],
        );
        // worker starts once web is ready: web's good report landed.
        let worker = desired(&s, "worker").expect("worker desired after web is ready");
        let out = batch(
            &mut s,
            5,
            vec![
                ready(&worker, worker.placement, worker.attempt + 5),
                ready(&worker, worker.placement, worker.attempt),
            ],
        );
        assert!(
            out != Outcome::default(),
            "the good reports changed the state"
        );
        let apps = s
            .query(&ControlQuery::Apps {
                now: Timestamp(2_000),
            })
            .unwrap();
        assert_eq!(apps[0]["phase"], "Running", "{apps}");
        // The same batch again changes nothing (every report repeated).
        let again = batch(
            &mut s,
            6,
            vec![
                ready(&web, web.placement, web.attempt),
                ready(&worker, worker.placement, worker.attempt),
            ],
        );
        assert_eq!(again, Outcome::default());
    }

    /// A node's write the state can tell changes nothing (every report
    /// repeated, nothing live missing from an inventory) is answered without
    /// a log entry; one that changes something is not, and applying it does
    /// change the state (issue 18: repeated inventories made most of the log).
    #[test]
    fn only_writes_that_change_nothing_skip_the_log() {
        let (mut s, exited) = shop_on_n1();
        let node = |command: ControlCommand| Stamped {
            at: Timestamp(1_000),
            leader_term: None,
            actor: None,
            command,
        };
        let inventory = |reports: Vec<NodeReport>| {
            node(ControlCommand::Inventory {
                node: "n1".into(),
                reports,
            })
        };
        let first = inventory(vec![exited.clone()]);
        assert!(s.unchanged_by(&first).is_none(), "a new report is written");
        s.apply(first.clone(), LogPosition { term: 1, index: 3 })
            .unwrap();
        let changes = s.changes();
        assert_eq!(
            s.unchanged_by(&first).map(|r| r.unwrap()),
            Some(Outcome::default()),
            "the same inventory again changes nothing"
        );
        // Applied anyway, it would indeed change nothing.
        s.apply(first.clone(), LogPosition { term: 1, index: 4 })
            .unwrap();
        assert_eq!(s.changes(), changes);
        // web reported ready: live on n1.
        let web = desired(&s, "web").unwrap();
        let ready = NodeReport::Instance {
            instance: web.instance.clone(),
            placement: web.placement,
            attempt: web.attempt,
            state: ObservedState::Ready,
        };
        let report = node(ControlCommand::Report {
            node: "n1".into(),
            report: ready.clone(),
        });
        assert!(s.unchanged_by(&report).is_none());
        s.apply(report.clone(), LogPosition { term: 1, index: 5 })
            .unwrap();
        assert!(s.unchanged_by(&report).is_some(), "a repeated report");
        // Another node may not speak for n1's instance: nothing it says changes it.
        let other = node(ControlCommand::Reports {
            node: "n2".into(),
            reports: vec![NodeReport::Instance {
                instance: web.instance.clone(),
                placement: web.placement,
                attempt: web.attempt,
                state: ObservedState::Exited { code: 1 },
            }],
        });
        assert!(s.unchanged_by(&other).is_some());
        // An inventory without web, which n1 reported live, fails it: written.
        let without_web = inventory(vec![exited.clone()]);
        assert!(s.unchanged_by(&without_web).is_none());
        let with_web = inventory(vec![exited, ready]);
        assert!(s.unchanged_by(&with_web).is_some());
        s.apply(without_web, LogPosition { term: 1, index: 6 })
            .unwrap();
        assert!(s.changes() > changes + 1, "web failed: {}", s.changes());
        // Operators' writes are always written.
        assert!(s.unchanged_by(&shop_command()).is_none());
    }

    /// Issue 22: after a spec change the old version's "stopped" report reached
    /// the state machine and was dropped as stale (the replica's version had
    /// moved on), so the new version stayed pending forever.
    #[test]
    fn an_update_replaces_the_running_version() {
        let (mut s, _) = CoordinatorState::new();
        register_n1(&mut s);
        apply_shop(&mut s, 2).unwrap();
        s.apply(init_job_done(&s), LogPosition { term: 1, index: 3 })
            .unwrap();
        let web1 = desired(&s, "web").expect("web desired");
        report(&mut s, 4, &web1, ObservedState::Ready);
        let worker = desired(&s, "worker").expect("worker desired");
        report(&mut s, 5, &worker, ObservedState::Ready);

        // Only web's env changes.
        let changed = SHOP.replace("env: {SHOP_ROLE: web}", "env: {SHOP_ROLE: web2}");
        let documents = daros_coordinator::spec::parse(&changed, daros_coordinator::Format::Yaml)
            .expect("parses");
        s.apply(
            Stamped {
                at: Timestamp(1_006),
                leader_term: None,
                actor: None,
                command: ControlCommand::Coordinator {
                    command: Command::Apply {
                        documents,
                        start: true,
                    },
                },
            },
            LogPosition { term: 1, index: 6 },
        )
        .unwrap();
        assert!(desired(&s, "web").is_none(), "old web stops first");
        // The node tears v1 down and says so.
        report(&mut s, 7, &web1, ObservedState::Stopped);
        let job2 = s.desired_work()["n1"].jobs.clone();
        for (i, j) in job2.iter().enumerate() {
            s.apply(
                Stamped {
                    at: Timestamp(1_008),
                    leader_term: None,
                    actor: None,
                    command: ControlCommand::Report {
                        node: "n1".into(),
                        report: NodeReport::InitJob {
                            job: j.job.clone(),
                            run: j.run,
                            attempt: j.attempt,
                            state: ObservedState::Exited { code: 0 },
                        },
                    },
                },
                LogPosition {
                    term: 1,
                    index: 8 + i as u64,
                },
            )
            .unwrap();
        }
        let web2 = desired(&s, "web").expect("v2 of web starts");
        assert_eq!(web2.instance.version, 2);
        assert_ne!(web2.placement, web1.placement);
    }

    #[test]
    fn repeated_and_stale_reports_are_dropped() {
        let (mut s, _) = CoordinatorState::new();
        register_n1(&mut s);
        apply_shop(&mut s, 2).unwrap();
        let job = s.desired_work()["n1"].jobs[0].clone();
        let report = |attempt, at| Stamped {
            at: Timestamp(at),
            leader_term: None,
            actor: None,
            command: ControlCommand::Report {
                node: "n1".into(),
                report: NodeReport::InitJob {
                    job: job.job.clone(),
                    run: job.run,
                    attempt,
                    state: daros_coordinator::ObservedState::Running,
                },
            },
        };
        let before = s.changes();
        s.apply(report(1, 3_000), LogPosition { term: 1, index: 3 })
            .unwrap();
        assert_eq!(s.changes(), before + 1, "a new state is recorded");
        s.apply(report(1, 3_100), LogPosition { term: 1, index: 4 })
            .unwrap();
        assert_eq!(s.changes(), before + 1, "a repeated report is dropped");
        s.apply(report(0, 3_200), LogPosition { term: 1, index: 5 })
            .unwrap();
        assert_eq!(s.changes(), before + 1, "a stale attempt is dropped");
    }

    #[test]
    fn a_node_reports_only_what_runs_on_it() {
        let (mut s, _) = CoordinatorState::new();
        register_n1(&mut s);
        apply_shop(&mut s, 2).unwrap();
        let job = s.desired_work()["n1"].jobs[0].clone();
        let report = |node: &str| Stamped {
            at: Timestamp(3_000),
            leader_term: None,
            actor: None,
            command: ControlCommand::Report {
                node: node.into(),
                report: NodeReport::InitJob {
                    job: job.job.clone(),
                    run: job.run,
                    attempt: 1,
                    state: daros_coordinator::ObservedState::Exited { code: 1 },
                },
            },
        };
        let before = s.changes();
        s.apply(report("n2"), LogPosition { term: 1, index: 3 })
            .unwrap();
        assert_eq!(s.changes(), before, "n2 does not run it: dropped");
        s.apply(report("n1"), LogPosition { term: 1, index: 4 })
            .unwrap();
        assert_eq!(s.changes(), before + 1, "its own node's report counts");
    }
}
