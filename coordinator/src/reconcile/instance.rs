//! Runtime bookkeeping of one application: its placed instances and init
//! jobs, with what was observed and what was last asked of the runtime.

use super::observed::ObservedState;
use crate::model::time::Timestamp;
use crate::placement::NodeIdx;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A replica of a workload, independent of version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceKey {
    /// Workload name.
    pub workload: String,
    /// Replica number.
    pub replica: u32,
}

impl InstanceKey {
    /// Key of replica `replica` of `workload`.
    pub fn new(workload: impl Into<String>, replica: u32) -> Self {
        Self {
            workload: workload.into(),
            replica,
        }
    }
}

/// What was last asked of the runtime for an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Requested {
    /// Start attempt n (1 = first start).
    Start(u32),
    /// Stop.
    Stop,
}

/// Identity of one placement of a replica on a node: a new one for every
/// (re)placement, never reused (the cluster's allocation serial). A runtime
/// report names the placement it is about and changes only that one; `0`
/// is "unknown" (reports from agents that predate placements).
pub type PlacementId = u64;

/// The instance an update replaces: stopped first, or, in a surge, kept
/// running until its replacement is ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replaced {
    /// Node the old instance runs on.
    pub node: Option<String>,
    /// Version it runs.
    pub version: u32,
    /// Its placement.
    #[serde(default)]
    pub placement: PlacementId,
    /// True once it is stopped (or never started).
    pub stopped: bool,
    /// True once its stop was asked.
    pub stop_requested: bool,
    /// True once its replacement was started while it still ran (a surge).
    #[serde(default)]
    pub surge: bool,
    /// What it was last seen doing (what it is again if a rollback keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedState>,
}

impl Replaced {
    /// True while it may still run (no stop asked or seen).
    pub fn live(&self) -> bool {
        !self.stopped && !self.stop_requested
    }

    /// True once its replacement began: surged beside it, or stopping it.
    pub fn begun(&self) -> bool {
        self.surge || !self.live()
    }
}

/// One placed replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// Node it is placed on (`None` when evicted and not re-placed).
    pub node: Option<String>,
    /// Spec version it runs.
    pub version: u32,
    /// Its current placement (a new one for every re-placement).
    pub placement: PlacementId,
    /// Last observed state.
    pub observed: ObservedState,
    /// When `observed` last changed (or the instance was placed).
    pub since: Timestamp,
    /// When it last started running.
    pub started_at: Option<Timestamp>,
    /// Starts asked so far (attempt numbers).
    pub starts: u32,
    /// Restarts counted against the retry budget.
    pub restarts: u32,
    /// Reports received so far (orders requests against observations).
    pub observations: u64,
    /// Last request and the observation count when it was made; pending
    /// until the next report.
    pub requested: Option<(Requested, u64)>,
    /// Why it lost its node, when evicted.
    pub evicted: Option<String>,
    /// The old instance a rolling update is replacing.
    pub replacing: Option<Replaced>,
    /// Allocation in the cluster (node index, serial).
    pub slot: Option<(NodeIdx, u64)>,
    /// The last failure reported since it was last ready (what `get apps`
    /// shows while it restarts).
    pub last_failure: Option<String>,
    /// Since when its node is Down (the instance is unreachable, not lost yet).
    pub disconnected: Option<Timestamp>,
}

impl Instance {
    /// A freshly placed instance (its placement is the allocation serial).
    pub fn placed(node: String, slot: (NodeIdx, u64), version: u32, now: Timestamp) -> Self {
        Self {
            node: Some(node),
            version,
            placement: slot.1,
            observed: ObservedState::Pending,
            since: now,
            started_at: None,
            starts: 0,
            restarts: 0,
            observations: 0,
            requested: None,
            evicted: None,
            replacing: None,
            slot: Some(slot),
            last_failure: None,
            disconnected: None,
        }
    }

    /// The old instance a rollback keeps (it never stopped and its spec is
    /// the new version's), taking over the allocation `slot` made for the
    /// replacement on the same node.
    pub fn restored(old: &Replaced, slot: (NodeIdx, u64), now: Timestamp) -> Self {
        let observed = old.observed.clone().unwrap_or(ObservedState::Running);
        Self {
            node: old.node.clone(),
            version: old.version,
            placement: old.placement,
            started_at: Some(now),
            starts: 1,
            // What the node was last asked to run for it (as while replaced).
            requested: Some((Requested::Start(1), 0)),
            observed,
            replacing: None,
            ..Self::placed(String::new(), slot, old.version, now)
        }
    }

    /// True when `what` was asked after the last observation.
    pub fn pending(&self, what: Requested) -> bool {
        self.requested == Some((what, self.observations))
    }

    /// True when a report about (`version`, `placement`) concerns this
    /// instance's current placement (`placement` 0: any placement of that
    /// version, as reports without placements were matched).
    pub fn owns(&self, version: u32, placement: PlacementId) -> bool {
        self.node.is_some()
            && self.version == version
            && (placement == 0 || self.placement == placement)
    }

    /// Records a report.
    pub fn observe(&mut self, state: ObservedState, now: Timestamp) {
        if state.is_live() && !self.observed.is_live() {
            self.started_at = Some(now);
        }
        if state != self.observed {
            self.since = now;
        }
        self.observed = state;
        self.observations += 1;
    }
}

/// Status of one init job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    /// Node it runs on.
    pub node: Option<String>,
    /// Spec version.
    pub version: u32,
    /// Identity of this series of runs (a new one when the job is reset for a
    /// new version, a retry or a restart), so that a node never answers a new
    /// series with a result it kept from an earlier one.
    pub run: PlacementId,
    /// Last observed state (`Exited {code: 0}` is success).
    pub observed: ObservedState,
    /// Runs asked so far.
    pub attempts: u32,
    /// When `observed` last changed.
    pub since: Timestamp,
    /// Reports received so far.
    pub observations: u64,
    /// Observation count when the last run was asked.
    pub requested_at: Option<u64>,
}

impl JobStatus {
    /// A job not run yet.
    pub fn new(version: u32, run: PlacementId, now: Timestamp) -> Self {
        Self {
            node: None,
            version,
            run,
            observed: ObservedState::Pending,
            since: now,
            attempts: 0,
            observations: 0,
            requested_at: None,
        }
    }

    /// True once it succeeded.
    pub fn succeeded(&self) -> bool {
        self.observed == ObservedState::Exited { code: 0 }
    }

    /// True when a run was asked after the last observation.
    pub fn run_pending(&self) -> bool {
        self.requested_at == Some(self.observations)
    }

    /// Records a report.
    pub fn observe(&mut self, state: ObservedState, now: Timestamp) {
        if state != self.observed {
            self.since = now;
        }
        self.observed = state;
        self.observations += 1;
    }
}

/// Key of an init job: (workload, job).
pub type JobKey = (String, String);

/// Runtime bookkeeping of an application.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppRuntime {
    /// Placed replicas.
    pub instances: BTreeMap<InstanceKey, Instance>,
    /// Init jobs.
    pub jobs: BTreeMap<JobKey, JobStatus>,
}

impl AppRuntime {
    /// Instances of workload `w`, by replica.
    pub fn of_workload<'a>(
        &'a self,
        w: &'a str,
    ) -> impl Iterator<Item = (&'a InstanceKey, &'a Instance)> + 'a {
        self.instances
            .range(InstanceKey::new(w, 0)..=InstanceKey::new(w, u32::MAX))
    }
}
