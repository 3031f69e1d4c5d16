//! Helpers of the datapath tests through darosd (`net_*.rs`): a darosd with its
//! own pin directory and data directory that can be killed and restarted, test
//! pins removed on drop, the `daros-bpf loadgen` sender and receiver started
//! inside managed workloads, and network namespaces.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Lines, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use daros_agent::client::Client;
use daros_agent::model::Workload;
use daros_agent::model::net::NetStatus;
use hyper::{Method, StatusCode};
use serde::de::DeserializeOwned;

pub use crate::common::{TestPins, require_root};
use crate::common::{TestRoot, unique_name, wait_for};

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A darosd whose socket and data directory live in `dir`, so a restart finds
/// its QoS state again. Killed with SIGKILL on drop.
pub struct Agent {
    pub child: Child,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Agent {
    /// Starts darosd (through `wrap`, e.g. `setpriv ...`, when given).
    pub fn start(
        dir: &Path,
        managed_root: &str,
        env: &[(&str, String)],
        extra: &[&str],
        wrap: &[&str],
    ) -> Self {
        let socket = dir.join("agent.sock");
        let log = dir.join(format!(
            "darosd-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let bin = env!("CARGO_BIN_EXE_darosd");
        let mut cmd = match wrap.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        for (k, _) in std::env::vars().filter(|(k, _)| {
            k.starts_with("DAROS_") || k == "NOTIFY_SOCKET" || k.starts_with("WATCHDOG_")
        }) {
            cmd.env_remove(k);
        }
        cmd.arg("--socket")
            .arg(&socket)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--managed-root")
            .arg(managed_root)
            .args([
                "--interval",
                "200ms",
                "--discovery-interval",
                "1s",
                "--log-level",
                "info",
            ])
            .args(extra)
            .env("DAROS_NET_RECONCILE_INTERVAL", "100ms")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let _ = std::fs::remove_file(&socket);
        let child = cmd.spawn().expect("spawn darosd");
        let a = Agent { child, socket, log };
        wait_for("darosd to answer", Duration::from_secs(30), || {
            let r = rt().block_on(a.client().request(Method::GET, "/healthz"));
            matches!(r, Ok((s, _)) if s.is_success()).then_some(())
        });
        a
    }

    pub fn client(&self) -> Client {
        Client::new(&self.socket)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> T {
        rt().block_on(self.client().get::<T>(path))
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log_text()))
    }

    pub fn net(&self) -> NetStatus {
        self.get("/v1/net")
    }

    pub fn workload(&self, id: &str) -> Workload {
        self.get(&format!("/v1/workloads/{id}"))
    }

    /// `PUT /v1/qos/workloads/<id>` with a JSON body; panics unless 2xx.
    pub fn set_class(&self, id: &str, body: serde_json::Value) {
        let (s, b) = rt()
            .block_on(self.client().request_json(
                Method::PUT,
                &format!("/v1/qos/workloads/{id}"),
                Some(&body),
            ))
            .unwrap();
        assert!(
            s.is_success(),
            "PUT qos {id}: {s} {}",
            String::from_utf8_lossy(&b)
        );
    }

    pub fn request(&self, method: Method, path: &str) -> (StatusCode, String) {
        let (s, b) = rt().block_on(self.client().request(method, path)).unwrap();
        (s, String::from_utf8_lossy(&b).into_owned())
    }

    /// Waits until `/v1/net` lists `ids` as counted.
    pub fn wait_counted(&self, ids: &[&str]) -> NetStatus {
        wait_for(
            "workloads counted by the datapath",
            Duration::from_secs(20),
            || {
                let s = self.net();
                ids.iter()
                    .all(|id| {
                        s.workloads
                            .iter()
                            .any(|w| w.workload == *id && w.attached && w.error.is_none())
                    })
                    .then_some(s)
            },
        )
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, reaped.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, waits for a clean exit.
    pub fn terminate(&mut self) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(
                    st.success(),
                    "darosd exited with {st}:\n{}",
                    self.log_text()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "darosd did not stop after SIGTERM:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.kill9();
        }
    }
}

/// `darosctl --socket S args...`.
pub fn darosctl(socket: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_darosctl"))
        .env_remove("DAROS_API_SOCKET")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run darosctl")
}

/// The traffic generator: `$DAROS_BPF_BIN` (e.g. `target/debug/daros-bpf`, as the
/// VM runs pass it) or `daros-bpf` built once with the cargo that builds these tests.
pub fn loadgen() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("DAROS_BPF_BIN") {
            return PathBuf::from(p);
        }
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "daros-ebpf",
                "--bin",
                "daros-bpf",
                "--message-format=json",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("running cargo build for daros-bpf");
        assert!(
            out.status.success(),
            "cargo build -p daros-ebpf --bin daros-bpf failed"
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v.get("executable")?.as_str().map(PathBuf::from))
            .find(|p| p.file_name().is_some_and(|f| f == "daros-bpf"))
            .expect("cargo reported the daros-bpf executable")
    })
    .clone()
}

