//! The local API and darosctl end to end: a real darosd process (the built
//! binary) on a real unix socket, sampling a real managed cgroup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::{Daemon, TestRoot, darosctl, wait_for};
use daros_agent::api::error::ErrorBody;
use daros_agent::model::{Capabilities, NodeSample, Workload, WorkloadList};
use hyper::{Method, StatusCode};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A darosd whose managed root holds workload `web` with a sleeping process.
fn setup(tag: &str) -> (TestRoot, common::Proc, Daemon) {
    let t = TestRoot::new(tag);
    t.workload("web");
    let p = t.spawn("web", "sleep 600");
    let d = Daemon::start(t.name(), &[], &[]);
    wait_for("managed/web sampled", Duration::from_secs(30), || {
        let out = darosctl(&d.socket, &["workloads", "-o", "json"]);
        let list: WorkloadList = serde_json::from_slice(&out.stdout).ok()?;
        list.workloads
            .iter()
            .any(|w| w.id == "managed/web")
            .then_some(())
    });
    (t, p, d)
}

fn error_body(status: StatusCode, body: &[u8], expect: StatusCode) -> ErrorBody {
    assert_eq!(status, expect, "{}", String::from_utf8_lossy(body));
    let e: ErrorBody = serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("JSON error body, got {:?}", String::from_utf8_lossy(body)));
    assert_eq!(e.status, expect.as_u16());
    assert!(!e.error.is_empty());
    e
}

