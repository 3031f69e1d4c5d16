//! The coordinator state: tenants, policies, pools, nodes, applications with
//! their versions, events and decisions. Changed only through
//! [`Coordinator::apply`] with a [`Command`] and the time, so that replicas
//! fed the same commands reach the same state; queries take `&self`.

pub mod access;
mod app_index;
mod apps;
mod arbitrate;
pub mod audit;
pub mod availability;
pub mod convergence;
mod degradation;
pub mod desired;
pub mod drain;
pub mod entry;
mod headline;
pub mod history;
mod liveness;
pub mod metrics;
mod nodes;
pub mod objects;
mod policy_impact;
pub mod policy_versions;
pub mod pressure;
mod query;
pub mod rollout;
mod runtime;
pub mod work_changes;
pub mod workflow;

use crate::command::{Command, NodeCondition, OperationRequest, Outcome};
use crate::decision::Decision;
use crate::error::CoordinatorError;
use crate::field::FieldError;
use crate::lifecycle::{Input, LifecycleEvent, Operation, Phase, transition};
use crate::model::policy::{Policy, PolicyScope};
use crate::model::pool::DEFAULT_POOL;
use crate::model::time::Timestamp;
use crate::placement::Cluster;
use crate::policy::PolicyEvaluation;
use crate::spec::{Document, validate};
use entry::TenantEntry;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub use query::{AppDescription, AppSummary, InstanceView, JobView};

/// Tuning of the placement search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorConfig {
    /// Feasible candidates scored per replica (and kept in the record).
    pub top_k: usize,
    /// Nodes examined after the first feasible one before settling.
    pub patience: usize,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            top_k: 3,
            patience: 32,
        }
    }
}

/// The coordinator.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Coordinator {
    config: CoordinatorConfig,
    cluster: Cluster,
    tenants: BTreeMap<String, TenantEntry>,
    next_tenant_id: u32,
    policies: BTreeMap<String, Policy>,
    apps: app_index::Apps,
    app_ids: BTreeMap<u32, crate::model::names::AppKey>,
    next_app_id: u32,
    events: history::Log<LifecycleEvent>,
    decisions: history::Log<Decision>,
    evaluations: history::Log<PolicyEvaluation>,
    /// How much of that history is kept.
    #[serde(default)]
    retention: history::Retention,
    admitted_seq: u64,
    /// Bumped whenever capacity is freed or added, so that degraded
    /// applications try to get their evicted replicas back once per change.
    capacity_epoch: u64,
    /// Identities given to init-job run series so far.
    job_runs: u64,
    /// Every policy's versions, by name.
    #[serde(default)]
    policy_versions: BTreeMap<String, Vec<policy_versions::PolicyVersion>>,
    /// Nodes as operators' `Node` documents declare them, by name.
    #[serde(default)]
    declared: BTreeMap<String, crate::model::node::ExecutionNode>,
    /// Nodes as their agents registered them (what they measured), by name.
    #[serde(default)]
    measured: BTreeMap<String, crate::model::node::ExecutionNode>,
    /// Drains asked by operators, by node name.
    #[serde(default)]
    drains: BTreeMap<String, drain::Drain>,
    /// Nodes under resource pressure, by name.
    #[serde(default)]
    pressure: BTreeMap<String, pressure::NodePressure>,
    /// Control-plane counters and latency histograms.
    #[serde(default)]
    counters: metrics::Counters,
    /// Role bindings and tokens.
    #[serde(default)]
    access: crate::access::AccessState,
    /// Who changed what, and who was refused.
    #[serde(default)]
    audit: history::Log<audit::AuditRecord>,
    /// The tenants' Configs and Secrets.
    #[serde(default)]
    objects: objects::TenantObjects,
    /// Which nodes' desired work each command may have changed.
    #[serde(skip)]
    work: work_changes::WorkChanges,
}

impl Coordinator {
    /// An empty coordinator with the default configuration.
    pub fn new() -> Self {
        Self::with_config(CoordinatorConfig::default())
    }

    /// An empty coordinator.
    pub fn with_config(config: CoordinatorConfig) -> Self {
        Self {
            config,
            ..Default::default()
        }
    }

