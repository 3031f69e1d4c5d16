//! Every lifecycle operation on one node ends where the user expects (issue 22),
//! checked against the processes and the port, not only the API: a real darosd
//! with the runtime executor, the sample shop on this test's own port and
//! directory, real processes in `daros-test-*` cgroups.
//!
//! - an env-only change: the port answers again within the readiness period and
//!   the new process has the new environment (`/proc/PID/environ`);
//! - stop, then start: the processes go, come back, the history is kept;
//! - scale up, down, to zero and out of range; rollback; restore of a held
//!   replica; delete leaves nothing;
//! - a failed application retried after its cause is fixed;
//! - `get apps` names a failing runtime spec and an OOM kill.
//!
//! Needs root and `daros-shim` built beside darosd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    APP_WAIT, RestartableDarosd, TestRoot, alive, cgroups_left, environ, free_port, http_get,
    instance, main_pid, main_pids, phase, shop_yaml, wait_for,
};
use serde_json::Value;

/// The shop's readiness check runs every 2 s (examples/shop.yaml).
const READINESS_PERIOD: Duration = Duration::from_secs(2);

/// The page served on `port`, if the port answers.
fn page(port: u16) -> Option<String> {
    http_get(port, "/index.html", Duration::from_secs(1)).filter(|b| b.contains("200 OK"))
}

/// Probes the port every 10 ms in the background and measures the longest time
/// it did not answer.
struct Probe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(Duration, u32)>,
}

impl Probe {
    fn start(port: u16) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut longest, mut n) = (Duration::ZERO, 0);
            let mut last_ok = Instant::now();
            while !s.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let ok = page(port).is_some();
                let now = Instant::now();
                if ok {
                    last_ok = now;
                } else {
                    longest = longest.max(now - last_ok);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            (longest, n)
        });
        Probe { stop, thread }
    }

    /// The longest outage seen and the number of probes.
    fn stop(self) -> (Duration, u32) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

fn state_of(d: &Value, workload: &str) -> String {
    instance(d, workload)
        .and_then(|i| i["state"]["state"].as_str())
        .unwrap_or("-")
        .to_string()
}

fn running_with(d: &Value, ready: &[&str]) -> bool {
    phase(d) == "Running" && ready.iter().all(|w| state_of(d, w) == "ready")
}

/// The shop renamed to `app`, its worker scalable to 3.
fn scalable_shop(app: &str, port: u16, dir: &Path) -> String {
    let y = shop_yaml(app, port, dir, false);
    let y2 = y.replacen(
        "    - name: worker\n",
        "    - name: worker\n      replicas: {min: 1, max: 3}\n",
        1,
    );
    assert_ne!(y, y2, "examples/shop.yaml changed shape");
    y2
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn cg(app: &str, workload: &str, version: u32, replica: u32) -> String {
    format!("shop-team.{app}.{workload}-v{version}.{replica}")
}

/// The cgroup of replica `replica` of `workload` at the version the description
/// says it runs (`tenant/app/workload/replica/vN` → `tenant.app.workload-vN.replica`).
fn cg_of(d: &Value, workload: &str, replica: u32) -> String {
    let id = d["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["id"].as_str())
        .find(|id| {
            let p: Vec<&str> = id.split('/').collect();
            p[2] == workload && p[3] == replica.to_string()
        })
        .unwrap_or_else(|| panic!("no {workload}/{replica} in {d:#}"));
    let p: Vec<&str> = id.split('/').collect();
    format!("{}.{}.{}-{}.{}", p[0], p[1], p[2], p[4], p[3])
}

/// The kernel's OOM-kill count of an instance cgroup (v1 `memory.oom_control`,
/// v2 `memory.events`).
fn kernel_oom_kills(t: &TestRoot, cgroup: &str) -> u64 {
    use daros_agent::cgroup::CgroupBackend;
    t.backend()
        .dirs(&t.workload(cgroup))
        .iter()
        .flat_map(|d| {
            ["memory.oom_control", "memory.events"]
                .map(|f| std::fs::read_to_string(d.path.join(f)).unwrap_or_default())
        })
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| l.strip_prefix("oom_kill "))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap_or(0)
}

fn kill(pid: u32) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
}

