//! The mapping table, class by class and resource by resource, for v2 and v1.

use super::*;
use crate::qos::facts::{AncestorProtection, DiskFacts, NetworkFacts};
use daros_coordinator::ResourceProfile;

fn node(mode: CgroupMode) -> NodeFacts {
    NodeFacts {
        mode,
        cpus: (0..4).collect(),
        memory_bytes: 16 << 30,
        page_size: 4096,
        disks: vec![DiskFacts {
            name: "vda".into(),
            major: 254,
            minor: 0,
            scheduler: "none".into(),
            io_cost: false,
        }],
        memory_recursiveprot: true,
        protection: true,
        network: NetworkFacts::default(),
    }
}

fn v2_target() -> TargetFacts {
    TargetFacts::unconstrained("/daros/w", &["cpu", "cpuset", "io", "memory", "pids"])
}

fn v1_target() -> TargetFacts {
    TargetFacts::unconstrained(
        "/daros/w",
        &["cpu", "cpuacct", "cpuset", "memory", "blkio", "pids"],
    )
}

fn spec(class: QosClass, json: &str) -> QosSpec {
    let p: ResourceProfile = serde_json::from_str(json).unwrap();
    QosSpec::new(class, p, "profile").unwrap()
}

fn find(plans: &[KnobPlan], k: Knob) -> &KnobPlan {
    plans
        .iter()
        .find(|p| p.knob == k)
        .unwrap_or_else(|| panic!("{k} not planned in {plans:#?}"))
}

fn written(plans: &[KnobPlan], k: Knob) -> String {
    match &find(plans, k).action {
        PlanAction::Write(v) => v.join("\n"),
        other => panic!("{k} is not a plain write: {other:?}"),
    }
}

fn degraded_reason(plans: &[KnobPlan], k: Knob) -> String {
    match &find(plans, k).action {
        PlanAction::Degraded(r) => r.clone(),
        PlanAction::WriteInert { reason, .. } => reason.clone(),
        other => panic!("{k} is not degraded: {other:?}"),
    }
}

const GP: &str = r#"{"cpu":{"request":"2","limit":"2","reservation":"1500m"},
    "memory":{"request":"1Gi","limit":"1Gi","reservation":"512Mi"},
    "io":{"read":{"reservation":"20MB/s"}},"pids":512}"#;

#[test]
fn kubelet_cpu_formulas() {
    assert_eq!(cpu_shares(None), 2);
    assert_eq!(cpu_shares(Some(MilliCpu(1))), 2);
    assert_eq!(cpu_shares(Some(MilliCpu(1000))), 1024);
    assert_eq!(cpu_shares(Some(MilliCpu(1_000_000))), 262_144);
    assert_eq!(shares_to_weight(2), 1);
    assert_eq!(shares_to_weight(1024), 39);
    assert_eq!(shares_to_weight(2048), 79);
    assert_eq!(shares_to_weight(262_144), 10_000);
    assert_eq!(quota_us(MilliCpu(1500), 100_000), 150_000);
    assert_eq!(quota_us(MilliCpu(1), 100_000), MIN_QUOTA_US);
}

#[test]
fn guaranteed_pro_on_v2() {
    let s = spec(QosClass::GuaranteedPro, GP);
    let p = plan(&s, &node(CgroupMode::V2), &v2_target());
    assert_eq!(written(&p, Knob::CpuWeight), "79");
    assert_eq!(written(&p, Knob::CpuMax), "200000 100000");
    assert_eq!(written(&p, Knob::MemoryMin), (512u64 << 20).to_string());
    assert_eq!(written(&p, Knob::MemoryLow), (1u64 << 30).to_string());
    assert_eq!(written(&p, Knob::MemoryHigh), "max");
    assert_eq!(written(&p, Knob::MemoryMax), (1u64 << 30).to_string());
    assert_eq!(
        written(&p, Knob::IoMax),
        "254:0 rbps=max wbps=max riops=max wiops=max"
    );
    assert_eq!(written(&p, Knob::PidsMax), "512");
    // Floors without a kernel knob are held by the loop.
    assert!(matches!(
        find(&p, Knob::CpuFloor).action,
        PlanAction::Mechanism { enforced: true, .. }
    ));
    assert!(matches!(
        find(&p, Knob::IoReadFloor).action,
        PlanAction::Mechanism { enforced: true, .. }
    ));
    // io.weight is written but inert on a `none` scheduler without io.cost.
    let r = degraded_reason(&p, Knob::IoWeight);
    assert!(r.contains("vda (scheduler none, io.cost off)"), "{r}");
    assert_eq!(find(&p, Knob::IoWeight).values(), ["default 1000"]);
    assert_eq!(
        written(&p, Knob::CpusetCpus),
        "",
        "no dedicated cores: inherit"
    );
}

