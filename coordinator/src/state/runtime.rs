//! Runtime reports and planning: reports update instances and init jobs,
//! then the pure planner decides the next actions and the lifecycle
//! transitions they imply.

use std::collections::BTreeSet;

use super::Coordinator;
use super::entry::{Degradation, DegradationCause};
use super::rollout::NO_PROMOTION;
use crate::command::{Outcome, WorkloadReport};
use crate::error::CoordinatorError;
use crate::lifecycle::{Input, SystemEvent, Trigger};
use crate::model::health::CheckKind;
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use crate::reconcile::{
    ActionKind, InitJobId, InstanceId, InstanceKey, ObservedState, PlacementId, Plan, PlanInput,
    Requested, plan,
};

impl Coordinator {
    /// The Kubernetes namespace pods of `tenant` run in when their spec
    /// names none: the first it owns.
    pub(super) fn namespace_of(&self, tenant: &str) -> Option<String> {
        self.tenants
            .get(tenant)
            .and_then(|t| t.spec.owned_namespaces().into_iter().next())
    }

    /// Plans `key` now and applies the plan.
    pub(super) fn replan(&mut self, key: &AppKey, now: Timestamp, out: &mut Outcome) {
        let wf_wake = self.advance_workflow(key, now, out);
        let Some(mut p) = self.current_plan(key, now) else {
            return;
        };
        if let Some(w) = wf_wake {
            p.wake_at = Some(p.wake_at.map_or(w, |x| x.min(w)));
        }
        self.apply_plan(key, p, now, out);
        self.check_converged(key, now);
    }

    /// The plan for `key` at `now`, without applying it.
    pub(super) fn current_plan(&self, key: &AppKey, now: Timestamp) -> Option<Plan> {
        let e = self.apps.get(key)?;
        let baseline = e
            .effective
            .as_ref()
            .map(|p| p.security.clone())
            .unwrap_or_default();
        let namespace = self.namespace_of(&key.tenant);
        let released = Self::released(e);
        Some(plan(&PlanInput {
            security: &baseline,
            namespace: namespace.as_deref(),
            key,
            app: e.spec(),
            version: e.current,
            phase: e.phase,
            runtime: &e.runtime,
            targets: &e.targets,
            recoverable_degradation: e
                .degradation
                .as_ref()
                .is_none_or(|d| d.cause == DegradationCause::Runtime),
            rollout_started: e
                .rollout
                .as_ref()
                .map(|r| r.deadline_from.unwrap_or(r.started)),
            promoted: e.rollout.as_ref().map_or(&NO_PROMOTION, |r| &r.promoted),
            released: released.as_ref(),
            now,
        }))
    }

