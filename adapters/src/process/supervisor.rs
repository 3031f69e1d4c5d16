//! One task per process instance: starts runs through the shim, watches
//! them by pidfd, runs their health checks, applies the restart decision
//! with timers, stops them, and adopts runs found alive after an agent
//! restart. Every state change is written to redb before it is announced.

use super::ProcessAdapterConfig;
use super::launch::launch;
use super::pidfd::PidFd;
use super::protocol::{
    EXIT, ExitRecord, FAILED, LaunchFailure, STARTED, ShimConfig, StartedRecord, read_json,
};
use super::spec::LaunchPlan;
use super::stop::{StopOutcome, sweep, terminate};
use super::store::{Desired, InstanceRecord, Store};
use crate::adapter::DestroyOptions;
use crate::error::AdapterError;
use crate::event::{EventBus, RuntimeEventKind};
use crate::health::{CheckState, ExecContext, HealthEvent, HealthMonitor};
use crate::instance::AdapterKind;
use crate::restart::{RestartDecision, decide_for};
use crate::status::{ExitStatus, InstanceState, RuntimeDetail, WorkloadStatus};
use crate::time::now;
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::model::health::CheckKind;
use daros_coordinator::model::time::DurationMs;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// A request to a supervisor.
#[derive(Debug)]
pub(crate) enum Cmd {
    Start(oneshot::Sender<Result<(), AdapterError>>),
    Stop {
        grace: Duration,
        reply: oneshot::Sender<Result<(), AdapterError>>,
    },
    Destroy {
        opts: DestroyOptions,
        reply: oneshot::Sender<Result<(), AdapterError>>,
    },
}

/// What every supervisor shares.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub cfg: ProcessAdapterConfig,
    pub store: Store,
    pub events: EventBus,
}

impl Ctx {
    pub fn log_dir(&self, name: &str) -> PathBuf {
        self.cfg.state_dir.join("logs").join(name)
    }
    pub fn run_root(&self, name: &str) -> PathBuf {
        self.cfg.state_dir.join("run").join(name)
    }
}

#[derive(Debug, Clone)]
enum KillCause {
    Stop,
    Liveness { check: String, reason: String },
    Deadline(DurationMs),
}

struct Running {
    shim: Option<PidFd>,
    child: Option<PidFd>,
    started: StartedRecord,
    run_dir: PathBuf,
    health: HealthMonitor,
    deadline: Option<Instant>,
    cause: Option<KillCause>,
}

enum Wake {
    Cmd(Option<Cmd>),
    Exited,
    Health(HealthEvent),
    Deadline,
    BackoffDone,
}

pub(crate) struct Supervisor {
    ctx: Arc<Ctx>,
    rec: InstanceRecord,
    plan: Result<LaunchPlan, String>,
    status: watch::Sender<WorkloadStatus>,
    cmds: mpsc::Receiver<Cmd>,
    run: Option<Running>,
    backoff_until: Option<Instant>,
    ready: bool,
    readiness_passed: BTreeSet<String>,
    readiness_failing: BTreeSet<String>,
}

impl Supervisor {
    pub fn new(
        ctx: Arc<Ctx>,
        rec: InstanceRecord,
        plan: Result<LaunchPlan, String>,
        cmds: mpsc::Receiver<Cmd>,
    ) -> (Self, watch::Receiver<WorkloadStatus>) {
        let (status, rx) = watch::channel(status_of(&ctx, &rec, false));
        (
            Self {
                ctx,
                rec,
                plan,
                status,
                cmds,
                run: None,
                backoff_until: None,
                ready: false,
                readiness_passed: BTreeSet::new(),
                readiness_failing: BTreeSet::new(),
            },
            rx,
        )
    }

    /// The supervisor's life; with `adopted` it first picks up where a previous agent
    /// left and says so.
    pub async fn run(mut self, adopted: Option<oneshot::Sender<()>>) {
        if let Some(done) = adopted {
            self.adopt().await;
            let _ = done.send(());
        }
        loop {
            match self.wait().await {
                Wake::Cmd(None) => return, // the adapter is gone: the workload stays
                Wake::Cmd(Some(cmd)) => {
                    if self.handle(cmd).await {
                        return;
                    }
                }
                Wake::Exited => self.on_exit().await,
                Wake::Health(ev) => self.on_health(ev).await,
                Wake::Deadline => {
                    let d = self.rec.spec.deadline.unwrap_or_default();
                    self.kill_for(KillCause::Deadline(d)).await;
                }
                Wake::BackoffDone => {
                    self.backoff_until = None;
                    if let Err(e) = self.launch().await {
                        self.after_failed_launch(e).await;
                    }
                }
            }
        }
    }

