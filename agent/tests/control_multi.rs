//! darosd as a multi-node cluster (issue 5 item 6, the subset done so far):
//! three darosd in three network namespaces joined by veth pairs into a
//! bridge, created and removed by the test. Join with tokens, add servers,
//! write through a follower, `kill -9` of the leader → a new leader serves
//! `darosctl apply`, the killed node is marked dead, and without a quorum a
//! write gets 503 instead of hanging.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestRoot, darosctl, wait_for};
use daros_gossip::testing::TestNet;
use serde_json::Value;

const SHOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/shop.yaml");

struct Host {
    name: String,
    ns: String,
    ip: String,
    dir: PathBuf,
    socket: PathBuf,
    child: Option<Child>,
    _root: TestRoot,
}

impl Host {
    fn config(&self, seed: &str) -> PathBuf {
        let p = self.dir.join("agent.toml");
        let seeds = if seed.is_empty() {
            String::new()
        } else {
            format!("seeds = [\"{seed}\"]\n")
        };
        std::fs::write(
            &p,
            format!(
                "[agent]\nnode_name = \"{}\"\n[net]\nenabled = false\n[mesh]\n\
                 rpc_listen = \"{ip}:7100\"\ngossip_listen = \"{ip}:7000\"\n{seeds}\
                 gossip_interval = \"100ms\"\nraft_heartbeat = \"50ms\"\n\
                 raft_election_min = \"300ms\"\nraft_election_max = \"600ms\"\n\
                 dispatch_interval = \"1s\"\n",
                self.name,
                ip = self.ip
            ),
        )
        .unwrap();
        p
    }

    fn start(&mut self, seed: &str, join: Option<(&str, &str)>) {
        let cfg = self.config(seed);
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
            .arg(env!("CARGO_BIN_EXE_darosd"))
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(&self.socket)
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--managed-root")
            .arg(self._root.name())
            .args(["--interval", "500ms"]);
        if let Some((token, server)) = join {
            cmd.args(["--join", token, "--server", server]);
        }
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DAROS_")) {
            cmd.env_remove(k);
        }
        self.child = Some(
            cmd.stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn darosd"),
        );
        wait_for(
            &format!("{} API", self.name),
            Duration::from_secs(30),
            || {
                std::os::unix::net::UnixStream::connect(&self.socket)
                    .ok()
                    .map(|_| ())
            },
        );
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn ctl(&self, args: &[&str]) -> std::process::Output {
        darosctl(&self.socket, args)
    }

    fn json(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["-o", "json"];
        a.extend_from_slice(args);
        let out = self.ctl(&a);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    fn log(&self) -> String {
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

fn hosts(net: &TestNet, dir: &Path, n: usize) -> Vec<Host> {
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
                _root: TestRoot::new(&format!("multi-{name}")),
            }
        })
        .collect()
}

fn leader_of(h: &Host) -> Option<String> {
    let v = h.json(&["cluster", "status"])?;
    v["status"]["leader"].as_str().map(str::to_string)
}

fn apply_no_start(h: &Host, file: &str) -> std::process::Output {
    h.ctl(&["apply", "--no-start", "-f", file])
}

#[test]
fn join_write_via_follower_and_leader_kill9_failover() {
    if let Err(e) = daros_gossip::testing::netns::available() {
        panic!("network namespaces are required for this test: {e}");
    }
    let net = TestNet::new(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut hs = hosts(&net, dir.path(), 3);
    let seed = format!("{}:7000", hs[0].ip);
    let server = format!("{}:7100", hs[0].ip);

    // s1 creates the cluster; the others join with the server token.
    hs[0].start("", None);
    let init = wait_for("tokens", Duration::from_secs(30), || {
        hs[0].json(&["cluster", "init"])
    });
    let token = init["server_token"].as_str().unwrap().to_string();
    for h in hs.iter_mut().skip(1) {
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

    // A write through a follower is forwarded to the leader.
    let leader = leader_of(&hs[0]).unwrap();
    let follower = hs.iter().position(|h| h.name != leader).unwrap();
    let out = apply_no_start(&hs[follower], SHOP);
    assert!(out.status.success(), "{out:?}\n{}", hs[follower].log());
    for h in &hs {
        wait_for("app replicated", Duration::from_secs(10), || {
            let apps = h.json(&["get", "apps"])?;
            (apps.as_array()?.len() == 1).then_some(())
        });
    }

    // kill -9 of the leader: a survivor takes `darosctl apply`.
    let li = hs.iter().position(|h| h.name == leader).unwrap();
    let survivor = (li + 1) % 3;
    let two = dir.path().join("two.yaml");
    std::fs::write(
        &two,
        std::fs::read_to_string(SHOP)
            .unwrap()
            .replace("name: shop\n", "name: shop-two\n"),
    )
    .unwrap();
    let two = two.display().to_string();
    hs[li].kill9();
    let killed = Instant::now();
    wait_for("apply after failover", Duration::from_secs(30), || {
        apply_no_start(&hs[survivor], &two)
            .status
            .success()
            .then_some(())
    });
    let failover = killed.elapsed();
    let new_leader = leader_of(&hs[survivor]).unwrap();
    assert_ne!(new_leader, leader);
    eprintln!("leader {leader} killed; {new_leader} took a write after {failover:?}");
    let apps = hs[survivor].json(&["get", "apps"]).unwrap();
    assert_eq!(apps.as_array().unwrap().len(), 2, "{apps}");

    // The killed node is marked dead in gossip, then down in the coordinator.
    wait_for("killed node dead", Duration::from_secs(30), || {
        let m = hs[survivor].json(&["members"])?;
        m.as_array()?
            .iter()
            .any(|m| m["node_id"] == leader.as_str() && m["status"] == "dead")
            .then_some(())
    });
    wait_for("killed node unschedulable", Duration::from_secs(30), || {
        let n = hs[survivor].json(&["get", "nodes"])?;
        n.as_array()?
            .iter()
            .any(|n| n["node"]["name"] == leader.as_str() && n["node"]["schedulable"] == false)
            .then_some(())
    });

    // Without a quorum a write is refused with 503, nothing hangs.
    let other = (0..3).find(|&k| k != li && k != survivor).unwrap();
    hs[other].kill9();
    let started = Instant::now();
    let out = apply_no_start(&hs[survivor], SHOP);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HTTP 503"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
}
