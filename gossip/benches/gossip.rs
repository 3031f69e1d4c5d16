//! Gossip at scale: N membership instances (chitchat on the sealed UDP transport) in one process
//! on loopback. Measures initial convergence, convergence of one update, and bytes sent per node
//! per second (sealed datagrams as they go on the wire).
//!
//! `cargo bench -p daros-gossip --bench gossip -- [nodes] [interval_ms]` (default 100 1000).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "side_gossip/node_info.rs"]
mod node_info;
use node_info::info;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use daros_gossip::membership::{GossipKey, Keyring, MemberStatus, Membership, MembershipConfig};
use daros_gossip::{NodeId, Role};

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn sent(nodes: &[Membership]) -> Vec<u64> {
    nodes
        .iter()
        .map(|m| m.stats().bytes_sent.load(Ordering::Relaxed))
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(100) as usize;
    let interval = Duration::from_millis(args.get(1).copied().unwrap_or(1000));
    let key = GossipKey::generate(1);
    let ring = Keyring::new(&key, &[]);
    let addrs: Vec<SocketAddr> = (0..n)
        .map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap())
        .collect();
    let seeds: Vec<SocketAddr> = addrs.iter().take(3).copied().collect();
    let t0 = Instant::now();
    let mut nodes = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let mut cfg = MembershipConfig::new(
            "bench".into(),
            NodeId::new(format!("node-{i:04}")).unwrap(),
            Role::Client,
            SocketAddr::new(addr.ip(), 7100),
            *addr,
            *addr,
        );
        cfg.generation = 1;
        cfg.seeds = seeds.clone();
        cfg.interval = interval;
        let m = Membership::start(cfg, ring.clone()).await.unwrap();
        m.set_info(&info(i, 0)).await;
        nodes.push(m);
    }
    // Initial convergence: everyone sees everyone alive.
    loop {
        let mut all = true;
        for m in &nodes {
            let alive = m
                .members()
                .await
                .iter()
                .filter(|x| x.status == MemberStatus::Alive)
                .count();
            if alive < n {
                all = false;
                break;
            }
        }
        if all {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "no convergence");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "{n} nodes, gossip interval {interval:?}: all alive everywhere after {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // Steady state: every node republishes its usage every 5 s (staggered), as an agent would.
    let window = Duration::from_secs(20);
    let before = sent(&nodes);
    let start = Instant::now();
    let mut round = 0u64;
    while start.elapsed() < window {
        for (i, m) in nodes.iter().enumerate() {
            if (i as u64 + round).is_multiple_of(50) {
                m.set_info(&info(i, round)).await;
            }
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let rates: Vec<f64> = sent(&nodes)
        .iter()
        .zip(&before)
        .map(|(a, b)| (a - b) as f64 / secs / 1024.0)
        .collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    println!(
        "bytes sent per node: mean {mean:.1} KiB/s, p50 {:.1}, max {:.1} KiB/s (over {secs:.0} s)",
        pct(rates.clone(), 0.5),
        pct(rates, 1.0)
    );

    // Convergence of one update: a node changes a value; time until all nodes see it.
    let mut conv = Vec::new();
    for trial in 0..15u64 {
        let who = (trial as usize * 37) % n;
        let marker = 1_000_000 + trial;
        let id = NodeId::new(format!("node-{who:04}")).unwrap();
        let t = Instant::now();
        nodes[who].set_info(&info(who, marker)).await;
        'wait: loop {
            for m in &nodes {
                let seen = m
                    .member(&id)
                    .await
                    .and_then(|x| x.usage)
                    .is_some_and(|u| u.memory_bytes == marker);
                if !seen {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue 'wait;
                }
            }
            break;
        }
        conv.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "update seen by all {n} nodes: median {:.0} ms, p90 {:.0} ms, max {:.0} ms ({} updates)",
        pct(conv.clone(), 0.5),
        pct(conv.clone(), 0.9),
        pct(conv.clone(), 1.0),
        conv.len()
    );
    let rejected: u64 = nodes.iter().map(|m| m.stats().rejected_total()).sum();
    println!("datagrams refused by the sealed transport: {rejected}");
    for m in nodes {
        m.shutdown().await;
    }
}