    fn apply_plan(&mut self, key: &AppKey, p: Plan, now: Timestamp, out: &mut Outcome) {
        if self.track_rollout(key, p.rollout_failed.clone(), now, out) {
            // Rolled back: planned afresh; this plan is stale.
            return;
        }
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        for a in &p.actions {
            match &a.kind {
                ActionKind::Start {
                    instance, attempt, ..
                } => {
                    let k = InstanceKey::new(instance.workload.clone(), instance.replica);
                    if let Some(inst) = e.runtime.instances.get_mut(&k) {
                        if let Some(old) = inst.replacing.as_mut()
                            && old.live()
                        {
                            // Started beside the old one: a surge.
                            old.surge = true;
                        }
                        inst.starts = *attempt;
                        inst.requested = Some((Requested::Start(*attempt), inst.observations));
                        if *attempt > 1 {
                            self.counters.restarts += 1;
                        }
                        if let Some(r) = p.restarts.get(&k) {
                            inst.restarts = *r;
                        }
                    }
                }
                ActionKind::RunInitJob { job, attempt, .. } => {
                    if let Some(j) = e
                        .runtime
                        .jobs
                        .get_mut(&(job.workload.clone(), job.job.clone()))
                    {
                        j.attempts = *attempt;
                        j.requested_at = Some(j.observations);
                        j.node = Some(a.node.clone());
                    }
                }
                ActionKind::Stop {
                    instance,
                    placement,
                } => {
                    let k = InstanceKey::new(instance.workload.clone(), instance.replica);
                    if let Some(old) = e
                        .runtime
                        .instances
                        .get_mut(&k)
                        .and_then(|i| i.replacing.as_mut())
                        && old.version == instance.version
                        && old.placement == *placement
                    {
                        old.stop_requested = true;
                    }
                }
            }
        }
        e.wake_at = p.wake_at;
        let policies = e.policies.clone();
        out.actions.extend(p.actions);
        if self.rollout_steps(key, &p.rollout_steps, now, out) {
            // Promoted: the rest of the rollout is planned now.
            self.replan(key, now, out);
            return;
        }
        let Some((ev, reason)) = p.event else {
            return;
        };
        let Ok(step) = self.transition_app(
            key,
            Input::Event(ev),
            Trigger::System,
            reason.clone(),
            policies,
            Vec::new(),
            now,
            out,
        ) else {
            return;
        };
        match ev {
            SystemEvent::Degrade => {
                if let Some(e) = self.apps.get_mut(key) {
                    e.degradation = Some(Degradation {
                        cause: DegradationCause::Runtime,
                        reason,
                    });
                }
            }
            SystemEvent::ExecutionFailed
            | SystemEvent::RuntimeFailed
            | SystemEvent::Finished
            | SystemEvent::Evicted => {
                let why = match &p.failed_workload {
                    Some(w) => format!("workload {w} failed: {reason}"),
                    None => reason,
                };
                self.teardown(key, &step.actions, &why, p.failed_workload.as_deref(), out);
            }
            _ => {}
        }
    }

    /// A report about one placement of an instance: it changes that
    /// placement only (the current one, or the old one a rolling update
    /// replaces); a report about any other placement of the same replica (an
    /// earlier node, an earlier re-placement) is ignored with a note. The
    /// batch of one: the same path as a node's batch.
    pub(super) fn cmd_report_workload(
        &mut self,
        instance: InstanceId,
        placement: PlacementId,
        state: ObservedState,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let report = WorkloadReport {
            instance,
            placement,
            state,
        };
        self.cmd_report_workloads(vec![report], now, out);
    }

    /// A node's batch: every report observed in order, then each application
    /// they touched planned once (in key order) and the drains stepped once.
    pub(super) fn cmd_report_workloads(
        &mut self,
        reports: Vec<WorkloadReport>,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        let mut touched = BTreeSet::new();
        for r in reports {
            if self.observe_report(&r.instance, r.placement, r.state, now, out) {
                touched.insert(r.instance.app);
            }
        }
        if touched.is_empty() {
            return;
        }
        for app in &touched {
            self.replan(app, now, out);
        }
        // A stopped or ready instance may be what a drain waits for.
        self.drain_step(now, out);
    }