    /// Applies one command at time `now`. On error nothing changed.
    pub fn apply(&mut self, cmd: Command, now: Timestamp) -> Result<Outcome, CoordinatorError> {
        let every_node = !work_changes::changes_only_applications(&cmd);
        // Debug builds check the record of changes on small states (every
        // test scenario): what a reader patches in equals reading afresh.
        #[cfg(debug_assertions)]
        let before = (self.apps.len() <= 32).then(|| (self.desired_work(), self.work.cursor()));
        let r = self.execute(cmd, now);
        self.work.next(every_node);
        let work = &mut self.work;
        self.apps.settle(|node| work.touched(node));
        #[cfg(debug_assertions)]
        {
            assert!(
                before.is_none() || self.apps.index_matches_instances(),
                "the index of runs by node drifted from the runs"
            );
            if let Some((mut seen, cursor)) = before
                && let (_, work_changes::WorkUpdate::Nodes(nodes)) =
                    self.desired_work_since(Some(cursor))
            {
                for (n, w) in nodes {
                    match w {
                        Some(w) => seen.insert(n, w),
                        None => seen.remove(&n),
                    };
                }
                assert_eq!(
                    seen,
                    self.desired_work(),
                    "a node's work changed unrecorded"
                );
            }
        }
        r
    }

    fn execute(&mut self, cmd: Command, now: Timestamp) -> Result<Outcome, CoordinatorError> {
        let mut out = Outcome::default();
        match cmd {
            Command::Apply { documents, start } => {
                self.cmd_apply(documents, start, now, &mut out)?
            }
            Command::Operate { app, operation } => {
                self.cmd_operate(&app, operation, now, &mut out)?
            }
            Command::Rollback { app, version } => {
                self.cmd_rollback(&app, version, now, &mut out)?
            }
            Command::RegisterNode { node } => {
                // A node registers itself even when it can run nothing (no
                // runtime executor): it is listed, and no workload fits it.
                let errors = validate::node(&node)
                    .into_iter()
                    .filter(|e| !e.path.ends_with("runtimes"))
                    .collect();
                check(errors, "Node", &node.name)?;
                self.register_node(node);
            }
            Command::DeleteNode { name } => self.cmd_delete_node(&name)?,
            Command::DrainNode { name } => self.cmd_drain(&name, now, &mut out)?,
            Command::NodePressure { node, pressure } => {
                self.cmd_node_pressure(&node, pressure, now, &mut out)?
            }
            Command::SetNodeCondition { node, condition } => {
                self.cmd_node_condition(&node, condition, now, &mut out)?
            }
            Command::DeleteTenant { name } => self.cmd_delete_tenant(&name)?,
            Command::DeletePolicy { name } => {
                let gone = self
                    .policies
                    .remove(&name)
                    .ok_or_else(|| CoordinatorError::UnknownPolicy(name.clone()))?;
                self.record_policy_version(&name, None, None, now);
                self.policy_impact(&gone, now, &mut out);
            }
            Command::RollbackPolicy { name, version } => {
                self.cmd_rollback_policy(&name, version, now, &mut out)?
            }
            Command::DeletePool { name } => self.cmd_delete_pool(&name)?,
            Command::DeleteConfig { tenant, name } => {
                self.cmd_delete_object(false, &tenant, &name)?
            }
            Command::DeleteSecret { tenant, name } => {
                self.cmd_delete_object(true, &tenant, &name)?
            }
            Command::ReportWorkload {
                instance,
                placement,
                state,
            } => self.cmd_report_workload(instance, placement, state, now, &mut out),
            Command::ReportWorkloads { reports } => {
                self.cmd_report_workloads(reports, now, &mut out)
            }
            Command::ReportInitJob { job, run, state } => {
                self.cmd_report_job(&job, run, state, now, &mut out)?
            }
            Command::NodeInventory { node, placements } => {
                self.cmd_inventory(&node, &placements, now, &mut out)
            }
            Command::Tick => self.cmd_tick(now, &mut out),
            Command::SetRetention { retention } => {
                let errors = retention.validate();
                if !errors.is_empty() {
                    return Err(CoordinatorError::Invalid {
                        kind: "Retention".into(),
                        name: "cluster".into(),
                        errors,
                    });
                }
                self.retention = retention;
            }
            Command::Bind { binding } => self.cmd_bind(binding)?,
            Command::Unbind { name } => self.cmd_unbind(&name)?,
            Command::IssueToken { token } => self.cmd_issue_token(token)?,
            Command::RevokeToken { id } => self.cmd_revoke_token(&id, now)?,
            // Only the audit record (written by `apply_as`).
            Command::Record { .. } => {}
            Command::Expect { app, version, then } => {
                let actual = self.apps.get(&app).map_or(0, |e| e.latest_version());
                if actual != version {
                    return Err(CoordinatorError::VersionConflict {
                        app,
                        expected: version,
                        actual,
                    });
                }
                return self.execute(*then, now);
            }
        }
        self.compact(&out);
        Ok(out)
    }

