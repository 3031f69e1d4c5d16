//! The replicated coordinator state under a long history (issue 20): applies
//! `DAROS_STATE_CHANGES` (default 100,000) spec changes, round-robin over 20
//! running applications on one node, with a `Tick` every 100 changes, through
//! the raft state machine (`CoordinatorState::apply`, as every server applies
//! its log). Every tenth of the way it takes a snapshot (what a server writes
//! and a restarted one restores), restores it into a fresh state and checks
//! that the restored state answers `get apps` exactly as the live one.
//!
//! Printed per checkpoint: changes applied, snapshot size and the time to
//! restore it and answer `get apps` (a restart's cost in the state machine),
//! and beside them, in the same run, what the format-1 snapshot (the JSON
//! journal of every applied command, replayed on restore) would weigh and cost.
//!
//! `cargo bench -p daros-agent --bench state_growth` (release).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use daros_agent::control::state::{ControlCommand, ControlQuery, CoordinatorState, Stamped};
use daros_coordinator::{Command, Format, Timestamp};
use daros_gossip::raft::{LogPosition, ReplicatedState};

const APPS: u32 = 20;

fn stamped(at: u64, command: Command) -> Stamped {
    Stamped {
        at: Timestamp(at),
        leader_term: None,
        actor: None,
        command: ControlCommand::Coordinator { command },
    }
}

fn app(i: u32, n: u64) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: app-{i}, tenant: bench}}\nspec:\n  \
         workloads:\n    - {{name: web, runtime: {{type: process}}, \
         resources: {{cpu: {{request: 10m}}, memory: {{request: 8Mi}}}}, \
         runtimeSpec: {{command: /bin/true, env: {{N: \"{n}\"}}}}}}\n"
    )
}

fn parse(yaml: &str) -> Vec<daros_coordinator::spec::Document> {
    daros_coordinator::spec::parse(yaml, Format::Yaml).unwrap()
}

/// Restores `snapshot` into a fresh state and answers `get apps`: seconds, answer.
fn restore(snapshot: &[u8]) -> (f64, serde_json::Value) {
    let t0 = Instant::now();
    let (mut s, _) = CoordinatorState::new();
    s.restore(snapshot).unwrap();
    let apps = s.query(&ControlQuery::Apps { now: Timestamp(0) }).unwrap();
    (t0.elapsed().as_secs_f64(), apps)
}

fn main() {
    let total: u64 = std::env::var("DAROS_STATE_CHANGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let (mut s, _) = CoordinatorState::new();
    let mut index = 0u64;
    let mut journal: Vec<Stamped> = Vec::new();
    let mut run = |s: &mut CoordinatorState, journal: &mut Vec<Stamped>, at: u64, c: Command| {
        index += 1;
        let st = stamped(at, c);
        if s.apply(st.clone(), LogPosition { term: 1, index }).is_ok() {
            journal.push(st);
        }
    };
    let node = "apiVersion: daros.io/v1\nkind: Node\nmetadata: {name: n1}\nspec:\n  \
                capacity: {cpu: \"64\", memory: 256Gi}\n  runtimes: [process]\n";
    // The node registers itself, as its agent does.
    for d in parse(node) {
        if let daros_coordinator::Document::Node(node) = d {
            run(&mut s, &mut journal, 1, Command::RegisterNode { node });
        }
    }
    let setup = "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: bench}\nspec:\n  \
                 quota: {cpu: \"64\", memory: 256Gi, maxApplications: 100, maxConcurrentWorkloads: 1000}\n";
    run(
        &mut s,
        &mut journal,
        1,
        Command::Apply {
            documents: parse(setup),
            start: true,
        },
    );
    println!(
        "| changes | snapshot | restore + get apps | journal snapshot (format 1) | journal replay + get apps |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let step = (total / 10).max(1);
    let t0 = Instant::now();
    for n in 1..=total {
        let at = 1_000 + n * 10;
        run(
            &mut s,
            &mut journal,
            at,
            Command::Apply {
                documents: parse(&app((n % u64::from(APPS)) as u32, n)),
                start: true,
            },
        );
        if n % 100 == 0 {
            run(&mut s, &mut journal, at + 1, Command::Tick);
        }
        if n % step == 0 {
            let snap = s.snapshot().unwrap();
            let live = s.query(&ControlQuery::Apps { now: Timestamp(0) }).unwrap();
            let (secs, apps) = restore(&snap);
            assert_eq!(
                apps, live,
                "the restored state answers get apps differently"
            );
            let old = serde_json::to_vec(&journal).unwrap();
            let (old_secs, old_apps) = restore(&old);
            assert_eq!(old_apps, live);
            println!(
                "| {n} | {:.2} MiB | {:.0} ms | {:.1} MiB | {:.0} ms |",
                snap.len() as f64 / 1048576.0,
                secs * 1000.0,
                old.len() as f64 / 1048576.0,
                old_secs * 1000.0
            );
        }
    }
    println!(
        "\n{total} changes in {:.1} s ({} state-changing commands)",
        t0.elapsed().as_secs_f64(),
        s.changes()
    );
}
