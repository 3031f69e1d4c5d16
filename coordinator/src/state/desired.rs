//! What each node must run now, read from the coordinator state: the level the
//! leader sends to node agents (level-triggered dispatch), and the per-instance
//! status that lets the state machine drop stale or repeated node reports.

use super::Coordinator;
use crate::model::time::Timestamp;
use crate::reconcile::plan::launch_of;
use crate::reconcile::{
    InitJobId, InstanceId, JobLaunch, ObservedState, PlacementId, Requested, WorkloadLaunch,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One instance that must be live on a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredStart {
    /// The instance.
    pub instance: InstanceId,
    /// Its placement: a node that runs another placement of the same
    /// instance stops that one and starts this one.
    pub placement: PlacementId,
    /// Start attempt (from 1).
    pub attempt: u32,
    /// Restart backoff: not before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// How to run it (from the spec of its version).
    pub launch: WorkloadLaunch,
}

/// One init-job run a node must perform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredRun {
    /// The job.
    pub job: InitJobId,
    /// The series of runs (a node keeps one result per run and attempt).
    pub run: PlacementId,
    /// Attempt (from 1).
    pub attempt: u32,
    /// How to run it.
    pub launch: JobLaunch,
}

/// The complete desired work of one node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DesiredWork {
    /// Instances that must be live.
    pub instances: Vec<DesiredStart>,
    /// Init-job runs.
    pub jobs: Vec<DesiredRun>,
}

/// What a node report is about.
#[derive(Debug, Clone, Copy)]
pub enum ReportTarget<'a> {
    /// An instance, at a placement (0: matched by version).
    Instance(&'a InstanceId, PlacementId),
    /// An init job.
    Job(&'a crate::reconcile::InitJobId),
}

/// What the coordinator knows of an instance or job: its attempt and last
/// observed state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStatus {
    /// Attempt asked last (0: never started).
    pub attempt: u32,
    /// Last observed state.
    pub observed: ObservedState,
}

impl Coordinator {
    /// The desired work of every node, by node name. An instance is desired
    /// on its node while its last request is a start (ended attempts stay
    /// listed at their attempt until a higher one is asked); the old instance
    /// of a rolling update stays desired until its stop is asked; an init job
    /// is desired once a run was asked.
    pub fn desired_work(&self) -> BTreeMap<String, DesiredWork> {
        let mut out: BTreeMap<String, DesiredWork> = BTreeMap::new();
        for n in self.cluster.live_nodes() {
            out.entry(n.spec.name.clone()).or_default();
        }
        for e in self.apps.values() {
            self.work_of_app(e, None, &mut out);
        }
        out
    }

    /// The desired work of node `node`: `None` when it has none and is not
    /// registered (what [`Coordinator::desired_work`] leaves out).
    pub fn desired_work_of(&self, node: &str) -> Option<DesiredWork> {
        let mut out: BTreeMap<String, DesiredWork> = BTreeMap::new();
        if self.cluster.index_of(node).is_some() {
            out.insert(node.to_string(), DesiredWork::default());
        }
        for e in self.apps.touching(node) {
            self.work_of_app(e, Some(node), &mut out);
        }
        out.remove(node)
    }

    /// The desired work a reader at `cursor` lacks, and its new cursor: the
    /// work of the nodes changed since, or every node's.
    pub fn desired_work_since(
        &self,
        cursor: Option<super::work_changes::WorkCursor>,
    ) -> (
        super::work_changes::WorkCursor,
        super::work_changes::WorkUpdate,
    ) {
        use super::work_changes::WorkUpdate;
        let update = match self.work.since(cursor) {
            None => WorkUpdate::All(self.desired_work()),
            Some(nodes) => WorkUpdate::Nodes(
                nodes
                    .into_iter()
                    .map(|n| (n.to_string(), self.desired_work_of(n)))
                    .collect(),
            ),
        };
        (self.work.cursor(), update)
    }

