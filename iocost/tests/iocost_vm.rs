//! iocost on a real cgroup-v2 kernel: run in the VM by
//! `bpf-tests/tests/vm_iocost.rs` (`daros-vmtest cargo-test --disk-mib 512 -p
//! daros-iocost --test iocost_vm -- --ignored`); ignored on the host. The disk
//! is the VM's virtio disk, the data directory on its ext4 filesystem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use daros_iocost::model::{parse_model, parse_qos};
use daros_iocost::node::{self, ModelSource, Setup};
use daros_iocost::{CalibrationPlan, device};

const ROOT: &str = "/sys/fs/cgroup";

fn read(f: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(f)).unwrap()
}

fn setup(data: &Path, measure: bool) -> Setup {
    let d = device::disk_of(Path::new("/sys"), data).unwrap();
    Setup {
        cgroup_root: ROOT.into(),
        sys: "/sys".into(),
        data_dir: data.to_path_buf(),
        disks: vec![(d.name, d.major, d.minor)],
        measure,
        plan: CalibrationPlan {
            phase: Duration::from_millis(500),
            ..CalibrationPlan::default()
        },
        latency_factor: daros_iocost::LATENCY_FACTOR,
    }
}

fn data_dir(name: &str) -> PathBuf {
    let p = Path::new("/mnt/vmdisk").join(name);
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[test]
#[ignore = "needs the cgroup-v2 VM with a disk (bpf-tests/tests/vm_iocost.rs)"]
fn iocost_is_enabled_with_the_measured_model_cached_and_restored() {
    let data = data_dir("iocost-enable");
    let s = setup(&data, true);
    let (ref name, major, minor) = s.disks[0];
    let dev = format!("{major}:{minor}");
    let before_qos = parse_qos(&read("io.cost.qos"));
    assert!(
        !before_qos
            .iter()
            .any(|l| (l.major, l.minor) == (major, minor) && l.enabled),
        "iocost already on: {before_qos:?}"
    );

    let on = node::enable(&s).unwrap();
    let d = &on.disks[0];
    assert_eq!(d.error, None, "{d:?}");
    assert!(d.enabled, "{d:?}");
    assert!(
        matches!(d.model_source, ModelSource::Measured { cached: false, .. }),
        "{d:?}"
    );
    // The kernel holds what was measured: the model, and latency targets from it.
    let qos = parse_qos(&read("io.cost.qos"));
    let line = qos
        .iter()
        .find(|l| (l.major, l.minor) == (major, minor))
        .unwrap_or_else(|| panic!("no io.cost.qos line for {dev}: {qos:?}"));
    assert!(line.enabled && line.user, "{line:?}");
    let t = d.qos.expect("latency targets with a measured model");
    for want in [
        "rpct=95.00".to_string(),
        format!("rlat={}", t.rlat_us),
        format!("wlat={}", t.wlat_us),
        "min=25.00".to_string(),
        "max=100.00".to_string(),
    ] {
        assert!(
            line.params.split_whitespace().any(|p| p == want),
            "{want} not in {line:?}"
        );
    }
    println!("{dev} {name}: qos {}", line.params);
    let model = parse_model(&read("io.cost.model"));
    let m = model
        .iter()
        .find(|l| (l.major, l.minor) == (major, minor))
        .unwrap();
    assert!(m.user, "{m:?}");
    let (disk, measured) = on.measured.clone().unwrap();
    assert_eq!(&disk, name);
    assert_eq!(m.model, measured);
    println!("{dev} {name}: measured {measured:?} ({:?})", d.model_source);
    assert!(
        std::fs::read_dir(data.join("iocost")).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".daros-iocost")),
        "scratch file left"
    );

    // A restart without a restore (a crash): the cached model, the first originals kept.
    let again = node::enable(&s).unwrap();
    assert!(
        matches!(
            again.disks[0].model_source,
            ModelSource::Measured { cached: true, .. }
        ),
        "{:?}",
        again.disks[0]
    );

    // On request: measured again, the new model cached and in the kernel.
    let at = |n: &node::NodeIoCost| match n.disks[0].model_source {
        ModelSource::Measured { at_unix_ms, .. } => at_unix_ms,
        ModelSource::Kernel { .. } => panic!("{:?}", n.disks[0]),
    };
    let re = node::remeasure(&s).unwrap();
    assert!(
        matches!(
            re.disks[0].model_source,
            ModelSource::Measured { cached: false, .. }
        ),
        "{:?}",
        re.disks[0]
    );
    assert!(
        at(&re) > at(&again),
        "{:?} vs {:?}",
        re.disks[0],
        again.disks[0]
    );
    let (_, remeasured) = re.measured.clone().unwrap();
    let model = parse_model(&read("io.cost.model"));
    let m = model
        .iter()
        .find(|l| (l.major, l.minor) == (major, minor))
        .unwrap();
    assert_eq!(m.model, remeasured);
    let disk = device::disk_of(Path::new("/sys"), &data).unwrap();
    assert_eq!(
        daros_iocost::cache::load(&data, &disk)
            .unwrap()
            .measured
            .model,
        remeasured
    );
    println!("{dev} {name}: measured again {remeasured:?}");
    // With the kernel's model there is nothing to measure.
    assert!(node::remeasure(&setup(&data, false)).is_err());

    assert!(again.restore().is_empty());
    let qos = parse_qos(&read("io.cost.qos"));
    assert!(
        !qos.iter()
            .any(|l| (l.major, l.minor) == (major, minor) && (l.enabled || l.user)),
        "still on, or our latency targets left, after restore: {qos:?}"
    );
    let model = parse_model(&read("io.cost.model"));
    assert!(
        !model
            .iter()
            .any(|l| (l.major, l.minor) == (major, minor) && l.user),
        "the kernel's own model again: {model:?}"
    );
    assert!(!data.join("iocost/originals.json").exists());
    // Nothing saved: a restore changes nothing.
    assert!(node::restore(Path::new(ROOT), &data).is_empty());
}

#[test]
#[ignore = "needs the cgroup-v2 VM with a disk (bpf-tests/tests/vm_iocost.rs)"]
fn an_operators_settings_come_back_after_the_agent() {
    let data = data_dir("iocost-operator");
    let s = setup(&data, false);
    let (_, major, minor) = s.disks[0];
    // The operator's own latency targets, on before the agent.
    let theirs = format!(
        "{major}:{minor} enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=50.00 max=150.00"
    );
    std::fs::write(Path::new(ROOT).join("io.cost.qos"), &theirs).unwrap();
    let on = node::enable(&s).unwrap();
    assert!(on.disks[0].enabled);
    assert!(matches!(
        on.disks[0].model_source,
        ModelSource::Kernel { .. }
    ));
    assert!(on.restore().is_empty());
    let qos = parse_qos(&read("io.cost.qos"));
    let l = qos
        .iter()
        .find(|l| (l.major, l.minor) == (major, minor))
        .unwrap();
    assert!(l.enabled && l.user, "{l:?}");
    assert!(
        l.params.contains("rlat=5000") && l.params.contains("max=150.00"),
        "{l:?}"
    );
    std::fs::write(
        Path::new(ROOT).join("io.cost.qos"),
        format!("{major}:{minor} enable=0 ctrl=auto"),
    )
    .unwrap();
}
