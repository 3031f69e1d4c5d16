//! Canary and blue-green rollouts (issue 17) against a real darosd, real
//! processes and a real port (`common::reuseport`'s server, two replicas
//! sharing one port, readiness per instance):
//! - a canary that fails its health gate (it serves, then exits) rolls back
//!   by itself long before its gate or deadline would end, the decision says
//!   why, and the old replicas are the very processes that ran before;
//! - a blue-green switch stops the old set only once both new instances run
//!   (checked in /proc when the first old process is gone), and the port
//!   never refuses a connection throughout;
//! - the same poller does see the outage of a rollout that stops both old
//!   replicas first, so its "never refused" means something.
//!
//! Needs root, python3 and `daros-shim` built beside darosd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::reuseport::{Polled, Poller, SERVER, served};
use common::{
    APP_WAIT, RestartableDarosd, TestRoot, alive, free_port, main_pid, main_pids, phase, wait_for,
};
use serde_json::Value;

fn spec(port: u16, script: &Path, rollout: &str, env: &str) -> String {
    format!(
        r#"apiVersion: daros.io/v1
kind: Tenant
metadata: {{name: strat-team}}
spec:
  quota: {{cpu: "2", memory: 1Gi, maxApplications: 5, maxConcurrentWorkloads: 10}}
---
apiVersion: daros.io/v1
kind: Application
metadata: {{name: web, tenant: strat-team}}
spec:
  lifecyclePolicy:
    restart: Always
    backoff: {{initial: 500ms, max: 1s}}
    rollout: {{{rollout}}}
  workloads:
    - name: web
      replicas: 2
      runtime: {{type: process, os: linux}}
      image: /usr/bin/python3
      qos: Burstable
      resources:
        cpu: {{request: 100m, limit: "1"}}
        memory: {{request: 32Mi, limit: 128Mi}}
      healthChecks:
        - {{name: page, kind: readiness, http: {{port: {port}, path: /}}, period: 400ms, timeout: 400ms}}
      runtimeSpec:
        command: /usr/bin/python3
        args: ["{script}", "{port}"]
        env: {{{env}}}
"#,
        script = script.display()
    )
}

fn cg(version: u32, replica: u32) -> String {
    format!("strat-team.web.web-v{version}.{replica}")
}

/// Running at `version`, both replicas ready, no rollout under way.
fn settled(d: &Value, version: u32) -> bool {
    phase(d) == "Running"
        && d["version"] == version
        && d.get("rollout").is_none()
        && d["instances"].as_array().is_some_and(|i| {
            i.len() == 2
                && i.iter()
                    .all(|i| i["state"]["state"] == "ready" && i["replacing"].is_null())
        })
}

