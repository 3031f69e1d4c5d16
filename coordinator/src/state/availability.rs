//! SLA attainment (seed 000 §11.3 "应用SLA达成率"): for an application that
//! declares `sla.availability`, the share of time it was Running since it
//! first ran, out of the time it was meant to run. Time Terminated or
//! Rejected (stopped by a user, refused) is not counted; Scheduled, Degraded,
//! Failed and waiting again after it first ran count as unavailable. Kept as
//! replicated facts: every transition adds the time spent in the phase left.

use super::Coordinator;
use crate::lifecycle::{Phase, Target};
use crate::model::names::AppKey;
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};

/// Time an application was available and not, since it first ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Uptime {
    /// When it first reached Running (nothing counts before).
    pub first_running: Option<Timestamp>,
    /// Milliseconds Running.
    pub up_ms: u64,
    /// Milliseconds meant to run but not Running.
    pub down_ms: u64,
    /// When its current phase began.
    pub phase_since: Option<Timestamp>,
}

impl Uptime {
    /// Adds the time spent in `phase` (being left, or still in at `now`).
    fn add(&mut self, phase: Phase, now: Timestamp) {
        let (Some(_), Some(since)) = (self.first_running, self.phase_since) else {
            return;
        };
        let ms = now.since(since).0;
        match phase {
            Phase::Running => self.up_ms += ms,
            Phase::Terminated | Phase::Rejected => {}
            _ => self.down_ms += ms,
        }
    }

    /// The share of counted time it was Running, as of `now` in `phase`.
    pub fn attained(&self, phase: Phase, now: Timestamp) -> Option<f64> {
        let mut u = *self;
        u.add(phase, now);
        let total = u.up_ms + u.down_ms;
        (total > 0).then(|| u.up_ms as f64 / total as f64)
    }
}

impl Coordinator {
    /// `key` moves from `from` to `to` at `now`.
    pub(super) fn track_uptime(
        &mut self,
        key: &AppKey,
        from: Option<Phase>,
        to: Target,
        now: Timestamp,
    ) {
        let (Some(e), Target::Phase(to)) = (self.apps.get_mut(key), to) else {
            return;
        };
        if let Some(from) = from {
            e.uptime.add(from, now);
        }
        if to == Phase::Running && e.uptime.first_running.is_none() {
            e.uptime.first_running = Some(now);
        }
        e.uptime.phase_since = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopped_time_is_not_counted_and_degraded_time_is() {
        let mut u = Uptime::default();
        // Before it first runs nothing counts.
        u.add(Phase::Scheduled, Timestamp(1_000));
        assert_eq!(u.attained(Phase::Scheduled, Timestamp(1_000)), None);
        u.first_running = Some(Timestamp(1_000));
        u.phase_since = Some(Timestamp(1_000));
        u.add(Phase::Running, Timestamp(10_000));
        u.phase_since = Some(Timestamp(10_000));
        u.add(Phase::Degraded, Timestamp(11_000));
        u.phase_since = Some(Timestamp(11_000));
        u.add(Phase::Terminated, Timestamp(50_000));
        u.phase_since = Some(Timestamp(50_000));
        assert_eq!((u.up_ms, u.down_ms), (9_000, 1_000));
        let a = u.attained(Phase::Running, Timestamp(60_000)).unwrap();
        assert!((a - 19.0 / 20.0).abs() < 1e-9, "{a}");
    }
}
