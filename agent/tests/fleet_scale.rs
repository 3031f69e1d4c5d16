//! The control plane at fleet size (issue 18): three real darosd servers on
//! loopback and N simulated agents in this process, each a real
//! [`ControlPlane`] (gossip, QUIC with mTLS, registration, fenced work,
//! reports through raft) whose runtime is **a fake** (`FakeRuntime`: it
//! reports an instance ready `DAROS_FLEET_DELAY_MS` after it was given, and
//! runs nothing). The servers are cordoned, so every instance lands on a
//! simulated agent.
//!
//! Measured, through the API an operator uses (`POST /v1/apps` on the
//! leader's socket, lifecycle events from `GET /v1/events`):
//! - a single application on the idle cluster: apply → Running (the commit
//!   stamp of its Running event minus the moment the POST was sent), once
//!   the joins' gossip has spread and this process's CPU stopped falling
//!   (`settle`), and a few right after the last registration for contrast;
//! - W workloads as applications of `DAROS_FLEET_PER_APP` workloads, posted
//!   `DAROS_FLEET_BATCH` applications per apply by `DAROS_FLEET_CLIENTS`
//!   concurrent clients: workloads per second from the first POST to the last
//!   Running, p50/p99 apply → Running per application;
//! - the leader's CPU and memory, the servers' data directories (raft log,
//!   snapshots, state);
//! - recovery: `kill -9` of the leader until a new leader has taken a fresh
//!   application to Running.
//!
//! CI runs a short version (20 agents, 200 workloads) that checks every
//! workload is placed on and reported by a simulated agent and that the
//! cluster recovers; the figures in docs/benchmarks.md come from
//! `scripts/bench-fleet.sh` (a release darosd, more agents and workloads).
//! Needs root (darosd's managed cgroup roots).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod mesh_hosts;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{TestRoot, require_root, wait_socket};
use daros_agent::client::Client;
use daros_agent::config::{HumanDuration, MeshRole, MeshSection};
use daros_agent::control::work::{BoxFuture, ExecError, NodeReport, NodeWork, WorkExecutor};
use daros_agent::control::{ControlPlane, ControlSettings};
use daros_coordinator::reconcile::{InstanceId, PlacementId};
use daros_coordinator::{ExecutionNode, ObservedState};
use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::broadcast;

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

// ---- the fake runtime --------------------------------------------------------

/// What a simulated agent "runs": instances given to it, each reported ready
/// after `delay`. Nothing is started; the name says so.
#[derive(Clone)]
struct FakeRuntime(Arc<FakeInner>);

struct FakeInner {
    delay: Duration,
    tx: broadcast::Sender<NodeReport>,
    held: Mutex<HashMap<InstanceId, (PlacementId, u32, ObservedState)>>,
}

impl FakeRuntime {
    fn new(delay: Duration) -> Self {
        Self(Arc::new(FakeInner {
            delay,
            tx: broadcast::channel(4096).0,
            held: Mutex::default(),
        }))
    }

    fn ready(&self) -> usize {
        self.0
            .held
            .lock()
            .unwrap()
            .values()
            .filter(|(_, _, s)| *s == ObservedState::Ready)
            .count()
    }
}

fn instance_report(i: &InstanceId, p: PlacementId, attempt: u32, s: ObservedState) -> NodeReport {
    NodeReport::Instance {
        instance: i.clone(),
        placement: p,
        attempt,
        state: s,
    }
}

