//! Chaos against the control plane above Raft (issue 12): three darosd servers in
//! network namespaces with darosd's default raft and liveness timing, the shop
//! running as real processes, a writer applying and scaling applications through
//! every server, and cycles of
//!
//! - leader `kill -9` and restart,
//! - follower `kill -9` and immediate restart,
//! - a rolling `kill -9` of every server,
//! - the leader partitioned for 10 s,
//! - a node's darosd SIGSTOPped for 6 s.
//!
//! After every cycle and a settle time, invariants are checked against reality:
//! every node is Ready and schedulable; the shop's phase is Running with every
//! instance ready, each instance has exactly one live process in `/proc`, in the
//! cgroup of the node the coordinator names, and no other copy runs anywhere; and
//! throughout the run no instance has live processes on two nodes for longer than
//! the grace. At the end every acknowledged write is present on every server.
//!
//! CI runs one cycle of each kind; `DAROS_CHAOS_CYCLES=100` is the bench
//! (docs/benchmarks.md), which prints the counts and the failover figures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod mesh_hosts;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{SHOP, shop_yaml, wait_for};
use mesh_hosts::{Host, apply_text, form_opts, leader_of};
use serde_json::Value;

/// Longest two live copies of one instance may overlap.
const DUPLICATE_GRACE: Duration = Duration::from_secs(5);
/// How long a cycle's aftermath may take to settle before it counts as a violation.
const SETTLE: Duration = Duration::from_secs(60);
const APP: &str = "chaos";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cycle {
    LeaderKill,
    FollowerRestart,
    RollingRestart,
    LeaderPartition,
    NodeStop,
}

const KINDS: [Cycle; 5] = [
    Cycle::LeaderKill,
    Cycle::FollowerRestart,
    Cycle::RollingRestart,
    Cycle::LeaderPartition,
    Cycle::NodeStop,
];

#[derive(Default, Debug)]
struct Counts {
    cycles: usize,
    violations: Vec<String>,
    failovers: Vec<Duration>,
    step_downs: Vec<Duration>,
    follower_restarts: usize,
    leader_changes_by_follower_restarts: usize,
}

/// (node name, managed root name) of every host: what [`copies`] reads.
fn roots(hs: &[Host]) -> Vec<(String, String)> {
    hs.iter()
        .map(|h| (h.name.clone(), h.root.name().to_string()))
        .collect()
}

/// Instance (`workload/replica`) → nodes with a live process in its cgroup
/// (`tenant.app.workload-vN.replica` under each node's managed root).
fn copies(roots: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let prefix = format!("shop-team.{APP}.");
    for (node, root) in roots {
        // The memory hierarchy on v1/hybrid hosts, the unified one on v2.
        for base in ["/sys/fs/cgroup/memory", "/sys/fs/cgroup"] {
            let Ok(rd) = std::fs::read_dir(std::path::Path::new(base).join(root)) else {
                continue;
            };
            for e in rd.filter_map(Result::ok) {
                let n = e.file_name().to_string_lossy().into_owned();
                if !n.starts_with(&prefix) || n.contains(".init.") {
                    continue;
                }
                let procs =
                    std::fs::read_to_string(e.path().join("cgroup.procs")).unwrap_or_default();
                if procs
                    .lines()
                    .filter_map(|l| l.trim().parse::<u32>().ok())
                    .any(common::alive)
                {
                    let rest = &n[prefix.len()..];
                    let (wv, replica) = rest.rsplit_once('.').unwrap_or((rest, "?"));
                    let workload = wv.rsplit_once("-v").map_or(wv, |(w, _)| w);
                    out.entry(format!("{workload}/{replica}"))
                        .or_default()
                        .insert(node.clone());
                }
            }
        }
    }
    out
}

/// Samples [`copies`] in the background and records, per instance, the longest
/// time it had live processes on two nodes at once.
struct DuplicateWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<BTreeMap<String, Duration>>,
}

