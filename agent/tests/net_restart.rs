//! The datapath outlives darosd: with a class limit in force, `kill -9` of
//! darosd leaves counting and the cap working (the pins hold programs, maps and
//! links); a restarted darosd reopens the pins without losing counters or
//! configuration; `darosctl net cleanup` (the documented removal, no agent
//! needed) refuses while darosd runs and afterwards removes every pin,
//! detaching the programs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod net_common;

use std::path::Path;
use std::time::Duration;

use common::{TestRoot, wait_for};
use daros_ebpf::{CgroupId, CgroupRoot, NetReader};
use net_common::{Agent, TestPins, darosctl, rel, testable_cap, traffic, uncapped};
use serde_json::json;

const MB: u64 = 1_000_000;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Sends for `secs` and returns (bytes received, rate from 1 s after the first byte).
fn capped(t: &TestRoot, secs: &str) -> (u64, f64) {
    let (sent, got) = traffic(t, "snd", "sink", None, &["--secs", secs]);
    (
        got.bytes,
        got.rate(got.first_byte_ns() + 1_000_000_000, sent.end_ns),
    )
}

fn api_egress(a: &Agent, at_least: u64) -> u64 {
    wait_for(
        "the sender's bytes in the API",
        Duration::from_secs(10),
        || {
            let b = a.workload("managed/snd").sample.network?.egress.bytes_total;
            (b >= at_least).then_some(b)
        },
    )
}

#[test]
fn counting_and_caps_survive_kill_9_restart_reopens_and_cleanup_removes_all() {
    let pins = TestPins::new("net-restart");
    let t = TestRoot::new("net-restart");
    t.workload("snd");
    t.workload("sink");
    let snd_v2 = CgroupRoot::detect()
        .unwrap()
        .path()
        .join(t.name())
        .join("snd");
    let dir = tempfile::tempdir().unwrap();
    let env = [pins.env()];

    // 1. First start: loads and pins; the class's limit caps the sender.
    let mut a = Agent::start(dir.path(), t.name(), &env, &[], &[]);
    assert!(
        a.net().network.detail.starts_with("fresh"),
        "{:?}",
        a.net().network
    );
    let cap = testable_cap(10 * MB, uncapped(&t, "snd", "sink"));
    a.set_class(
        "managed/snd",
        json!({"class": "Burstable", "profile": {"cpu": {"request": "100m"}, "network": {"egress": {"limit": cap.to_string()}}}}),
    );
    wait_for("the cap in the API", Duration::from_secs(20), || {
        let n = a.workload("managed/snd").sample.network?;
        (n.egress.cap_bytes_per_second == Some(cap)).then_some(())
    });
    // The pinned map is exact; the API lags by up to one sample.
    let pinned = || {
        NetReader::open(&pins.pin_dir())
            .unwrap()
            .counters(CgroupId::of_path(&snd_v2).unwrap())
            .unwrap()
            .egress
            .bytes
    };
    let c0 = pinned();
    let (bytes1, rate1) = capped(&t, "3");
    let api1 = api_egress(&a, c0 + bytes1);
    println!("agent up: {:.2} MB/s, counted {} B", rate1 / 1e6, api1 - c0);
    assert!(
        rel(rate1, cap as f64).abs() <= 0.10,
        "cap while running: {rate1:.0}"
    );

    // The removal command refuses while darosd owns the datapath.
    let pin_arg = pins.0.display().to_string();
    let out = darosctl(&a.socket, &["net", "cleanup", "--pin-dir", &pin_arg]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("stop it"),
        "{}",
        text(&out.stderr)
    );

    // 2. kill -9: nothing is unloaded; counting and the cap go on.
    let pid = a.pid();
    a.kill9();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    let c1 = pinned();
    let (bytes2, rate2) = capped(&t, "4");
    let c2 = pinned();
    let counted = c2 - c1;
    println!(
        "agent down: received {bytes2} B at {:.2} MB/s, counted {counted} B",
        rate2 / 1e6
    );
    // payload + headers; capped TCP sends smaller skbs, so headers weigh a little more
    assert!(
        counted >= bytes2 && (counted as f64) < bytes2 as f64 * 1.05,
        "counting went on: {counted} B for {bytes2} B"
    );
    assert!(
        rel(rate2, cap as f64).abs() <= 0.10,
        "the cap held while darosd was down: {rate2:.0} B/s"
    );

    // 3. Restart: the pins are reopened, counters and configuration kept.
    let mut a = Agent::start(dir.path(), t.name(), &env, &[], &[]);
    let st = a.net();
    assert!(
        st.network.detail.starts_with("reopened"),
        "{:?}",
        st.network
    );
    assert!(
        st.runqueue.detail.starts_with("reopened"),
        "{:?}",
        st.runqueue
    );
    let c3 = api_egress(&a, c2);
    let n = a.workload("managed/snd").sample.network.unwrap();
    assert_eq!(
        n.egress.cap_bytes_per_second,
        Some(cap),
        "configuration kept"
    );
    println!("restarted: counters {c3} B (were {c2} B)");
    let (bytes3, rate3) = capped(&t, "3");
    let c4 = api_egress(&a, c3 + bytes3);
    assert!(c4 - c3 >= bytes3, "counting continues");
    assert!(
        rel(rate3, cap as f64).abs() <= 0.10,
        "cap after restart: {rate3:.0}"
    );

    // 4. A clean stop leaves the pins; cleanup removes all of it.
    a.terminate();
    assert!(pins.0.join("net/cg_cfg").exists());
    let out = darosctl(
        &a.socket,
        &["net", "cleanup", "--pin-dir", &pin_arg, "-o", "json"],
    );
    assert!(out.status.success(), "cleanup: {}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["removed"].as_u64().unwrap() > 10, "{r}");
    assert!(!pins.0.exists(), "the pin directory is gone");
    let shown = std::process::Command::new("bpftool")
        .args(["cgroup", "show"])
        .arg(&snd_v2)
        .output()
        .unwrap();
    let listing = text(&shown.stdout);
    assert!(
        !listing.contains("cg_egress") && !listing.contains("cg_ingress"),
        "programs detached: {listing}"
    );
    let (_, free) = capped(&t, "2");
    println!("after cleanup: {:.1} MB/s uncapped", free / 1e6);
    assert!(
        free > 2.0 * cap as f64,
        "no cap after cleanup: {free:.0} B/s"
    );
}