    async fn wait(&mut self) -> Wake {
        let Self {
            cmds,
            run,
            backoff_until,
            ..
        } = self;
        if let Some(run) = run {
            let Some(shim) = &run.shim else {
                return Wake::Exited;
            };
            let deadline = run.deadline;
            tokio::select! {
                c = cmds.recv() => Wake::Cmd(c),
                () = shim.exited() => Wake::Exited,
                Some(ev) = run.health.next() => Wake::Health(ev),
                () = sleep_until(deadline) => Wake::Deadline,
            }
        } else if let Some(until) = *backoff_until {
            tokio::select! {
                c = cmds.recv() => Wake::Cmd(c),
                () = tokio::time::sleep_until(until) => Wake::BackoffDone,
            }
        } else {
            Wake::Cmd(cmds.recv().await)
        }
    }

    fn name(&self) -> String {
        self.rec.id.name.clone()
    }

    fn emit(&self, kind: RuntimeEventKind) {
        self.ctx
            .events
            .emit(&self.rec.id, Some(&self.rec.spec.key), kind);
    }

    fn persist(&mut self) {
        if let Err(e) = self.ctx.store.put(&self.rec) {
            tracing::error!(instance = %self.rec.id, error = %e, "cannot record instance state");
        }
        let st = status_of(&self.ctx, &self.rec, self.ready);
        self.status.send_replace(st);
    }

    // Returns true when the supervisor must end (destroyed).
    async fn handle(&mut self, cmd: Cmd) -> bool {
        match cmd {
            Cmd::Start(reply) => {
                self.rec.desired = Desired::Running;
                let r = if self.run.is_some() || self.backoff_until.is_some() {
                    self.persist();
                    Ok(())
                } else {
                    self.rec.restarts = 0;
                    match self.launch().await {
                        Ok(()) => Ok(()),
                        Err(e) => {
                            // A run that cannot even start is refused with
                            // its reason, not retried into a silent loop.
                            self.rec.state = InstanceState::Failed;
                            self.persist();
                            Err(e)
                        }
                    }
                };
                let _ = reply.send(r);
                false
            }
            Cmd::Stop { grace, reply } => {
                self.stop(grace).await;
                let _ = reply.send(Ok(()));
                false
            }
            Cmd::Destroy { opts, reply } => {
                self.stop(opts.grace).await;
                let r = self.remove(opts.remove_logs);
                let done = r.is_ok();
                if done {
                    self.emit(RuntimeEventKind::Destroyed);
                }
                let _ = reply.send(r);
                // A failed removal keeps the instance (stopped) so that
                // destroy can be tried again.
                done
            }
        }
    }

    async fn stop(&mut self, grace: Duration) {
        self.rec.desired = Desired::Stopped;
        if self.run.is_some() {
            self.rec.state = InstanceState::Stopping;
            self.persist();
            self.terminate(grace, KillCause::Stop).await;
            self.on_exit().await;
        } else if self.backoff_until.take().is_some() || self.rec.state == InstanceState::Stopping {
            self.rec.state = InstanceState::Stopped;
            self.rec.next_restart_at = None;
            self.rec.message = Some("stopped on request".into());
            self.persist();
            self.emit(RuntimeEventKind::Stopped);
        } else {
            self.persist();
        }
    }

    fn remove(&mut self, remove_logs: bool) -> Result<(), AdapterError> {
        let run_root = self.ctx.run_root(&self.name());
        remove_dir(&run_root)?;
        if remove_logs {
            remove_dir(&self.ctx.log_dir(&self.name()))?;
        }
        self.ctx.store.delete(&self.rec.id)
    }

