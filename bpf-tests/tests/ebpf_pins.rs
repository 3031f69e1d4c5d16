//! What a start does with the pins of an earlier one, in process: the same build reopens; a
//! build with the same map layout keeps the maps and swaps its programs into the pinned links
//! (BPF_LINK_UPDATE); an incompatible layout is replaced. One owner at a time, and attach
//! points that contain one another are refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ebpf_support;

use std::{process::Command, time::Duration};

use aya::maps::{Array, Map, MapData};
use daros_ebpf::{
    CgroupId, CgroupRoot, Direction, Error, NetDatapath, NetLimits, NetOptions, OpenOutcome,
    SchedDatapath, SchedOptions, abi::Meta, net::ipv4_tcp_packet,
};
use ebpf_support::{TestCgroup, TestPins, wait_for};

fn opts(pins: &TestPins) -> NetOptions {
    NetOptions {
        pins: pins.0.clone(),
        max_slots: 64,
    }
}

fn me() -> CgroupId {
    CgroupId::of_path(&CgroupRoot::detect().unwrap().current().unwrap()).unwrap()
}

fn edit_meta(pins: &TestPins, f: impl FnOnce(&mut Meta)) {
    let data = MapData::from_pin(pins.0.sub("net").join("cg_net_meta")).unwrap();
    let mut meta: Array<MapData, Meta> = Array::try_from(Map::Array(data)).unwrap();
    let mut m = meta.get(&0, 0).unwrap();
    f(&mut m);
    meta.set(0, m, 0).unwrap();
}

/// Program ids attached to `cg` for `attach_type` (bpftool's view of the kernel).
fn attached_ids(cg: &TestCgroup, attach_type: &str) -> Vec<u32> {
    let out = Command::new("bpftool")
        .args(["-j", "cgroup", "show"])
        .arg(&cg.path)
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Array(vec![]));
    v.as_array()
        .unwrap()
        .iter()
        .filter(|p| p["attach_type"] == attach_type)
        .map(|p| p["id"].as_u64().unwrap() as u32)
        .collect()
}

/// The cgroup a pinned link is attached to; 0 once its cgroup is gone (severed).
fn link_cgroup_id(pin: &std::path::Path) -> Option<u64> {
    let out = Command::new("bpftool")
        .args(["-j", "link", "show", "pinned"])
        .arg(pin)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["cgroup_id"].as_u64()
}

fn pinned_prog_id(pins: &TestPins, name: &str) -> u32 {
    let path = pins.0.sub("net").join(format!("prog_{name}"));
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show", "pinned"])
        .arg(path)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["id"].as_u64().unwrap() as u32
}

#[test]
fn same_build_reopens_newer_build_upgrades_in_place_incompatible_is_replaced() {
    let pins = TestPins::new("pins-upgrade");
    let cg = TestCgroup::new("pins-upgrade");
    let me = me();
    let packet = ipv4_tcp_packet(100, false);

    let mut net = NetDatapath::open(&opts(&pins)).unwrap();
    assert_eq!(net.outcome(), &OpenOutcome::Fresh);
    net.attach(&cg.path).unwrap();
    net.set_workload(me, &NetLimits::accounting()).unwrap();
    net.test_run(Direction::Egress, &packet, 10).unwrap();
    let old_prog = pinned_prog_id(&pins, "cg_egress");
    assert_eq!(attached_ids(&cg, "cgroup_inet_egress"), vec![old_prog]);
    drop(net);

    // same build
    let mut net = NetDatapath::open(&opts(&pins)).unwrap();
    assert_eq!(net.outcome(), &OpenOutcome::Reopened);
    assert_eq!(net.reader().counters(me).unwrap().egress.packets, 10);
    // an attach point removed while nobody owns the pins leaves a severed link behind
    let gone = TestCgroup::new("pins-upgrade-gone");
    let gone_id = net.attach(&gone.path).unwrap();
    drop(net);
    let gone_link = pins
        .0
        .sub("net")
        .join(format!("links/{}-egress", gone_id.0));
    drop(gone);
    wait_for(
        "the removed cgroup's link to be severed",
        Duration::from_secs(10),
        || (link_cgroup_id(&gone_link) == Some(0)).then_some(()),
    );

    // pins of another build with the same layout: maps kept, programs swapped under the links
    edit_meta(&pins, |m| m.object_hash ^= 1);
    let net = NetDatapath::open(&opts(&pins)).unwrap();
    assert!(
        matches!(net.outcome(), OpenOutcome::Upgraded { .. }),
        "{:?}",
        net.outcome()
    );
    assert!(!gone_link.exists(), "the severed link was unpinned");
    let new_prog = pinned_prog_id(&pins, "cg_egress");
    assert_ne!(new_prog, old_prog);
    assert_eq!(
        attached_ids(&cg, "cgroup_inet_egress"),
        vec![new_prog],
        "the link runs the new program"
    );
    assert_eq!(
        net.attachments().unwrap().into_iter().collect::<Vec<_>>(),
        vec![cg.id()]
    );
    assert_eq!(
        net.reader().counters(me).unwrap().egress.packets,
        10,
        "counters kept"
    );
    net.test_run(Direction::Egress, &packet, 5).unwrap();
    assert_eq!(net.reader().counters(me).unwrap().egress.packets, 15);
    drop(net);

    // an incompatible layout: everything replaced, links gone, counters restart
    edit_meta(&pins, |m| m.abi = 0);
    let net = NetDatapath::open(&opts(&pins)).unwrap();
    assert!(
        matches!(net.outcome(), OpenOutcome::Replaced { reason } if reason.contains("map layout version 0")),
        "{:?}",
        net.outcome()
    );
    assert!(net.reader().workloads().unwrap().is_empty());
    assert!(net.attachments().unwrap().is_empty());
    assert!(
        attached_ids(&cg, "cgroup_inet_egress").is_empty(),
        "old links detached"
    );
    drop(net);

    // a different slot count is a different layout too
    let net = NetDatapath::open(&NetOptions {
        max_slots: 128,
        ..opts(&pins)
    })
    .unwrap();
    assert!(
        matches!(net.outcome(), OpenOutcome::Replaced { reason } if reason.contains("slots")),
        "{:?}",
        net.outcome()
    );
}

