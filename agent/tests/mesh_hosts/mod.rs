//! Three (or more) darosd in network namespaces joined by veth pairs into a
//! bridge, created and removed by the test: the hosts of the multi-node tests
//! (control_multi, chaos).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use daros_gossip::testing::TestNet;
use serde_json::Value;

use crate::common::{TestRoot, darosctl, wait_for, wait_socket};

/// One darosd in its own network namespace.
pub struct Host {
    /// Node name (`s1`...).
    pub name: String,
    /// Its network namespace.
    pub ns: String,
    /// Its address.
    pub ip: String,
    /// Its directory (config, data, logs).
    pub dir: PathBuf,
    /// Its API socket.
    pub socket: PathBuf,
    /// The running darosd.
    pub child: Option<Child>,
    /// Its managed cgroup root (removed with the host).
    pub root: TestRoot,
    /// Test timing (fast gossip and elections) instead of the defaults.
    pub fast: bool,
    /// More `[mesh]` keys (a bench's raft timing), after the others.
    pub mesh_extra: String,
}

impl Host {
    /// Its `/metrics` page, fetched inside its network namespace.
    pub fn metrics(&self) -> Option<String> {
        fetch_in(&self.ns, &format!("http://{}:9464/metrics", self.ip))
    }

    pub fn config(&self, seed: &str, role: &str) -> PathBuf {
        let p = self.dir.join("agent.toml");
        let seeds = if seed.is_empty() {
            String::new()
        } else {
            format!("seeds = [\"{seed}\"]\n")
        };
        // Fast: quick gossip and elections for short tests; otherwise darosd's
        // defaults (the chaos test measures those), with work re-sent every second.
        let timing = if self.fast {
            "gossip_interval = \"100ms\"\nraft_heartbeat = \"50ms\"\n\
             raft_election_min = \"300ms\"\nraft_election_max = \"600ms\"\n"
        } else {
            ""
        };
        std::fs::write(
            &p,
            format!(
                "[agent]\nnode_name = \"{}\"\n[net]\nenabled = false\n[metrics]\nlisten = \"{ip}:9464\"\n[mesh]\n\
                 role = \"{role}\"\nrpc_listen = \"{ip}:7100\"\ngossip_listen = \"{ip}:7000\"\n{seeds}\
                 {timing}dispatch_interval = \"1s\"\n{extra}[mesh.labels]\nhost = \"{}\"\n",
                self.name,
                self.name,
                ip = self.ip,
                extra = self.mesh_extra
            ),
        )
        .unwrap();
        p
    }

    pub fn start(&mut self, seed: &str, join: Option<(&str, &str)>) {
        // The role must match the join token's (darosd refuses otherwise).
        let client = join.is_some_and(|(t, _)| {
            t.parse::<daros_gossip::pki::JoinToken>()
                .is_ok_and(|t| t.role == daros_gossip::Role::Client)
        });
        let cfg = self.config(seed, if client { "client" } else { "server" });
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("darosd.log"))
            .unwrap();
        // nsenter enters only the network namespace; `ip netns exec` would also
        // remount /sys, hiding the cgroup mounts darosd needs.
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.ns))
            .arg("--")
            .arg(darosd_binary());
        darosd_args(
            &mut cmd,
            &cfg,
            &self.socket,
            &self.dir.join("data"),
            self.root.name(),
            join,
        );
        cmd.args(["--interval", "500ms"]);
        self.child = Some(
            cmd.stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn darosd"),
        );
        wait_socket(
            &format!("{} API", self.name),
            &self.socket,
            Duration::from_secs(30),
        );
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn ctl(&self, args: &[&str]) -> std::process::Output {
        darosctl(&self.socket, args)
    }

    pub fn json(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["-o", "json"];
        a.extend_from_slice(args);
        let out = self.ctl(&a);
        // Callers poll with this; a failure is shown so a test that then fails says why.
        if !out.status.success() {
            eprintln!(
                "{}: darosctl {args:?} failed: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        match serde_json::from_slice(&out.stdout) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("{}: darosctl {args:?} printed no JSON ({e})", self.name);
                None
            }
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("darosd.log")).unwrap_or_default()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- {} log tail ---", self.name);
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

/// The darosd to run: `DAROS_TEST_DAROSD` (a bench's release build) or the
/// one cargo built for the tests.
/// darosd's arguments for a test host: its config, socket, data dir,
/// managed root and join credentials; the test's own `DAROS_*` variables
/// are not passed on.
pub fn darosd_args(
    cmd: &mut Command,
    cfg: &Path,
    socket: &Path,
    data: &Path,
    root: &str,
    join: Option<(&str, &str)>,
) {
    cmd.arg("--config")
        .arg(cfg)
        .arg("--socket")
        .arg(socket)
        .arg("--data-dir")
        .arg(data)
        .arg("--managed-root")
        .arg(root);
    if let Some((token, server)) = join {
        cmd.args(["--join", token, "--server", server]);
    }
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DAROS_")) {
        cmd.env_remove(k);
    }
}

pub fn darosd_binary() -> PathBuf {
    std::env::var_os("DAROS_TEST_DAROSD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_darosd")))
}

