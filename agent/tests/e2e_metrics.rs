//! Control-plane metrics through a real darosd (issue 16): applying,
//! refusing and breaking applications moves `/metrics` the way a user would
//! expect — phase gauges, pending by reason for a quota refusal, a failure
//! and a restart counter after a kill — and the page passes
//! `promtool check metrics` when promtool is installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{
    RestartableDarosd, TestRoot, free_port, main_pid, metric_value as value, phase, shop_yaml,
    wait_for,
};

fn scrape(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    r.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// A CloudEvents collector on a real socket: answers 200 to every POST and
/// keeps (content type, body) of each.
type Posted = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

fn collector() -> (String, Posted) {
    use std::io::{BufRead, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/daros", l.local_addr().unwrap());
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut r = std::io::BufReader::new(s);
            loop {
                let (mut len, mut ctype) = (0usize, String::new());
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                loop {
                    line.clear();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let (k, v) = line.split_once(':').unwrap_or(("", ""));
                    match k.to_ascii_lowercase().as_str() {
                        "content-length" => len = v.trim().parse().unwrap_or(0),
                        "content-type" => ctype = v.trim().to_string(),
                        _ => {}
                    }
                }
                let mut body = vec![0; len];
                if r.read_exact(&mut body).is_err() {
                    break;
                }
                g.lock()
                    .unwrap()
                    .push((ctype, String::from_utf8_lossy(&body).into_owned()));
                let _ = r
                    .get_mut()
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
            }
        }
    });
    (url, got)
}

