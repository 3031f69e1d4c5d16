//! BPF_PROG_TEST_RUN verdict tests of the network programs: exact accounting, the token
//! bucket's three zones (conforming: pass; small debt: pass + congestion notification on
//! egress, ECN CE on ingress; beyond: drop + CN), refill at the configured rate, and the
//! events the programs emit. Nothing is attached; the kernel runs the programs on synthetic
//! skbs whose socket belongs to this process's cgroup, which the tests register.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ebpf_support;

use std::time::Duration;

use daros_ebpf::{
    Cap, CgroupId, CgroupRoot, Direction, NetDatapath, NetEventKind, NetLimits, NetOptions,
    net::{Verdict, ipv4_tcp_packet},
};
use ebpf_support::{TestPins, now_ns};

// 1 MB/s: one packet costs 1.5 ms of bucket time, far more than a test run takes even on a
// loaded machine, so the tests outpace the rate as a real sender would.
const RATE: u64 = 1_000_000;
const PAYLOAD: usize = 1448;
const SKB_LEN: u64 = 20 + 20 + PAYLOAD as u64; // what the program sees: frame - Ethernet header

fn me() -> CgroupId {
    let root = CgroupRoot::detect().unwrap();
    CgroupId::of_path(&root.current().unwrap()).unwrap()
}

fn open(pins: &TestPins) -> NetDatapath {
    NetDatapath::open(&NetOptions {
        pins: pins.0.clone(),
        max_slots: 64,
    })
    .unwrap()
}

/// Runs single packets until the verdict changes away from `zone`; returns how many got it
/// and the verdict that ended the run, with the monotonic time of the first and last run.
fn run_zone(
    net: &NetDatapath,
    dir: Direction,
    packet: &[u8],
    zone: Verdict,
) -> (u64, Verdict, u64, u64) {
    let start = now_ns();
    let mut n = 0;
    loop {
        let v = net.test_run(dir, packet, 1).unwrap().verdict;
        if v != zone {
            return (n, v, start, now_ns());
        }
        n += 1;
        assert!(n < 100_000, "verdict stuck at {zone:?}");
    }
}

/// Packets the bucket can pay for in `ns` at RATE.
fn packets_in(ns: u64) -> f64 {
    ns as f64 * RATE as f64 / 1e9 / SKB_LEN as f64
}

#[test]
fn accounting_counts_every_byte_and_packet_exactly() {
    let pins = TestPins::new("verdict-acct");
    let mut net = open(&pins);
    let me = me();
    let packet = ipv4_tcp_packet(PAYLOAD, false);
    // unregistered: passes, counted as unknown
    assert_eq!(
        net.test_run(Direction::Egress, &packet, 10)
            .unwrap()
            .verdict,
        Verdict::Pass
    );
    assert_eq!(net.reader().stats().unwrap().unknown_packets, 10);
    net.set_workload(me, &NetLimits::accounting()).unwrap();
    assert_eq!(
        net.test_run(Direction::Egress, &packet, 1000)
            .unwrap()
            .verdict,
        Verdict::Pass
    );
    assert_eq!(
        net.test_run(Direction::Ingress, &packet, 7)
            .unwrap()
            .verdict,
        Verdict::Pass
    );
    let c = net.reader().counters(me).unwrap();
    assert_eq!((c.egress.packets, c.egress.bytes), (1000, 1000 * SKB_LEN));
    assert_eq!((c.ingress.packets, c.ingress.bytes), (7, 7 * SKB_LEN));
    assert_eq!(c.egress.drop_packets + c.egress.marked_packets, 0);
    // re-registering with a cap keeps the counters
    net.set_workload(
        me,
        &NetLimits {
            egress: Some(Cap::rate(RATE)),
            ..NetLimits::default()
        },
    )
    .unwrap();
    assert_eq!(net.reader().counters(me).unwrap().egress.packets, 1000);
    // removal and re-registration starts from zero
    assert!(net.remove_workload(me).unwrap());
    net.set_workload(me, &NetLimits::accounting()).unwrap();
    assert_eq!(net.reader().counters(me).unwrap(), Default::default());
}