fn reasons(a: &RestartableDarosd, d: &Value) -> Vec<String> {
    d["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| {
            let n = id.as_str().unwrap().trim_start_matches("d-").to_string();
            a.json(&["explain", "web", "--decision", &n])["reason"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn a_failing_canary_rolls_back_and_a_blue_green_switch_never_leaves_the_port_empty() {
    let t = TestRoot::new("strat");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("server.py");
    std::fs::write(&script, SERVER).unwrap();
    let port = free_port();
    let write = |name: &str, rollout: &str, env: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, spec(port, &script, rollout, env)).unwrap();
        p.display().to_string()
    };
    let a = RestartableDarosd::runtime_agent(dir.path(), t.name(), "strat");
    let canary = "strategy: canary, canary: {replicas: 1, healthyFor: 30s}, progressDeadline: 60s";

    a.ctl_ok(&["apply", "-f", &write("v1.yaml", canary, "VERSION: \"1\"")]);
    a.wait_app("v1 Running", "web", |d| settled(d, 1));
    assert_eq!(served(port).as_deref(), Some("1"));
    let old = [main_pid(&t, &cg(1, 0)), main_pid(&t, &cg(1, 1))];

    // 1. The canary of version 2 serves, then exits after 3 s: its gate fails,
    // the rollout rolls back at once (version 3 = version 1's spec).
    let poll = Poller::start(port);
    let t0 = Instant::now();
    a.ctl_ok(&[
        "apply",
        "-f",
        &write("v2.yaml", canary, "VERSION: \"2\", CRASH_AFTER: \"3\""),
    ]);
    let canary_pid = wait_for("the canary runs", APP_WAIT, || {
        main_pids(&t, &cg(2, 0)).first().copied()
    });
    assert!(
        main_pids(&t, &cg(2, 1)).is_empty(),
        "replica 1 keeps version 1 while the canary is judged"
    );
    let d3 = a.wait_app("rolled back to version 3", "web", |d| settled(d, 3));
    let rolled_back_after = t0.elapsed();
    let p = poll.stop();
    eprintln!(
        "failing canary: rolled back {rolled_back_after:?} after apply (canary exits after 3 s, \
         gate 30 s, deadline 60 s); {} requests, {} failed, versions seen {:?}",
        p.requests, p.failed, p.seen
    );
    assert!(
        rolled_back_after < Duration::from_secs(20),
        "rolled back {rolled_back_after:?} after apply: not at the canary's failure"
    );
    wait_for("the canary's process is gone", APP_WAIT, || {
        (!alive(canary_pid)).then_some(())
    });
    assert_eq!(p.failed, 0, "{p:?}");
    assert_eq!(p.seen, vec!["1".to_string()], "only version 1 answered");
    assert_eq!(
        [main_pid(&t, &cg(1, 0)), main_pid(&t, &cg(1, 1))],
        old,
        "the old replicas are the processes that ran before"
    );
    let why = reasons(&a, &d3);
    assert!(
        why.iter().any(|r| r.starts_with(
            "rollout to version 2 failed: canary web/0 of version 2 failed its health gate: \
             runtime failure: process exited with code 3; rolling back to the spec of version 1"
        )),
        "{why:#?}"
    );
    assert_eq!(d3["versions"][2]["origin"]["origin"], "autoRollback");

    // 2. Blue-green to version 4: both new instances start beside the old
    // ones; the first old process goes only once both new ones run.
    let poll = Poller::start(port);
    a.ctl_ok(&[
        "apply",
        "-f",
        &write("v4.yaml", "strategy: blueGreen", "VERSION: \"4\""),
    ]);
    let mut green: [Option<u32>; 2] = [None, None];
    let deadline = Instant::now() + APP_WAIT;
    while old.iter().all(|&p| alive(p)) {
        for (r, g) in green.iter_mut().enumerate() {
            if g.is_none() {
                *g = main_pids(&t, &cg(4, r as u32)).first().copied();
            }
        }
        assert!(Instant::now() < deadline, "the old set never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let green_at_switch = green.map(|g| g.is_some_and(alive));
    a.wait_app("v4 Running", "web", |d| settled(d, 4));
    let p: Polled = poll.stop();
    eprintln!(
        "blue-green: {} requests, {} failed first ({} refused, {} unanswered after a retry), \
         versions seen {:?}; first failures {:?}",
        p.requests, p.failed, p.refused, p.unanswered, p.seen, p.failures
    );
    assert_eq!(
        green_at_switch,
        [true, true],
        "both new instances ran when the first old one went"
    );
    assert_eq!(
        p.refused, 0,
        "the port had no listener at some moment: {p:?}"
    );
    assert_eq!(p.unanswered, 0, "{p:?}");
    assert_eq!(p.seen.last().map(String::as_str), Some("4"), "{p:?}");
    assert!(p.requests > 50, "too few requests to mean anything: {p:?}");
    wait_for("the old set is gone", APP_WAIT, || {
        old.iter().all(|&p| !alive(p)).then_some(())
    });
    let d4 = a.json(&["describe", "app", "web"]);
    assert!(
        reasons(&a, &d4).iter().any(|r| r
            == "blue-green switch of web: all 2 instance(s) of version 4 ready; stopping version 1"),
        "{:#?}",
        reasons(&a, &d4)
    );

    // 3. The control: stopping both replicas first leaves the port empty for
    // a moment, and the poller sees it.
    let poll = Poller::start(port);
    a.ctl_ok(&[
        "apply",
        "-f",
        &write("v5.yaml", "maxUnavailable: 2", "VERSION: \"5\""),
    ]);
    a.wait_app("v5 Running", "web", |d| settled(d, 5));
    let p = poll.stop();
    eprintln!(
        "stop-first control: {} requests, {} refused, versions seen {:?}",
        p.requests, p.refused, p.seen
    );
    assert!(p.refused > 0, "the poller missed the outage: {p:?}");

    a.ctl_ok(&["delete", "app", "web"]);
}
