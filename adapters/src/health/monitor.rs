//! Runs the checks of one running instance, one task per check, and
//! reports their transitions. Dropping the monitor stops the checks.

use super::probe::{ExecContext, ProbeOutcome, run_probe};
use super::tracker::{CheckState, Tracker};
use daros_coordinator::model::health::{CheckKind, HealthCheck};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A check changed its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthEvent {
    /// The check's name.
    pub check: String,
    /// Liveness or readiness.
    pub kind: CheckKind,
    /// Passing or failing.
    pub state: CheckState,
    /// What the last probe saw.
    pub reason: String,
}

/// The running checks of one instance.
#[derive(Debug)]
pub struct HealthMonitor {
    rx: mpsc::Receiver<HealthEvent>,
    tasks: Vec<JoinHandle<()>>,
}

impl HealthMonitor {
    /// Starts every check of `checks`.
    pub fn spawn(checks: &[HealthCheck], ctx: Arc<ExecContext>) -> Self {
        let (tx, rx) = mpsc::channel(64);
        let tasks = checks
            .iter()
            .map(|c| tokio::spawn(run_check(c.clone(), Arc::clone(&ctx), tx.clone())))
            .collect();
        Self { rx, tasks }
    }

    /// The next transition; pending forever when there are no checks.
    pub async fn next(&mut self) -> Option<HealthEvent> {
        if self.tasks.is_empty() {
            return std::future::pending().await;
        }
        self.rx.recv().await
    }
}

impl Drop for HealthMonitor {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn run_check(check: HealthCheck, ctx: Arc<ExecContext>, tx: mpsc::Sender<HealthEvent>) {
    tokio::time::sleep(Duration::from_millis(check.initial_delay.0)).await;
    let mut tracker = Tracker::new(check.failure_threshold);
    let mut tick = tokio::time::interval(Duration::from_millis(check.period.0.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let outcome = run_probe(&check, &ctx).await;
        let (passed, reason) = match outcome {
            ProbeOutcome::Pass => (true, String::from("probe passed")),
            ProbeOutcome::Fail(r) => (false, r),
        };
        tracing::trace!(check = %check.name, passed, %reason, "probe");
        if let Some(state) = tracker.record(passed) {
            let ev = HealthEvent {
                check: check.name.clone(),
                kind: check.kind,
                state,
                reason,
            };
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    }
}
