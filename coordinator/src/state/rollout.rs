//! Rollouts as the coordinator tracks them: one begins when an update
//! replaces running replicas, completes when none is being replaced any more,
//! and fails when the planner says so (a new instance exhausted its restarts,
//! or the progress deadline passed). A failed rollout rolls back by itself
//! to the version it started from when its workload's `autoRollback` says so
//! (once: a rollback that fails too holds), else it holds for an operator.
//! A `canary` workload is promoted when its canaries pass their health gate
//! (or by an operator); a `blueGreen` one switches once its new set is ready.
//! Each step is a decision record saying why.

use super::Coordinator;
use crate::command::Outcome;
use crate::decision::{DecisionId, DecisionKind};
use crate::error::CoordinatorError;
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use crate::reconcile::{RolloutStep, RolloutStepKind};
use crate::version::VersionOrigin;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// No workload promoted (a plan without a rollout).
pub(super) static NO_PROMOTION: BTreeSet<String> = BTreeSet::new();

/// The rollout under way of one application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// The last version whose rollout completed: what a rollback restores.
    pub from: u32,
    /// The version being rolled out.
    pub to: u32,
    /// When it began (the progress deadline counts from here).
    pub started: Timestamp,
    /// True when it is itself an automatic rollback.
    pub rollback: bool,
    /// Why it failed, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Canary workloads promoted (their gate passed, or by an operator).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub promoted: BTreeSet<String>,
    /// The progress deadline counts from here once a canary was promoted
    /// (waiting for a promotion is not being late).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_from: Option<Timestamp>,
    /// Steps recorded as decisions (`kind/workload`), each once.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub recorded: BTreeSet<String>,
}

impl Coordinator {
    /// After an update to `version` (from `previous`): a rollout is under way
    /// while any replica is being replaced. A rollout that supersedes an
    /// unfinished one keeps its `from`: the last version known good.
    pub(super) fn begin_rollout(
        &mut self,
        key: &AppKey,
        previous: u32,
        version: u32,
        origin: VersionOrigin,
        now: Timestamp,
    ) {
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        let replacing = e.runtime.instances.values().any(|i| i.replacing.is_some());
        let from = e.rollout.as_ref().map_or(previous, |r| r.from);
        e.rollout = replacing.then_some(Rollout {
            from,
            to: version,
            started: now,
            rollback: matches!(origin, VersionOrigin::AutoRollback { .. }),
            failed: None,
            promoted: BTreeSet::new(),
            deadline_from: None,
            recorded: BTreeSet::new(),
        });
    }

    /// After a plan: completes the rollout when nothing is being replaced any
    /// more, or handles its failure (`failed`: workload, why) once. True when
    /// it rolled back (the application was planned afresh).
    pub(super) fn track_rollout(
        &mut self,
        key: &AppKey,
        failed: Option<(String, String)>,
        now: Timestamp,
        out: &mut Outcome,
    ) -> bool {
        let Some(e) = self.apps.get_mut(key) else {
            return false;
        };
        let Some(r) = e.rollout.clone() else {
            return false;
        };
        if !e.runtime.instances.values().any(|i| i.replacing.is_some()) {
            e.rollout = None;
            let reason = format!(
                "rollout to version {} complete after {}",
                r.to,
                now.since(r.started)
            );
            self.rollout_decision(key, r.to, true, reason, now, out);
            return false;
        }
        let Some((workload, why)) = failed else {
            return false;
        };
        if r.failed.is_some() {
            return false;
        }
        let policy = e
            .spec()
            .workload(&workload)
            .map(|w| e.spec().lifecycle_of(w).rollout)
            .unwrap_or_default();
        let from_spec = e.version(r.from).map(|v| (*v.spec).clone());
        if let Some(ro) = e.rollout.as_mut() {
            ro.failed = Some(why.clone());
        }
        let back = policy.auto_rollback && !r.rollback && r.from != r.to;
        match from_spec.filter(|_| back) {
            Some(spec) => {
                let reason = format!(
                    "rollout to version {} failed: {why}; rolling back to the spec of version {} (autoRollback)",
                    r.to, r.from
                );
                self.rollout_decision(key, r.to, false, reason, now, out);
                let mut pending = Vec::new();
                if let Err(e) = self.update_spec(
                    key,
                    spec,
                    VersionOrigin::AutoRollback { to: r.from },
                    false,
                    now,
                    out,
                    &mut pending,
                ) {
                    out.notes
                        .push(format!("{key}: automatic rollback refused: {e}"));
                    return false;
                }
                true
            }
            None => {
                let why_held = if r.rollback {
                    "it was itself a rollback"
                } else {
                    "autoRollback is off"
                };
                let reason = format!(
                    "rollout to version {} failed: {why}; holding ({why_held}): replicas not yet replaced keep running; `darosctl rollback --to {}` or `darosctl operate abort` rolls back, or apply a fix",
                    r.to, r.from
                );
                self.rollout_decision(key, r.to, false, reason, now, out);
                false
            }
        }
    }