impl DuplicateWatch {
    fn start(roots: Vec<(String, String)>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut since: BTreeMap<String, Instant> = BTreeMap::new();
            let mut longest: BTreeMap<String, Duration> = BTreeMap::new();
            while !s.load(Ordering::SeqCst) {
                let now = Instant::now();
                let live = copies(&roots);
                since.retain(|k, _| live.get(k).is_some_and(|n| n.len() > 1));
                for (k, nodes) in &live {
                    if nodes.len() > 1 {
                        let t = *since.entry(k.clone()).or_insert(now);
                        let d = longest.entry(k.clone()).or_default();
                        *d = (*d).max(now - t);
                    }
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            longest
        });
        DuplicateWatch { stop, thread }
    }

    fn stop(self) -> BTreeMap<String, Duration> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

fn live(hs: &[Host]) -> impl Iterator<Item = &Host> {
    hs.iter().filter(|h| h.child.is_some())
}

fn agreed_leader(hs: &[Host]) -> Option<(String, u64)> {
    let views: Vec<(String, u64)> = live(hs)
        .filter_map(|h| {
            let st = h.json(&["cluster", "status"])?;
            Some((
                st["status"]["leader"].as_str()?.to_string(),
                st["status"]["term"].as_u64()?,
            ))
        })
        .collect();
    (views.len() == live(hs).count() && views.windows(2).all(|w| w[0] == w[1]))
        .then(|| views[0].clone())
}

/// What is wrong right now (empty: every invariant holds).
fn problems(hs: &[Host]) -> Vec<String> {
    let mut out = Vec::new();
    let Some((leader, _)) = agreed_leader(hs) else {
        return vec!["the servers do not agree on a leader".into()];
    };
    let l = hs.iter().find(|h| h.name == leader).unwrap();
    let Some(nodes) = l.json(&["get", "nodes"]) else {
        return vec!["get nodes failed".into()];
    };
    for n in nodes.as_array().into_iter().flatten() {
        let name = n["node"]["name"].as_str().unwrap_or("?");
        if n["down_since"].is_u64() || n["node"]["schedulable"] != true {
            out.push(format!("live node {name} is Down or unschedulable: {n}"));
        }
    }
    let Some(d) = l.json(&["describe", "app", APP]) else {
        return vec![format!("describe {APP} failed")];
    };
    if d["phase"] != "Running" {
        out.push(format!(
            "{APP} is {} (reason: {})",
            d["phase"], d["degradation"]
        ));
    }
    let reality = copies(&roots(hs));
    let mut claimed = BTreeSet::new();
    for i in d["instances"].as_array().into_iter().flatten() {
        let id = i["id"].as_str().unwrap_or("");
        let p: Vec<&str> = id.split('/').collect();
        let key = format!("{}/{}", p.get(2).unwrap_or(&"?"), p.get(3).unwrap_or(&"?"));
        let node = i["node"].as_str().unwrap_or("-");
        if i["state"]["state"] != "ready" {
            out.push(format!("{id} on {node} is {}", i["state"]));
        }
        match reality.get(&key) {
            Some(n) if n.len() == 1 && n.contains(node) => {}
            other => out.push(format!(
                "{id}: the coordinator says node {node}, processes run on {other:?}"
            )),
        }
        claimed.insert(key);
    }
    for (k, n) in &reality {
        if !claimed.contains(k) {
            out.push(format!("{k} runs on {n:?} but no instance claims it"));
        }
    }
    out
}

fn settle(hs: &[Host], c: &mut Counts, what: &str) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let p = problems(hs);
        if p.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            eprintln!("VIOLATION after {what}: {p:#?}");
            c.violations.push(format!("{what}: {}", p.join("; ")));
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn index_of(hs: &[Host], name: &str) -> usize {
    hs.iter().position(|h| h.name == name).unwrap()
}

fn restart(hs: &mut [Host], k: usize) {
    let seed = hs
        .iter()
        .enumerate()
        .find(|(i, h)| *i != k && h.child.is_some())
        .map(|(_, h)| format!("{}:7000", h.ip))
        .unwrap_or_default();
    hs[k].start(&seed, None);
    wait_for(
        "restarted server sees a leader",
        Duration::from_secs(30),
        || leader_of(&hs[k]).map(|_| ()),
    );
}

fn signal(h: &Host, sig: rustix::process::Signal) {
    let pid = h.child.as_ref().unwrap().id();
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig)
        .unwrap();
}

