//! Shared helpers for the agent's integration tests: a managed cgroup root named
//! `daros-test-*` that is removed (with every process in it) even when a test
//! fails, processes started inside a workload cgroup, and condition waits.
#![allow(dead_code)]

pub mod raw_http;
pub mod reuseport;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use daros_agent::cgroup::{AnyBackend, CgroupBackend, CgroupPath, ManagedRoot};
use daros_agent::sensing::devices::whole_disks;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique name `daros-test-<tag>-<pid>-<n>`.
pub fn unique_name(tag: &str) -> String {
    format!(
        "daros-test-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

/// eBPF pins, cgroups and namespaces need root; CI runs the tests as root.
pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test must run as root (CI runs the tests as root)"
    );
}

/// A managed root for one test; dropping it kills its processes and removes it.
pub struct TestRoot {
    pub root: ManagedRoot,
}

impl TestRoot {
    pub fn new(tag: &str) -> Self {
        Self::named(&unique_name(tag))
    }

    /// A root with exactly this name (must start with `daros-test-` or `daros-bench-`).
    pub fn named(name: &str) -> Self {
        assert!(name.starts_with("daros-test-") || name.starts_with("daros-bench-"));
        let backend = AnyBackend::detect().expect("cgroups mounted");
        let disks: Vec<(u32, u32)> = whole_disks(
            Path::new("/sys/block"),
            &["loop".into(), "ram".into(), "zram".into()],
        )
        .into_iter()
        .map(|d| (d.major, d.minor))
        .collect();
        let root = ManagedRoot::ensure(backend, CgroupPath::new(name).unwrap(), &disks)
            .expect("create test managed root (tests need root)");
        TestRoot { root }
    }

    pub fn name(&self) -> &str {
        self.root.path().as_str()
    }

    pub fn backend(&self) -> &AnyBackend {
        self.root.backend()
    }

    /// Creates workload `name` and returns its path.
    pub fn workload(&self, name: &str) -> CgroupPath {
        self.root
            .create_workload(name)
            .expect("create workload cgroup")
    }

