//! End to end on one node, real everything: a real `darosd` (control plane,
//! runtime executor, QoS) on its own socket and data dir, `darosctl apply -f`
//! of the sample shop (examples/shop.yaml, with its port and directory moved
//! to this test's own), real processes in real `daros-test-*` cgroups.
//!
//! - the app goes Created → Admitted → Scheduled → Running, its init job ran
//!   before the server started, every instance runs in its own cgroup under its
//!   class (`/proc/<pid>/cgroup`, `darosctl qos get`);
//! - killing the server restarts it per policy (new pid, restart count, events);
//! - `kill -9` of darosd and a restart on the same data dir re-adopts the
//!   workloads (same pids);
//! - `darosctl delete app` leaves no process and no cgroup in any hierarchy;
//! - a failing init job keeps its dependents from starting and `describe` says why.
//!
//! Needs root and `daros-shim` built beside darosd
//! (`cargo build -p daros-adapters --bin daros-shim`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    RestartableDarosd, TestRoot, alive, cgroups_left, free_port, instance, main_pid, phase,
    shop_yaml, wait_for,
};
use daros_agent::cgroup::{CgroupBackend, CgroupPath};
use serde_json::Value;

const LONG: Duration = common::APP_WAIT;

/// darosd on a fixed data dir, restartable (kill -9 and start again).
struct Agent(RestartableDarosd);

impl std::ops::Deref for Agent {
    type Target = RestartableDarosd;
    fn deref(&self) -> &RestartableDarosd {
        &self.0
    }
}

impl Agent {
    fn start(dir: &Path, root: &str) -> Self {
        Agent(RestartableDarosd::runtime_agent(dir, root, "e2e-shop"))
    }

    fn spawn(&mut self) {
        self.0.spawn_serving();
    }

    fn kill9(&mut self) {
        self.0.kill9();
    }
}

fn proc_cgroups(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default()
}