    fn cmd_apply(
        &mut self,
        docs: Vec<Document>,
        start: bool,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        // Validate everything first so that a bad document changes nothing.
        // Two documents for one object would silently become two versions.
        let mut seen: BTreeMap<(&str, String), usize> = BTreeMap::new();
        for (i, d) in docs.iter().enumerate() {
            if let Some(first) = seen.insert((d.kind(), d.name()), i) {
                return Err(CoordinatorError::Invalid {
                    kind: d.kind().into(),
                    name: d.name(),
                    errors: vec![FieldError::new(
                        "metadata.name",
                        format!(
                            "documents {} and {} both define {} {}; apply one of them",
                            first + 1,
                            i + 1,
                            d.kind(),
                            d.name()
                        ),
                    )],
                });
            }
        }
        let new_tenants: BTreeSet<&str> = docs
            .iter()
            .filter_map(|d| match d {
                Document::Tenant(t) => Some(t.name.as_str()),
                _ => None,
            })
            .collect();
        for d in &docs {
            match d {
                Document::Application(a) => {
                    check(
                        validate::application(a),
                        "Application",
                        &a.key().to_string(),
                    )?;
                    if !self.tenants.contains_key(&a.tenant)
                        && !new_tenants.contains(a.tenant.as_str())
                    {
                        return Err(CoordinatorError::UnknownTenant {
                            app: a.key(),
                            tenant: a.tenant.clone(),
                        });
                    }
                    check(
                        self.app_reference_errors(a, &docs),
                        "Application",
                        &a.key().to_string(),
                    )?;
                    // A changed spec is an UpdateSpec: refuse it up front
                    // where the phase does not accept it.
                    if let Some(e) = self.apps.get(&a.key())
                        && e.phase != Phase::Rejected
                        && e.spec() != a
                    {
                        transition(e.phase, Input::Op(Operation::UpdateSpec)).map_err(
                            |source| CoordinatorError::Illegal {
                                app: a.key(),
                                source,
                            },
                        )?;
                    }
                }
                Document::Tenant(t) => check(validate::tenant(t), "Tenant", &t.name)?,
                Document::Policy(p) => {
                    let mut errors = policy_errors(p);
                    errors.extend(self.policy_conflicts(p));
                    check(errors, "Policy", &p.name)?
                }
                Document::ResourcePool(p) => check(validate::pool(p), "ResourcePool", &p.name)?,
                Document::Node(n) => {
                    let mut errors = validate::node(n);
                    errors.extend(self.node_doc_errors(n));
                    check(errors, "Node", &n.name)?
                }
                Document::Config(c) => {
                    let mut errors = validate::config(c);
                    errors.extend(self.object_doc_errors(d, &new_tenants));
                    check(errors, "Config", &d.name())?
                }
                Document::Secret(s) => {
                    let mut errors = validate::secret(s);
                    errors.extend(self.object_doc_errors(d, &new_tenants));
                    check(errors, "Secret", &d.name())?
                }
            }
        }
        let rank = |d: &Document| match d {
            Document::Node(_) => 0,
            Document::ResourcePool(_) => 1,
            Document::Tenant(_) => 2,
            Document::Policy(_) => 3,
            Document::Config(_) | Document::Secret(_) => 4,
            Document::Application(_) => 5,
        };
        let mut docs = docs;
        docs.sort_by_key(rank);
        let mut pending = Vec::new();
        for d in docs {
            match d {
                Document::Node(n) => self.declare_node(n),
                Document::ResourcePool(p) => {
                    self.cluster.set_pool(p);
                    self.capacity_epoch += 1;
                }
                Document::Tenant(t) => self.upsert_tenant(t),
                Document::Policy(p) => {
                    self.policies.insert(p.name.clone(), p.clone());
                    self.record_policy_version(&p.name.clone(), Some(p.clone()), None, now);
                    self.policy_impact(&p, now, out);
                }
                Document::Application(a) => self.apply_app(a, start, now, out, &mut pending)?,
                d @ (Document::Config(_) | Document::Secret(_)) => self.store_object(d),
            }
        }
        if !pending.is_empty() {
            self.arbitrate_round(pending, now, out);
        }
        Ok(())
    }

    fn upsert_tenant(&mut self, t: crate::model::tenant::Tenant) {
        match self.tenants.get_mut(&t.name) {
            Some(e) => e.spec = t,
            None => {
                let id = self.next_tenant_id;
                self.next_tenant_id += 1;
                self.tenants.insert(
                    t.name.clone(),
                    TenantEntry {
                        id,
                        spec: t,
                        usage: Default::default(),
                        pool_alloc: BTreeMap::new(),
                    },
                );
            }
        }
    }

