//! CI's short run of the gossip comparison (`gossip/benches/side_by_side_gossip.rs`, the full one
//! is `scripts/bench-side-by-side.sh gossip`): 10 members each of D-AROS (darosd's SWIM
//! membership) and Serf (Debian's `serf agent` processes). Each side must see everyone alive,
//! carry two updates to every member, call a stopped member dead everywhere, and have its bytes
//! counted by nftables on the wire; the figures are printed, not judged here (targets live in
//! docs/benchmarks.md). Needs root, nftables and serf (`scripts/test.sh` installs them).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The harness is the bench's; not every helper is used by the short run.
#![allow(dead_code)]

#[path = "../benches/side_gossip/daros.rs"]
mod daros;
#[path = "../benches/side_gossip/driver.rs"]
mod driver;
#[path = "../benches/side_gossip/node_info.rs"]
mod node_info;
#[path = "../benches/side_gossip/scenario.rs"]
mod scenario;
#[path = "../benches/side_gossip/serf.rs"]
mod serf;
#[path = "../benches/side_gossip/wire.rs"]
mod wire;

use std::time::Duration;

use scenario::{Figures, Scenario, TICK, Window};

#[test]
fn gossip_beside_serf_short_run() {
    assert!(is_root(), "needs root (nftables counters, serf agents)");
    let sc = Scenario {
        nodes: 10,
        window: Duration::from_secs(3),
        settle: Duration::from_secs(2),
        updates: 2,
        kills: 1,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let d = rt.block_on(daros::run(&sc));
    drop(rt);
    let s = serf::run(&sc);
    for (name, f) in [("D-AROS", &d), ("Serf", &s)] {
        println!("{name}: {}", f.summary());
        assert_eq!(f.update_ms.len(), sc.updates, "{name}: updates");
        assert_eq!(f.detect_ms.len(), sc.kills, "{name}: kills");
        assert!(
            f.idle.bytes_per_node_s > 0.0 && f.churn.bytes_per_node_s > 0.0,
            "{name}: nftables counted nothing"
        );
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
