//! Process runtime figures: start latency through the shim, shim memory,
//! stop latency, adoption time after an agent restart, and log throughput
//! through the shim with rotation. Prints one line per figure; run with
//! `cargo bench -p daros-adapters --bench process_runtime` (release build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use daros_adapters::adapter::{DestroyOptions, RuntimeAdapter};
use daros_adapters::event::RuntimeEventKind;
use daros_adapters::instance::{InstanceKey, WorkloadInstanceSpec};
use daros_adapters::placement::Placement;
use daros_adapters::process::{ProcessAdapter, ProcessAdapterConfig};
use daros_adapters::status::RuntimeDetail;
use daros_coordinator::QosClass;
use daros_coordinator::model::lifecycle_policy::LifecyclePolicy;
use daros_coordinator::model::names::AppKey;
use daros_coordinator::model::runtime::{OsType, RuntimeRequirement, RuntimeSpec, RuntimeType};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const N: u32 = 20;

fn shim() -> PathBuf {
    // Benches run from target/release/deps; the shim is in target/release.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    for d in [dir, dir.parent().unwrap()] {
        if d.join("daros-shim").is_file() {
            return d.join("daros-shim");
        }
    }
    panic!("build daros-shim first: cargo build --release -p daros-adapters --bin daros-shim");
}

fn spec(name: &str, i: u32, runtime_spec: serde_json::Value) -> WorkloadInstanceSpec {
    WorkloadInstanceSpec {
        key: InstanceKey::replica(AppKey::new("bench", "app"), name, i),
        runtime: RuntimeRequirement {
            runtime_type: RuntimeType::Process,
            os: OsType::Linux,
        },
        image: None,
        qos: QosClass::BestEffort,
        resources: Default::default(),
        lifecycle: LifecyclePolicy::default(),
        health_checks: Vec::new(),
        deadline: None,
        runtime_spec: RuntimeSpec::new(runtime_spec),
        placement: Placement::default(),
        security: Default::default(),
        namespace: None,
        volumes: Vec::new(),
        sidecars: Vec::new(),
    }
}

async fn open(state: &Path) -> ProcessAdapter {
    let mut cfg = ProcessAdapterConfig::new(state);
    cfg.shim_path = shim();
    // A previous adapter on this state may still be letting go of redb.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ProcessAdapter::open(cfg.clone()).await {
            Ok((a, _)) => return a,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let state = tempfile::tempdir().unwrap();
    let a = open(state.path()).await;

    // Start latency: start() returns once the shim reported the workload running.
    let mut starts = Vec::new();
    let mut ids = Vec::new();
    for i in 0..N {
        let id = a
            .create(&spec(
                "sleeper",
                i,
                json!({"command": "/bin/sleep", "args": ["600"]}),
            ))
            .await
            .unwrap();
        let t = Instant::now();
        a.start(&id).await.unwrap();
        starts.push(t.elapsed().as_secs_f64() * 1000.0);
        ids.push(id);
    }
    println!(
        "start latency (create done -> running, {N} sequential): p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        pct(&mut starts, 0.5),
        pct(&mut starts, 0.9),
        pct(&mut starts, 1.0)
    );

    let mut rss = Vec::new();
    for id in &ids {
        if let RuntimeDetail::Process {
            shim_pid: Some(p), ..
        } = a.inspect(id).await.unwrap().detail
        {
            rss.push(rss_kib(p) as f64);
        }
    }
    println!(
        "shim resident memory ({} shims): mean {:.0} KiB, max {:.0} KiB",
        rss.len(),
        rss.iter().sum::<f64>() / rss.len() as f64,
        pct(&mut rss, 1.0)
    );

    // Adoption: a new adapter on the same state takes over N running instances.
    drop(a);
    let t = Instant::now();
    let mut cfg = ProcessAdapterConfig::new(state.path());
    cfg.shim_path = shim();
    let (b, mut ev) = loop {
        match ProcessAdapter::open(cfg.clone()).await {
            Ok(x) => break x,
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    };
    let mut adopted = 0;
    while adopted < N {
        if let Some(e) = ev.next().await
            && matches!(e.kind, RuntimeEventKind::Adopted { .. })
        {
            adopted += 1;
        }
    }
    println!(
        "adoption after agent restart ({N} running instances, includes waiting for the old redb lock): {:.1} ms",
        t.elapsed().as_secs_f64() * 1000.0
    );

    // Stop latency: SIGTERM to exit recorded, for a process that obeys it.
    let mut stops = Vec::new();
    for id in &ids {
        let t = Instant::now();
        b.stop(id, Duration::from_secs(5)).await.unwrap();
        stops.push(t.elapsed().as_secs_f64() * 1000.0);
        b.destroy(id, DestroyOptions::default()).await.unwrap();
    }
    println!(
        "graceful stop (SIGTERM -> exit recorded, {N}): p50 {:.1} ms, max {:.1} ms",
        pct(&mut stops, 0.5),
        pct(&mut stops, 1.0)
    );

    // Log throughput through the shim: 64 MiB of 100-byte lines, 8 MiB files.
    let line = "x".repeat(99);
    let total: u64 = 64 << 20;
    let count = total / 100;
    let script = format!("yes {line} | head -n {count}");
    let mut s = spec(
        "logger",
        0,
        json!({"command": "/bin/sh", "args": ["-c", script],
        "logs": {"maxSize": "8Mi", "maxFiles": 20}}),
    );
    s.lifecycle.restart = daros_coordinator::model::lifecycle_policy::RestartPolicy::Never;
    let id = b.create(&s).await.unwrap();
    let t = Instant::now();
    b.start(&id).await.unwrap();
    loop {
        let e = ev.next().await.unwrap();
        if e.id == id && matches!(e.kind, RuntimeEventKind::Completed) {
            break;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let dir = b.log_dir(&id);
    let files = std::fs::read_dir(&dir).unwrap().count();
    println!(
        "log throughput through the shim: {:.0} MiB/s of workload output ({count} lines, {} files after rotation)",
        (total as f64 / (1 << 20) as f64) / secs,
        files
    );
    b.destroy(
        &id,
        DestroyOptions {
            grace: Duration::from_secs(1),
            remove_logs: true,
        },
    )
    .await
    .unwrap();
}