    /// What application `e` adds to each node's work (only to `only`'s,
    /// when given).
    fn work_of_app(
        &self,
        e: &super::entry::AppEntry,
        only: Option<&str>,
        out: &mut BTreeMap<String, DesiredWork>,
    ) {
        let wanted = |node: &String| only.is_none_or(|o| o == node);
        if !e.phase.holds_placements() {
            return;
        }
        let spec_of = |v: u32| e.version(v).map(|av| av.spec.as_ref());
        let baseline = e
            .effective
            .as_ref()
            .map(|p| p.security.clone())
            .unwrap_or_default();
        let namespace = self.namespace_of(&e.key.tenant);
        let ns = namespace.as_deref();
        for (k, inst) in &e.runtime.instances {
            if let Some(old) = &inst.replacing
                && !old.stop_requested
                && !old.stopped
                && let (Some(node), Some(spec)) = (&old.node, spec_of(old.version))
                && wanted(node)
                && let Some(w) = spec.workload(&k.workload)
            {
                out.entry(node.clone())
                    .or_default()
                    .instances
                    .push(DesiredStart {
                        instance: InstanceId {
                            app: e.key.clone(),
                            workload: k.workload.clone(),
                            replica: k.replica,
                            version: old.version,
                        },
                        placement: old.placement,
                        attempt: 1,
                        not_before: None,
                        launch: WorkloadLaunch {
                            env: self.env_of(&e.key.tenant, w),
                            ..launch_of(spec, w, &baseline, ns)
                        },
                    });
            }
            let Some((Requested::Start(attempt), _)) = inst.requested else {
                continue;
            };
            let (Some(node), Some(spec)) = (&inst.node, spec_of(inst.version)) else {
                continue;
            };
            if !wanted(node) {
                continue;
            }
            let Some(w) = spec.workload(&k.workload) else {
                continue;
            };
            let not_before = (attempt > 1 && inst.restarts > 0).then(|| {
                inst.since.plus(
                    spec.lifecycle_of(w)
                        .backoff
                        .delay(inst.restarts.saturating_sub(1)),
                )
            });
            out.entry(node.clone())
                .or_default()
                .instances
                .push(DesiredStart {
                    instance: InstanceId {
                        app: e.key.clone(),
                        workload: k.workload.clone(),
                        replica: k.replica,
                        version: inst.version,
                    },
                    placement: inst.placement,
                    attempt,
                    not_before,
                    launch: WorkloadLaunch {
                        env: self.env_of(&e.key.tenant, w),
                        ..launch_of(spec, w, &baseline, ns)
                    },
                });
        }
        for ((wname, jname), st) in &e.runtime.jobs {
            if st.requested_at.is_none() || st.attempts == 0 {
                continue;
            }
            let (Some(node), Some(spec)) = (&st.node, spec_of(st.version)) else {
                continue;
            };
            if !wanted(node) {
                continue;
            }
            if wname == super::workflow::WORKFLOW_JOBS {
                let step = spec.spec.workflow.as_ref().and_then(|wf| wf.step(jname));
                if let Some(launch) = step.and_then(|s| self.job_launch(e, s).ok()) {
                    out.entry(node.clone()).or_default().jobs.push(DesiredRun {
                        job: InitJobId {
                            app: e.key.clone(),
                            workload: wname.clone(),
                            job: jname.clone(),
                            version: st.version,
                        },
                        run: st.run,
                        attempt: st.attempts,
                        launch,
                    });
                }
                continue;
            }
            let Some(w) = spec.workload(wname) else {
                continue;
            };
            let all = w.all_init_jobs();
            let Some((_, j)) = all.iter().find(|(_, j)| &j.name == jname) else {
                continue;
            };
            out.entry(node.clone()).or_default().jobs.push(DesiredRun {
                job: InitJobId {
                    app: e.key.clone(),
                    workload: wname.clone(),
                    job: jname.clone(),
                    version: st.version,
                },
                run: st.run,
                attempt: st.attempts,
                launch: JobLaunch {
                    security: crate::policy::security::context_of(&w.security, &baseline),
                    namespace: namespace.clone(),
                    runtime: j.runtime.unwrap_or(w.runtime),
                    image: j.image.clone(),
                    resources: j.resources,
                    timeout: j.timeout,
                    runtime_spec: j.runtime_spec.clone(),
                    env: self.env_of(&e.key.tenant, w),
                    volumes: crate::traits::storage::volumes(&w.traits),
                },
            });
        }
    }

    /// Attempt and observed state of one placement of an instance: its
    /// current placement, or the old one a rolling update replaces (attempt
    /// 0, `stopped` once it ended). `None` when no such placement exists.
    pub fn instance_status(&self, id: &InstanceId, placement: PlacementId) -> Option<RunStatus> {
        let e = self.apps.get(&id.app)?;
        let inst = e
            .runtime
            .instances
            .get(&crate::reconcile::InstanceKey::new(
                id.workload.clone(),
                id.replica,
            ))?;
        if inst.owns(id.version, placement) {
            return Some(RunStatus {
                attempt: inst.starts,
                observed: inst.observed.clone(),
            });
        }
        let old = inst
            .replacing
            .as_ref()
            .filter(|o| o.version == id.version && (placement == 0 || o.placement == placement))?;
        Some(RunStatus {
            attempt: 0,
            observed: if old.stopped {
                ObservedState::Stopped
            } else {
                ObservedState::Running
            },
        })
    }

    /// Attempt and observed state of an init job's series of runs `run` (0:
    /// any run of that version).
    pub fn job_status(&self, id: &InitJobId, run: PlacementId) -> Option<RunStatus> {
        let e = self.apps.get(&id.app)?;
        let st = e
            .runtime
            .jobs
            .get(&(id.workload.clone(), id.job.clone()))
            .filter(|j| j.version == id.version && (run == 0 || j.run == run))?;
        Some(RunStatus {
            attempt: st.attempts,
            observed: st.observed.clone(),
        })
    }

    /// The node the run a report names is placed on, when the coordinator
    /// knows one (a report from another node is not about it).
    pub fn report_node(&self, r: &ReportTarget<'_>) -> Option<&str> {
        match r {
            ReportTarget::Instance(id, placement) => {
                let inst = self.apps.get(&id.app)?.runtime.instances.get(
                    &crate::reconcile::InstanceKey::new(id.workload.clone(), id.replica),
                )?;
                if inst.owns(id.version, *placement) {
                    return inst.node.as_deref();
                }
                inst.replacing
                    .as_ref()
                    .filter(|o| {
                        o.version == id.version && (*placement == 0 || o.placement == *placement)
                    })?
                    .node
                    .as_deref()
            }
            ReportTarget::Job(id) => self
                .apps
                .get(&id.app)?
                .runtime
                .jobs
                .get(&(id.workload.clone(), id.job.clone()))?
                .node
                .as_deref(),
        }
    }

    /// True when a `Tick` at `now` has something to do (a wake-up is due or an
    /// application is degraded and may get capacity back).
    pub fn tick_due(&self, now: Timestamp) -> bool {
        self.apps.values().any(|e| {
            e.wake_at.is_some_and(|w| w <= now) || e.phase == crate::lifecycle::Phase::Degraded
        }) || self.drains.values().any(|d| {
            d.complete.is_none() && d.failed.values().any(|(e, _)| *e < self.capacity_epoch)
        })
    }
}