    fn cmd_operate(
        &mut self,
        key: &crate::model::names::AppKey,
        op: OperationRequest,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        if !self.apps.contains_key(key) {
            return Err(CoordinatorError::UnknownApp(key.clone()));
        }
        match op {
            OperationRequest::Start => self.op_start(key, now, out),
            OperationRequest::Stop => self.op_stop(key, now, out),
            OperationRequest::Delete => self.op_delete(key, now, out),
            OperationRequest::Scale { workload, replicas } => {
                self.op_scale(key, &workload, replicas, now, out)
            }
            OperationRequest::Restore => self.op_restore(key, now, out),
            OperationRequest::Retry => self.op_retry(key, now, out),
            OperationRequest::Abort => self.op_abort(key, now, out),
            OperationRequest::Promote => self.op_promote(key, now, out),
            OperationRequest::Approve { step } => self.op_approve(key, &step, now, out),
            OperationRequest::Suspend => self.op_suspend(key, true, now, out),
            OperationRequest::Resume => self.op_suspend(key, false, now, out),
        }
    }

    fn cmd_delete_tenant(&mut self, name: &str) -> Result<(), CoordinatorError> {
        if !self.tenants.contains_key(name) {
            return Err(CoordinatorError::NoTenant(name.into()));
        }
        let mut users: Vec<String> = self
            .apps
            .keys()
            .filter(|k| k.tenant == name)
            .map(|k| format!("application {k}"))
            .collect();
        if self.objects.tenant_has_any(name) {
            users.push("its Configs and Secrets (delete them first)".into());
        }
        if !users.is_empty() {
            return Err(CoordinatorError::InUse {
                what: format!("tenant {name}"),
                by: users,
            });
        }
        self.tenants.remove(name);
        Ok(())
    }

    fn cmd_delete_pool(&mut self, name: &str) -> Result<(), CoordinatorError> {
        if self.cluster.pool(name).is_none() {
            return Err(CoordinatorError::UnknownPool(name.into()));
        }
        let mut users: Vec<String> = self
            .apps
            .values()
            .filter(|e| e.spec().pool() == name && e.phase.holds_quota())
            .map(|e| format!("application {}", e.key))
            .collect();
        users.extend(
            self.tenants
                .values()
                .filter(|t| t.spec.pools.iter().any(|p| p == name))
                .map(|t| format!("tenant {}", t.spec.name)),
        );
        if !users.is_empty() && name != DEFAULT_POOL {
            return Err(CoordinatorError::InUse {
                what: format!("pool {name}"),
                by: users,
            });
        }
        self.cluster.remove_pool(name);
        Ok(())
    }

    fn cmd_node_condition(
        &mut self,
        node: &str,
        condition: NodeCondition,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let idx = self
            .cluster
            .index_of(node)
            .ok_or_else(|| CoordinatorError::UnknownNode(node.into()))?;
        match condition {
            NodeCondition::Ready => self.node_back(idx, now, out),
            NodeCondition::Down => self.node_down(idx, now, out),
            NodeCondition::Uncordoned => {
                self.cluster.set_schedulable(idx, true);
                self.end_drain(node);
                self.capacity_epoch += 1;
            }
            NodeCondition::Cordoned => self.cluster.set_schedulable(idx, false),
        }
        Ok(())
    }

    /// The placement view of the cluster.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The drain of node `name`, when one was asked (until uncordoned).
    pub fn drain(&self, name: &str) -> Option<&drain::Drain> {
        self.drains.get(name)
    }

    /// Configuration.
    pub fn config(&self) -> CoordinatorConfig {
        self.config
    }
}

fn check(errors: Vec<FieldError>, kind: &str, name: &str) -> Result<(), CoordinatorError> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CoordinatorError::Invalid {
            kind: kind.into(),
            name: name.into(),
            errors,
        })
    }
}

fn policy_errors(p: &Policy) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(e) = crate::model::names::check_name("metadata.name", &p.name) {
        errs.push(e);
    }
    errs.extend(p.rules.validate("spec.rules"));
    match &p.scope {
        PolicyScope::Global => {}
        PolicyScope::Tenant { tenant } => {
            errs.extend(crate::model::names::check_name("spec.tenant", tenant));
        }
        PolicyScope::Application {
            tenant,
            application,
        } => {
            errs.extend(crate::model::names::check_name("spec.tenant", tenant));
            errs.extend(crate::model::names::check_name(
                "spec.application",
                application,
            ));
        }
    }
    errs.extend(p.rules.scope_errors(p.scope.level(), "spec.rules"));
    errs
}
