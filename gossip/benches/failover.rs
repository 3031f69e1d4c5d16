//! Failover time distribution: `kill -9` of the raft leader until the new leader acknowledges
//! a write. Real processes in network namespaces, real QUIC and redb; needs root.
//!
//! `cargo bench -p daros-gossip --bench failover -- [runs]` (default 30 runs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use daros_gossip::control::ControlRequest;
use daros_gossip::testing::{NodeProgram, TestCluster, wait_for, wait_for_every};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(30);

fn put(key: &str) -> ControlRequest {
    ControlRequest::Write {
        command: json!({"op": "put", "key": key, "value": "v"}),
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{name:<38} n={:>3}  min {:>6.0} ms  median {:>6.0} ms  p90 {:>6.0} ms  p99 {:>6.0} ms  max {:>6.0} ms",
        v.len(),
        v[0],
        pct(&v, 0.5),
        pct(&v, 0.9),
        pct(&v, 0.99),
        v[v.len() - 1]
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(30);
    let program = NodeProgram::mesh_node(env!("CARGO_BIN_EXE_daros-mesh-node"));
    let mut c = TestCluster::new(program, 3, 1, 0, &[]).expect("cluster");
    c.form(DEADLINE).await.expect("form");
    let client = 3;
    let (mut elect, mut via_server, mut via_client) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let (leader, term) = c.wait_leader(&[0, 1, 2], DEADLINE).await.unwrap();
        c.ctl_ok(client, &put("warm")).await.unwrap();
        let survivor = (0..3).find(|k| *k != leader).unwrap();
        c.kill9(leader).unwrap();
        let t0 = Instant::now();
        let killed = c.id(leader).to_string();
        // Three independent observers, each retrying every 20 ms until it succeeds.
        let observe = |what: &'static str, k: usize| {
            let c = &c;
            let killed = killed.clone();
            async move {
                wait_for_every(what, DEADLINE, Duration::from_millis(20), || async {
                    let ok = match what {
                        "election" => c
                            .leader_seen_by(k)
                            .await
                            .is_some_and(|(l, t)| t > term && l != killed),
                        _ => c.ctl_ok(k, &put(&format!("{what}{run}"))).await.is_ok(),
                    };
                    ok.then(|| t0.elapsed())
                })
                .await
                .expect("failover")
            }
        };
        let (t_elect, t_server, t_client) = tokio::join!(
            observe("election", survivor),
            observe("server", survivor),
            observe("client", client)
        );
        let (t_elect, t_server, t_client) = (Some(t_elect), Some(t_server), Some(t_client));
        let ms = |d: Option<Duration>| d.unwrap().as_secs_f64() * 1000.0;
        println!(
            "run {run:>3}: leader {} killed; new leader after {:>5.0} ms, write via server {:>5.0} ms, via client agent {:>5.0} ms",
            c.id(leader),
            ms(t_elect),
            ms(t_server),
            ms(t_client)
        );
        elect.push(ms(t_elect));
        via_server.push(ms(t_server));
        via_client.push(ms(t_client));
        // Bring the server back and let it catch up before the next run.
        c.start(leader).unwrap();
        c.wait_ready(leader, DEADLINE).await.unwrap();
        wait_for("restarted server follows", DEADLINE, || async {
            let r = c.ctl_ok(leader, &ControlRequest::Raft).await.ok()?;
            (r["role"] == "follower" && r["leader"].is_string()).then_some(())
        })
        .await
        .unwrap();
    }
    println!();
    report("new leader elected (seen by a survivor)", elect);
    report("write acknowledged via surviving server", via_server);
    report("write acknowledged via client agent", via_client);
}
