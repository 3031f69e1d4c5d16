//! Real TCP traffic from processes in test cgroups, inside a private network namespace (so
//! its `lo` carries nothing else): the counters equal what the kernel put on the wire, and
//! egress and ingress caps of 10 MB/s and 50 MB/s (or a third of what the machine moves
//! uncapped, if less: see `binding`) hold within ±10% as measured by the receiving
//! application.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ebpf_support;

use std::time::Duration;

use daros_ebpf::{Cap, NetDatapath, NetLimits, NetOptions};
use ebpf_support::{CpuUse, Receiver, TestCgroup, TestNetns, TestPins, send_report, start_sender};

const MB: u64 = 1_000_000;

struct Setup {
    _pins: TestPins,
    net: NetDatapath,
    ns: TestNetns,
    parent: TestCgroup,
    snd: TestCgroup,
    rcv: TestCgroup,
}

fn setup(what: &str) -> Setup {
    let pins = TestPins::new(what);
    let mut net = NetDatapath::open(&NetOptions {
        pins: pins.0.clone(),
        max_slots: 64,
    })
    .unwrap();
    let ns = TestNetns::new(what);
    let parent = TestCgroup::new(what);
    let snd = parent.child("snd");
    let rcv = parent.child("rcv");
    net.attach(&parent.path).unwrap();
    net.set_workload(snd.id(), &NetLimits::accounting())
        .unwrap();
    net.set_workload(rcv.id(), &NetLimits::accounting())
        .unwrap();
    Setup {
        _pins: pins,
        net,
        ns,
        parent,
        snd,
        rcv,
    }
}

#[test]
fn counters_equal_the_bytes_on_the_wire_within_1_percent() {
    let s = setup("traffic-acct");
    let payload = 50 * MB;
    let rx = Receiver::start(&s.rcv.path, Some(&s.ns.name), "127.0.0.1:0", 1);
    let out = start_sender(
        &s.snd.path,
        Some(&s.ns.name),
        &rx.addr,
        &["--bytes", &payload.to_string()],
    )
    .finish(Duration::from_secs(60));
    let sent = send_report(&out);
    let got = rx.finish(Duration::from_secs(60));
    assert_eq!((sent.bytes, got.bytes), (payload, payload));

    let snd = s.net.reader().counters(s.snd.id()).unwrap();
    let rcv = s.net.reader().counters(s.rcv.id()).unwrap();
    // lo in a fresh namespace carried exactly this connection; its counters include the
    // 14-byte Ethernet header that cgroup_skb (L3) does not see.
    let (lo_bytes, lo_packets) = (s.ns.stat("lo", "tx_bytes"), s.ns.stat("lo", "tx_packets"));
    let wire_l3 = lo_bytes - 14 * lo_packets;
    let ours = snd.egress.bytes + rcv.egress.bytes;
    println!(
        "payload {payload} B, {} B retransmitted; egress counted: sender {} B in {} skbs, receiver {} B in {} skbs; lo: {lo_bytes} B in {lo_packets} packets",
        sent.retrans_bytes,
        snd.egress.bytes,
        snd.egress.packets,
        rcv.egress.bytes,
        rcv.egress.packets
    );
    let within = |a: u64, b: u64| (a as f64 - b as f64).abs() / b as f64;
    assert!(
        within(ours, wire_l3) < 0.01,
        "counted {ours} B, lo carried {wire_l3} B of L3"
    );
    // Egress sees TSO/GSO skbs before segmentation (lo's MTU splits those above 64 KiB);
    // ingress sees what lo delivered, packet for packet.
    assert!(within(snd.ingress.packets + rcv.ingress.packets, lo_packets) < 0.01);
    // the sender's counter = payload + what TCP sent again + headers (TSO/GSO skbs carry
    // up to 64 KiB each)
    let on_wire = payload + sent.retrans_bytes;
    assert!(
        snd.egress.bytes >= on_wire && within(snd.egress.bytes, on_wire) < 0.01,
        "{} vs {payload} + {} retransmitted",
        snd.egress.bytes,
        sent.retrans_bytes
    );
    // what one side sends the other receives, skb for skb
    assert!(within(rcv.ingress.bytes, snd.egress.bytes) < 0.01);
    assert!(within(snd.ingress.bytes, rcv.egress.bytes) < 0.01);
    assert_eq!(snd.egress.drop_packets + rcv.ingress.drop_packets, 0);
    // the parent (attach point, not registered) saw nothing of its own
    let _ = &s.parent;
}

