//! Runtime events (seed 000 §4.7.2 step 2: "the Runtime Adapter perceives
//! and reports"): what happened to an instance, sent to the lifecycle. The
//! adapter reports failure semantics; the lifecycle policy decides.

use crate::instance::{InstanceKey, RuntimeId};
use crate::status::ExitStatus;
use daros_coordinator::model::failure::Failure;
use daros_coordinator::model::lifecycle_policy::OnExhausted;
use daros_coordinator::model::time::{DurationMs, Timestamp};
use serde::{Deserialize, Serialize};
use std::fmt;
use tokio::sync::broadcast;

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum RuntimeEventKind {
    /// The instance was created (nothing runs yet).
    Created,
    /// A run started.
    #[serde(rename_all = "camelCase")]
    Started {
        /// Workload process id (process runtime).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// Run number (1 = first start).
        generation: u64,
    },
    /// A restarted agent took over a run that kept going while it was away.
    #[serde(rename_all = "camelCase")]
    Adopted {
        /// Workload process id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// Run number.
        generation: u64,
    },
    /// All readiness checks pass (or there are none and it runs).
    Ready,
    /// A readiness check failed past its threshold.
    #[serde(rename_all = "camelCase")]
    Unready {
        /// The check.
        check: String,
        /// What the probe saw.
        reason: String,
    },
    /// A run ended.
    #[serde(rename_all = "camelCase")]
    Exited {
        /// How.
        exit: ExitStatus,
        /// It ended because a stop was requested.
        requested: bool,
    },
    /// A failure in the terms of §4.7 (process exit, container crash,
    /// adapter communication error, failing health check...).
    #[serde(rename_all = "camelCase")]
    Failed {
        /// The failure.
        failure: Failure,
    },
    /// The lifecycle policy allows a restart; it happens after `delay`.
    #[serde(rename_all = "camelCase")]
    RestartScheduled {
        /// Restart number (1 = first restart).
        attempt: u32,
        /// Backoff delay.
        delay: DurationMs,
    },
    /// No restart is allowed any more: the lifecycle applies `onExhausted`
    /// (wait for an operator, or fail and stop dependents).
    #[serde(rename_all = "camelCase")]
    GaveUp {
        /// Restarts made before giving up.
        restarts: u32,
        /// What the policy says to do now.
        on_exhausted: OnExhausted,
    },
    /// The instance ran to completion and is not restarted.
    Completed,
    /// The instance stopped on request.
    Stopped,
    /// The instance and its state are gone.
    Destroyed,
    /// This subscriber fell behind and missed `missed` events: re-inspect.
    #[serde(rename_all = "camelCase")]
    Lagged {
        /// Events lost.
        missed: u64,
    },
}

/// One event about one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeEvent {
    /// The instance (for `Lagged`, an empty process id).
    pub id: RuntimeId,
    /// Which workload instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<InstanceKey>,
    /// When it was observed.
    pub time: Timestamp,
    /// What happened.
    #[serde(flatten)]
    pub kind: RuntimeEventKind,
}

impl fmt::Display for RuntimeEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {:?}", self.time, self.id, self.kind)
    }
}

/// Fan-out of events to any number of subscribers.
#[derive(Debug, Clone)]
pub struct EventBus {
    tx: broadcast::Sender<RuntimeEvent>,
}

impl EventBus {
    /// A bus keeping up to `capacity` events per slow subscriber.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(16));
        Self { tx }
    }

    /// Sends `kind` about `id` now.
    pub fn emit(&self, id: &RuntimeId, key: Option<&InstanceKey>, kind: RuntimeEventKind) {
        let ev = RuntimeEvent {
            id: id.clone(),
            key: key.cloned(),
            time: crate::time::now(),
            kind,
        };
        tracing::debug!(instance = %ev.id, event = ?ev.kind, "runtime event");
        // No subscriber is not an error: status stays available by inspect.
        let _ = self.tx.send(ev);
    }

    /// A new subscription, seeing events sent from now on.
    pub fn subscribe(&self) -> EventStream {
        EventStream {
            rxs: vec![self.tx.subscribe()],
        }
    }
}

/// A subscription to the events of one adapter or several (merged).
#[derive(Debug)]
pub struct EventStream {
    rxs: Vec<broadcast::Receiver<RuntimeEvent>>,
}

fn lagged(missed: u64) -> RuntimeEvent {
    RuntimeEvent {
        id: crate::instance::RuntimeId::new(crate::instance::AdapterKind::Process, "-"),
        key: None,
        time: crate::time::now(),
        kind: RuntimeEventKind::Lagged { missed },
    }
}

impl EventStream {
    /// One stream of the events of all of `streams`.
    pub fn merge(streams: impl IntoIterator<Item = EventStream>) -> Self {
        Self {
            rxs: streams.into_iter().flat_map(|s| s.rxs).collect(),
        }
    }

    /// The next event; `None` once every adapter is gone. A subscriber that
    /// fell behind gets one `Lagged` event and should re-inspect.
    pub async fn next(&mut self) -> Option<RuntimeEvent> {
        loop {
            if self.rxs.is_empty() {
                return None;
            }
            let (res, idx, _) =
                futures::future::select_all(self.rxs.iter_mut().map(|rx| Box::pin(rx.recv())))
                    .await;
            match res {
                Ok(ev) => return Some(ev),
                Err(broadcast::error::RecvError::Lagged(missed)) => return Some(lagged(missed)),
                Err(broadcast::error::RecvError::Closed) => {
                    self.rxs.remove(idx);
                }
            }
        }
    }

    /// The next event if one is already queued.
    pub fn try_next(&mut self) -> Option<RuntimeEvent> {
        for rx in &mut self.rxs {
            match rx.try_recv() {
                Ok(ev) => return Some(ev),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => return Some(lagged(missed)),
                Err(_) => {}
            }
        }
        None
    }
}