fn run_cycle(
    kind: Cycle,
    n: usize,
    net: &daros_gossip::testing::TestNet,
    hs: &mut [Host],
    c: &mut Counts,
) {
    let (leader, term) = wait_for("an agreed leader", Duration::from_secs(30), || {
        agreed_leader(hs)
    });
    let li = index_of(hs, &leader);
    match kind {
        Cycle::LeaderKill => {
            hs[li].kill9();
            let t0 = Instant::now();
            let survivor = (li + 1) % hs.len();
            wait_for("a new leader", Duration::from_secs(30), || {
                leader_of(&hs[survivor])
                    .filter(|l| *l != leader)
                    .map(|_| ())
            });
            c.failovers.push(t0.elapsed());
            restart(hs, li);
        }
        Cycle::FollowerRestart => {
            let fi = (li + 1 + n % 2) % hs.len();
            hs[fi].kill9();
            restart(hs, fi);
            // Let a disruptive election (if any) happen before judging.
            std::thread::sleep(Duration::from_secs(2));
            c.follower_restarts += 1;
            let after = wait_for("an agreed leader", Duration::from_secs(30), || {
                agreed_leader(hs)
            });
            if after != (leader.clone(), term) {
                eprintln!("follower restart changed the leadership: {leader}@{term} -> {after:?}");
                c.leader_changes_by_follower_restarts += 1;
            }
        }
        Cycle::RollingRestart => {
            for k in 0..hs.len() {
                hs[k].kill9();
                restart(hs, k);
            }
        }
        Cycle::LeaderPartition => {
            net.isolate(li).unwrap();
            let t0 = Instant::now();
            let stepped = wait_for(
                "the isolated leader steps down",
                Duration::from_secs(10),
                || {
                    let st = hs[li].json(&["cluster", "status"])?;
                    (st["status"]["raft_role"] != "leader").then(|| t0.elapsed())
                },
            );
            c.step_downs.push(stepped);
            std::thread::sleep(Duration::from_secs(10).saturating_sub(t0.elapsed()));
            net.heal(li).unwrap();
        }
        Cycle::NodeStop => {
            let k = n % hs.len();
            signal(&hs[k], rustix::process::Signal::STOP);
            std::thread::sleep(Duration::from_secs(6));
            signal(&hs[k], rustix::process::Signal::CONT);
        }
    }
    c.cycles += 1;
    settle(hs, c, &format!("cycle {n} ({kind:?})"));
}

fn percentile(v: &[Duration], p: f64) -> Option<Duration> {
    let mut v = v.to_vec();
    v.sort();
    (!v.is_empty()).then(|| v[((v.len() as f64 - 1.0) * p).round() as usize])
}