#[test]
fn one_owner_at_a_time_and_nested_attach_points_are_refused() {
    let pins = TestPins::new("pins-owner");
    let mut net = NetDatapath::open(&opts(&pins)).unwrap();
    let second = NetDatapath::open(&opts(&pins)).unwrap_err();
    assert!(matches!(second, Error::Busy(_)), "{second}");
    assert!(
        second
            .to_string()
            .contains("owned by another running process")
    );
    // readers need no lock
    assert!(daros_ebpf::NetReader::open(&pins.0).is_ok());
    // cleanup refuses while the owner runs
    let busy = daros_ebpf::cleanup(&pins.0, false).unwrap_err();
    assert!(matches!(busy, Error::Busy(_)), "{busy}");

    let parent = TestCgroup::new("pins-nest");
    let child = parent.child("a");
    let sibling = TestCgroup::new("pins-sibling");
    net.attach(&parent.path).unwrap();
    net.attach(&parent.path).unwrap(); // idempotent
    let e = net.attach(&child.path).unwrap_err();
    assert!(
        matches!(e, Error::OverlappingAttach { other, .. } if other == parent.id()),
        "{e}"
    );
    net.detach(parent.id()).unwrap();
    net.attach(&child.path).unwrap();
    let e = net.attach(&parent.path).unwrap_err();
    assert!(
        matches!(e, Error::OverlappingAttach { other, .. } if other == child.id()),
        "{e}"
    );
    net.attach(&sibling.path).unwrap();
    assert_eq!(net.attachments().unwrap().len(), 2);
    let e = net.attach(std::path::Path::new("/proc")).unwrap_err();
    assert!(matches!(e, Error::NotCgroup2(_)), "{e}");
    drop(net);
    assert!(daros_ebpf::cleanup(&pins.0, false).unwrap() > 0);
    assert!(attached_ids(&sibling, "cgroup_inet_ingress").is_empty());
}

#[test]
fn scheduler_datapath_reopens_with_its_statistics() {
    let pins = TestPins::new("pins-sched");
    let sched = SchedDatapath::open(&SchedOptions {
        pins: pins.0.clone(),
    })
    .unwrap();
    assert_eq!(sched.outcome(), &OpenOutcome::Fresh);
    let me = me();
    let spin_until = std::time::Instant::now() + std::time::Duration::from_millis(50);
    while std::time::Instant::now() < spin_until {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
    let before = ebpf_support::wait_for(
        "stats of this test's cgroup",
        std::time::Duration::from_secs(5),
        || sched.reader().get(me).unwrap().filter(|s| s.oncpu_ns > 0),
    );
    drop(sched);
    let sched = SchedDatapath::open(&SchedOptions {
        pins: pins.0.clone(),
    })
    .unwrap();
    assert_eq!(sched.outcome(), &OpenOutcome::Reopened);
    let after = sched.reader().get(me).unwrap().unwrap();
    assert!(
        after.oncpu_ns >= before.oncpu_ns,
        "statistics kept across the reopen"
    );
}
