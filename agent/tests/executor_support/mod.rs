//! Shared by the executor tests: a runtime per agent life and waiting for the
//! executor's reports.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use daros_agent::control::work::NodeReport;
use daros_coordinator::ObservedState;
use tokio::sync::broadcast;

/// A two-worker runtime (one per agent life in restart tests).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub fn subject_of(r: &NodeReport) -> String {
    match r {
        NodeReport::Instance { instance, .. } => instance.to_string(),
        NodeReport::InitJob { job, .. } => job.to_string(),
    }
}

pub fn parts(r: &NodeReport) -> (u32, &ObservedState) {
    match r {
        NodeReport::Instance { attempt, state, .. }
        | NodeReport::InitJob { attempt, state, .. } => (*attempt, state),
    }
}

/// Waits for a report of `subject` at `attempt` matching `pred`.
pub async fn wait_report(
    rx: &mut broadcast::Receiver<NodeReport>,
    subject: &str,
    attempt: u32,
    what: &str,
    pred: impl Fn(&ObservedState) -> bool,
) -> ObservedState {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Ok(r)) => {
                let (a, st) = parts(&r);
                if subject_of(&r) == subject && a == attempt && pred(st) {
                    return st.clone();
                }
                seen.push(r);
            }
            Ok(Err(e)) => panic!("report channel: {e}"),
            Err(_) => {
                panic!("timed out waiting for {subject} attempt {attempt} {what}; saw {seen:#?}")
            }
        }
    }
}