impl WorkExecutor for FakeRuntime {
    fn execute(&self, work: NodeWork) -> BoxFuture<'_, Result<(), ExecError>> {
        let me = &self.0;
        let mut held = me.held.lock().unwrap();
        let mut started = Vec::new();
        let wanted: std::collections::HashSet<&InstanceId> =
            work.instances.iter().map(|d| &d.instance).collect();
        held.retain(|i, (p, a, _)| {
            let keep = wanted.contains(i);
            if !keep {
                let _ = me
                    .tx
                    .send(instance_report(i, *p, *a, ObservedState::Stopped));
            }
            keep
        });
        for d in &work.instances {
            let same = held
                .get(&d.instance)
                .is_some_and(|(p, a, _)| *p == d.placement && *a == d.attempt);
            if !same {
                held.insert(
                    d.instance.clone(),
                    (d.placement, d.attempt, ObservedState::Starting),
                );
                started.push((d.instance.clone(), d.placement, d.attempt));
            }
        }
        drop(held);
        if !started.is_empty() {
            let me = Arc::clone(&self.0);
            tokio::spawn(async move {
                tokio::time::sleep(me.delay).await;
                for (i, p, a) in started {
                    let now_ready = {
                        let mut held = me.held.lock().unwrap();
                        match held.get_mut(&i) {
                            Some(h) if h.0 == p && h.1 == a => {
                                h.2 = ObservedState::Ready;
                                true
                            }
                            _ => false,
                        }
                    };
                    if now_ready {
                        let _ = me.tx.send(instance_report(&i, p, a, ObservedState::Ready));
                    }
                }
            });
        }
        Box::pin(async { Ok(()) })
    }

    fn subscribe(&self) -> broadcast::Receiver<NodeReport> {
        self.0.tx.subscribe()
    }

    fn current(&self) -> BoxFuture<'_, Vec<NodeReport>> {
        let v = self
            .0
            .held
            .lock()
            .unwrap()
            .iter()
            .map(|(i, (p, a, s))| instance_report(i, *p, *a, s.clone()))
            .collect();
        Box::pin(async move { v })
    }
}

// ---- the real servers ----------------------------------------------------------

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One darosd server on loopback.
struct Server {
    name: String,
    dir: PathBuf,
    socket: PathBuf,
    rpc: u16,
    gossip: u16,
    metrics: u16,
    child: Option<Child>,
    root: TestRoot,
}

impl Server {
    fn new(base: &Path, k: usize) -> Self {
        let name = format!("fleet-s{k}");
        let dir = base.join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        Server {
            socket: dir.join("agent.sock"),
            root: TestRoot::new(&name),
            rpc: free_udp_port(),
            gossip: free_udp_port(),
            metrics: std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port(),
            child: None,
            dir,
            name,
        }
    }

