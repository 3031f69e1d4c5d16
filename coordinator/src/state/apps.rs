//! Application lifecycle flows: create, admit, update, start, stop, delete,
//! retry, rollback. Every phase change goes through the transition function
//! and records a lifecycle event.

use super::Coordinator;
use super::entry::AppEntry;
use crate::admission::{AdmissionRequest, AdmissionResult, Charge, admit};
use crate::command::{Outcome, Refusal};
use crate::decision::{Decision, DecisionId, DecisionKind};
use crate::error::CoordinatorError;
use crate::lifecycle::{
    Input, LifecycleAction, LifecycleEvent, Operation, Phase, Step, SystemEvent, Target, Trigger,
    transition,
};
use crate::model::application::Application;
use crate::model::dependency::DependencyGraph;
use crate::model::names::AppKey;
use crate::model::policy::{PolicyRules, PolicyScope};
use crate::model::time::Timestamp;
use crate::policy::{
    EffectivePolicy, PolicyCheck, PolicyEvaluation, Resolution, ScopedPolicy, resolve,
};
use crate::reconcile::{ActionKind, InstanceId, RuntimeAction};
use crate::version::{AppVersion, VersionOrigin};
use std::collections::BTreeMap;

/// Result of evaluating policies and admission for a spec.
pub(super) struct Evaluated {
    pub admission: Option<AdmissionResult>,
    pub effective: Option<EffectivePolicy>,
    pub resolutions: Vec<Resolution>,
    pub policies: Vec<String>,
    pub checks: Vec<PolicyCheck>,
    pub evaluation: u64,
    pub conflict: bool,
}

impl Evaluated {
    pub fn admitted(&self) -> bool {
        self.admission
            .as_ref()
            .is_some_and(AdmissionResult::admitted)
    }

    /// True when admission failed only because something the application
    /// names does not exist (its tenant, its pool): a creation failure
    /// (Created -> Failed, retried once it exists), not a refusal on the
    /// application's merits (Rejected).
    pub fn missing_reference(&self) -> bool {
        let failed: Vec<&PolicyCheck> = self.checks.iter().filter(|c| !c.passed).collect();
        !failed.is_empty()
            && failed.iter().all(|c| {
                matches!(c.rule.as_str(), "tenant" | "pool") && c.detail.ends_with("does not exist")
            })
    }

    pub fn failures(&self) -> String {
        self.checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| format!("{}: {}", c.rule, c.detail))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// `policies` as resolution takes them, by scope level then name.
pub(super) fn scoped_policies(
    policies: &[(String, PolicyScope, PolicyRules)],
) -> Vec<ScopedPolicy<'_>> {
    let mut scoped: Vec<ScopedPolicy<'_>> = policies
        .iter()
        .map(|(n, s, r)| ScopedPolicy {
            name: n,
            scope: s,
            rules: r,
        })
        .collect();
    scoped.sort_by(|a, b| (a.scope.level(), a.name).cmp(&(b.scope.level(), b.name)));
    scoped
}

impl Coordinator {
    pub(super) fn apply_app(
        &mut self,
        app: Application,
        start: bool,
        now: Timestamp,
        out: &mut Outcome,
        pending: &mut Vec<AppKey>,
    ) -> Result<(), CoordinatorError> {
        let key = app.key();
        if let Some(e) = self.apps.get(&key) {
            if e.phase == Phase::Rejected {
                self.remove_app(
                    &key,
                    "replaced by a newly applied spec",
                    Trigger::System,
                    now,
                    out,
                )?;
            } else {
                if *e.spec() == app {
                    out.notes
                        .push(format!("{key}: unchanged (version {})", e.current));
                    // Applying is asking for it to run: a stopped or failed
                    // application starts again.
                    match (start, e.phase) {
                        (true, Phase::Admitted) => pending.push(key),
                        (true, Phase::Terminated) => return self.op_start(&key, now, out),
                        (true, Phase::Failed) => return self.op_retry(&key, now, out),
                        _ => {}
                    }
                    return Ok(());
                }
                return self.update_spec(&key, app, VersionOrigin::Apply, start, now, out, pending);
            }
        }
        self.create_app(app, start, now, out, pending);
        Ok(())
    }

