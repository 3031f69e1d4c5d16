//! The threshold logic of one check, without I/O: consecutive failures up
//! to `failureThreshold` flip it to failing, one success flips it back.

use serde::{Deserialize, Serialize};

/// What a check currently says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckState {
    /// No verdict yet (no success, fewer failures than the threshold).
    Unknown,
    /// The last probe passed.
    Passing,
    /// `failureThreshold` consecutive probes failed.
    Failing,
}

/// Consecutive-result tracker of one check.
#[derive(Debug, Clone)]
pub struct Tracker {
    failure_threshold: u32,
    failures: u32,
    state: CheckState,
}

impl Tracker {
    /// A tracker that fails after `failure_threshold` (at least 1)
    /// consecutive failures.
    pub fn new(failure_threshold: u32) -> Self {
        Self {
            failure_threshold: failure_threshold.max(1),
            failures: 0,
            state: CheckState::Unknown,
        }
    }

    /// The current verdict.
    pub fn state(&self) -> CheckState {
        self.state
    }

    /// Records one probe result; returns the new state when it changed.
    pub fn record(&mut self, passed: bool) -> Option<CheckState> {
        let next = if passed {
            self.failures = 0;
            CheckState::Passing
        } else {
            self.failures = self.failures.saturating_add(1);
            if self.failures >= self.failure_threshold {
                CheckState::Failing
            } else {
                self.state
            }
        };
        (next != self.state).then(|| {
            self.state = next;
            next
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flips_on_threshold_and_on_first_success() {
        let mut t = Tracker::new(3);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), Some(CheckState::Failing));
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(true), Some(CheckState::Passing));
        assert_eq!(t.record(true), None);
        assert_eq!(t.record(false), None);
        assert_eq!(
            t.record(true),
            None,
            "a failure below the threshold is forgotten"
        );
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), Some(CheckState::Failing));
        assert_eq!(Tracker::new(0).record(false), Some(CheckState::Failing));
    }
}