    fn start(&mut self, seed: Option<u16>, join: Option<(&str, u16)>, mesh_extra: &str) {
        let seeds = seed.map_or(String::new(), |p| format!("seeds = [\"127.0.0.1:{p}\"]\n"));
        let cfg = self.dir.join("agent.toml");
        std::fs::write(
            &cfg,
            format!(
                "[agent]\nnode_name = \"{}\"\n[net]\nenabled = false\n\
                 [metrics]\nlisten = \"127.0.0.1:{}\"\n[mesh]\nrole = \"server\"\n\
                 rpc_listen = \"127.0.0.1:{}\"\ngossip_listen = \"127.0.0.1:{}\"\n{seeds}{mesh_extra}\n",
                self.name, self.metrics, self.rpc, self.gossip
            ),
        )
        .unwrap();
        let log = std::fs::File::create(self.dir.join("darosd.log")).unwrap();
        // The servers run at a higher priority than this process: on a fleet
        // they have their own cores, here they share two with a thousand
        // simulated agents, whose gossip alone can fill both (raft heartbeats
        // then time out and elections follow one another).
        let mut cmd = Command::new("nice");
        cmd.args(["-n", "-10"])
            .arg(mesh_hosts::darosd_binary())
            .env("RUST_LOG", "warn");
        let join = join.map(|(token, port)| (token, format!("127.0.0.1:{port}")));
        mesh_hosts::darosd_args(
            &mut cmd,
            &cfg,
            &self.socket,
            &self.dir.join("data"),
            self.root.name(),
            join.as_ref()
                .map(|(token, server)| (*token, server.as_str())),
        );
        // A bench stopped by a signal runs no destructor: the servers go with it.
        // SAFETY: prctl(2) only, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(std::io::Error::from)
            });
        }
        self.child = Some(cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap());
        wait_socket(&self.name, &self.socket, Duration::from_secs(60));
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn client(&self) -> Client {
        Client::new(&self.socket).with_timeout(Duration::from_secs(60))
    }

    /// The server's own timings from its `/metrics`: the state machine's
    /// time per command kind, proposals, the last snapshot's size, writes
    /// answered without a log entry, dispatch sends, runtime stalls.
    fn timings(&self) -> String {
        use std::io::{Read, Write};
        let Ok(mut t) = std::net::TcpStream::connect(("127.0.0.1", self.metrics)) else {
            return String::new();
        };
        let _ = t.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
        let mut body = String::new();
        let _ = t.read_to_string(&mut body);
        body.lines()
            .filter(|l| {
                l.starts_with("daros_coordinator_apply_seconds_sum")
                    || l.starts_with("daros_coordinator_apply_seconds_count")
                    || l.starts_with("daros_raft_proposal_seconds_sum")
                    || l.starts_with("daros_raft_proposal_seconds_count")
                    || l.starts_with("daros_raft_snapshot_bytes")
                    || l.starts_with("daros_raft_unchanged_writes")
                    || l.starts_with("daros_dispatch_sends")
                    || l.starts_with("daros_runtime_stall")
            })
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join("darosd.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- {} log tail ---", self.name);
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

/// CPU seconds (user + system) and peak resident memory of a process.
fn usage(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())?;
    Some((ticks as f64 / 100.0, hwm * 1024))
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

async fn until<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Applies one application of one workload and waits for it: apply → Running, ms.
async fn single_app(c: &Client, feed: &mut RunningFeed, name: String) -> u64 {
    let sent = apply(c, app_yaml(&name, 1)).await;
    let key = format!("{TENANT}/{name}");
    let at = until(
        &format!("{key} Running"),
        Duration::from_secs(60),
        async || {
            feed.catch_up(c).await;
            feed.running.get(&key).copied()
        },
    )
    .await;
    at.saturating_sub(sent)
}

/// Waits until the cluster is idle after the joins: a sample of agents sees
/// every member alive (the joins' gossip has spread), and this process (every
/// simulated agent) has stopped spending what the joins cost it: its CPU no
/// longer falls (three 2 s windows in a row within 5 % of the one before, or
/// 2 % of a core) and, where the joins had it above half a core, is under half
/// its peak (a flat stretch while the backlog drains is not idle: at 1,000
/// agents it spends 1.1–1.7 cores for 30–35 s, then 0.3–0.5), or it is under
/// 5 % of a core.
/// Right after the last registration the process still spreads a thousand
/// joins, and an application measured then measures that backlog, not the
/// idle cluster. Gives up after 3 minutes and says so; prints what it saw.
async fn settle(fleet: &[(Arc<ControlPlane>, FakeRuntime)], members: usize) {
    use daros_gossip::membership::MemberStatus;
    let t0 = Instant::now();
    let step = fleet.len().div_ceil(10).max(1);
    let sample: Vec<&Arc<ControlPlane>> = fleet
        .iter()
        .step_by(step)
        .chain(fleet.last())
        .map(|(p, _)| p)
        .collect();
    let window = Duration::from_secs(2);
    let mut last_cpu: Option<f64> = None;
    let (mut flat, mut peak) = (0, 0.0f64);
    let (mut cpu0, mut at0) = (usage(std::process::id()).unwrap().0, Instant::now());
    loop {
        tokio::time::sleep(window).await;
        let cpu1 = usage(std::process::id()).unwrap().0;
        let share = (cpu1 - cpu0) / at0.elapsed().as_secs_f64();
        (cpu0, at0) = (cpu1, Instant::now());
        let (mut seen, mut short) = (0, None);
        for p in &sample {
            let all = p.mesh().members().await;
            let alive = all
                .iter()
                .filter(|m| m.status == MemberStatus::Alive)
                .count();
            seen += usize::from(alive >= members);
            // What the first agent short of the count sees instead: the
            // members it does not count alive, and how many it knows at all.
            if alive < members && short.is_none() {
                let others: Vec<String> = all
                    .iter()
                    .filter(|m| m.status != MemberStatus::Alive)
                    .take(6)
                    .map(|m| format!("{} {:?}", m.node_id, m.status))
                    .collect();
                short = Some(format!(
                    "knows {}, alive {alive}, not alive: {others:?}",
                    all.len()
                ));
            }
        }
        peak = peak.max(share);
        // Within 5 %, or 2 % of a core (a tick of the clock is 0.5 % of a
        // 2 s window: a small fleet's few % jitter by ticks).
        flat = if last_cpu.is_some_and(|l| share >= (l * 0.95).min(l - 0.02)) {
            flat + 1
        } else {
            0
        };
        let drained = peak < 0.5 || share <= peak / 2.0;
        let steady = share < 0.05 || (flat >= 3 && drained);
        eprintln!(
            "settling: {:.0} s, {seen}/{} sampled agents see all {members} members alive, this process {:.0} % of a core",
            t0.elapsed().as_secs_f64(),
            sample.len(),
            share * 100.0
        );
        if let Some(s) = short {
            eprintln!("  an agent short of it: {s}");
        }
        if seen == sample.len() && steady {
            eprintln!(
                "settled {:.1} s after the last registration",
                t0.elapsed().as_secs_f64()
            );
            return;
        }
        if t0.elapsed() > Duration::from_secs(180) {
            eprintln!("not settled within 180 s: measuring anyway");
            return;
        }
        last_cpu = Some(share);
    }
}

async fn leader(servers: &[Server]) -> Option<String> {
    for s in servers.iter().filter(|s| s.child.is_some()) {
        if let Ok(v) = s.client().get::<Value>("/v1/cluster").await
            && let Some(l) = v["status"]["leader"].as_str()
        {
            return Some(l.to_string());
        }
    }
    None
}

fn now_ms() -> u64 {
    daros_agent::control::plane::now().0
}

// ---- applications and their Running events -------------------------------------

const TENANT: &str = "fleet";

fn app_yaml(name: &str, workloads: usize) -> String {
    let mut s = format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: {TENANT}}}\nspec:\n  workloads:\n"
    );
    for w in 0..workloads {
        s.push_str(&format!(
            "    - {{name: w{w}, runtime: {{type: process}}, resources: {{cpu: {{request: 100m}}, memory: {{request: 256Mi}}}}}}\n"
        ));
    }
    s
}

