//! `kill -9` cycles of server agents while a client agent writes; afterwards every
//! acknowledged write is present. Real processes, QUIC, and redb files that survive SIGKILL.
//! CI runs 30 cycles; `DAROS_TEST_KILL_CYCLES=100` (or `scripts/bench-chaos.sh`) is the
//! long run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{DEADLINE, cluster, put, read_all};
use daros_gossip::control::{ControlClient, ControlRequest, ControlResponse};
use daros_gossip::testing::wait_for;

/// Cycles when `DAROS_TEST_KILL_CYCLES` does not say: CI's short run.
const CI_CYCLES: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_cycles_keep_every_acknowledged_write() {
    let cycles: usize = std::env::var("DAROS_TEST_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CYCLES);
    let mut c = cluster(3, 1, 0).await;
    let client = 3;
    let started = Instant::now();

    // The writer: one write at a time through the client agent; remembers what was acked.
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let failed = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let ctl = ControlClient::new(&c.spec(client).control);
        let (acked, failed, stop) = (acked.clone(), failed.clone(), stop.clone());
        async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (k, v) = (format!("w{n:06}"), format!("v{n}"));
                match ctl.request(&put(&k, &v)).await {
                    Ok(ControlResponse::Ok(_)) => acked.lock().unwrap().push((k, v)),
                    // Not acknowledged: the outcome is unknown, and the test asks nothing of it.
                    _ => {
                        *failed.lock().unwrap() += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                n += 1;
            }
        }
    });

    let mut rng_state = 0x9e37_79b9_7f4a_7c15u64;
    for cycle in 0..cycles {
        // Every other cycle kills the leader, the others a random follower.
        let (leader, _) = c.wait_leader(&[0, 1, 2], DEADLINE).await.unwrap();
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        let victim = if cycle % 2 == 0 {
            leader
        } else {
            let followers: Vec<usize> = (0..3).filter(|k| *k != leader).collect();
            followers[(rng_state % 2) as usize]
        };
        let before = acked.lock().unwrap().len();
        c.kill9(victim).unwrap();
        // Let the writer make progress while the victim is down (bounded).
        let _ = wait_for(
            "a write acknowledged while a server is down",
            Duration::from_secs(5),
            || async { (acked.lock().unwrap().len() > before).then_some(()) },
        )
        .await;
        c.start(victim).unwrap();
        c.wait_ready(victim, DEADLINE).await.unwrap();
        // Back as a voter following a leader before the next cycle (never two down at once).
        wait_for("restarted server follows a leader", DEADLINE, || async {
            let r = c.ctl_ok(victim, &ControlRequest::Raft).await.ok()?;
            (r["leader"].is_string() && r["role"] != "candidate").then_some(())
        })
        .await
        .unwrap();
        if cycle % 10 == 9 {
            println!(
                "cycle {}: {} writes acknowledged, {} not, {:?} elapsed",
                cycle + 1,
                acked.lock().unwrap().len(),
                failed.lock().unwrap(),
                started.elapsed()
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    let acked = acked.lock().unwrap().clone();
    // Two acknowledged writes per cycle at least: the writer kept writing
    // through the kills (100 cycles: 200).
    assert!(
        acked.len() >= 2 * cycles,
        "only {} writes acknowledged in {cycles} cycles",
        acked.len()
    );
    // Every server answers with the same state, which holds every acknowledged write.
    for server in 0..3 {
        let state: BTreeMap<String, String> = wait_for("a linearizable read", DEADLINE, || async {
            c.ctl_ok(server, &read_all()).await.ok()
        })
        .await
        .map(|v| serde_json::from_value(v).unwrap())
        .unwrap();
        let missing: Vec<&(String, String)> = acked
            .iter()
            .filter(|(k, v)| state.get(k) != Some(v))
            .collect();
        assert!(
            missing.is_empty(),
            "server {}: {} of {} acknowledged writes missing, e.g. {:?}",
            c.id(server),
            missing.len(),
            acked.len(),
            &missing[..missing.len().min(5)]
        );
    }
    println!(
        "{cycles} kill cycles in {:?}: {} acknowledged writes all present, {} unacknowledged attempts",
        started.elapsed(),
        acked.len(),
        failed.lock().unwrap()
    );
}
