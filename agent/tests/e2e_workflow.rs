//! A workflow on a real darosd with real processes (issue 17): deploy the
//! datastore, then a parallel group of two `command` steps (the second fails
//! once and is retried), then an approval, then deploy web. Checked against
//! reality: the steps' processes wrote when they started and ended (after the
//! datastore started; overlapping: parallel), web has no process until
//! `darosctl operate flow approve go`, and `darosctl get workflow` shows each
//! step. A step that outlives its timeout is killed (its process is gone) and
//! fails the workflow with the reason.
//!
//! Needs root and `daros-shim` built beside darosd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{APP_WAIT, RestartableDarosd, TestRoot, alive, main_pids, phase, wait_for};
use serde_json::Value;

fn spec(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"apiVersion: daros.io/v1
kind: Tenant
metadata: {{name: wf-team}}
spec: {{quota: {{cpu: "2", memory: 1Gi}}}}
---
apiVersion: daros.io/v1
kind: Application
metadata: {{name: flow, tenant: wf-team}}
spec:
  workloads:
    - name: db
      runtime: {{type: process, os: linux}}
      image: /bin/sh
      resources: {{cpu: {{request: 50m}}, memory: {{request: 16Mi, limit: 64Mi}}}}
      runtimeSpec:
        command: /bin/sh
        args: ["-c", "date +%s.%N > {d}/db.start; exec sleep 600"]
    - name: web
      runtime: {{type: process, os: linux}}
      image: /bin/sleep
      resources: {{cpu: {{request: 50m}}, memory: {{request: 16Mi, limit: 64Mi}}}}
      runtimeSpec: {{command: /bin/sleep, args: ["600"]}}
  workflow:
    steps:
      - {{name: db, type: deploy, properties: {{workloads: [db]}}}}
      - name: checks
        type: group
        mode: parallel
        dependsOn: [db]
        steps:
          - name: s1
            type: command
            properties:
              command: /bin/sh
              args: ["-c", "date +%s.%N > {d}/s1.start; sleep 3; date +%s.%N > {d}/s1.end"]
          - name: s2
            type: command
            retries: 1
            properties:
              command: /bin/sh
              args: ["-c", "[ -e {d}/s2.once ] || {{ touch {d}/s2.once; exit 7; }}; date +%s.%N > {d}/s2.start; sleep 1; date +%s.%N > {d}/s2.end"]
      - {{name: go, type: approval, dependsOn: [checks]}}
      - {{name: web, type: deploy, dependsOn: [go], properties: {{workloads: [web]}}}}
"#
    )
}

fn slow(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"apiVersion: daros.io/v1
kind: Application
metadata: {{name: slow, tenant: wf-team}}
spec:
  workloads:
    - name: app
      runtime: {{type: process, os: linux}}
      image: /bin/sleep
      resources: {{cpu: {{request: 50m}}, memory: {{request: 16Mi, limit: 64Mi}}}}
      runtimeSpec: {{command: /bin/sleep, args: ["600"]}}
  workflow:
    steps:
      - name: long
        type: command
        timeout: 1s
        properties:
          command: /bin/sh
          args: ["-c", "echo $$ > {d}/long.pid; exec sleep 30"]
      - {{name: app, type: deploy, dependsOn: [long], properties: {{workloads: [app]}}}}
"#
    )
}

fn time_in(dir: &Path, name: &str) -> f64 {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

fn step<'a>(steps: &'a Value, name: &str) -> &'a Value {
    steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {steps:#}"))
}

#[test]
fn a_workflow_runs_its_steps_in_order_in_parallel_and_waits_for_approval() {
    let t = TestRoot::new("wf");
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("out");
    std::fs::create_dir(&files).unwrap();
    let a = RestartableDarosd::runtime_agent(dir.path(), t.name(), "wf");
    let f = dir.path().join("flow.yaml");
    std::fs::write(&f, spec(&files)).unwrap();
    a.ctl_ok(&["apply", "-f", &f.display().to_string()]);

    let steps = wait_for("the approval step waits", APP_WAIT, || {
        let s = a.json(&["get", "workflow", "flow"]);
        (step(&s, "go")["phase"] == "WaitingApproval").then_some(s)
    });
    for s in ["db", "s1", "s2", "checks"] {
        assert_eq!(step(&steps, s)["phase"], "Succeeded", "{steps:#}");
    }
    assert_eq!(
        step(&steps, "s2")["attempts"],
        2,
        "s2 was retried: {steps:#}"
    );
    assert_eq!(step(&steps, "web")["phase"], "Pending");
    // Order and parallelism, from what the processes wrote.
    let db = time_in(&files, "db.start");
    let (s1, s1e) = (time_in(&files, "s1.start"), time_in(&files, "s1.end"));
    let (s2, s2e) = (time_in(&files, "s2.start"), time_in(&files, "s2.end"));
    eprintln!(
        "db started at 0; s1 ran {:.2}..{:.2} s, s2 (second run) {:.2}..{:.2} s",
        s1 - db,
        s1e - db,
        s2 - db,
        s2e - db
    );
    assert!(
        s1 > db && s2 > db,
        "the group ran after the datastore started"
    );
    assert!(
        s1 < s2e && s2 < s1e,
        "s1 and s2 overlapped (a parallel group)"
    );
    assert!(files.join("s2.once").exists());
    // Web waits for the approval: no process of it.
    assert!(main_pids(&t, "wf-team.flow.web-v1.0").is_empty());
    let d = a.json(&["describe", "app", "flow"]);
    assert_ne!(phase(&d), "Running");

    a.ctl_ok(&["operate", "flow", "approve", "go"]);
    a.wait_app("Running after the approval", "flow", |d| {
        phase(d) == "Running"
    });
    let web = wait_for("web runs", APP_WAIT, || {
        main_pids(&t, "wf-team.flow.web-v1.0").first().copied()
    });
    assert!(alive(web));
    let steps = a.json(&["get", "workflow", "flow"]);
    assert!(
        steps
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["phase"] == "Succeeded"),
        "{steps:#}"
    );
    let text = a.ctl_ok(&["get", "workflow", "flow", "-o", "table"]);
    assert!(text.contains("STEP") && text.contains("approval"), "{text}");

    // A step past its timeout: killed, and the workflow failed with why.
    let f = dir.path().join("slow.yaml");
    std::fs::write(&f, slow(&files)).unwrap();
    a.ctl_ok(&["apply", "-f", &f.display().to_string()]);
    let steps = wait_for("the long step failed", APP_WAIT, || {
        let s = a.json(&["get", "workflow", "slow"]);
        (step(&s, "long")["phase"] == "Failed").then_some(s)
    });
    let msg = step(&steps, "long")["message"]
        .as_str()
        .unwrap()
        .to_string();
    eprintln!("long step: {msg}");
    assert!(msg.starts_with("step long failed after 1 run(s):"), "{msg}");
    let pid: u32 = std::fs::read_to_string(files.join("long.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for("the long step's process is gone", APP_WAIT, || {
        (!alive(pid)).then_some(())
    });
    assert_eq!(step(&steps, "app")["phase"], "Pending");
    a.ctl_ok(&["delete", "app", "flow"]);
    a.ctl_ok(&["delete", "app", "slow"]);
}
