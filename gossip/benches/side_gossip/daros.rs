//! D-AROS: N membership instances (darosd's: SWIM through foca on the sealed UDP transport,
//! descriptions fetched from their owners on notice; the default 1 s probe period and
//! suspicion multiplier 4) in this process, on the same loopback ports Serf gets.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use daros_gossip::membership::{GossipKey, Keyring, MemberStatus, Membership, MembershipConfig};
use daros_gossip::{NodeId, Role};

use super::driver::{Member, drive};
use super::scenario::{Figures, Scenario};
use super::wire::{self, GOSSIP_BASE, WireCounter};

fn id(i: usize) -> NodeId {
    NodeId::new(format!("node-{i:04}")).unwrap()
}

impl Member for Membership {
    async fn sees_all(&self, n: usize) -> bool {
        // Alive, with its description (what it publishes) here too.
        let c = self.census().await;
        c.alive >= n && c.described >= n
    }

    async fn has_update(&self, who: usize, marker: u64) -> bool {
        self.member(&id(who))
            .await
            .and_then(|x| x.usage)
            .is_some_and(|u| u.memory_bytes == marker)
    }

    async fn sees_dead(&self, victim: usize) -> bool {
        self.member(&id(victim))
            .await
            .is_some_and(|x| x.status == MemberStatus::Dead)
    }

    async fn publish(&self, sc: &Scenario, i: usize, marker: u64) {
        self.set_info(&sc.info(i, marker)).await;
    }

    async fn stop(self) {
        self.shutdown().await;
    }

    async fn progress(&self) -> String {
        let c = self.census().await;
        format!(
            "{} known, {} alive, {} described",
            c.known, c.alive, c.described
        )
    }

    fn own_bytes(&self) -> Option<u64> {
        Some(self.stats().bytes_sent.load(Ordering::Relaxed))
    }
}

pub async fn run(sc: &Scenario) -> Figures {
    let n = sc.nodes;
    let counter = WireCounter::install(n);
    let rss0 = wire::rss_bytes(std::process::id());
    let ring = Keyring::new(&GossipKey::generate(1), &[]);
    let addr = |i: usize| -> SocketAddr {
        format!("127.0.0.1:{}", GOSSIP_BASE + i as u16)
            .parse()
            .unwrap()
    };
    let seeds: Vec<SocketAddr> = (0..n.min(3)).map(addr).collect();
    let t0 = Instant::now();
    let mut nodes = Vec::new();
    for i in 0..n {
        let mut cfg = MembershipConfig::new(
            "bench".into(),
            id(i),
            Role::Client,
            SocketAddr::new(addr(i).ip(), 7100),
            addr(i),
            addr(i),
        );
        cfg.generation = 1;
        cfg.seeds = seeds.clone();
        let m = Membership::start(cfg, ring.clone()).await.unwrap();
        m.set_info(&sc.info(i, 0)).await;
        nodes.push(Some(m));
    }
    drive(sc, &counter, nodes, t0, rss0).await
}
