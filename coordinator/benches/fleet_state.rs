//! The coordinator's share of the leader's work at fleet size (issue 18): the
//! state of the fleet bench (1,000 nodes, 2,000 applications of 50
//! workloads, 100,000 instances) built through commands, then, on one
//! thread: applying the applications, every instance's Running report, a
//! node's inventory check (every node every 10 s in a fleet), and reading
//! each node's desired work after a commit — all of it afresh, and only the
//! nodes the commit changed.
//!
//! `cargo bench -p daros-coordinator --bench fleet_state [-- nodes apps]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use daros_coordinator::reconcile::{ActionKind, InstanceId, PlacementId};
use daros_coordinator::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

const TENANT: &str = "fleet";

fn parse(yaml: &str) -> Vec<Document> {
    daros_coordinator::spec::parse(yaml, Format::Yaml).unwrap()
}

fn app_yaml(name: &str, workloads: usize) -> String {
    let mut s = format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: {TENANT}}}\nspec:\n  workloads:\n"
    );
    for w in 0..workloads {
        s.push_str(&format!(
            "    - {{name: w{w}, runtime: {{type: process}}, resources: {{cpu: {{request: 100m}}, memory: {{request: 256Mi}}}}}}\n"
        ));
    }
    s.push_str("---\n");
    s
}

