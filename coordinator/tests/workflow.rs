//! Workflows and registered job types (issue 17, seed 002 Q2–Q6). This file
//! registers a job type of its own, `ai-eval` (seed 002's example), in a few
//! lines and runs a workflow that uses it: deploy the datastore, then a
//! parallel group (a `command` schema step and the `ai-eval` step, retried
//! once), then a manual approval, then deploy web — with suspend/resume on
//! the way. A GPU step that no node could ever run is *rejected* at
//! admission; one that could but finds no free GPU *waits for capacity*;
//! one whose run fails *failed*: three states, each with its reason. A job
//! type whose handler panics refuses the apply and the coordinator goes on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::decision::DecisionKind;
use daros_coordinator::field::FieldError;
use daros_coordinator::jobs::{self, JobLimits, JobRun, JobType};
use daros_coordinator::model::resources::{ResourceBounds, ResourceProfile};
use daros_coordinator::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Once};

/// `ai-eval`: evaluates a model; its whole registration is this type and
/// the `register` call below.
struct AiEval;

impl JobType for AiEval {
    fn name(&self) -> &'static str {
        "ai-eval"
    }
    fn summary(&self) -> &'static str {
        "evaluates a model against a dataset"
    }
    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError> {
        match properties.get("model").and_then(|m| m.as_str()) {
            Some(m) if !m.is_empty() => Vec::new(),
            _ => vec![FieldError::new(
                format!("{path}.model"),
                "names the model to evaluate",
            )],
        }
    }
    fn run(&self, properties: &serde_json::Value) -> Result<JobRun, String> {
        let model = properties["model"].as_str().ok_or("no model")?;
        Ok(JobRun {
            argv: vec!["/usr/bin/env".into(), "true".into()],
            env: BTreeMap::from([("MODEL".to_string(), model.to_string())]),
            resources: ResourceProfile {
                cpu: ResourceBounds {
                    request: Some("200m".parse().unwrap()),
                    ..ResourceBounds::default()
                },
                ..ResourceProfile::default()
            },
        })
    }
    fn limits(&self) -> JobLimits {
        JobLimits::default()
    }
}

/// A job type whose validation panics.
struct Broken;

impl JobType for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn summary(&self) -> &'static str {
        "panics"
    }
    fn validate(&self, _: &serde_json::Value, _: &str) -> Vec<FieldError> {
        panic!("bug in the broken job type")
    }
    fn run(&self, _: &serde_json::Value) -> Result<JobRun, String> {
        Err("never".into())
    }
}

fn register_types() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        jobs::register(Arc::new(AiEval)).unwrap();
        jobs::register(Arc::new(Broken)).unwrap();
    });
}

fn node(name: &str, gpus: u32) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Node\nmetadata: {{name: {name}}}\nspec:\n  capacity: {{cpu: \"4\", memory: 8Gi, gpu: {gpus}}}\n  runtimes: [process]\n---\n"
    )
}

fn app(name: &str, workflow: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: acme}}\nspec:\n  \
         workloads:\n  \
         - {{name: db, runtime: {{type: process}}, resources: {{cpu: {{request: 100m}}, memory: {{request: 64Mi}}}}}}\n  \
         - {{name: web, runtime: {{type: process}}, resources: {{cpu: {{request: 100m}}, memory: {{request: 64Mi}}}}}}\n  \
         workflow:\n    steps:\n{workflow}---\n"
    )
}

const SHOP: &str = "
    - {name: db, type: deploy, properties: {workloads: [db]}}
    - name: checks
      type: group
      mode: parallel
      dependsOn: [db]
      steps:
        - {name: schema, type: command, properties: {command: /bin/sh, args: [-c, 'echo schema']}}
        - {name: eval, type: ai-eval, retries: 1, properties: {model: m1}}
    - {name: go, type: approval, dependsOn: [checks]}
    - {name: web, type: deploy, dependsOn: [go], properties: {workloads: [web]}}
";

fn steps(c: &Coordinator, k: &AppKey, now: u64) -> Vec<(String, String)> {
    c.describe(k, t(now))
        .unwrap()
        .workflow
        .iter()
        .map(|s| (s.name.clone(), s.phase.clone()))
        .collect()
}

