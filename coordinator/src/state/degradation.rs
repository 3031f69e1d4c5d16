//! The platform's degradation policy (seed 000 §8.2.1
//! `GlobalDegradationPolicy`) applied to applications that lost capacity they
//! could not get back (preempted, or lost with a node and not re-placed):
//! they stay Degraded and are restored when capacity returns — or, per the
//! policy, they are evicted at once or once degraded for `evictAfter`:
//! Terminated through the `Evicted` edge (§6.4 "策略驱逐"), stopped on their
//! nodes, their placements and quota released.

use super::Coordinator;
use super::entry::{AppEntry, DegradationCause};
use crate::command::Outcome;
use crate::lifecycle::{Input, Phase, SystemEvent, Target, Trigger};
use crate::model::names::AppKey;
use crate::model::policy::CapacityLossAction;
use crate::model::time::Timestamp;

impl Coordinator {
    /// After `key` lost capacity (`why`): evicts it when the Global
    /// degradation policy says so at once. True when it was evicted.
    pub(super) fn on_capacity_loss(
        &mut self,
        key: &AppKey,
        why: &str,
        now: Timestamp,
        out: &mut Outcome,
    ) -> bool {
        let Some(e) = self.apps.get(key) else {
            return false;
        };
        let Some(g) = e
            .effective
            .as_ref()
            .and_then(|p| p.global_degradation.clone())
        else {
            return false;
        };
        if !g.rule.applies_to(e.spec().spec.priority)
            || g.rule.on_capacity_loss != CapacityLossAction::Evict
            || !e.phase.holds_placements()
        {
            return false;
        }
        let reason = format!(
            "{why}; evicted by the global degradation policy {} (onCapacityLoss: Evict)",
            g.policy
        );
        self.evict_app(key, &reason, &g.policy, now, out);
        true
    }

    /// Applications degraded by a capacity loss for longer than their
    /// policy's `evictAfter` are evicted (on every tick).
    pub(super) fn evict_overdue(&mut self, now: Timestamp, out: &mut Outcome) {
        let due: Vec<(AppKey, String, String)> = self
            .apps
            .values()
            .filter(|e| {
                e.phase == Phase::Degraded
                    && e.degradation.as_ref().is_some_and(|d| {
                        matches!(
                            d.cause,
                            DegradationCause::Preemption | DegradationCause::NodeLoss
                        )
                    })
            })
            .filter_map(|e| {
                let g = e.effective.as_ref()?.global_degradation.as_ref()?;
                let after = g.rule.evict_after?;
                let since = self.degraded_since(e)?;
                (g.rule.applies_to(e.spec().spec.priority) && now >= since.plus(after)).then(
                    || {
                        let why = e.degradation.as_ref().map_or("", |d| d.reason.as_str());
                        (
                            e.key.clone(),
                            format!(
                                "degraded for {} ({why}); evicted by the global degradation policy {} (evictAfter {after})",
                                now.since(since),
                                g.policy
                            ),
                            g.policy.clone(),
                        )
                    },
                )
            })
            .collect();
        for (key, reason, policy) in due {
            self.evict_app(&key, &reason, &policy, now, out);
        }
    }

    /// When `e` last became Degraded.
    pub(super) fn degraded_since(&self, e: &AppEntry) -> Option<Timestamp> {
        e.events.iter().rev().find_map(|&i| {
            let ev = self.events.get(i as u64)?;
            (ev.to == Target::Phase(Phase::Degraded) && ev.from != Some(Phase::Degraded))
                .then_some(ev.time)
        })
    }

    fn evict_app(
        &mut self,
        key: &AppKey,
        reason: &str,
        policy: &str,
        now: Timestamp,
        out: &mut Outcome,
    ) {
        if let Ok(step) = self.transition_app(
            key,
            Input::Event(SystemEvent::Evicted),
            Trigger::Policy,
            reason.to_string(),
            vec![policy.to_string()],
            Vec::new(),
            now,
            out,
        ) {
            self.teardown(key, &step.actions, reason, None, out);
        }
    }
}