    /// Records the steps of a plan (each once) and carries out promotions.
    /// True when a workload was promoted (the application must be planned
    /// again).
    pub(super) fn rollout_steps(
        &mut self,
        key: &AppKey,
        steps: &[RolloutStep],
        now: Timestamp,
        out: &mut Outcome,
    ) -> bool {
        let mut promoted = false;
        for s in steps {
            let Some(r) = self.apps.get_mut(key).and_then(|e| e.rollout.as_mut()) else {
                return promoted;
            };
            let id = format!("{:?}/{}", s.kind, s.workload);
            if !r.recorded.insert(id) {
                continue;
            }
            if s.kind == RolloutStepKind::Promote {
                promoted |= r.promoted.insert(s.workload.clone());
                r.deadline_from = Some(now);
            }
            let to = r.to;
            self.rollout_decision(key, to, true, s.reason.clone(), now, out);
        }
        promoted
    }

    /// `promote`: the canary workloads of the rollout under way go on to
    /// their other replicas, whatever their gate says.
    pub(super) fn op_promote(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let e = self
            .apps
            .get_mut(key)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        let spec = e.spec_arc();
        let r = e
            .rollout
            .as_mut()
            .ok_or_else(|| CoordinatorError::NothingToPromote(key.clone()))?;
        let waiting: Vec<String> = spec
            .spec
            .workloads
            .iter()
            .filter(|w| spec.lifecycle_of(w).rollout.canary().is_some())
            .map(|w| w.name.clone())
            .filter(|w| !r.promoted.contains(w))
            .collect();
        if waiting.is_empty() {
            return Err(CoordinatorError::NothingToPromote(key.clone()));
        }
        r.promoted.extend(waiting.iter().cloned());
        r.deadline_from = Some(now);
        let to = r.to;
        let reason = format!(
            "canary of {} promoted by an operator: version {to} goes on to every replica",
            waiting.join(", ")
        );
        self.rollout_decision(key, to, true, reason, now, out);
        self.replan(key, now, out);
        Ok(())
    }

    /// `abort`: roll back the rollout under way to the version it started from.
    pub(super) fn op_abort(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let r = self
            .apps
            .get(key)
            .and_then(|e| e.rollout.clone())
            .ok_or_else(|| CoordinatorError::NoRollout(key.clone()))?;
        let reason = format!(
            "rollout to version {} aborted by an operator; rolling back to the spec of version {}",
            r.to, r.from
        );
        self.rollout_decision(key, r.to, false, reason, now, out);
        self.cmd_rollback(key, r.from, now, out)
    }

    fn rollout_decision(
        &mut self,
        key: &AppKey,
        version: u32,
        accepted: bool,
        reason: String,
        now: Timestamp,
        out: &mut Outcome,
    ) -> DecisionId {
        self.plain_decision(
            key,
            DecisionKind::Rollout,
            version,
            accepted,
            reason,
            now,
            out,
        )
    }
}