fn phase_of(c: &Coordinator, k: &AppKey, step: &str, now: u64) -> String {
    steps(c, k, now)
        .into_iter()
        .find(|(n, _)| n == step)
        .map(|(_, p)| p)
        .unwrap()
}

#[test]
fn a_workflow_with_a_registered_type_a_parallel_group_and_an_approval() {
    register_types();
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!("{}{}", node("n1", 0), tenant_yaml("acme", "")),
        0,
    );
    let out = apply(&mut c, &app("shop", SHOP), 1);
    let k = key("acme", "shop");
    // Only the datastore starts; web waits for its deploy step.
    let s = started(&out);
    assert_eq!(s.len(), 1, "{out:?}");
    assert_eq!(s[0].workload, "db");
    let d = c.describe(&k, t(1)).unwrap();
    assert!(
        d.blocked
            .iter()
            .any(|b| b.workload == "web"
                && b.reason == "waiting for the workflow step that deploys it"),
        "{:?}",
        d.blocked
    );
    assert_eq!(phase_of(&c, &k, "db", 1), "Running");
    assert_eq!(phase_of(&c, &k, "checks", 1), "Pending");

    // db ready: the group starts both its steps at once.
    let out = report(&mut c, &s[0], ObservedState::Running, 2);
    let mut js = jobs(&out);
    js.sort_by(|a, b| a.job.cmp(&b.job));
    let names: Vec<&str> = js.iter().map(|j| j.job.as_str()).collect();
    assert_eq!(names, vec!["eval", "schema"], "{out:?}");
    assert_eq!(phase_of(&c, &k, "db", 2), "Succeeded");
    assert_eq!(phase_of(&c, &k, "checks", 2), "Running");
    // The registered type's run is what its handler said.
    let eval_launch = out
        .actions
        .iter()
        .find_map(|a| match &a.kind {
            reconcile::ActionKind::RunInitJob { job, launch, .. } if job.job == "eval" => {
                Some(launch.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(eval_launch.runtime_spec.0["command"], "/usr/bin/env");
    assert_eq!(eval_launch.runtime_spec.0["env"]["MODEL"], "m1");
    // In the node's desired work too (level-triggered).
    let desired: Vec<String> = c.desired_work()["n1"]
        .jobs
        .iter()
        .map(|j| j.job.job.clone())
        .collect();
    assert_eq!(desired, vec!["eval".to_string(), "schema".to_string()]);

    // schema succeeds; eval fails once and is retried (retries: 1), then succeeds.
    let (eval, schema) = (js[0].clone(), js[1].clone());
    report_job(&mut c, &schema, ObservedState::Exited { code: 0 }, 3);
    let out = report_job(&mut c, &eval, ObservedState::Exited { code: 1 }, 4);
    assert_eq!(jobs(&out), vec![eval.clone()], "retried: {out:?}");
    assert_eq!(phase_of(&c, &k, "checks", 4), "Running");
    report_job(&mut c, &eval, ObservedState::Running, 5);
    let out = report_job(&mut c, &eval, ObservedState::Exited { code: 0 }, 6);
    assert!(
        started(&out).is_empty(),
        "web waits for the approval: {out:?}"
    );
    assert_eq!(phase_of(&c, &k, "checks", 6), "Succeeded");
    assert_eq!(phase_of(&c, &k, "go", 6), "WaitingApproval");
    assert_eq!(
        reasons_of(&c, DecisionKind::Workflow),
        vec!["workflow step go waits for an operator's approval".to_string()]
    );

    // Suspended, approved: still nothing starts; resumed: web starts.
    operate(&mut c, &k, OperationRequest::Suspend, 7).unwrap();
    let out = operate(
        &mut c,
        &k,
        OperationRequest::Approve { step: "go".into() },
        8,
    )
    .unwrap();
    assert!(started(&out).is_empty(), "suspended: {out:?}");
    assert_eq!(phase_of(&c, &k, "web", 8), "Pending");
    assert!(c.describe(&k, t(8)).unwrap().workflow_suspended);
    let out = operate(&mut c, &k, OperationRequest::Resume, 9).unwrap();
    let web = started(&out);
    assert_eq!(web.len(), 1, "{out:?}");
    assert_eq!(web[0].workload, "web");
    report(&mut c, &web[0], ObservedState::Running, 10);
    assert!(
        steps(&c, &k, 10).iter().all(|(_, p)| p == "Succeeded"),
        "{:?}",
        steps(&c, &k, 10)
    );
    assert_eq!(c.phase(&k), Some(Phase::Running));
    // Approving again, or a step that is not waiting, is refused with why.
    let e = operate(
        &mut c,
        &k,
        OperationRequest::Approve { step: "go".into() },
        11,
    )
    .unwrap_err();
    assert!(e.to_string().contains("is not waiting for approval"), "{e}");
    let r = reasons_of(&c, DecisionKind::Workflow);
    assert!(
        r.contains(&"workflow step go approved by an operator".to_string()),
        "{r:?}"
    );
    assert!(
        r.iter()
            .any(|r| r.starts_with("workflow suspended by an operator")),
        "{r:?}"
    );
    // describe prints the steps.
    let text = c.describe(&k, t(11)).unwrap().render();
    assert!(
        text.contains("Workflow:") && text.contains("eval"),
        "{text}"
    );
}

#[test]
fn a_serial_group_runs_its_steps_one_after_another_and_a_failed_step_fails_the_workflow() {
    register_types();
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!("{}{}", node("n1", 0), tenant_yaml("acme", "")),
        0,
    );
    let wf = "
    - name: prep
      type: group
      mode: serial
      steps:
        - {name: one, type: command, properties: {command: /bin/true}}
        - {name: two, type: command, timeout: 5s, properties: {command: /bin/false}}
    - {name: all, type: deploy, dependsOn: [prep], properties: {workloads: [db, web]}}
";
    let out = apply(&mut c, &app("ser", wf), 1);
    let k = key("acme", "ser");
    let j = jobs(&out);
    assert_eq!(j.len(), 1, "serial: one step at a time: {out:?}");
    assert_eq!(j[0].job, "one");
    assert!(started(&out).is_empty());
    let out = report_job(&mut c, &j[0], ObservedState::Exited { code: 0 }, 2);
    let j2 = jobs(&out);
    assert_eq!(j2.len(), 1);
    assert_eq!(j2[0].job, "two");
    let timeout = out.actions.iter().find_map(|a| match &a.kind {
        reconcile::ActionKind::RunInitJob { launch, .. } => launch.timeout,
        _ => None,
    });
    assert_eq!(
        timeout,
        Some("5s".parse().unwrap()),
        "the runtime kills it at its timeout"
    );
    let out = report_job(&mut c, &j2[0], ObservedState::Exited { code: 1 }, 3);
    assert!(
        started(&out).is_empty(),
        "nothing deploys after a failure: {out:?}"
    );
    assert_eq!(phase_of(&c, &k, "two", 3), "Failed");
    assert_eq!(phase_of(&c, &k, "prep", 3), "Failed");
    assert_eq!(phase_of(&c, &k, "all", 3), "Pending");
    let r = reasons_of(&c, DecisionKind::Workflow);
    assert_eq!(
        r,
        vec!["workflow failed: step two failed after 1 run(s): exited with code 1".to_string()]
    );
}

#[test]
fn gpu_steps_are_rejected_waiting_or_failed_and_never_one_for_another() {
    register_types();
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!("{}{}", node("g1", 1), tenant_yaml("acme", "")),
        0,
    );
    let gpu = |n: u32| {
        format!(
            "
    - {{name: eval, type: gpu-batch, properties: {{command: /opt/eval, gpus: {n}}}}}
    - {{name: all, type: deploy, dependsOn: [eval], properties: {{workloads: [db, web]}}}}
"
        )
    };
    // Rejected: two GPUs, and no node has more than one.
    let out = apply(&mut c, &app("big", &gpu(2)), 1);
    assert_eq!(out.refusals.len(), 1, "{out:?}");
    let why = &out.refusals[0].reason;
    assert!(
        why.contains("workflow.eval")
            && why.contains("asks cpu 100m, memory 128 MiB, gpu 2")
            && why.contains("no node of the cluster could ever run it")
            && why.contains("rejected, not waiting"),
        "{why}"
    );
    assert_eq!(c.phase(&key("acme", "big")), Some(Phase::Rejected));

    // One GPU: the first app's step runs on g1 ...
    let out = apply(&mut c, &app("first", &gpu(1)), 2);
    let j = jobs(&out);
    assert_eq!(j.len(), 1);
    let launch_gpu = out
        .actions
        .iter()
        .find_map(|a| match &a.kind {
            reconcile::ActionKind::RunInitJob { launch, .. } => launch.resources.gpu.request,
            _ => None,
        })
        .unwrap();
    assert_eq!(launch_gpu.0, 1);
    // ... a second one waits for capacity (the GPU is taken), says so, and
    // starts once the first run ended.
    let out = apply(&mut c, &app("second", &gpu(1)), 3);
    assert!(out.refusals.is_empty(), "{out:?}");
    assert!(jobs(&out).is_empty());
    let k2 = key("acme", "second");
    assert_eq!(phase_of(&c, &k2, "eval", 3), "WaitingCapacity");
    assert!(
        reasons_of(&c, DecisionKind::Workflow).iter().any(|r| r.starts_with(
            "workflow step eval waiting for capacity: no node has cpu 100m, memory 128 MiB, gpu 1 free now"
        )),
        "{:?}",
        reasons_of(&c, DecisionKind::Workflow)
    );
    // The first run fails (exit 2, no retries): that step failed — not
    // rejected; and the GPU it held goes to the waiting step at once.
    let out = report_job(&mut c, &j[0], ObservedState::Exited { code: 2 }, 4);
    assert_eq!(phase_of(&c, &key("acme", "first"), "eval", 4), "Failed");
    let j2 = jobs(&out);
    assert_eq!(j2.len(), 1, "the waiting step got the GPU: {out:?}");
    assert_eq!(j2[0].app, k2);
    assert_eq!(phase_of(&c, &k2, "eval", 4), "Running");
}

#[test]
fn bad_workflows_are_refused_with_field_paths_and_a_panicking_handler_is_contained() {
    register_types();
    for (wf, path, words) in [
        (
            "    - {name: x, type: deploy, properties: {workloads: [db, web, cache]}}\n",
            "spec.workflow.steps[0].properties.workloads[2]",
            "no workload \"cache\"",
        ),
        (
            "    - {name: x, type: deploy, properties: {workloads: [db]}}\n",
            "spec.workflow.steps",
            "workload \"web\" is deployed by no step",
        ),
        (
            "    - {name: x, type: teleport}\n    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].type",
            "unknown step type \"teleport\"; known: deploy, approval, group, ai-eval, broken, command, gpu-batch",
        ),
        (
            "    - {name: x, type: deploy, dependsOn: [z], properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].dependsOn[0]",
            "\"z\" is not another step of this level",
        ),
        (
            "    - {name: a, type: approval, dependsOn: [b]}\n    - {name: b, type: deploy, dependsOn: [a], properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps",
            "dependsOn forms a cycle",
        ),
        (
            "    - {name: g, type: group}\n    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].steps",
            "a group needs at least one step",
        ),
        (
            "    - {name: e, type: ai-eval, properties: {}}\n    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].properties.model",
            "names the model",
        ),
        (
            "    - {name: c, type: command, properties: {command: sh}}\n    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].properties.command",
            "must be an absolute path",
        ),
        (
            "    - {name: g, type: gpu-batch, timeout: 48h, properties: {command: /x, gpus: 1}}\n    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].timeout",
            "longer than job type \"gpu-batch\" allows",
        ),
        (
            "    - {name: c, type: command, properties: {command: /x, cpu: \"3\", memory: 8Gi}}\n    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].properties",
            "asks for cpu 3 (at most 2), memory 8Gi (at most 4Gi): more than job type \"command\" allows",
        ),
        (
            "    - {name: g, type: gpu-batch, properties: {command: /x, gpus: 9}}\n    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].properties",
            "asks for 9 GPU(s) (at most 8)",
        ),
        (
            "    - {name: b, type: broken}\n    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
            "spec.workflow.steps[0].type",
            "job type \"broken\" failed inside its handler (panicked: bug in the broken job type)",
        ),
    ] {
        let err = spec::parse(&app("bad", wf), Format::Yaml)
            .unwrap_err()
            .to_string();
        assert!(err.contains(path) && err.contains(words), "{wf}\n{err}");
    }
    // The coordinator goes on: a good workflow still applies after all that.
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!("{}{}", node("n1", 0), tenant_yaml("acme", "")),
        0,
    );
    let out = apply(
        &mut c,
        &app(
            "ok",
            "    - {name: y, type: deploy, properties: {workloads: [db, web]}}\n",
        ),
        1,
    );
    assert_eq!(started(&out).len(), 2, "{out:?}");
}