#[test]
fn guaranteed_burstable_best_effort_on_v2() {
    let n = node(CgroupMode::V2);
    let g = plan(
        &spec(
            QosClass::Guaranteed,
            r#"{"cpu":{"request":"1","limit":"1"},"memory":{"request":"256Mi","limit":"256Mi"}}"#,
        ),
        &n,
        &v2_target(),
    );
    assert_eq!(written(&g, Knob::CpuWeight), "39");
    assert_eq!(written(&g, Knob::CpuMax), "100000 100000");
    assert_eq!(written(&g, Knob::MemoryMin), "0");
    assert_eq!(written(&g, Knob::MemoryLow), (256u64 << 20).to_string());
    assert!(g.iter().all(|p| p.knob != Knob::CpuFloor));
    assert_eq!(find(&g, Knob::IoWeight).values(), ["default 500"]);

    let b = plan(
        &spec(
            QosClass::Burstable,
            r#"{"cpu":{"request":"500m"},"memory":{"request":"100Mi","limit":"200Mi"},"io":{"read":{"limit":"10Mi/s"}}}"#,
        ),
        &n,
        &v2_target(),
    );
    assert_eq!(
        written(&b, Knob::CpuWeight),
        shares_to_weight(512).to_string()
    );
    assert_eq!(written(&b, Knob::CpuMax), "max 100000");
    assert_eq!(written(&b, Knob::MemoryLow), (100u64 << 20).to_string());
    // request + 90% of the burst, page aligned
    let high: u64 = written(&b, Knob::MemoryHigh).parse().unwrap();
    assert_eq!(
        high,
        ((100u64 << 20) + (100u64 << 20) / 10 * 9) / 4096 * 4096
    );
    assert_eq!(written(&b, Knob::MemoryMax), (200u64 << 20).to_string());
    assert_eq!(
        written(&b, Knob::IoMax),
        format!("254:0 rbps={} wbps=max riops=max wiops=max", 10u64 << 20)
    );

    let be = plan(
        &spec(QosClass::BestEffort, r#"{"cpu":{"limit":"3"}}"#),
        &n,
        &v2_target(),
    );
    assert_eq!(written(&be, Knob::CpuWeight), "1");
    assert_eq!(written(&be, Knob::CpuMax), "300000 100000");
    assert_eq!(written(&be, Knob::MemoryMin), "0");
    assert_eq!(written(&be, Knob::MemoryLow), "0");
    assert_eq!(written(&be, Knob::MemoryMax), "max");
    assert_eq!(written(&be, Knob::PidsMax), "max");
    assert_eq!(find(&be, Knob::IoWeight).values(), ["default 1"]);
}

#[test]
fn io_weight_enforced_with_io_cost_and_bfq_weight_planned() {
    let mut n = node(CgroupMode::V2);
    n.disks[0].io_cost = true;
    let p = plan(&spec(QosClass::GuaranteedPro, GP), &n, &v2_target());
    assert_eq!(written(&p, Knob::IoWeight), "default 1000");
    assert!(p.iter().all(|k| k.knob != Knob::IoBfqWeight));
    n.disks[0].scheduler = "bfq".into();
    let mut t = v2_target();
    t.files.insert("io.bfq.weight".into());
    let p = plan(
        &spec(QosClass::Burstable, r#"{"cpu":{"request":"1"}}"#),
        &n,
        &t,
    );
    assert_eq!(written(&p, Knob::IoBfqWeight), "default 100");
    n.disks.clear();
    let p = plan(
        &spec(QosClass::Burstable, r#"{"cpu":{"request":"1"}}"#),
        &n,
        &t,
    );
    assert!(degraded_reason(&p, Knob::IoWeight).contains("no block devices"));
    assert!(degraded_reason(&p, Knob::IoMax).contains("no block devices"));
}

#[test]
fn missing_controllers_degrade_with_the_reason() {
    let t = TargetFacts::unconstrained("/system.slice/x.service", &["cpu", "pids"]);
    let p = plan(
        &spec(QosClass::GuaranteedPro, GP),
        &node(CgroupMode::V2),
        &t,
    );
    let r = degraded_reason(&p, Knob::MemoryMin);
    assert!(
        r.contains("memory controller is not enabled for /system.slice/x.service"),
        "{r}"
    );
    assert!(degraded_reason(&p, Knob::IoMax).contains("io controller"));
    assert!(degraded_reason(&p, Knob::IoReadFloor).contains("cannot measure"));
    assert_eq!(written(&p, Knob::CpuWeight), "79");
    assert!(matches!(
        find(&p, Knob::CpuFloor).action,
        PlanAction::Mechanism { enforced: true, .. }
    ));
    // cpuset not enabled and nothing dedicated: the knob is not planned at all.
    assert!(p.iter().all(|k| k.knob != Knob::CpusetCpus));
}

#[test]
fn protection_off_degrades_floors() {
    let mut n = node(CgroupMode::V2);
    n.protection = false;
    let p = plan(&spec(QosClass::GuaranteedPro, GP), &n, &v2_target());
    assert!(degraded_reason(&p, Knob::CpuFloor).contains("protection loop is off"));
    assert!(degraded_reason(&p, Knob::IoReadFloor).contains("protection loop is off"));
    // memory.min is a kernel floor: still a plain write.
    assert_eq!(written(&p, Knob::MemoryMin), (512u64 << 20).to_string());
}

#[test]
fn outside_ancestor_caps_memory_protection() {
    let mut t = v2_target();
    t.ancestors = vec![AncestorProtection {
        path: "/system.slice".into(),
        memory_min: Some(0),
        memory_low: Some(0),
    }];
    t.subtree_min = 600 << 20;
    let p = plan(
        &spec(QosClass::GuaranteedPro, GP),
        &node(CgroupMode::V2),
        &t,
    );
    let r = degraded_reason(&p, Knob::MemoryMin);
    assert!(r.contains("capped by ancestor /system.slice"), "{r}");
    assert!(r.contains(&(600u64 << 20).to_string()), "{r}");
    assert_eq!(
        find(&p, Knob::MemoryMin).values(),
        [(512u64 << 20).to_string()]
    );
    // An ancestor that covers the subtree does not cap.
    t.ancestors[0].memory_min = Some(1 << 30);
    t.ancestors[0].memory_low = Some(2 << 30);
    let p = plan(
        &spec(QosClass::GuaranteedPro, GP),
        &node(CgroupMode::V2),
        &t,
    );
    assert_eq!(written(&p, Knob::MemoryMin), (512u64 << 20).to_string());
    assert_eq!(written(&p, Knob::MemoryLow), (1u64 << 30).to_string());
}

#[test]
fn dedicated_cores_v2_and_v1() {
    let s = spec(
        QosClass::GuaranteedPro,
        r#"{"cpu":{"request":"2","limit":"2","reservation":"2"},"memory":{"request":"1Gi","reservation":"1Gi"},"dedicatedCpus":true}"#,
    );
    let mut t = v2_target();
    t.cpus = CpuAssignment::Dedicated(Ok([2, 3].into_iter().collect()));
    let p = plan(&s, &node(CgroupMode::V2), &t);
    assert_eq!(written(&p, Knob::CpusetCpus), "2-3");
    assert!(degraded_reason(&p, Knob::CpusetPartition).contains("not a cpuset partition root"));
    t.parent_partition_root = true;
    t.files.insert("cpuset.cpus.partition".into());
    let p = plan(&s, &node(CgroupMode::V2), &t);
    assert_eq!(written(&p, Knob::CpusetPartition), "root");
    t.cpus = CpuAssignment::Dedicated(Err("2 dedicated cores asked, 1 of 4 cores are free".into()));
    let p = plan(&s, &node(CgroupMode::V2), &t);
    assert!(degraded_reason(&p, Knob::CpusetCpus).contains("1 of 4"));

    let mut t1 = v1_target();
    t1.cpus = CpuAssignment::Dedicated(Ok([3].into_iter().chain([2]).collect()));
    let p = plan(&s, &node(CgroupMode::Hybrid), &t1);
    assert_eq!(written(&p, Knob::V1CpusetCpus), "2-3");
    assert_eq!(written(&p, Knob::V1CpuExclusive), "1");

    // Everyone else gets the shared pool.
    let mut t = v2_target();
    t.cpus = CpuAssignment::Pool([0, 1].into_iter().collect());
    let p = plan(&spec(QosClass::BestEffort, "{}"), &node(CgroupMode::V2), &t);
    assert_eq!(written(&p, Knob::CpusetCpus), "0-1");
}

#[test]
fn pick_cores_keeps_one_shared() {
    let pool: BTreeSet<u32> = (0..4).collect();
    let got = pick_cores(&pool, &BTreeSet::new(), 2).unwrap();
    assert_eq!(got, [2, 3].into_iter().collect());
    let taken: BTreeSet<u32> = [2, 3].into_iter().collect();
    assert_eq!(
        pick_cores(&pool, &taken, 1).unwrap(),
        [1].into_iter().collect()
    );
    let e = pick_cores(&pool, &taken, 2).unwrap_err();
    assert!(e.contains("2 of 4 cores are free"), "{e}");
}

#[test]
fn v1_fallback_reports_every_degradation() {
    let n = node(CgroupMode::Hybrid);
    let p = plan(&spec(QosClass::GuaranteedPro, GP), &n, &v1_target());
    assert_eq!(written(&p, Knob::CpuShares), "2048");
    assert_eq!(written(&p, Knob::CpuCfsPeriod), "100000");
    assert_eq!(written(&p, Knob::CpuCfsQuota), "200000");
    assert!(degraded_reason(&p, Knob::V1MemoryFloor).contains("v1 has no memory floor"));
    let r = degraded_reason(&p, Knob::MemorySoftLimit);
    assert!(r.contains("not protect"), "{r}");
    assert_eq!(
        find(&p, Knob::MemorySoftLimit).values(),
        [(1u64 << 30).to_string()]
    );
    assert_eq!(written(&p, Knob::MemoryLimit), (1u64 << 30).to_string());
    assert!(degraded_reason(&p, Knob::BlkioWeight).contains("CFQ"));
    assert_eq!(written(&p, Knob::BlkioReadBps), "254:0 0");
    assert!(matches!(
        find(&p, Knob::CpuFloor).action,
        PlanAction::Mechanism { enforced: true, .. }
    ));
    assert!(matches!(
        find(&p, Knob::IoReadFloor).action,
        PlanAction::Mechanism { enforced: true, .. }
    ));
    assert_eq!(written(&p, Knob::PidsMax), "512");
    // No v2 file is ever planned on v1.
    assert!(
        p.iter()
            .all(|k| k.knob.home() != crate::qos::knob::Home::V2),
        "{p:#?}"
    );

    let b = plan(
        &spec(
            QosClass::Burstable,
            r#"{"cpu":{"request":"500m","limit":"1"},"memory":{"request":"100Mi","limit":"200Mi"},"io":{"write":{"limit":"5M"}}}"#,
        ),
        &n,
        &v1_target(),
    );
    assert_eq!(written(&b, Knob::CpuShares), "512");
    assert_eq!(written(&b, Knob::CpuCfsQuota), "100000");
    assert!(degraded_reason(&b, Knob::V1MemoryHigh).contains("no memory.high"));
    assert_eq!(written(&b, Knob::BlkioWriteBps), "254:0 5000000");
    assert_eq!(written(&b, Knob::BlkioReadBps), "254:0 0");
    let be = plan(&spec(QosClass::BestEffort, "{}"), &n, &v1_target());
    assert_eq!(written(&be, Knob::CpuShares), "2");
    assert_eq!(written(&be, Knob::CpuCfsQuota), "-1");
    assert_eq!(written(&be, Knob::MemorySoftLimit), "0");
    assert_eq!(written(&be, Knob::MemoryLimit), "-1");
    let mut t = v1_target();
    t.files.insert("blkio.weight".into());
    let be = plan(&spec(QosClass::BestEffort, "{}"), &n, &t);
    assert_eq!(written(&be, Knob::BlkioWeight), "10");
}

#[test]
fn network_and_gpu_are_reported_not_enforced() {
    let s = spec(
        QosClass::GuaranteedPro,
        r#"{"cpu":{"request":"1"},"memory":{"request":"1Gi"},"network":{"egress":{"reservation":"10MB/s"}},"gpu":{"limit":1}}"#,
    );
    for mode in [CgroupMode::V2, CgroupMode::Hybrid] {
        let t = if mode == CgroupMode::V2 {
            v2_target()
        } else {
            v1_target()
        };
        let p = plan(&s, &node(mode), &t);
        assert!(degraded_reason(&p, Knob::NetworkEgress).contains("eBPF datapath"));
        assert!(p.iter().all(|k| k.knob != Knob::NetworkIngress));
        assert!(degraded_reason(&p, Knob::Gpu).contains("placement only"));
    }
}

/// The network knob says what the datapath does: enforced when it runs (a
/// floor needs the floor loop too), degraded with its reason when not.
#[test]
fn the_network_knob_reports_what_the_datapath_does() {
    let floor = spec(
        QosClass::GuaranteedPro,
        r#"{"cpu":{"request":"1"},"memory":{"request":"1Gi"},"network":{"egress":{"reservation":"10MB/s"}}}"#,
    );
    let cap = spec(
        QosClass::Burstable,
        r#"{"cpu":{"request":"100m"},"network":{"ingress":{"limit":"5MB/s"}}}"#,
    );
    let mut n = node(CgroupMode::V2);
    let t = v2_target();
    n.network = NetworkFacts::Off("[net] enabled = false".into());
    assert!(
        degraded_reason(&plan(&floor, &n, &t), Knob::NetworkEgress)
            .contains("[net] enabled = false")
    );
    n.network = NetworkFacts::On { floors: Ok(()) };
    let p = plan(&floor, &n, &t);
    let e = p.iter().find(|k| k.knob == Knob::NetworkEgress).unwrap();
    assert!(
        matches!(&e.action, PlanAction::Mechanism { enforced: true, how } if how.contains("floor loop")),
        "{e:?}"
    );
    n.network = NetworkFacts::On {
        floors: Err("net.egress_capacity is not set".into()),
    };
    assert!(
        degraded_reason(&plan(&floor, &n, &t), Knob::NetworkEgress).contains("egress_capacity")
    );
    // A cap alone needs no floor loop.
    let p = plan(&cap, &n, &t);
    let i = p.iter().find(|k| k.knob == Knob::NetworkIngress).unwrap();
    assert!(
        matches!(&i.action, PlanAction::Mechanism { enforced: true, how } if how.contains("token bucket")),
        "{i:?}"
    );
}

#[test]
fn every_class_plans_every_core_knob_once() {
    let profiles = [
        (QosClass::GuaranteedPro, GP),
        (
            QosClass::Guaranteed,
            r#"{"cpu":{"request":"1"},"memory":{"request":"1Gi"}}"#,
        ),
        (QosClass::Burstable, r#"{"memory":{"request":"1Gi"}}"#),
        (QosClass::BestEffort, "{}"),
    ];
    for (class, json) in profiles {
        let s = spec(class, json);
        let v2 = plan(&s, &node(CgroupMode::V2), &v2_target());
        for k in [
            Knob::CpuWeight,
            Knob::CpuMax,
            Knob::MemoryMin,
            Knob::MemoryLow,
            Knob::MemoryHigh,
            Knob::MemoryMax,
            Knob::IoWeight,
            Knob::IoMax,
            Knob::PidsMax,
        ] {
            assert_eq!(v2.iter().filter(|p| p.knob == k).count(), 1, "{class} {k}");
        }
        let v1 = plan(&s, &node(CgroupMode::Hybrid), &v1_target());
        for k in [
            Knob::CpuShares,
            Knob::CpuCfsQuota,
            Knob::MemorySoftLimit,
            Knob::MemoryLimit,
            Knob::BlkioWeight,
            Knob::BlkioReadBps,
            Knob::BlkioWriteBps,
            Knob::PidsMax,
        ] {
            assert_eq!(v1.iter().filter(|p| p.knob == k).count(), 1, "{class} {k}");
        }
        // Floors exist only for GuaranteedPro.
        let floors = v2
            .iter()
            .filter(|p| matches!(p.knob, Knob::CpuFloor | Knob::IoReadFloor))
            .count();
        assert_eq!(floors > 0, class == QosClass::GuaranteedPro, "{class}");
    }
}

#[test]
fn intermediate_floors_propagate() {
    assert_eq!(intermediate_weight(MilliCpu::ZERO, 4, 300), 100);
    // 3 siblings of weight 100 on 4 CPUs: 2 cores need w >= 300*2/2 = 300.
    assert_eq!(intermediate_weight(MilliCpu(2000), 4, 300), 300);
    assert_eq!(intermediate_weight(MilliCpu(3900), 4, 300), 10_000);
    assert_eq!(intermediate_weight(MilliCpu(4000), 4, 300), 10_000);
    let children = [
        ChildFloors {
            memory_min: 512 << 20,
            memory_low: 1 << 30,
            cpu: MilliCpu(1500),
        },
        ChildFloors {
            memory_min: 0,
            memory_low: 256 << 20,
            cpu: MilliCpu::ZERO,
        },
    ];
    let p = plan_intermediate(&children, &node(CgroupMode::V2), &v2_target(), 200);
    assert_eq!(written(&p, Knob::MemoryMin), (512u64 << 20).to_string());
    assert_eq!(
        written(&p, Knob::MemoryLow),
        ((1u64 << 30) + (256 << 20)).to_string()
    );
    assert_eq!(written(&p, Knob::CpuWeight), "120");
    let p = plan_intermediate(&children, &node(CgroupMode::Hybrid), &v1_target(), 200);
    assert_eq!(written(&p, Knob::CpuShares), (120 * 1024 / 100).to_string());
    assert_eq!(p.len(), 1);
}
