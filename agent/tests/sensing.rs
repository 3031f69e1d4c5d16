//! Sensing against real cgroups created by the test (v1/hybrid hierarchies plus the
//! unified mount on hybrid hosts, or the unified tree on v2): values move when a
//! process in the cgroup burns CPU, allocates memory or writes to disk, and rates
//! stay sane when cgroups disappear and come back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{TestRoot, block_backed_dir, sampler, wait_for};
use daros_agent::cgroup::{CgroupBackend, CgroupMode};
use daros_agent::gpu::GpuCollector;
use daros_agent::model::Workload;
use daros_agent::sensing::{Sampler, Snapshot};

const MIB: u64 = 1024 * 1024;

fn tick(s: &mut Sampler) -> Snapshot {
    std::thread::sleep(Duration::from_millis(250));
    let snap = s.tick();
    for w in &snap.workloads {
        assert_rates_sane(w);
    }
    snap
}

fn assert_rates_sane(w: &Workload) {
    let ok = |v: Option<f64>| v.is_none_or(|x| x.is_finite() && x >= 0.0);
    let s = &w.sample;
    if let Some(c) = &s.cpu {
        assert!(ok(c.usage_cores), "{}: cpu rate {:?}", w.id, c.usage_cores);
        if let Some(t) = &c.throttling {
            assert!(ok(t.throttled_ratio));
        }
    }
    for d in s.io.iter().flatten() {
        for r in [
            d.read_bytes_per_second,
            d.write_bytes_per_second,
            d.reads_per_second,
            d.writes_per_second,
        ] {
            assert!(ok(r), "{}: io rate {r:?}", w.id);
        }
    }
}

fn no_gpu() -> GpuCollector {
    GpuCollector::none("no GPU: test")
}

#[test]
fn cpu_usage_rises_when_a_process_burns_cpu() {
    let t = TestRoot::new("cpu");
    t.workload("burn");
    t.workload("idle");
    let mut s = sampler(&t, no_gpu());
    let _burn = t.spawn("burn", "while :; do :; done");
    let _idle = t.spawn("idle", "sleep 600");
    let cores = wait_for(
        "managed/burn to use > 0.2 cores",
        Duration::from_secs(30),
        || {
            let snap = tick(&mut s);
            snap.workload("managed/burn")?
                .sample
                .cpu
                .as_ref()?
                .usage_cores
                .filter(|c| *c > 0.2)
        },
    );
    assert!(cores <= 1.2, "one busy loop cannot use {cores} cores");
    // Starting sh and sleep costs some CPU (a lot under emulation): wait for idle to settle.
    let snap = wait_for(
        "managed/idle to settle below 0.1 cores",
        Duration::from_secs(30),
        || {
            let snap = tick(&mut s);
            let idle = snap.workload("managed/idle")?;
            (idle.sample.cpu.as_ref()?.usage_cores? < 0.1).then_some(snap)
        },
    );
    let idle = snap.workload("managed/idle").unwrap();
    assert!(
        idle.sample.pids.is_some_and(|p| p >= 1),
        "{:?}",
        idle.sample.pids
    );
    let burn = snap.workload("managed/burn").unwrap();
    assert!(burn.sample.cpu.as_ref().unwrap().usage_seconds_total > 0.0);
    // Per-cgroup PSI exists on v2 and, for cgroups mirrored in the unified mount, on hybrid.
    match t.backend().mode() {
        CgroupMode::V2 | CgroupMode::Hybrid => {
            assert!(
                burn.sample.psi.cpu.is_some(),
                "PSI expected: {:?}",
                burn.sample.unavailable
            );
        }
        CgroupMode::V1 => assert!(burn.sample.unavailable.contains_key("psi")),
    }
    // The workload lists one directory per hierarchy (v1/hybrid) or one (v2).
    assert!(
        burn.paths.iter().all(|p| p.ends_with("/burn")),
        "{:?}",
        burn.paths
    );
}

