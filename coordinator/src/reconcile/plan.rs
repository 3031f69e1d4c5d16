//! The reconcile planner: a pure function from an application's spec, its
//! placed instances and their observed states to the next runtime actions
//! and the lifecycle transition they imply. It never sleeps: a restart after
//! backoff is an action with `not_before`, and `wake_at` says when to plan
//! again.
//!
//! Rules:
//! - workloads start in dependency order: a workload starts when every
//!   workload it depends on is ready and its own init jobs succeeded;
//! - init jobs run one after another on the node of replica 0, once the
//!   workload's dependencies are ready; a failing init job is retried per its
//!   `retries` and `backoff`, then handled per the workload's `onExhausted`;
//!   its workload and every dependent stay unstarted and the plan says why;
//! - an ended instance is restarted per its LifecyclePolicy (restart kind,
//!   retries, backoff); when no restart is allowed: `WaitForOperator` holds
//!   it, `FailAndStopDependents` fails the application;
//! - a rolling update replaces the replicas of a changed workload within its
//!   rollout budget: up to `maxSurge` at a time start the new instance beside
//!   the old one and stop the old one once the new one is ready, then up to
//!   `maxUnavailable` at a time stop the old one first; a new instance that
//!   exhausts its restarts, or a rollout not complete by its progress
//!   deadline, fails the rollout (not the application: the old replicas that
//!   still run keep serving);
//! - a `canary` rollout surges its first `canary.replicas` replicas and keeps
//!   their old instances and every other replica on the old version until
//!   the workload is promoted (its health gate passed, or an operator); a
//!   canary that ends fails the rollout at once. A `blueGreen` rollout
//!   surges every replica and stops the old instances only once every new
//!   one is ready;
//! - the application is Running when every workload is ready, Degraded when
//!   a replica is down, held or evicted, Finished when every workload
//!   completed.

use super::action::{ActionKind, JobLaunch, RuntimeAction, WorkloadLaunch};
use super::instance::{AppRuntime, Instance, InstanceKey, Requested};
use super::observed::{InitJobId, InstanceId, ObservedState};
use crate::lifecycle::{Phase, SystemEvent};
use crate::model::application::Application;
use crate::model::dependency::DependencyGraph;
use crate::model::health::CheckKind;
use crate::model::lifecycle_policy::{FailureAction, OnExhausted};
use crate::model::names::AppKey;
use crate::model::qos::MinimalReservation;
use crate::model::rollout::{CanaryPolicy, Strategy};
use crate::model::time::Timestamp;
use crate::model::workload::Workload;
use crate::policy::security::SecurityBaseline;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Input of the planner.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// The application.
    pub key: &'a AppKey,
    /// Spec in force.
    pub app: &'a Application,
    /// Its version.
    pub version: u32,
    /// Current phase.
    pub phase: Phase,
    /// Instances and jobs.
    pub runtime: &'a AppRuntime,
    /// Replicas wanted per workload (a workload scaled to 0 is parked: it
    /// counts as ready and has no instances).
    pub targets: &'a BTreeMap<String, u32>,
    /// True when the application is Degraded only because of runtime
    /// failures (so it recovers by itself once they heal).
    pub recoverable_degradation: bool,
    /// When the rollout in progress began (its progress deadline counts
    /// from there).
    pub rollout_started: Option<Timestamp>,
    /// Workloads of the rollout in progress whose canary was promoted.
    pub promoted: &'a BTreeSet<String>,
    /// With a workflow: the workloads its deploy steps have started (the
    /// others wait); `None`: every workload.
    pub released: Option<&'a BTreeSet<String>>,
    /// Now.
    pub now: Timestamp,
    /// The security baseline in force.
    pub security: &'a SecurityBaseline,
    /// The tenant's first Kubernetes namespace.
    pub namespace: Option<&'a str>,
}

/// Something that cannot proceed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocked {
    /// Workload concerned.
    pub workload: String,
    /// Why it waits.
    pub reason: String,
}

