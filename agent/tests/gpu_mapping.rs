//! GPU memory attribution by process cgroup, driven by `FakeGpuSource` (a test
//! double: this machine has no GPU) and real processes in real cgroups.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{TestRoot, sampler, wait_for};
use daros_agent::gpu::fake::FakeGpuSource;
use daros_agent::gpu::{GpuCollector, GpuReading};

const GIB: u64 = 1024 * 1024 * 1024;

#[test]
fn gpu_processes_are_mapped_to_workloads_by_cgroup() {
    let t = TestRoot::new("gpu");
    t.workload("trainer");
    t.workload("other");
    let trainer = t.spawn("trainer", "sleep 600");
    let _other = t.spawn("other", "sleep 600");
    let outsider = std::process::id();
    let fake = FakeGpuSource::new(vec![GpuReading {
        index: 0,
        uuid: "GPU-fake-0".into(),
        name: "Fake GPU (test double)".into(),
        utilization_gpu: Some(40),
        memory_total: Some(80 * GIB),
        memory_used: Some(3 * GIB),
        power_mw: Some(250_000),
        temperature_c: Some(60),
        processes: vec![(trainer.pid(), Some(2 * GIB)), (outsider, Some(GIB))],
        ..GpuReading::default()
    }]);
    let mut s = sampler(&t, GpuCollector::with_source(Box::new(fake.clone())));
    let snap = wait_for("both workloads sampled", Duration::from_secs(10), || {
        std::thread::sleep(Duration::from_millis(100));
        let snap = s.tick();
        (snap.workloads.len() == 2).then_some(snap)
    });
    let dev = &snap.node.gpu.devices[0];
    assert!(snap.node.gpu.available);
    assert_eq!(dev.power_watts, Some(250.0));
    let mapped = dev
        .processes
        .iter()
        .find(|p| p.pid == trainer.pid())
        .unwrap();
    assert_eq!(mapped.workload.as_deref(), Some("managed/trainer"));
    let unmapped = dev.processes.iter().find(|p| p.pid == outsider).unwrap();
    assert_eq!(
        unmapped.workload, None,
        "the test process is in no workload"
    );
    assert_eq!(
        snap.workload("managed/trainer")
            .unwrap()
            .sample
            .gpu_memory_bytes,
        Some(2 * GIB)
    );
    assert_eq!(
        snap.workload("managed/other")
            .unwrap()
            .sample
            .gpu_memory_bytes,
        Some(0)
    );

    // The process exits: its memory is no longer attributed.
    fake.set(vec![GpuReading {
        index: 0,
        uuid: "GPU-fake-0".into(),
        ..GpuReading::default()
    }]);
    let snap = s.tick();
    assert_eq!(
        snap.workload("managed/trainer")
            .unwrap()
            .sample
            .gpu_memory_bytes,
        Some(0)
    );
}

#[test]
fn without_nvml_the_agent_reports_no_gpu() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        eprintln!("SKIPPED: this host has an NVIDIA driver; the no-GPU path is not reachable");
        return;
    }
    let c = GpuCollector::detect(None);
    assert!(!c.available());
    assert!(
        c.reason().unwrap().starts_with("no GPU"),
        "{:?}",
        c.reason()
    );
    let t = TestRoot::new("nogpu");
    let mut s = sampler(&t, c);
    let snap = s.tick();
    assert!(!snap.node.gpu.available);
    assert!(snap.node.gpu.reason.as_deref().unwrap().contains("NVML"));
    assert!(
        snap.node.memory.total_bytes > 0,
        "everything else still works"
    );
}
