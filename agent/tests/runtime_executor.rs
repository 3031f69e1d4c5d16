//! The runtime executor over the real process adapter on this host's real
//! cgroups: each instance in its own `daros-test-*` managed cgroup under its QoS
//! class, reports from real process events, idempotent level-triggered work,
//! stale fences refused, restarts by attempt only, refused reservations as
//! failures with the numbers, jobs once per attempt, teardown leaving no
//! process and no cgroup, and re-adoption by a new executor (same pid).
//!
//! Needs root and `daros-shim` built (`cargo build -p daros-adapters --bin daros-shim`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod executor_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestRoot, alive};
use daros_adapters::process::default_shim_path;
use daros_adapters::{RuntimeAdapter, RuntimeDetail, RuntimeId};
use daros_agent::cgroup::CgroupBackend;
use daros_agent::control::work::{
    DesiredInstance, DesiredJob, ExecError, FenceToken, NodeReport, NodeWork, WorkExecutor,
};
use daros_agent::qos::{QosService, QosSettings};
use daros_agent::runtime::{Executor, InstanceCgroups, LogDefaults, RuntimeSettings, Subject};
use daros_coordinator::model::failure::Failure;
use daros_coordinator::{Bytes, MilliCpu, ObservedState};
use executor_support::{rt, wait_report};
use serde_json::json;

const NODE: &str = "node-a";

fn shim() -> PathBuf {
    let p = default_shim_path();
    assert!(
        p.is_file(),
        "daros-shim not built at {}: run `cargo build -p daros-adapters --bin daros-shim`",
        p.display()
    );
    p
}

struct Env {
    t: TestRoot,
    dir: tempfile::TempDir,
}