#[test]
fn every_operation_ends_where_the_user_expects() {
    let t = TestRoot::new("life");
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("shop");
    let port = free_port();
    let v1 = scalable_shop("life", port, &www);
    let f1 = write(dir.path(), "v1.yaml", &v1);
    let a = RestartableDarosd::runtime_agent(dir.path(), t.name(), "life");

    a.ctl_ok(&["apply", "-f", &f1]);
    a.wait_app("Running", "life", |d| running_with(d, &["web", "worker"]));
    let web1 = main_pid(&t, &cg("life", "web", 1, 0));
    assert!(environ(web1).contains(&"SHOP_ROLE=web".to_string()));
    assert!(page(port).is_some_and(|b| b.contains("daros shop")));

    // 1. An env-only change: stop v1, start v2; the port answers again within the
    // readiness period and the new process has the new environment.
    let v2 = v1.replace("env: {SHOP_ROLE: web}", "env: {SHOP_ROLE: web-v2}");
    assert_ne!(v1, v2);
    let f2 = write(dir.path(), "v2.yaml", &v2);
    let probe = Probe::start(port);
    a.ctl_ok(&["apply", "-f", &f2]);
    wait_for("v1 web stopped", APP_WAIT, || (!alive(web1)).then_some(()));
    let d = a.wait_app("v2 Running", "life", |d| {
        running_with(d, &["web", "worker"]) && d["version"] == 2
    });
    let (outage, probes) = probe.stop();
    eprintln!(
        "env-only update: port down for {outage:?} at most ({probes} probes; readiness period {READINESS_PERIOD:?})"
    );
    assert!(
        outage <= READINESS_PERIOD,
        "port down {outage:?}, more than the readiness period"
    );
    assert!(page(port).is_some());
    let web2 = main_pid(&t, &cg("life", "web", 2, 0));
    let env = environ(web2);
    assert!(env.contains(&"SHOP_ROLE=web-v2".to_string()), "{env:?}");
    assert!(
        cgroups_left(&t)
            .iter()
            .all(|p| !p.ends_with(cg("life", "web", 1, 0)))
    );
    assert_eq!(d["instances"].as_array().unwrap().len(), 2, "{d:#}");

    // 2. Stop: every process and cgroup goes; the port closes.
    let worker = main_pid(&t, &cg("life", "worker", 1, 0));
    a.ctl_ok(&["operate", "life", "stop"]);
    wait_for("stopped for real", APP_WAIT, || {
        (!alive(web2) && !alive(worker) && cgroups_left(&t).is_empty() && page(port).is_none())
            .then_some(())
    });
    let d = a.describe("life");
    assert_eq!(phase(&d), "Terminated");
    let events_when_stopped = d["events"].as_array().unwrap().len();

    // 3. Start: back to Running, new processes, the history kept (every replica is
    // placed afresh at the version in force, 2).
    a.ctl_ok(&["operate", "life", "start"]);
    let d = a.wait_app("Running after start", "life", |d| {
        running_with(d, &["web", "worker"])
    });
    assert!(page(port).is_some());
    let web3 = main_pid(&t, &cg_of(&d, "web", 0));
    assert_ne!(web3, web2);
    assert!(environ(web3).contains(&"SHOP_ROLE=web-v2".to_string()));
    let events = d["events"].as_array().unwrap();
    assert!(events.len() > events_when_stopped, "{d:#}");
    assert_eq!(
        events[0]["to"]["phase"], "Created",
        "history from the start: {d:#}"
    );
    assert_eq!(d["versions"].as_array().unwrap().len(), 2);

    // 4. Scale the worker up, to zero and back; out of range is refused with the bounds.
    a.ctl_ok(&["operate", "life", "scale", "worker", "3"]);
    let d = a.wait_app("3 workers", "life", |d| {
        running_with(d, &["web"])
            && d["instances"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| {
                    i["id"].as_str().unwrap().contains("/worker/") && i["state"]["state"] == "ready"
                })
                .count()
                == 3
    });
    for r in 0..3 {
        assert_eq!(
            main_pids(&t, &cg_of(&d, "worker", r)).len(),
            1,
            "worker {r}"
        );
    }
    a.ctl_ok(&["operate", "life", "scale", "worker", "0"]);
    wait_for("no worker process left", APP_WAIT, || {
        cgroups_left(&t)
            .iter()
            .all(|p| !p.to_string_lossy().contains(".worker-"))
            .then_some(())
    });
    let d = a.wait_app("Running without workers", "life", |d| {
        running_with(d, &["web"])
    });
    assert!(instance(&d, "worker").is_none(), "{d:#}");
    let out = a.ctl(&["operate", "life", "scale", "worker", "5"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.workloads[worker].replicas {min: 1, max: 3}"),
        "{err}"
    );
    a.ctl_ok(&["operate", "life", "scale", "worker", "1"]);
    a.wait_app("one worker again", "life", |d| {
        running_with(d, &["web", "worker"])
    });

    // 5. Rollback to version 1 (as version 3): the old environment runs again.
    a.ctl_ok(&["rollback", "life", "--to", "1"]);
    let d = a.wait_app("rolled back", "life", |d| {
        running_with(d, &["web", "worker"]) && d["version"] == 3
    });
    let web4 = main_pid(&t, &cg("life", "web", 3, 0));
    let worker_cg = cg_of(&d, "worker", 0);
    assert!(environ(web4).contains(&"SHOP_ROLE=web".to_string()));
    assert!(page(port).is_some());

    // 6. Restore: the worker is held after its retries (OnFailure, 3 retries,
    // WaitForOperator); restore gives it a new budget and it runs again.
    let mut last = 0;
    let d = wait_for("worker held", Duration::from_secs(120), || {
        let d = a.describe("life");
        if phase(&d) == "Degraded" {
            return Some(d);
        }
        if let Some(&pid) = main_pids(&t, &worker_cg).first()
            && pid != last
            && state_of(&d, "worker") == "ready"
        {
            kill(pid);
            last = pid;
        }
        std::thread::sleep(Duration::from_millis(100));
        None
    });
    let list = a.json(&["get", "apps"]);
    let reason = list[0]["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("worker/0") && reason.contains("signal 9"),
        "{reason}\n{d:#}"
    );
    a.ctl_ok(&["operate", "life", "restore"]);
    a.wait_app("restored", "life", |d| running_with(d, &["web", "worker"]));
    assert!(!main_pids(&t, &worker_cg).is_empty());

    // 7. Delete: nothing left.
    let pids: Vec<u32> = [cg("life", "web", 3, 0), worker_cg]
        .iter()
        .flat_map(|c| main_pids(&t, c))
        .collect();
    a.ctl_ok(&["delete", "app", "life"]);
    wait_for("everything gone", APP_WAIT, || {
        (cgroups_left(&t).is_empty() && pids.iter().all(|p| !alive(*p))).then_some(())
    });
    assert!(page(port).is_none());
}

/// A failed application: its cause fixed, Retry brings it to Running.
#[test]
fn a_failed_application_runs_after_retry() {
    let t = TestRoot::new("life-retry");
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("shop");
    let port = free_port();
    let flag = dir.path().join("allowed");
    let yaml = shop_yaml("again", port, &www, false).replacen(
        "args: [\"-c\", \"mkdir -p",
        &format!(
            "args: [\"-c\", \"test -f {} || exit 3; mkdir -p",
            flag.display()
        ),
        1,
    );
    assert!(
        yaml.contains("|| exit 3"),
        "examples/shop.yaml changed shape"
    );
    let f = write(dir.path(), "again.yaml", &yaml);
    let a = RestartableDarosd::runtime_agent(dir.path(), t.name(), "life-retry");
    a.ctl_ok(&["apply", "-f", &f]);
    a.wait_app("Failed", "again", |d| phase(d) == "Failed");
    let list = a.json(&["get", "apps"]);
    let reason = list[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("prepare-docroot") && reason.contains("code 3"),
        "{reason}"
    );
    std::fs::write(&flag, "").unwrap();
    a.ctl_ok(&["operate", "again", "retry"]);
    a.wait_app("Running after retry", "again", |d| {
        running_with(d, &["web", "worker"])
    });
    assert!(page(port).is_some());
}

/// `get apps` says what is wrong: a runtime spec that cannot start, an OOM kill.
#[test]
fn get_apps_names_a_failing_runtime_spec_and_an_oom_kill() {
    let t = TestRoot::new("life-why");
    let dir = tempfile::tempdir().unwrap();
    let apps = "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: shop-team}\nspec: {}\n---\n\
apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: nocmd, tenant: shop-team}\nspec:\n  \
lifecyclePolicy: {restart: Always, maxRetries: 20, backoff: {initial: 1s, max: 1s}}\n  workloads:\n    \
- name: svc\n      runtime: {type: process, os: linux}\n      resources: {cpu: {request: 100m}, memory: {request: 16Mi}}\n      \
runtimeSpec: {command: /nonexistent/daros-test-cmd}\n---\n\
apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: hog, tenant: shop-team}\nspec:\n  \
lifecyclePolicy: {restart: Never, onExhausted: WaitForOperator}\n  workloads:\n    \
- name: hog\n      runtime: {type: process, os: linux}\n      qos: Burstable\n      \
resources: {cpu: {request: 100m}, memory: {request: 16Mi, limit: 32Mi}}\n      \
runtimeSpec: {command: /bin/sh, args: [\"-c\", \"x=$(head -c 300000000 /dev/zero | tr '\\\\0' x); sleep 60\"]}\n";
    let f = write(dir.path(), "why.yaml", apps);
    let a = RestartableDarosd::runtime_agent(dir.path(), t.name(), "life-why");
    a.ctl_ok(&["apply", "-f", &f]);
    let reason = |app: &str| -> String {
        let list = a.json(&["get", "apps"]);
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["app"]["name"] == app)
            .and_then(|s| s["reason"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let why = wait_for("the failing start named", APP_WAIT, || {
        let r = reason("nocmd");
        (r.contains("svc/0") && r.contains("/nonexistent/daros-test-cmd") && r.contains("restart"))
            .then_some(r)
    });
    eprintln!("nocmd: {why}");
    let d = a.describe("nocmd");
    assert_eq!(phase(&d), "Scheduled", "it never ran: {d:#}");
    let table = a.ctl_ok(&["get", "apps"]);
    assert!(table.contains("/nonexistent/daros-test-cmd"), "{table}");

    let why = wait_for("the OOM kill named", APP_WAIT, || {
        let r = reason("hog");
        r.contains("OOM").then_some(r)
    });
    eprintln!("hog: {why}");
    assert!(
        why.contains("hog/0: OOM: killed at its memory limit of 32Mi"),
        "{why}"
    );
    let d = a.describe("hog");
    let state = &instance(&d, "hog").unwrap()["state"];
    assert_eq!(state["failure"]["runtime"]["kind"], "outOfMemory", "{d:#}");
    // The kernel counted it too.
    assert!(kernel_oom_kills(&t, &cg_of(&d, "hog", 0)) >= 1);
}