/// Placements started by an outcome, by node.
fn starts(out: &Outcome, into: &mut BTreeMap<String, Vec<(InstanceId, PlacementId)>>) {
    for a in &out.actions {
        if let ActionKind::Start {
            instance,
            placement,
            ..
        } = &a.kind
        {
            into.entry(a.node.clone())
                .or_default()
                .push((instance.clone(), *placement));
        }
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = args.first().copied().unwrap_or(1_000);
    let apps = args.get(1).copied().unwrap_or(2_000);
    let mut c = Coordinator::new();
    let mut now = 1_000u64;
    for i in 0..nodes {
        let yaml = format!(
            "apiVersion: daros.io/v1\nkind: Node\nmetadata: {{name: fleet-a{i:05}}}\nspec:\n  capacity: {{cpu: \"16\", memory: 32Gi}}\n  runtimes: [process]\n"
        );
        for d in parse(&yaml) {
            if let Document::Node(node) = d {
                c.apply(Command::RegisterNode { node }, Timestamp(now))
                    .unwrap();
            }
        }
    }
    let tenant = format!(
        "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {{name: {TENANT}}}\nspec: {{}}\n"
    );
    c.apply(
        Command::Apply {
            documents: parse(&tenant),
            start: true,
        },
        Timestamp(now),
    )
    .unwrap();
    c.apply(
        Command::SetRetention {
            retention: daros_coordinator::state::history::Retention {
                events: (apps + 10) * 6,
                ..Default::default()
            },
        },
        Timestamp(now),
    )
    .unwrap();

    // Applications, ten per command, as the fleet bench's clients post them.
    let mut placed: BTreeMap<String, Vec<(InstanceId, PlacementId)>> = BTreeMap::new();
    let t = Instant::now();
    let mut applies = 0;
    for batch in (0..apps).collect::<Vec<_>>().chunks(10) {
        now += 10;
        let yaml: String = batch
            .iter()
            .map(|i| app_yaml(&format!("app-{i:05}"), 50))
            .collect();
        let out = c
            .apply(
                Command::Apply {
                    documents: parse(&yaml),
                    start: true,
                },
                Timestamp(now),
            )
            .unwrap();
        starts(&out, &mut placed);
        applies += 1;
    }
    let apply_s = t.elapsed().as_secs_f64();
    let mut nodes_of_app: BTreeMap<&AppKey, BTreeSet<&str>> = BTreeMap::new();
    for (node, list) in &placed {
        for (i, _) in list {
            nodes_of_app.entry(&i.app).or_default().insert(node);
        }
    }
    let spread: Vec<usize> = nodes_of_app.values().map(BTreeSet::len).collect();
    println!(
        "nodes an application's instances are on: mean {:.1}, max {}",
        spread.iter().sum::<usize>() as f64 / spread.len().max(1) as f64,
        spread.iter().max().unwrap_or(&0)
    );
    let instances: usize = placed.values().map(Vec::len).sum();
    println!(
        "{nodes} nodes, {apps} applications, {instances} instances placed: {applies} applies in {apply_s:.2} s ({:.1} ms each, parsing included)",
        apply_s * 1e3 / applies as f64
    );

    // Every instance reports Running, node after node: half the nodes one
    // report per command, the other half in batches of up to 64 (as a node
    // sends what it gathered while its previous write was in flight).
    let (mut single, mut batched) = ((0usize, 0f64), (0usize, 0f64));
    for (n, list) in placed.values().enumerate() {
        now += 1;
        let t = Instant::now();
        if n % 2 == 0 {
            for (instance, placement) in list {
                c.apply(
                    Command::ReportWorkload {
                        instance: instance.clone(),
                        placement: *placement,
                        state: ObservedState::Running,
                    },
                    Timestamp(now),
                )
                .unwrap();
            }
            single.0 += list.len();
            single.1 += t.elapsed().as_secs_f64();
        } else {
            for chunk in list.chunks(64) {
                let reports = chunk
                    .iter()
                    .map(|(instance, placement)| WorkloadReport {
                        instance: instance.clone(),
                        placement: *placement,
                        state: ObservedState::Running,
                    })
                    .collect();
                c.apply(Command::ReportWorkloads { reports }, Timestamp(now))
                    .unwrap();
            }
            batched.0 += list.len();
            batched.1 += t.elapsed().as_secs_f64();
        }
    }
    let running = placed
        .values()
        .flatten()
        .filter(|(i, p)| {
            c.instance_status(i, *p)
                .is_some_and(|s| s.observed == ObservedState::Running)
        })
        .count();
    assert_eq!(running, single.0 + batched.0, "every report recorded");
    println!(
        "Running reports: {} one per command in {:.2} s ({:.1} µs each); {} in node batches of up to 64 in {:.2} s ({:.1} µs each)",
        single.0,
        single.1,
        single.1 * 1e6 / single.0.max(1) as f64,
        batched.0,
        batched.1,
        batched.1 * 1e6 / batched.0.max(1) as f64
    );

    // A node's inventory: which instances believed live there it lacks.
    let t = Instant::now();
    let mut absent = 0;
    for (node, list) in &placed {
        let held: BTreeSet<PlacementId> = list.iter().map(|(_, p)| *p).collect();
        absent += c.absent_from_inventory(node, &held).len();
    }
    let inv_s = t.elapsed().as_secs_f64();
    assert_eq!(absent, 0);
    println!(
        "inventory check of every node: {:.1} ms ({:.1} µs a node)",
        inv_s * 1e3,
        inv_s * 1e6 / placed.len() as f64
    );

    // Every node's work read afresh (what a leader did after each commit).
    let t = Instant::now();
    let all = c.desired_work();
    let full_s = t.elapsed().as_secs_f64();
    println!(
        "every node's desired work: {:.1} ms ({} nodes, at most {} instances on one)",
        full_s * 1e3,
        all.len(),
        all.values().map(|w| w.instances.len()).max().unwrap_or(0)
    );
    // CHANGED-NODES-BEGIN
    // Only the nodes a commit changed: one report of a failure.
    let (cursor, _) = c.desired_work_since(None);
    let (instance, placement) = placed.values().next().unwrap()[0].clone();
    now += 1;
    c.apply(
        Command::ReportWorkload {
            instance,
            placement,
            state: ObservedState::Failed {
                failure: daros_coordinator::model::failure::Failure::Application {
                    check: None,
                    detail: "bench".into(),
                },
            },
        },
        Timestamp(now),
    )
    .unwrap();
    // Ten reads: the first pays for cold caches.
    let mut took = Vec::new();
    let mut update = None;
    for _ in 0..10 {
        let t = Instant::now();
        update = Some(c.desired_work_since(Some(cursor)).1);
        took.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let update = update.unwrap();
    let (first, best) = (took[0], took.iter().copied().fold(f64::MAX, f64::min));
    let (n, held) = match update {
        daros_coordinator::state::work_changes::WorkUpdate::Nodes(n) => (
            n.len(),
            n.values()
                .flatten()
                .map(|w| w.instances.len())
                .sum::<usize>(),
        ),
        daros_coordinator::state::work_changes::WorkUpdate::All(_) => (usize::MAX, 0),
    };
    println!(
        "the work of the nodes one report changed: first {first:.3} ms, best of 10 {best:.3} ms \
         ({n} node(s), {held} instances)"
    );
    // CHANGED-NODES-END
}
