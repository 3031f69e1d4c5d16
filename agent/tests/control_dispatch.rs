//! Leader dispatch with a recording executor (named as such: it stands in for
//! the runtime executor and records the work it is given). A real control
//! plane (mesh on loopback, one-member raft on redb) runs in this process;
//! reports from the recording executor drive the coordinator through raft.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use daros_agent::config::MeshSection;
use daros_agent::control::state::ControlQuery;
use daros_agent::control::work::{BoxFuture, ExecError, NodeReport, NodeWork, WorkExecutor};
use daros_agent::control::{ControlPlane, ControlSettings};
use daros_coordinator::spec::{self, Format};
use daros_coordinator::{Command, ExecutionNode, ObservedState};
use tokio::sync::broadcast;

const SHOP: &str = include_str!("../../examples/shop.yaml");

/// Records every [`NodeWork`]; reports what the test tells it to.
struct RecordingExecutor {
    works: Mutex<Vec<NodeWork>>,
    tx: broadcast::Sender<NodeReport>,
    current: Mutex<BTreeMap<String, NodeReport>>,
}

impl RecordingExecutor {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            works: Mutex::default(),
            tx: broadcast::channel(64).0,
            current: Mutex::default(),
        })
    }

    fn report(&self, key: &str, r: NodeReport) {
        self.current.lock().unwrap().insert(key.into(), r.clone());
        let _ = self.tx.send(r);
    }

    fn count(&self) -> usize {
        self.works.lock().unwrap().len()
    }

    fn last(&self) -> Option<NodeWork> {
        self.works.lock().unwrap().last().cloned()
    }
}

impl WorkExecutor for RecordingExecutor {
    fn execute(&self, work: NodeWork) -> BoxFuture<'_, Result<(), ExecError>> {
        self.works.lock().unwrap().push(work);
        Box::pin(async { Ok(()) })
    }

    fn subscribe(&self) -> broadcast::Receiver<NodeReport> {
        self.tx.subscribe()
    }

    fn current(&self) -> BoxFuture<'_, Vec<NodeReport>> {
        let v = self.current.lock().unwrap().values().cloned().collect();
        Box::pin(async move { v })
    }
}

async fn until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn node() -> ExecutionNode {
    serde_json::from_value(serde_json::json!({
        "name": "rec-node",
        "capacity": {"cpu": "8", "memory": "16Gi"},
        "runtimes": ["process"]
    }))
    .unwrap()
}

