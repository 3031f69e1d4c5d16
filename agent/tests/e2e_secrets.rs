//! Configs and Secrets reach real processes through the `env` trait, and a
//! secret value never leaves the places it must be (issue 17): a real darosd
//! with the runtime executor runs an init job and a workload that read a
//! Config, a Secret and a literal; checked against `/proc/PID/environ` and
//! the file the init job wrote. Then the value is searched for, byte for byte,
//! in every GET answer of the API (every route of the OpenAPI document, with
//! this test's tenant, application and instance substituted), in darosd's
//! log and in every file under the mesh directory (raft log, snapshots,
//! PKI): it must be in none. A Secret in use cannot be deleted; once its
//! application is gone it can.
//!
//! Needs root and `daros-shim` built beside darosd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use axum::http::{Method, StatusCode};
use common::{APP_WAIT, RestartableDarosd, TestRoot, environ, main_pid, phase, wait_for};

fn spec(dir: &Path, password: &str) -> String {
    format!(
        r#"apiVersion: daros.io/v1
kind: Tenant
metadata: {{name: sec-team}}
spec: {{quota: {{cpu: "2", memory: 1Gi}}}}
---
apiVersion: daros.io/v1
kind: Config
metadata: {{name: settings, tenant: sec-team}}
spec:
  data: {{MODE: fast, REGION: eu-1}}
---
apiVersion: daros.io/v1
kind: Secret
metadata: {{name: db, tenant: sec-team}}
spec:
  data: {{password: "{password}", user: app}}
---
apiVersion: daros.io/v1
kind: Application
metadata: {{name: vault, tenant: sec-team}}
spec:
  workloads:
    - name: api
      runtime: {{type: process, os: linux}}
      image: /bin/sleep
      resources:
        cpu: {{request: 50m}}
        memory: {{request: 16Mi, limit: 64Mi}}
      initJobs:
        - name: schema
          image: /bin/sh
          runtimeSpec:
            command: /bin/sh
            args: ["-c", "printf %s \"$DB_PASSWORD\" > {seen}"]
      traits:
        - type: env
          properties:
            from: [{{config: settings}}]
            vars:
              LOG_LEVEL: info
              DB_PASSWORD: {{secret: db, key: password}}
      runtimeSpec:
        command: /bin/sleep
        args: ["600"]
        env: {{MODE: slow}}
"#,
        seen = dir.join("seen-by-init").display()
    )
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if std::fs::read(&p).is_ok_and(|b| contains(&b, needle)) {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

#[test]
fn secrets_reach_the_process_and_nothing_else() {
    let t = TestRoot::new("secret");
    let dir = tempfile::tempdir().unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let password = format!("pw-{nanos:x}-{}", std::process::id());
    let f = dir.path().join("vault.yaml");
    std::fs::write(&f, spec(dir.path(), &password)).unwrap();
    let a = RestartableDarosd::runtime_agent(dir.path(), t.name(), "secret");
    let applied = a.ctl_ok(&["apply", "-f", &f.display().to_string()]);
    assert!(!applied.contains(&password));

    // The process has the Config's keys, the literal and the Secret's value;
    // the trait wins over runtimeSpec.env (MODE).
    let d = a.wait_app("Running", "vault", |d| phase(d) == "Running");
    let cg = "sec-team.vault.api-v1.0";
    let pid = main_pid(&t, cg);
    let env = environ(pid);
    for want in [
        format!("DB_PASSWORD={password}"),
        "MODE=fast".into(),
        "REGION=eu-1".into(),
        "LOG_LEVEL=info".into(),
    ] {
        assert!(
            env.contains(&want),
            "{want} not in the environment of {pid}"
        );
    }
    assert!(
        !env.iter().any(|e| e.starts_with("user=")),
        "from: took only the Config"
    );
    // The init job had it too.
    let seen = std::fs::read_to_string(dir.path().join("seen-by-init")).unwrap();
    assert_eq!(seen, password, "the init job's DB_PASSWORD");

    // Every GET route of the API, ids substituted: the value is in no answer.
    let c = a_client(&a);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let doc = rt.block_on(c.openapi()).unwrap();
    let instance = d["instances"][0]["id"].as_str().unwrap().to_string();
    let mut asked = 0;
    for (p, ops) in doc["paths"].as_object().unwrap() {
        if ops.get("get").is_none() {
            continue;
        }
        let url = if p.starts_with("/v1/logs/") {
            format!("/v1/logs/{instance}")
        } else {
            p.to_string()
        };
        let url = url
            .replace("{tenant}", "sec-team")
            .replace("{app}", "vault")
            .replace("{name}", "vault")
            .replace("{id}", &format!("managed/{cg}"))
            .replace("{instance}", &instance);
        let url = url.replace("{node}", "x");
        let (status, body) = rt.block_on(c.request(Method::GET, &url)).unwrap();
        asked += 1;
        assert!(
            !contains(&body, &password),
            "GET {url} ({status}) answers with the secret value"
        );
    }
    eprintln!(
        "pid {pid}: {} variables; {asked} GET routes asked",
        env.len()
    );
    assert!(asked >= 20, "only {asked} GET routes asked");
    let (status, body) = rt
        .block_on(c.request(Method::GET, "/v1/tenants/sec-team/secrets"))
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v[0]["keys"], serde_json::json!(["password", "user"]), "{v}");
    for args in [
        vec!["describe", "app", "vault"],
        vec!["get", "secrets", "--tenant", "sec-team"],
        vec!["get", "configs", "--tenant", "sec-team"],
        vec!["get", "apps"],
        vec!["audit"],
    ] {
        let out = a.ctl(&args);
        assert!(
            !contains(&out.stdout, &password) && !contains(&out.stderr, &password),
            "darosctl {args:?} printed the secret value"
        );
    }
    // Not in the log, not in the replicated state on disk (raft log and
    // snapshots), not in any other file of the mesh directory.
    assert!(
        !a.log().contains(&password),
        "darosd's log has the secret value"
    );
    let mesh = dir.path().join("data/mesh");
    assert!(mesh.is_dir(), "{} missing", mesh.display());
    let leaked = files_containing(&mesh, &password);
    assert!(leaked.is_empty(), "secret value in {leaked:?}");
    assert!(
        files_containing(&mesh, "v1:")
            .iter()
            .any(|f| f.contains("raft") || f.ends_with(".redb")),
        "the sealed value is in the replicated state"
    );

    // In use: refused; the process keeps running.
    let out = a.ctl(&["delete", "secret", "db", "--tenant", "sec-team"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("still used by application sec-team/vault"),
        "{err}"
    );
    let out = a.ctl(&["delete", "app", "vault", "--tenant", "sec-team"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the process gone", APP_WAIT, || {
        (!common::alive(pid)).then_some(())
    });
    wait_for("the application gone", APP_WAIT, || {
        let out = a.ctl(&["describe", "app", "vault", "--tenant", "sec-team"]);
        (!out.status.success()).then_some(())
    });
    a.ctl_ok(&["delete", "secret", "db", "--tenant", "sec-team"]);
    a.ctl_ok(&["delete", "config", "settings", "--tenant", "sec-team"]);
    let v: serde_json::Value = a.json(&["get", "secrets", "--tenant", "sec-team"]);
    assert_eq!(v, serde_json::json!([]));
}

fn a_client(a: &RestartableDarosd) -> daros_agent::client::Client {
    daros_agent::client::Client::new(&a.socket)
}
