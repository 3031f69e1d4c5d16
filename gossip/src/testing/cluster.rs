//! A cluster of real node processes, one per network namespace.
//!
//! The program and its arguments are parameters ([`NodeProgram`]): today the standalone
//! `daros-mesh-node`, later `darosd`. Tests only talk to nodes through the control socket and the
//! harness methods, so switching the program is a one-line change in the tests.

use std::fs::File;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::HarnessError;
use super::netns::TestNet;
use crate::control::{ControlClient, ControlRequest, ControlResponse};
use crate::join::InitOutput;

/// RPC port of every node (each node has its own namespace).
pub const RPC_PORT: u16 = 7100;
/// Gossip port of every node.
pub const GOSSIP_PORT: u16 = 7000;

/// What the harness needs to know to launch one node.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// Index in the cluster.
    pub index: usize,
    /// Node id.
    pub node_id: String,
    /// Server agent or client agent.
    pub server: bool,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Control socket.
    pub control: PathBuf,
    /// Address in its namespace.
    pub ip: IpAddr,
    /// Gossip seeds.
    pub seeds: Vec<SocketAddr>,
    /// First server: bootstrap raft.
    pub bootstrap: bool,
    /// Join through this server with this token (when the data dir has no credentials).
    pub join: Option<(SocketAddr, String)>,
    /// Extra arguments (timing).
    pub extra: Vec<String>,
}

impl NodeSpec {
    /// RPC address.
    pub fn rpc_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, RPC_PORT)
    }
    /// Gossip address.
    pub fn gossip_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, GOSSIP_PORT)
    }
}

/// The program that runs a node, and how to build its command lines.
#[derive(Clone, Debug)]
pub struct NodeProgram {
    /// Executable.
    pub program: PathBuf,
    /// Arguments creating a cluster on the first server; must print [`InitOutput`] JSON.
    pub init_args: fn(&NodeSpec, &str) -> Vec<String>,
    /// Arguments running a node.
    pub run_args: fn(&NodeSpec) -> Vec<String>,
}

fn mesh_node_init(s: &NodeSpec, cluster: &str) -> Vec<String> {
    vec![
        "init".into(),
        "--data-dir".into(),
        s.data_dir.display().to_string(),
        "--node-id".into(),
        s.node_id.clone(),
        "--cluster-id".into(),
        cluster.into(),
    ]
}

fn mesh_node_run(s: &NodeSpec) -> Vec<String> {
    let mut a = vec![
        "run".to_string(),
        "--data-dir".into(),
        s.data_dir.display().to_string(),
        "--node-id".into(),
        s.node_id.clone(),
        "--rpc-listen".into(),
        s.rpc_addr().to_string(),
        "--gossip-listen".into(),
        s.gossip_addr().to_string(),
        "--control".into(),
        s.control.display().to_string(),
    ];
    for seed in &s.seeds {
        a.push("--seed".into());
        a.push(seed.to_string());
    }
    if s.bootstrap {
        a.push("--bootstrap".into());
    }
    if let Some((server, token)) = &s.join {
        a.push("--join".into());
        a.push(server.to_string());
        a.push("--token".into());
        a.push(token.clone());
    }
    a.extend(s.extra.iter().cloned());
    a
}

impl NodeProgram {
    /// The standalone `daros-mesh-node` at `path`.
    pub fn mesh_node(path: impl Into<PathBuf>) -> Self {
        Self {
            program: path.into(),
            init_args: mesh_node_init,
            run_args: mesh_node_run,
        }
    }
}

struct Slot {
    spec: NodeSpec,
    child: Option<Child>,
    log: PathBuf,
}

/// A running test cluster. Dropping it kills every node (SIGKILL) and removes the namespaces;
/// when the test panicked the node logs are printed first.
pub struct TestCluster {
    net: TestNet,
    dir: PathBuf,
    program: NodeProgram,
    slots: Vec<Slot>,
    /// Tokens printed by the init.
    pub tokens: InitOutput,
    /// Number of server agents (indices `0..servers`).
    pub servers: usize,
}

/// Polls `f` every 100 ms until it returns `Some` or `timeout` passes.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, f: F) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_every(what, timeout, Duration::from_millis(100), f).await
}

/// Polls `f` every `every` until it returns `Some` or `timeout` passes.
pub async fn wait_for_every<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut f: F,
) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(HarnessError(format!(
                "timed out after {timeout:?} waiting for {what}"
            )));
        }
        tokio::time::sleep(every).await;
    }
}

