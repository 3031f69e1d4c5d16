//! Desired → observed convergence (seed 000 §11.3): when a user changes what
//! an application should be (creates it, updates its spec, scales, starts
//! it), the clock starts; it stops at the first report after which every
//! wanted replica runs the version in force and is ready, and nothing of an
//! older version is left. The time is observed into a histogram by what
//! started it. A change while an earlier one has not converged keeps the
//! earlier start (the state has not caught up since then); a stop or a
//! failure abandons it (counted apart).

use super::Coordinator;
use crate::lifecycle::Phase;
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use crate::reconcile::ObservedState;
use serde::{Deserialize, Serialize};

/// What started a convergence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ConvergeCause {
    /// A new application.
    Create,
    /// A new version of its spec (apply, rollback).
    Update,
    /// A change of replicas.
    Scale,
    /// Started after a stop.
    Start,
}

impl ConvergeCause {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ConvergeCause::Create => "create",
            ConvergeCause::Update => "update",
            ConvergeCause::Scale => "scale",
            ConvergeCause::Start => "start",
        }
    }
}

/// A convergence under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Converging {
    /// Since when observed state has not caught up.
    pub since: Timestamp,
    /// What started it.
    pub cause: ConvergeCause,
}

impl Coordinator {
    /// Desired state of `key` changed at `now` because of `cause`.
    pub(super) fn mark_converging(&mut self, key: &AppKey, cause: ConvergeCause, now: Timestamp) {
        if let Some(e) = self.apps.get_mut(key)
            && e.converging.is_none()
        {
            e.converging = Some(Converging { since: now, cause });
        }
    }

    /// After a report or a plan: observes the convergence of `key` when its
    /// observed state now matches the desired one, or abandons it when the
    /// application stopped or failed.
    pub(super) fn check_converged(&mut self, key: &AppKey, now: Timestamp) {
        let Some(e) = self.apps.get_mut(key) else {
            return;
        };
        let Some(c) = e.converging else {
            return;
        };
        match e.phase {
            Phase::Running => {}
            Phase::Terminated | Phase::Failed | Phase::Rejected => {
                e.converging = None;
                *self
                    .counters
                    .convergence_abandoned
                    .entry(c.cause.as_str().into())
                    .or_default() += 1;
                return;
            }
            _ => return,
        }
        let current = e.current;
        let converged = e.spec().spec.workloads.iter().all(|w| {
            let ready = e
                .runtime
                .instances
                .iter()
                .filter(|(k, i)| {
                    k.workload == w.name
                        && i.version == current
                        && i.replacing.is_none()
                        && i.observed == ObservedState::Ready
                })
                .count();
            ready == e.target(&w.name) as usize
        }) && e
            .runtime
            .instances
            .values()
            .all(|i| i.version == current && i.replacing.is_none());
        if converged {
            e.converging = None;
            self.counters
                .convergence
                .entry(c.cause.as_str().into())
                .or_default()
                .observe(now.since(c.since).0);
        }
    }
}