#[test]
fn shop_runs_restarts_survives_agent_kill_and_is_deleted_without_leftovers() {
    let t = TestRoot::new("e2e-shop");
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("shop");
    let port = free_port();
    let yaml = dir.path().join("shop.yaml");
    std::fs::write(&yaml, shop_yaml("shop", port, &www, false)).unwrap();
    let mut a = Agent::start(dir.path(), t.name());

    a.ctl_ok(&["apply", "-f", yaml.to_str().unwrap()]);
    let d = a.wait_app("shop Running with web and worker ready", "shop", |d| {
        let ready = |w| instance(d, w).is_some_and(|i| i["state"]["state"] == "ready");
        phase(d) == "Running" && ready("web") && ready("worker")
    });
    let phases: Vec<String> = d["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["to"]["phase"].as_str().map(String::from))
        .collect();
    assert_eq!(
        phases,
        ["Created", "Admitted", "Scheduled", "Running"],
        "{d:#}"
    );
    assert_eq!(
        d["jobs"][0]["state"],
        serde_json::json!({"state": "exited", "code": 0})
    );

    // Each instance in its own cgroup under its class, in every hierarchy.
    let web_cg = "shop-team.shop.web-v1.0";
    let worker_cg = "shop-team.shop.worker-v1.0";
    let web = main_pid(&t, web_cg);
    let worker = main_pid(&t, worker_cg);
    let cgs = proc_cgroups(web);
    let hierarchies = t.backend().dirs(&CgroupPath::new(t.name()).unwrap()).len();
    assert_eq!(
        cgs.lines()
            .filter(|l| l.ends_with(&format!("/{}/{web_cg}", t.name())))
            .count(),
        hierarchies,
        "{cgs}"
    );
    assert!(proc_cgroups(worker).contains(worker_cg));
    for cg in [web_cg, worker_cg] {
        let q = a.json(&["qos", "get", &format!("managed/{cg}")]);
        assert_eq!(q["class"], "Burstable", "{q:#}");
    }
    // The init job ran first: its exit record predates the server's launch.
    let run = dir.path().join("data/runtime/process/run");
    let mtime = |p: PathBuf| {
        std::fs::metadata(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .modified()
            .unwrap()
    };
    let job_done = mtime(run.join("shop-team.shop.web.init.prepare-docroot-v1/1/exit.json"));
    let web_launched = mtime(run.join(format!("{web_cg}/1/shim.json")));
    assert!(job_done <= web_launched, "{job_done:?} > {web_launched:?}");
    assert!(www.join("www/index.html").is_file());
    let body = std::process::Command::new("/usr/bin/busybox")
        .args([
            "wget",
            "-q",
            "-O",
            "-",
            &format!("http://127.0.0.1:{port}/index.html"),
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&body.stdout).contains("daros shop"));

    // Killing the server: restarted per policy (new pid, restart count, events).
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(web as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let d = a.wait_app("web restarted", "shop", |d| {
        instance(d, "web")
            .is_some_and(|i| i["restarts"].as_u64() == Some(1) && i["state"]["state"] == "ready")
            && phase(d) == "Running"
    });
    let web2 = main_pid(&t, web_cg);
    assert_ne!(web2, web);
    assert!(!alive(web));
    let reasons: Vec<&str> = d["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("signal 9")),
        "{reasons:?}"
    );

    // kill -9 of darosd, restart on the same data dir: re-adopted, same pids.
    a.kill9();
    assert!(alive(web2) && alive(worker), "workloads outlive the agent");
    a.spawn();
    a.wait_app("re-adopted and Running", "shop", |d| {
        phase(d) == "Running" && instance(d, "web").is_some_and(|i| i["state"]["state"] == "ready")
    });
    assert!(a.log().contains("re-adopted"), "{}", a.log());
    assert_eq!(main_pid(&t, web_cg), web2, "not restarted");
    assert_eq!(main_pid(&t, worker_cg), worker, "not restarted");

    // Logs: the worker prints the page it fetched; -f streams new lines.
    let text = a.ctl_ok(&["logs", "shop-team/shop/worker", "--tail", "3"]);
    assert!(
        text.contains("[shop-team/shop/worker/0/v1] <h1>daros shop</h1>"),
        "{text}"
    );
    let lines: Value = a.json(&["logs", "shop-team/shop/worker/0/v1", "--tail", "1"]);
    assert_eq!(lines.as_array().unwrap().len(), 1, "{lines}");
    assert_eq!(lines[0]["stream"], "stdout");
    let mut f = Command::new(env!("CARGO_BIN_EXE_darosctl"))
        .arg("--socket")
        .arg(&a.socket)
        .args(["logs", "-f", "--tail", "0", "shop-team/shop/worker/0/v1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = f.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(l);
        }
    });
    // The worker fetches every 5 s: a new line arrives while following.
    let streamed = rx.recv_timeout(Duration::from_secs(20));
    let _ = f.kill();
    let _ = f.wait();
    assert_eq!(streamed.as_deref(), Ok("<h1>daros shop</h1>"));
    let missing = a.ctl(&["logs", "shop-team/shop/nothing"]);
    assert_eq!(missing.status.code(), Some(3), "not found exits 3");

    // Delete: no process, no cgroup left in any hierarchy.
    a.ctl_ok(&["delete", "app", "shop"]);
    wait_for("everything gone", LONG, || {
        (cgroups_left(&t).is_empty() && !alive(web2) && !alive(worker)).then_some(())
    });
    let shims = Command::new("pgrep")
        .args(["-f", &format!("{}/data/runtime", dir.path().display())])
        .output()
        .unwrap();
    assert!(
        shims.stdout.is_empty(),
        "shims left: {}",
        String::from_utf8_lossy(&shims.stdout)
    );
}

#[test]
fn failing_init_job_keeps_dependents_from_starting_and_describe_says_why() {
    let t = TestRoot::new("e2e-shopfail");
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("shop.yaml");
    std::fs::write(
        &yaml,
        shop_yaml("shopfail", free_port(), &dir.path().join("shop"), true),
    )
    .unwrap();
    let a = Agent::start(dir.path(), t.name());
    a.ctl_ok(&["apply", "-f", yaml.to_str().unwrap()]);
    let d = a.wait_app("shopfail Failed", "shopfail", |d| phase(d) == "Failed");
    let why = d["events"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find_map(|e| {
            (e["to"]["phase"] == "Failed").then(|| e["reason"].as_str().unwrap().to_string())
        })
        .unwrap();
    assert!(
        why.contains("prepare-docroot") && why.contains("code 3"),
        "{why}"
    );
    // Neither web nor worker ever started: no instance, no cgroup of theirs.
    assert!(
        instance(&d, "web").is_none() && instance(&d, "worker").is_none(),
        "{d:#}"
    );
    assert!(
        cgroups_left(&t)
            .iter()
            .all(|p| !p.to_string_lossy().contains(".web-v")
                && !p.to_string_lossy().contains(".worker-v")),
        "{:?}",
        cgroups_left(&t)
    );
    a.ctl_ok(&["delete", "app", "shopfail"]);
    wait_for("nothing left", LONG, || {
        cgroups_left(&t).is_empty().then_some(())
    });
}

/// Issue 21 through darosd: the sample runs unprivileged and confined (checked in
/// `/proc/PID/status`), `describe` shows what is enforced, and under a policy
/// requiring non-root a root workload is refused naming the rule and the policy.
#[test]
fn the_shop_runs_unprivileged_and_the_baseline_refuses_root() {
    let t = TestRoot::new("e2e-secure");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let yaml = dir.path().join("shop.yaml");
    std::fs::write(
        &yaml,
        shop_yaml("shop", port, &dir.path().join("shop"), false),
    )
    .unwrap();
    let a = Agent::start(dir.path(), t.name());
    a.ctl_ok(&["apply", "-f", yaml.to_str().unwrap()]);
    a.wait_app("shop Running", "shop", |d| phase(d) == "Running");
    let web = main_pid(&t, "shop-team.shop.web-v1.0");
    let status = std::fs::read_to_string(format!("/proc/{web}/status")).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}:")))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    assert_eq!(
        field("Uid").split_whitespace().next(),
        Some("65534"),
        "{status}"
    );
    assert_eq!(field("CapEff"), "0000000000000000");
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2");
    let text = a.ctl_ok(&["describe", "app", "shop"]);
    assert!(text.contains("Security:"), "{text}");
    assert!(
        text.contains("no_new_privs, seccomp RuntimeDefault"),
        "{text}"
    );

    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: baseline}\n\
         spec: {scope: Global, rules: {security: {runAsNonRoot: true}}}\n",
    )
    .unwrap();
    a.ctl_ok(&["apply", "-f", policy.to_str().unwrap()]);
    let rooty = dir.path().join("rooty.yaml");
    std::fs::write(
        &rooty,
        shop_yaml("rooty", free_port(), &dir.path().join("rooty"), false)
            .replace("user: nobody", "user: root"),
    )
    .unwrap();
    let out = a.ctl(&["apply", "-f", rooty.to_str().unwrap()]);
    assert!(!out.status.success(), "refused: {out:?}");
    let text = a.ctl_ok(&["describe", "app", "shop-team/rooty"]);
    assert!(text.contains("Phase:       Rejected"), "{text}");
    assert!(
        text.contains(
            "security.runAsNonRoot: workload web: it runs as root (forbidden by policy baseline (global))"
        ),
        "{text}"
    );
    // The running shop (nobody) is not affected.
    assert_eq!(phase(&a.json(&["describe", "app", "shop"])), "Running");
}
