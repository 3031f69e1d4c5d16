//! Reading a Pod as D-AROS sees an instance: its phase, conditions and
//! container statuses mapped to [`InstanceState`], readiness, restarts and
//! the last exit; and the events (seed 000 §4.7) implied by the change from
//! one observation to the next: a rising restart count is a container
//! crash (OOMKilled included), a Failed phase is a crash with no restart
//! left, readiness flips are Ready/Unready.

use crate::event::RuntimeEventKind;
use crate::status::{ExitStatus, InstanceState};
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::model::lifecycle_policy::LifecyclePolicy;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};

/// Waiting reasons that mean the container cannot be created or pulled.
const START_ERRORS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// What one look at a pod says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Instance state.
    pub state: InstanceState,
    /// The pod's Ready condition is True.
    pub ready: bool,
    /// Container restarts, summed over the pod's containers.
    pub restarts: u32,
    /// Some container is running.
    pub running: bool,
    /// The most recent container termination.
    pub last_exit: Option<ExitStatus>,
    /// Its reason (`Error`, `OOMKilled`, `Completed`...).
    pub last_reason: Option<String>,
    /// Why it is in this state, in words.
    pub message: Option<String>,
    /// Pod phase.
    pub phase: Option<String>,
    /// Pod UID.
    pub uid: Option<String>,
    /// Kubernetes QoS class.
    pub qos_class: Option<String>,
    /// Node.
    pub node: Option<String>,
}

fn latest_termination(pod: &Pod) -> Option<&ContainerStateTerminated> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses
        .iter()
        .flat_map(|c| {
            [
                c.state.as_ref().and_then(|s| s.terminated.as_ref()),
                c.last_state.as_ref().and_then(|s| s.terminated.as_ref()),
            ]
        })
        .flatten()
        .max_by_key(|t| t.finished_at.as_ref().map(|f| f.0))
}

/// Reads `pod`.
pub fn observe(pod: &Pod) -> Observation {
    let status = pod.status.as_ref();
    let statuses = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let restarts: u32 = statuses
        .iter()
        .map(|c| u32::try_from(c.restart_count).unwrap_or(0))
        .sum();
    let running = statuses
        .iter()
        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    let waiting = statuses
        .iter()
        .find_map(|c| c.state.as_ref().and_then(|s| s.waiting.as_ref()));
    let waiting_reason = waiting.and_then(|w| w.reason.clone());
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let term = latest_termination(pod);
    let last_exit = term.map(|t| ExitStatus {
        code: Some(t.exit_code),
        signal: t.signal,
    });
    let phase = status.and_then(|s| s.phase.clone());
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let state = if deleting {
        InstanceState::Stopping
    } else {
        match phase.as_deref() {
            Some("Running") if waiting_reason.as_deref() == Some("CrashLoopBackOff") => {
                InstanceState::BackOff
            }
            Some("Running") => InstanceState::Running,
            Some("Succeeded") => InstanceState::Completed,
            Some("Failed") => InstanceState::Failed,
            Some("Unknown") => InstanceState::Unknown,
            _ => InstanceState::Starting,
        }
    };
    let waiting_msg = waiting.map(|w| {
        format!(
            "{}: {}",
            w.reason.as_deref().unwrap_or("Waiting"),
            w.message.as_deref().unwrap_or("")
        )
        .trim_end_matches([':', ' '])
        .to_string()
    });
    let message = status
        .and_then(|s| match (&s.reason, &s.message) {
            (Some(r), Some(m)) => Some(format!("{r}: {m}")),
            (Some(r), None) => Some(r.clone()),
            (None, Some(m)) => Some(m.clone()),
            (None, None) => None,
        })
        .or(waiting_msg)
        .or_else(|| {
            let unscheduled = status.and_then(|s| s.conditions.as_ref()).and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            });
            unscheduled.map(|c| {
                format!(
                    "unscheduled: {}",
                    c.message.as_deref().or(c.reason.as_deref()).unwrap_or("")
                )
            })
        });
    Observation {
        state,
        ready,
        restarts,
        running,
        last_exit,
        last_reason: term.and_then(|t| t.reason.clone()),
        message,
        phase,
        uid: pod.metadata.uid.clone(),
        qos_class: status.and_then(|s| s.qos_class.clone()),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
    }
}

/// True when a waiting reason says the container cannot start at all.
pub fn start_error(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        let r = w.reason.as_deref()?;
        START_ERRORS
            .contains(&r)
            .then(|| format!("{r}: {}", w.message.as_deref().unwrap_or("")))
    })
}

fn crash(o: &Observation) -> Failure {
    // The kubelet names a container the kernel killed for memory.
    if o.last_reason.as_deref() == Some("OOMKilled") {
        return Failure::Runtime(RuntimeFailure::OutOfMemory { limit: None });
    }
    Failure::Runtime(RuntimeFailure::ContainerCrash {
        exit_code: o.last_exit.and_then(|e| e.code),
    })
}

