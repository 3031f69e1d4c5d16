//! Read-only queries: list, describe, explain, events, plans, usage.

use super::Coordinator;
use super::entry::Degradation;
use crate::admission::Charge;
use crate::decision::{Decision, DecisionId, Explanation, NamedCandidate, PlacementExplanation};
use crate::error::CoordinatorError;
use crate::lifecycle::{LifecycleEvent, Phase};
use crate::model::names::AppKey;
use crate::model::policy::Policy;
use crate::model::tenant::Tenant;
use crate::model::time::Timestamp;
use crate::placement::{RejectCounts, ResVec};
use crate::policy::{EffectivePolicy, PolicyEvaluation, Resolution};
use crate::reconcile::{Blocked, InitJobId, InstanceId, InstanceKey, ObservedState, Plan};
use crate::version::{AppVersion, VersionSummary};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One line of `get apps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppSummary {
    /// Application.
    pub app: AppKey,
    /// Phase.
    pub phase: Phase,
    /// Version in force.
    pub version: u32,
    /// Priority.
    pub priority: u32,
    /// Pool.
    pub pool: String,
    /// Instances placed.
    pub instances: u32,
    /// Instances ready.
    pub ready: u32,
    /// The most important current problem (OOM, failing starts, what waits),
    /// else the latest event's reason.
    pub reason: String,
}

/// An instance as shown by `describe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    /// Instance id.
    pub id: InstanceId,
    /// Node.
    pub node: Option<String>,
    /// Observed state.
    pub state: ObservedState,
    /// Since when.
    pub since: Timestamp,
    /// Restarts counted against the retry budget.
    pub restarts: u32,
    /// Why evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted: Option<String>,
    /// Version being replaced by this instance (rolling update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacing: Option<u32>,
    /// Its placement (a new one for every re-placement).
    pub placement: u64,
    /// The last failure seen since it was last ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Since when its node is Down (unreachable, not lost yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable_since: Option<Timestamp>,
}

/// An init job as shown by `describe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    /// Job id.
    pub id: InitJobId,
    /// Node.
    pub node: Option<String>,
    /// Observed state.
    pub state: ObservedState,
    /// Runs so far.
    pub attempts: u32,
}

/// `describe app X`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppDescription {
    /// Application.
    pub app: AppKey,
    /// Phase.
    pub phase: Phase,
    /// Version in force.
    pub version: u32,
    /// The versions kept.
    pub versions: Vec<VersionSummary>,
    /// What of its history was compacted away (retention).
    #[serde(default, skip_serializing_if = "super::history::Compacted::is_empty")]
    pub compacted: super::history::Compacted,
    /// Priority.
    pub priority: u32,
    /// Pool.
    pub pool: String,
    /// Why degraded.
    pub degradation: Option<Degradation>,
    /// The rollout under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::rollout::Rollout>,
    /// Its workflow's steps, in order, with their status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflow: Vec<WorkflowStepView>,
    /// The workflow is suspended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub workflow_suspended: bool,
    /// Quota held.
    pub charge: Charge,
    /// Requests placed.
    pub allocated: ResVec,
    /// Policy in force.
    pub effective: Option<EffectivePolicy>,
    /// Policies that took part.
    pub policies: Vec<String>,
    /// How the policy was resolved.
    pub resolutions: Vec<Resolution>,
    /// What the runtime enforces on each workload (security baseline).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security: Vec<(String, crate::model::security::SecurityContext)>,
    /// Instances.
    pub instances: Vec<InstanceView>,
    /// Init jobs.
    pub jobs: Vec<JobView>,
    /// What waits and why.
    pub blocked: Vec<Blocked>,
    /// Lifecycle events, oldest first.
    pub events: Vec<LifecycleEvent>,
    /// Decisions, oldest first.
    pub decisions: Vec<DecisionId>,
}

impl AppDescription {
    /// Human rendering (times in milliseconds since the epoch).
    pub fn render(&self) -> String {
        self.render_with(&|t| t.to_string())
    }

