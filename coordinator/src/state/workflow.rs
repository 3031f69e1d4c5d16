//! The workflow engine inside the coordinator: before each plan of an
//! application with `workflow.steps`, its run advances — steps whose turn it
//! is start (a deploy releases its workloads to the planner, an approval
//! waits for an operator, a job step runs its job type's process on a node
//! with room for it, through the init-job runtime path), running steps
//! finish from what is observed (workloads ready, job exits), failures are
//! retried per `retries`, and a failed step fails the workflow. Every step
//! change that an operator acts on (waiting for capacity, approval, failure,
//! suspend/resume) is a `Workflow` decision with its reason.

use super::Coordinator;
use super::entry::AppEntry;
use crate::command::Outcome;
use crate::decision::{DecisionId, DecisionKind};
use crate::error::CoordinatorError;
use crate::jobs::{self, JobRun};
use crate::model::application::Application;
use crate::model::names::AppKey;
use crate::model::runtime::{OsType, RuntimeRequirement, RuntimeSpec, RuntimeType};
use crate::model::security::WorkloadSecurity;
use crate::model::time::Timestamp;
use crate::placement::ResVec;
use crate::policy::PolicyCheck;
use crate::reconcile::{ActionKind, InitJobId, JobLaunch, JobStatus, ObservedState, RuntimeAction};
use crate::workflow::Step;
use crate::workflow::run::{StepPhase, WorkflowRun};
use std::collections::BTreeSet;

/// Key of workflow job runs in an application's runtime jobs (a workload
/// cannot have this name in an application with a workflow).
pub const WORKFLOW_JOBS: &str = "workflow";

/// A job step's run, from its job type (a handler error or panic is the
/// step's failure).
fn job_run(step: &Step) -> Result<JobRun, String> {
    let t = jobs::get(&step.kind)
        .ok_or_else(|| format!("job type {:?} is not registered", step.kind))?;
    jobs::guarded(t.name(), &format!("step {}", step.name), || {
        t.run(&step.properties)
    })?
}

fn demand(r: &JobRun) -> ResVec {
    ResVec {
        cpu: r.resources.cpu.request.map_or(0, |c| c.0),
        memory: r.resources.memory.request.map_or(0, |m| m.0),
        gpu: r.resources.gpu.request.map_or(0, |g| u64::from(g.0)),
    }
}

fn fits(cap: ResVec, d: ResVec) -> bool {
    cap.cpu >= d.cpu && cap.memory >= d.memory && cap.gpu >= d.gpu
}

fn words(d: ResVec) -> String {
    format!(
        "cpu {}m, memory {} MiB, gpu {}",
        d.cpu,
        d.memory >> 20,
        d.gpu
    )
}

impl Coordinator {
    /// Admission checks of a workflow's job steps: a step no node of the
    /// cluster could ever run (it asks more than any node has) is refused
    /// here, with the reason: a rejection, not a wait.
    pub(super) fn workflow_checks(&self, spec: &Application) -> Vec<PolicyCheck> {
        let Some(wf) = &spec.spec.workflow else {
            return Vec::new();
        };
        let process = RuntimeRequirement {
            runtime_type: RuntimeType::Process,
            os: OsType::Linux,
        };
        let caps: Vec<(String, ResVec)> = self
            .cluster
            .nodes()
            .iter()
            .filter(|n| n.registered && !n.removed && n.supports(&process))
            .map(|n| (n.spec.name.clone(), n.cap))
            .collect();
        let mut checks = Vec::new();
        for (s, _) in wf.all() {
            if jobs::get(&s.kind).is_none() {
                continue;
            }
            let rule = format!("workflow.{}", s.name);
            let (passed, detail) = match job_run(s) {
                Err(why) => (false, why),
                Ok(_) if caps.is_empty() => (
                    true,
                    "no node registered yet: checked when it starts".into(),
                ),
                Ok(r) => {
                    let d = demand(&r);
                    match caps.iter().find(|(_, c)| fits(*c, d)) {
                        Some((n, _)) => (true, format!("{} fits node {n}", words(d))),
                        None => {
                            let most = caps.iter().fold(ResVec::default(), |m, (_, c)| ResVec {
                                cpu: m.cpu.max(c.cpu),
                                memory: m.memory.max(c.memory),
                                gpu: m.gpu.max(c.gpu),
                            });
                            (
                                false,
                                format!(
                                    "step {} asks {}; no node of the cluster could ever run it (the largest have {}): rejected, not waiting",
                                    s.name,
                                    words(d),
                                    words(most)
                                ),
                            )
                        }
                    }
                }
            };
            checks.push(PolicyCheck {
                rule,
                passed,
                detail,
                policy: None,
            });
        }
        checks
    }