    fn create_app(
        &mut self,
        app: Application,
        start: bool,
        now: Timestamp,
        out: &mut Outcome,
        pending: &mut Vec<AppKey>,
    ) {
        let key = app.key();
        let id = self.next_app_id;
        self.next_app_id += 1;
        let targets = app
            .spec
            .workloads
            .iter()
            .map(|w| (w.name.clone(), w.replicas.min))
            .collect();
        self.app_ids.insert(id, key.clone());
        self.apps.insert(
            key.clone(),
            AppEntry {
                id,
                key: key.clone(),
                phase: Phase::Created,
                versions: vec![AppVersion {
                    version: 1,
                    spec: std::sync::Arc::new(app),
                    created: now,
                    origin: VersionOrigin::Apply,
                }],
                current: 1,
                effective: None,
                policies: Vec::new(),
                evaluation: None,
                charge: Charge::default(),
                allocated: Default::default(),
                targets,
                runtime: Default::default(),
                degradation: None,
                start_requested: start,
                events: Vec::new(),
                decisions: Vec::new(),
                admitted_seq: 0,
                wake_at: None,
                restore_epoch: 0,
                rollout: None,
                workflow: None,
                compacted: Default::default(),
                converging: start.then_some(super::convergence::Converging {
                    since: now,
                    cause: super::convergence::ConvergeCause::Create,
                }),
                uptime: Default::default(),
            },
        );
        self.record_event(
            &key,
            None,
            Target::Phase(Phase::Created),
            Trigger::User,
            "version 1 applied".into(),
            Vec::new(),
            vec!["version 1".into()],
            now,
            out,
        );
        if self.admit_app(&key, now, out) && start {
            pending.push(key);
        }
    }

    /// Runs admission for an application in Created; true when admitted.
    pub(super) fn admit_app(&mut self, key: &AppKey, now: Timestamp, out: &mut Outcome) -> bool {
        let Some(e) = self.apps.get(key) else {
            return false;
        };
        let (spec, targets, version) = (e.spec_arc(), e.targets.clone(), e.current);
        let ev = self.evaluate(key, &spec, &targets, Charge::default(), version, now);
        let accepted = ev.admitted();
        let missing = !accepted && ev.missing_reference();
        let reason = if accepted {
            format!("admission passed ({} checks)", ev.checks.len())
        } else if missing {
            format!(
                "creation failed: {}; create it, then `darosctl operate {key} retry`",
                ev.failures()
            )
        } else {
            format!("admission failed: {}", ev.failures())
        };
        let d = self.new_decision(
            key,
            DecisionKind::Admission,
            version,
            &spec,
            &ev,
            accepted,
            reason.clone(),
            now,
            out,
        );
        let related = vec![d.to_string()];
        if accepted {
            let charge = ev.admission.as_ref().map(|a| a.charge).unwrap_or_default();
            self.admitted_seq += 1;
            let seq = self.admitted_seq;
            if let Some(t) = self.tenants.get_mut(&key.tenant) {
                t.usage = t.usage.plus(charge);
            }
            if let Some(e) = self.apps.get_mut(key) {
                e.charge = charge;
                e.effective = ev.effective.clone();
                e.policies = ev.policies.clone();
                e.evaluation = Some(ev.evaluation);
                e.admitted_seq = seq;
            }
            let _ = self.transition_app(
                key,
                Input::Event(SystemEvent::AdmissionPassed),
                Trigger::System,
                reason,
                ev.policies.clone(),
                related,
                now,
                out,
            );
        } else {
            let trigger = if ev.conflict {
                Trigger::Policy
            } else {
                Trigger::System
            };
            let event = if missing {
                SystemEvent::CreationFailed
            } else {
                SystemEvent::AdmissionFailed
            };
            if let Some(c) = ev.checks.iter().find(|c| !c.passed) {
                *self.counters.rejections.entry(c.rule.clone()).or_default() += 1;
            }
            let _ = self.transition_app(
                key,
                Input::Event(event),
                trigger,
                reason.clone(),
                ev.policies.clone(),
                related,
                now,
                out,
            );
            out.refusals.push(Refusal {
                app: key.clone(),
                reason,
                decision: Some(d),
            });
        }
        accepted
    }