impl TestCluster {
    /// Creates namespaces for `servers + clients + spare` hosts and initializes the cluster on
    /// host 0. Nodes are not started yet. `spare` hosts get no node (outsiders for probes).
    pub fn new(
        program: NodeProgram,
        servers: usize,
        clients: usize,
        spare: usize,
        extra: &[&str],
    ) -> Result<Self, HarnessError> {
        let net = TestNet::new(servers + clients + spare)?;
        let dir = std::env::temp_dir().join(net.name());
        std::fs::create_dir_all(&dir)
            .map_err(|e| HarnessError(format!("{}: {e}", dir.display())))?;
        let seed = SocketAddr::new(IpAddr::V4(net.ip(0)), GOSSIP_PORT);
        let mut slots = Vec::new();
        for k in 0..servers + clients {
            let server = k < servers;
            let node_id = if server {
                format!("s{}", k + 1)
            } else {
                format!("c{}", k - servers + 1)
            };
            let data_dir = dir.join(&node_id);
            let spec = NodeSpec {
                index: k,
                node_id: node_id.clone(),
                server,
                control: data_dir.join("control.sock"),
                data_dir,
                ip: IpAddr::V4(net.ip(k)),
                seeds: if k == 0 { Vec::new() } else { vec![seed] },
                bootstrap: k == 0,
                join: None,
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            slots.push(Slot {
                log: dir.join(format!("{node_id}.log")),
                spec,
                child: None,
            });
        }
        let first = slots
            .first()
            .ok_or_else(|| HarnessError("a cluster needs at least one server".into()))?;
        let out = Command::new(&program.program)
            .args((program.init_args)(&first.spec, "test"))
            .output()
            .map_err(|e| HarnessError(format!("init: {e}")))?;
        if !out.status.success() {
            return Err(HarnessError(format!(
                "init failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let tokens: InitOutput = serde_json::from_slice(&out.stdout)
            .map_err(|e| HarnessError(format!("init output: {e}")))?;
        let join_server = SocketAddr::new(IpAddr::V4(net.ip(0)), RPC_PORT);
        for s in slots.iter_mut().skip(1) {
            let token = if s.spec.server {
                tokens.server_token.clone()
            } else {
                tokens.client_token.clone()
            };
            s.spec.join = Some((join_server, token));
        }
        Ok(Self {
            net,
            dir,
            program,
            slots,
            tokens,
            servers,
        })
    }

    /// The network (partitions, addresses).
    pub fn net(&self) -> &TestNet {
        &self.net
    }

    /// Spec of node `k`.
    pub fn spec(&self, k: usize) -> &NodeSpec {
        &self.slots[k].spec
    }

    /// Mutable spec of node `k` (change before `start`).
    pub fn spec_mut(&mut self, k: usize) -> &mut NodeSpec {
        &mut self.slots[k].spec
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True without nodes.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Node id of node `k`.
    pub fn id(&self, k: usize) -> &str {
        &self.slots[k].spec.node_id
    }

    /// Index of the node with id `id`.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.spec.node_id == id)
    }

    /// Test scratch directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts node `k` in its namespace.
    pub fn start(&mut self, k: usize) -> Result<(), HarnessError> {
        let slot = &mut self.slots[k];
        let log = File::options()
            .create(true)
            .append(true)
            .open(&slot.log)
            .map_err(|e| HarnessError(format!("{}: {e}", slot.log.display())))?;
        let log2 = log
            .try_clone()
            .map_err(|e| HarnessError(format!("log: {e}")))?;
        let _ = std::fs::remove_file(&slot.spec.control);
        let child = Command::new("ip")
            .args(["netns", "exec", self.net.ns(k)])
            .arg(&self.program.program)
            .args((self.program.run_args)(&slot.spec))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| HarnessError(format!("starting {}: {e}", slot.spec.node_id)))?;
        slot.child = Some(child);
        Ok(())
    }

    /// `kill -9` of node `k` (the process `ip netns exec` became).
    pub fn kill9(&mut self, k: usize) -> Result<(), HarnessError> {
        if let Some(mut c) = self.slots[k].child.take() {
            c.kill()
                .map_err(|e| HarnessError(format!("kill {}: {e}", self.slots[k].spec.node_id)))?;
            let _ = c.wait();
        }
        Ok(())
    }

    /// True while node `k`'s process runs.
    pub fn running(&mut self, k: usize) -> bool {
        match self.slots[k].child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits for node `k`'s process to exit by itself.
    pub async fn wait_exit(&mut self, k: usize, timeout: Duration) -> Result<(), HarnessError> {
        let id = self.id(k).to_string();
        let start = Instant::now();
        while self.running(k) {
            if start.elapsed() > timeout {
                return Err(HarnessError(format!(
                    "{id} did not exit within {timeout:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.slots[k].child = None;
        Ok(())
    }

    /// Runs a command inside host `k`'s namespace and returns its output.
    pub fn exec_in(
        &self,
        k: usize,
        program: &Path,
        args: &[String],
    ) -> Result<Output, HarnessError> {
        Command::new("ip")
            .args(["netns", "exec", self.net.ns(k)])
            .arg(program)
            .args(args)
            .output()
            .map_err(|e| HarnessError(format!("exec in host {k}: {e}")))
    }

    /// Sends a control request to node `k`.
    pub async fn ctl(
        &self,
        k: usize,
        req: &ControlRequest,
    ) -> Result<ControlResponse, HarnessError> {
        ControlClient::new(&self.slots[k].spec.control)
            .request(req)
            .await
            .map_err(|e| HarnessError(format!("control {}: {e}", self.id(k))))
    }

    /// Sends a control request; returns the value or the error as text.
    pub async fn ctl_ok(&self, k: usize, req: &ControlRequest) -> Result<Value, String> {
        match self.ctl(k, req).await {
            Ok(ControlResponse::Ok(v)) => Ok(v),
            Ok(ControlResponse::Error { kind, message, .. }) => Err(format!("{kind}: {message}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Waits until node `k` answers on its control socket.
    pub async fn wait_ready(&self, k: usize, timeout: Duration) -> Result<(), HarnessError> {
        let what = format!("{} control socket", self.id(k));
        wait_for(&what, timeout, || async {
            self.ctl(k, &ControlRequest::Fence).await.ok().map(|_| ())
        })
        .await
    }

    /// Status of node `k` as JSON (None on error).
    pub async fn status(&self, k: usize) -> Option<Value> {
        self.ctl_ok(k, &ControlRequest::Status).await.ok()
    }

    /// The leader as seen by node `k` and its term.
    pub async fn leader_seen_by(&self, k: usize) -> Option<(String, u64)> {
        let s = self.status(k).await?;
        Some((
            s.get("leader")?.as_str()?.to_string(),
            s.get("term")?.as_u64()?,
        ))
    }

    /// Waits until every running server in `among` agrees on a leader (in `among`); returns its
    /// index and term.
    pub async fn wait_leader(
        &self,
        among: &[usize],
        timeout: Duration,
    ) -> Result<(usize, u64), HarnessError> {
        wait_for("an agreed leader", timeout, || async {
            let mut seen = None;
            for &k in among {
                let (l, t) = self.leader_seen_by(k).await?;
                match &seen {
                    None => seen = Some((l, t)),
                    Some((l0, t0)) if *l0 == l && *t0 == t => {}
                    Some(_) => return None,
                }
            }
            let (l, t) = seen?;
            let idx = self.index_of(&l)?;
            among.contains(&idx).then_some((idx, t))
        })
        .await
    }

    /// Starts every node, adds every server to raft and waits until all members see each other
    /// alive and all servers agree on a leader.
    pub async fn form(&mut self, timeout: Duration) -> Result<(), HarnessError> {
        self.start(0)?;
        self.wait_ready(0, timeout).await?;
        for k in 1..self.len() {
            self.start(k)?;
        }
        for k in 1..self.len() {
            self.wait_ready(k, timeout).await?;
        }
        for k in 1..self.servers {
            let id = self.id(k).to_string();
            // The new server must be visible in gossip (its address comes from there).
            wait_for(&format!("{id} added to raft"), timeout, || async {
                self.ctl_ok(
                    0,
                    &ControlRequest::AddServer {
                        node_id: crate::identity::NodeId::new(id.clone()).ok()?,
                        rpc_addr: None,
                    },
                )
                .await
                .ok()
            })
            .await?;
        }
        let n = self.len();
        wait_for("all members alive everywhere", timeout, || async {
            for k in 0..n {
                let v = self.ctl_ok(k, &ControlRequest::Members).await.ok()?;
                let alive = v
                    .as_array()?
                    .iter()
                    .filter(|m| m.get("status").and_then(Value::as_str) == Some("alive"))
                    .count();
                if alive != n {
                    return None;
                }
            }
            Some(())
        })
        .await?;
        let servers: Vec<usize> = (0..self.servers).collect();
        self.wait_leader(&servers, timeout).await?;
        Ok(())
    }

    /// Last `lines` lines of node `k`'s log.
    pub fn log_tail(&self, k: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.slots[k].log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for s in &mut self.slots {
            if let Some(mut c) = s.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if std::thread::panicking() {
            for k in 0..self.slots.len() {
                eprintln!(
                    "----- {} log (tail) -----\n{}",
                    self.id(k),
                    self.log_tail(k, 40)
                );
            }
            eprintln!("test data kept in {}", self.dir.display());
        } else if std::env::var_os("DAROS_TEST_KEEP").is_some() {
            eprintln!("test data kept in {} (DAROS_TEST_KEEP)", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