    /// Applications with a workflow step waiting for capacity.
    pub(super) fn waiting_for_capacity(&self) -> Vec<AppKey> {
        self.apps
            .values()
            .filter(|e| {
                e.workflow.as_ref().is_some_and(|r| {
                    r.steps
                        .values()
                        .any(|s| s.phase == StepPhase::WaitingCapacity)
                })
            })
            .map(|e| e.key.clone())
            .collect()
    }

    /// Workloads the workflow has released, `None` without a workflow (all).
    pub(super) fn released(e: &AppEntry) -> Option<BTreeSet<String>> {
        let wf = e.spec().spec.workflow.as_ref()?;
        Some(
            e.workflow
                .as_ref()
                .filter(|r| r.version == e.current)
                .map(|r| r.released(wf))
                .unwrap_or_default(),
        )
    }

    /// Advances the workflow of `key`; returns when it wants to be looked at
    /// again (a timeout).
    pub(super) fn advance_workflow(
        &mut self,
        key: &AppKey,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Option<Timestamp> {
        let e = self.apps.get(key)?;
        if !e.phase.holds_placements() {
            return None;
        }
        let spec = e.spec_arc();
        let wf = spec.spec.workflow.as_ref()?;
        let version = e.current;
        let mut run = match e.workflow.clone() {
            Some(r) if r.version == version => r,
            _ => WorkflowRun::new(wf, version, now),
        };
        let mut wake: Option<Timestamp> = None;
        let mut notes: Vec<(String, bool)> = Vec::new();
        // Settle what runs, then start what may; again while anything moved.
        for _ in 0..=wf.all().len() {
            let before = run.clone();
            self.settle_steps(key, wf, &mut run, now, &mut notes, &mut wake, out);
            if run.failed.is_none() && !run.suspended {
                let (go, waiting) = run.startable(wf);
                for (s, why) in waiting {
                    if let Some(st) = run.steps.get_mut(&s.name) {
                        st.message = why;
                    }
                }
                for s in go {
                    self.start_step(key, s, version, &mut run, now, &mut notes, out);
                }
            }
            if run == before {
                break;
            }
        }
        // A step waiting for capacity looks again every second.
        if run
            .steps
            .values()
            .any(|s| s.phase == StepPhase::WaitingCapacity)
        {
            let again = now.plus(crate::model::time::DurationMs::from_secs(1));
            wake = Some(wake.map_or(again, |w| w.min(again)));
        }
        if let Some(e) = self.apps.get_mut(key) {
            e.workflow = Some(run);
        }
        for (reason, accepted) in notes {
            self.workflow_decision(key, version, accepted, reason, now, out);
        }
        wake
    }

    #[allow(clippy::too_many_arguments)]
    fn settle_steps(
        &mut self,
        key: &AppKey,
        wf: &crate::workflow::Workflow,
        run: &mut WorkflowRun,
        now: Timestamp,
        notes: &mut Vec<(String, bool)>,
        wake: &mut Option<Timestamp>,
        out: &mut Outcome,
    ) {
        let mut retried: Vec<String> = Vec::new();
        let Some(e) = self.apps.get(key) else { return };
        for (s, _) in wf.all() {
            let phase = run.phase(&s.name);
            match (s.kind.as_str(), phase) {
                ("deploy", StepPhase::Running) => {
                    let ws = s.deploys().map(|d| d.workloads).unwrap_or_default();
                    let not_ready: Vec<&String> =
                        ws.iter().filter(|w| !workload_ready(e, w)).collect();
                    if not_ready.is_empty() {
                        run.set(
                            &s.name,
                            StepPhase::Succeeded,
                            format!("{} ready", ws.join(", ")),
                            now,
                        );
                    } else {
                        let names: Vec<&str> = not_ready.iter().map(|s| s.as_str()).collect();
                        run.set(
                            &s.name,
                            StepPhase::Running,
                            format!("waiting for {} to be ready", names.join(", ")),
                            now,
                        );
                    }
                }
                ("group", StepPhase::Running) => {
                    let phases: Vec<StepPhase> =
                        s.steps.iter().map(|c| run.phase(&c.name)).collect();
                    if let Some(c) = s
                        .steps
                        .iter()
                        .find(|c| run.phase(&c.name) == StepPhase::Failed)
                    {
                        run.set(
                            &s.name,
                            StepPhase::Failed,
                            format!("step {} failed", c.name),
                            now,
                        );
                    } else if phases.iter().all(|p| *p == StepPhase::Succeeded) {
                        run.set(&s.name, StepPhase::Succeeded, "every step succeeded", now);
                    }
                }
                (kind, StepPhase::Running) if jobs::get(kind).is_some() => {
                    let Some(j) = e
                        .runtime
                        .jobs
                        .get(&(WORKFLOW_JOBS.to_string(), s.name.clone()))
                    else {
                        continue;
                    };
                    let attempts = j.attempts;
                    let timeout = s.timeout.unwrap_or_else(|| {
                        jobs::get(kind).map_or(jobs::JobLimits::default().max_timeout, |t| {
                            t.limits().max_timeout
                        })
                    });
                    let started = run.steps[&s.name].started.unwrap_or(now);
                    match &j.observed {
                        ObservedState::Exited { code: 0 } => {
                            run.set(
                                &s.name,
                                StepPhase::Succeeded,
                                format!("exited 0 (attempt {attempts})"),
                                now,
                            );
                        }
                        o if o.has_ended() || *o == ObservedState::Stopped => {
                            let what = o.describe();
                            if attempts <= s.retries {
                                let node = j.node.clone().unwrap_or_default();
                                let job = InitJobId {
                                    app: key.clone(),
                                    workload: WORKFLOW_JOBS.into(),
                                    job: s.name.clone(),
                                    version: j.version,
                                };
                                if let Ok(launch) = self.job_launch(e, s) {
                                    out.actions.push(RuntimeAction {
                                        node,
                                        not_before: None,
                                        reason: format!("workflow step {} failed ({what}); retry {attempts} of {}", s.name, s.retries),
                                        kind: ActionKind::RunInitJob {
                                            job,
                                            run: j.run,
                                            attempt: attempts + 1,
                                            launch: Box::new(launch),
                                        },
                                    });
                                }
                                run.set(
                                    &s.name,
                                    StepPhase::Running,
                                    format!("{what}; retry {attempts} of {}", s.retries),
                                    now,
                                );
                                if let Some(st) = run.steps.get_mut(&s.name) {
                                    st.attempts = attempts + 1;
                                }
                                retried.push(s.name.clone());
                            } else {
                                let why = format!(
                                    "step {} failed after {attempts} run(s): {what}",
                                    s.name
                                );
                                run.set(&s.name, StepPhase::Failed, why.clone(), now);
                                notes.push((format!("workflow failed: {why}"), false));
                                run.failed.get_or_insert(why);
                            }
                        }
                        _ => {
                            // The runtime kills a run at its timeout; this
                            // catches a node that never says so.
                            let late = started
                                .plus(timeout)
                                .plus(crate::model::time::DurationMs::from_secs(30));
                            if now >= late {
                                let why = format!(
                                    "step {} did not finish within its timeout {timeout} (no report from its node)",
                                    s.name
                                );
                                run.set(&s.name, StepPhase::Failed, why.clone(), now);
                                notes.push((format!("workflow failed: {why}"), false));
                                run.failed.get_or_insert(why);
                            } else {
                                *wake = Some(wake.map_or(late, |w| w.min(late)));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        // The retries asked: the runs are pending again.
        if let Some(e) = self.apps.get_mut(key) {
            for step in retried {
                if let Some(j) = e.runtime.jobs.get_mut(&(WORKFLOW_JOBS.to_string(), step)) {
                    j.attempts += 1;
                    j.requested_at = Some(j.observations);
                    j.observed = ObservedState::Pending;
                    j.since = now;
                }
            }
        }
        if run.succeeded() && run.failed.is_none() {
            for st in run.steps.values_mut() {
                if st.message.is_empty() {
                    st.message = "done".into();
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start_step(
        &mut self,
        key: &AppKey,
        s: &Step,
        version: u32,
        run: &mut WorkflowRun,
        now: Timestamp,
        notes: &mut Vec<(String, bool)>,
        out: &mut Outcome,
    ) {
        match s.kind.as_str() {
            "deploy" => run.set(&s.name, StepPhase::Running, "deploying", now),
            "group" => run.set(&s.name, StepPhase::Running, "its steps run", now),
            "approval" => {
                run.set(
                    &s.name,
                    StepPhase::WaitingApproval,
                    "waiting for `darosctl workflow approve`",
                    now,
                );
                notes.push((
                    format!("workflow step {} waits for an operator's approval", s.name),
                    true,
                ));
            }
            _ => {
                let Some(e) = self.apps.get(key) else { return };
                let r = match job_run(s) {
                    Ok(r) => r,
                    Err(why) => {
                        run.set(&s.name, StepPhase::Failed, why.clone(), now);
                        notes.push((format!("workflow failed: step {}: {why}", s.name), false));
                        run.failed.get_or_insert(why);
                        return;
                    }
                };
                let d = demand(&r);
                let Some(node) = self.node_for_job(d) else {
                    let why = format!(
                        "waiting for capacity: no node has {} free now (some node could: the step was admitted)",
                        words(d)
                    );
                    if run.phase(&s.name) != StepPhase::WaitingCapacity {
                        notes.push((format!("workflow step {} {why}", s.name), true));
                    }
                    run.set(&s.name, StepPhase::WaitingCapacity, why, now);
                    return;
                };
                let launch = match self.job_launch(e, s) {
                    Ok(l) => l,
                    Err(why) => {
                        run.set(&s.name, StepPhase::Failed, why.clone(), now);
                        run.failed.get_or_insert(why);
                        return;
                    }
                };
                self.job_runs += 1;
                let serial = self.job_runs;
                let Some(e) = self.apps.get_mut(key) else {
                    return;
                };
                let mut st = JobStatus::new(version, serial, now);
                st.node = Some(node.clone());
                st.attempts = 1;
                st.requested_at = Some(st.observations);
                e.runtime
                    .jobs
                    .insert((WORKFLOW_JOBS.to_string(), s.name.clone()), st);
                out.actions.push(RuntimeAction {
                    node: node.clone(),
                    not_before: None,
                    reason: format!("workflow step {} ({})", s.name, s.kind),
                    kind: ActionKind::RunInitJob {
                        job: InitJobId {
                            app: key.clone(),
                            workload: WORKFLOW_JOBS.into(),
                            job: s.name.clone(),
                            version,
                        },
                        run: serial,
                        attempt: 1,
                        launch: Box::new(launch),
                    },
                });
                run.set(
                    &s.name,
                    StepPhase::Running,
                    format!("running on {node}"),
                    now,
                );
                if let Some(st) = run.steps.get_mut(&s.name) {
                    st.attempts = 1;
                    st.node = Some(node);
                }
            }
        }
    }

    /// A node with `d` free now: its capacity less what is placed and what
    /// other workflow jobs running there ask.
    fn node_for_job(&self, d: ResVec) -> Option<String> {
        let process = RuntimeRequirement {
            runtime_type: RuntimeType::Process,
            os: OsType::Linux,
        };
        self.cluster
            .nodes()
            .iter()
            .filter(|n| n.takes_work() && n.supports(&process))
            .find(|n| {
                let busy = self.workflow_jobs_on(&n.spec.name);
                let free = ResVec {
                    cpu: n.cap.cpu.saturating_sub(n.alloc.cpu + busy.cpu),
                    memory: n.cap.memory.saturating_sub(n.alloc.memory + busy.memory),
                    gpu: n.cap.gpu.saturating_sub(n.alloc.gpu + busy.gpu),
                };
                fits(free, d)
            })
            .map(|n| n.spec.name.clone())
    }

    /// What the workflow jobs running on `node` ask.
    fn workflow_jobs_on(&self, node: &str) -> ResVec {
        let mut sum = ResVec::default();
        for e in self.apps.values() {
            let Some(wf) = e.spec().spec.workflow.as_ref() else {
                continue;
            };
            for ((w, step), j) in &e.runtime.jobs {
                if w != WORKFLOW_JOBS || j.node.as_deref() != Some(node) || j.observed.has_ended() {
                    continue;
                }
                if let Some(r) = wf.step(step).and_then(|s| job_run(s).ok()) {
                    sum = sum.plus(demand(&r));
                }
            }
        }
        sum
    }

    /// How the node runs a job step of `e`.
    pub(super) fn job_launch(&self, e: &AppEntry, s: &Step) -> Result<JobLaunch, String> {
        let r = job_run(s)?;
        let t =
            jobs::get(&s.kind).ok_or_else(|| format!("job type {:?} is not registered", s.kind))?;
        let baseline = e
            .effective
            .as_ref()
            .map(|p| p.security.clone())
            .unwrap_or_default();
        let (cmd, args) = r.argv.split_first().ok_or("the job type gave no program")?;
        Ok(JobLaunch {
            runtime: RuntimeRequirement {
                runtime_type: RuntimeType::Process,
                os: OsType::Linux,
            },
            image: Some(cmd.clone()),
            resources: r.resources,
            timeout: Some(s.timeout.unwrap_or(t.limits().max_timeout)),
            runtime_spec: RuntimeSpec(std::sync::Arc::new(serde_json::json!({
                "command": cmd,
                "args": args,
                "env": r.env,
            }))),
            security: crate::policy::security::context_of(&WorkloadSecurity::default(), &baseline),
            namespace: self.namespace_of(&e.key.tenant),
            env: Vec::new(),
            volumes: Vec::new(),
        })
    }

    /// The workflow run of `key` and its current version, for an operation.
    fn workflow_run(&mut self, key: &AppKey) -> Result<(&mut WorkflowRun, u32), CoordinatorError> {
        let e = self
            .apps
            .get_mut(key)
            .ok_or_else(|| CoordinatorError::UnknownApp(key.clone()))?;
        let version = e.current;
        let run = e
            .workflow
            .as_mut()
            .ok_or_else(|| CoordinatorError::Workflow(format!("{key} has no workflow running")))?;
        Ok((run, version))
    }

    /// `approve`: an approval step waiting for an operator succeeds.
    pub(super) fn op_approve(
        &mut self,
        key: &AppKey,
        step: &str,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let (run, version) = self.workflow_run(key)?;
        if run.phase(step) != StepPhase::WaitingApproval {
            return Err(CoordinatorError::Workflow(format!(
                "step {step:?} of {key} is not waiting for approval (it is {:?})",
                run.phase(step)
            )));
        }
        run.set(step, StepPhase::Succeeded, "approved by an operator", now);
        self.workflow_decision(
            key,
            version,
            true,
            format!("workflow step {step} approved by an operator"),
            now,
            out,
        );
        self.replan(key, now, out);
        Ok(())
    }

    /// `suspend` / `resume`: no step starts while suspended.
    pub(super) fn op_suspend(
        &mut self,
        key: &AppKey,
        suspend: bool,
        now: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), CoordinatorError> {
        let (run, version) = self.workflow_run(key)?;
        if run.suspended == suspend {
            return Err(CoordinatorError::Workflow(format!(
                "the workflow of {key} is already {}",
                if suspend { "suspended" } else { "running" }
            )));
        }
        run.suspended = suspend;
        let reason = if suspend {
            "workflow suspended by an operator: no step starts until it is resumed (running steps go on)"
        } else {
            "workflow resumed by an operator"
        };
        self.workflow_decision(key, version, true, reason.into(), now, out);
        self.replan(key, now, out);
        Ok(())
    }

    fn workflow_decision(
        &mut self,
        key: &AppKey,
        version: u32,
        accepted: bool,
        reason: String,
        now: Timestamp,
        out: &mut Outcome,
    ) -> DecisionId {
        self.plain_decision(
            key,
            DecisionKind::Workflow,
            version,
            accepted,
            reason,
            now,
            out,
        )
    }
}

/// Every replica of workload `w` ready (a workload scaled to 0 counts).
fn workload_ready(e: &AppEntry, w: &str) -> bool {
    let has_readiness = e.spec().workload(w).is_some_and(|w| {
        w.health_checks
            .iter()
            .any(|h| h.kind == crate::model::health::CheckKind::Readiness)
    });
    e.runtime.of_workload(w).all(|(_, i)| {
        i.observed == ObservedState::Ready
            || (i.observed == ObservedState::Running && !has_readiness)
            || matches!(i.observed, ObservedState::Exited { code: 0 })
    })
}