/// Output of the planner.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Actions to perform now (or at their `not_before`).
    pub actions: Vec<RuntimeAction>,
    /// What waits, and why.
    pub blocked: Vec<Blocked>,
    /// Lifecycle event implied, with its reason.
    pub event: Option<(SystemEvent, String)>,
    /// Workload whose failure fails the application.
    pub failed_workload: Option<String>,
    /// Plan again at this time (restart backoff).
    pub wake_at: Option<Timestamp>,
    /// Retry budget used per instance for the starts in `actions`.
    pub restarts: BTreeMap<InstanceKey, u32>,
    /// The rollout in progress failed: (workload, why).
    pub rollout_failed: Option<(String, String)>,
    /// Steps of the rollout in progress the coordinator records (and, for a
    /// promotion, carries out).
    pub rollout_steps: Vec<RolloutStep>,
}

/// A step of a `canary` or `blueGreen` rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStep {
    /// Workload.
    pub workload: String,
    /// What happens.
    pub kind: RolloutStepKind,
    /// Why, in words.
    pub reason: String,
}

/// Kinds of rollout steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RolloutStepKind {
    /// The canaries passed their gate: the rollout goes on.
    Promote,
    /// The canaries passed their gate; an operator's promotion is awaited.
    AwaitPromotion,
    /// Every new instance is ready: the old set is stopped.
    Switch,
}

/// Launch description of workload `w` under security baseline `b`, its pods
/// in `namespace` unless its spec names one.
pub fn launch_of(
    app: &Application,
    w: &Workload,
    b: &SecurityBaseline,
    namespace: Option<&str>,
) -> WorkloadLaunch {
    WorkloadLaunch {
        security: crate::policy::security::context_of(&w.security, b),
        namespace: namespace.map(str::to_string),
        runtime: w.runtime,
        image: w.image.clone(),
        qos: app.qos_of(w),
        resources: w.resources,
        reservation: MinimalReservation::from_profile(&w.resources),
        health_checks: w.health_checks.clone(),
        runtime_spec: w.runtime_spec.clone(),
        stop_on_client_after: app.lifecycle_of(w).disconnect.stop_on_client_after,
        env: Vec::new(),
        volumes: crate::traits::storage::volumes(&w.traits),
        sidecars: crate::traits::sidecar::sidecars(&w.traits),
    }
}

#[derive(Default, Clone, Copy)]
struct WorkloadState {
    ready: bool,
    completed: bool,
}