/// A process started inside a managed workload (every hierarchy) before it opens
/// any socket; SIGKILLed on drop.
pub struct InWorkload(pub Child);

impl InWorkload {
    /// Runs `loadgen args...` in the test's own cgroup (no workload).
    pub fn outside(args: &[String]) -> Self {
        let child = Command::new(loadgen())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("spawn loadgen");
        InWorkload(child)
    }

    /// Runs `loadgen args...` in workload `name` of `t`.
    pub fn loadgen(t: &TestRoot, name: &str, args: &[String]) -> Self {
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg("read _ ; exec \"$0\" \"$@\"")
            .arg(loadgen())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("spawn loadgen");
        t.root
            .move_pid(name, child.id())
            .expect("move loadgen into the workload");
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        InWorkload(child)
    }

    fn wait_ok(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.0.try_wait().unwrap() {
                assert!(st.success(), "loadgen exited with {st}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "loadgen did not finish within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for InWorkload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn netns_args(netns: Option<&str>) -> Vec<String> {
    netns.map_or_else(Vec::new, |n| vec!["--netns".into(), n.into()])
}

/// A `loadgen recv` in a workload.
pub struct Receiver {
    proc: InWorkload,
    lines: Lines<BufReader<ChildStdout>>,
    pub addr: String,
}

/// What the receiver reported: total and (monotonic ns, running total) samples.
#[derive(Debug, Clone)]
pub struct RecvReport {
    pub bytes: u64,
    pub samples: Vec<(u64, u64)>,
}

impl RecvReport {
    /// Bytes/s between monotonic times t0 and t1 (nearest samples inside).
    pub fn rate(&self, t0: u64, t1: u64) -> f64 {
        let inside: Vec<&(u64, u64)> = self
            .samples
            .iter()
            .filter(|(t, _)| *t >= t0 && *t <= t1)
            .collect();
        assert!(inside.len() >= 2, "no samples in window");
        let (a, b) = (inside[0], inside[inside.len() - 1]);
        (b.1 - a.1) as f64 * 1e9 / (b.0 - a.0) as f64
    }

    pub fn first_byte_ns(&self) -> u64 {
        self.samples
            .iter()
            .find(|(_, b)| *b > 0)
            .map(|(t, _)| *t)
            .expect("received something")
    }
}

impl Receiver {
    /// A receiver in workload `name`, or outside every workload (`None`), e.g.
    /// standing for a peer on another host.
    pub fn start(
        t: &TestRoot,
        name: Option<&str>,
        netns: Option<&str>,
        listen: &str,
        conns: usize,
    ) -> Self {
        let mut args: Vec<String> = vec![
            "loadgen".into(),
            "recv".into(),
            "--listen".into(),
            listen.into(),
            "--conns".into(),
            conns.to_string(),
        ];
        args.extend(netns_args(netns));
        let mut proc = match name {
            Some(name) => InWorkload::loadgen(t, name, &args),
            None => InWorkload::outside(&args),
        };
        let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
        let first = lines.next().expect("receiver prints its address").unwrap();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        let addr = v["listening"].as_str().unwrap().to_owned();
        Receiver { proc, lines, addr }
    }

    pub fn finish(mut self, timeout: Duration) -> RecvReport {
        // Read the report while the receiver writes it: a long run's samples
        // fill more than the pipe holds, and the receiver cannot exit before
        // they are read.
        let (tx, rx) = std::sync::mpsc::channel();
        let mut lines = self.lines;
        std::thread::spawn(move || {
            let _ = tx.send(lines.next());
        });
        let line = rx
            .recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("no receiver report within {timeout:?}"))
            .expect("receiver report")
            .unwrap();
        self.proc.wait_ok(timeout);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        RecvReport {
            bytes: v["bytes"].as_u64().unwrap(),
            samples: v["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (s[0].as_u64().unwrap(), s[1].as_u64().unwrap()))
                .collect(),
        }
    }
}

/// What the sender reported.
#[derive(Debug, Clone, Copy)]
pub struct SendReport {
    pub bytes: u64,
    /// Bytes TCP sent again (TCP_INFO), which the datapath counts as well.
    pub retrans_bytes: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A `loadgen send` in a workload.
pub struct Sender(InWorkload);

impl Sender {
    /// `args`: `--secs`/`--bytes`/`--rate`/`--streams`.
    pub fn start(t: &TestRoot, name: &str, netns: Option<&str>, addr: &str, args: &[&str]) -> Self {
        let mut a: Vec<String> = vec![
            "loadgen".into(),
            "send".into(),
            "--connect".into(),
            addr.into(),
        ];
        a.extend(args.iter().map(|s| s.to_string()));
        a.extend(netns_args(netns));
        Sender(InWorkload::loadgen(t, name, &a))
    }

    pub fn finish(mut self, timeout: Duration) -> SendReport {
        self.0.wait_ok(timeout);
        let mut out = String::new();
        std::io::Read::read_to_string(self.0.0.stdout.as_mut().unwrap(), &mut out).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(out.lines().last().expect("sender report")).unwrap();
        SendReport {
            bytes: v["bytes"].as_u64().unwrap(),
            retrans_bytes: v["retrans_bytes"].as_u64().unwrap(),
            start_ns: v["start_ns"].as_u64().unwrap(),
            end_ns: v["end_ns"].as_u64().unwrap(),
        }
    }
}

/// Sends `args` traffic from workload `snd` to a receiver in `rcv` (same netns)
/// and returns (sender report, receiver report).
pub fn traffic(
    t: &TestRoot,
    snd: &str,
    rcv: &str,
    netns: Option<&str>,
    args: &[&str],
) -> (SendReport, RecvReport) {
    let rx = Receiver::start(t, Some(rcv), netns, "127.0.0.1:0", 1);
    let tx = Sender::start(t, snd, netns, &rx.addr, args);
    let sent = tx.finish(Duration::from_secs(120));
    let got = rx.finish(Duration::from_secs(120));
    (sent, got)
}

/// A network namespace with `lo` up, deleted on drop.
pub struct TestNetns {
    pub name: String,
}

pub fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestNetns {
    pub fn new(tag: &str) -> Self {
        require_root();
        let name = unique_name(tag);
        sh(&["ip", "netns", "add", &name]);
        let ns = TestNetns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    pub fn exec(&self, args: &[&str]) {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        sh(&full);
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// What one unpaced connection from workload `snd` to `rcv` moves (from 1 s after
/// the first byte).
pub fn uncapped(t: &TestRoot, snd: &str, rcv: &str) -> f64 {
    let (sent, got) = traffic(t, snd, rcv, None, &["--secs", "3"]);
    let r = got.rate(got.first_byte_ns() + 1_000_000_000, sent.end_ns);
    println!("uncapped: {:.1} MB/s", r / 1e6);
    r
}

/// The cap to test instead of `want` on a machine that moves only `uncapped`: at
/// most a third of it, so the cap binds with room to spare (the TCG-emulated VM
/// moves ~40 MB/s per loopback connection; the host hundreds).
pub fn testable_cap(want: u64, uncapped: f64) -> u64 {
    let third = (uncapped / 3.0) as u64 / 100_000 * 100_000;
    if third < want {
        println!(
            "this machine moves {:.1} MB/s: testing a {:.1} MB/s cap instead of {:.1} MB/s",
            uncapped / 1e6,
            third as f64 / 1e6,
            want as f64 / 1e6
        );
    }
    want.min(third)
}

/// `(a - b) / b`.
pub fn rel(a: f64, b: f64) -> f64 {
    (a - b) / b
}

/// node --veth--> peer: two test namespaces joined by a veth pair.
pub struct Link {
    pub node: TestNetns,
    pub peer: TestNetns,
    pub peer_ip: String,
    /// The node end of the pair.
    pub dev: String,
}

impl Link {
    pub fn new(tag: &str) -> Self {
        let node = TestNetns::new(&format!("{tag}-node"));
        let peer = TestNetns::new(&format!("{tag}-peer"));
        let id = std::process::id() % 100_000;
        let (vn, vp) = (format!("dan{id}"), format!("dap{id}"));
        let net = 150 + (id % 50);
        sh(&[
            "ip", "link", "add", &vn, "netns", &node.name, "type", "veth", "peer", "name", &vp,
            "netns", &peer.name,
        ]);
        node.exec(&["ip", "addr", "add", &format!("10.{net}.0.1/24"), "dev", &vn]);
        peer.exec(&["ip", "addr", "add", &format!("10.{net}.0.2/24"), "dev", &vp]);
        node.exec(&["ip", "link", "set", &vn, "up"]);
        peer.exec(&["ip", "link", "set", &vp, "up"]);
        Link {
            node,
            peer,
            peer_ip: format!("10.{net}.0.2"),
            dev: vn,
        }
    }

    /// What four unpaced connections from workload `name` move node -> peer
    /// in 2 s (from 0.5 s after the first byte), bytes/s.
    pub fn ceiling(&self, t: &TestRoot, name: &str) -> f64 {
        let rx = Receiver::start(
            t,
            None,
            Some(&self.peer.name),
            &format!("{}:0", self.peer_ip),
            4,
        );
        let tx = Sender::start(
            t,
            name,
            Some(&self.node.name),
            &rx.addr,
            &["--secs", "2", "--streams", "4"],
        );
        let sent = tx.finish(Duration::from_secs(60));
        let got = rx.finish(Duration::from_secs(60));
        got.rate(got.first_byte_ns() + 500_000_000, sent.end_ns)
    }

    /// Shapes the node's egress with tbf to `bytes_per_second` (the bottleneck
    /// the workloads share, as a NIC would be).
    pub fn shape(&self, bytes_per_second: u64) {
        let rate = format!("{}kbit", bytes_per_second * 8 / 1000);
        self.node.exec(&[
            "tc", "qdisc", "add", "dev", &self.dev, "root", "tbf", "rate", &rate, "burst", "1mb",
            "latency", "20ms",
        ]);
    }
}
