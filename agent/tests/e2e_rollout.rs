//! Change without outage (issue 20), against a real darosd, real processes and
//! a real port: a one-replica HTTP workload rolled out with `maxSurge: 1` is
//! polled through a spec change and no request fails; a new version that
//! crashes rolls back by itself at its progress deadline, the old version
//! serving throughout (and kept: the same process), and a decision says why.
//!
//! The workload is `common::reuseport`'s small Python server, which shares its
//! port with its other copies: what a server that supports zero-downtime
//! restarts does.
//!
//! Needs root and `daros-shim` built beside darosd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::reuseport::{Polled, Poller, SERVER, served};
use common::{
    APP_WAIT, RestartableDarosd, TestRoot, alive, environ, free_port, main_pid, phase, wait_for,
};
use serde_json::Value;

fn spec(port: u16, script: &Path, env: &str) -> String {
    format!(
        r#"apiVersion: daros.io/v1
kind: Tenant
metadata: {{name: roll-team}}
spec:
  quota: {{cpu: "2", memory: 1Gi, maxApplications: 5, maxConcurrentWorkloads: 10}}
---
apiVersion: daros.io/v1
kind: Application
metadata: {{name: roll, tenant: roll-team}}
spec:
  lifecyclePolicy:
    restart: Always
    backoff: {{initial: 500ms, max: 1s}}
    rollout: {{maxSurge: 1, maxUnavailable: 0, progressDeadline: 8s}}
  workloads:
    - name: web
      runtime: {{type: process, os: linux}}
      image: /usr/bin/python3
      qos: Burstable
      resources:
        cpu: {{request: 100m, limit: "1"}}
        memory: {{request: 32Mi, limit: 128Mi}}
      healthChecks:
        - {{name: page, kind: readiness, http: {{port: {port}, path: /}}, period: 500ms, timeout: 400ms}}
      runtimeSpec:
        command: /usr/bin/python3
        args: ["{script}", "{port}"]
        env: {{{env}}}
"#,
        script = script.display()
    )
}

fn cg(version: u32) -> String {
    format!("roll-team.roll.web-v{version}.0")
}

fn settled(d: &Value, version: u32) -> bool {
    phase(d) == "Running"
        && d["version"] == version
        && d.get("rollout").is_none()
        && d["instances"].as_array().is_some_and(|i| {
            i.len() == 1 && i[0]["state"]["state"] == "ready" && i[0]["replacing"].is_null()
        })
}

#[test]
fn a_surge_rollout_loses_no_request_and_a_crashing_version_rolls_back() {
    let t = TestRoot::new("roll");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("server.py");
    std::fs::write(&script, SERVER).unwrap();
    let port = free_port();
    let write = |name: &str, env: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, spec(port, &script, env)).unwrap();
        p.display().to_string()
    };
    let a = RestartableDarosd::runtime_agent(dir.path(), t.name(), "roll");

    a.ctl_ok(&["apply", "-f", &write("v1.yaml", "VERSION: \"1\"")]);
    a.wait_app("v1 Running", "roll", |d| settled(d, 1));
    assert_eq!(served(port).as_deref(), Some("1"));
    let p1 = main_pid(&t, &cg(1));

    // 1. A spec change with a surge: v2 starts beside v1, v1 stops once v2 is
    // ready; not one request fails.
    let poll = Poller::start(port);
    let t0 = Instant::now();
    a.ctl_ok(&["apply", "-f", &write("v2.yaml", "VERSION: \"2\"")]);
    a.wait_app("v2 Running", "roll", |d| settled(d, 2));
    wait_for("v1 exited", APP_WAIT, || (!alive(p1)).then_some(()));
    let Polled {
        requests: n,
        failed,
        seen,
        ..
    } = poll.stop();
    eprintln!(
        "surge rollout: {n} requests, {failed} failed, versions seen {seen:?}, {:?} from apply to v1 gone",
        t0.elapsed()
    );
    assert_eq!(
        failed, 0,
        "{failed} of {n} requests failed during the rollout"
    );
    assert_eq!(seen, vec!["1".to_string(), "2".to_string()]);
    assert!(n > 50, "too few requests ({n}) to mean anything");
    let p2 = main_pid(&t, &cg(2));
    assert!(environ(p2).contains(&"VERSION=2".to_string()));

    // 2. v3 crashes at start: at its 8 s progress deadline the rollout fails and
    // rolls back by itself (version 4 = version 2's spec); v2 serves throughout
    // and is version 4's instance as it is: the same process, never restarted.
    let poll = Poller::start(port);
    let t0 = Instant::now();
    a.ctl_ok(&[
        "apply",
        "-f",
        &write("v3.yaml", "VERSION: \"3\", CRASH: \"1\""),
    ]);
    let d = a.wait_app("rolled back to version 4", "roll", |d| d["version"] == 4);
    let rolled_back_after = t0.elapsed();
    let d4 = a.wait_app("v4 Running", "roll", |d| settled(d, 4));
    let Polled {
        requests: n,
        failed,
        seen,
        ..
    } = poll.stop();
    eprintln!(
        "crashing version: rolled back {rolled_back_after:?} after apply (deadline 8s); \
         {n} requests, {failed} failed, versions seen {seen:?}"
    );
    assert!(
        rolled_back_after >= Duration::from_secs(8),
        "rolled back before the deadline: {rolled_back_after:?} {d:#}"
    );
    assert!(
        rolled_back_after < Duration::from_secs(12),
        "rolled back {rolled_back_after:?} after apply, deadline 8 s"
    );
    assert_eq!(failed, 0, "{failed} of {n} requests failed");
    assert_eq!(
        seen,
        vec!["2".to_string()],
        "only version 2's spec answered"
    );
    assert!(alive(p2), "the version 2 process was stopped");
    assert_eq!(main_pid(&t, &cg(2)), p2, "version 2's process was replaced");
    assert!(environ(p2).contains(&"VERSION=2".to_string()));
    assert_eq!(
        d4["versions"][3]["origin"]["origin"], "autoRollback",
        "{d4:#}"
    );
    // The decision says why.
    let reasons: Vec<String> = d4["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| {
            let n = id.as_str().unwrap().trim_start_matches("d-").to_string();
            a.json(&["explain", "roll", "--decision", &n])["reason"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(
        reasons.iter().any(|r| r.starts_with(
            "rollout to version 3 failed: workload web did not complete its rollout to version 3 \
             within its progress deadline 8s; rolling back to the spec of version 2"
        )),
        "{reasons:#?}"
    );
    a.ctl_ok(&["delete", "app", "roll"]);
    wait_for("all gone", APP_WAIT, || (!alive(p2)).then_some(()));
}