/// Plans the next actions of one application.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let mut p = Plan::default();
    if !input.phase.holds_placements() {
        return p;
    }
    let ws = &input.app.spec.workloads;
    let graph = DependencyGraph::new(ws);
    let order = graph
        .start_order()
        .unwrap_or_else(|| (0..ws.len()).collect());
    let mut state = vec![WorkloadState::default(); ws.len()];
    let mut down: Vec<String> = Vec::new();
    let mut failing: Option<(String, String)> = None;

    for &i in &order {
        let w = &ws[i];
        if input.targets.get(&w.name) == Some(&0)
            && input.runtime.of_workload(&w.name).next().is_none()
        {
            // Parked by a scale to 0: nothing to run, nothing to wait for.
            state[i].ready = true;
            continue;
        }
        // With a workflow, nothing of a workload starts (init jobs, new
        // instances) before the step that deploys it; what already runs is
        // still looked after (restarts, rollouts under way).
        let released = input.released.is_none_or(|r| r.contains(&w.name));
        let lp = input.app.lifecycle_of(w);
        let has_readiness = w
            .health_checks
            .iter()
            .any(|h| h.kind == CheckKind::Readiness);
        // Rollout budget of this workload: replacements already under way.
        let rp = lp.rollout;
        let (mut surging, mut unavailable) = (0u32, 0u32);
        let mut in_rollout = false;
        for (_, inst) in input.runtime.of_workload(&w.name) {
            if let Some(old) = &inst.replacing {
                in_rollout = true;
                if old.surge {
                    surging += 1;
                } else if !old.live() {
                    unavailable += 1;
                }
            }
        }
        let strategy = rp.strategy;
        // Replicas under the canary gate (none once promoted).
        let canaries = rp
            .canary()
            .filter(|_| in_rollout && !input.promoted.contains(&w.name))
            .map(|c| {
                canary_gate(input, w, &c, has_readiness, &mut p);
                c.replicas
            });
        // A blue-green switch waits for every new instance.
        let all_new_ready = input
            .runtime
            .of_workload(&w.name)
            .filter(|(_, i)| i.version == input.version)
            .all(|(_, i)| {
                i.observed == ObservedState::Ready
                    || (i.observed == ObservedState::Running && !has_readiness)
            });
        // A canary that passed its gate and waits for an operator is not late.
        let awaiting = p
            .rollout_steps
            .iter()
            .any(|s| s.workload == w.name && s.kind == RolloutStepKind::AwaitPromotion);
        if in_rollout
            && !awaiting
            && let Some(started) = input.rollout_started
        {
            let deadline = started.plus(rp.progress_deadline);
            if input.now >= deadline {
                p.rollout_failed.get_or_insert((
                    w.name.clone(),
                    format!(
                        "workload {} did not complete its rollout to version {} within its progress deadline {}",
                        w.name, input.version, rp.progress_deadline
                    ),
                ));
            } else {
                wake(&mut p, deadline);
            }
        }
        let deps: Vec<&str> = graph
            .deps_of(i)
            .iter()
            .filter(|&&d| !state[d].ready)
            .map(|&d| ws[d].name.as_str())
            .collect();
        let deps_ok = deps.is_empty();

        // Init jobs, one after another.
        let mut jobs_ok = true;
        for (_, j) in w.all_init_jobs() {
            let key = (w.name.clone(), j.name.clone());
            let Some(st) = input.runtime.jobs.get(&key) else {
                continue;
            };
            if st.succeeded() {
                continue;
            }
            jobs_ok = false;
            if !deps_ok || !released {
                break;
            }
            let node = input
                .runtime
                .of_workload(&w.name)
                .next()
                .and_then(|(_, inst)| inst.node.clone());
            let Some(node) = node else {
                p.blocked.push(Blocked {
                    workload: w.name.clone(),
                    reason: format!("init job {} waits for replica 0 to have a node", j.name),
                });
                break;
            };
            let job_id = InitJobId {
                app: input.key.clone(),
                workload: w.name.clone(),
                job: j.name.clone(),
                version: st.version,
            };
            let job_launch = || JobLaunch {
                security: crate::policy::security::context_of(&w.security, input.security),
                namespace: input.namespace.map(str::to_string),
                runtime: j.runtime.unwrap_or(w.runtime),
                image: j.image.clone(),
                resources: j.resources,
                timeout: j.timeout,
                runtime_spec: j.runtime_spec.clone(),
                env: Vec::new(),
                volumes: crate::traits::storage::volumes(&w.traits),
            };
            match &st.observed {
                ObservedState::Pending if st.attempts == 0 => {
                    if !st.run_pending() {
                        p.actions.push(RuntimeAction {
                            node,
                            not_before: None,
                            reason: format!(
                                "init job {} must succeed before {} starts",
                                j.name, w.name
                            ),
                            kind: ActionKind::RunInitJob {
                                job: job_id,
                                run: st.run,
                                attempt: 1,
                                launch: Box::new(job_launch()),
                            },
                        });
                    }
                    p.blocked.push(Blocked {
                        workload: w.name.clone(),
                        reason: format!("init job {} running", j.name),
                    });
                }
                o if (o.has_ended() || *o == ObservedState::Stopped) && st.run_pending() => {
                    p.blocked.push(Blocked {
                        workload: w.name.clone(),
                        reason: format!(
                            "init job {} failed ({}); retry {} of {} requested",
                            j.name,
                            o.describe(),
                            st.attempts.saturating_sub(1),
                            j.retries
                        ),
                    });
                }
                o if o.has_ended() || *o == ObservedState::Stopped => {
                    let why = o.describe();
                    if st.attempts <= j.retries {
                        let due = st
                            .since
                            .plus(j.backoff.delay(st.attempts.saturating_sub(1)));
                        p.actions.push(RuntimeAction {
                            node,
                            not_before: (due > input.now).then_some(due),
                            reason: format!(
                                "init job {} failed ({why}); retry {} of {}",
                                j.name, st.attempts, j.retries
                            ),
                            kind: ActionKind::RunInitJob {
                                job: job_id,
                                run: st.run,
                                attempt: st.attempts + 1,
                                launch: Box::new(job_launch()),
                            },
                        });
                        if due > input.now {
                            wake(&mut p, due);
                        }
                        p.blocked.push(Blocked {
                            workload: w.name.clone(),
                            reason: format!(
                                "init job {} failed ({why}); retry {} of {}",
                                j.name, st.attempts, j.retries
                            ),
                        });
                    } else {
                        let reason = format!(
                            "init job {} of workload {} failed {} times (last: {why})",
                            j.name, w.name, st.attempts
                        );
                        if in_rollout {
                            p.rollout_failed
                                .get_or_insert((w.name.clone(), reason.clone()));
                        } else if lp.on_exhausted == OnExhausted::FailAndStopDependents {
                            failing.get_or_insert((w.name.clone(), reason.clone()));
                        }
                        p.blocked.push(Blocked {
                            workload: w.name.clone(),
                            reason: format!("{reason}; waiting for an operator"),
                        });
                    }
                }
                _ => p.blocked.push(Blocked {
                    workload: w.name.clone(),
                    reason: format!("init job {} running", j.name),
                }),
            }
            break;
        }

        let mut all_ready = true;
        let mut all_completed = true;
        let mut any = false;
        for (k, inst) in input.runtime.of_workload(&w.name) {
            any = true;
            let id = InstanceId {
                app: input.key.clone(),
                workload: k.workload.clone(),
                replica: k.replica,
                version: inst.version,
            };
            if let Some(reason) = &inst.evicted {
                all_ready = false;
                all_completed = false;
                down.push(format!("{}/{} evicted: {reason}", k.workload, k.replica));
                continue;
            }
            let Some(node) = inst.node.clone() else {
                all_ready = false;
                all_completed = false;
                continue;
            };
            // Its node is Down: unreachable, not lost (yet).
            if let Some(since) = inst.disconnected {
                all_ready = false;
                all_completed = false;
                let d = lp.disconnect;
                let then = if d.replace {
                    wake(&mut p, since.plus(d.lost_after));
                    format!("placed elsewhere if still down {} after", d.lost_after)
                } else {
                    "kept there until the node returns (disconnect.replace: false)".into()
                };
                down.push(format!(
                    "{}/{} unreachable: node {node} is down; {then}",
                    k.workload, k.replica
                ));
                continue;
            }
            // Rolling update, within the workload's rollout budget.
            if let Some(old) = &inst.replacing {
                all_ready = false;
                all_completed = false;
                let old_id = InstanceId {
                    version: old.version,
                    ..id.clone()
                };
                let old_node = old.node.clone().unwrap_or_else(|| node.clone());
                let canary = canaries.map(|n| k.replica < n);
                if !old.begun() {
                    if !released {
                        // The old copy serves until the workflow deploys the new.
                        p.blocked.push(Blocked {
                            workload: w.name.clone(),
                            reason: "waiting for the workflow step that deploys it".into(),
                        });
                        continue;
                    } else if canary == Some(false) {
                        p.blocked.push(Blocked {
                            workload: w.name.clone(),
                            reason: format!(
                                "canary: {}/{} keeps version {} until the canary passes its health gate or an operator promotes it",
                                k.workload, k.replica, old.version
                            ),
                        });
                        continue;
                    } else if canary == Some(true) || strategy == Strategy::BlueGreen {
                        // Beside the old one, whatever the surge budget.
                        surging += 1;
                    } else if surging < rp.max_surge {
                        // Surge: the new one starts below, beside the old one.
                        surging += 1;
                    } else if unavailable < rp.max_unavailable {
                        unavailable += 1;
                        p.actions.push(RuntimeAction {
                            node: old_node.clone(),
                            not_before: None,
                            reason: if old.version == inst.version {
                                format!("moving to {node}: stop the copy on {old_node} first")
                            } else {
                                format!(
                                    "rolling update to version {}: stop version {} first",
                                    inst.version, old.version
                                )
                            },
                            kind: ActionKind::Stop {
                                instance: old_id,
                                placement: old.placement,
                            },
                        });
                        continue;
                    } else {
                        p.blocked.push(Blocked {
                            workload: w.name.clone(),
                            reason: format!(
                                "rolling update: {}/{} waits for the replacements under way (maxSurge {}, maxUnavailable {})",
                                k.workload, k.replica, rp.max_surge, rp.max_unavailable
                            ),
                        });
                        continue;
                    }
                } else if !old.surge && !old.stopped {
                    // Stopping first: the new one starts once the old one stopped.
                    continue;
                }
                let new_ready = inst.observed == ObservedState::Ready
                    || (inst.observed == ObservedState::Running && !has_readiness);
                if old.surge && new_ready {
                    if canary == Some(true) {
                        // The old copy serves on until the promotion.
                        continue;
                    }
                    if strategy == Strategy::BlueGreen && !all_new_ready {
                        p.blocked.push(Blocked {
                            workload: w.name.clone(),
                            reason: format!(
                                "blue-green: version {} of {} is switched to once every new instance is ready",
                                inst.version, w.name
                            ),
                        });
                        continue;
                    }
                    if strategy == Strategy::BlueGreen && old.live() {
                        let n = input
                            .runtime
                            .of_workload(&w.name)
                            .filter(|(_, i)| i.version == input.version)
                            .count();
                        let step = RolloutStep {
                            workload: w.name.clone(),
                            kind: RolloutStepKind::Switch,
                            reason: format!(
                                "blue-green switch of {}: all {n} instance(s) of version {} ready; stopping version {}",
                                w.name, inst.version, old.version
                            ),
                        };
                        if !p.rollout_steps.contains(&step) {
                            p.rollout_steps.push(step);
                        }
                    }
                    if old.live() {
                        p.actions.push(RuntimeAction {
                            node: old_node.clone(),
                            not_before: None,
                            reason: if old.version == inst.version {
                                format!("moved: ready on {node}, stop the copy on {old_node}")
                            } else {
                                format!(
                                    "rolling update: version {} is ready, stop version {}",
                                    inst.version, old.version
                                )
                            },
                            kind: ActionKind::Stop {
                                instance: old_id,
                                placement: old.placement,
                            },
                        });
                    }
                    continue;
                }
                // The new one is handled below like any other.
            }
            let ready = inst.observed == ObservedState::Ready
                || (inst.observed == ObservedState::Running && !has_readiness);
            match &inst.observed {
                ObservedState::Pending => {
                    all_ready = false;
                    all_completed = false;
                    if !released {
                        p.blocked.push(Blocked {
                            workload: w.name.clone(),
                            reason: "waiting for the workflow step that deploys it".into(),
                        });
                    } else if !deps_ok {
                        p.blocked.push(Blocked {
                            workload: w.name.clone(),
                            reason: format!("waiting for {} to be ready", deps.join(", ")),
                        });
                    } else if !jobs_ok {
                        // Reason already given by the init job above.
                    } else if !inst.pending(Requested::Start(inst.starts)) {
                        p.actions
                            .push(start(input, w, id, node, inst, None, "placed"));
                        p.restarts.insert(k.clone(), inst.restarts);
                    }
                }
                ObservedState::Starting | ObservedState::Running | ObservedState::Ready => {
                    all_completed = false;
                    if !ready {
                        all_ready = false;
                    }
                }
                ObservedState::Stopped if matches!(inst.requested, Some((Requested::Stop, _))) => {
                    all_ready = false;
                    all_completed = false;
                }
                o if inst.starts > 0 && inst.pending(Requested::Start(inst.starts)) => {
                    // A restart is already asked; wait for its report.
                    all_ready = false;
                    all_completed = false;
                    down.push(format!(
                        "{}/{} {} (restart requested)",
                        k.workload,
                        k.replica,
                        o.describe()
                    ));
                }
                o => {
                    let failed = o.is_failure();
                    let ran_long = inst
                        .started_at
                        .is_some_and(|s| inst.since.since(s) >= lp.reset_after);
                    let used = if ran_long { 0 } else { inst.restarts };
                    // The failure's category may say otherwise than restart.
                    let category = o.failure_category();
                    let action =
                        category.map_or(FailureAction::Restart, |c| lp.on_failure.action(c));
                    if action != FailureAction::Restart && inst.replacing.is_none() {
                        all_ready = false;
                        all_completed = false;
                        let c = category.map(|c| c.to_string()).unwrap_or_default();
                        let reason = format!(
                            "{}/{} {} (onFailure.{c}: {action:?})",
                            k.workload,
                            k.replica,
                            o.describe()
                        );
                        if action == FailureAction::FailAndStopDependents {
                            failing.get_or_insert((w.name.clone(), reason));
                        } else {
                            p.blocked.push(Blocked {
                                workload: w.name.clone(),
                                reason: format!("{reason}; waiting for an operator"),
                            });
                            down.push(format!("{reason}; waiting for an operator"));
                        }
                        continue;
                    }
                    if lp.may_restart(failed, used) {
                        all_ready = false;
                        all_completed = false;
                        let due = inst.since.plus(lp.backoff.delay(used));
                        let why = format!("{}; restart {}", o.describe(), used + 1);
                        p.actions
                            .push(start(input, w, id, node, inst, Some(due), &why));
                        p.restarts.insert(k.clone(), used + 1);
                        if due > input.now {
                            wake(&mut p, due);
                        }
                        down.push(format!(
                            "{}/{} {} (restarting)",
                            k.workload,
                            k.replica,
                            o.describe()
                        ));
                    } else if !failed {
                        // Completed cleanly and not restarted: done.
                    } else {
                        all_ready = false;
                        all_completed = false;
                        let reason = format!(
                            "{}/{} {} after {} restarts",
                            k.workload,
                            k.replica,
                            o.describe(),
                            used
                        );
                        if inst.replacing.is_some() {
                            // A new version that cannot run fails its rollout,
                            // not the application.
                            p.rollout_failed
                                .get_or_insert((w.name.clone(), reason.clone()));
                            down.push(format!("{reason}; rollout failed"));
                            continue;
                        }
                        match lp.on_exhausted {
                            OnExhausted::FailAndStopDependents => {
                                failing.get_or_insert((w.name.clone(), reason));
                            }
                            OnExhausted::WaitForOperator => {
                                p.blocked.push(Blocked {
                                    workload: w.name.clone(),
                                    reason: format!("{reason}; waiting for an operator"),
                                });
                                down.push(format!("{reason}; waiting for an operator"));
                            }
                        }
                    }
                }
            }
        }
        state[i] = WorkloadState {
            ready: any && all_ready && jobs_ok,
            completed: any && all_completed && jobs_ok,
        };
        if state[i].completed {
            state[i].ready = true;
        }
    }

    if let Some((w, reason)) = failing {
        let ev = match input.phase {
            Phase::Scheduled => SystemEvent::ExecutionFailed,
            _ => SystemEvent::RuntimeFailed,
        };
        p.event = Some((ev, reason));
        p.failed_workload = Some(w);
        p.actions.clear();
        return p;
    }
    // The application runs once its critical workloads are ready: a
    // non-critical one (`critical: false`, a sidecar or a cache warmer)
    // neither holds Running back nor keeps it from recovering.
    let all_ready = state.iter().zip(ws).all(|(s, w)| s.ready || !w.critical);
    let all_completed = state.iter().all(|s| s.completed);
    let critical = ws.iter().filter(|w| w.critical).count();
    p.event = match input.phase {
        Phase::Scheduled if all_ready => Some((
            SystemEvent::ExecutionSucceeded,
            if critical == ws.len() {
                format!("all {} workloads ready", ws.len())
            } else {
                format!("all {critical} critical workloads ready")
            },
        )),
        Phase::Running | Phase::Degraded if all_completed => Some((
            SystemEvent::Finished,
            "every workload completed".to_string(),
        )),
        Phase::Running if !down.is_empty() => Some((SystemEvent::Degrade, down.join("; "))),
        Phase::Degraded if input.recoverable_degradation && down.is_empty() && all_ready => {
            Some((SystemEvent::Recovered, "every replica is back".to_string()))
        }
        _ => None,
    };
    p
}