#[test]
fn memory_rises_when_a_process_allocates() {
    let t = TestRoot::new("mem");
    t.workload("alloc");
    let mut s = sampler(&t, no_gpu());
    // sleep holds the workload open before the allocation starts
    let _sleeper = t.spawn("alloc", "sleep 600");
    let before = wait_for("baseline memory sample", Duration::from_secs(10), || {
        tick(&mut s)
            .workload("managed/alloc")?
            .sample
            .memory
            .clone()
    });
    // dd fills a 64 MiB buffer from /dev/zero (touching every page), then blocks
    // writing it into a pipe nobody reads: the memory stays charged.
    let _alloc = t.spawn(
        "alloc",
        "dd if=/dev/zero bs=64M count=1 2>/dev/null | sleep 600",
    );
    let after = wait_for(
        "anon memory to grow by 60 MiB",
        Duration::from_secs(30),
        || {
            let m = tick(&mut s)
                .workload("managed/alloc")?
                .sample
                .memory
                .clone()?;
            (m.anon_bytes >= before.anon_bytes + 60 * MIB).then_some(m)
        },
    );
    assert!(
        after.current_bytes >= before.current_bytes + 60 * MIB,
        "{before:?} -> {after:?}"
    );
    assert!(after.current_bytes >= after.anon_bytes);
    let snap = tick(&mut s);
    assert!(snap.workload("managed/alloc").unwrap().sample.pids.unwrap() >= 3);
}

#[test]
fn io_counters_move_when_a_process_writes_with_fsync() {
    let Some(dir) = block_backed_dir() else {
        eprintln!("SKIPPED: no block-device-backed directory (set DAROS_TEST_IO_DIR)");
        return;
    };
    let t = TestRoot::new("io");
    t.workload("writer");
    let mut s = sampler(&t, no_gpu());
    let file = dir.join(format!("{}-io.bin", t.name()));
    let script = format!(
        "for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero of={} bs=1M count=4 oflag=direct conv=fsync 2>/dev/null; sleep 0.3; done; sleep 600",
        file.display()
    );
    let _w = t.spawn("writer", &script);
    let mut max_rate = 0.0f64;
    let dev = wait_for(
        "32 MiB written through the workload's IO counters",
        Duration::from_secs(60),
        || {
            let snap = tick(&mut s);
            let io = snap.workload("managed/writer")?.sample.io.clone()?;
            for d in &io {
                max_rate = max_rate.max(d.write_bytes_per_second.unwrap_or(0.0));
            }
            io.into_iter().find(|d| d.write_bytes_total >= 32 * MIB)
        },
    );
    let _ = std::fs::remove_file(&file);
    assert!(dev.writes_total >= 8, "{dev:?}");
    assert!(max_rate > 0.0, "a write rate was never observed");
    assert!(dev.device.is_some(), "device name of {} resolved", dev.dev);
}

#[test]
fn removed_cgroups_drop_out_and_recreated_ones_restart_rates() {
    let t = TestRoot::new("churn");
    t.workload("w");
    let mut s = sampler(&t, no_gpu());
    let mut p = t.spawn("w", "while :; do :; done");
    let old_total = wait_for(
        "managed/w to burn 2 s of CPU",
        Duration::from_secs(60),
        || {
            let snap = tick(&mut s);
            let cpu = snap.workload("managed/w")?.sample.cpu.clone()?;
            cpu.usage_cores?;
            (cpu.usage_seconds_total >= 2.0).then_some(cpu.usage_seconds_total)
        },
    );
    p.kill();
    wait_for(
        "process gone from the cgroup",
        Duration::from_secs(10),
        || {
            t.backend()
                .procs(&t.root.workload("w").unwrap())
                .ok()?
                .is_empty()
                .then_some(())
        },
    );
    t.root.remove_workload("w").unwrap();
    let snap = tick(&mut s);
    assert!(
        snap.workload("managed/w").is_none(),
        "removed workload still listed"
    );

    // Same name again: a new cgroup whose counters start from zero.
    t.workload("w");
    let snap = tick(&mut s);
    let w = snap
        .workload("managed/w")
        .expect("recreated workload discovered");
    assert_eq!(
        w.sample.cpu.as_ref().unwrap().usage_cores,
        None,
        "no rate across a recreation"
    );
    let _p2 = t.spawn("w", "sleep 600");
    let fresh = wait_for("a fresh rate", Duration::from_secs(10), || {
        let cpu = tick(&mut s).workload("managed/w")?.sample.cpu.clone()?;
        cpu.usage_cores.map(|_| cpu)
    });
    assert!(
        fresh.usage_seconds_total < old_total,
        "counters restarted: {} s now, {old_total} s before the recreation",
        fresh.usage_seconds_total
    );
}