    /// Every policy that applies to `app`: global ones, the tenant's inline
    /// rules and policies, the application's inline rules and policies.
    pub(super) fn policies_for(
        &self,
        app: &Application,
    ) -> Vec<(String, PolicyScope, PolicyRules)> {
        let mut v = Vec::new();
        let tscope = PolicyScope::Tenant {
            tenant: app.tenant.clone(),
        };
        let ascope = PolicyScope::Application {
            tenant: app.tenant.clone(),
            application: app.name.clone(),
        };
        for p in self.policies.values() {
            if p.scope == PolicyScope::Global || p.scope == tscope || p.scope == ascope {
                v.push((p.name.clone(), p.scope.clone(), p.rules.clone()));
            }
        }
        if let Some(t) = self.tenants.get(&app.tenant)
            && !t.spec.policy.is_empty()
        {
            v.push((
                format!("tenant:{}", app.tenant),
                tscope,
                t.spec.policy.clone(),
            ));
        }
        if !app.spec.policy.is_empty() {
            v.push((
                format!("application:{}", app.key()),
                ascope,
                app.spec.policy.clone(),
            ));
        }
        v
    }

    /// Resolves policies and runs admission for `spec` (nothing changes but
    /// the evaluation record).
    pub(super) fn evaluate(
        &mut self,
        key: &AppKey,
        spec: &Application,
        targets: &BTreeMap<String, u32>,
        own_charge: Charge,
        version: u32,
        now: Timestamp,
    ) -> Evaluated {
        let pols = self.policies_for(spec);
        let scoped = scoped_policies(&pols);
        let names: Vec<String> = scoped.iter().map(|p| p.name.to_string()).collect();
        let id = self.evaluations.next_pos() + 1;
        let mut ev = Evaluated {
            admission: None,
            effective: None,
            resolutions: Vec::new(),
            policies: names.clone(),
            checks: Vec::new(),
            evaluation: id,
            conflict: false,
        };
        match resolve(&scoped) {
            Err(c) => {
                ev.conflict = true;
                ev.checks.push(PolicyCheck {
                    rule: "policyResolution".into(),
                    passed: false,
                    detail: c.to_string(),
                    policy: Some(c.lower.clone()),
                });
                self.evaluations.push(PolicyEvaluation {
                    id,
                    time: now,
                    app: key.clone(),
                    version,
                    policies: names,
                    effective: Err(c.to_string()),
                    resolutions: Vec::new(),
                    checks: ev.checks.clone(),
                });
            }
            Ok((eff, res)) => {
                match self.tenants.get(&spec.tenant) {
                    Some(t) => {
                        let pool_exists = self.cluster.pool(spec.pool()).is_some();
                        // What the tenant's other applications of this pool hold.
                        let pool_usage = self
                            .apps
                            .values()
                            .filter(|e| {
                                &e.key != key
                                    && e.key.tenant == spec.tenant
                                    && e.spec().pool() == spec.pool()
                                    && e.phase.holds_quota()
                            })
                            .fold(Charge::default(), |a, e| a.plus(e.charge));
                        let mut a = admit(&AdmissionRequest {
                            app: spec,
                            targets,
                            tenant: &t.spec,
                            effective: &eff,
                            resolutions: &res,
                            tenant_usage: t.usage.minus(own_charge),
                            pool_usage,
                            cluster_capacity: self.cluster.total_capacity(),
                            pool_exists,
                        });
                        a.checks.extend(self.workflow_checks(spec));
                        ev.checks = a.checks.clone();
                        ev.admission = Some(a);
                    }
                    None => ev.checks.push(PolicyCheck {
                        rule: "tenant".into(),
                        passed: false,
                        detail: format!("tenant {} does not exist", spec.tenant),
                        policy: None,
                    }),
                }
                self.evaluations.push(PolicyEvaluation {
                    id,
                    time: now,
                    app: key.clone(),
                    version,
                    policies: names,
                    effective: Ok(eff.clone()),
                    resolutions: res.clone(),
                    checks: ev.checks.clone(),
                });
                ev.effective = Some(eff);
                ev.resolutions = res;
            }
        }
        ev
    }