    /// Human rendering with times rendered by `time`.
    pub fn render_with(&self, time: crate::model::time::TimeFormat<'_>) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Application: {}", self.app);
        let _ = writeln!(s, "Phase:       {}", self.phase);
        if let Some(d) = &self.degradation {
            let _ = writeln!(s, "Degraded:    {}: {}", d.cause, d.reason);
        }
        let _ = writeln!(
            s,
            "Version:     {} (of {})",
            self.version,
            self.versions.last().map_or(self.version, |v| v.version)
        );
        if !self.compacted.is_empty() {
            let c = self.compacted;
            let _ = writeln!(
                s,
                "Compacted:   {} version(s), {} event(s), {} decision(s) older than those kept (retention)",
                c.versions, c.events, c.decisions
            );
        }
        if let Some(r) = &self.rollout {
            let _ = writeln!(
                s,
                "Rollout:     version {} to {}{}, since {}{}{}",
                r.from,
                r.to,
                if r.rollback {
                    " (automatic rollback)"
                } else {
                    ""
                },
                time(r.started),
                if r.promoted.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; canary promoted: {}",
                        r.promoted.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                },
                r.failed
                    .as_ref()
                    .map(|f| format!("; failed: {f}"))
                    .unwrap_or_default()
            );
        }
        if !self.workflow.is_empty() {
            let _ = writeln!(
                s,
                "Workflow:{}",
                if self.workflow_suspended {
                    " (suspended)"
                } else {
                    ""
                }
            );
            for w in &self.workflow {
                let indent = if w.group.is_some() { "    " } else { "  " };
                let _ = writeln!(
                    s,
                    "{indent}{:<16} {:<10} {:<15} {}",
                    w.name, w.kind, w.phase, w.message
                );
            }
        }
        let _ = writeln!(s, "Priority:    {}  Pool: {}", self.priority, self.pool);
        let _ = writeln!(
            s,
            "Quota held:  {} instance(s), {}",
            self.charge.workloads,
            self.charge.request.describe()
        );
        if !self.policies.is_empty() {
            let _ = writeln!(s, "Policies:    {}", self.policies.join(", "));
        }
        if !self.security.is_empty() {
            let _ = writeln!(s, "Security:");
            for (w, c) in &self.security {
                let _ = writeln!(s, "  {w:<12} {}", c.describe());
            }
        }
        if !self.instances.is_empty() {
            let _ = writeln!(s, "Instances:");
            for i in &self.instances {
                let _ = writeln!(
                    s,
                    "  {:<40} {:<14} {}{}{}",
                    i.id.to_string(),
                    i.node.as_deref().unwrap_or("-"),
                    i.state.describe(),
                    if i.restarts > 0 {
                        format!(", {} restart(s)", i.restarts)
                    } else {
                        String::new()
                    },
                    i.evicted
                        .as_ref()
                        .map(|e| format!(", evicted: {e}"))
                        .unwrap_or_default()
                );
            }
        }
        if !self.jobs.is_empty() {
            let _ = writeln!(s, "Init jobs:");
            for j in &self.jobs {
                let _ = writeln!(
                    s,
                    "  {:<40} {:<14} {} (runs: {})",
                    j.id.to_string(),
                    j.node.as_deref().unwrap_or("-"),
                    j.state.describe(),
                    j.attempts
                );
            }
        }
        if !self.blocked.is_empty() {
            let _ = writeln!(s, "Waiting:");
            for b in &self.blocked {
                let _ = writeln!(s, "  {}: {}", b.workload, b.reason);
            }
        }
        let _ = writeln!(s, "Events:");
        for e in &self.events {
            let _ = writeln!(s, "  {}", e.render(time));
        }
        if !self.decisions.is_empty() {
            let ids: Vec<String> = self.decisions.iter().map(|d| d.to_string()).collect();
            let _ = writeln!(s, "Decisions:   {}", ids.join(", "));
        }
        s
    }
}

