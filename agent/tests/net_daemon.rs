//! The eBPF datapath through a real darosd: processes in managed workloads
//! send real loopback TCP traffic and the counters in `/v1/workloads`,
//! `darosctl top -o json` and `/metrics` (promtool-clean) equal what was sent;
//! a class's network limit caps a workload within ±10% and is lifted when the
//! class goes; run-queue and on-CPU figures come with every workload; and a
//! darosd without the capabilities to load eBPF keeps working and says why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod net_common;

use std::time::Duration;

use common::{TestRoot, wait_for};
use daros_agent::model::caps::Capabilities;
use daros_agent::model::{NodeSample, WorkloadList};
use hyper::{Method, StatusCode};
use net_common::{Agent, TestPins, darosctl, rel, testable_cap, traffic, uncapped};
use serde_json::json;

const MB: u64 = 1_000_000;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn unix_ms() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(d.as_millis()).unwrap()
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

/// `promtool check metrics`; CI installs promtool (Debian package `prometheus`).
fn promtool(body: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package `prometheus`) must be installed to lint /metrics");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The value of the first sample line starting with `prefix`.
fn metric(body: &str, prefix: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {prefix} in:\n{body}"))
}

#[test]
fn counters_equal_the_bytes_sent_in_the_api_top_and_metrics() {
    let pins = TestPins::new("net-acct");
    let t = TestRoot::new("net-acct");
    t.workload("snd");
    t.workload("sink");
    let dir = tempfile::tempdir().unwrap();
    let a = Agent::start(
        dir.path(),
        t.name(),
        &[pins.env()],
        &["--metrics-listen", "127.0.0.1:0"],
        &[],
    );
    let st = a.wait_counted(&["managed/snd", "managed/sink"]);
    assert!(st.network.available && st.runqueue.available, "{st:?}");
    assert!(
        st.network.detail.starts_with("fresh"),
        "{}",
        st.network.detail
    );

    // The sampler has read the workloads once (rates need a previous reading).
    wait_for(
        "the sampler to see the datapath",
        Duration::from_secs(10),
        || {
            let w = a.workload("managed/snd");
            w.sample.network?.egress.bytes_per_second.map(|_| ())
        },
    );
    let payload = 50 * MB;
    let (sent, got) = traffic(&t, "snd", "sink", None, &["--bytes", &payload.to_string()]);
    assert_eq!((sent.bytes, got.bytes), (payload, payload));

    // Both ends have exited: a sample begun after now holds their final counters, the
    // sender's and the sink's from the same tick (one taken while the last skb or ACK was
    // still in flight, or the sender's last slice not yet charged, would not add up).
    let exited_ms = unix_ms();
    let list = wait_for(
        "a sample taken after both ends exited",
        Duration::from_secs(10),
        || {
            let l: WorkloadList = a.get("/v1/workloads");
            (l.sampled_at_unix_ms > exited_ms).then_some(l)
        },
    );
    let of = |id: &str| {
        list.workloads
            .iter()
            .find(|w| w.id == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} in {list:?}"))
    };
    let (snd, sink) = (of("managed/snd"), of("managed/sink"));
    let (sn, kn) = (
        snd.sample.network.clone().unwrap(),
        sink.sample.network.clone().unwrap(),
    );
    println!(
        "payload {payload} B, {} B retransmitted; API: sender egress {} B in {} skbs, sink ingress {} B in {} packets, sink egress (ACKs) {} B",
        sent.retrans_bytes,
        sn.egress.bytes_total,
        sn.egress.packets_total,
        kn.ingress.bytes_total,
        kn.ingress.packets_total,
        kn.egress.bytes_total
    );
    // L3 bytes = payload + what TCP sent again + IP/TCP headers of 64 KiB GSO skbs (~0.1%)
    let on_wire = (payload + sent.retrans_bytes) as f64;
    let e = sn.egress.bytes_total as f64;
    assert!(
        e >= on_wire && rel(e, on_wire) < 0.01,
        "sender egress {e} vs payload {payload} + {} retransmitted",
        sent.retrans_bytes
    );
    let i = kn.ingress.bytes_total as f64;
    assert!(
        i >= on_wire && rel(i, on_wire) < 0.01,
        "sink ingress {i} vs payload {payload} + {} retransmitted",
        sent.retrans_bytes
    );
    assert!(
        rel(sn.ingress.bytes_total as f64, kn.egress.bytes_total as f64).abs() < 0.01,
        "ACKs: sink sent {} B, sender received {} B",
        kn.egress.bytes_total,
        sn.ingress.bytes_total
    );
    assert_eq!(
        sn.egress.dropped_packets_total + kn.ingress.dropped_packets_total,
        0
    );
    assert!(sn.egress.bytes_per_second.is_some());
    assert_eq!(sn.egress.cap_bytes_per_second, None, "no class, no cap");
    assert!(!snd.sample.unavailable.contains_key("network"));

    // Run-queue and on-CPU time of the sender's tasks.
    let rq = snd.sample.runqueue.clone().expect("run-queue statistics");
    assert!(rq.waits_total > 0 && rq.oncpu_seconds_total > 0.0, "{rq:?}");
    assert_eq!(rq.wait_histogram.iter().sum::<u64>(), rq.waits_total);
    let cgroup_cpu = snd.sample.cpu.as_ref().unwrap().usage_seconds_total;
    println!(
        "sender: on-CPU {:.3} s by eBPF, {cgroup_cpu:.3} s by the cgroup; {} waits, max {:.3} ms",
        rq.oncpu_seconds_total,
        rq.waits_total,
        rq.wait_max_seconds * 1e3
    );
    // A ~40 ms sample: a few scheduler ticks of start-up and exit slices are within it; the
    // 5 % agreement on a long sample is ebpf_sched's on_cpu_time_matches_cpu_stat.
    assert!(
        cgroup_cpu > 0.0 && (rq.oncpu_seconds_total - cgroup_cpu).abs() < 0.05 * cgroup_cpu + 0.010,
        "on-CPU {} s vs cgroup {cgroup_cpu} s",
        rq.oncpu_seconds_total
    );

    // darosctl top: JSON and the table's columns.
    let out = darosctl(
        &a.socket,
        &["top", "-o", "json", "-n", "1", "--sort", "net"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: WorkloadList =
        serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    let w = list
        .workloads
        .iter()
        .find(|w| w.id == "managed/snd")
        .unwrap();
    assert!(w.sample.network.as_ref().unwrap().egress.bytes_total >= payload);
    assert!(w.sample.runqueue.as_ref().unwrap().waits_total >= rq.waits_total);
    let out = darosctl(&a.socket, &["top", "-n", "1"]);
    let table = text(&out.stdout);
    for h in [
        "NET-TX",
        "NET-RX",
        "TX CAP",
        "RQ-P99",
        "RQ-WAIT",
        "managed/snd",
    ] {
        assert!(table.contains(h), "{h} in:\n{table}");
    }

    // Prometheus metrics.
    let node: NodeSample = a.get("/v1/node");
    let body = scrape(&node.agent.metrics_listen.unwrap());
    let bytes = metric(
        &body,
        "daros_workload_network_bytes_total{workload=\"managed/snd\",kind=\"managed\",direction=\"egress\"}",
    );
    assert!(bytes >= payload as f64, "{bytes}");
    let count = metric(
        &body,
        "daros_workload_runqueue_wait_seconds_count{workload=\"managed/snd\",kind=\"managed\"}",
    );
    assert!(count >= rq.waits_total as f64);
    metric(
        &body,
        "daros_workload_runqueue_wait_seconds_bucket{le=\"+Inf\",workload=\"managed/snd\",kind=\"managed\"}",
    );
    metric(
        &body,
        "daros_workload_oncpu_seconds_total{workload=\"managed/snd\"",
    );
    assert_eq!(
        metric(&body, "daros_net_datapath_available{part=\"network\"}"),
        1.0
    );
    assert_eq!(metric(&body, "daros_net_attached_workloads"), 2.0);
    promtool(&body);

    let caps: Capabilities = a.get("/v1/capabilities");
    assert!(caps.datapath.network.available && caps.datapath.runqueue.available);
    assert!(
        caps.summary
            .iter()
            .any(|l| l.contains("eBPF network datapath")),
        "{:?}",
        caps.summary
    );
}

#[test]
fn a_class_network_limit_caps_the_workload_within_10_percent_until_unset() {
    let pins = TestPins::new("net-cap");
    let t = TestRoot::new("net-cap");
    t.workload("snd");
    t.workload("sink");
    let dir = tempfile::tempdir().unwrap();
    let a = Agent::start(dir.path(), t.name(), &[pins.env()], &[], &[]);
    let free = uncapped(&t, "snd", "sink");
    let cap = testable_cap(10 * MB, free);
    a.set_class(
        "managed/snd",
        json!({"class": "Burstable", "profile": {"cpu": {"request": "100m"}, "network": {"egress": {"limit": cap.to_string()}}}}),
    );
    wait_for(
        "the class limit in /v1/net",
        Duration::from_secs(20),
        || {
            a.net()
                .workloads
                .iter()
                .any(|w| {
                    w.workload == "managed/snd"
                        && w.attached
                        && w.egress_limit_bytes_per_second == Some(cap)
                        && w.class.as_deref() == Some("Burstable")
                })
                .then_some(())
        },
    );
    wait_for(
        "the cap in the workload sample",
        Duration::from_secs(10),
        || {
            let w = a.workload("managed/snd");
            let n = w.sample.network?;
            (n.egress.cap_bytes_per_second == Some(cap)
                && n.egress.limit_bytes_per_second == Some(cap))
            .then_some(())
        },
    );

    let (sent, got) = traffic(&t, "snd", "sink", None, &["--secs", "5"]);
    let rate = got.rate(got.first_byte_ns() + 1_000_000_000, sent.end_ns);
    println!(
        "capped at {cap} B/s through darosd: received {:.2} MB/s",
        rate / 1e6
    );
    assert!(
        rel(rate, cap as f64).abs() <= 0.10,
        "{rate:.0} B/s under a {cap} B/s cap"
    );
    let n = wait_for("the throttling in the API", Duration::from_secs(10), || {
        let n = a.workload("managed/snd").sample.network?;
        (n.egress.throttle_episodes_total > 0).then_some(n)
    });
    assert!(
        n.egress.marked_packets_total + n.egress.dropped_packets_total > 0,
        "{n:?}"
    );
    let st = a.net();
    assert!(
        st.recent_events
            .iter()
            .any(|e| e.workload.as_deref() == Some("managed/snd")
                && e.direction == "egress"
                && e.kind == "throttle_start"),
        "{:?}",
        st.recent_events
    );
    assert!(st.events.throttle_starts > 0);

    // Unset: the limit goes, the cap with it.
    let (s, b) = a.request(Method::DELETE, "/v1/qos/workloads/managed/snd");
    assert_eq!(s, StatusCode::OK, "{b}");
    wait_for("the cap lifted", Duration::from_secs(10), || {
        let w = a.workload("managed/snd");
        (w.sample.network?.egress.cap_bytes_per_second.is_none()).then_some(())
    });
    let (sent, got) = traffic(&t, "snd", "sink", None, &["--secs", "2"]);
    let after = got.rate(got.first_byte_ns() + 500_000_000, sent.end_ns);
    println!("after unset: {:.1} MB/s", after / 1e6);
    assert!(after > 2.0 * cap as f64, "uncapped: {after:.0} B/s");
}

#[test]
fn without_bpf_capabilities_darosd_runs_and_says_why() {
    let pins = TestPins::new("net-nocap");
    let t = TestRoot::new("net-nocap");
    t.workload("web");
    let _p = t.spawn("web", "sleep 600");
    let dir = tempfile::tempdir().unwrap();
    // root without CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN and CAP_SYS_ADMIN: what a
    // container without those capabilities (or a kernel without BPF) gives darosd
    let a = Agent::start(
        dir.path(),
        t.name(),
        &[pins.env()],
        &[],
        &[
            "setpriv",
            "--inh-caps=-all",
            "--bounding-set=-bpf,-perfmon,-net_admin,-sys_admin",
        ],
    );
    let caps: Capabilities = a.get("/v1/capabilities");
    for f in [&caps.datapath.network, &caps.datapath.runqueue] {
        assert!(!f.available, "{f:?}");
        assert!(
            f.detail.contains("not permitted") && f.detail.contains("CAP_BPF"),
            "{}",
            f.detail
        );
    }
    assert!(!caps.datapath.floors.available);
    assert!(
        caps.summary
            .iter()
            .any(|l| l.starts_with("UNAVAILABLE: eBPF network datapath")),
        "{:?}",
        caps.summary
    );
    let st = a.net();
    assert!(!st.network.available && !st.runqueue.available);
    // Everything else works; each workload says what it lacks and why.
    let w = wait_for("the workload sampled", Duration::from_secs(10), || {
        let w = a.workload("managed/web");
        w.sample.cpu.is_some().then_some(w)
    });
    assert!(w.sample.network.is_none() && w.sample.runqueue.is_none());
    for part in ["network", "runqueue"] {
        let why = w.sample.unavailable.get(part).unwrap_or_else(|| {
            panic!(
                "{part} unavailable with a reason: {:?}",
                w.sample.unavailable
            )
        });
        assert!(why.contains("not permitted"), "{part}: {why}");
    }
    let (s, _) = a.request(Method::GET, "/healthz");
    assert_eq!(s, StatusCode::OK);
    let log = a.log_text();
    assert!(
        log.contains("eBPF datapath unavailable"),
        "the log says it:\n{log}"
    );
}