#[test]
fn a_step_waiting_for_capacity_is_one_decision_not_one_a_second() {
    register_types();
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!("{}{}", node("g1", 1), tenant_yaml("acme", "")),
        0,
    );
    let wf = "
    - {name: eval, type: gpu-batch, properties: {command: /opt/eval, gpus: 1}}
    - {name: all, type: deploy, dependsOn: [eval], properties: {workloads: [db, web]}}
";
    apply(&mut c, &app("a", wf), 1);
    apply(&mut c, &app("b", wf), 2);
    for s in 1..=5 {
        c.apply(Command::Tick, t(2 + s * 1_000)).unwrap();
    }
    assert_eq!(
        phase_of(&c, &key("acme", "b"), "eval", 6_000),
        "WaitingCapacity"
    );
    let waits = reasons_of(&c, DecisionKind::Workflow)
        .iter()
        .filter(|r| r.contains("waiting for capacity"))
        .count();
    assert_eq!(waits, 1, "{:?}", reasons_of(&c, DecisionKind::Workflow));
}

/// A new version runs its workflow afresh; until its deploy step, what runs
/// keeps running and is looked after (a crash restarts it), and the rollout
/// of a changed workload waits for the step that deploys it.
#[test]
fn a_new_version_reruns_the_workflow_without_leaving_what_runs_unattended() {
    register_types();
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!("{}{}", node("n1", 0), tenant_yaml("acme", "")),
        0,
    );
    let wf = "
    - {name: migrate, type: command, properties: {command: /bin/true}}
    - {name: all, type: deploy, dependsOn: [migrate], properties: {workloads: [db, web]}}