/// Events implied by going from `prev` (none for a pod seen the first
/// time) to `next`, under `policy`.
pub fn transition_events(
    prev: Option<&Observation>,
    next: &Observation,
    policy: &LifecyclePolicy,
) -> Vec<RuntimeEventKind> {
    let mut out = Vec::new();
    let before_restarts = prev.map_or(0, |p| p.restarts);
    let was_running = prev.is_some_and(|p| p.running || p.restarts > 0);
    if next.restarts > before_restarts {
        // One report per observed rise; the kubelet already restarted it.
        let exit = next.last_exit.unwrap_or(ExitStatus {
            code: None,
            signal: None,
        });
        out.push(RuntimeEventKind::Exited {
            exit,
            requested: false,
        });
        if !exit.success() || next.last_reason.as_deref() == Some("OOMKilled") {
            out.push(RuntimeEventKind::Failed {
                failure: crash(next),
            });
        }
    }
    if next.running && (!was_running || next.restarts > before_restarts) {
        out.push(RuntimeEventKind::Started {
            pid: None,
            generation: u64::from(next.restarts) + 1,
        });
    }
    let prev_state = prev.map(|p| p.state);
    if next.state == InstanceState::Completed && prev_state != Some(InstanceState::Completed) {
        out.push(RuntimeEventKind::Exited {
            exit: next.last_exit.unwrap_or(ExitStatus {
                code: Some(0),
                signal: None,
            }),
            requested: false,
        });
        out.push(RuntimeEventKind::Completed);
    }
    if next.state == InstanceState::Failed && prev_state != Some(InstanceState::Failed) {
        out.push(RuntimeEventKind::Exited {
            exit: next.last_exit.unwrap_or(ExitStatus {
                code: None,
                signal: None,
            }),
            requested: false,
        });
        out.push(RuntimeEventKind::Failed {
            failure: crash(next),
        });
        out.push(RuntimeEventKind::GaveUp {
            restarts: next.restarts,
            on_exhausted: policy.on_exhausted,
        });
    }
    let was_ready = prev.is_some_and(|p| p.ready);
    if next.ready && !was_ready {
        out.push(RuntimeEventKind::Ready);
    } else if !next.ready && was_ready {
        out.push(RuntimeEventKind::Unready {
            check: "readiness".into(),
            reason: next
                .message
                .clone()
                .unwrap_or_else(|| "the pod is not ready".into()),
        });
    }
    out
}

/// True when the pod restarted more often than `policy` allows.
pub fn retries_exceeded(o: &Observation, policy: &LifecyclePolicy) -> bool {
    policy.max_retries.is_some_and(|m| o.restarts > m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "0f3c-11"},
            "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn phases_and_conditions_map_to_states() {
        let pending = observe(&pod(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}]})));
        assert_eq!(pending.state, InstanceState::Starting);
        assert_eq!(
            pending.message.as_deref(),
            Some("unscheduled: 0/3 nodes are available")
        );
        let running = observe(&pod(json!({"phase": "Running", "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                                   "state": {"running": {}}}]})));
        assert_eq!(running.state, InstanceState::Running);
        assert!(running.ready && running.running);
        assert_eq!(running.qos_class.as_deref(), Some("Burstable"));
        assert_eq!(running.uid.as_deref(), Some("0f3c-11"));
        assert_eq!(running.node.as_deref(), Some("n1"));
        let events = transition_events(Some(&pending), &running, &LifecyclePolicy::default());
        assert_eq!(
            events,
            [
                RuntimeEventKind::Started {
                    pid: None,
                    generation: 1
                },
                RuntimeEventKind::Ready
            ]
        );
    }

    #[test]
    fn oom_killed_crash_loop_is_named_out_of_memory() {
        let before = observe(&pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}],
            "conditions": [{"type": "Ready", "status": "True"}]})));
        let after = observe(&pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}},
             "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
            "conditions": [{"type": "Ready", "status": "False"}]})));
        assert_eq!(after.state, InstanceState::BackOff);
        assert_eq!(after.last_reason.as_deref(), Some("OOMKilled"));
        let events = transition_events(Some(&before), &after, &LifecyclePolicy::default());
        assert_eq!(
            events,
            [
                RuntimeEventKind::Exited {
                    exit: ExitStatus {
                        code: Some(137),
                        signal: None
                    },
                    requested: false
                },
                RuntimeEventKind::Failed {
                    failure: Failure::Runtime(RuntimeFailure::OutOfMemory { limit: None })
                },
                RuntimeEventKind::Unready {
                    check: "readiness".into(),
                    reason: "CrashLoopBackOff: back-off 10s restarting failed container".into()
                },
            ]
        );
        let policy = LifecyclePolicy {
            max_retries: Some(0),
            ..LifecyclePolicy::default()
        };
        assert!(retries_exceeded(&after, &policy));
        assert!(!retries_exceeded(&before, &policy));
    }

    #[test]
    fn succeeded_and_failed_phases_end_the_instance() {
        let done = observe(&pod(json!({"phase": "Succeeded", "containerStatuses": [
            {"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]})));
        assert_eq!(done.state, InstanceState::Completed);
        let ev = transition_events(None, &done, &LifecyclePolicy::default());
        assert_eq!(ev.last(), Some(&RuntimeEventKind::Completed));
        let failed = observe(&pod(
            json!({"phase": "Failed", "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline"}),
        ));
        assert_eq!(failed.state, InstanceState::Failed);
        assert!(failed.message.unwrap().starts_with("DeadlineExceeded"));
        let bad = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}}]}));
        assert_eq!(
            start_error(&bad).as_deref(),
            Some("ImagePullBackOff: pull access denied")
        );
        assert_eq!(
            observe(&bad).message.as_deref(),
            Some("ImagePullBackOff: pull access denied")
        );
    }
}