#[test]
fn egress_bucket_passes_then_notifies_then_drops_and_refills_at_the_rate() {
    let pins = TestPins::new("verdict-egress");
    let mut net = open(&pins);
    let me = me();
    let mut events = net.take_events().unwrap();
    let cap = Cap::rate(RATE);
    let burst_ns = cap.effective_burst() * 1_000_000_000 / RATE;
    net.set_workload(
        me,
        &NetLimits {
            egress: Some(cap),
            ..NetLimits::default()
        },
    )
    .unwrap();
    let packet = ipv4_tcp_packet(PAYLOAD, false);

    // A full bucket conforms for burst_ns worth of packets (plus what refills meanwhile).
    let (pass, next, t0, t1) = run_zone(&net, Direction::Egress, &packet, Verdict::Pass);
    assert_eq!(
        next,
        Verdict::PassCn,
        "after the burst: pass with congestion notification"
    );
    let expect = packets_in(burst_ns);
    let refill = packets_in(t1 - t0);
    assert!(
        (pass as f64) >= expect.floor() && (pass as f64) <= expect + refill + 2.0,
        "{pass} conforming, expected {expect:.1} (+{refill:.1} refilled)"
    );
    // The debt window (as deep as the burst) passes with CN, then packets are dropped with CN.
    let (cn, next, t0, t1) = run_zone(&net, Direction::Egress, &packet, Verdict::PassCn);
    assert_eq!(next, Verdict::DropCn);
    let refill = packets_in(t1 - t0);
    assert!(
        (cn as f64) >= expect.floor() - 1.0 && (cn as f64) <= expect + refill + 2.0,
        "{cn} in debt, expected {expect:.1}"
    );
    // Drops are not charged: the next packet that passes (with CN) is the first one the
    // rate paid for again. From then on we count what the rate pays for.
    let (_, next, _, t_drain) = run_zone(&net, Direction::Egress, &packet, Verdict::DropCn);
    assert_eq!(next, Verdict::PassCn);

    // Refill: after waiting, exactly as many packets pass as the rate paid for meanwhile.
    std::thread::sleep(Duration::from_millis(100));
    let mut passed = 0u64;
    let t_end;
    loop {
        let v = net.test_run(Direction::Egress, &packet, 1).unwrap().verdict;
        if !v.passes() {
            t_end = now_ns();
            break;
        }
        passed += 1;
    }
    let paid = packets_in(t_end - t_drain);
    assert!(
        (passed as f64 - paid).abs() <= 3.0,
        "{passed} passed after refill, the rate paid for {paid:.1}"
    );

    let c = net.reader().counters(me).unwrap().egress;
    // + the PassCn that ended the conforming run + the one that ended the drops
    assert_eq!(c.packets, pass + cn + passed + 2);
    assert!(c.marked_packets >= cn && c.drop_packets >= 1, "{c:?}");
    assert_eq!(c.bytes, c.packets * SKB_LEN);

    let evs = events.drain();
    assert!(
        evs.iter().any(|e| e.cgroup == me
            && e.direction == Direction::Egress
            && e.kind == NetEventKind::ThrottleStart),
        "{evs:?}"
    );
    assert!(
        evs.iter()
            .any(|e| matches!(e.kind, NetEventKind::Drops { count } if count >= 1)),
        "{evs:?}"
    );
    assert_eq!(
        evs.iter()
            .filter(|e| e.kind == NetEventKind::ThrottleStart)
            .count(),
        1,
        "one start per episode: {evs:?}"
    );

    // A long pause refills the whole bucket and ends the throttle episode.
    std::thread::sleep(Duration::from_millis(3 * burst_ns / 1_000_000));
    let (pass, _, t0, t1) = run_zone(&net, Direction::Egress, &packet, Verdict::Pass);
    assert!(
        (pass as f64) >= expect.floor() && (pass as f64) <= expect + packets_in(t1 - t0) + 2.0,
        "{pass} after full refill"
    );
    let evs = events.drain();
    assert!(evs.iter().any(|e| matches!(e.kind, NetEventKind::ThrottleStop { duration } if duration > Duration::ZERO)), "{evs:?}");
    assert_eq!(events.stats().snapshot().throttle_stops, 1);
}