#[test]
fn node_sample_moves() {
    let t = TestRoot::new("node");
    let mut s = sampler(&t, no_gpu());
    let first = tick(&mut s);
    assert!(first.node.cpu.cpus >= 1);
    assert!(first.node.memory.total_bytes > first.node.memory.available_bytes);
    let second = tick(&mut s);
    let u = second
        .node
        .cpu
        .utilization
        .expect("utilization after two samples");
    assert!((0.0..=1.0).contains(&u));
    assert!(second.node.network.iter().any(|n| n.interface == "lo"));
    for d in &second.node.disks {
        assert!(d.read_bytes_per_second.is_some_and(|r| r >= 0.0), "{d:?}");
    }
}

/// Kubernetes pod cgroups (cgroupfs driver layout, under a test-owned kubepods
/// root) are discovered, sampled with their QoS class, and never written.
#[test]
fn discovered_pod_cgroups_are_sampled_read_only() {
    use daros_agent::model::WorkloadKind;
    use daros_agent::sensing::discovery::DiscoveryConfig;
    use daros_agent::sensing::node::ProcPaths;
    use daros_agent::sensing::{Sampler, SamplerConfig};

    let t = TestRoot::new("kubepods");
    let burstable = t.create_nested("burstable/pod0a1b2c3d-0000-4000-8000-000000000001");
    let guaranteed = t.create_nested("pod0a1b2c3d-0000-4000-8000-000000000002");
    let _b = t.spawn_in(&burstable, "while :; do :; done");
    let _g = t.spawn_in(&guaranteed, "sleep 600");
    let knobs = |cg: &daros_agent::cgroup::CgroupPath| -> Vec<(String, Vec<u8>)> {
        t.backend()
            .dirs(cg)
            .into_iter()
            .flat_map(|d| {
                std::fs::read_dir(&d.path)
                    .unwrap()
                    .filter_map(Result::ok)
                    .map(|e| e.path())
            })
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                // Files a writer would change; counters and stats move by themselves.
                [
                    "max", "limit", "shares", "weight", "quota", "min", "low", "high", "cpus",
                    "mems",
                ]
                .iter()
                .any(|k| n.contains(k))
                    && !n.contains("stat")
                    && !n.contains("usage")
                    && !n.contains("events")
                    && !n.contains("pressure")
                    && !n.contains("effective")
            })
            .filter_map(|p| std::fs::read(&p).ok().map(|c| (p.display().to_string(), c)))
            .collect()
    };
    let before = (knobs(&burstable), knobs(&guaranteed));
    assert!(!before.0.is_empty());

    let cfg = SamplerConfig {
        node_name: "test".into(),
        discovery_interval: Duration::ZERO,
        discovery: DiscoveryConfig {
            managed_root: daros_agent::cgroup::CgroupPath::new(&format!("{}-none", t.name()))
                .unwrap(),
            kubernetes: true,
            kubepods_roots: vec![t.name().to_string()],
            systemd: false,
            systemd_unit_types: vec![],
            max_workloads: 100,
        },
        exclude_devices: vec![],
        exclude_interfaces: vec![],
        agent: Default::default(),
        paths: ProcPaths::default(),
    };
    let mut s = Sampler::new(cfg, t.backend().clone(), no_gpu()).unwrap();
    let snap = wait_for(
        "the burstable pod to show CPU use",
        Duration::from_secs(30),
        || {
            let snap = tick(&mut s);
            let pod = snap.workload("k8s/0a1b2c3d-0000-4000-8000-000000000001")?;
            pod.sample.cpu.as_ref()?.usage_cores.filter(|c| *c > 0.1)?;
            Some(snap)
        },
    );
    let b = snap
        .workload("k8s/0a1b2c3d-0000-4000-8000-000000000001")
        .unwrap();
    assert_eq!(b.kind, WorkloadKind::KubernetesPod);
    assert_eq!(b.k8s_qos.as_deref(), Some("burstable"));
    assert!(!b.managed);
    let g = snap
        .workload("k8s/0a1b2c3d-0000-4000-8000-000000000002")
        .unwrap();
    assert_eq!(g.k8s_qos.as_deref(), Some("guaranteed"));
    assert!(g.sample.memory.is_some() && g.sample.pids.is_some_and(|p| p >= 1));
    assert_eq!(
        (knobs(&burstable), knobs(&guaranteed)),
        before,
        "a discovered cgroup was written"
    );
}
