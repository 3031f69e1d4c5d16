//! The one line `get apps` shows per application: its most important current
//! problem, or what it last did when nothing is wrong.
//!
//! Order: a failed or refused application's reason; an instance killed for
//! memory (OOM); an instance failing to start or run, with its restart count;
//! an evicted replica; what waits and why; the degradation; an instance not
//! ready yet; else the latest lifecycle event.

use super::Coordinator;
use super::entry::AppEntry;
use crate::lifecycle::Phase;
use crate::model::failure::{Failure, RuntimeFailure};
use crate::model::lifecycle_policy::FailureAction;
use crate::model::time::Timestamp;
use crate::reconcile::{Instance, InstanceKey, ObservedState};

fn is_oom(i: &Instance) -> bool {
    matches!(
        &i.observed,
        ObservedState::Failed {
            failure: Failure::Runtime(RuntimeFailure::OutOfMemory { .. })
        }
    ) || i
        .last_failure
        .as_deref()
        .is_some_and(|f| f.starts_with("OOM"))
}

/// `; held for an operator (onFailure.C: A)` when an onFailure rule holds
/// or failed the instance instead of restarting it.
fn held(e: &AppEntry, k: &InstanceKey, i: &Instance) -> String {
    let spec = e.spec();
    let Some((c, w)) = i
        .observed
        .failure_category()
        .zip(spec.workload(&k.workload))
    else {
        return String::new();
    };
    match spec.lifecycle_of(w).on_failure.action(c) {
        FailureAction::Restart => String::new(),
        a => format!("; held for an operator (onFailure.{c}: {a:?})"),
    }
}

fn failing(k: &InstanceKey, i: &Instance) -> Option<String> {
    let failure = match &i.observed {
        o if o.is_failure() => o.describe(),
        ObservedState::Ready => return None,
        // Restarting: the failure that made it restart.
        _ => i.last_failure.clone()?,
    };
    let restarts = match i.restarts {
        0 => String::new(),
        1 => " (1 restart)".into(),
        n => format!(" ({n} restarts)"),
    };
    Some(format!("{}/{}: {failure}{restarts}", k.workload, k.replica))
}

impl Coordinator {
    /// The `get apps` reason of `e` at `now`.
    pub(super) fn headline(&self, e: &AppEntry, now: Timestamp) -> String {
        let last_event = || {
            e.events
                .last()
                .and_then(|&i| self.events.get(i as u64))
                .map(|ev| ev.reason.clone())
                .unwrap_or_default()
        };
        if matches!(e.phase, Phase::Failed | Phase::Rejected | Phase::Terminated) {
            return last_event();
        }
        let instances = || e.runtime.instances.iter();
        if let Some(line) = instances()
            .filter(|(_, i)| is_oom(i))
            .find_map(|(k, i)| failing(k, i).map(|l| l + &held(e, k, i)))
        {
            return line;
        }
        if let Some(line) = instances().find_map(|(k, i)| failing(k, i).map(|l| l + &held(e, k, i)))
        {
            return line;
        }
        if let Some((k, i)) = instances().find(|(_, i)| i.disconnected.is_some()) {
            return format!(
                "{}/{} unreachable: node {} is down",
                k.workload,
                k.replica,
                i.node.as_deref().unwrap_or("-")
            );
        }
        if let Some((k, i)) = instances().find(|(_, i)| i.evicted.is_some()) {
            return format!(
                "{}/{} evicted: {}",
                k.workload,
                k.replica,
                i.evicted.as_deref().unwrap_or_default()
            );
        }
        if let Some(b) = self
            .current_plan(&e.key, now)
            .and_then(|p| p.blocked.into_iter().next())
        {
            return format!("{}: {}", b.workload, b.reason);
        }
        if let Some(d) = &e.degradation {
            return d.reason.clone();
        }
        if e.phase == Phase::Scheduled
            && let Some((k, i)) = instances().find(|(_, i)| i.observed != ObservedState::Ready)
        {
            return format!("{}/{} {}", k.workload, k.replica, i.observed.describe());
        }
        last_event()
    }
}
