//! A job type registered in this one file (`ai-eval`, seed 002's example),
//! run by a workflow on a real control plane (mesh on loopback, one-member
//! raft on redb) with the real runtime executor, all in this process: the
//! workflow deploys nothing until a parallel group of the `ai-eval` step and
//! a `command` step has run as real processes (each wrote what it saw), then
//! waits for an approval, then deploys the workload (a real process in its
//! cgroup). Nothing in the workflow engine or the agent knows `ai-eval`.
//!
//! Needs root and `daros-shim` built (`cargo build -p daros-adapters --bin daros-shim`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{APP_WAIT, TestRoot, alive, main_pids};
use daros_adapters::process::default_shim_path;
use daros_agent::config::MeshSection;
use daros_agent::control::state::ControlQuery;
use daros_agent::control::work::WorkExecutor;
use daros_agent::control::{ControlPlane, ControlSettings};
use daros_agent::qos::{QosService, QosSettings};
use daros_agent::runtime::{Executor, InstanceCgroups, LogDefaults, RuntimeSettings};
use daros_coordinator::field::FieldError;
use daros_coordinator::jobs::{self, JobRun, JobType};
use daros_coordinator::spec::{self, Format};
use daros_coordinator::{AppKey, Bytes, Command, ExecutionNode, MilliCpu, OperationRequest};
use serde_json::Value;

// ---- the job type: this is all it takes -------------------------------------

/// `ai-eval`: evaluates `model` and writes the score under `out`.
struct AiEval;

impl JobType for AiEval {
    fn name(&self) -> &'static str {
        "ai-eval"
    }
    fn summary(&self) -> &'static str {
        "evaluates a model, writes its score"
    }
    fn validate(&self, p: &Value, path: &str) -> Vec<FieldError> {
        ["model", "out"]
            .into_iter()
            .filter(|k| p.get(k).and_then(Value::as_str).is_none_or(str::is_empty))
            .map(|k| FieldError::new(format!("{path}.{k}"), "a non-empty string"))
            .collect()
    }
    fn run(&self, p: &Value) -> Result<JobRun, String> {
        let (model, out) = (p["model"].as_str(), p["out"].as_str());
        let (Some(model), Some(out)) = (model, out) else {
            return Err("model and out".into());
        };
        Ok(JobRun {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!(
                    "date +%s.%N > {out}/eval.start; echo \"$MODEL 0.93\" > {out}/eval.score; sleep 1; date +%s.%N > {out}/eval.end"
                ),
            ],
            env: BTreeMap::from([("MODEL".to_string(), model.to_string())]),
            resources: Default::default(),
        })
    }
}

// -----------------------------------------------------------------------------

const NODE: &str = "wf-node";

fn spec(out: &str) -> String {
    format!(
        r#"apiVersion: daros.io/v1
kind: Tenant
metadata: {{name: eval-team}}
spec: {{quota: {{cpu: "2", memory: 1Gi}}}}
---
apiVersion: daros.io/v1
kind: Application
metadata: {{name: judge, tenant: eval-team}}
spec:
  workloads:
    - name: api
      runtime: {{type: process, os: linux}}
      image: /bin/sleep
      resources: {{cpu: {{request: 50m}}, memory: {{request: 16Mi, limit: 64Mi}}}}
      runtimeSpec: {{command: /bin/sleep, args: ["600"]}}
  workflow:
    steps:
      - name: checks
        type: group
        mode: parallel
        steps:
          - {{name: eval, type: ai-eval, properties: {{model: m1, out: "{out}"}}}}
          - name: lint
            type: command
            properties:
              command: /bin/sh
              args: ["-c", "date +%s.%N > {out}/lint.start; sleep 1; date +%s.%N > {out}/lint.end"]
      - {{name: release, type: approval, dependsOn: [checks]}}
      - {{name: api, type: deploy, dependsOn: [release], properties: {{workloads: [api]}}}}
"#
    )
}

fn time_in(dir: &std::path::Path, name: &str) -> f64 {
    std::fs::read_to_string(dir.join(name))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

async fn steps(plane: &ControlPlane) -> Value {
    plane
        .query(ControlQuery::Describe {
            app: AppKey::new("eval-team", "judge"),
            now: daros_agent::control::plane::now(),
        })
        .await
        .unwrap()["workflow"]
        .clone()
}

fn phase_of(steps: &Value, name: &str) -> String {
    steps
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == name)
        .and_then(|s| s["phase"].as_str())
        .unwrap_or_default()
        .to_string()
}

