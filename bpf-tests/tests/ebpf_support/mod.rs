//! Shared helpers of the host eBPF tests (`ebpf_*.rs`): root check, test pin directories and
//! cgroups that remove themselves even when a test fails, network namespaces, the binary under
//! test, and waiting on a condition with a deadline.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use daros_ebpf::{CgroupId, CgroupRoot, PinDir};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique to this test process and call: `daros-test-<pid>-<n>-<what>`.
pub fn unique(what: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("daros-test-{}-{n}-{what}", std::process::id())
}

/// These tests load BPF programs and create cgroups: they need root, and CI runs them as root.
pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "the eBPF host tests must run as root (CI runs them as root)"
    );
}

/// A pin directory under /sys/fs/bpf, removed (detaching everything) on drop.
pub struct TestPins(pub PinDir);

impl TestPins {
    pub fn new(what: &str) -> Self {
        require_root();
        Self(PinDir::new(format!("/sys/fs/bpf/{}", unique(what))))
    }
}

impl Drop for TestPins {
    fn drop(&mut self) {
        if let Err(e) = self.0.remove_all() {
            eprintln!("cleaning {}: {e}", self.0.path().display());
        }
    }
}

/// A cgroup under the v2 mount, killed and removed (children first) on drop.
pub struct TestCgroup {
    pub path: PathBuf,
    owned: bool,
}

impl TestCgroup {
    pub fn new(what: &str) -> Self {
        require_root();
        let root = CgroupRoot::detect().expect("cgroup v2 mount");
        let path = root.path().join(unique(what));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        Self { path, owned: true }
    }

    pub fn child(&self, name: &str) -> TestCgroup {
        let path = self.path.join(name);
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        // removed by the parent's drop
        TestCgroup { path, owned: false }
    }

    pub fn id(&self) -> CgroupId {
        CgroupId::of_path(&self.path).unwrap()
    }

