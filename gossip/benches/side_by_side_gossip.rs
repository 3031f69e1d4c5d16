//! Gossip beside Serf, in one run: N D-AROS membership instances (darosd's SWIM membership, in
//! this process) and then N `serf agent` processes, on the same loopback ports, each in the same scenario: all alive
//! everywhere, 15 s to settle, an idle window, one update at a time until every member has it, a
//! window in which every member republishes a value every 5 s, and members killed without a word
//! until every live member declares them dead. Bytes are counted on the wire by nftables for all.
//! Needs root, nftables and serf (`scripts/bench-side-by-side.sh gossip` installs them).
//!
//! `cargo bench -p daros-gossip --bench side_by_side_gossip -- [nodes] [window_s] [updates] [kills]`
//!
//! `DAROS_GOSSIP_ONLY=daros` (or `serf`, or both comma-separated) runs only those sides and prints
//! each one's figures, no table: for sizes at which the others do not fit on the machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "side_gossip/daros.rs"]
mod daros;
#[path = "side_gossip/driver.rs"]
mod driver;
#[path = "side_gossip/node_info.rs"]
mod node_info;
#[path = "side_gossip/serf.rs"]
mod serf;
#[path = "side_gossip/wire.rs"]
mod wire;

#[path = "side_gossip/scenario.rs"]
mod scenario;

use std::time::Duration;

use scenario::{Figures, Scenario, TICK, Window, round};

fn row(name: &str, [d, s]: [f64; 2], unit: &str) {
    let r = if s > 0.0 { d / s } else { f64::NAN };
    println!("| {name} | {d:.2} {unit} | {s:.2} {unit} | {r:.2} |");
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = args.first().copied().unwrap_or(100);
    assert!(nodes >= 8, "at least 8 nodes");
    let sc = Scenario {
        nodes,
        window: Duration::from_secs(args.get(1).copied().unwrap_or(20) as u64),
        settle: Duration::from_secs(15),
        updates: args.get(2).copied().unwrap_or(15),
        kills: args.get(3).copied().unwrap_or(3),
    };
    if let Ok(only) = std::env::var("DAROS_GOSSIP_ONLY") {
        run_only(&sc, &only);
        return;
    }
    let load0 = wire::load();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let d = rt.block_on(daros::run(&sc));
    eprintln!("D-AROS done: {}", d.summary());
    drop(rt);
    let load1 = wire::load();
    let s = serf::run(&sc);
    eprintln!("Serf done: {}", s.summary());
    let load2 = wire::load();
    let kib = 1024.0;
    println!(
        "side by side: gossip, {} members each on loopback; load {load0} → {load1} → {load2}; D-AROS: SWIM (foca), 1 s probes, suspicion ×4, sealed; {} LAN profile, AES-GCM keyring",
        d.nodes,
        serf::version()
    );
    println!(
        "| {} members | D-AROS | Serf | ratio D-AROS ÷ Serf |",
        d.nodes
    );
    println!("|---|---|---|---|");
    let all = [&d, &s];
    let each = |f: &dyn Fn(&Figures) -> f64| -> [f64; 2] { all.map(f) };
    row(
        "update seen by all, median",
        each(&|x| wire::pct(&x.update_ms, 0.5)),
        "ms",
    );
    row(
        "update seen by all, p99",
        each(&|x| wire::pct(&x.update_ms, 0.99)),
        "ms",
    );
    row(
        "killed member dead everywhere, median",
        each(&|x| wire::pct(&x.detect_ms, 0.5)),
        "ms",
    );
    row(
        "killed member dead everywhere, max",
        each(&|x| wire::pct(&x.detect_ms, 1.0)),
        "ms",
    );
    row(
        "bytes per member, idle",
        each(&|x| x.idle.bytes_per_node_s / kib),
        "KiB/s",
    );
    row(
        "bytes per member, each republishing every 5 s",
        each(&|x| x.churn.bytes_per_node_s / kib),
        "KiB/s",
    );
    row(
        "CPU per member, idle",
        each(&|x| x.idle.cpu_cores_per_agent * 1e3),
        "m",
    );
    row(
        "CPU per member, republishing",
        each(&|x| x.churn.cpu_cores_per_agent * 1e3),
        "m",
    );
    row(
        "memory per member",
        each(&|x| x.rss_per_agent / 1048576.0),
        "MiB",
    );
    row(
        "all alive everywhere, from the first start",
        each(&|x| x.cold_start_s),
        "s",
    );
    println!(
        "starting all members took {:.1} s (D-AROS) and {:.1} s (Serf: a process each, joined through RPC); D-AROS's own count of sealed bytes sent: idle {:.1}, republishing {:.1} KiB/s per member (nftables counts IP bytes both ways); D-AROS polls its members' views every {} ms, Serf's agents stream their events",
        d.started_s,
        s.started_s,
        d.idle.own_bytes_per_node_s.unwrap_or(0.0) / kib,
        d.churn.own_bytes_per_node_s.unwrap_or(0.0) / kib,
        driver::POLL.as_millis()
    );
    println!(
        "samples: D-AROS updates {:?} kills {:?}; Serf updates {:?} kills {:?}",
        round(&d.update_ms),
        round(&d.detect_ms),
        round(&s.update_ms),
        round(&s.detect_ms)
    );
}

/// Runs the named sides one after the other and prints each one's figures.
fn run_only(sc: &Scenario, only: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for side in only.split(',').map(str::trim) {
        let load0 = wire::load();
        let f = match side {
            "daros" => rt.block_on(daros::run(sc)),
            "serf" => serf::run(sc),
            other => panic!("DAROS_GOSSIP_ONLY: unknown side {other:?} (daros, serf)"),
        };
        let load1 = wire::load();
        println!(
            "{side}, {} members, load {load0} → {load1}: all alive everywhere {:.1} s (started in {:.1} s); update seen by all median / p99 {:.0} / {:.0} ms; killed member dead everywhere median / max {:.0} / {:.0} ms; bytes per member idle {:.2} KiB/s, republishing every 5 s {:.2} KiB/s; CPU per member idle / republishing {:.2} / {:.2} m; {:.2} MiB per member",
            f.nodes,
            f.cold_start_s,
            f.started_s,
            wire::pct(&f.update_ms, 0.5),
            wire::pct(&f.update_ms, 0.99),
            wire::pct(&f.detect_ms, 0.5),
            wire::pct(&f.detect_ms, 1.0),
            f.idle.bytes_per_node_s / 1024.0,
            f.churn.bytes_per_node_s / 1024.0,
            f.idle.cpu_cores_per_agent * 1e3,
            f.churn.cpu_cores_per_agent * 1e3,
            f.rss_per_agent / 1048576.0
        );
        println!(
            "samples: updates {:?} kills {:?}",
            round(&f.update_ms),
            round(&f.detect_ms)
        );
    }
}