#[test]
fn the_control_plane_tells_the_truth_through_chaos() {
    let cycles: usize = std::env::var("DAROS_CHAOS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KINDS.len());
    let (net, dir, mut hs) = form_opts(0, false);
    // The workload: the shop (web + worker, a scalable worker) as real processes.
    let shop = shop_yaml(APP, 18080, &dir.path().join("shop"), false).replacen(
        "    - name: worker\n",
        "    - name: worker\n      replicas: {min: 1, max: 2}\n",
        1,
    );
    assert!(shop.contains("max: 2"), "examples/shop.yaml changed shape");
    assert!(apply_text(&hs[0].socket, &shop, true));
    wait_for("shop Running", Duration::from_secs(90), || {
        problems(&hs).is_empty().then_some(())
    });

    // The writer: new applications (not started) through every server, and scales of
    // the running shop's worker between 1 and 2.
    let sockets: Vec<std::path::PathBuf> = hs.iter().map(|h| h.socket.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let template = std::fs::read_to_string(SHOP)
        .unwrap()
        .replacen("maxApplications: 10", "maxApplications: 100000", 1)
        .replacen("cpu: \"4\"", "cpu: \"100000\"", 1)
        .replacen("memory: 4Gi", "memory: 100000Gi", 1)
        .replacen(
            "maxConcurrentWorkloads: 20",
            "maxConcurrentWorkloads: 1000000",
            1,
        );
    assert!(
        template.contains("maxApplications: 100000"),
        "examples/shop.yaml changed shape"
    );
    let writer = {
        let (stop, acked) = (stop.clone(), acked.clone());
        std::thread::spawn(move || {
            let (mut attempts, mut i) = (0usize, 0usize);
            while !stop.load(Ordering::SeqCst) {
                let socket = &sockets[i % sockets.len()];
                if i % 5 == 4 {
                    let n = (i / 5) % 2 + 1;
                    let _ = common::darosctl(
                        socket,
                        &[
                            "operate",
                            APP,
                            "--tenant",
                            "shop-team",
                            "scale",
                            "worker",
                            &n.to_string(),
                        ],
                    );
                } else {
                    let name = format!("w-{i}");
                    attempts += 1;
                    let text = template.replace("name: shop\n", &format!("name: {name}\n"));
                    if apply_text(socket, &text, false) {
                        acked.lock().unwrap().push(name);
                    }
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            attempts
        })
    };
    let watch = DuplicateWatch::start(roots(&hs));

    let started = Instant::now();
    let mut c = Counts::default();
    for n in 0..cycles {
        run_cycle(KINDS[n % KINDS.len()], n, &net, &mut hs, &mut c);
        if (n + 1) % 10 == 0 {
            eprintln!(
                "cycle {}: {} violations, {:?} elapsed",
                n + 1,
                c.violations.len(),
                started.elapsed()
            );
        }
    }
    stop.store(true, Ordering::SeqCst);
    let attempts = writer.join().unwrap();
    let duplicates = watch.stop();
    let acked = acked.lock().unwrap().clone();

    let mut lost = 0;
    for h in &hs {
        let names: BTreeSet<String> = wait_for("apps readable", Duration::from_secs(30), || {
            let apps: Value = h.json(&["get", "apps"])?;
            Some(
                apps.as_array()?
                    .iter()
                    .filter_map(|a| a["app"]["name"].as_str().map(str::to_string))
                    .collect(),
            )
        });
        let missing: Vec<&String> = acked.iter().filter(|n| !names.contains(*n)).collect();
        if !missing.is_empty() {
            eprintln!("{}: acknowledged writes lost: {missing:?}", h.name);
        }
        lost += missing.len();
    }
    let long_dups: Vec<(&String, &Duration)> = duplicates
        .iter()
        .filter(|(_, d)| **d > DUPLICATE_GRACE)
        .collect();
    let (cycles_run, elapsed, n_acked) = (c.cycles, started.elapsed(), acked.len());
    let (violations, dups) = (c.violations.len(), long_dups.len());
    let (restarts, changes) = (c.follower_restarts, c.leader_changes_by_follower_restarts);
    let (fo50, fo99, fo_max, kills) = (
        percentile(&c.failovers, 0.5),
        percentile(&c.failovers, 0.99),
        c.failovers.iter().max().copied(),
        c.failovers.len(),
    );
    let (sd50, sd_max) = (
        percentile(&c.step_downs, 0.5),
        c.step_downs.iter().max().copied(),
    );
    eprintln!(
        "chaos: {cycles_run} cycles in {elapsed:?}; writes {n_acked} acknowledged of {attempts}, \
         {lost} lost; violations after settle {violations}; duplicates over \
         {DUPLICATE_GRACE:?}: {dups}; leader changes by {restarts} follower restarts: {changes}; \
         failover median {fo50:?} p99 {fo99:?} max {fo_max:?} ({kills} kills); isolated leader \
         stepped down median {sd50:?} max {sd_max:?}"
    );
    let mut sorted = c.failovers.clone();
    sorted.sort();
    eprintln!("failovers (sorted): {sorted:?}");
    assert!(!acked.is_empty(), "no write was acknowledged");
    assert_eq!(lost, 0, "acknowledged writes lost");
    assert!(c.violations.is_empty(), "{:#?}", c.violations);
    assert!(long_dups.is_empty(), "two live copies: {long_dups:?}");
    assert_eq!(c.leader_changes_by_follower_restarts, 0);
}