/// Runs an unpaced sender for `secs` and returns the receiver's rate from one second after the
/// first byte to the sender's end (the bucket's initial depth and the socket buffers are spent
/// by then; the bucket's depth of ~270 ms moves a 5 s average by at most ~5%).
fn capped_rate(s: &Setup, secs: f64) -> f64 {
    let rx = Receiver::start(&s.rcv.path, Some(&s.ns.name), "127.0.0.1:0", 1);
    let out = start_sender(
        &s.snd.path,
        Some(&s.ns.name),
        &rx.addr,
        &["--secs", &secs.to_string()],
    )
    .finish(Duration::from_secs(60));
    let sent = send_report(&out);
    let got = rx.finish(Duration::from_secs(60));
    got.rate(got.first_byte_ns() + 1_000_000_000, sent.end_ns)
}

/// What one unpaced connection moves through the setup without a cap.
fn uncapped_rate(s: &mut Setup) -> f64 {
    for w in [s.snd.id(), s.rcv.id()] {
        s.net.set_workload(w, &NetLimits::accounting()).unwrap();
    }
    let r = capped_rate(s, 3.0);
    println!("uncapped: {:.1} MB/s", r / 1e6);
    r
}

/// The cap to test for `rate`: `rate` itself where the machine moves at least three times
/// as much, else a third of what it moves (a cap shows it holds only where it binds, and
/// the sender needs room to spare). On the host one loopback connection moves hundreds of
/// MB/s; under TCG (the cgroup-v2 VM) 20-50 MB/s depending on the host's load, so there the
/// caps are tested at 7-16 MB/s (docs/ebpf.md).
fn binding(rate: u64, uncapped: f64) -> u64 {
    if uncapped >= 3.0 * rate as f64 {
        rate
    } else {
        let r = (uncapped / 3.0) as u64;
        println!(
            "this machine moves {:.1} MB/s uncapped: the {} MB/s cap is tested at {:.1} MB/s",
            uncapped / 1e6,
            rate / MB,
            r as f64 / 1e6
        );
        r
    }
}

#[test]
fn egress_caps_hold_within_10_percent() {
    let mut s = setup("traffic-egress");
    let uncapped = uncapped_rate(&mut s);
    for rate in [10 * MB, 50 * MB].map(|r| binding(r, uncapped)) {
        s.net
            .set_workload(
                s.snd.id(),
                &NetLimits {
                    egress: Some(Cap::rate(rate)),
                    ..NetLimits::default()
                },
            )
            .unwrap();
        let before = s.net.reader().counters(s.snd.id()).unwrap().egress;
        let cpu = CpuUse::now();
        let got = capped_rate(&s, 6.0);
        let c = s
            .net
            .reader()
            .counters(s.snd.id())
            .unwrap()
            .egress
            .since(&before);
        let err = (got - rate as f64) / rate as f64;
        println!(
            "egress cap {:.1} MB/s: received {:.2} MB/s ({:+.1}%); marked {} dropped {} skbs",
            rate as f64 / 1e6,
            got / 1e6,
            err * 100.0,
            c.marked_packets,
            c.drop_packets
        );
        assert!(
            err.abs() <= 0.10,
            "egress cap {rate} B/s, got {got:.0} B/s; busiest meanwhile: {}",
            cpu.busiest_since(6)
        );
        assert!(
            c.marked_packets + c.drop_packets > 0,
            "the cap acted: {c:?}"
        );
    }
}

#[test]
fn ingress_caps_hold_within_10_percent() {
    let mut s = setup("traffic-ingress");
    let uncapped = uncapped_rate(&mut s);
    for rate in [10 * MB, 50 * MB].map(|r| binding(r, uncapped)) {
        s.net
            .set_workload(
                s.rcv.id(),
                &NetLimits {
                    ingress: Some(Cap::rate(rate)),
                    ..NetLimits::default()
                },
            )
            .unwrap();
        let before = s.net.reader().counters(s.rcv.id()).unwrap().ingress;
        let cpu = CpuUse::now();
        let got = capped_rate(&s, 6.0);
        let c = s
            .net
            .reader()
            .counters(s.rcv.id())
            .unwrap()
            .ingress
            .since(&before);
        let err = (got - rate as f64) / rate as f64;
        println!(
            "ingress cap {:.1} MB/s: received {:.2} MB/s ({:+.1}%); passed in debt {} dropped {} skbs",
            rate as f64 / 1e6,
            got / 1e6,
            err * 100.0,
            c.marked_packets,
            c.drop_packets
        );
        assert!(
            err.abs() <= 0.10,
            "ingress cap {rate} B/s, got {got:.0} B/s; busiest meanwhile: {}",
            cpu.busiest_since(6)
        );
        assert!(
            c.marked_packets + c.drop_packets > 0,
            "the cap acted: {c:?}"
        );
    }
}
