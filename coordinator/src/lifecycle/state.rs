//! Lifecycle phases of an application instance (seed 000 §6.3).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Phase of an application: its "legal state" (§6.3.2), changed only by
/// the lifecycle transition function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Created, not yet arbitrated.
    Created,
    /// Passed admission: may run.
    Admitted,
    /// Arbitrated and placed, waiting for execution.
    Scheduled,
    /// Running normally.
    Running,
    /// Running degraded (resource pressure, preemption, policy).
    Degraded,
    /// Terminated explicitly or implicitly.
    Terminated,
    /// Failed and cannot recover by itself.
    Failed,
    /// Refused by admission.
    Rejected,
}

impl Phase {
    /// Every phase, in table order.
    pub const ALL: [Phase; 8] = [
        Phase::Created,
        Phase::Admitted,
        Phase::Scheduled,
        Phase::Running,
        Phase::Degraded,
        Phase::Terminated,
        Phase::Failed,
        Phase::Rejected,
    ];

    /// True while the application holds quota (admitted and not ended).
    pub fn holds_quota(self) -> bool {
        matches!(
            self,
            Phase::Admitted | Phase::Scheduled | Phase::Running | Phase::Degraded
        )
    }

    /// True while placements are held on nodes.
    pub fn holds_placements(self) -> bool {
        matches!(self, Phase::Scheduled | Phase::Running | Phase::Degraded)
    }

    /// True for phases that end in cleanup only.
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Terminated | Phase::Failed | Phase::Rejected)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
