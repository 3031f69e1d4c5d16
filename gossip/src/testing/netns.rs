//! Test networks: one network namespace per node, veth pairs into a bridge namespace, all named
//! `daros-test-mesh-<pid>-<seq>-*` and removed on drop (also when the test fails), plus removal
//! of namespaces left behind by killed test runs.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use super::HarnessError;

const PREFIX: &str = "daros-test-mesh-";
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Runs `ip` with `args`; errors carry the command and its stderr.
pub fn ip(args: &[&str]) -> Result<(), HarnessError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| HarnessError(format!("ip {}: {e}", args.join(" "))))?;
    if !out.status.success() {
        return Err(HarnessError(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// True when this machine lets us create network namespaces (root, iproute2).
pub fn available() -> Result<(), HarnessError> {
    let name = format!(
        "{PREFIX}{}-{}-probe",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    ip(&["netns", "add", &name])?;
    ip(&["netns", "del", &name])
}

/// Deletes namespaces of earlier runs whose process is gone.
pub fn cleanup_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let alive = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
        if !alive && let Err(e) = ip(&["netns", "del", name]) {
            eprintln!("stale namespace {name} not removed: {e}");
        }
    }
}

/// A bridged test network of `n` hosts.
pub struct TestNet {
    base: String,
    bridge: String,
    hosts: Vec<String>,
}

impl TestNet {
    /// Creates the bridge namespace and `n` host namespaces with 10.77.1.<k+1>/24 on eth0.
    pub fn new(n: usize) -> Result<Self, HarnessError> {
        cleanup_stale();
        let base = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let bridge = format!("{base}-br");
        let mut net = Self {
            base: base.clone(),
            bridge: bridge.clone(),
            hosts: Vec::new(),
        };
        ip(&["netns", "add", &bridge])?;
        ip(&["-n", &bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &bridge, "link", "set", "br0", "up"])?;
        for k in 0..n {
            let ns = format!("{base}-n{k}");
            ip(&["netns", "add", &ns])?;
            net.hosts.push(ns.clone());
            let peer = format!("p{k}");
            ip(&[
                "link", "add", "name", "eth0", "netns", &ns, "type", "veth", "peer", "name", &peer,
                "netns", &bridge,
            ])?;
            ip(&["-n", &bridge, "link", "set", &peer, "master", "br0"])?;
            ip(&["-n", &bridge, "link", "set", &peer, "up"])?;
            let addr = format!("{}/24", net.ip(k));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Namespace name of host `k`.
    pub fn ns(&self, k: usize) -> &str {
        &self.hosts[k]
    }

    /// Address of host `k`.
    pub fn ip(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, 1, (k + 1) as u8)
    }

    /// Common prefix of every name of this network.
    pub fn name(&self) -> &str {
        &self.base
    }

    /// Cuts host `k` off the network (its bridge port goes down).
    pub fn isolate(&self, k: usize) -> Result<(), HarnessError> {
        ip(&["-n", &self.bridge, "link", "set", &format!("p{k}"), "down"])
    }

    /// Reconnects host `k`.
    pub fn heal(&self, k: usize) -> Result<(), HarnessError> {
        ip(&["-n", &self.bridge, "link", "set", &format!("p{k}"), "up"])
    }

    /// Drops all traffic between hosts `a` and `b` (blackhole routes inside both namespaces).
    pub fn block(&self, a: usize, b: usize) -> Result<(), HarnessError> {
        ip(&[
            "-n",
            self.ns(a),
            "route",
            "add",
            "blackhole",
            &format!("{}/32", self.ip(b)),
        ])?;
        ip(&[
            "-n",
            self.ns(b),
            "route",
            "add",
            "blackhole",
            &format!("{}/32", self.ip(a)),
        ])
    }

    /// Undoes [`TestNet::block`].
    pub fn unblock(&self, a: usize, b: usize) -> Result<(), HarnessError> {
        ip(&[
            "-n",
            self.ns(a),
            "route",
            "del",
            "blackhole",
            &format!("{}/32", self.ip(b)),
        ])?;
        ip(&[
            "-n",
            self.ns(b),
            "route",
            "del",
            "blackhole",
            &format!("{}/32", self.ip(a)),
        ])
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain(std::iter::once(&self.bridge)) {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("test namespace {ns} not removed: {e}");
            }
        }
    }
}