    /// Records a decision that is a reason only (no placements, checks or
    /// policies): rollout and workflow steps.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plain_decision(
        &mut self,
        key: &AppKey,
        kind: DecisionKind,
        version: u32,
        accepted: bool,
        reason: String,
        now: Timestamp,
        out: &mut Outcome,
    ) -> DecisionId {
        let pool = self
            .apps
            .get(key)
            .map(|e| e.spec().pool().to_string())
            .unwrap_or_default();
        self.push_decision(
            Decision {
                id: DecisionId(0),
                time: now,
                kind,
                app: key.clone(),
                version,
                pool,
                constraints: None,
                fair_share: None,
                placements: Vec::new(),
                preemptions: Vec::new(),
                checks: Vec::new(),
                evaluation: None,
                policies: Vec::new(),
                accepted,
                reason,
                expected: None,
            },
            out,
        )
    }

    /// Records an admission-style decision (no placements).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_decision(
        &mut self,
        key: &AppKey,
        kind: DecisionKind,
        version: u32,
        spec: &Application,
        ev: &Evaluated,
        accepted: bool,
        reason: String,
        now: Timestamp,
        out: &mut Outcome,
    ) -> DecisionId {
        self.push_decision(
            Decision {
                id: DecisionId(0),
                time: now,
                kind,
                app: key.clone(),
                version,
                pool: spec.pool().to_string(),
                constraints: None,
                fair_share: None,
                placements: Vec::new(),
                preemptions: Vec::new(),
                checks: ev.checks.iter().filter(|c| !c.passed).cloned().collect(),
                evaluation: Some(ev.evaluation),
                policies: ev.policies.clone(),
                accepted,
                reason,
                expected: None,
            },
            out,
        )
    }

    /// Stores a decision, giving it the next id.
    pub(super) fn push_decision(&mut self, mut d: Decision, out: &mut Outcome) -> DecisionId {
        let id = DecisionId(self.decisions.next_pos() + 1);
        d.id = id;
        if let Some(e) = self.apps.get_mut(&d.app) {
            e.decisions.push(id);
        }
        self.decisions.push(d);
        out.decisions.push(id);
        id
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_event(
        &mut self,
        key: &AppKey,
        from: Option<Phase>,
        to: Target,
        trigger: Trigger,
        reason: String,
        policies: Vec<String>,
        related: Vec<String>,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        self.count_transition(key, to, trigger, now);
        self.track_uptime(key, from, to, now);
        let ev = LifecycleEvent {
            seq: self.events.next_pos() + 1,
            app: key.clone(),
            time: now,
            from,
            to,
            trigger,
            reason,
            policies,
            related,
        };
        let idx = self.events.push(ev.clone()) as usize;
        if let Some(e) = self.apps.get_mut(key) {
            e.events.push(idx);
        }
        out.events.push(ev);
    }

    /// Runs the transition function and records the event(s); the phase
    /// changes only when the transition is legal.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn transition_app(
        &mut self,
        key: &AppKey,
        input: Input,
        trigger: Trigger,
        reason: String,
        policies: Vec<String>,
        related: Vec<String>,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<Step, CoordinatorError> {
        let from = self
            .apps
            .get(key)
            .map(|e| e.phase)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        let step = transition(from, input).map_err(|source| CoordinatorError::Illegal {
            app: key.clone(),
            source,
        })?;
        let record_self_loop = matches!(
            input,
            Input::Op(Operation::UpdateSpec | Operation::Scale | Operation::Restore)
        );
        if let Some(via) = step.via {
            self.record_event(
                key,
                Some(from),
                Target::Phase(via),
                trigger,
                reason.clone(),
                policies.clone(),
                related.clone(),
                now,
                out,
            );
            self.record_event(
                key,
                Some(via),
                step.to,
                trigger,
                reason,
                policies,
                related,
                now,
                out,
            );
        } else if step.to != Target::Phase(from) || record_self_loop {
            self.record_event(
                key,
                Some(from),
                step.to,
                trigger,
                reason,
                policies,
                related,
                now,
                out,
            );
        }
        if let (Target::Phase(p), Some(e)) = (step.to, self.apps.get_mut(key)) {
            e.phase = p;
            if !matches!(p, Phase::Degraded) {
                e.degradation = None;
            }
        }
        self.check_converged(key, now);
        Ok(step)
    }

    /// Performs the teardown actions of a step: stop workloads (dependents
    /// of `failed` first), release placements and quota, clean up.
    pub(super) fn teardown(
        &mut self,
        key: &AppKey,
        actions: &[LifecycleAction],
        reason: &str,
        failed: Option<&str>,
        out: &mut Outcome,
    ) {
        if actions.contains(&LifecycleAction::StopWorkloads) {
            self.stop_instances(key, reason, failed, out);
            if let Some(e) = self.apps.get_mut(key) {
                // Nothing is replaced any more.
                e.rollout = None;
            }
        }
        if actions.contains(&LifecycleAction::ReleasePlacements) {
            self.release_placements(key);
        }
        if actions.contains(&LifecycleAction::ReleaseQuota) {
            self.release_quota(key);
        }
        if actions.contains(&LifecycleAction::Cleanup)
            && let Some(e) = self.apps.remove(key)
        {
            self.app_ids.remove(&e.id);
        }
    }

    fn stop_instances(
        &mut self,
        key: &AppKey,
        reason: &str,
        failed: Option<&str>,
        out: &mut Outcome,
    ) {
        let Some(e) = self.apps.get(key) else { return };
        let spec = e.spec();
        let ws = &spec.spec.workloads;
        let graph = DependencyGraph::new(ws);
        let order = graph
            .start_order()
            .unwrap_or_else(|| (0..ws.len()).collect());
        // Dependents of the failed workload first, then reverse start order.
        let mut rank: BTreeMap<&str, usize> = BTreeMap::new();
        if let Some(f) = failed.and_then(|f| ws.iter().position(|w| w.name == f)) {
            for d in graph.transitive_dependents(f) {
                rank.insert(ws[d].name.as_str(), 0);
            }
            rank.insert(ws[f].name.as_str(), 1);
        }
        for (pos, &i) in order.iter().rev().enumerate() {
            rank.entry(ws[i].name.as_str()).or_insert(2 + pos);
        }
        let mut todo: Vec<(usize, RuntimeAction)> = Vec::new();
        for (k, inst) in &e.runtime.instances {
            let r = rank.get(k.workload.as_str()).copied().unwrap_or(usize::MAX);
            let why = if rank.get(k.workload.as_str()) == Some(&0) {
                format!("{reason}; it depends on {}", failed.unwrap_or_default())
            } else {
                reason.to_string()
            };
            if let Some(old) = &inst.replacing
                && !old.stopped
                && let Some(node) = &old.node
            {
                todo.push((
                    r,
                    stop_action(key, k, (old.version, old.placement), node, why.clone()),
                ));
            }
            let started = inst.starts > 0 || inst.observed.is_live();
            if let (Some(node), true) = (&inst.node, started) {
                todo.push((
                    r,
                    stop_action(key, k, (inst.version, inst.placement), node, why),
                ));
            }
        }
        todo.sort_by_key(|(r, _)| *r);
        out.actions.extend(todo.into_iter().map(|(_, a)| a));
    }

    pub(super) fn release_placements(&mut self, key: &AppKey) {
        self.capacity_epoch += 1;
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        let pool = e.spec().pool().to_string();
        let mut freed = crate::placement::ResVec::default();
        for inst in e.runtime.instances.values_mut() {
            if let Some((node, serial)) = inst.slot.take()
                && let Some(p) = self.cluster.release(node, serial)
            {
                freed = freed.plus(p.demand.request);
            }
        }
        e.runtime = Default::default();
        e.allocated = Default::default();
        e.wake_at = None;
        if let Some(t) = self.tenants.get_mut(&key.tenant)
            && let Some(a) = t.pool_alloc.get_mut(&pool)
        {
            *a = a.minus(freed);
        }
    }

    pub(super) fn release_quota(&mut self, key: &AppKey) {
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        let charge = std::mem::take(&mut e.charge);
        if let Some(t) = self.tenants.get_mut(&key.tenant) {
            t.usage = t.usage.minus(charge);
        }
    }

    /// Deletes an application, whatever it runs (teardown first).
    pub(super) fn remove_app(
        &mut self,
        key: &AppKey,
        reason: &str,
        trigger: Trigger,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let step = self.transition_app(
            key,
            Input::Op(Operation::Delete),
            trigger,
            reason.to_string(),
            Vec::new(),
            Vec::new(),
            now,
            out,
        )?;
        self.teardown(key, &step.actions, reason, None, out);
        Ok(())
    }

    pub(super) fn op_start(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let stopped = self.apps.get(key).map(|e| e.phase) == Some(Phase::Terminated);
        let reason = if stopped {
            "start requested: the stopped application goes through admission again"
        } else {
            "start requested"
        };
        self.transition_app(
            key,
            Input::Op(Operation::Start),
            Trigger::User,
            reason.into(),
            Vec::new(),
            Vec::new(),
            now,
            out,
        )?;
        self.mark_converging(key, super::convergence::ConvergeCause::Start, now);
        if let Some(e) = self.apps.get_mut(key) {
            e.start_requested = true;
            if stopped {
                e.runtime = Default::default();
                e.degradation = None;
            }
        }
        // A stopped application gave its quota back: admission first.
        if !stopped || self.admit_app(key, now, out) {
            self.arbitrate_round(vec![key.clone()], now, out);
        }
        Ok(())
    }

    pub(super) fn op_stop(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let step = self.transition_app(
            key,
            Input::Op(Operation::Stop),
            Trigger::User,
            "stopped by user".into(),
            Vec::new(),
            Vec::new(),
            now,
            out,
        )?;
        self.teardown(key, &step.actions, "application stopped by user", None, out);
        Ok(())
    }

    pub(super) fn op_delete(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        self.remove_app(key, "deleted by user", Trigger::User, now, out)
    }

    pub(super) fn op_retry(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        self.transition_app(
            key,
            Input::Op(Operation::Retry),
            Trigger::User,
            "retry requested".into(),
            Vec::new(),
            Vec::new(),
            now,
            out,
        )?;
        let start = self.apps.get(key).is_some_and(|e| e.start_requested);
        if let Some(e) = self.apps.get_mut(key) {
            e.runtime = Default::default();
            e.degradation = None;
        }
        if self.admit_app(key, now, out) && start {
            self.arbitrate_round(vec![key.clone()], now, out);
        }
        Ok(())
    }

    pub(super) fn cmd_rollback(
        &mut self,
        key: &AppKey,
        version: u32,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let e = self
            .apps
            .get(key)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        let latest = e.latest_version();
        let Some(v) = e.version(version) else {
            if (1..=latest).contains(&version) {
                return Err(CoordinatorError::VersionCompacted {
                    app: key.clone(),
                    version,
                    oldest: e.versions.first().map_or(latest, |v| v.version),
                });
            }
            return Err(CoordinatorError::UnknownVersion {
                app: key.clone(),
                version,
                latest,
            });
        };
        if *v.spec == *e.spec() {
            out.notes.push(format!(
                "{key}: version {version} is the spec in force (version {})",
                e.current
            ));
            return Ok(());
        }
        let spec = (*v.spec).clone();
        // Rolling a failed application back is the way out of Failed: it
        // runs again with that spec. A stopped one stays stopped.
        let start = e.phase == Phase::Failed;
        let mut pending = Vec::new();
        self.update_spec(
            key,
            spec,
            VersionOrigin::Rollback { to: version },
            start,
            now,
            out,
            &mut pending,
        )
    }

    /// UpdateSpec of a Terminated or Failed application: the version is
    /// recorded (and becomes the one a Start or Retry runs), nothing runs.
    fn record_version(
        &mut self,
        key: &AppKey,
        app: Application,
        origin: VersionOrigin,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let e = self
            .apps
            .get_mut(key)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        let version = e.next_version();
        let phase = e.phase;
        e.targets = targets_for(&e.targets, &app);
        e.versions.push(AppVersion {
            version,
            spec: std::sync::Arc::new(app),
            created: now,
            origin,
        });
        e.current = version;
        self.transition_app(
            key,
            Input::Op(Operation::UpdateSpec),
            Trigger::User,
            format!(
                "{}; recorded while {phase}, not running",
                origin_reason(origin, version)
            ),
            Vec::new(),
            vec![format!("version {version}")],
            now,
            out,
        )?;
        Ok(())
    }

    /// UpdateSpec: a new version, admitted (and, for placed applications,
    /// arbitrated and rolled out) or refused with nothing changed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn update_spec(
        &mut self,
        key: &AppKey,
        app: Application,
        origin: VersionOrigin,
        start: bool,
        now: Timestamp,
        out: &mut Outcome,
        pending: &mut Vec<AppKey>,
    ) -> Result<(), CoordinatorError> {
        let phase = self
            .apps
            .get(key)
            .map(|e| e.phase)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        transition(phase, Input::Op(Operation::UpdateSpec)).map_err(|source| {
            CoordinatorError::Illegal {
                app: key.clone(),
                source,
            }
        })?;
        self.mark_converging(key, super::convergence::ConvergeCause::Update, now);
        if phase.holds_placements() {
            self.update_placed(key, app, origin, now, out);
            return Ok(());
        }
        if matches!(phase, Phase::Terminated | Phase::Failed) {
            self.record_version(key, app, origin, now, out)?;
            return match (start, phase) {
                (true, Phase::Terminated) => self.op_start(key, now, out),
                (true, _) => self.op_retry(key, now, out),
                (false, _) => Ok(()),
            };
        }
        let Some(e) = self.apps.get(key) else {
            return Ok(());
        };
        let version = e.next_version();
        let own = e.charge;
        let targets: BTreeMap<String, u32> = app
            .spec
            .workloads
            .iter()
            .map(|w| (w.name.clone(), w.replicas.min))
            .collect();
        let ev = self.evaluate(key, &app, &targets, own, version, now);
        let accepted = ev.admitted();
        let reason = if accepted {
            format!("version {version} admitted")
        } else {
            format!("version {version} refused: {}", ev.failures())
        };
        let d = self.new_decision(
            key,
            DecisionKind::Admission,
            version,
            &app,
            &ev,
            accepted,
            reason.clone(),
            now,
            out,
        );
        if !accepted {
            out.refusals.push(Refusal {
                app: key.clone(),
                reason,
                decision: Some(d),
            });
            return Ok(());
        }
        let charge = ev.admission.as_ref().map(|a| a.charge).unwrap_or_default();
        if let Some(t) = self.tenants.get_mut(&key.tenant) {
            t.usage = t.usage.minus(own).plus(charge);
        }
        if let Some(e) = self.apps.get_mut(key) {
            e.versions.push(AppVersion {
                version,
                spec: std::sync::Arc::new(app),
                created: now,
                origin,
            });
            e.current = version;
            e.targets = targets;
            e.charge = charge;
            e.effective = ev.effective.clone();
            e.policies = ev.policies.clone();
            e.evaluation = Some(ev.evaluation);
            if start {
                e.start_requested = true;
            }
        }
        self.transition_app(
            key,
            Input::Op(Operation::UpdateSpec),
            Trigger::User,
            origin_reason(origin, version),
            ev.policies.clone(),
            vec![d.to_string(), format!("version {version}")],
            now,
            out,
        )?;
        if start && phase == Phase::Admitted {
            pending.push(key.clone());
        }
        Ok(())
    }
}

