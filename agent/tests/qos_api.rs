//! QoS through a real darosd on a real socket: `darosctl qos set|get|unset`,
//! the `/v1/qos` routes with bad input (400 naming the field), admission
//! refusals (409 with the numbers), per-knob status in JSON, YAML and table,
//! and the QoS metrics checked by promtool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Daemon, TestRoot, darosctl, wait_for};
use daros_agent::api::error::ErrorBody;
use daros_agent::qos::{KnobStatus, QosOverview, UnsetReport, WorkloadQos};
use daros_coordinator::QosClass;
use hyper::{Method, StatusCode};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn put(d: &Daemon, id: &str, body: &str) -> (StatusCode, String) {
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or(serde_json::Value::String(body.into()));
    let (s, b) = rt()
        .block_on(d.client().request_json(
            Method::PUT,
            &format!("/v1/qos/workloads/{id}"),
            Some(&v),
        ))
        .unwrap();
    (s, text(&b))
}

fn error(status: StatusCode, body: &str, expect: StatusCode) -> String {
    assert_eq!(status, expect, "{body}");
    let e: ErrorBody = serde_json::from_str(body).unwrap();
    assert_eq!(e.status, expect.as_u16());
    e.error
}

#[test]
fn darosctl_sets_gets_and_unsets_a_class_and_bad_input_names_the_field() {
    let t = TestRoot::new("qos-api");
    t.workload("web");
    let _p = t.spawn("web", "sleep 600");
    let d = Daemon::start(
        t.name(),
        &["--metrics-listen", "127.0.0.1:0"],
        &[
            ("DAROS_QOS_SYSTEM_RESERVED_MEMORY", "256Mi"),
            ("DAROS_QOS_HOLD_TIME", "500ms"),
        ],
    );

    // The example of the issue, through darosctl.
    let out = darosctl(
        &d.socket,
        &[
            "qos",
            "set",
            "web",
            "--class",
            "GuaranteedPro",
            "--cpu-min",
            "500m",
            "--mem-min",
            "64Mi",
            "-o",
            "json",
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let w: WorkloadQos = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(w.workload, "managed/web");
    assert_eq!(w.class, QosClass::GuaranteedPro);
    assert_eq!(
        w.profile.cpu.request.unwrap().millis(),
        500,
        "request = limit = reservation"
    );
    assert!(w.knobs.len() >= 8, "{:#?}", w.knobs);
    assert_eq!(w.enforced + w.degraded, w.knobs.len());
    for k in &w.knobs {
        assert!(!k.requested.is_empty(), "{k:?}");
        match k.status {
            KnobStatus::Degraded => assert!(
                k.reason.as_deref().is_some_and(|r| !r.is_empty()),
                "degraded without reason: {k:?}"
            ),
            KnobStatus::Enforced => assert!(k.applied.is_some(), "enforced without a value: {k:?}"),
        }
    }
    let weight = w
        .knobs
        .iter()
        .find(|k| k.knob == "cpu.shares" || k.knob == "cpu.weight")
        .unwrap();
    assert_eq!(weight.status, KnobStatus::Enforced);

    // Table and YAML.
    let out = darosctl(&d.socket, &["qos", "get", "web"]);
    assert!(out.status.success());
    let table = text(&out.stdout);
    for h in [
        "KNOB",
        "REQUESTED",
        "APPLIED",
        "STATUS",
        "REASON",
        "managed/web",
        "GuaranteedPro",
        "reservation 500m",
    ] {
        assert!(table.contains(h), "{h} missing:\n{table}");
    }
    let out = darosctl(&d.socket, &["qos", "get", "-o", "yaml"]);
    assert!(out.status.success());
    let o: QosOverview = serde_yaml_ng::from_slice(&out.stdout).unwrap();
    assert_eq!(o.workloads.len(), 1);
    let mem = o.admission.iter().find(|a| a.resource == "memory").unwrap();
    assert_eq!(mem.reserved, "64Mi");
    assert_eq!(mem.system_reserved, "256Mi");
    let out = darosctl(&d.socket, &["qos", "get"]);
    assert!(
        text(&out.stdout).contains("ALLOCATABLE"),
        "{}",
        text(&out.stdout)
    );

    // Bad input: 400 naming the field.
    let out = darosctl(
        &d.socket,
        &[
            "qos",
            "set",
            "web",
            "--class",
            "GuaranteedPro",
            "--mem-min",
            "2Gi",
            "--mem-limit",
            "1Gi",
            "--cpu-min",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("profile.memory.reservation: reservation 2Gi exceeds")
            && err.contains("HTTP 400"),
        "{err}"
    );
    let (s, b) = put(&d, "managed/web", r#"{"class":"Gold"}"#);
    assert!(
        error(s, &b, StatusCode::BAD_REQUEST).starts_with("class: unknown variant `Gold`"),
        "{b}"
    );
    let (s, b) = put(
        &d,
        "managed/web",
        r#"{"class":"Burstable","profile":{"cpu":{"request":"1.2.3"}}}"#,
    );
    assert!(
        error(s, &b, StatusCode::BAD_REQUEST)
            .starts_with("profile.cpu.request: invalid cpu quantity \"1.2.3\""),
        "{b}"
    );
    let (s, b) = put(
        &d,
        "managed/web",
        r#"{"class":"GuaranteedPro","profile":{"cpu":{"request":"1"},"memory":{"request":"64Mi"}}}"#,
    );
    assert!(
        error(s, &b, StatusCode::BAD_REQUEST)
            .contains("profile: GuaranteedPro needs a MinimalReservation"),
        "{b}"
    );
    let (s, b) = put(&d, "managed/web", r#"{"class":"BestEffort","profil":{}}"#);
    assert!(
        error(s, &b, StatusCode::BAD_REQUEST).contains("unknown field `profil`"),
        "{b}"
    );
    let (s, b) = put(&d, "managed/web", "not json");
    error(s, &b, StatusCode::BAD_REQUEST);
    let (s, b) = put(&d, "web", r#"{"class":"BestEffort"}"#);
    assert!(
        error(s, &b, StatusCode::BAD_REQUEST).contains("managed/<name>"),
        "{b}"
    );
    let (s, b) = put(&d, "systemd/nope.service", r#"{"class":"BestEffort"}"#);
    assert!(
        error(s, &b, StatusCode::NOT_FOUND).contains("not found"),
        "{b}"
    );
    // What was accepted before is untouched by the refused requests.
    let out = darosctl(&d.socket, &["qos", "get", "web", "-o", "json"]);
    let again: WorkloadQos = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again.class, QosClass::GuaranteedPro);
    assert_eq!(again.reservation, w.reservation);

    // Admission: a floor beyond allocatable is refused with the numbers.
    let out = darosctl(
        &d.socket,
        &[
            "qos",
            "set",
            "huge",
            "--class",
            "GuaranteedPro",
            "--cpu-min",
            "1m",
            "--mem-min",
            "100Ti",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("memory reservation 100Ti refused: 64Mi of") && err.contains("HTTP 409"),
        "{err}"
    );
    assert!(
        !t.root.workloads().unwrap().contains(&"huge".to_string()),
        "refused: no cgroup left"
    );

    // Metrics.
    let n = rt().block_on(d.client().node()).unwrap();
    let addr = n.agent.metrics_listen.unwrap();
    let body = scrape(&addr);
    for m in [
        "daros_qos_workload_class{workload=\"managed/web\",class=\"GuaranteedPro\"} 1",
        "daros_qos_knob_status{workload=\"managed/web\",knob=\"",
        "daros_qos_floor{workload=\"managed/web\",resource=\"memory\"} 67108864",
        "daros_qos_reserved{resource=\"memory\"} 67108864",
        "daros_qos_protection_running 1",
        "daros_qos_protection_reaction_seconds_bucket{le=\"+Inf\"}",
        "daros_qos_protection_ticks_total",
    ] {
        assert!(
            body.contains(m),
            "{m} missing from /metrics:\n{}",
            body.lines()
                .filter(|l| l.contains("qos"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    promtool(&body);

    // Unset; then the workload is no longer under a class (exit 3 = not found).
    let out = darosctl(&d.socket, &["qos", "unset", "web", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: UnsetReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.errors.is_empty() && !r.restored.is_empty(), "{r:?}");
    assert_eq!(
        darosctl(&d.socket, &["qos", "get", "web"]).status.code(),
        Some(3)
    );
    let out = darosctl(&d.socket, &["qos", "events", "-o", "json"]);
    assert!(out.status.success());
}

#[test]
fn a_process_is_adopted_with_darosctl() {
    let t = TestRoot::new("qos-api-adopt");
    let d = Daemon::start(t.name(), &[], &[]);
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let out = darosctl(
        &d.socket,
        &[
            "qos",
            "set",
            "--pid",
            &pid,
            "--name",
            "batch",
            "--class",
            "BestEffort",
            "--cpu-limit",
            "250m",
            "-o",
            "json",
        ],
    );
    let ok = out.status.success();
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok, "{}", text(&out.stderr));
    let w: WorkloadQos = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(w.workload, "managed/batch");
    assert_eq!(w.pids, vec![pid.parse::<u32>().unwrap()]);
    // It is sampled as a managed workload like any other.
    wait_for("managed/batch sampled", Duration::from_secs(30), || {
        rt().block_on(d.client().workload("managed/batch"))
            .ok()
            .map(|_| ())
    });
}

fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r.split_once("\r\n\r\n").unwrap().1.to_string()
}

fn promtool(body: &str) {
    common::promtool_check_metrics(body);
}