async fn phase(p: &ControlPlane) -> String {
    let apps = p
        .query(ControlQuery::Apps {
            now: daros_agent::control::plane::now(),
        })
        .await
        .unwrap();
    apps[0]["phase"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_dispatches_level_triggered_work_and_reports_drive_the_app() {
    let dir = tempfile::tempdir().unwrap();
    let exec = RecordingExecutor::new();
    let mesh = MeshSection {
        dispatch_interval: daros_agent::config::HumanDuration(Duration::from_millis(300)),
        ..MeshSection::default()
    };
    let plane = ControlPlane::start(
        ControlSettings {
            data_dir: dir.path().to_path_buf(),
            node_name: "rec-node".into(),
            mesh,
            node_spec: Arc::new(node),
            psi: Arc::new(|| None),
        },
        Some(exec.clone() as Arc<dyn WorkExecutor>),
    )
    .await
    .unwrap();
    let t = Duration::from_secs(20);

    // Registered, and sent (empty) work even before any application: the
    // leader's first round asks whether the node holds that work (by digest);
    // a node that holds nothing yet is sent it whole.
    until("first work", t, || {
        exec.last().filter(|w| w.node == "rec-node")
    })
    .await;

    let documents = spec::parse(SHOP, Format::Yaml).unwrap();
    let (_, at) = plane
        .write(Command::Apply {
            documents,
            start: true,
        })
        .await
        .unwrap();

    // The init job comes first, fenced at the leader's term.
    let w = until("init job work", t, || {
        exec.last().filter(|w| !w.jobs.is_empty())
    })
    .await;
    assert_eq!(w.jobs[0].job.job, "prepare-docroot");
    assert_eq!(w.jobs[0].attempt, 1);
    assert!(w.instances.is_empty(), "web waits for its init job: {w:?}");
    assert_eq!(w.fence.term, at.term);
    assert!(w.fence.index >= at.index, "{:?} vs {at:?}", w.fence);

    // Level-triggered without re-sending: every period the leader asks whether
    // the node holds this work (by digest); it does, so the executor is not
    // given the same work again.
    let n = exec.count();
    let confirmed = |p: &ControlPlane| p.timings().sends()[1].1;
    let c0 = confirmed(&plane);
    until("periodic confirmations", t, || {
        (confirmed(&plane) >= c0 + 2).then_some(())
    })
    .await;
    assert_eq!(
        exec.count(),
        n,
        "work the node holds is confirmed, not executed again"
    );

    // Job succeeded → web is desired.
    let job = w.jobs[0].job.clone();
    exec.report(
        "job",
        NodeReport::InitJob {
            job,
            run: w.jobs[0].run,
            attempt: 1,
            state: ObservedState::Exited { code: 0 },
        },
    );
    let w = until("web desired", t, || {
        exec.last()
            .filter(|w| w.instances.iter().any(|i| i.instance.workload == "web"))
    })
    .await;
    let web = w
        .instances
        .iter()
        .find(|i| i.instance.workload == "web")
        .unwrap()
        .clone();
    assert_eq!(web.attempt, 1);
    assert!(
        web.launch.image.as_deref() == Some("/usr/bin/busybox"),
        "launch comes from the spec: {web:?}"
    );
    assert!(!w.instances.iter().any(|i| i.instance.workload == "worker"));

    // web ready → worker desired.
    exec.report(
        "web",
        NodeReport::Instance {
            instance: web.instance.clone(),
            placement: web.placement,
            attempt: 1,
            state: ObservedState::Ready,
        },
    );
    let w = until("worker desired", t, || {
        exec.last()
            .filter(|w| w.instances.iter().any(|i| i.instance.workload == "worker"))
    })
    .await;
    let worker = w
        .instances
        .iter()
        .find(|i| i.instance.workload == "worker")
        .unwrap()
        .clone();
    exec.report(
        "worker",
        NodeReport::Instance {
            instance: worker.instance.clone(),
            placement: worker.placement,
            attempt: 1,
            state: ObservedState::Ready,
        },
    );
    let deadline = Instant::now() + t;
    while phase(&plane).await != "Running" {
        assert!(Instant::now() < deadline, "app never Running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A repeated report changes nothing (no restart is asked).
    exec.report(
        "worker",
        NodeReport::Instance {
            instance: worker.instance.clone(),
            placement: worker.placement,
            attempt: 1,
            state: ObservedState::Ready,
        },
    );
    // The worker crashes → restart at attempt 2 with a backoff.
    exec.report(
        "worker",
        NodeReport::Instance {
            instance: worker.instance.clone(),
            placement: worker.placement,
            attempt: 1,
            state: ObservedState::Exited { code: 3 },
        },
    );
    let w = until("worker restart", t, || {
        exec.last().filter(|w| {
            w.instances
                .iter()
                .any(|i| i.instance.workload == "worker" && i.attempt == 2)
        })
    })
    .await;
    let again = w
        .instances
        .iter()
        .find(|i| i.instance.workload == "worker")
        .unwrap();
    assert!(again.not_before.is_some(), "restart backoff: {again:?}");
    // A stale report of attempt 1 is dropped; the restart stays asked.
    exec.report(
        "worker",
        NodeReport::Instance {
            instance: worker.instance.clone(),
            placement: worker.placement,
            attempt: 1,
            state: ObservedState::Exited { code: 9 },
        },
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let w = exec.last().unwrap();
    let still = w
        .instances
        .iter()
        .find(|i| i.instance.workload == "worker")
        .unwrap();
    assert_eq!(
        still.attempt, 2,
        "a stale report did not cause another restart"
    );

    // Delete: the node's desired set empties.
    plane
        .write(Command::Operate {
            app: daros_coordinator::AppKey::new("shop-team", "shop"),
            operation: daros_coordinator::OperationRequest::Delete,
        })
        .await
        .unwrap();
    until("work emptied", t, || {
        exec.last()
            .filter(|w| w.instances.is_empty() && w.jobs.is_empty())
    })
    .await;
    plane.shutdown().await;
}

/// A PSI source the test sets (standing in for `/proc/pressure`, which this
/// test cannot drive): memory `full` at `pct` percent (avg10).
fn psi_at(pct: f64) -> daros_agent::model::PsiSample {
    let line = daros_agent::model::PressureLine {
        avg10: pct,
        avg60: 0.0,
        avg300: 0.0,
        stalled_seconds_total: 0.0,
    };
    daros_agent::model::PsiSample {
        cpu: None,
        memory: Some(daros_agent::model::PressureSample {
            some: line,
            full: Some(line),
        }),
        io: None,
    }
}

/// Issue 19: node pressure crosses `[mesh] pressure_memory_full` → the node
/// reports it through raft and its Running application becomes Degraded
/// naming the node and the figure; below half the threshold → Running again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pressure_degrades_the_apps_there_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let exec = RecordingExecutor::new();
    let level = Arc::new(Mutex::new(0.0_f64));
    let read = Arc::clone(&level);
    let plane = ControlPlane::start(
        ControlSettings {
            data_dir: dir.path().to_path_buf(),
            node_name: "rec-node".into(),
            mesh: MeshSection {
                dispatch_interval: daros_agent::config::HumanDuration(Duration::from_millis(300)),
                ..MeshSection::default()
            },
            node_spec: Arc::new(node),
            psi: Arc::new(move || Some(psi_at(*read.lock().unwrap()))),
        },
        Some(exec.clone() as Arc<dyn WorkExecutor>),
    )
    .await
    .unwrap();
    let t = Duration::from_secs(20);
    let app = "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: p}\nspec: {}\n---\n\
               apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: a, tenant: p}\n\
               spec:\n  workloads:\n    - {name: w, runtime: {type: process}, resources: {cpu: {request: 100m}}}\n";
    plane
        .write(Command::Apply {
            documents: spec::parse(app, Format::Yaml).unwrap(),
            start: true,
        })
        .await
        .unwrap();
    let w = until("w desired", t, || {
        exec.last().filter(|w| !w.instances.is_empty())
    })
    .await;
    let i = w.instances[0].clone();
    exec.report(
        "w",
        NodeReport::Instance {
            instance: i.instance.clone(),
            placement: i.placement,
            attempt: 1,
            state: ObservedState::Ready,
        },
    );
    let reason = || async {
        let apps = plane
            .query(ControlQuery::Apps {
                now: daros_agent::control::plane::now(),
            })
            .await
            .unwrap();
        (
            apps[0]["phase"].as_str().unwrap_or_default().to_string(),
            apps[0]["reason"].as_str().unwrap_or_default().to_string(),
        )
    };
    let deadline = Instant::now() + t;
    while reason().await.0 != "Running" {
        assert!(Instant::now() < deadline, "app never Running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    *level.lock().unwrap() = 30.0;
    let started = Instant::now();
    let (phase, why) = loop {
        let r = reason().await;
        if r.0 == "Degraded" {
            break r;
        }
        assert!(started.elapsed() < t, "never Degraded: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(phase, "Degraded");
    assert_eq!(
        why,
        "node rec-node under pressure: memory full 30.0% (avg10) >= 10.0%"
    );
    // 6 % is above half the threshold: still under pressure.
    *level.lock().unwrap() = 6.0;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(reason().await.0, "Degraded");
    *level.lock().unwrap() = 1.0;
    let started = Instant::now();
    while reason().await.0 != "Running" {
        assert!(
            started.elapsed() < t,
            "never Running again: {:?}",
            reason().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    plane.shutdown().await;
}
