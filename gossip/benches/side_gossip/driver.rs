//! The scenario driven over the members of an in-process cluster (D-AROS's chitchat and the SWIM
//! experiment): the same checks, polls and windows for both; each side says only how one member
//! answers them.

use std::time::{Duration, Instant};

use super::scenario::{Figures, Scenario, TICK, Window};
use super::wire::{self, WireCounter};

/// How often the views are polled (Serf's side is told by events).
pub const POLL: Duration = Duration::from_millis(50);

/// One member of an in-process cluster, as the scenario sees it.
#[allow(async_fn_in_trait)]
pub trait Member {
    /// Whether this member sees all `n` members (itself included) up, with their descriptions.
    async fn sees_all(&self, n: usize) -> bool;
    /// Whether this member holds the update with `marker` published by member `who`.
    async fn has_update(&self, who: usize, marker: u64) -> bool;
    /// Whether this member calls member `victim` dead.
    async fn sees_dead(&self, victim: usize) -> bool;
    /// Publishes member `i`'s description carrying `marker`.
    async fn publish(&self, sc: &Scenario, i: usize, marker: u64);
    /// Stops without a word (sockets closed, as under kill -9).
    async fn stop(self);
    /// The side's own count of bytes sent, where it keeps one.
    fn own_bytes(&self) -> Option<u64>;
    /// What this member sees so far, for the progress line while the cluster forms.
    async fn progress(&self) -> String {
        String::new()
    }
}

/// Runs the scenario over members started at `t0` (the last one started `started` later);
/// `rss0` is this process's resident memory before the first.
pub async fn drive<M: Member>(
    sc: &Scenario,
    counter: &WireCounter,
    mut nodes: Vec<Option<M>>,
    t0: Instant,
    rss0: u64,
) -> Figures {
    let n = sc.nodes;
    let started = t0.elapsed();
    let me = std::process::id();
    // Every member sees every other (checked every 500 ms: the check itself costs CPU).
    let mut said = Instant::now();
    'all: loop {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no convergence in 300 s"
        );
        for (i, m) in nodes.iter().enumerate() {
            let Some(m) = m else { continue };
            if !m.sees_all(n).await {
                if said.elapsed() >= Duration::from_secs(10) {
                    said = Instant::now();
                    eprintln!(
                        "{:.0} s: member {i} does not see all {n} yet: {}",
                        t0.elapsed().as_secs_f64(),
                        m.progress().await
                    );
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue 'all;
            }
        }
        break;
    }
    let cold = t0.elapsed();
    eprintln!("all see all after {:.1} s", cold.as_secs_f64());
    let rss = wire::rss_bytes(me).saturating_sub(rss0) as f64 / n as f64;
    tokio::time::sleep(sc.settle).await;
    let idle = window(sc, counter, &nodes, false).await;
    eprintln!(
        "idle: {:.2} KiB/s per member",
        idle.bytes_per_node_s / 1024.0
    );

    let mut update_ms = Vec::new();
    for trial in 0..sc.updates {
        let who = (trial * 37) % n;
        let marker = 1_000_000 + trial as u64;
        let t = Instant::now();
        nodes[who].as_ref().unwrap().publish(sc, who, marker).await;
        until_all(
            &nodes,
            t,
            Duration::from_secs(60),
            "an update not seen",
            async |m: &M| m.has_update(who, marker).await,
        )
        .await;
        update_ms.push(t.elapsed().as_secs_f64() * 1e3);
        eprintln!("update {trial}: {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    }

    let churn = window(sc, counter, &nodes, true).await;

    let mut detect_ms = Vec::new();
    for k in 0..sc.kills {
        let victim = sc.victim(k);
        let Some(m) = nodes[victim].take() else {
            continue;
        };
        let t = Instant::now();
        m.stop().await;
        until_all(
            &nodes,
            t,
            Duration::from_secs(180),
            "a stopped member not dead everywhere",
            async |m: &M| m.sees_dead(victim).await,
        )
        .await;
        detect_ms.push(t.elapsed().as_secs_f64() * 1e3);
        eprintln!(
            "kill {k}: dead everywhere in {:.0} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    for m in nodes.into_iter().flatten() {
        m.stop().await;
    }
    Figures {
        nodes: n,
        started_s: started.as_secs_f64(),
        cold_start_s: cold.as_secs_f64(),
        idle,
        churn,
        update_ms,
        detect_ms,
        rss_per_agent: rss,
    }
}

/// Polls every live member until `check` holds for all, failing after `limit` from `t`.
async fn until_all<M: Member>(
    nodes: &[Option<M>],
    t: Instant,
    limit: Duration,
    what: &str,
    check: impl AsyncFn(&M) -> bool,
) {
    'poll: loop {
        assert!(t.elapsed() < limit, "{what}");
        for m in nodes.iter().flatten() {
            if !check(m).await {
                tokio::time::sleep(POLL).await;
                continue 'poll;
            }
        }
        return;
    }
}

async fn window<M: Member>(
    sc: &Scenario,
    counter: &WireCounter,
    nodes: &[Option<M>],
    churn: bool,
) -> Window {
    let me = std::process::id();
    let own = || -> Option<u64> { nodes.iter().flatten().map(Member::own_bytes).sum() };
    let (b0, o0, c0, t0) = (counter.bytes(), own(), wire::cpu_secs(me), Instant::now());
    let mut tick = 0u64;
    while t0.elapsed() < sc.window {
        if churn {
            for (i, m) in nodes.iter().enumerate() {
                if let Some(m) = m
                    && sc.due(i, tick)
                {
                    m.publish(sc, i, tick).await;
                }
            }
        }
        tick += 1;
        tokio::time::sleep(TICK).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let live = nodes.iter().flatten().count() as f64;
    Window {
        bytes_per_node_s: (counter.bytes() - b0) as f64 / secs / live,
        cpu_cores_per_agent: (wire::cpu_secs(me) - c0) / secs / live,
        own_bytes_per_node_s: own().zip(o0).map(|(a, b)| (a - b) as f64 / secs / live),
    }
}
