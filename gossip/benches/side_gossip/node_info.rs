//! What a simulated member publishes in the gossip benches: a large node's description, with a
//! marker in its usage (the value an update changes).

use daros_gossip::membership::{LocalInfo, Resources, UsageSummary};

pub fn info(i: usize, marker: u64) -> LocalInfo {
    let cap = Resources {
        cpu_millicores: 64_000,
        memory_bytes: 256 << 30,
        gpus: 8,
        net_mbps: 25_000,
    };
    LocalInfo {
        allocatable: cap.clone(),
        capacity: cap,
        usage: UsageSummary {
            cpu_millicores: 1000 + i as u64,
            memory_bytes: marker,
            cpu_pressure: 1.5,
            memory_pressure: 0.2,
        },
        qos: Default::default(),
        runtimes: vec!["process".into(), "kubernetes".into()],
        agent_version: "0.1.0".into(),
    }
}