impl Env {
    fn new(tag: &str) -> Self {
        Env {
            t: TestRoot::new(tag),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn qos(&self) -> Arc<QosService> {
        let s = QosSettings {
            protection: false,
            system_reserved_cpu: MilliCpu(100),
            system_reserved_memory: Bytes::from_mib(256),
            ..QosSettings::default()
        };
        QosService::open(s, self.t.root.clone(), self.dir.path(), vec![]).unwrap()
    }

    async fn executor(&self, qos: &Arc<QosService>) -> Arc<Executor> {
        let settings = RuntimeSettings {
            node: NODE.into(),
            state_dir: self.dir.path().join("runtime"),
            volume_dir: self.dir.path().join("volumes"),
            shim_path: shim(),
            stop_grace: Duration::from_secs(2),
            logs: LogDefaults {
                max_size: Bytes::from_mib(1),
                max_files: 2,
            },
            kubernetes: None,
            launcher: Default::default(),
            oom_floor: daros_agent::runtime::executor::oom_floor_here(),
        };
        let cg = InstanceCgroups::new(Some(self.t.root.clone()), Some(Arc::clone(qos)));
        Executor::open(settings, cg, vec![]).await.unwrap()
    }

    /// The directories of `subject`'s cgroup in every hierarchy.
    fn dirs(&self, s: &Subject) -> Vec<PathBuf> {
        let cg = self.t.root.workload(&s.cgroup_name()).unwrap();
        self.t
            .backend()
            .dirs(&cg)
            .into_iter()
            .map(|d| d.path)
            .collect()
    }
}

fn sh(script: &str) -> serde_json::Value {
    json!({"command": "/bin/sh", "args": ["-c", script]})
}

fn instance(
    id: &str,
    attempt: u32,
    qos: &str,
    resources: serde_json::Value,
    spec: serde_json::Value,
) -> DesiredInstance {
    serde_json::from_value(json!({
        "instance": id,
        "attempt": attempt,
        "launch": {
            "runtime": {"type": "process", "os": "linux"},
            "qos": qos,
            "resources": resources,
            "reservation": {},
            "runtimeSpec": spec,
        }
    }))
    .unwrap()
}

fn job(id: &str, attempt: u32, spec: serde_json::Value) -> DesiredJob {
    serde_json::from_value(json!({
        "job": id,
        "attempt": attempt,
        "launch": {
            "runtime": {"type": "process", "os": "linux"},
            "resources": {},
            "timeout": "30s",
            "runtimeSpec": spec,
        }
    }))
    .unwrap()
}

fn work(index: u64, instances: Vec<DesiredInstance>, jobs: Vec<DesiredJob>) -> NodeWork {
    NodeWork {
        node: NODE.into(),
        fence: FenceToken { term: 1, index },
        instances,
        jobs,
    }
}

async fn pid_of(ex: &Executor, s: &Subject) -> (u32, u64) {
    let id = RuntimeId::new(
        daros_adapters::AdapterKind::Process,
        s.instance_key().dotted(),
    );
    let st = ex.adapters().inspect(&id).await.unwrap();
    match st.detail {
        RuntimeDetail::Process {
            pid: Some(pid),
            generation,
            ..
        } => (pid, generation),
        d => panic!("no pid: {d:?}"),
    }
}

fn in_cgroup(pid: u32, name: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.ends_with(&format!("/{name}")))
}

fn burstable() -> serde_json::Value {
    json!({"cpu": {"request": "100m", "limit": "500m"}, "memory": {"request": "16Mi", "limit": "64Mi"}})
}

#[test]
fn instance_runs_in_its_classed_cgroup_restarts_by_attempt_and_leaves_nothing() {
    let env = Env::new("rt-exec");
    let rt = rt();
    rt.block_on(async {
        let qos = env.qos();
        let ex = env.executor(&qos).await;
        let mut rx = ex.subscribe();
        let id = "acme/shop/web/0/v1";
        let web = Subject::Instance(id.parse().unwrap());
        let w1 = work(
            1,
            vec![instance(
                id,
                1,
                "Burstable",
                burstable(),
                sh("echo hello; exec sleep 1000"),
            )],
            vec![],
        );
        ex.execute(w1.clone()).await.unwrap();
        wait_report(&mut rx, id, 1, "ready", |s| *s == ObservedState::Ready).await;
        let (pid, generation) = pid_of(&ex, &web).await;
        assert!(alive(pid));
        let name = web.cgroup_name();
        assert!(
            in_cgroup(pid, &name),
            "{pid} not in {name}: {}",
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap()
        );
        for d in env.dirs(&web) {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap();
            assert!(
                procs.lines().any(|l| l == pid.to_string()),
                "{} lacks {pid}",
                d.display()
            );
        }
        let q = qos.get(&web.qos_id()).expect("under a class");
        assert_eq!(q.class, daros_coordinator::QosClass::Burstable);
        let adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
        assert_eq!(adj.trim(), "500");

        // The same work again (and a newer fence with the same content) changes nothing.
        ex.execute(w1.clone()).await.unwrap();
        let mut w2 = w1.clone();
        w2.fence.index = 2;
        ex.execute(w2.clone()).await.unwrap();
        assert_eq!(pid_of(&ex, &web).await, (pid, generation));
        let cur = ex.current().await;
        assert_eq!(
            cur,
            vec![NodeReport::Instance {
                instance: id.parse().unwrap(),
                placement: 0,
                attempt: 1,
                state: ObservedState::Ready
            }]
        );

        // Stale and misaddressed work is refused.
        let e = ex.execute(work(1, vec![], vec![])).await.unwrap_err();
        assert!(
            matches!(
                e,
                ExecError::Stale {
                    index: 1,
                    applied_index: 2,
                    ..
                }
            ),
            "{e}"
        );
        let mut other = w2.clone();
        other.node = "node-b".into();
        assert!(matches!(
            ex.execute(other).await,
            Err(ExecError::WrongNode { .. })
        ));
        assert_eq!(pid_of(&ex, &web).await, (pid, generation));

        // The process dies: it stays ended (no adapter restart) and is reported as a failure.
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        let st = wait_report(&mut rx, id, 1, "failed", |s| {
            matches!(s, ObservedState::Failed { .. })
        })
        .await;
        assert!(st.describe().contains("signal 9"), "{}", st.describe());

        // Attempt 2 restarts it: a new pid in the same cgroup.
        let w3 = work(
            3,
            vec![instance(
                id,
                2,
                "Burstable",
                burstable(),
                sh("echo hello; exec sleep 1000"),
            )],
            vec![],
        );
        ex.execute(w3).await.unwrap();
        wait_report(&mut rx, id, 2, "ready", |s| *s == ObservedState::Ready).await;
        let (pid2, gen2) = pid_of(&ex, &web).await;
        assert_ne!(pid2, pid);
        assert!(gen2 > generation);
        assert!(in_cgroup(pid2, &name));

        // Logs through the executor, by instance and by workload shorthand; Ready is
        // the start, the second run's line may still be on its way to the file.
        let deadline = Instant::now() + Duration::from_secs(10);
        let lines = loop {
            let lines = ex.logs("acme/shop/web", Some(10)).await.unwrap();
            let hellos = lines.iter().filter(|l| l.line.text == "hello").count();
            if hellos >= 2 || Instant::now() > deadline {
                break lines;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            lines.iter().filter(|l| l.line.text == "hello").count() >= 2,
            "{lines:?}"
        );
        assert!(lines.iter().all(|l| l.instance == id));

        // Not desired any more: stopped, destroyed, class released, cgroup gone.
        ex.execute(work(4, vec![], vec![])).await.unwrap();
        wait_report(&mut rx, id, 2, "stopped", |s| *s == ObservedState::Stopped).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ex.current().await.is_empty() || env.dirs(&web).iter().any(|d| d.exists()) {
            assert!(
                Instant::now() < deadline,
                "not cleaned up: {:?}",
                ex.current().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!alive(pid2));
        assert!(qos.get(&web.qos_id()).is_none());
        assert!(ex.adapters().list().await.unwrap().is_empty());
    });
}

#[test]
fn refused_reservation_is_a_failure_with_numbers_and_nothing_runs() {
    let env = Env::new("rt-refuse");
    let rt = rt();
    rt.block_on(async {
        let qos = env.qos();
        let ex = env.executor(&qos).await;
        let mut rx = ex.subscribe();
        let id = "acme/shop/db/0/v1";
        let db = Subject::Instance(id.parse().unwrap());
        let res = json!({"cpu": {"reservation": "64"}, "memory": {"reservation": "64Mi"}});
        ex.execute(work(
            1,
            vec![instance(id, 1, "GuaranteedPro", res, sh("exec sleep 1000"))],
            vec![],
        ))
        .await
        .unwrap();
        let st = wait_report(&mut rx, id, 1, "failed", |s| {
            matches!(s, ObservedState::Failed { .. })
        })
        .await;
        let ObservedState::Failed {
            failure: Failure::PolicyViolation { policy, detail },
        } = &st
        else {
            panic!("{st:?}");
        };
        assert_eq!(policy, "node-admission");
        assert!(detail.contains("cpu") && detail.contains("64"), "{detail}");
        assert!(
            ex.adapters().list().await.unwrap().is_empty(),
            "nothing was started"
        );
        assert!(
            env.dirs(&db).iter().all(|d| !d.exists()),
            "no cgroup left by the refusal"
        );
        ex.execute(work(2, vec![], vec![])).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ex.current().await.is_empty() {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

fn count_lines(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn jobs_run_once_per_attempt_and_keep_their_result() {
    let env = Env::new("rt-jobs");
    let rt = rt();
    let marks = env.dir.path().join("runs.txt");
    rt.block_on(async {
        let qos = env.qos();
        let ex = env.executor(&qos).await;
        let mut rx = ex.subscribe();
        let id = "acme/shop/web/init/migrate/v1";
        let script = format!("echo run >> {}", marks.display());
        let w = work(1, vec![], vec![job(id, 1, sh(&script))]);
        ex.execute(w.clone()).await.unwrap();
        wait_report(&mut rx, id, 1, "exit 0", |s| {
            *s == ObservedState::Exited { code: 0 }
        })
        .await;
        assert_eq!(count_lines(&marks), 1);
        // Sent again, dropped and sent again with the same attempt: not run again.
        ex.execute(work(2, vec![], vec![job(id, 1, sh(&script))]))
            .await
            .unwrap();
        ex.execute(work(3, vec![], vec![])).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ex.current().await.is_empty() {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ex.execute(work(4, vec![], vec![job(id, 1, sh(&script))]))
            .await
            .unwrap();
        wait_report(&mut rx, id, 1, "kept exit 0", |s| {
            *s == ObservedState::Exited { code: 0 }
        })
        .await;
        assert_eq!(count_lines(&marks), 1);
        // Attempt 2 runs it again.
        ex.execute(work(5, vec![], vec![job(id, 2, sh(&script))]))
            .await
            .unwrap();
        wait_report(&mut rx, id, 2, "exit 0", |s| {
            *s == ObservedState::Exited { code: 0 }
        })
        .await;
        assert_eq!(count_lines(&marks), 2);
        // A failing job is a typed failure with its exit code.
        let bad = "acme/shop/web/init/check/v1";
        ex.execute(work(
            6,
            vec![],
            vec![job(bad, 1, sh("echo broken >&2; exit 3"))],
        ))
        .await
        .unwrap();
        let st = wait_report(&mut rx, bad, 1, "failed", |s| {
            matches!(s, ObservedState::Failed { .. })
        })
        .await;
        assert!(st.describe().contains("code 3"), "{}", st.describe());
        let lines = ex.logs(bad, None).await.unwrap();
        assert_eq!(lines.last().map(|l| l.line.text.as_str()), Some("broken"));
        ex.execute(work(7, vec![], vec![])).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ex.current().await.is_empty() {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[test]
fn a_new_executor_readopts_running_instances_without_restarting_them() {
    let env = Env::new("rt-adopt");
    let id = "acme/shop/web/0/v1";
    let web = Subject::Instance(id.parse().unwrap());
    let w = work(
        1,
        vec![instance(
            id,
            1,
            "Burstable",
            burstable(),
            sh("exec sleep 1000"),
        )],
        vec![],
    );
    // First agent: start it, then vanish without any teardown (runtime dropped).
    let (pid, generation) = {
        let rt = rt();
        let r = rt.block_on(async {
            let qos = env.qos();
            let ex = env.executor(&qos).await;
            let mut rx = ex.subscribe();
            ex.execute(w.clone()).await.unwrap();
            wait_report(&mut rx, id, 1, "ready", |s| *s == ObservedState::Ready).await;
            pid_of(&ex, &web).await
        });
        rt.shutdown_timeout(Duration::from_secs(5));
        r
    };
    assert!(alive(pid), "the workload outlives its agent");
    let rt = rt();
    rt.block_on(async {
        let qos = env.qos();
        let ex = env.executor(&qos).await;
        assert_eq!(
            pid_of(&ex, &web).await,
            (pid, generation),
            "same run, not restarted"
        );
        assert_eq!(
            ex.current().await,
            vec![NodeReport::Instance {
                instance: id.parse().unwrap(),
                placement: 0,
                attempt: 1,
                state: ObservedState::Ready
            }]
        );
        assert!(qos.get(&web.qos_id()).is_some());
        // The same work from the new leader view changes nothing; stale is refused.
        ex.execute(w.clone()).await.unwrap();
        assert_eq!(pid_of(&ex, &web).await, (pid, generation));
        assert!(matches!(
            ex.execute(work(0, vec![], vec![])).await,
            Err(ExecError::Stale { .. })
        ));
        let mut rx = ex.subscribe();
        ex.execute(work(2, vec![], vec![])).await.unwrap();
        wait_report(&mut rx, id, 1, "stopped", |s| *s == ObservedState::Stopped).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while alive(pid) || env.dirs(&web).iter().any(|d| d.exists()) {
            assert!(Instant::now() < deadline, "not cleaned up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}