/// Replicas wanted per workload of `app`, carried over from `old`: clamped to
/// the new bounds, a parked workload (0) stays parked, a new one gets its min.
pub(super) fn targets_for(old: &BTreeMap<String, u32>, app: &Application) -> BTreeMap<String, u32> {
    app.spec
        .workloads
        .iter()
        .map(|w| {
            let t = match old.get(&w.name) {
                Some(0) => 0,
                Some(&t) => t.clamp(w.replicas.min, w.replicas.max),
                None => w.replicas.min,
            };
            (w.name.clone(), t)
        })
        .collect()
}

pub(super) fn origin_reason(origin: VersionOrigin, version: u32) -> String {
    match origin {
        VersionOrigin::Apply => format!("spec updated to version {version}"),
        VersionOrigin::Rollback { to } => {
            format!("rolled back to the spec of version {to} as version {version}")
        }
        VersionOrigin::AutoRollback { to } => {
            format!(
                "rollout failed: rolled back by itself to the spec of version {to} as version {version}"
            )
        }
    }
}

pub(super) fn stop_action(
    key: &AppKey,
    k: &crate::reconcile::InstanceKey,
    (version, placement): (u32, crate::reconcile::PlacementId),
    node: &str,
    reason: String,
) -> RuntimeAction {
    RuntimeAction {
        node: node.to_string(),
        not_before: None,
        reason,
        kind: ActionKind::Stop {
            instance: InstanceId {
                app: key.clone(),
                workload: k.workload.clone(),
                replica: k.replica,
                version,
            },
            placement,
        },
    }
}