#[test]
fn control_plane_metrics_follow_the_applications() {
    let t = TestRoot::new("e2e-metrics");
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let events_file = dir.path().join("export/events.jsonl");
    let (url, posted) = collector();
    let mut a = RestartableDarosd::new(
        dir.path(),
        t.name(),
        "e2e-metrics",
        &[],
        &[
            ("DAROS_RUNTIME_STOP_GRACE", "2s"),
            ("DAROS_METRICS_LISTEN", addr.as_str()),
            ("DAROS_METRICS_EVENTS_FILE", events_file.to_str().unwrap()),
            ("DAROS_METRICS_EVENTS_URL", url.as_str()),
        ],
    );
    a.spawn_serving();
    let yaml = dir.path().join("shop.yaml");
    std::fs::write(
        &yaml,
        shop_yaml("shop", free_port(), &dir.path().join("shop"), false),
    )
    .unwrap();
    a.ctl_ok(&["apply", "-f", yaml.to_str().unwrap()]);
    a.wait_app("shop Running", "shop", |d| phase(d) == "Running");
    let running = "daros_applications{tenant=\"shop-team\",phase=\"Running\"}";
    let body = wait_for("Running in /metrics", Duration::from_secs(20), || {
        let b = scrape(&addr)?;
        (value(&b, running) == Some(1.0)).then_some(b)
    });
    assert_eq!(value(&body, "daros_raft_is_leader"), Some(1.0), "{body}");
    assert_eq!(
        value(&body, "daros_mesh_members{status=\"alive\"}"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value(
            &body,
            "daros_pool_allocated{pool=\"default\",resource=\"cpu\"}"
        ),
        Some(0.35),
        "web 250m + worker 100m: {body}"
    );
    assert!(
        value(
            &body,
            "daros_pool_capacity{pool=\"default\",resource=\"cpu\"}"
        )
        .is_some_and(|c| c >= 0.35)
    );
    assert!(value(&body, "daros_raft_term").is_some_and(|t| t >= 1.0));
    assert_eq!(
        value(&body, "daros_app_scheduled_to_running_seconds_count"),
        Some(1.0)
    );
    // Local timings: the Apply that admitted and placed the shop, the writes.
    assert!(
        value(
            &body,
            "daros_coordinator_apply_seconds_count{command=\"Apply\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{body}"
    );
    assert!(value(&body, "daros_raft_proposal_seconds_count").is_some_and(|n| n >= 1.0));
    // The shop's init job ran once and succeeded.
    assert_eq!(
        value(&body, "daros_init_job_runs_total{outcome=\"succeeded\"}"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(value(&body, "daros_init_job_run_seconds_count"), Some(1.0));
    assert_eq!(
        value(&body, "daros_init_job_queue_seconds_count"),
        Some(1.0)
    );
    // Desired -> observed: the shop converged once, from its creation.
    assert_eq!(
        value(
            &body,
            "daros_app_convergence_seconds_count{cause=\"create\"}"
        ),
        Some(1.0),
        "{body}"
    );
    // Its SLA: 99.5 % declared, all of the time Running so far.
    let sla = "{tenant=\"shop-team\",application=\"shop\"}";
    assert_eq!(
        value(&body, &format!("daros_app_availability_target{sla}")),
        Some(0.995)
    );
    assert_eq!(
        value(&body, &format!("daros_app_availability_ratio{sla}")),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "daros_sla_attainment_ratio{tenant=\"shop-team\"}"),
        Some(1.0)
    );
    // The process adapter answers its probes and started web and worker.
    let body = wait_for("the adapter probed", Duration::from_secs(20), || {
        let b = scrape(&addr)?;
        value(&b, "daros_adapter_up{adapter=\"process\"}").map(|_| b)
    });
    assert_eq!(
        value(&body, "daros_adapter_up{adapter=\"process\"}"),
        Some(1.0)
    );
    assert!(
        value(
            &body,
            "daros_adapter_operations_total{adapter=\"process\",operation=\"start\",outcome=\"ok\"}"
        )
        .is_some_and(|n| n >= 2.0),
        "{body}"
    );
    exported_events(&addr, &events_file, &posted);
    assert!(
        value(
            &body,
            "daros_instances{node=\"e2e-metrics\",pool=\"default\"}"
        )
        .is_some()
            || body.contains("daros_instances{node="),
        "{body}"
    );

    // Over quota (shop-team may hold 4 cpu): refused, pending by its rule.
    let big = dir.path().join("big.yaml");
    std::fs::write(
        &big,
        shop_yaml("big", free_port(), &dir.path().join("big"), false).replacen(
            "cpu: {request: 250m, limit: \"1\"}",
            "cpu: {request: \"5\"}",
            1,
        ),
    )
    .unwrap();
    let out = a.ctl(&["apply", "-f", big.to_str().unwrap()]);
    assert!(!out.status.success());
    let pending = "daros_applications_pending{tenant=\"shop-team\",reason=\"quota.cpu\"}";
    let body = wait_for("quota refusal in /metrics", Duration::from_secs(20), || {
        let b = scrape(&addr)?;
        (value(&b, pending) == Some(1.0)).then_some(b)
    });
    assert_eq!(
        value(
            &body,
            "daros_admission_rejections_total{rule=\"quota.cpu\"}"
        ),
        Some(1.0),
        "{body}"
    );

    // Kill the web server: a runtime failure and a restart are counted.
    let web = main_pid(&t, "shop-team.shop.web-v1.0");
    std::process::Command::new("kill")
        .args(["-9", &web.to_string()])
        .status()
        .unwrap();
    let body: String = wait_for("the kill in /metrics", Duration::from_secs(30), || {
        let b = scrape(&addr)?;
        let failures = value(&b, "daros_instance_failures_total{category=\"runtime\"}")?;
        let restarts = value(&b, "daros_instance_restarts_total")?;
        (failures >= 1.0 && restarts >= 1.0).then_some(b)
    });
    // The time it was down counts against its availability once it runs
    // again.
    a.wait_app("shop Running again", "shop", |d| phase(d) == "Running");
    wait_for("availability below 1", Duration::from_secs(20), || {
        let b = scrape(&addr)?;
        let r = value(&b, &format!("daros_app_availability_ratio{sla}"))?;
        (r < 1.0 && r > 0.5).then_some(())
    });

    // Scale the worker to 0 (parked; the sample allows 1 replica at most):
    // one instance fewer placed.
    let placed = |b: &str| -> f64 {
        b.lines()
            .filter(|l| l.starts_with("daros_instances{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let before = placed(&body);
    a.ctl_ok(&["operate", "shop", "scale", "worker", "0"]);
    wait_for("the scale in /metrics", Duration::from_secs(20), || {
        let b = scrape(&addr)?;
        (placed(&b) == before - 1.0).then_some(())
    });
    // ... and converged once the worker's process is gone.
    wait_for("the scale converged", Duration::from_secs(20), || {
        let b = scrape(&addr)?;
        (value(&b, "daros_app_convergence_seconds_count{cause=\"scale\"}") == Some(1.0))
            .then_some(())
    });

    events_feed(&a);

    // Deleted: the shop leaves the phase gauges, the refused one stays.
    a.ctl_ok(&["delete", "app", "shop"]);
    let body = wait_for("the delete in /metrics", Duration::from_secs(20), || {
        let b = scrape(&addr)?;
        let shop_gone = !b.lines().any(|l| {
            l.starts_with("daros_applications{tenant=\"shop-team\"") && !l.contains("Rejected")
        });
        shop_gone.then_some(b)
    });
    assert_eq!(
        value(
            &body,
            "daros_applications{tenant=\"shop-team\",phase=\"Rejected\"}"
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(placed(&body), 0.0, "nothing placed any more: {body}");

    common::promtool_check_metrics(&body);
}

/// The sinks shipped what the feed holds: the file holds one CloudEvent per
/// line, the collector got CloudEvents batches, both with the shop's Running
/// transition, and the counters say so.
fn exported_events(
    addr: &str,
    file: &std::path::Path,
    posted: &std::sync::Mutex<Vec<(String, String)>>,
) {
    let is_running = |e: &serde_json::Value| {
        e["type"] == "io.daros.lifecycle.v1"
            && e["subject"] == "shop-team/shop"
            && e["data"]["to"]["phase"] == "Running"
    };
    let lines: Vec<serde_json::Value> = wait_for("the file sink", Duration::from_secs(20), || {
        let text = std::fs::read_to_string(file).ok()?;
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines.iter().any(is_running).then_some(lines)
    });
    assert!(lines.iter().all(|e| e["specversion"] == "1.0"));
    let ids: std::collections::BTreeSet<&str> =
        lines.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids.len(), lines.len(), "no event twice in one run");
    let batches = wait_for("the http sink", Duration::from_secs(20), || {
        let p = posted.lock().unwrap().clone();
        let items: Vec<serde_json::Value> = p
            .iter()
            .flat_map(|(_, b)| serde_json::from_str::<Vec<serde_json::Value>>(b).unwrap())
            .collect();
        items.iter().any(is_running).then_some(p)
    });
    assert!(
        batches
            .iter()
            .all(|(t, _)| t == "application/cloudevents-batch+json"),
        "{batches:?}"
    );
    // The counters move once the sink's write or POST returned, a moment
    // after the collector saw the batch: wait for them, not one scrape.
    for sink in ["file", "http"] {
        wait_for("the exported counter", Duration::from_secs(20), || {
            let body = scrape(addr)?;
            value(
                &body,
                &format!("daros_events_exported_total{{sink=\"{sink}\"}}"),
            )
            .is_some_and(|n| n >= 1.0)
            .then_some(())
        });
    }
}

/// The events feed: what happened so far as CloudEvents, then a follower
/// sees the stop that comes next.
fn events_feed(a: &RestartableDarosd) {
    use std::io::{BufRead, Write};
    let (status, body) = common::raw_http::exchange(
        &a.socket,
        b"GET /v1/events HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200, "{body}");
    let items: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let running = items
        .iter()
        .find(|e| e["type"] == "io.daros.lifecycle.v1" && e["data"]["to"]["phase"] == "Running")
        .unwrap_or_else(|| panic!("no Running transition: {body}"));
    assert_eq!(running["specversion"], "1.0");
    assert_eq!(running["subject"], "shop-team/shop");
    assert!(running["time"].as_str().unwrap().ends_with('Z'));
    assert!(
        items
            .iter()
            .any(|e| e["type"] == "io.daros.decision.v1" && e["data"]["kind"] == "Arbitration"),
        "{body}"
    );
    let last = items
        .iter()
        .filter(|e| e["type"] == "io.daros.lifecycle.v1")
        .filter_map(|e| e["sequence"].as_u64())
        .max()
        .unwrap();
    let mut s = std::os::unix::net::UnixStream::connect(&a.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(
        format!(
            "GET /v1/events?afterEvent={last}&afterDecision=1000000&follow=true HTTP/1.0\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    a.ctl_ok(&["operate", "shop", "stop"]);
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "the stream ended");
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
            continue; // the status line and headers
        };
        assert!(e["sequence"].as_u64().unwrap() > last, "{e}");
        if e["data"]["to"]["phase"] == "Terminated" {
            assert_eq!(e["subject"], "shop-team/shop");
            break;
        }
    }
}

/// The shipped alert rules parse and fire on the series darosd exports
/// (`packaging/prometheus/alerts_test.yaml`), when promtool is installed.
#[test]
fn alert_rules_pass_promtool() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/prometheus");
    for args in [
        ["check", "rules", "alerts.yaml"],
        ["test", "rules", "alerts_test.yaml"],
    ] {
        match std::process::Command::new("promtool")
            .args(args)
            .current_dir(dir)
            .output()
        {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("SKIPPED: promtool not installed; the alert rules were not checked");
                return;
            }
            Err(e) => panic!("promtool: {e}"),
            Ok(out) => assert!(
                out.status.success(),
                "promtool {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}

/// Every `daros_*` family name written in the agent's sources.
fn exported_families() -> std::collections::BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut std::collections::BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for part in text.split("\"daros_").skip(1) {
                    let name: String = part
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if part[name.len()..].starts_with('"') {
                        out.insert(format!("daros_{name}"));
                    }
                }
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        &mut out,
    );
    out
}

/// The shipped Grafana dashboard (`packaging/grafana/daros.json`): node QoS,
/// application and control-plane rows; every panel queries families darosd
/// exports, and every query is valid PromQL (checked by promtool as recording
/// rules, when installed).
#[test]
fn the_dashboard_queries_what_darosd_exports() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../packaging/grafana/daros.json"
    );
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(d["uid"], "daros");
    let panels = d["panels"].as_array().unwrap();
    let rows: Vec<&str> = panels
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    assert_eq!(rows, ["Node QoS", "Applications", "Control plane"]);
    let families = exported_families();
    let mut exprs = Vec::new();
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap();
        assert!(p["gridPos"]["w"].as_u64().is_some(), "{title}: gridPos");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let e = t["expr"].as_str().unwrap();
            for part in e.split("daros_").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                let base = ["_total", "_bucket", "_sum", "_count"]
                    .iter()
                    .fold(name.clone(), |n, s| {
                        n.strip_suffix(s).map_or(n.clone(), str::to_string)
                    });
                assert!(
                    families.contains(&format!("daros_{base}")),
                    "{title}: daros_{name} is not exported"
                );
            }
            exprs.push(e.replace("$instance", ".*"));
        }
    }
    let rules =
        std::env::temp_dir().join(format!("daros-test-dashboard-{}.yaml", std::process::id()));
    let mut y = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        y.push_str(&format!(
            "      - record: daros:dashboard:{i}\n        expr: {e:?}\n"
        ));
    }
    std::fs::write(&rules, y).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output();
    let _ = std::fs::remove_file(&rules);
    match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIPPED: promtool not installed; the queries were not parsed");
        }
        Err(e) => panic!("promtool: {e}"),
        Ok(out) => assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// docs/observability.md lists every family darosd can export (under its
/// name or with `_total`), and names none it cannot.
#[test]
fn every_exported_family_is_documented() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/observability.md"
    ))
    .unwrap();
    let exported = exported_families();
    let missing: Vec<&String> = exported
        .iter()
        .filter(|f| !doc.contains(&format!("`{f}`")) && !doc.contains(&format!("`{f}_total`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/observability.md: {missing:?}"
    );
    let mut unknown = Vec::new();
    for row in doc.lines().filter(|l| l.starts_with("| `daros_")) {
        let name = row[3..].split('`').next().unwrap_or_default();
        let base = name.strip_suffix("_total").unwrap_or(name);
        if !exported.contains(base) {
            unknown.push(name.to_string());
        }
    }
    assert!(
        unknown.is_empty(),
        "documented but not exported: {unknown:?}"
    );
}
