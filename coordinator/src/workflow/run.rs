//! The state of an application's workflow and which steps may start: pure
//! bookkeeping, driven by the coordinator (`state/workflow.rs`).

use super::{GroupMode, Step, Workflow};
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Where a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StepPhase {
    /// Not started: what it waits for is in its message.
    Pending,
    /// Started (a deploy waits for its workloads, a job runs, a group's
    /// steps run).
    Running,
    /// An approval step waiting for an operator.
    WaitingApproval,
    /// A job step no node has the resources for now (it starts when one
    /// has): not a failure, not a rejection.
    WaitingCapacity,
    /// Done.
    Succeeded,
    /// Failed for good (retries spent, timeout, handler error).
    Failed,
}

impl StepPhase {
    /// True once it will not change.
    pub fn is_final(self) -> bool {
        matches!(self, StepPhase::Succeeded | StepPhase::Failed)
    }
}

/// One step's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    /// Phase.
    pub phase: StepPhase,
    /// Runs started (job steps).
    #[serde(default)]
    pub attempts: u32,
    /// When the phase last changed.
    pub since: Timestamp,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Timestamp>,
    /// Node its job runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What it waits for, did, or why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The run of an application's workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRun {
    /// Spec version whose workflow this is.
    pub version: u32,
    /// Every step's status, by name.
    pub steps: BTreeMap<String, StepStatus>,
    /// Suspended by an operator: no step starts (running ones go on).
    #[serde(default)]
    pub suspended: bool,
    /// Why the workflow failed, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl WorkflowRun {
    /// A run of `wf` at `version`, nothing started.
    pub fn new(wf: &Workflow, version: u32, now: Timestamp) -> Self {
        let steps = wf
            .all()
            .into_iter()
            .map(|(s, _)| {
                (
                    s.name.clone(),
                    StepStatus {
                        phase: StepPhase::Pending,
                        attempts: 0,
                        since: now,
                        started: None,
                        node: None,
                        message: String::new(),
                    },
                )
            })
            .collect();
        Self {
            version,
            steps,
            suspended: false,
            failed: None,
        }
    }

    /// Phase of `step` (Pending when unknown).
    pub fn phase(&self, step: &str) -> StepPhase {
        self.steps.get(step).map_or(StepPhase::Pending, |s| s.phase)
    }

    /// Moves `step` to `phase` with `message` (the time only on a change).
    pub fn set(
        &mut self,
        step: &str,
        phase: StepPhase,
        message: impl Into<String>,
        now: Timestamp,
    ) {
        if let Some(s) = self.steps.get_mut(step) {
            if s.phase != phase {
                s.since = now;
            }
            if phase == StepPhase::Running && s.started.is_none() {
                s.started = Some(now);
            }
            s.phase = phase;
            s.message = message.into();
        }
    }

    /// True when every step succeeded.
    pub fn succeeded(&self) -> bool {
        self.steps.values().all(|s| s.phase == StepPhase::Succeeded)
    }

    /// Workloads that deploy steps have started (the others wait).
    pub fn released(&self, wf: &Workflow) -> BTreeSet<String> {
        wf.all()
            .into_iter()
            .filter(|(s, _)| !matches!(self.phase(&s.name), StepPhase::Pending))
            .filter_map(|(s, _)| s.deploys())
            .flat_map(|d| d.workloads)
            .collect()
    }

    /// Pending steps (and those waiting for capacity) whose turn it is: their level's `dependsOn` succeeded,
    /// their group runs, and in a serial group the step before succeeded.
    /// For the others, why they wait.
    pub fn startable<'a>(&self, wf: &'a Workflow) -> (Vec<&'a Step>, Vec<(&'a Step, String)>) {
        let (mut go, mut wait) = (Vec::new(), Vec::new());
        self.level(&wf.steps, None, &mut go, &mut wait);
        (go, wait)
    }

    fn level<'a>(
        &self,
        steps: &'a [Step],
        group: Option<&'a Step>,
        go: &mut Vec<&'a Step>,
        wait: &mut Vec<(&'a Step, String)>,
    ) {
        let serial = group.is_some_and(|g| g.mode.unwrap_or_default() == GroupMode::Serial);
        for (i, s) in steps.iter().enumerate() {
            // A step waiting for capacity is tried again.
            if matches!(
                self.phase(&s.name),
                StepPhase::Pending | StepPhase::WaitingCapacity
            ) {
                let mut why: Vec<String> = s
                    .depends_on
                    .iter()
                    .filter(|d| self.phase(d) != StepPhase::Succeeded)
                    .map(|d| format!("waits for step {d}"))
                    .collect();
                if serial && i > 0 && self.phase(&steps[i - 1].name) != StepPhase::Succeeded {
                    why.push(format!("serial: waits for step {}", steps[i - 1].name));
                }
                if let Some(g) = group
                    && self.phase(&g.name) != StepPhase::Running
                {
                    why.push(format!("its group {} has not started", g.name));
                }
                if why.is_empty() {
                    go.push(s);
                } else {
                    wait.push((s, why.join("; ")));
                }
            }
            if !s.steps.is_empty() {
                self.level(&s.steps, Some(s), go, wait);
            }
        }
    }
}