";
    let out = apply(&mut c, &app("up", wf), 1);
    let k = key("acme", "up");
    let m1 = jobs(&out).pop().unwrap();
    let out = report_job(&mut c, &m1, ObservedState::Exited { code: 0 }, 2);
    let v1 = started(&out);
    assert_eq!(v1.len(), 2, "{out:?}");
    for i in &v1 {
        report(&mut c, i, ObservedState::Running, 3);
    }
    assert_eq!(c.phase(&k), Some(Phase::Running));

    // Version 2 changes web (its command) and runs the workflow again.
    let v2 = app("up", wf).replace(
        "- {name: web, runtime: {type: process}, resources:",
        "- {name: web, runtime: {type: process}, runtimeSpec: {command: /bin/sleep}, resources:",
    );
    assert_ne!(v2, app("up", wf));
    let out = apply(&mut c, &v2, 10);
    let m2 = jobs(&out);
    assert_eq!(m2.len(), 1, "the migration runs again: {out:?}");
    assert!(
        stopped(&out).is_empty(),
        "web's old copy serves on: {out:?}"
    );
    // db crashes meanwhile: restarted, not left down until the deploy step.
    let db = v1.iter().find(|i| i.workload == "db").unwrap();
    let out = report(&mut c, db, ObservedState::Exited { code: 1 }, 11);
    let restart = started(&out);
    assert_eq!(restart.len(), 1, "{out:?}");
    assert_eq!(restart[0].workload, "db");
    // The migration done: the deploy step rolls web out.
    let out = report_job(&mut c, &m2[0], ObservedState::Exited { code: 0 }, 12);
    assert!(
        stopped(&out)
            .iter()
            .chain(started(&out).iter())
            .any(|i| i.workload == "web"),
        "web's rollout goes on: {out:?}"
    );
}