    async fn terminate(&mut self, grace: Duration, cause: KillCause) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        run.cause = Some(cause);
        let outcome = terminate(
            run.shim.as_ref(),
            run.child.as_ref(),
            run.started.child.pid,
            &self.rec.spec.placement.cgroup,
            grace,
        )
        .await;
        tracing::info!(instance = %self.rec.id, ?outcome, "run terminated");
        if outcome == StopOutcome::ShimKilled {
            tracing::warn!(instance = %self.rec.id, "the shim did not end after its workload was killed");
        }
    }

    async fn kill_for(&mut self, cause: KillCause) {
        let grace = self.ctx.cfg.default_grace;
        self.terminate(grace, cause).await;
        self.on_exit().await;
    }

    async fn launch(&mut self) -> Result<(), AdapterError> {
        let plan = match &self.plan {
            Ok(p) => p.clone(),
            Err(e) => {
                return Err(AdapterError::Launch {
                    id: self.rec.id.clone(),
                    stage: "resolve spec".into(),
                    reason: e.clone(),
                });
            }
        };
        self.rec.generation += 1;
        self.rec.state = InstanceState::Starting;
        self.rec.run = None;
        self.rec.next_restart_at = None;
        self.persist();
        let gen_ = self.rec.generation;
        let run_root = self.ctx.run_root(&self.name());
        let run_dir = run_root.join(gen_.to_string());
        prune_runs(&run_root, gen_);
        let cfg = ShimConfig {
            id: self.rec.id.to_string(),
            generation: gen_,
            program: plan.program,
            args: plan.args,
            env: plan.env,
            working_dir: plan.working_dir,
            uid: plan.uid,
            gid: plan.gid,
            groups: plan.groups,
            cgroup_procs: self.rec.spec.placement.cgroup.procs_files.clone(),
            oom_score_adj: self.rec.spec.placement.oom_score_adj,
            log_dir: self.ctx.log_dir(&self.name()),
            log_limits: plan.log_limits,
            run_dir: run_dir.clone(),
            security: plan.security,
            sidecars: plan.sidecars,
        };
        match launch(
            &self.ctx.cfg.shim_path,
            &cfg,
            self.ctx.cfg.launch_timeout,
            &self.ctx.cfg.launcher,
        )
        .await
        {
            Ok(started) => {
                self.attach(started, run_dir, false);
                Ok(())
            }
            Err(f) => Err(self.launch_error(f)),
        }
    }

    fn launch_error(&self, f: LaunchFailure) -> AdapterError {
        AdapterError::Launch {
            id: self.rec.id.clone(),
            stage: f.stage,
            reason: f.message,
        }
    }

    // Watches a run that was just started (or found alive after a restart).
    fn attach(&mut self, started: StartedRecord, run_dir: PathBuf, adopted: bool) {
        let shim = PidFd::open(started.shim).unwrap_or_else(|e| {
            tracing::warn!(instance = %self.rec.id, error = %e, "cannot open shim pidfd");
            None
        });
        let child = PidFd::open(started.child).ok().flatten();
        let ctx = self.plan.as_ref().ok().map(|p| ExecContext {
            env: p.env.clone(),
            working_dir: Some(p.working_dir.clone()),
            uid: p.uid,
            gid: p.gid,
            groups: p.groups.clone(),
            cgroup_procs: self.rec.spec.placement.cgroup.procs_files.clone(),
        });
        let checks = if ctx.is_some() {
            self.rec.spec.health_checks.clone()
        } else {
            Vec::new()
        };
        let health = HealthMonitor::spawn(&checks, Arc::new(ctx.unwrap_or_default()));
        let deadline = self.rec.spec.deadline.map(|d| {
            let elapsed = now().since(started.started_at);
            Instant::now() + Duration::from_millis(d.0.saturating_sub(elapsed.0))
        });
        self.readiness_passed.clear();
        self.readiness_failing.clear();
        self.ready = false;
        let alive = shim.is_some();
        self.run = Some(Running {
            shim,
            child,
            started,
            run_dir,
            health,
            deadline,
            cause: None,
        });
        if !alive {
            // Ended already: the main loop reads its exit record next.
            return;
        }
        self.rec.run = Some(started);
        self.rec.state = InstanceState::Running;
        self.rec.message = None;
        let has_readiness = self
            .rec
            .spec
            .health_checks
            .iter()
            .any(|c| c.kind == CheckKind::Readiness);
        self.ready = !has_readiness;
        self.persist();
        let pid = Some(started.child.pid);
        let generation = self.rec.generation;
        self.emit(if adopted {
            RuntimeEventKind::Adopted { pid, generation }
        } else {
            RuntimeEventKind::Started { pid, generation }
        });
        if self.ready {
            self.emit(RuntimeEventKind::Ready);
        }
    }

    async fn on_exit(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        let record = read_json::<ExitRecord>(&run.run_dir.join(EXIT));
        let (status, shim_lost) = match record {
            Ok(Some(r)) => (r.status, None),
            Ok(None) => (
                ExitStatus {
                    code: None,
                    signal: None,
                },
                Some("the shim ended without recording the workload's exit".to_string()),
            ),
            Err(e) => (
                ExitStatus {
                    code: None,
                    signal: None,
                },
                Some(format!("the shim's exit record is unreadable: {e}")),
            ),
        };
        if shim_lost.is_some() {
            // Without its shim nobody collects the workload: end it.
            if let Some(c) = &run.child
                && !c.has_exited()
            {
                let _ = c.signal(rustix::process::Signal::KILL);
                if let Some(p) = rustix::process::Pid::from_raw(
                    i32::try_from(run.started.child.pid).unwrap_or(0),
                ) {
                    let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
                }
            }
        }
        sweep(&self.rec.spec.placement.cgroup);
        drop(run.health);
        let requested = matches!(run.cause, Some(KillCause::Stop));
        self.ready = false;
        self.rec.run = None;
        self.rec.last_exit = Some(status);
        self.emit(RuntimeEventKind::Exited {
            exit: status,
            requested,
        });
        if requested {
            self.rec.state = InstanceState::Stopped;
            self.rec.message = Some(format!("stopped on request ({status})"));
            self.persist();
            self.emit(RuntimeEventKind::Stopped);
            return;
        }
        let failure = if let Some(detail) = shim_lost {
            Some(Failure::Runtime(
                RuntimeFailure::AdapterCommunicationError { detail },
            ))
        } else {
            match run.cause {
                Some(KillCause::Liveness { check, reason }) => Some(Failure::Application {
                    check: Some(check),
                    detail: reason,
                }),
                Some(KillCause::Deadline(d)) => Some(Failure::Application {
                    check: None,
                    detail: format!("did not finish within its deadline of {d}"),
                }),
                _ if status.success() => None,
                _ => Some(Failure::Runtime(RuntimeFailure::ProcessExit {
                    exit_code: status.code,
                    signal: status.signal,
                })),
            }
        };
        if let Some(f) = &failure {
            self.rec.last_failure = Some(f.clone());
            self.emit(RuntimeEventKind::Failed { failure: f.clone() });
        } else {
            self.rec.last_failure = None;
        }
        let ran_for = now().since(run.started.started_at);
        self.apply_policy(failure.as_ref(), ran_for, &status.to_string());
    }

    fn apply_policy(&mut self, failure: Option<&Failure>, ran_for: DurationMs, what: &str) {
        if self.rec.desired == Desired::Stopped {
            self.rec.state = InstanceState::Stopped;
            self.persist();
            self.emit(RuntimeEventKind::Stopped);
            return;
        }
        match decide_for(
            &self.rec.spec.lifecycle,
            failure,
            self.rec.restarts,
            ran_for,
        ) {
            RestartDecision::Restart { attempt, delay } => {
                self.rec.restarts = attempt;
                self.rec.total_restarts = self.rec.total_restarts.saturating_add(1);
                self.rec.state = InstanceState::BackOff;
                self.rec.next_restart_at = Some(now().plus(delay));
                self.rec.message = Some(format!("{what}; restart {attempt} in {delay}"));
                self.backoff_until = Some(Instant::now() + Duration::from_millis(delay.0));
                self.persist();
                self.emit(RuntimeEventKind::RestartScheduled { attempt, delay });
            }
            RestartDecision::Complete => {
                self.rec.state = InstanceState::Completed;
                self.rec.message = Some(format!("completed ({what})"));
                self.persist();
                self.emit(RuntimeEventKind::Completed);
            }
            RestartDecision::GiveUp { on_exhausted } => {
                self.rec.state = InstanceState::Failed;
                self.rec.message = Some(format!(
                    "{what}; no restart left after {} restarts (onExhausted: {on_exhausted:?})",
                    self.rec.restarts
                ));
                self.persist();
                self.emit(RuntimeEventKind::GaveUp {
                    restarts: self.rec.restarts,
                    on_exhausted,
                });
            }
        }
    }

    async fn after_failed_launch(&mut self, e: AdapterError) {
        tracing::warn!(instance = %self.rec.id, error = %e, "restart failed to launch");
        let failure = e.as_failure();
        if let Some(f) = &failure {
            self.rec.last_failure = Some(f.clone());
            self.emit(RuntimeEventKind::Failed { failure: f.clone() });
        }
        let failure = failure.unwrap_or(Failure::Runtime(
            RuntimeFailure::AdapterCommunicationError {
                detail: e.to_string(),
            },
        ));
        self.apply_policy(Some(&failure), DurationMs(0), &e.to_string());
    }

    async fn on_health(&mut self, ev: HealthEvent) {
        tracing::info!(instance = %self.rec.id, check = %ev.check, state = ?ev.state, reason = %ev.reason, "health check changed");
        match (ev.kind, ev.state) {
            (CheckKind::Liveness, CheckState::Failing) => {
                self.kill_for(KillCause::Liveness {
                    check: ev.check,
                    reason: ev.reason,
                })
                .await;
            }
            (CheckKind::Liveness, _) => {}
            (CheckKind::Readiness, CheckState::Failing) => {
                self.readiness_passed.remove(&ev.check);
                self.readiness_failing.insert(ev.check.clone());
                if self.ready {
                    self.ready = false;
                    self.persist();
                }
                self.emit(RuntimeEventKind::Unready {
                    check: ev.check,
                    reason: ev.reason,
                });
            }
            (CheckKind::Readiness, CheckState::Passing) => {
                self.readiness_failing.remove(&ev.check);
                self.readiness_passed.insert(ev.check);
                let all = self
                    .rec
                    .spec
                    .health_checks
                    .iter()
                    .filter(|c| c.kind == CheckKind::Readiness)
                    .all(|c| self.readiness_passed.contains(&c.name));
                if all && !self.ready {
                    self.ready = true;
                    self.persist();
                    self.emit(RuntimeEventKind::Ready);
                }
            }
            (CheckKind::Readiness, CheckState::Unknown) => {}
        }
    }

    async fn adopt(&mut self) {
        match self.rec.state {
            InstanceState::BackOff if self.rec.desired == Desired::Running => {
                let due = self.rec.next_restart_at.unwrap_or_else(now);
                let wait = due.since(now());
                self.backoff_until = Some(Instant::now() + Duration::from_millis(wait.0));
                self.persist();
            }
            InstanceState::Starting | InstanceState::Running | InstanceState::Stopping => {
                let run_dir = self
                    .ctx
                    .run_root(&self.name())
                    .join(self.rec.generation.to_string());
                let started = self.rec.run.or_else(|| {
                    read_json::<StartedRecord>(&run_dir.join(STARTED))
                        .ok()
                        .flatten()
                });
                match started {
                    Some(s) => {
                        self.attach(s, run_dir, true);
                        if self.rec.desired == Desired::Stopped && self.run.is_some() {
                            self.stop(self.ctx.cfg.default_grace).await;
                        }
                    }
                    None => {
                        let f = read_json::<LaunchFailure>(&run_dir.join(FAILED)).ok().flatten().unwrap_or(LaunchFailure {
                            stage: "shim report".into(),
                            errno: None,
                            message: "the agent stopped while the run was starting and no shim record exists".into(),
                        });
                        let e = self.launch_error(f);
                        self.after_failed_launch(e).await;
                    }
                }
            }
            _ => self.persist(),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn remove_dir(p: &std::path::Path) -> Result<(), AdapterError> {
    match std::fs::remove_dir_all(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(AdapterError::io(p, e)),
        _ => Ok(()),
    }
}

// Keeps the directories of this run and the one before it.
fn prune_runs(root: &std::path::Path, current: u64) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let keep = e
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
            .is_none_or(|g| g + 1 >= current);
        if !keep {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

pub(crate) fn status_of(ctx: &Ctx, rec: &InstanceRecord, ready: bool) -> WorkloadStatus {
    debug_assert_eq!(rec.id.adapter, AdapterKind::Process);
    WorkloadStatus {
        id: rec.id.clone(),
        key: rec.spec.key.clone(),
        state: rec.state,
        ready: ready && rec.state == InstanceState::Running,
        restarts: rec.total_restarts,
        started_at: rec.run.map(|r| r.started_at),
        last_exit: rec.last_exit,
        last_failure: rec.last_failure.clone(),
        next_restart_at: rec.next_restart_at,
        message: rec.message.clone(),
        detail: RuntimeDetail::Process {
            pid: rec.run.map(|r| r.child.pid),
            shim_pid: rec.run.map(|r| r.shim.pid),
            generation: rec.generation,
            log_dir: ctx.log_dir(&rec.id.name),
        },
    }
}