#[test]
fn ingress_marks_ecn_in_debt_and_drops_beyond() {
    let pins = TestPins::new("verdict-ingress");
    let mut net = open(&pins);
    let me = me();
    let cap = Cap::rate(RATE);
    net.set_workload(
        me,
        &NetLimits {
            ingress: Some(cap),
            ingress_ecn: true,
            ..NetLimits::default()
        },
    )
    .unwrap();
    let packet = ipv4_tcp_packet(PAYLOAD, true);
    let expect = packets_in(cap.effective_burst() * 1_000_000_000 / RATE);

    let mut verdicts = Vec::new();
    let mut ce_marked = 0;
    for _ in 0..(3.0 * expect) as usize {
        let (o, out) = net.test_run_output(Direction::Ingress, &packet).unwrap();
        if o.verdict == Verdict::Pass && out.len() > 15 && out[15] & 3 == 3 {
            ce_marked += 1;
        }
        verdicts.push(o.verdict);
    }
    // ingress has no congestion-notification bit: only pass and drop
    assert!(
        verdicts
            .iter()
            .all(|v| matches!(v, Verdict::Pass | Verdict::Drop)),
        "{verdicts:?}"
    );
    let first_drop = verdicts
        .iter()
        .position(|v| *v == Verdict::Drop)
        .expect("drops beyond the debt limit");
    assert!(
        first_drop as f64 >= 2.0 * expect.floor() - 1.0,
        "drops start after burst + debt: {first_drop}"
    );
    let c = net.reader().counters(me).unwrap().ingress;
    assert!(
        ce_marked as f64 >= expect.floor() - 1.0,
        "CE set on ECT packets in debt: {ce_marked}"
    );
    assert_eq!(c.marked_packets, ce_marked);
    assert_eq!(
        c.drop_packets as usize,
        verdicts.iter().filter(|v| **v == Verdict::Drop).count()
    );

    // without ECN the debt zone passes unmarked (re-registered: a full bucket again)
    net.remove_workload(me).unwrap();
    net.set_workload(
        me,
        &NetLimits {
            ingress: Some(cap),
            ingress_ecn: false,
            ..NetLimits::default()
        },
    )
    .unwrap();
    for _ in 0..(1.5 * expect) as usize {
        let (o, out) = net.test_run_output(Direction::Ingress, &packet).unwrap();
        assert_eq!(o.verdict, Verdict::Pass);
        assert_eq!(out[15] & 3, 2, "still ECT(0), not CE");
    }
}

#[test]
fn members_share_their_workload_and_bad_input_is_refused() {
    let pins = TestPins::new("verdict-members");
    let mut net = open(&pins);
    let me = me();
    let other = CgroupId(me.0 + 1_000_000);
    net.set_workload(other, &NetLimits::accounting()).unwrap();
    net.add_member(other, me).unwrap();
    let packet = ipv4_tcp_packet(100, false);
    net.test_run(Direction::Egress, &packet, 5).unwrap();
    let w = net.reader().workload(other).unwrap();
    assert_eq!(
        w.counters.egress.packets, 5,
        "packets of a member count for its workload"
    );
    assert_eq!(w.members, vec![me]);
    // a member cannot be registered as a workload of its own, nor join another one
    let e = net.set_workload(me, &NetLimits::accounting()).unwrap_err();
    assert!(e.to_string().contains("already belongs to workload"), "{e}");
    // invalid caps are refused with the field named, and the old config stays
    let e = net
        .set_workload(
            other,
            &NetLimits {
                egress: Some(Cap::rate(5)),
                ..NetLimits::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("rate_bps = 5"), "{e}");
    assert_eq!(
        net.reader().workload(other).unwrap().egress.effective_bps,
        None
    );
    assert!(net.remove_member(me).unwrap());
    net.test_run(Direction::Egress, &packet, 5).unwrap();
    assert_eq!(
        net.reader()
            .workload(other)
            .unwrap()
            .counters
            .egress
            .packets,
        5
    );
    assert_eq!(net.reader().stats().unwrap().unknown_packets, 5);
}