    /// Records one instance report; false when it was ignored (the notes
    /// say why) and nothing needs planning.
    fn observe_report(
        &mut self,
        id: &InstanceId,
        placement: PlacementId,
        state: ObservedState,
        now: Timestamp,
        out: &mut Outcome,
    ) -> bool {
        let Some(e) = self.apps.get_mut(&id.app) else {
            out.notes
                .push(format!("ignored report for {id}: no such application"));
            return false;
        };
        let readiness = e.spec().workload(&id.workload).is_some_and(|w| {
            w.health_checks
                .iter()
                .any(|h| h.kind == CheckKind::Readiness)
        });
        let k = InstanceKey::new(id.workload.clone(), id.replica);
        let Some(inst) = e.runtime.instances.get_mut(&k) else {
            out.notes
                .push(format!("ignored report for {id}: not placed"));
            return false;
        };
        if inst.owns(id.version, placement) {
            let ready =
                state == ObservedState::Ready || (state == ObservedState::Running && !readiness);
            if ready {
                inst.last_failure = None;
            } else if state.is_failure() {
                inst.last_failure = Some(state.describe());
            }
            if let Some(c) = state.failure_category()
                && inst.observed != state
            {
                *self.counters.failures.entry(c.to_string()).or_default() += 1;
            }
            inst.observe(state, now);
        } else if let Some(old) = inst
            .replacing
            .as_mut()
            .filter(|o| o.version == id.version && (placement == 0 || o.placement == placement))
        {
            if !state.is_live() {
                old.stopped = true;
            }
            old.observed = Some(state.clone());
        } else {
            out.notes.push(format!(
                "ignored report for {id} (placement {placement}): the replica's placement is {} at version {}",
                inst.placement, inst.version
            ));
            return false;
        }
        // A replacement is done once the new instance is ready and the old
        // one stopped (a surge stops the old one only after that).
        let ready = inst.observed == ObservedState::Ready
            || (inst.observed == ObservedState::Running && !readiness);
        if ready && inst.replacing.as_ref().is_some_and(|o| o.stopped) {
            inst.replacing = None;
            if !e.runtime.instances.values().any(|i| i.replacing.is_some()) {
                out.notes.push(format!(
                    "{}: rolling update to version {} complete",
                    id.app, e.current
                ));
            }
        }
        true
    }

    pub(super) fn cmd_report_job(
        &mut self,
        id: &InitJobId,
        run: PlacementId,
        state: ObservedState,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let Some(e) = self.apps.get_mut(&id.app) else {
            out.notes
                .push(format!("ignored report for {id}: no such application"));
            return Ok(());
        };
        match e
            .runtime
            .jobs
            .get_mut(&(id.workload.clone(), id.job.clone()))
            .filter(|j| j.version == id.version && (run == 0 || j.run == run))
        {
            Some(j) => {
                let (was_live, since) = (j.observed.is_live(), j.since);
                if j.observed == ObservedState::Pending && state != ObservedState::Pending {
                    // Left the queue: placed and asked, now started (or ended at once).
                    self.counters.job_queue_time.observe(now.since(since).0);
                }
                if state.has_ended() && j.observed != state {
                    let outcome = if state == (ObservedState::Exited { code: 0 }) {
                        "succeeded"
                    } else {
                        "failed"
                    };
                    *self.counters.job_runs.entry(outcome.into()).or_default() += 1;
                    if was_live {
                        self.counters.job_run_time.observe(now.since(since).0);
                    }
                }
                j.observe(state.clone(), now);
            }
            None => {
                out.notes.push(format!(
                    "ignored report for {id} (run {run}): no such job run"
                ));
                return Ok(());
            }
        }
        self.replan(&id.app, now, out);
        // A workflow job that ended freed its resources: steps waiting for
        // capacity look again now, not at their next poll.
        if id.workload == super::workflow::WORKFLOW_JOBS && state.has_ended() {
            for k in self.waiting_for_capacity() {
                self.replan(&k, now, out);
            }
        }
        Ok(())
    }

    pub(super) fn cmd_tick(&mut self, now: Timestamp, out: &mut Outcome) {
        // Highest priority first: lost instances re-placed in this tick take
        // capacity in that order (recovery ordered by priority).
        let mut due: Vec<(std::cmp::Reverse<u32>, u64, AppKey)> = self
            .apps
            .values()
            .filter(|e| e.wake_at.is_some_and(|w| w <= now))
            .map(|e| {
                (
                    std::cmp::Reverse(e.spec().spec.priority),
                    e.admitted_seq,
                    e.key.clone(),
                )
            })
            .collect();
        due.sort();
        for (_, _, key) in due {
            self.expire_lost(&key, now, out);
            self.replan(&key, now, out);
        }
        self.auto_restore(now, out);
        self.evict_overdue(now, out);
        self.drain_step(now, out);
    }
}