    /// Starts `sh -c script` inside workload `name`: the shell waits for a line on
    /// stdin, so the work only begins once the process sits in the cgroup.
    pub fn spawn(&self, name: &str, script: &str) -> Proc {
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("read _ ; exec sh -c '{script}'"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        self.root
            .move_pid(name, child.id())
            .expect("move pid into workload");
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        Proc { child }
    }

    fn kill_all(&self, cg: &CgroupPath) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = self.backend().procs(cg).unwrap_or_default();
            if pids.is_empty() || Instant::now() > deadline {
                return;
            }
            for p in pids {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(p as i32).unwrap(),
                    rustix::process::Signal::KILL,
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl TestRoot {
    /// Kills the processes of `cg` and its descendants and removes them, deepest first.
    fn remove_tree(&self, cg: &CgroupPath) {
        if let Some(primary) = self.backend().primary() {
            let mut children: Vec<String> = std::fs::read_dir(cg.under(primary))
                .map(|rd| {
                    rd.filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default();
            children.sort();
            for c in children {
                if let Ok(child) = cg.join(&c) {
                    self.remove_tree(&child);
                }
            }
        }
        self.kill_all(cg);
        // rmdir can race with the exit of the last task: retry briefly.
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Err(e) = self.backend().remove(cg) {
            if Instant::now() > deadline {
                eprintln!("warning: leaving test cgroup {cg}: {e}");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Creates `rel` (a path below the root, any depth) in every hierarchy.
    pub fn create_nested(&self, rel: &str) -> CgroupPath {
        let mut cg = self.root.path().clone();
        for part in rel.split('/') {
            cg = cg.join(part).unwrap();
        }
        self.backend().create(&cg).expect("create nested cgroup");
        cg
    }

    /// Like [`TestRoot::spawn`], for a cgroup at any depth below the root.
    pub fn spawn_in(&self, cg: &CgroupPath, script: &str) -> Proc {
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("read _ ; exec sh -c '{script}'"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        self.backend()
            .add_pid(cg, child.id())
            .expect("move pid into cgroup");
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        Proc { child }
    }
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        let root = self.root.path().clone();
        self.remove_tree(&root);
    }
}

/// A process group started by [`TestRoot::spawn`]; killed on drop.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = rustix::process::kill_process_group(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `f` until it returns `Some` or the deadline passes.
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
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A directory on a real block device for IO tests (`DAROS_TEST_IO_DIR` first),
/// or `None` when only virtual filesystems are writable.
pub fn block_backed_dir() -> Option<PathBuf> {
    // DAROS_VM_DISK_MOUNT: the ext4 disk of the cgroup-v2 VM (docs/vm-tests.md).
    let candidates = ["DAROS_TEST_IO_DIR", "DAROS_VM_DISK_MOUNT"]
        .into_iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain([
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
            PathBuf::from("/var/tmp"),
            PathBuf::from("/tmp"),
        ]);
    for c in candidates {
        if let Ok(st) = rustix::fs::stat(&c)
            && rustix::fs::major(st.st_dev) != 0
        {
            return Some(c);
        }
    }
    None
}

/// A sampler over the test root only (no Kubernetes/systemd discovery), with
/// discovery on every tick.
pub fn sampler(t: &TestRoot, gpu: daros_agent::gpu::GpuCollector) -> daros_agent::sensing::Sampler {
    use daros_agent::sensing::discovery::DiscoveryConfig;
    use daros_agent::sensing::node::ProcPaths;
    use daros_agent::sensing::{Sampler, SamplerConfig};
    let cfg = SamplerConfig {
        node_name: "test".into(),
        discovery_interval: Duration::ZERO,
        discovery: DiscoveryConfig {
            managed_root: t.root.path().clone(),
            kubernetes: false,
            kubepods_roots: vec![],
            systemd: false,
            systemd_unit_types: vec![],
            max_workloads: 1000,
        },
        exclude_devices: vec!["loop".into(), "ram".into(), "zram".into()],
        exclude_interfaces: vec![],
        agent: Default::default(),
        paths: ProcPaths::default(),
    };
    Sampler::new(cfg, t.backend().clone(), gpu).expect("sampler")
}

/// The built `darosd` on `socket`, `data_dir` and `managed_root`, sampling
/// fast, logging to `log`, with no `DAROS_*` or systemd variables of the
/// caller's environment.
pub fn darosd_command(
    socket: &Path,
    data_dir: &Path,
    managed_root: &str,
    log: &Path,
    pins: &TestPins,
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_darosd"));
    for (k, _) in std::env::vars().filter(|(k, _)| {
        k.starts_with("DAROS_") || k == "NOTIFY_SOCKET" || k.starts_with("WATCHDOG_")
    }) {
        cmd.env_remove(k);
    }
    let (key, dir) = pins.env();
    // No eBPF datapath unless a test asks (`DAROS_NET_ENABLED=true`): the net_* tests cover
    // it, and every extra sched_switch program with its task storage slows every switch
    // and can make another test's run-queue accounting miss slices.
    cmd.env(key, dir).env("DAROS_NET_ENABLED", "false");
    cmd.arg("--socket")
        .arg(socket)
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--managed-root")
        .arg(managed_root)
        .args(["--interval", "200ms", "--discovery-interval", "1s"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    cmd
}

/// A pin directory `/sys/fs/bpf/daros-test-*`, removed (detaching everything) on drop:
/// every darosd a test starts pins there, never in the machine's `/sys/fs/bpf/daros`.
pub struct TestPins(pub PathBuf);

impl TestPins {
    pub fn new(tag: &str) -> Self {
        require_root();
        TestPins(PathBuf::from(format!("/sys/fs/bpf/{}", unique_name(tag))))
    }

    pub fn pin_dir(&self) -> daros_ebpf::PinDir {
        daros_ebpf::PinDir::new(&self.0)
    }

    pub fn env(&self) -> (&'static str, String) {
        ("DAROS_NET_PIN_DIR", self.0.display().to_string())
    }
}

impl Drop for TestPins {
    fn drop(&mut self) {
        if let Err(e) = self.pin_dir().remove_all() {
            eprintln!("removing {}: {e}", self.0.display());
        }
    }
}

/// A running `darosd` (the built binary) with its own socket, data dir and
/// managed root; killed on drop if the test did not stop it.
pub struct Daemon {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub pins: TestPins,
}

impl Daemon {
    /// Starts darosd with `extra` arguments and environment.
    pub fn start(managed_root: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in(managed_root, None, extra, env)
    }

    /// As `start`, with the data directory at `data` (else in the temporary directory).
    pub fn start_in(
        managed_root: &str,
        data: Option<&Path>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run/agent.sock");
        let log = dir.path().join("darosd.log");
        let pins = TestPins::new("daemon");
        let data = data.map_or_else(|| dir.path().join("data"), Path::to_path_buf);
        let mut cmd = darosd_command(&socket, &data, managed_root, &log, &pins);
        cmd.args(["--log-level", "info"])
            .args(extra)
            .envs(env.iter().copied());
        let child = cmd.spawn().expect("spawn darosd");
        let mut d = Daemon {
            child,
            dir,
            socket,
            log,
            pins,
        };
        wait_socket("darosd socket", &d.socket, Duration::from_secs(30));
        // The socket is bound before start-up work (a first disk calibration takes seconds,
        // more on a loaded host): ready is when the API answers, or when darosd has exited.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !api_answers(&d.socket) && d.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "darosd's API did not answer in 120 s\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    pub fn client(&self) -> daros_agent::client::Client {
        daros_agent::client::Client::new(&self.socket)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
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

impl Drop for Daemon {
    /// SIGTERM first, so the agent restores what it changed (holds, iocost)
    /// before the next test; SIGKILL if it has not stopped within 10 s.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// True while `pid` runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Waits until something accepts connections on unix socket `socket`.
/// Whether an HTTP request on the API socket gets an answer (any status) within 2 s.
pub fn api_answers(socket: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: darosd\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 8];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

pub fn wait_socket(what: &str, socket: &Path, timeout: Duration) {
    wait_for(what, timeout, || {
        std::os::unix::net::UnixStream::connect(socket)
            .ok()
            .map(|_| ())
    });
}

/// Runs `darosctl --socket <socket> args...`.
pub fn darosctl(socket: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_darosctl"));
    cmd.env_remove("DAROS_API_SOCKET")
        .arg("--socket")
        .arg(socket)
        .args(args);
    cmd.output().expect("run darosctl")
}

/// The sample application (examples/shop.yaml).
pub const SHOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/shop.yaml");

/// A loopback TCP port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The sample shop renamed to `app`, serving on `port` from `dir`; with
/// `fail_init` its init job exits 3.
pub fn shop_yaml(app: &str, port: u16, dir: &Path, fail_init: bool) -> String {
    // web and worker run as nobody: the test's own directory (a 0700
    // tempdir) must let them through.
    if let Some(parent) = dir.parent()
        && parent.starts_with(std::env::temp_dir())
        && parent != std::env::temp_dir()
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755));
    }
    let mut y = std::fs::read_to_string(SHOP)
        .unwrap()
        .replace("name: shop\n", &format!("name: {app}\n"))
        .replace("18080", &port.to_string())
        .replace("/tmp/daros-shop", &dir.display().to_string());
    assert!(y.contains(&format!("name: {app}\n")));
    if fail_init {
        let start = y.find("args: [\"-c\", \"mkdir -p").expect("init job args");
        let end = start + y[start..].find('\n').unwrap();
        y.replace_range(
            start..end,
            "args: [\"-c\", \"echo cannot prepare >&2; exit 3\"]",
        );
    }
    y
}

/// A darosd a test can `kill -9` and start again on the same socket, data dir, managed root
/// and pins (each start logs to its own file); SIGKILLed on drop. Callers wait for the
/// readiness they need after [`RestartableDarosd::spawn`].
pub struct RestartableDarosd {
    child: Option<Child>,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub root: String,
    starts: u32,
    pins: TestPins,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl RestartableDarosd {
    /// Not started yet; `args` and `env` are added to every start.
    pub fn new(dir: &Path, root: &str, tag: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        RestartableDarosd {
            child: None,
            dir: dir.to_path_buf(),
            socket: dir.join("run/agent.sock"),
            root: root.to_string(),
            starts: 0,
            pins: TestPins::new(tag),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Starts darosd (a stale socket of the last run removed first).
    pub fn spawn(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        self.starts += 1;
        let log = self.dir.join(format!("darosd-{}.log", self.starts));
        let mut cmd = darosd_command(
            &self.socket,
            &self.dir.join("data"),
            &self.root,
            &log,
            &self.pins,
        );
        cmd.args(&self.args).envs(self.env.iter().cloned());
        self.child = Some(cmd.spawn().expect("spawn darosd"));
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    pub fn ctl(&self, args: &[&str]) -> std::process::Output {
        darosctl(&self.socket, args)
    }

    /// darosctl's stdout; a failure panics with its output and the agent's log.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "darosctl {args:?} failed: {}{}\nlog:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The log of the current (last) start.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("darosd-{}.log", self.starts)))
            .unwrap_or_default()
    }

    /// `darosctl ARGS -o json`, parsed (a failure panics as [`Self::ctl_ok`]).
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ctl_ok(&a)).unwrap()
    }

    /// `darosctl describe app APP -o json`.
    pub fn describe(&self, app: &str) -> serde_json::Value {
        self.json(&["describe", "app", app])
    }

    /// Waits up to [`APP_WAIT`] until `ok` holds for `app`'s description; on timeout the
    /// panic shows the last description and the agent's log, so a CI failure says where
    /// it stuck.
    pub fn wait_app(
        &self,
        what: &str,
        app: &str,
        ok: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + APP_WAIT;
        loop {
            let d = self.describe(app);
            if ok(&d) {
                return d;
            }
            if Instant::now() >= deadline {
                let log = self.log();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(60)..].join("\n");
                panic!(
                    "timed out after {APP_WAIT:?} waiting for {what}\nlast description: {d:#}\nlog tail:\n{tail}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl RestartableDarosd {
    /// darosd with the runtime executor (daros-shim beside it, a 2 s stop grace), started
    /// and serving its socket.
    pub fn runtime_agent(dir: &Path, root: &str, tag: &str) -> Self {
        let shim = Path::new(env!("CARGO_BIN_EXE_darosd")).with_file_name("daros-shim");
        assert!(
            shim.is_file(),
            "{} missing: run `cargo build -p daros-adapters --bin daros-shim`",
            shim.display()
        );
        let mut a =
            RestartableDarosd::new(dir, root, tag, &[], &[("DAROS_RUNTIME_STOP_GRACE", "2s")]);
        a.spawn_serving();
        a
    }

    /// [`Self::spawn`], then waits for the API socket.
    pub fn spawn_serving(&mut self) {
        self.spawn();
        wait_socket("darosd socket", &self.socket, APP_WAIT);
    }
}

/// Every cgroup directory left under the test's managed root, in every hierarchy.
pub fn cgroups_left(t: &TestRoot) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in t.backend().dirs(&CgroupPath::new(t.name()).unwrap()) {
        if let Ok(rd) = std::fs::read_dir(&d.path) {
            out.extend(
                rd.filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|f| f.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    out
}

/// How long [`RestartableDarosd::wait_app`] waits.
pub const APP_WAIT: Duration = Duration::from_secs(60);

/// An application description's phase.
pub fn phase(d: &serde_json::Value) -> String {
    d["phase"].as_str().unwrap_or_default().to_string()
}

/// The first instance of `workload` in an application description.
pub fn instance<'a>(d: &'a serde_json::Value, workload: &str) -> Option<&'a serde_json::Value> {
    d["instances"].as_array()?.iter().find(|i| {
        i["id"]
            .as_str()
            .is_some_and(|id| id.split('/').nth(2) == Some(workload))
    })
}

/// The pids in the instance cgroup `cgroup` (`tenant.app.workload-vN.R`).
pub fn pids_of(t: &TestRoot, cgroup: &str) -> Vec<u32> {
    let cg = t.root.workload(cgroup).unwrap();
    t.backend().procs(&cg).unwrap_or_default()
}

/// The parent pid of `pid`.
pub fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The instance's main processes: those in its cgroup whose parent is outside it (httpd
/// forks a child per request, a shell forks `sleep`, so the set changes).
pub fn main_pids(t: &TestRoot, cgroup: &str) -> Vec<u32> {
    let pids = pids_of(t, cgroup);
    pids.iter()
        .copied()
        .filter(|p| ppid(*p).is_some_and(|pp| !pids.contains(&pp)))
        .collect()
}

/// The instance's one main process.
pub fn main_pid(t: &TestRoot, cgroup: &str) -> u32 {
    let mains = main_pids(t, cgroup);
    assert_eq!(mains.len(), 1, "one main process in {cgroup}: {mains:?}");
    mains[0]
}

impl Drop for RestartableDarosd {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A process's command line (`/proc/PID/cmdline`).
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// `KEY=value` pairs of a process's environment (`/proc/PID/environ`).
pub fn environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// The raw HTTP/1.0 answer to `GET path` on 127.0.0.1:`port` (500 ms to
/// connect, `read_timeout` to read), if the port answers.
pub fn http_get(port: u16, path: &str, read_timeout: Duration) -> Option<String> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], port).into(),
        Duration::from_millis(500),
    )
    .ok()?;
    s.set_read_timeout(Some(read_timeout)).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// `promtool check metrics` accepts `body` without a remark (skipped, saying
/// so, where promtool — Debian package `prometheus` — is not installed).
pub fn promtool_check_metrics(body: &str) {
    use std::io::Write as _;
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "SKIPPED: promtool not installed (Debian package `prometheus`); /metrics was not linted"
            );
            return;
        }
        Err(e) => panic!("promtool: {e}"),
        Ok(c) => c,
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The value of `series` (a metric name with its labels, exactly as
/// exported) on a `/metrics` page.
pub fn metric_value(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// A cgroup file's text, trimmed ("" when unreadable).
pub fn read_trimmed(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// `usage_usec` of a cgroup-v2 `cpu.stat`.
pub fn cpu_usec(dir: &Path) -> u64 {
    read_trimmed(&dir.join("cpu.stat"))
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec ").and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Bytes read from device `dev` (`MAJ:MIN`) by a cgroup-v2 cgroup (`io.stat`).
pub fn rbytes(dir: &Path, dev: &str) -> u64 {
    read_trimmed(&dir.join("io.stat"))
        .lines()
        .filter(|l| l.starts_with(&format!("{dev} ")))
        .flat_map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.strip_prefix("rbytes="))
                .filter_map(|v| v.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Mount points under `dir` (this mount namespace).
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).filter(|m| m.starts_with(&prefix)))
        .map(str::to_string)
        .collect()
}

/// Unmounts (lazily) whatever is still mounted under its directory when the
/// test ends, passed or not, so that volumes' loop devices and the tempdir go.
pub struct UnmountUnder(pub PathBuf);

impl Drop for UnmountUnder {
    fn drop(&mut self) {
        for mp in mounts_under(&self.0) {
            let _ = std::process::Command::new("umount")
                .args(["-l", &mp])
                .status();
        }
    }
}