/// Follows the lifecycle events (not decisions) of the cluster through
/// `servers`' API: the commit stamp of each application's first Running.
struct RunningFeed {
    after: u64,
    running: HashMap<String, u64>,
}

impl RunningFeed {
    fn new() -> Self {
        Self {
            after: 0,
            running: HashMap::new(),
        }
    }

    /// Reads every event committed so far (pages of 500, without waiting
    /// between full pages).
    async fn catch_up(&mut self, c: &Client) -> bool {
        loop {
            let path = format!(
                "/v1/events?afterEvent={}&afterDecision={}",
                self.after,
                u64::MAX
            );
            let Ok(items) = c.get::<Vec<Value>>(&path).await else {
                return false;
            };
            for e in &items {
                if let Some(seq) = e["sequence"].as_u64() {
                    self.after = self.after.max(seq);
                }
                let to = e["data"]["to"]["phase"].as_str().unwrap_or_default();
                if to.eq_ignore_ascii_case("running")
                    && let (Some(app), Some(t)) =
                        (e["subject"].as_str(), e["data"]["time"].as_u64())
                {
                    self.running.entry(app.to_string()).or_insert(t);
                }
            }
            if items.len() < 500 {
                return true;
            }
        }
    }
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let k = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[k.min(v.len() - 1)]
}