#[test]
fn every_route_answers_and_errors_are_json() {
    let (_t, _p, d) = setup("api");
    let c = d.client();
    let rt = rt();

    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "socket mode");

    let h = rt.block_on(c.health()).unwrap();
    assert_eq!(h.status, "ok");
    let node: NodeSample = rt.block_on(c.node()).unwrap();
    assert!(node.cpu.cpus >= 1 && node.memory.total_bytes > 0);
    assert_eq!(node.agent.pid, d.child.id());
    assert!(node.agent.managed_root.contains("daros-test-api"));
    let list = rt.block_on(c.workloads(None)).unwrap();
    let web = list
        .workloads
        .iter()
        .find(|w| w.id == "managed/web")
        .unwrap();
    assert!(web.managed && web.sample.memory.is_some());
    let one: Workload = rt.block_on(c.workload("managed/web")).unwrap();
    assert_eq!(one.id, "managed/web");
    let caps: Capabilities = rt.block_on(c.capabilities()).unwrap();
    assert!(
        caps.cgroup
            .managed_root
            .as_ref()
            .unwrap()
            .path
            .contains("daros-test-api")
    );
    assert!(!caps.summary.is_empty());

    // Every documented path answers 200 (ids substituted with a real one).
    let doc = rt.block_on(c.openapi()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for expected in [
        "/healthz",
        "/v1/node",
        "/v1/workloads",
        "/v1/workloads/{id}",
        "/v1/capabilities",
        "/v1/openapi.json",
    ] {
        assert!(
            paths.contains_key(expected),
            "{expected} missing from the OpenAPI document"
        );
    }
    for (p, ops) in paths {
        // POST-only routes, per-workload QoS (needs a class set first: qos_api.rs),
        // logs (need a running instance: e2e_shop.rs), per-application routes
        // (need an application: control_single.rs) and per-object routes of the
        // coordinator (need the object: control_single.rs).
        if ops.get("get").is_none()
            || p.starts_with("/v1/qos/workloads/")
            || p.starts_with("/v1/logs/")
            || p.starts_with("/v1/apps/")
            || p.contains("{name}")
        {
            continue;
        }
        let url = p.replace("{id}", "managed/web");
        let (status, body) = rt.block_on(c.request(Method::GET, &url)).unwrap();
        assert_eq!(
            status,
            StatusCode::OK,
            "{url}: {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::from_slice::<serde_json::Value>(&body).unwrap();
    }

    // Nothing to measure again where iocost is not in use (this hybrid host; a
    // data directory on the VM's overlay).
    let (s, b) = rt
        .block_on(c.request(Method::POST, "/v1/iocost/calibrate"))
        .unwrap();
    let e = error_body(s, &b, StatusCode::SERVICE_UNAVAILABLE);
    assert!(e.error.starts_with("nothing to measure: "), "{}", e.error);

    // Errors.
    let (s, b) = rt
        .block_on(c.request(Method::GET, "/v1/workloads/managed/nope"))
        .unwrap();
    let e = error_body(s, &b, StatusCode::NOT_FOUND);
    assert!(e.error.contains("managed/nope"), "{}", e.error);
    let (s, b) = rt
        .block_on(c.request(Method::GET, "/v2/everything"))
        .unwrap();
    let e = error_body(s, &b, StatusCode::NOT_FOUND);
    assert!(e.error.contains("/v2/everything"), "{}", e.error);
    let (s, b) = rt.block_on(c.request(Method::DELETE, "/v1/node")).unwrap();
    error_body(s, &b, StatusCode::METHOD_NOT_ALLOWED);
    let (s, b) = rt
        .block_on(c.request(Method::GET, "/v1/workloads?kind=pets"))
        .unwrap();
    let e = error_body(s, &b, StatusCode::BAD_REQUEST);
    assert!(e.error.contains("kind"), "{}", e.error);
    let (s, b) = rt
        .block_on(c.request(Method::GET, "/v1/workloads?colour=red"))
        .unwrap();
    error_body(s, &b, StatusCode::BAD_REQUEST);
    let only_managed = rt
        .block_on(c.workloads(Some(daros_agent::model::WorkloadKind::Managed)))
        .unwrap();
    assert!(only_managed.workloads.iter().all(|w| w.managed));
}

#[test]
fn darosctl_commands_and_formats() {
    let (_t, _p, d) = setup("cli");
    let ok = |args: &[&str]| {
        let out = darosctl(&d.socket, args);
        assert!(
            out.status.success(),
            "darosctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };

    let node: NodeSample = serde_json::from_str(&ok(&["node", "-o", "json"])).unwrap();
    assert!(node.cpu.cpus >= 1);
    let node_yaml: NodeSample = serde_yaml_ng::from_str(&ok(&["node", "-o", "yaml"])).unwrap();
    assert_eq!(node_yaml.node, node.node);
    let table = ok(&["node"]);
    assert!(
        table.contains("kernel") && table.contains("memory") && table.contains(&node.node),
        "{table}"
    );

    let list: WorkloadList = serde_json::from_str(&ok(&["workloads", "-o", "json"])).unwrap();
    assert!(list.workloads.iter().any(|w| w.id == "managed/web"));
    let list_yaml: WorkloadList =
        serde_yaml_ng::from_str(&ok(&["workloads", "-o", "yaml"])).unwrap();
    assert!(list_yaml.workloads.iter().any(|w| w.id == "managed/web"));
    let table = ok(&["workloads", "--kind", "managed"]);
    assert!(
        table.starts_with("ID") && table.contains("managed/web"),
        "{table}"
    );
    let one: Workload =
        serde_json::from_str(&ok(&["workloads", "managed/web", "-o", "json"])).unwrap();
    assert_eq!(one.id, "managed/web");
    assert!(ok(&["workloads", "managed/web"]).contains("/web"));

    let missing = darosctl(&d.socket, &["workloads", "managed/nope"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));

    let caps: Capabilities = serde_json::from_str(&ok(&["caps", "-o", "json"])).unwrap();
    let table = ok(&["caps"]);
    assert!(
        table.contains(&format!(
            "cgroup mode {}",
            serde_json::to_value(caps.cgroup.mode)
                .unwrap()
                .as_str()
                .unwrap()
        )),
        "{table}"
    );
    assert!(table.contains("CONTROLLER"));
    serde_yaml_ng::from_str::<Capabilities>(&ok(&["caps", "-o", "yaml"])).unwrap();

    // top: two refreshes, then exit.
    let top = ok(&["top", "--iterations", "2", "--interval", "200ms"]);
    assert_eq!(top.matches("darosd on ").count(), 2, "{top}");
    assert!(top.contains("managed/web"));
    let top_json = ok(&["top", "-n", "2", "--interval", "200ms", "-o", "json"]);
    let lines: Vec<&str> = top_json.lines().collect();
    assert_eq!(lines.len(), 2);
    for l in lines {
        serde_json::from_str::<WorkloadList>(l).unwrap();
    }

    // Wrong socket: a clear message and exit status 4.
    let gone = darosctl(&d.dir.path().join("nope.sock"), &["node"]);
    assert_eq!(gone.status.code(), Some(4));
    let msg = String::from_utf8_lossy(&gone.stderr);
    assert!(
        msg.contains("cannot connect") && msg.contains("nope.sock"),
        "{msg}"
    );
}

#[test]
fn completions_and_man_pages_come_from_the_cli_definition() {
    let sock = std::path::Path::new("/nonexistent.sock");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = darosctl(sock, &["completions", shell]);
        assert!(out.status.success());
        let s = String::from_utf8(out.stdout).unwrap();
        for sub in ["workloads", "top", "caps"] {
            assert!(s.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let man = darosctl(sock, &["man"]);
    assert!(man.status.success());
    let page = String::from_utf8(man.stdout).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH darosctl"),
        "{}",
        &page[..200.min(page.len())]
    );
    assert!(
        page.contains("top") && page.contains("\\-\\-socket"),
        "man page lacks options"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = darosctl(sock, &["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success());
    for f in [
        "man1/darosctl.1",
        "man1/darosctl-top.1",
        "man1/darosctl-workloads.1",
        "man8/darosd.8",
    ] {
        let p = dir.path().join(f);
        assert!(
            std::fs::metadata(&p)
                .map(|m| m.len() > 100)
                .unwrap_or(false),
            "{f} not written"
        );
    }
    let daemon_page = std::fs::read_to_string(dir.path().join("man8/darosd.8")).unwrap();
    assert!(daemon_page.contains("managed\\-root"));
}

#[test]
fn metrics_pass_promtool() {
    let t = TestRoot::new("metrics");
    t.workload("web");
    let _p = t.spawn("web", "sleep 600");
    let d = Daemon::start(t.name(), &["--metrics-listen", "127.0.0.1:0"], &[]);
    let rt = rt();
    let addr = wait_for(
        "metrics address and workload",
        Duration::from_secs(30),
        || {
            let n = rt.block_on(d.client().node()).ok()?;
            (n.workloads >= 1).then_some(n.agent.metrics_listen?)
        },
    );
    let body = wait_for(
        "a scrape with a workload cpu rate",
        Duration::from_secs(30),
        || {
            let b = scrape(&addr);
            b.contains("daros_workload_cpu_usage_cores{workload=\"managed/web\"")
                .then_some(b)
        },
    );
    for m in [
        "daros_node_cpu_seconds_total{mode=\"user\"}",
        "daros_workload_cpu_usage_seconds_total{workload=\"managed/web\",kind=\"managed\"}",
        "daros_workload_memory_bytes{workload=\"managed/web\"",
        "daros_agent_samples_total",
        "daros_gpu_available",
    ] {
        assert!(body.contains(m), "{m} missing from /metrics");
    }
    // Prometheus servers negotiate OpenMetrics; it ends with # EOF.
    let om = scrape_with(
        &addr,
        "Accept: application/openmetrics-text; version=1.0.0\r\n",
    );
    assert!(om.trim_end().ends_with("# EOF"), "OpenMetrics body");
    common::promtool_check_metrics(&body);
}

fn scrape(addr: &str) -> String {
    scrape_with(addr, "")
}

fn scrape_with(addr: &str, extra_header: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: x\r\n{extra_header}\r\n").as_bytes())
        .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

#[test]
fn systemd_notify_watchdog_and_clean_shutdown() {
    let t = TestRoot::new("notify");
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut d = Daemon::start(
        t.name(),
        &[],
        &[
            ("NOTIFY_SOCKET", notify_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
        ],
    );
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(seen.contains("READY=1") && seen.matches("WATCHDOG=1").count() >= 2) {
        assert!(Instant::now() < deadline, "notifications so far: {seen:?}");
        if let Ok(n) = notify.recv(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            seen.push('\n');
        }
    }
    let status = d.terminate();
    assert!(
        status.success(),
        "exit status {status:?}:\n{}",
        d.log_text()
    );
    while let Ok(n) = notify.recv(&mut buf) {
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("STOPPING=1"), "{seen:?}");
    assert!(!d.socket.exists(), "socket removed on shutdown");
    assert!(d.dir.path().join("data").is_dir(), "data dir created");
}

/// One agent per territory (issue 23): a second darosd on the same socket,
/// the same managed root or the same pin directory (each alone) exits before
/// touching anything, naming the first by pid; the first goes on serving.
#[test]
fn a_second_daemon_on_any_part_of_the_territory_is_refused() {
    let t = TestRoot::new("dup");
    let d = Daemon::start(t.name(), &[], &[("DAROS_NET_ENABLED", "true")]);
    let (pins_key, pins_dir) = d.pins.env();
    let other = tempfile::tempdir().unwrap();
    let second = |socket: &std::path::Path, data: &std::path::Path, root: &str, pins: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_darosd"))
            .env(pins_key, pins)
            .env("DAROS_NET_ENABLED", "true")
            .arg("--socket")
            .arg(socket)
            .arg("--data-dir")
            .arg(data)
            .arg("--managed-root")
            .arg(root)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let holder = format!("is held by another darosd (pid {},", d.child.id());
    let own_socket = other.path().join("s.sock");
    let own_data = other.path().join("data");
    let own_pins = format!("{pins_dir}-second");
    for (socket, data, root, pins, key) in [
        (
            d.socket.as_path(),
            d.dir.path().join("data"),
            t.name(),
            pins_dir.as_str(),
            "cgroup.managed_root",
        ),
        (
            own_socket.as_path(),
            own_data.clone(),
            t.name(),
            own_pins.as_str(),
            "cgroup.managed_root",
        ),
        (
            own_socket.as_path(),
            own_data.clone(),
            "daros-test-dup-other",
            pins_dir.as_str(),
            "net.pin_dir",
        ),
        (
            d.socket.as_path(),
            own_data.clone(),
            "daros-test-dup-other",
            own_pins.as_str(),
            "api.socket",
        ),
    ] {
        let msg = second(socket, &data, root, pins);
        assert!(msg.contains(&format!("{key} ")), "{key}: {msg}");
        assert!(msg.contains(&holder), "{key}: {msg}");
    }
    // Nothing of the refused agents' own parts was created.
    assert!(!own_data.exists() && !own_socket.exists());
    assert!(!std::path::Path::new(&own_pins).exists());
    assert!(!std::path::Path::new("/sys/fs/cgroup/unified/daros-test-dup-other").exists());
    // The first one still serves.
    assert!(darosctl(&d.socket, &["node"]).status.success());
}

/// Kilobytes the kernel counts as locked in memory for `pid` (`VmLck`).
fn locked_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The agent keeps its own pages in memory (`agent.lock_memory`, on by
/// default): the kernel counts them locked, and `caps` says so; turned off,
/// nothing is locked and `caps` says why.
#[test]
fn the_agents_own_pages_are_locked_unless_turned_off() {
    let t = TestRoot::new("memlock");
    let on = Daemon::start(t.name(), &[], &[]);
    let kib = locked_kib(on.child.id());
    let caps: Capabilities = rt().block_on(on.client().capabilities()).unwrap();
    assert!(caps.memory_lock.available, "{:?}", caps.memory_lock);
    // The pages it used until now: its heap, stacks and the code it ran.
    assert!(kib > 1024, "VmLck {kib} kB");
    assert!(
        caps.summary
            .iter()
            .any(|l| l.starts_with("memory lock: mlockall")),
        "{:?}",
        caps.summary
    );
    drop(on);
    let off = Daemon::start(t.name(), &[], &[("DAROS_AGENT_LOCK_MEMORY", "false")]);
    assert_eq!(locked_kib(off.child.id()), 0);
    let caps: Capabilities = rt().block_on(off.client().capabilities()).unwrap();
    assert!(!caps.memory_lock.available);
    assert!(
        caps.memory_lock
            .detail
            .contains("agent.lock_memory = false")
    );
}