impl Coordinator {
    /// Every application, by key, with its most important problem at `now`.
    pub fn list_apps(&self, now: Timestamp) -> Vec<AppSummary> {
        self.apps
            .values()
            .map(|e| {
                let spec = e.spec();
                let ready = e
                    .runtime
                    .instances
                    .values()
                    .filter(|i| matches!(i.observed, ObservedState::Ready | ObservedState::Running))
                    .count() as u32;
                AppSummary {
                    app: e.key.clone(),
                    phase: e.phase,
                    version: e.current,
                    priority: spec.spec.priority,
                    pool: spec.pool().to_string(),
                    instances: e.runtime.instances.len() as u32,
                    ready,
                    reason: self.headline(e, now),
                }
            })
            .collect()
    }

    /// Phase of `key`, if it exists.
    pub fn phase(&self, key: &AppKey) -> Option<Phase> {
        self.apps.get(key).map(|e| e.phase)
    }

    /// The spec in force and its version.
    pub fn spec(&self, key: &AppKey) -> Option<(u32, &crate::model::application::Application)> {
        self.apps.get(key).map(|e| (e.current, e.spec()))
    }

    /// The versions of `key` kept (older ones may be compacted away).
    pub fn versions(&self, key: &AppKey) -> Result<&[AppVersion], CoordinatorError> {
        self.apps
            .get(key)
            .map(|e| e.versions.as_slice())
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))
    }

    /// Full description of `key` at `now` (events, phase, instances, what
    /// waits and why).
    pub fn describe(
        &self,
        key: &AppKey,
        now: Timestamp,
    ) -> Result<AppDescription, CoordinatorError> {
        let e = self
            .apps
            .get(key)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        let spec = e.spec();
        let instances = e
            .runtime
            .instances
            .iter()
            .map(|(k, i)| InstanceView {
                id: InstanceId {
                    app: key.clone(),
                    workload: k.workload.clone(),
                    replica: k.replica,
                    version: i.version,
                },
                node: i.node.clone(),
                state: i.observed.clone(),
                since: i.since,
                restarts: i.restarts,
                evicted: i.evicted.clone(),
                replacing: i.replacing.as_ref().map(|r| r.version),
                placement: i.placement,
                last_failure: i.last_failure.clone(),
                unreachable_since: i.disconnected,
            })
            .collect();
        let jobs = e
            .runtime
            .jobs
            .iter()
            .map(|((w, j), st)| JobView {
                id: InitJobId {
                    app: key.clone(),
                    workload: w.clone(),
                    job: j.clone(),
                    version: st.version,
                },
                node: st.node.clone(),
                state: st.observed.clone(),
                attempts: st.attempts,
            })
            .collect();
        Ok(AppDescription {
            app: key.clone(),
            phase: e.phase,
            version: e.current,
            versions: e
                .versions
                .iter()
                .map(|v| VersionSummary {
                    version: v.version,
                    created: v.created,
                    origin: v.origin,
                    current: v.version == e.current,
                })
                .collect(),
            compacted: e.compacted,
            priority: spec.spec.priority,
            pool: spec.pool().to_string(),
            degradation: e.degradation.clone(),
            rollout: e.rollout.clone(),
            workflow: workflow_view(e),
            workflow_suspended: e.workflow.as_ref().is_some_and(|r| r.suspended),
            charge: e.charge,
            allocated: e.allocated,
            effective: e.effective.clone(),
            policies: e.policies.clone(),
            resolutions: e
                .evaluation
                .and_then(|id| self.evaluation(id))
                .map(|ev| ev.resolutions.clone())
                .unwrap_or_default(),
            security: {
                let b = e
                    .effective
                    .as_ref()
                    .map(|p| p.security.clone())
                    .unwrap_or_default();
                spec.spec
                    .workloads
                    .iter()
                    .map(|w| {
                        (
                            w.name.clone(),
                            crate::policy::security::context_of(&w.security, &b),
                        )
                    })
                    .collect()
            },
            instances,
            jobs,
            blocked: self
                .current_plan(key, now)
                .map(|p| p.blocked)
                .unwrap_or_default(),
            events: e
                .events
                .iter()
                .filter_map(|&i| self.events.get(i as u64).cloned())
                .collect(),
            decisions: e.decisions.clone(),
        })
    }

    /// The planner's view of `key` at `now`: actions it would take and what
    /// waits. Changes nothing.
    pub fn plan(&self, key: &AppKey, now: Timestamp) -> Result<Plan, CoordinatorError> {
        self.current_plan(key, now)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))
    }

    /// A decision record.
    pub fn decision(&self, id: DecisionId) -> Result<&Decision, CoordinatorError> {
        id.0.checked_sub(1)
            .and_then(|i| self.decisions.get(i))
            .ok_or(CoordinatorError::UnknownDecision(id))
    }

    /// Every decision, oldest first.
    pub fn decisions(&self) -> &[Decision] {
        self.decisions.as_slice()
    }

    /// A policy evaluation record.
    pub fn evaluation(&self, id: u64) -> Option<&PolicyEvaluation> {
        id.checked_sub(1).and_then(|i| self.evaluations.get(i))
    }

    /// Every policy evaluation, oldest first.
    pub fn evaluations(&self) -> &[PolicyEvaluation] {
        self.evaluations.as_slice()
    }

    /// Every lifecycle event, oldest first (the audit log).
    pub fn events(&self) -> &[LifecycleEvent] {
        self.events.as_slice()
    }

    /// Up to `limit` lifecycle events with a sequence number above `after`,
    /// oldest first (what retention dropped is gone: the first one returned
    /// may be later than `after + 1`).
    pub fn events_after(&self, after: u64, limit: usize) -> Vec<LifecycleEvent> {
        let from = after.max(self.events.dropped());
        (from..self.events.next_pos())
            .take(limit)
            .filter_map(|p| self.events.get(p).cloned())
            .collect()
    }

    /// Up to `limit` lifecycle events after `after` whose application's
    /// tenant passes `keep`, and the position scanned up to (a reader
    /// resumes from it even when nothing matched).
    pub fn events_after_where(
        &self,
        after: u64,
        limit: usize,
        keep: &dyn Fn(&str) -> bool,
    ) -> (Vec<LifecycleEvent>, u64) {
        let mut out = Vec::new();
        let mut scanned = after;
        for p in after.max(self.events.dropped())..self.events.next_pos() {
            if out.len() >= limit {
                break;
            }
            scanned = p + 1;
            if let Some(e) = self.events.get(p).filter(|e| keep(&e.app.tenant)) {
                out.push(e.clone());
            }
        }
        (out, scanned)
    }

    /// The same for decisions (ids are positions + 1).
    pub fn decisions_after_where(
        &self,
        after: u64,
        limit: usize,
        keep: &dyn Fn(&str) -> bool,
    ) -> (Vec<Decision>, u64) {
        let mut out = Vec::new();
        let mut scanned = after;
        for p in after.max(self.decisions.dropped())..self.decisions.next_pos() {
            if out.len() >= limit {
                break;
            }
            scanned = p + 1;
            if let Some(d) = self.decisions.get(p).filter(|d| keep(&d.app.tenant)) {
                out.push(d.clone());
            }
        }
        (out, scanned)
    }

    /// Up to `limit` decisions with an id above `after`, oldest first.
    pub fn decisions_after(&self, after: u64, limit: usize) -> Vec<Decision> {
        let from = after.max(self.decisions.dropped());
        (from..self.decisions.next_pos())
            .take(limit)
            .filter_map(|p| self.decisions.get(p).cloned())
            .collect()
    }

    /// Lifecycle events of `key`.
    pub fn events_of(&self, key: &AppKey) -> Vec<&LifecycleEvent> {
        self.events
            .as_slice()
            .iter()
            .filter(|e| &e.app == key)
            .collect()
    }

    /// Latest decision of `key`.
    pub fn latest_decision(&self, key: &AppKey) -> Result<DecisionId, CoordinatorError> {
        self.apps
            .get(key)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?
            .decisions
            .last()
            .copied()
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))
    }

    /// Tenants with the quota their applications hold.
    pub fn tenants(&self) -> Vec<(&Tenant, Charge)> {
        self.tenants.values().map(|t| (&t.spec, t.usage)).collect()
    }

    /// Policies by name.
    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.policies.values()
    }

    /// Explains a decision: context, candidates, rejections, policies,
    /// expected and actual outcome.
    pub fn explain(&self, id: DecisionId) -> Result<Explanation, CoordinatorError> {
        let d = self.decision(id)?;
        let app = self.apps.get(&d.app);
        let name = |i| self.cluster.name(i).to_string();
        let mut total = RejectCounts::default();
        let placements = d
            .placements
            .iter()
            .map(|p| {
                total.merge(&p.rejected);
                let still_holds = match (app, p.selected) {
                    (Some(a), Some(sel)) => a
                        .runtime
                        .instances
                        .get(&InstanceKey::new(p.workload.clone(), p.replica))
                        .and_then(|i| i.slot)
                        .is_some_and(|(n, _)| n == sel),
                    _ => false,
                };
                PlacementExplanation {
                    replica: format!("{}/{}", p.workload, p.replica),
                    selected: p.selected.map(name),
                    considered: p
                        .considered
                        .iter()
                        .map(|c| NamedCandidate {
                            node: name(c.node),
                            score: c.score,
                        })
                        .collect(),
                    rejected: p.rejected,
                    examined: p.examined,
                    not_examined: p.not_examined,
                    still_holds,
                }
            })
            .collect();
        Ok(Explanation {
            id: d.id,
            kind: d.kind,
            time: d.time,
            app: d.app.clone(),
            version: d.version,
            pool: d.pool.clone(),
            accepted: d.accepted,
            reason: d.reason.clone(),
            constraints: d.constraints.clone(),
            fair_share: d.fair_share.clone(),
            placements,
            rejected_total: total,
            preemptions: d
                .preemptions
                .iter()
                .map(|p| (p.clone(), name(p.node)))
                .collect(),
            checks: match d.evaluation.and_then(|e| self.evaluation(e)) {
                Some(e) if !d.checks.is_empty() || d.constraints.is_none() => e.checks.clone(),
                _ => d.checks.clone(),
            },
            policies: d.policies.clone(),
            resolutions: d
                .evaluation
                .and_then(|e| self.evaluation(e))
                .map(|e| e.resolutions.clone())
                .unwrap_or_default(),
            expected: d.expected.clone(),
            actual_phase: app.map(|a| a.phase),
        })
    }
}