/// Posts `yaml` to `c` until it is acknowledged (a 503 while the leader
/// changes is retried); the moment the acknowledged POST was sent.
async fn apply(c: &Client, yaml: String) -> u64 {
    for _ in 0..100 {
        let sent = now_ms();
        match c
            .send_text::<Value>(Method::POST, "/v1/apps", yaml.clone())
            .await
        {
            Ok(_) => return sent,
            Err(e) => {
                eprintln!("apply not acknowledged yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    panic!("apply never acknowledged");
}

// ---- the run ---------------------------------------------------------------------

#[test]
fn fleet_of_simulated_agents_on_real_servers() {
    require_root();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let agents = env_usize("DAROS_FLEET_AGENTS", 20);
    let workloads = env_usize("DAROS_FLEET_WORKLOADS", 200);
    let per_app = env_usize("DAROS_FLEET_PER_APP", 10).max(1);
    let batch = env_usize("DAROS_FLEET_BATCH", 5).max(1);
    let clients = env_usize("DAROS_FLEET_CLIENTS", 4).max(1);
    let singles = env_usize("DAROS_FLEET_SINGLES", 5);
    let early_singles = singles.min(3);
    let delay = Duration::from_millis(env_usize("DAROS_FLEET_DELAY_MS", 200) as u64);
    let gossip = std::env::var("DAROS_FLEET_GOSSIP").unwrap_or_else(|_| "500ms".into());
    let down_after = std::env::var("DAROS_FLEET_DOWN_AFTER").unwrap_or_else(|_| "10s".into());
    let apps = workloads.div_ceil(per_app);
    let mesh_extra =
        format!("gossip_interval = \"{gossip}\"\nnode_down_after = \"{down_after}\"\n");
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "fleet: {agents} simulated agents, {workloads} workloads in {apps} applications of {per_app}, \
         {batch} per apply, {clients} clients, fake start delay {delay:?}, gossip {gossip}; load {}",
        load().trim()
    );

    // Three servers: the first creates the cluster, the others join as voters.
    let dir = tempfile::tempdir().unwrap();
    let mut servers: Vec<Server> = (1..=3).map(|k| Server::new(dir.path(), k)).collect();
    servers[0].start(None, None, &mesh_extra);
    let init: Value = until("tokens", Duration::from_secs(30), async || {
        servers[0]
            .client()
            .send(Method::POST, "/v1/cluster/init", None)
            .await
            .ok()
    })
    .await;
    let (seed, rpc0) = (servers[0].gossip, servers[0].rpc);
    let server_token = init["server_token"].as_str().unwrap().to_string();
    let client_token = init["client_token"].as_str().unwrap().to_string();
    for s in servers.iter_mut().skip(1) {
        s.start(Some(seed), Some((&server_token, rpc0)), &mesh_extra);
    }
    for k in 1..3 {
        let name = servers[k].name.clone();
        let mut refusals = 0u32;
        until(
            &format!("add-server {name}"),
            Duration::from_secs(60),
            async || {
                let r = servers[0]
                    .client()
                    .send::<Value>(
                        Method::POST,
                        "/v1/cluster/servers",
                        Some(&json!({"node": name})),
                    )
                    .await;
                refusals += 1;
                // What the server answers, now and then: a run once stopped here
                // for a minute with nothing in any log.
                if let Err(e) = &r
                    && refusals % 50 == 1
                {
                    eprintln!("add-server {name}: {e}");
                }
                r.ok()
            },
        )
        .await;
    }
    // Servers take no workloads: every instance goes to a simulated agent.
    for s in &servers {
        let name = s.name.clone();
        until(
            &format!("cordon {name}"),
            Duration::from_secs(60),
            async || {
                servers[0]
                    .client()
                    .send::<Value>(Method::POST, &format!("/v1/nodes/{name}/cordon"), None)
                    .await
                    .ok()
            },
        )
        .await;
    }

    // The simulated agents, joined with the client token.
    let t_join = Instant::now();
    let seeds: Vec<std::net::SocketAddr> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.gossip).parse().unwrap())
        .collect();
    let mut fleet: Vec<(Arc<ControlPlane>, FakeRuntime)> = Vec::new();
    for chunk in (0..agents).collect::<Vec<_>>().chunks(25) {
        let starts = chunk.iter().map(|&k| {
            let name = format!("fleet-a{k:05}");
            let rt = FakeRuntime::new(delay);
            let mesh = MeshSection {
                role: MeshRole::Client,
                bootstrap: false,
                join_token: Some(client_token.clone()),
                join_server: Some(format!("127.0.0.1:{rpc0}").parse().unwrap()),
                seeds: seeds.clone(),
                gossip_interval: HumanDuration(
                    daros_agent::config::duration::parse(&gossip).unwrap(),
                ),
                ..MeshSection::default()
            };
            let data_dir = dir.path().join("agents").join(&name);
            let settings = move || {
                let node_name = name.clone();
                ControlSettings {
                    data_dir: data_dir.clone(),
                    node_name: name.clone(),
                    mesh: mesh.clone(),
                    node_spec: Arc::new(move || fake_node(&node_name)),
                    psi: Arc::new(|| None),
                }
            };
            let exec = Arc::new(rt.clone()) as Arc<dyn WorkExecutor>;
            async move {
                // A join the busy server does not answer in time is tried
                // again from an empty data dir, as systemd would restart darosd.
                for attempt in 1.. {
                    let s = settings();
                    let (name, data) = (s.node_name.clone(), s.data_dir.clone());
                    match ControlPlane::start(s, Some(Arc::clone(&exec))).await {
                        Ok(plane) => return (plane, rt),
                        Err(e) if attempt < 10 => {
                            eprintln!("{name}: join attempt {attempt}: {e}");
                            let _ = std::fs::remove_dir_all(&data);
                            tokio::time::sleep(Duration::from_secs(attempt)).await;
                        }
                        Err(e) => panic!("{name}: {e}"),
                    }
                }
                unreachable!()
            }
        });
        fleet.extend(futures::future::join_all(starts).await);
    }
    let leader_client = async |servers: &[Server]| {
        let l = until("a leader", Duration::from_secs(60), async || {
            leader(servers).await
        })
        .await;
        servers
            .iter()
            .find(|s| s.name == l)
            .map(Server::client)
            .unwrap()
    };
    let c = leader_client(&servers).await;
    until(
        "every agent registered",
        Duration::from_secs(600),
        async || {
            let nodes = c.get::<Vec<Value>>("/v1/nodes").await.ok()?;
            (nodes.len() >= agents + 3).then_some(())
        },
    )
    .await;
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count);
    eprintln!(
        "{agents} agents joined and registered in {:.1} s ({fds} open files in this process, \
         {} resident); load {}",
        t_join.elapsed().as_secs_f64(),
        mib(usage(std::process::id()).map_or(0, |u| u.1)),
        load().trim()
    );

    // The tenant, and room in the history for every event of the run.
    c.send_text::<Value>(
        Method::POST,
        "/v1/apps",
        format!(
            "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {{name: {TENANT}}}\nspec: {{}}\n"
        ),
    )
    .await
    .unwrap();
    let events = (apps + early_singles + singles + 10) * 6;
    if events > 10_000 {
        c.send::<Value>(
            Method::PUT,
            "/v1/cluster/retention",
            Some(&json!({"events": events})),
        )
        .await
        .unwrap();
    }
    let mut feed = RunningFeed::new();
    assert!(feed.catch_up(&c).await);

    // One application at a time: a few right after the last registration,
    // then the samples on the idle cluster (after `settle`).
    let mut early = Vec::new();
    for k in 0..early_singles {
        early.push(single_app(&c, &mut feed, format!("early-{k}")).await);
    }
    settle(&fleet, agents + 3).await;
    let me_single = usage(std::process::id()).unwrap().0;
    let t_single = Instant::now();
    let mut single = Vec::new();
    for k in 0..singles {
        single.push(single_app(&c, &mut feed, format!("single-{k}")).await);
    }
    eprintln!(
        "the single applications took {:.1} s; this process used {:.0} % of a core meanwhile",
        t_single.elapsed().as_secs_f64(),
        100.0 * (usage(std::process::id()).unwrap().0 - me_single)
            / t_single.elapsed().as_secs_f64().max(0.001)
    );

    // The load: every application posted, in batches, by concurrent clients.
    let leader_name = leader(&servers).await.unwrap();
    let lead = servers.iter().find(|s| s.name == leader_name).unwrap();
    let (cpu0, _) = usage(lead.pid().unwrap()).unwrap();
    let me0 = usage(std::process::id()).unwrap().0;
    let t0 = Instant::now();
    let first_sent = now_ms();
    let batches: Vec<Vec<usize>> = (0..apps)
        .collect::<Vec<_>>()
        .chunks(batch)
        .map(<[usize]>::to_vec)
        .collect();
    let queue = Arc::new(Mutex::new(batches.into_iter()));
    let sent_at: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let acked_in: Arc<Mutex<Vec<u64>>> = Arc::default();
    let posters = (0..clients).map(|_| {
        let queue = Arc::clone(&queue);
        let sent_at = Arc::clone(&sent_at);
        let acked_in = Arc::clone(&acked_in);
        let c = lead.client();
        async move {
            loop {
                let Some(b) = queue.lock().unwrap().next() else {
                    return;
                };
                let yaml = b
                    .iter()
                    .map(|k| app_yaml(&format!("app-{k:06}"), per_app))
                    .collect::<Vec<_>>()
                    .join("---\n");
                let sent = apply(&c, yaml).await;
                acked_in.lock().unwrap().push(now_ms().saturating_sub(sent));
                let mut m = sent_at.lock().unwrap();
                for k in b {
                    m.insert(format!("{TENANT}/app-{k:06}"), sent);
                }
            }
        }
    });
    let post = futures::future::join_all(posters);
    let watch = async {
        let mut f = RunningFeed::new();
        f.after = feed.after;
        until(
            "every application Running",
            Duration::from_secs(3600),
            async || {
                f.catch_up(&c).await;
                let n = f.running.keys().filter(|k| k.contains("/app-")).count();
                (n >= apps).then_some(())
            },
        )
        .await;
        f
    };
    let (_, done) = tokio::join!(post, watch);
    let wall = t0.elapsed().as_secs_f64();
    let posted_in = {
        let m = sent_at.lock().unwrap();
        m.values().max().copied().unwrap_or(first_sent) - first_sent
    };
    let (cpu1, hwm) = usage(lead.pid().unwrap()).unwrap();
    let me1 = usage(std::process::id()).unwrap().0;
    let mut lat: Vec<u64> = {
        let m = sent_at.lock().unwrap();
        m.iter()
            .map(|(k, s)| done.running[k].saturating_sub(*s))
            .collect()
    };
    let last_running = done.running.values().max().copied().unwrap_or(first_sent);
    let span = (last_running - first_sent) as f64 / 1000.0;

    // Reality (the fake runtimes are the fleet's only "processes"): every
    // workload of the run is held ready by exactly one simulated agent.
    let held: usize = fleet.iter().map(|(_, rt)| rt.ready()).sum();
    assert_eq!(
        held,
        apps * per_app + early_singles + singles,
        "instances ready on the simulated agents"
    );
    let busiest = fleet.iter().map(|(_, rt)| rt.ready()).max().unwrap_or(0);

    let sizes: Vec<String> = servers
        .iter()
        .map(|s| format!("{} {}", s.name, mib(dir_bytes(&s.dir.join("data")))))
        .collect();
    let mut single_sorted = single.clone();
    eprintln!("--- results (load {}) ---", load().trim());
    eprintln!(
        "single application on the idle cluster, apply -> Running: median {} ms, max {} ms ({singles} samples: {single:?})",
        pct(&mut single_sorted, 0.5),
        single.iter().max().copied().unwrap_or(0)
    );
    eprintln!(
        "single application right after the last registration (before settling): {early:?} ms"
    );
    eprintln!(
        "{} workloads ({apps} applications) Running {span:.1} s after the first apply \
         (posted within {:.1} s; harness saw all after {wall:.1} s): {:.0} workloads/s, {:.1} applications/s",
        apps * per_app,
        posted_in as f64 / 1000.0,
        (apps * per_app) as f64 / span,
        apps as f64 / span
    );
    let mut acked = acked_in.lock().unwrap().clone();
    eprintln!(
        "an apply of {batch} applications acknowledged in: p50 {} ms, p99 {} ms",
        pct(&mut acked, 0.5),
        pct(&mut acked, 0.99)
    );
    eprintln!(
        "apply -> Running per application: p50 {} ms, p99 {} ms, max {} ms",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        lat.iter().max().copied().unwrap_or(0)
    );
    eprintln!(
        "leader {leader_name}: {:.2} CPU-s over the run ({:.0} % of a core), peak RSS {}; \
         this process (the {agents} agents and the clients): {:.0} % of a core; busiest agent holds {busiest}",
        cpu1 - cpu0,
        100.0 * (cpu1 - cpu0) / wall,
        mib(hwm),
        100.0 * (me1 - me0) / wall
    );
    eprintln!("data directories: {}", sizes.join(", "));
    eprintln!("leader's timings:\n{}", lead.timings());

    // Recovery: kill -9 of the leader; a survivor elects a new leader that
    // takes a fresh application to Running.
    let li = servers.iter().position(|s| s.name == leader_name).unwrap();
    let killed = Instant::now();
    let killed_ms = now_ms();
    servers[li].kill9();
    let new_leader = until("a new leader", Duration::from_secs(120), async || {
        leader(&servers).await.filter(|l| *l != leader_name)
    })
    .await;
    let elected = killed.elapsed();
    let nl = servers.iter().find(|s| s.name == new_leader).unwrap();
    let c2 = nl.client();
    apply(&c2, app_yaml("after-failover", 1)).await;
    let mut f2 = RunningFeed::new();
    f2.after = done.after;
    let key = format!("{TENANT}/after-failover");
    let at = until(
        "an application Running after failover",
        Duration::from_secs(300),
        async || {
            f2.catch_up(&c2).await;
            f2.running.get(&key).copied()
        },
    )
    .await;
    let (_, new_hwm) = usage(nl.pid().unwrap()).unwrap();
    eprintln!(
        "leader killed: {new_leader} named leader after {} ms; a new application Running {} ms after the kill; \
         new leader's peak RSS {}",
        elected.as_millis(),
        at.saturating_sub(killed_ms),
        mib(new_hwm)
    );
    eprintln!("new leader's timings:\n{}", nl.timings());
    assert_eq!(
        fleet.iter().map(|(_, rt)| rt.ready()).sum::<usize>(),
        apps * per_app + early_singles + singles + 1,
        "instances ready on the simulated agents after the failover"
    );
    // All at once: one after another, 1,000 agents' leaves took over 10 minutes.
    let t_down = Instant::now();
    futures::future::join_all(fleet.iter().map(|(p, _)| p.mesh().shutdown())).await;
    eprintln!(
        "{agents} agents shut down in {:.1} s",
        t_down.elapsed().as_secs_f64()
    );
}

fn fake_node(name: &str) -> ExecutionNode {
    serde_json::from_value(json!({
        "name": name,
        // A node of 16 cores: 160 instances of 100m at most (Nomad's C1M ran
        // 200 containers per host).
        "capacity": {"cpu": "16", "memory": "64Gi"},
        "runtimes": ["process"],
    }))
    .unwrap()
}
