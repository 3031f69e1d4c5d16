//! Whether and when an ended instance runs again (seed 000 §4.7.2 step 4),
//! from the coordinator's pure [`LifecyclePolicy`] rules (`may_restart`,
//! `Backoff::delay`, `resetAfter`). A pure function: the supervisors only
//! execute its answer with timers.

use daros_coordinator::model::failure::Failure;
use daros_coordinator::model::lifecycle_policy::{FailureAction, LifecyclePolicy, OnExhausted};
use daros_coordinator::model::time::DurationMs;
use serde::{Deserialize, Serialize};

/// What to do after a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartDecision {
    /// Run again after `delay`; this is restart number `attempt` (1-based)
    /// of the current retry window.
    Restart {
        /// Restart number within the window.
        attempt: u32,
        /// Backoff before it.
        delay: DurationMs,
    },
    /// It ended well and is not restarted.
    Complete,
    /// It failed and may not run again: apply `on_exhausted`.
    GiveUp {
        /// What the policy says to do.
        on_exhausted: OnExhausted,
    },
}

/// Decides for a run that ended (`failed` tells whether it was a failure)
/// after `restarts` earlier restarts, having run for `ran_for`. A run that
/// lasted `resetAfter` or longer starts a fresh retry window.
pub fn decide(
    policy: &LifecyclePolicy,
    failed: bool,
    restarts: u32,
    ran_for: DurationMs,
) -> RestartDecision {
    let restarts = if ran_for >= policy.reset_after {
        0
    } else {
        restarts
    };
    if policy.may_restart(failed, restarts) {
        RestartDecision::Restart {
            attempt: restarts + 1,
            delay: policy.backoff.delay(restarts),
        }
    } else if failed {
        RestartDecision::GiveUp {
            on_exhausted: policy.on_exhausted,
        }
    } else {
        RestartDecision::Complete
    }
}

/// [`decide`] for a run that ended with `failure` (`None`: it ended well):
/// a failure whose category the policy's `onFailure` does not restart gives
/// up at once with that action.
pub fn decide_for(
    policy: &LifecyclePolicy,
    failure: Option<&Failure>,
    restarts: u32,
    ran_for: DurationMs,
) -> RestartDecision {
    let action = failure.map(|f| policy.on_failure.action(f.category()));
    match action {
        Some(FailureAction::WaitForOperator) => RestartDecision::GiveUp {
            on_exhausted: OnExhausted::WaitForOperator,
        },
        Some(FailureAction::FailAndStopDependents) => RestartDecision::GiveUp {
            on_exhausted: OnExhausted::FailAndStopDependents,
        },
        _ => decide(policy, failure.is_some(), restarts, ran_for),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::model::lifecycle_policy::{Backoff, RestartPolicy};

    fn policy(restart: RestartPolicy, max: Option<u32>) -> LifecyclePolicy {
        LifecyclePolicy {
            restart,
            max_retries: max,
            backoff: Backoff {
                initial: DurationMs(100),
                max: DurationMs(350),
                multiplier: 2,
            },
            on_exhausted: OnExhausted::WaitForOperator,
            on_failure: Default::default(),
            reset_after: DurationMs::from_secs(60),
            disconnect: Default::default(),
            rollout: Default::default(),
        }
    }

    #[test]
    fn restarts_with_growing_capped_delay_until_exhausted() {
        let p = policy(RestartPolicy::OnFailure, Some(3));
        let short = DurationMs(10);
        let got: Vec<_> = (0..4).map(|r| decide(&p, true, r, short)).collect();
        assert_eq!(
            got,
            [
                RestartDecision::Restart {
                    attempt: 1,
                    delay: DurationMs(100)
                },
                RestartDecision::Restart {
                    attempt: 2,
                    delay: DurationMs(200)
                },
                RestartDecision::Restart {
                    attempt: 3,
                    delay: DurationMs(350)
                },
                RestartDecision::GiveUp {
                    on_exhausted: OnExhausted::WaitForOperator
                },
            ]
        );
        assert_eq!(decide(&p, false, 0, short), RestartDecision::Complete);
    }

    #[test]
    fn a_long_run_resets_the_window() {
        let p = policy(RestartPolicy::Always, Some(1));
        assert_eq!(
            decide(&p, true, 1, DurationMs(10)),
            RestartDecision::GiveUp {
                on_exhausted: OnExhausted::WaitForOperator
            }
        );
        assert_eq!(
            decide(&p, true, 1, DurationMs::from_secs(60)),
            RestartDecision::Restart {
                attempt: 1,
                delay: DurationMs(100)
            }
        );
        // Always restarts clean exits too; Never restarts nothing.
        assert!(matches!(
            decide(&p, false, 0, DurationMs(1)),
            RestartDecision::Restart { .. }
        ));
        let n = policy(RestartPolicy::Never, None);
        assert_eq!(
            decide(&n, false, 0, DurationMs(1)),
            RestartDecision::Complete
        );
        assert!(matches!(
            decide(&n, true, 0, DurationMs(1)),
            RestartDecision::GiveUp { .. }
        ));
    }

    #[test]
    fn on_failure_gives_up_per_category() {
        use daros_coordinator::model::failure::RuntimeFailure;
        let mut p = policy(RestartPolicy::Always, None);
        p.on_failure.out_of_memory = Some(FailureAction::WaitForOperator);
        let oom = Failure::Runtime(RuntimeFailure::OutOfMemory { limit: None });
        let crash = Failure::Runtime(RuntimeFailure::ProcessExit {
            exit_code: Some(1),
            signal: None,
        });
        let short = DurationMs(10);
        assert_eq!(
            decide_for(&p, Some(&oom), 0, short),
            RestartDecision::GiveUp {
                on_exhausted: OnExhausted::WaitForOperator
            }
        );
        assert!(matches!(
            decide_for(&p, Some(&crash), 0, short),
            RestartDecision::Restart { attempt: 1, .. }
        ));
        assert_eq!(decide_for(&p, None, 0, short), decide(&p, false, 0, short));
    }
}