/// One workflow step as `describe` and `darosctl get workflow` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStepView {
    /// Step name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The group it is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `Pending`, `Running`, `WaitingApproval`, `WaitingCapacity`,
    /// `Succeeded` or `Failed`.
    pub phase: String,
    /// Runs started (job steps).
    pub attempts: u32,
    /// Node of its job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What it waits for, did, or why it failed.
    pub message: String,
}

fn workflow_view(e: &super::entry::AppEntry) -> Vec<WorkflowStepView> {
    let spec = e.spec();
    let Some(wf) = spec.spec.workflow.as_ref() else {
        return Vec::new();
    };
    let run = e.workflow.as_ref().filter(|r| r.version == e.current);
    wf.all()
        .into_iter()
        .map(|(s, parent)| {
            let st = run.and_then(|r| r.steps.get(&s.name));
            WorkflowStepView {
                name: s.name.clone(),
                kind: s.kind.clone(),
                group: parent.map(str::to_string),
                phase: format!(
                    "{:?}",
                    st.map_or(crate::workflow::run::StepPhase::Pending, |s| s.phase)
                ),
                attempts: st.map_or(0, |s| s.attempts),
                node: st.and_then(|s| s.node.clone()),
                message: st.map(|s| s.message.clone()).unwrap_or_default(),
            }
        })
        .collect()
}
