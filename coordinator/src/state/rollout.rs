//! Rollouts as the coordinator tracks them: one begins when an update
//! replaces running replicas, completes when none is being replaced any more,
//! and fails when the planner says so (a new instance exhausted its restarts,
//! or the progress deadline passed). A failed rollout rolls back by itself
//! to the version it started from when its workload's `autoRollback` says so
//! (once: a rollback that fails too holds), else it holds for an operator.
//! Each step is a decision record saying why.

use super::Coordinator;
use crate::command::Outcome;
use crate::decision::{Decision, DecisionId, DecisionKind};
use crate::error::CoordinatorError;
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use crate::version::VersionOrigin;
use serde::{Deserialize, Serialize};

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
        let pool = self
            .apps
            .get(key)
            .map(|e| e.spec().pool().to_string())
            .unwrap_or_default();
        self.push_decision(
            Decision {
                id: DecisionId(0),
                time: now,
                kind: DecisionKind::Rollout,
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
}