async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + APP_WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_type_registered_in_this_file_runs_in_a_workflow() {
    jobs::register(Arc::new(AiEval)).unwrap();
    let t = TestRoot::new("wf-type");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();

    let qos = QosService::open(
        QosSettings {
            protection: false,
            system_reserved_cpu: MilliCpu(100),
            system_reserved_memory: Bytes::from_mib(256),
            ..QosSettings::default()
        },
        t.root.clone(),
        dir.path(),
        vec![],
    )
    .unwrap();
    let executor = Executor::open(
        RuntimeSettings {
            node: NODE.into(),
            state_dir: dir.path().join("runtime"),
            volume_dir: dir.path().join("volumes"),
            shim_path: default_shim_path(),
            stop_grace: Duration::from_secs(2),
            logs: LogDefaults {
                max_size: Bytes::from_mib(1),
                max_files: 2,
            },
            kubernetes: None,
            launcher: Default::default(),
            oom_floor: daros_agent::runtime::executor::oom_floor_here(),
        },
        InstanceCgroups::new(Some(t.root.clone()), Some(Arc::clone(&qos))),
        vec![],
    )
    .await
    .unwrap();
    let node: ExecutionNode = serde_json::from_value(serde_json::json!({
        "name": NODE,
        "capacity": {"cpu": "2", "memory": "4Gi"},
        "runtimes": ["process"]
    }))
    .unwrap();
    let plane = ControlPlane::start(
        ControlSettings {
            data_dir: dir.path().to_path_buf(),
            node_name: NODE.into(),
            mesh: MeshSection {
                dispatch_interval: daros_agent::config::HumanDuration(Duration::from_millis(200)),
                ..MeshSection::default()
            },
            node_spec: Arc::new(move || node.clone()),
            psi: Arc::new(|| None),
        },
        Some(executor.clone() as Arc<dyn WorkExecutor>),
    )
    .await
    .unwrap();

    let documents = spec::parse(&spec(&out.display().to_string()), Format::Yaml).unwrap();
    plane
        .write(Command::Apply {
            documents,
            start: true,
        })
        .await
        .unwrap();

    let s = until("the approval step waits", async || {
        let s = steps(&plane).await;
        (phase_of(&s, "release") == "WaitingApproval").then_some(s)
    })
    .await;
    assert_eq!(phase_of(&s, "eval"), "Succeeded", "{s:#}");
    assert_eq!(phase_of(&s, "lint"), "Succeeded", "{s:#}");
    // The registered type's process ran, with what its handler gave it.
    assert_eq!(
        std::fs::read_to_string(out.join("eval.score")).unwrap(),
        "m1 0.93\n"
    );
    let (e0, e1) = (time_in(&out, "eval.start"), time_in(&out, "eval.end"));
    let (l0, l1) = (time_in(&out, "lint.start"), time_in(&out, "lint.end"));
    assert!(e0 < l1 && l0 < e1, "the group ran its steps in parallel");
    // Nothing deployed before the approval.
    assert!(main_pids(&t, "eval-team.judge.api-v1.0").is_empty());

    plane
        .write(Command::Operate {
            app: AppKey::new("eval-team", "judge"),
            operation: OperationRequest::Approve {
                step: "release".into(),
            },
        })
        .await
        .unwrap();
    let pid = until("api runs", async || {
        main_pids(&t, "eval-team.judge.api-v1.0").first().copied()
    })
    .await;
    assert!(alive(pid));
    until("every step succeeded", async || {
        let s = steps(&plane).await;
        s.as_array()?
            .iter()
            .all(|x| x["phase"] == "Succeeded")
            .then_some(())
    })
    .await;

    plane
        .write(Command::Operate {
            app: AppKey::new("eval-team", "judge"),
            operation: OperationRequest::Delete,
        })
        .await
        .unwrap();
    until("api stopped", async || (!alive(pid)).then_some(())).await;
    plane.shutdown().await;
}