/// The health gate of a canary workload: a canary of this version that
/// ended or restarted fails the rollout; canaries all ready for
/// `healthyFor` pass it (a promotion, or a wait for the operator's).
fn canary_gate(
    input: &PlanInput<'_>,
    w: &Workload,
    c: &CanaryPolicy,
    has_readiness: bool,
    p: &mut Plan,
) {
    let mut ready_since: Option<Timestamp> = Some(Timestamp(0));
    let mut count = 0;
    for (k, i) in input.runtime.of_workload(&w.name) {
        if k.replica >= c.replicas || i.version != input.version {
            continue;
        }
        count += 1;
        let failure = if i.observed.has_ended() {
            Some(i.observed.describe())
        } else if i.starts > 1 {
            Some(format!(
                "restarted ({})",
                i.last_failure.as_deref().unwrap_or("started again")
            ))
        } else {
            None
        };
        if let Some(f) = failure {
            p.rollout_failed.get_or_insert((
                w.name.clone(),
                format!(
                    "canary {}/{} of version {} failed its health gate: {f}",
                    k.workload, k.replica, input.version
                ),
            ));
            return;
        }
        let ready = i.observed == ObservedState::Ready
            || (i.observed == ObservedState::Running && !has_readiness);
        ready_since = match ready_since {
            Some(t) if ready => Some(t.max(i.since)),
            _ => None,
        };
    }
    let Some(since) = ready_since.filter(|_| count > 0) else {
        return;
    };
    let due = since.plus(c.healthy_for);
    if input.now < due {
        wake(p, due);
        return;
    }
    let passed = format!(
        "canary of {} ({count} instance(s) of version {}) passed its health gate: ready for {} without a restart",
        w.name, input.version, c.healthy_for
    );
    p.rollout_steps.push(if c.auto_promote {
        RolloutStep {
            workload: w.name.clone(),
            kind: RolloutStepKind::Promote,
            reason: format!("{passed}; promoting"),
        }
    } else {
        RolloutStep {
            workload: w.name.clone(),
            kind: RolloutStepKind::AwaitPromotion,
            reason: format!(
                "{passed}; waiting for `darosctl operate promote` (autoPromote: false)"
            ),
        }
    });
}

fn wake(p: &mut Plan, at: Timestamp) {
    p.wake_at = Some(p.wake_at.map_or(at, |w| w.min(at)));
}

fn start(
    input: &PlanInput<'_>,
    w: &Workload,
    instance: InstanceId,
    node: String,
    inst: &Instance,
    due: Option<Timestamp>,
    why: &str,
) -> RuntimeAction {
    RuntimeAction {
        node,
        not_before: due.filter(|d| *d > input.now),
        reason: why.to_string(),
        kind: ActionKind::Start {
            instance,
            placement: inst.placement,
            attempt: inst.starts + 1,
            launch: Box::new(launch_of(input.app, w, input.security, input.namespace)),
        },
    }
}
