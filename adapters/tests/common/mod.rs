//! Helpers shared by the process runtime tests: real cgroups under
//! `daros-test-*` names removed by Drop guards, instance specs, and waits
//! on events with deadlines (never sleep-and-hope).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod agent;

use daros_adapters::event::{EventStream, RuntimeEvent, RuntimeEventKind};
use daros_adapters::instance::{InstanceKey, WorkloadInstanceSpec};
use daros_adapters::placement::{CgroupPlacement, Placement};
use daros_adapters::process::{ProcessAdapter, ProcessAdapterConfig};
use daros_coordinator::QosClass;
use daros_coordinator::model::lifecycle_policy::LifecyclePolicy;
use daros_coordinator::model::names::AppKey;
use daros_coordinator::model::runtime::{OsType, RuntimeRequirement, RuntimeSpec, RuntimeType};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Hierarchies the tests place processes in: three v1 controllers of this
/// hybrid host and the bare cgroup2 mount.
pub const HIERARCHIES: [&str; 4] = ["cpu", "memory", "pids", "unified"];

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique `daros-test-*` name.
pub fn unique(what: &str) -> String {
    format!(
        "daros-test-{what}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// One cgroup per hierarchy, created by the test and removed on drop
/// (after killing whatever is left in it).
pub struct TestCgroups {
    pub name: String,
    pub dirs: Vec<PathBuf>,
}

impl TestCgroups {
    pub fn create(what: &str) -> Self {
        let name = unique(what);
        let mut dirs = Vec::new();
        for h in HIERARCHIES {
            let root = Path::new("/sys/fs/cgroup").join(h);
            assert!(
                root.is_dir(),
                "cgroup hierarchy {} is missing",
                root.display()
            );
            let d = root.join(&name);
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
            dirs.push(d);
        }
        Self { name, dirs }
    }

    pub fn placement(&self) -> CgroupPlacement {
        CgroupPlacement::dirs(&self.dirs)
    }

    pub fn pids(&self) -> Vec<u32> {
        self.placement().member_pids().unwrap()
    }

    /// Asserts that `pid` is in every cgroup of this set.
    pub fn assert_member(&self, pid: u32) {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        for h in HIERARCHIES {
            let want = format!("/{}", self.name);
            let ok = text.lines().any(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, ctrls, path) = (
                    parts.next(),
                    parts.next().unwrap_or(""),
                    parts.next().unwrap_or(""),
                );
                let hit = if h == "unified" {
                    ctrls.is_empty()
                } else {
                    ctrls.split(',').any(|c| c == h)
                };
                hit && path == want
            });
            assert!(
                ok,
                "pid {pid} is not in {h}:{want}; /proc/{pid}/cgroup:\n{text}"
            );
        }
    }
}

impl Drop for TestCgroups {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for d in &self.dirs {
            loop {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                for p in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    if let Some(pid) = rustix::process::Pid::from_raw(p) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
                if std::fs::remove_dir(d).is_ok() || !d.exists() || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// A state directory whose workloads are killed when the test ends, even
/// when it fails: workloads outlive their agent by design, so a failed test
/// would otherwise leave them running.
pub struct TestState {
    dir: tempfile::TempDir,
}

impl TestState {
    pub fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("daros-test-state-")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TestState {
    fn drop(&mut self) {
        use daros_adapters::process::protocol::{ProcessIdentity, StartedRecord, read_json};
        use rustix::process::{Pid, Signal, kill_process, kill_process_group};
        let same = |id: ProcessIdentity| {
            daros_adapters::process::protocol::process_start_time(id.pid).ok()
                == Some(id.start_time)
        };
        let Ok(instances) = std::fs::read_dir(self.path().join("run")) else {
            return;
        };
        for inst in instances.flatten() {
            let Ok(runs) = std::fs::read_dir(inst.path()) else {
                continue;
            };
            for run in runs.flatten() {
                let Ok(Some(s)) = read_json::<StartedRecord>(&run.path().join("started.json"))
                else {
                    continue;
                };
                if same(s.child)
                    && let Some(p) = Pid::from_raw(s.child.pid as i32)
                {
                    let _ = kill_process_group(p, Signal::KILL);
                }
                if same(s.shim)
                    && let Some(p) = Pid::from_raw(s.shim.pid as i32)
                {
                    let _ = kill_process(p, Signal::KILL);
                }
            }
        }
    }
}

pub fn shim_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_daros-shim"))
}

pub fn config(state: &Path) -> ProcessAdapterConfig {
    let mut c = ProcessAdapterConfig::new(state);
    c.shim_path = shim_path();
    c.default_grace = Duration::from_millis(1000);
    c
}

pub async fn open(state: &Path) -> (ProcessAdapter, EventStream) {
    ProcessAdapter::open(config(state)).await.unwrap()
}

pub fn process_req() -> RuntimeRequirement {
    RuntimeRequirement {
        runtime_type: RuntimeType::Process,
        os: OsType::Linux,
    }
}

/// A replica spec of workload `name` in `daros-test/app` running `runtime_spec`.
pub fn spec(
    name: &str,
    runtime_spec: serde_json::Value,
    placement: Placement,
) -> WorkloadInstanceSpec {
    WorkloadInstanceSpec {
        key: InstanceKey::replica(AppKey::new("daros-test", "app"), name, 0),
        runtime: process_req(),
        image: None,
        qos: QosClass::Burstable,
        resources: Default::default(),
        lifecycle: LifecyclePolicy::default(),
        health_checks: Vec::new(),
        deadline: None,
        runtime_spec: RuntimeSpec::new(runtime_spec),
        placement,
        security: Default::default(),
        namespace: None,
        volumes: Vec::new(),
        sidecars: Vec::new(),
    }
}

/// `sh -c script`.
pub fn sh(script: &str) -> serde_json::Value {
    serde_json::json!({"command": "/bin/sh", "args": ["-c", script]})
}

/// Waits up to `within` for an event about `id` matching `pred`; returns it
/// and every event about `id` seen before it.
pub async fn wait_event(
    events: &mut EventStream,
    id: &daros_adapters::RuntimeId,
    within: Duration,
    pred: impl Fn(&RuntimeEventKind) -> bool,
) -> (RuntimeEvent, Vec<RuntimeEvent>) {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| {
                panic!("no matching event for {id} within {within:?}; saw {seen:#?}")
            })
            .expect("event stream closed");
        if &ev.id != id {
            continue;
        }
        if pred(&ev.kind) {
            return (ev, seen);
        }
        seen.push(ev);
    }
}

/// Polls `cond` every 20 ms until it holds or `within` passes.
pub async fn wait_until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn alive(pid: u32) -> bool {
    // A zombie is not alive for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
