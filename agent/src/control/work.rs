//! The contract between the control plane (leader dispatch, `control/`) and the
//! node-side runtime executor (`runtime/`).
//!
//! Level-triggered: the leader sends a node its **complete** desired work at a raft
//! position, again after every change; after a leader change and periodically it
//! asks whether the node still holds that work (by digest, [`super::work_digest`])
//! and sends it whole when not. The executor converges on it; sending the same
//! [`NodeWork`] twice changes nothing.
//!
//! Ownership of restarts: the coordinator decides every (re)start. An instance whose
//! attempt ended stays ended until the coordinator sends a higher `attempt`; the
//! adapters' own restart policy is never used for coordinator-launched instances.

use std::future::Future;
use std::pin::Pin;

use daros_coordinator::Timestamp;
use daros_coordinator::reconcile::{
    InitJobId, InstanceId, JobLaunch, ObservedState, PlacementId, WorkloadLaunch,
};
use serde::{Deserialize, Serialize};

pub use daros_gossip::fence::FenceToken;

/// One instance that must be live on the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredInstance {
    /// The instance (`tenant/app/workload/replica/vN`).
    pub instance: InstanceId,
    /// Its placement. A different placement of an instance the executor runs
    /// is a new run: the old one stops, this one starts at its attempt.
    #[serde(default)]
    pub placement: PlacementId,
    /// Start attempt, from 1. A higher attempt than the one the executor last
    /// started means: restart it (after `not_before`).
    pub attempt: u32,
    /// Do not start this attempt before this time (restart backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// How to run it.
    pub launch: WorkloadLaunch,
}

/// One init-job run the node must perform (once per attempt).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredJob {
    /// The job (`tenant/app/workload/init/job/vN`).
    pub job: InitJobId,
    /// The series of runs this attempt belongs to (results are kept per run and
    /// attempt: a new series never gets an old series' result).
    #[serde(default)]
    pub run: PlacementId,
    /// Attempt, from 1. Each attempt runs at most once; its result is kept and
    /// reported again instead of running it again.
    pub attempt: u32,
    /// How to run it.
    pub launch: JobLaunch,
}

/// What the leader sends to one node: its complete desired work at a raft position.
/// Anything the executor runs that is not listed is stopped, destroyed and cleaned up
/// (cgroup, QoS state, reservation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeWork {
    /// Node name this work is for.
    pub node: String,
    /// The leader's (term, index) when it computed this work; work older than the
    /// newest applied is ignored.
    pub fence: FenceToken,
    /// Instances that must be live.
    pub instances: Vec<DesiredInstance>,
    /// Init-job runs to perform.
    pub jobs: Vec<DesiredJob>,
}

/// One observed state the node reports back to the leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum NodeReport {
    /// An instance's state at an attempt.
    Instance {
        /// The instance.
        instance: InstanceId,
        /// The placement the state belongs to (the coordinator applies it to
        /// that placement only).
        #[serde(default)]
        placement: PlacementId,
        /// The attempt the state belongs to.
        attempt: u32,
        /// Its state.
        state: ObservedState,
    },
    /// An init job's state at an attempt.
    InitJob {
        /// The job.
        job: InitJobId,
        /// The series of runs the state belongs to.
        #[serde(default)]
        run: PlacementId,
        /// The attempt the state belongs to.
        attempt: u32,
        /// Its state (`exited` with code 0 is success).
        state: ObservedState,
    },
}

/// Why the executor could not take a [`NodeWork`].
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The work is for another node.
    #[error("work for node {got:?} sent to node {expected:?}")]
    WrongNode {
        /// This node.
        expected: String,
        /// The node named in the work.
        got: String,
    },
    /// Older than work already applied.
    #[error(
        "stale work at term {term} index {index}: already applied term {applied_term} index {applied_index}"
    )]
    Stale {
        /// Term of the refused work.
        term: u64,
        /// Index of the refused work.
        index: u64,
        /// Term applied.
        applied_term: u64,
        /// Index applied.
        applied_index: u64,
    },
    /// The executor failed (storage, adapter setup).
    #[error("executor: {0}")]
    Internal(String),
}

/// A boxed future, so the trait stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Implemented by the runtime executor (`runtime/`), called by the control plane.
pub trait WorkExecutor: Send + Sync + 'static {
    /// Converges the node on `work`. Returns once the changes are under way (starts
    /// and stops are asynchronous; their outcomes arrive as reports).
    fn execute(&self, work: NodeWork) -> BoxFuture<'_, Result<(), ExecError>>;

    /// Every state change from now on.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<NodeReport>;

    /// The current state of every instance and job the executor knows (full resync
    /// after a leader change or an agent restart).
    fn current(&self) -> BoxFuture<'_, Vec<NodeReport>>;

    /// The node has had no contact with the servers for `silent`: stop every live
    /// instance whose `stop_on_client_after` has passed (they are reported failed
    /// by the partition, so the coordinator restarts them once it hears of it and
    /// still wants them). Returns the instances stopped.
    fn stop_disconnected(&self, silent: std::time::Duration) -> BoxFuture<'_, Vec<String>> {
        let _ = silent;
        Box::pin(async { Vec::new() })
    }
}