pub fn hosts(net: &TestNet, dir: &Path, n: usize) -> Vec<Host> {
    (0..n)
        .map(|k| {
            let name = format!("s{}", k + 1);
            let d = dir.join(&name);
            std::fs::create_dir_all(&d).unwrap();
            Host {
                socket: d.join("agent.sock"),
                dir: d,
                ns: net.ns(k).to_string(),
                ip: net.ip(k).to_string(),
                name: name.clone(),
                child: None,
                root: TestRoot::new(&format!("multi-{name}")),
                fast: true,
                mesh_extra: String::new(),
            }
        })
        .collect()
}

/// Cgroups under a managed root whose name mentions `app` (the runtime names
/// them `<tenant>.<app>.<workload>...`), on any mounted hierarchy.
pub fn app_cgroups(root: &str, app: &str) -> Vec<String> {
    let needle = format!(".{app}.");
    [
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup",
    ]
    .iter()
    .filter_map(|base| std::fs::read_dir(Path::new(base).join(root)).ok())
    .flat_map(|d| d.filter_map(Result::ok))
    .map(|e| e.file_name().to_string_lossy().into_owned())
    .filter(|n| n.contains(&needle))
    .collect()
}

pub fn leader_of(h: &Host) -> Option<String> {
    let v = h.json(&["cluster", "status"])?;
    v["status"]["leader"].as_str().map(str::to_string)
}

pub fn apply_no_start(h: &Host, file: &str) -> std::process::Output {
    h.ctl(&["apply", "--no-start", "-f", file])
}

/// Three darosd servers in three namespaces: s1 creates the cluster, s2 and s3
/// join with the server token and are added as voters.
pub fn form() -> (TestNet, tempfile::TempDir, Vec<Host>) {
    form_with(0)
}

/// [`form`] with `spare` more hosts whose darosd is not started.
pub fn form_with(spare: usize) -> (TestNet, tempfile::TempDir, Vec<Host>) {
    form_opts(spare, true)
}

/// [`form_with`], with test timing (`fast`) or darosd's default timing.
pub fn form_opts(spare: usize, fast: bool) -> (TestNet, tempfile::TempDir, Vec<Host>) {
    form_custom(spare, fast, "")
}

/// [`form_opts`] with more `[mesh]` keys for every host (`mesh_extra`).
pub fn form_custom(
    spare: usize,
    fast: bool,
    mesh_extra: &str,
) -> (TestNet, tempfile::TempDir, Vec<Host>) {
    if let Err(e) = daros_gossip::testing::netns::available() {
        panic!("network namespaces are required for this test: {e}");
    }
    let net = TestNet::new(3 + spare).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut hs = hosts(&net, dir.path(), 3 + spare);
    for h in &mut hs {
        h.fast = fast;
        h.mesh_extra = mesh_extra.to_string();
    }
    let seed = format!("{}:7000", hs[0].ip);
    let server = format!("{}:7100", hs[0].ip);

    // s1 creates the cluster; the others join with the server token.
    hs[0].start("", None);
    let init = wait_for("tokens", Duration::from_secs(30), || {
        hs[0].json(&["cluster", "init"])
    });
    let token = init["server_token"].as_str().unwrap().to_string();
    for h in hs.iter_mut().take(3).skip(1) {
        h.start(&seed, Some((&token, &server)));
    }
    for name in ["s2", "s3"] {
        wait_for(
            &format!("add-server {name}"),
            Duration::from_secs(30),
            || {
                hs[0]
                    .ctl(&["cluster", "add-server", name])
                    .status
                    .success()
                    .then_some(())
            },
        );
    }
    let t0 = Instant::now();
    wait_for(
        "3 voters, 3 registered nodes",
        Duration::from_secs(30),
        || {
            let st = hs[0].json(&["cluster", "status"])?;
            let voters = st["status"]["servers"]
                .as_array()?
                .iter()
                .filter(|s| s["voter"] == true)
                .count();
            let nodes = hs[1].json(&["get", "nodes"])?.as_array()?.len();
            (voters == 3 && nodes == 3).then_some(())
        },
    );
    eprintln!("cluster formed {:?} after the joins", t0.elapsed());
    let members = hs[2].json(&["members"]).unwrap();
    assert_eq!(members.as_array().unwrap().len(), 3, "{members}");

    (net, dir, hs)
}

/// `darosctl apply -f -` of `text` (with `--no-start` unless `start`); true when
/// acknowledged.
pub fn apply_text(socket: &Path, text: &str, start: bool) -> bool {
    use std::io::Write as _;
    let mut args = vec!["apply", "-f", "-"];
    if !start {
        args.push("--no-start");
    }
    let Ok(mut child) = Command::new(env!("CARGO_BIN_EXE_darosctl"))
        .env_remove("DAROS_API_SOCKET")
        .arg("--socket")
        .arg(socket)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(text.as_bytes());
    }
    child.wait().is_ok_and(|s| s.success())
}

/// The body `url` answers inside network namespace `ns` (busybox wget run
/// there), if it answers.
pub fn fetch_in(ns: &str, url: &str) -> Option<String> {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        // busybox 1.35's `wget -T` crashes; timeout(1) bounds a hung fetch instead.
        .args([
            "--",
            "timeout",
            "3",
            "/usr/bin/busybox",
            "wget",
            "-q",
            "-O",
            "-",
        ])
        .arg(url)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