    pub fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path.join(file)).unwrap()
    }

    /// `usage_usec` from cpu.stat.
    pub fn cpu_usage_usec(&self) -> u64 {
        self.read("cpu.stat")
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok())
            .expect("usage_usec in cpu.stat")
    }

    fn procs(path: &Path) -> String {
        std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default()
    }

    fn remove(path: &Path) {
        if let Ok(entries) = std::fs::read_dir(path) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    Self::remove(&e.path());
                }
            }
        }
        let _ = std::fs::write(path.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !Self::procs(path).trim().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // rmdir can race with the last task's exit accounting: retry until the deadline
        while let Err(e) = std::fs::remove_dir(path) {
            if Instant::now() >= deadline {
                eprintln!("removing {}: {e}", path.display());
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if self.owned {
            Self::remove(&self.path);
        }
    }
}

/// A network namespace with `lo` up, deleted on drop.
pub struct TestNetns {
    pub name: String,
}

impl TestNetns {
    pub fn new(what: &str) -> Self {
        require_root();
        let name = unique(what);
        sh(&["ip", "netns", "add", &name]);
        let ns = Self { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs a command inside the namespace and checks it succeeds.
    pub fn exec(&self, args: &[&str]) {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        sh(&full);
    }

    pub fn sysctl(&self, key: &str, value: &str) {
        self.exec(&["sysctl", "-q", "-w", &format!("{key}={value}")]);
    }

    /// Counters of an interface inside the namespace (`/sys/class/net/<dev>/statistics/<f>`).
    pub fn stat(&self, dev: &str, field: &str) -> u64 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.name,
                "cat",
                &format!("/sys/class/net/{dev}/statistics/{field}"),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
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

/// Polls `f` until it returns Some or the deadline passes (then panics naming `what`).
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The datapath binary under test: `$DAROS_BPF_BIN` if set (e.g. darosd later), else
/// `daros-bpf`, built once per test process with the cargo that builds these tests.
pub fn datapath_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("DAROS_BPF_BIN") {
            return PathBuf::from(p);
        }
        let out = daros_bpf_tests::cargo_tests::cargo_command(env!("CARGO").as_ref())
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
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| {
                v.get("executable")
                    .and_then(|e| e.as_str())
                    .map(PathBuf::from)
            })
            .find(|p| p.file_name().is_some_and(|f| f == "daros-bpf"))
            .expect("cargo reported the daros-bpf executable")
    })
    .clone()
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc(pub Child);

impl Proc {
    pub fn spawn(cmd: &mut Command) -> Self {
        Self(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}")),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Waits for exit with a deadline and returns stdout (stdout must be piped).
    pub fn finish(mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                let mut out = String::new();
                if let Some(mut s) = self.0.stdout.take() {
                    use std::io::Read;
                    s.read_to_string(&mut out).unwrap();
                }
                assert!(
                    status.success(),
                    "child exited with {status}; stdout: {out}"
                );
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "child did not finish within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CLOCK_MONOTONIC in ns (the clock of the programs and of the loadgen reports).
pub fn now_ns() -> u64 {
    daros_ebpf::floor_runner::monotonic_ns()
}

/// What `loadgen recv` reported: total bytes and (monotonic ns, running total) samples.
#[derive(Debug, Clone)]
pub struct RecvReport {
    pub bytes: u64,
    pub samples: Vec<(u64, u64)>,
}

impl RecvReport {
    /// Bytes per second received between monotonic times `t0` and `t1` (interpolated
    /// from the nearest samples inside the window).
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

    /// Monotonic time of the first received byte.
    pub fn first_byte_ns(&self) -> u64 {
        self.samples
            .iter()
            .find(|(_, b)| *b > 0)
            .map(|(t, _)| *t)
            .expect("received something")
    }
}

/// A running `loadgen recv`.
pub struct Receiver {
    proc: Proc,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    pub addr: String,
}

fn placement(cmd: &mut Command, cgroup: &Path, netns: Option<&str>) {
    cmd.arg("--cgroup").arg(cgroup);
    if let Some(ns) = netns {
        cmd.args(["--netns", ns]);
    }
}

impl Receiver {
    pub fn start(cgroup: &Path, netns: Option<&str>, listen: &str, conns: usize) -> Self {
        use std::io::BufRead;
        let mut cmd = Command::new(datapath_bin());
        cmd.args([
            "loadgen",
            "recv",
            "--listen",
            listen,
            "--conns",
            &conns.to_string(),
        ]);
        placement(&mut cmd, cgroup, netns);
        cmd.stdout(Stdio::piped());
        let mut proc = Proc::spawn(&mut cmd);
        let stdout = proc.0.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let first = lines.next().expect("receiver prints its address").unwrap();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        let addr = v["listening"].as_str().unwrap().to_owned();
        Self { proc, lines, addr }
    }

    pub fn finish(mut self, timeout: Duration) -> RecvReport {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.proc.0.try_wait().unwrap() {
                assert!(status.success(), "receiver failed: {status}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "receiver did not finish within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let line = self.lines.next().expect("receiver report").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let samples = v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s[0].as_u64().unwrap(), s[1].as_u64().unwrap()))
            .collect();
        RecvReport {
            bytes: v["bytes"].as_u64().unwrap(),
            samples,
        }
    }
}

/// What `loadgen send` reported.
#[derive(Debug, Clone, Copy)]
pub struct SendReport {
    pub bytes: u64,
    /// Bytes TCP sent again (TCP_INFO), which the datapath counts as well.
    pub retrans_bytes: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Starts `loadgen send` (`args`: --secs/--bytes/--rate/--streams ...).
pub fn start_sender(cgroup: &Path, netns: Option<&str>, addr: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(datapath_bin());
    cmd.args(["loadgen", "send", "--connect", addr]).args(args);
    placement(&mut cmd, cgroup, netns);
    cmd.stdout(Stdio::piped());
    Proc::spawn(&mut cmd)
}

pub fn send_report(out: &str) -> SendReport {
    let v: serde_json::Value =
        serde_json::from_str(out.lines().last().expect("sender report")).unwrap();
    SendReport {
        bytes: v["bytes"].as_u64().unwrap(),
        retrans_bytes: v["retrans_bytes"].as_u64().unwrap(),
        start_ns: v["start_ns"].as_u64().unwrap(),
        end_ns: v["end_ns"].as_u64().unwrap(),
    }
}

/// CPU time of every process on the machine at one moment (`/proc/<pid>/stat`), to name
/// what else ran while a rate was measured: a cap that misses its bar beside a CPU hog is
/// the hog's doing, not the datapath's.
pub struct CpuUse(std::collections::BTreeMap<u32, (String, u64)>);

impl CpuUse {
    pub fn now() -> Self {
        let mut m = std::collections::BTreeMap::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // comm is in parentheses and may hold spaces; utime and stime are fields 14, 15.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let comm = stat[open + 1..close].to_string();
            let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            m.insert(pid, (comm, ticks(11) + ticks(12)));
        }
        Self(m)
    }

    /// The `n` processes that used the most CPU since `self` (processes that ended meanwhile
    /// are not seen), each with its CPU seconds.
    pub fn busiest_since(&self, n: usize) -> String {
        let later = Self::now();
        let hz = rustix::param::clock_ticks_per_second() as f64;
        let mut used: Vec<(u64, u32, String)> = later
            .0
            .iter()
            .map(|(pid, (comm, t))| {
                let before = self.0.get(pid).map_or(0, |(_, b)| *b);
                (t.saturating_sub(before), *pid, comm.clone())
            })
            .filter(|(d, _, _)| *d > 0)
            .collect();
        used.sort_by_key(|u| std::cmp::Reverse(u.0));
        used.iter()
            .take(n)
            .map(|(d, pid, comm)| format!("{comm} ({pid}) {:.2} CPU-s", *d as f64 / hz))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
