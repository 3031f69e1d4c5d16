//! The control plane on a single node, end to end (issue 6 item 8): a real
//! darosd (the built binary) forms its own one-member raft cluster on
//! loopback, and darosctl applies, lists, describes, explains and what-ifs
//! applications over the real socket. `kill -9` and a restart keep the
//! applications, their versions and their events (raft log in redb).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{RestartableDarosd, TestRoot, free_port, shop_yaml, wait_for};
use serde_json::Value;

/// darosd on a data dir that outlives the process (for restarts); SIGKILLed on drop.
struct Node(RestartableDarosd);

impl std::ops::Deref for Node {
    type Target = RestartableDarosd;
    fn deref(&self) -> &RestartableDarosd {
        &self.0
    }
}

impl Node {
    fn start(dir: &Path, root: &str) -> Self {
        let mut n = Node(RestartableDarosd::new(
            dir,
            root,
            "ctl-single",
            &["--node-name", "ctl-single"],
            &[],
        ));
        n.spawn();
        n
    }

    /// Starts darosd; ready once the coordinator answers (a leader exists and has applied).
    fn spawn(&mut self) {
        self.0.spawn();
        wait_for("darosd control plane", Duration::from_secs(30), || {
            let out = self.ctl(&["-o", "json", "get", "nodes"]);
            let nodes: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            (out.status.success() && nodes.as_array().is_some_and(|n| !n.is_empty())).then_some(())
        });
    }

    fn kill9(&mut self) {
        self.0.kill9();
    }

    fn ok(&self, args: &[&str]) -> String {
        self.ctl_ok(args)
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["-o", "json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }

    /// Deletes an application and waits until its processes are gone, so
    /// that the test's managed root can be removed.
    fn cleanup(&self, app: &str) {
        self.ok(&["delete", "app", app]);
        // The runtime names cgroups `<tenant>.<app>.<workload>...`.
        let needle = format!(".{app}.");
        wait_for("instances stopped", Duration::from_secs(30), || {
            let left: Vec<String> = [
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/memory",
                "/sys/fs/cgroup",
            ]
            .iter()
            .filter_map(|b| std::fs::read_dir(Path::new(b).join(&self.root)).ok())
            .flat_map(|d| d.filter_map(Result::ok))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(&needle))
            .collect();
            left.is_empty().then_some(())
        });
    }
}

fn write_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// The sample shop as `app` on a port and a directory of this test's own: the two tests
/// here (and others) run at once and would share 18080 and /tmp/daros-shop.
fn shop_text(dir: &Path, app: &str) -> String {
    shop_yaml(app, free_port(), &dir.join(app), false)
}

#[test]
fn apply_get_describe_explain_whatif_over_the_socket() {
    let t = TestRoot::new("ctl-single");
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), t.name());

    // The node registered itself and leads its one-member cluster.
    let status = node.json(&["cluster", "status"]);
    assert_eq!(status["status"]["leader"], "ctl-single", "{status}");
    assert_eq!(status["status"]["servers"].as_array().unwrap().len(), 1);
    let members = node.json(&["members"]);
    assert_eq!(members[0]["node_id"], "ctl-single");
    assert_eq!(members[0]["status"], "alive");

    let shop = write_file(dir.path(), "shop.yaml", &shop_text(dir.path(), "shop"));
    let out = node.ok(&["apply", "-f", &shop]);
    assert!(out.contains("applied (raft term"), "{out}");
    assert!(out.contains("Scheduled"), "{out}");

    let apps = node.json(&["get", "apps"]);
    let apps = apps.as_array().unwrap();
    assert_eq!(apps.len(), 1, "{apps:?}");
    assert_eq!(apps[0]["app"]["name"], "shop");
    assert_eq!(apps[0]["phase"], "Scheduled");
    let table = node.ok(&["get", "apps"]);
    assert!(
        table.contains("shop-team") && table.contains("Scheduled"),
        "{table}"
    );

    // describe: current phase, events, instances placed on this node.
    let d = node.ok(&["describe", "app", "shop"]);
    assert!(d.contains("Phase:       Scheduled"), "{d}");
    assert!(d.contains("Events:"), "{d}");
    assert!(d.contains("-> Created (user): version 1 applied"), "{d}");
    assert!(
        d.contains("ctl-single"),
        "instances are placed on this node:\n{d}"
    );
    let dj = node.json(&["describe", "app", "shop"]);
    assert_eq!(dj["events"].as_array().unwrap().len(), 3, "{dj}");

    // explain: the arbitration decision placing the replicas here.
    let e = node.ok(&["explain", "shop"]);
    assert!(e.contains("Decision d-2 (Arbitration)"), "{e}");
    assert!(e.contains("web/0 -> ctl-single"), "{e}");

    // what-if of a second application changes nothing.
    let text = shop_text(dir.path(), "shop-two");
    let f = write_file(dir.path(), "two.yaml", &text);
    let w = node.ok(&["what-if", "-f", &f]);
    assert!(w.contains("What-if (nothing was changed)"), "{w}");
    assert!(w.contains("shop-team/shop-two: would be Scheduled"), "{w}");
    let apps = node.json(&["get", "apps"]);
    assert_eq!(apps.as_array().unwrap().len(), 1, "what-if created nothing");
    let after = node.json(&["describe", "app", "shop"]);
    assert_eq!(after["versions"], dj["versions"], "what-if changed nothing");
    assert_eq!(
        after["decisions"], dj["decisions"],
        "what-if recorded nothing"
    );

    // A bad spec: 400 naming the field; nothing accepted is lost.
    let bad = std::fs::read_to_string(&shop)
        .unwrap()
        .replace("priority: 100", "priority: lots");
    let f = write_file(dir.path(), "bad.yaml", &bad);
    let out = node.ctl(&["apply", "-f", &f]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.priority") && err.contains("HTTP 400"),
        "{err}"
    );
    assert_eq!(node.json(&["get", "apps"]).as_array().unwrap().len(), 1);

    // Unknown application: exit status 3 (not found).
    let out = node.ctl(&["describe", "app", "nope", "--tenant", "shop-team"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");

    // Apply from standard input works too.
    let mut child = Command::new(env!("CARGO_BIN_EXE_darosctl"))
        .arg("--socket")
        .arg(&node.socket)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(node.json(&["get", "apps"]).as_array().unwrap().len(), 2);
    node.cleanup("shop");
    node.cleanup("shop-two");
}

#[test]
fn kill9_and_restart_keep_apps_versions_and_events() {
    let t = TestRoot::new("ctl-restart");
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), t.name());
    let shop = shop_text(dir.path(), "shop");
    node.ok(&["apply", "-f", &write_file(dir.path(), "shop.yaml", &shop)]);
    let v2 = shop.replace("priority: 100", "priority: 120");
    let f = write_file(dir.path(), "v2.yaml", &v2);
    node.ok(&["apply", "-f", &f]);
    node.ok(&["rollback", "shop", "--to", "1"]);
    let before = node.json(&["describe", "app", "shop"]);
    assert_eq!(before["version"], 3, "{before}");
    assert_eq!(before["versions"].as_array().unwrap().len(), 3);
    let events = before["events"].as_array().unwrap().len();
    assert!(events >= 3, "{before}");

    node.kill9();
    node.spawn();

    let after = node.json(&["describe", "app", "shop"]);
    assert_eq!(after["version"], 3, "{after}");
    assert_eq!(after["versions"], before["versions"]);
    // Events only grow (the runtime may have moved the application on).
    let (b, a) = (
        before["events"].as_array().unwrap(),
        after["events"].as_array().unwrap(),
    );
    assert!(
        a.len() >= b.len() && a[..b.len()] == b[..],
        "{a:?}\nvs\n{b:?}"
    );
    let ids = |v: &Value| {
        v["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (i["id"].clone(), i["node"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&after), ids(&before));
    // Still writable after the restart, on the same cluster.
    node.ok(&["rollback", "shop", "--to", "2"]);
    let again = node.json(&["describe", "app", "shop"]);
    assert_eq!(again["version"], 4, "{again}");
    assert_eq!(again["priority"], 120);
    node.cleanup("shop");
}

/// Optimistic concurrency for pipelines (issue 20): two concurrent applies of the
/// same application expecting the same version — exactly one wins, the other gets a
/// 409 naming the version it is at, and nothing of the loser is applied.
#[test]
fn two_applies_expecting_one_version_exactly_one_wins() {
    let t = TestRoot::new("ctl-expect");
    let dir = tempfile::tempdir().unwrap();
    let n = Node::start(dir.path(), t.name());
    let base = shop_yaml("pipe", free_port(), &dir.path().join("shop"), false);
    let f0 = dir.path().join("v1.yaml");
    std::fs::write(&f0, &base).unwrap();
    // Version 0: it must not exist yet.
    n.ok(&[
        "apply",
        "--no-start",
        "--expect-version",
        "0",
        "-f",
        f0.to_str().unwrap(),
    ]);
    let files: Vec<String> = ["65Mi", "66Mi"]
        .iter()
        .map(|m| {
            let text = base.replacen(
                "memory: {request: 64Mi",
                &format!("memory: {{request: {m}"),
                1,
            );
            assert_ne!(text, base, "examples/shop.yaml changed shape");
            let f = dir.path().join(format!("{m}.yaml"));
            std::fs::write(&f, text).unwrap();
            f.display().to_string()
        })
        .collect();
    let runs: Vec<std::process::Child> = files
        .iter()
        .map(|f| {
            Command::new(env!("CARGO_BIN_EXE_darosctl"))
                .env_remove("DAROS_API_SOCKET")
                .arg("--socket")
                .arg(&n.socket)
                .args(["apply", "--no-start", "--expect-version", "1", "-f", f])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let results: Vec<(bool, String)> = runs
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .collect();
    let winners: Vec<usize> = (0..2).filter(|&i| results[i].0).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let loser = &results[1 - winners[0]].1;
    assert!(
        loser.contains(
            "application shop-team/pipe is at version 2, not 1: it changed since you read it; \
             read it again (darosctl describe app) and retry (HTTP 409)"
        ),
        "{loser}"
    );
    let d = n.json(&["describe", "app", "pipe"]);
    assert_eq!(d["versions"].as_array().unwrap().len(), 2, "{d:#}");
    // A stale expectation on an operation is refused the same way.
    let out = n.ctl(&["operate", "pipe", "--expect-version", "1", "start"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is at version 2, not 1"),
        "{out:?}"
    );
}

/// Bounded history (issue 20): `cluster retention --versions 2`, five versions
/// applied — `describe` keeps the last two and says three were compacted, a
/// rollback to a compacted one says so, and a kill -9 and restart rebuilds the
/// same bounded state.
#[test]
fn retention_bounds_the_versions_and_says_what_it_dropped() {
    let t = TestRoot::new("ctl-retain");
    let dir = tempfile::tempdir().unwrap();
    let mut n = Node::start(dir.path(), t.name());
    let out = n.ctl(&["cluster", "retention", "--versions", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("retention.versions: 1 is below the minimum 2"),
        "{err}"
    );
    n.ok(&["cluster", "retention", "--versions", "2"]);
    let base = shop_yaml("retained", free_port(), &dir.path().join("shop"), false);
    for m in 64..69 {
        let text = base.replacen(
            "memory: {request: 64Mi",
            &format!("memory: {{request: {m}Mi"),
            1,
        );
        let f = dir.path().join(format!("v{m}.yaml"));
        std::fs::write(&f, text).unwrap();
        n.ok(&["apply", "--no-start", "-f", f.to_str().unwrap()]);
    }
    let check = |n: &Node| {
        let d = n.json(&["describe", "app", "retained"]);
        let kept: Vec<u64> = d["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_u64().unwrap())
            .collect();
        assert_eq!(kept, vec![4, 5], "{d:#}");
        assert_eq!(d["compacted"]["versions"], 3, "{d:#}");
        let text = n.ok(&["describe", "app", "retained"]);
        assert!(text.contains("Compacted:   3 version(s)"), "{text}");
        let out = n.ctl(&["rollback", "retained", "--to", "2"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("version 2 was compacted away by retention (the oldest kept is 4;"),
            "{err}"
        );
    };
    check(&n);
    n.kill9();
    n.spawn();
    check(&n);
}

/// Hostile input (issue 23): YAML nested 50,000 deep (100 KB) is refused by a
/// linear scan before the parser sees it (it used to hold a core for 4.7 s), and
/// the agent goes on answering.
#[test]
fn deeply_nested_yaml_is_refused_before_parsing() {
    let t = TestRoot::new("ctl-deep");
    let dir = tempfile::tempdir().unwrap();
    let n = Node::start(dir.path(), t.name());
    let f = dir.path().join("deep.yaml");
    std::fs::write(&f, "a: ".to_string() + &"[".repeat(50_000)).unwrap();
    let t0 = std::time::Instant::now();
    let out = n.ctl(&["apply", "-f", f.to_str().unwrap()]);
    eprintln!(
        "50,000 levels refused in {:?} (darosctl round trip)",
        t0.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("nesting deeper than 64 levels: refused before parsing"),
        "{err}"
    );
    assert!(err.contains("(HTTP 400)"), "{err}");
    n.ok(&["get", "apps"]);
}

/// Removing the last voter is refused as a conflict with the cluster's
/// shape (409, with the reason), not reported as an outage, and the cluster
/// goes on serving.
#[test]
fn removing_the_last_voter_is_a_conflict() {
    let t = TestRoot::new("ctl-lastvoter");
    let dir = tempfile::tempdir().unwrap();
    let n = Node::start(dir.path(), t.name());
    let out = n.ctl(&["cluster", "remove-server", "ctl-single"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("cannot remove the last voter"), "{err}");
    assert!(err.contains("(HTTP 409)"), "{err}");
    n.ok(&["get", "apps"]);
}

/// Node documents against what the node measured (issue 23): one named
/// after this node cannot raise its capacity; a made-up node is listed as
/// not yet seen and never given work; a node that is gone can be deleted, a
/// live one cannot; all of it survives a restart.
#[test]
fn node_documents_cannot_inflate_capacity_and_ghosts_take_no_work() {
    let t = TestRoot::new("ctl-nodes");
    let dir = tempfile::tempdir().unwrap();
    let mut n = Node::start(dir.path(), t.name());
    let cpus = n.json(&["get", "nodes"])[0]["node"]["capacity"]["cpu"].clone();
    // Registered as allocatable: the node's total less the system
    // reservation its own admission keeps (qos.system_reserved_*: 250m, 512Mi).
    let me: daros_coordinator::ExecutionNode =
        serde_json::from_value(n.json(&["get", "nodes"])[0]["node"].clone()).unwrap();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let total: u64 = online
        .trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1,
            None => 1,
        })
        .sum();
    assert_eq!(me.capacity.cpu.0, total * 1000 - 250, "{online}");
    let mem_total: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert_eq!(me.capacity.memory.0, mem_total * 1024 - 512 * 1024 * 1024);
    let inflate = write_file(
        dir.path(),
        "inflate.yaml",
        "apiVersion: daros.io/v1\nkind: Node\nmetadata: {name: ctl-single}\nspec:\n  \
         capacity: {cpu: \"1000\", memory: 10Ti}\n  runtimes: [process]\n",
    );
    let out = n.ctl(&["apply", "-f", &inflate]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("spec.capacity.cpu: 1000 is more than node ctl-single reports"),
        "{err}"
    );
    assert!(err.contains("(HTTP 400)"), "{err}");
    assert_eq!(
        n.json(&["get", "nodes"])[0]["node"]["capacity"]["cpu"],
        cpus
    );

    let ghost = write_file(
        dir.path(),
        "ghost.yaml",
        "apiVersion: daros.io/v1\nkind: Node\nmetadata: {name: ghost-node}\nspec:\n  \
         capacity: {cpu: \"64\", memory: 256Gi}\n  runtimes: [process]\n---\n\
         apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: acme}\nspec: {}\n---\n\
         apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: big, tenant: acme}\nspec:\n  \
         workloads:\n    - {name: w, runtime: {type: process}, \
         resources: {cpu: {request: \"32\"}, memory: {request: 64Mi}}, runtimeSpec: {command: /bin/true}}\n",
    );
    // Applied, and the application fails arbitration rather than waiting
    // on a node nothing will ever run on.
    let out = n.ctl(&["apply", "-f", &ghost]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("node not yet seen (declared, no agent registered it): 1"),
        "{said}"
    );
    let check = |n: &Node| {
        let nodes = n.json(&["get", "nodes"]);
        let g = nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["node"]["name"] == "ghost-node")
            .expect("ghost listed");
        assert_eq!(g["registered"], false, "{g}");
        let table = n.ok(&["get", "nodes"]);
        assert!(table.contains("NotYetSeen"), "{table}");
        let d = n.json(&["describe", "app", "acme/big"]);
        assert!(
            d["instances"]
                .as_array()
                .is_none_or(|i| i.iter().all(|i| i["node"] != "ghost-node")),
            "{d}"
        );
        let apps = n.ok(&["get", "apps"]);
        assert!(apps.contains("node not yet seen"), "{apps}");
    };
    check(&n);
    n.kill9();
    n.spawn();
    check(&n);
    let out = n.ctl(&["delete", "node", "ctl-single"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("registered by a running agent"), "{err}");
    assert!(err.contains("(HTTP 409)"), "{err}");
    n.ok(&["delete", "node", "ghost-node"]);
    n.kill9();
    n.spawn();
    let nodes = n.json(&["get", "nodes"]);
    assert_eq!(nodes.as_array().unwrap().len(), 1, "{nodes}");
    assert_eq!(nodes[0]["node"]["name"], "ctl-single");
}

/// The admin verbs (issue 19): tenants, policies and pools are listed and
/// deleted (refused while in use, 409); a cordoned node takes no new work —
/// nothing starts, checked in the managed root — stays cordoned across its
/// agent's restart, and takes work again once uncordoned.
#[test]
fn admin_verbs_list_delete_and_cordon() {
    let t = TestRoot::new("ctl-admin");
    let dir = tempfile::tempdir().unwrap();
    let mut n = Node::start(dir.path(), t.name());
    let objects = write_file(
        dir.path(),
        "objects.yaml",
        "apiVersion: daros.io/v1\nkind: ResourcePool\nmetadata: {name: fast}\nspec:\n  \
         selector: {matchLabels: {disk: nvme}}\n---\n\
         apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: acme}\nspec:\n  \
         quota: {cpu: \"1\", memory: 1Gi}\n---\n\
         apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: tight}\nspec:\n  \
         scope: Tenant\n  tenant: acme\n  rules: {maxOvercommitRatio: 1.0}\n",
    );
    n.ok(&["apply", "-f", &objects]);
    let tenants = n.json(&["get", "tenants"]);
    assert_eq!(tenants[0]["tenant"]["name"], "acme", "{tenants}");
    assert_eq!(tenants[0]["usage"]["apps"], 0, "{tenants}");
    assert!(n.ok(&["get", "policies"]).contains("tight"));
    let pools = n.json(&["get", "pools"]);
    let names: Vec<&str> = pools
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pool"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"fast") && names.contains(&"default"),
        "{pools}"
    );

    // Cordoned: an application is admitted but nothing starts on the node.
    n.ok(&["cordon", "ctl-single"]);
    let table = n.ok(&["get", "nodes"]);
    assert!(table.contains("no (cordoned)"), "{table}");
    n.kill9();
    n.spawn();
    assert!(
        n.ok(&["get", "nodes"]).contains("no (cordoned)"),
        "kept across a restart"
    );
    let app = write_file(
        dir.path(),
        "app.yaml",
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: sleeper, tenant: acme}\nspec:\n  \
         workloads:\n    - {name: w, runtime: {type: process}, \
         resources: {cpu: {request: 100m}, memory: {request: 16Mi}}, \
         runtimeSpec: {command: /bin/sleep, args: [\"300\"]}}\n",
    );
    let out = n.ctl(&["apply", "-f", &app]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("node not schedulable: 1"), "{said}");
    assert!(
        common::cgroups_left(&t).is_empty(),
        "nothing started on a cordoned node: {:?}",
        common::cgroups_left(&t)
    );
    n.ok(&["delete", "app", "acme/sleeper"]);

    // Uncordoned: the same application runs (a process in its cgroup).
    n.ok(&["uncordon", "ctl-single"]);
    n.ok(&["apply", "-f", &app]);
    n.wait_app("sleeper Running", "acme/sleeper", |d| {
        common::phase(d) == "Running"
    });
    assert!(!common::cgroups_left(&t).is_empty());

    // Deletes: in use is refused and names the user; free ones go.
    let out = n.ctl(&["delete", "tenant", "acme"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("application acme/sleeper") && err.contains("(HTTP 409)"),
        "{err}"
    );
    n.cleanup("sleeper");
    n.ok(&["delete", "policy", "tight"]);
    n.ok(&["delete", "pool", "fast"]);
    n.ok(&["delete", "tenant", "acme"]);
    assert_eq!(n.json(&["get", "tenants"]), serde_json::json!([]));
    assert!(!n.ok(&["get", "policies"]).contains("tight"));
    let out = n.ctl(&["delete", "pool", "fast"]);
    assert_eq!(out.status.code(), Some(3), "not found: exit 3");
}

/// The pids in the instance cgroups left under the test's managed root.
fn instance_pids(t: &TestRoot) -> Vec<u32> {
    let mut pids: Vec<u32> = common::cgroups_left(t)
        .iter()
        .flat_map(|d| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Policies through darosd with a real process under them (issue 19): a
/// policy the running application no longer passes is applied and names it,
/// the process keeps running and an update is refused; rolling the policy
/// back to its first version lets the update through (a new process).
#[test]
fn policy_versions_and_rollback_with_a_running_process() {
    let t = TestRoot::new("ctl-policy");
    let dir = tempfile::tempdir().unwrap();
    let n = Node::start(dir.path(), t.name());
    let policy = |runtimes: &str| {
        format!(
            "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: platform}}\nspec:\n  \
             scope: Global\n  rules: {{allowedRuntimeTypes: [{runtimes}]}}\n"
        )
    };
    let app = |marker: &str| {
        format!(
            "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: sleeper, tenant: acme}}\nspec:\n  \
             workloads:\n    - {{name: w, runtime: {{type: process}}, \
             resources: {{cpu: {{request: 100m}}, memory: {{request: 16Mi}}}}, \
             runtimeSpec: {{command: /bin/sleep, args: [\"300\"], env: {{MARK: {marker}}}}}}}\n"
        )
    };
    let first = write_file(
        dir.path(),
        "first.yaml",
        &format!(
            "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {{name: acme}}\nspec: {{}}\n---\n{}---\n{}",
            policy("process"),
            app("one")
        ),
    );
    n.ok(&["apply", "-f", &first]);
    n.wait_app("sleeper Running", "acme/sleeper", |d| {
        common::phase(d) == "Running"
    });
    let pid = wait_for("the process", Duration::from_secs(30), || {
        instance_pids(&t).first().copied()
    });

    // Version 2 forbids the process runtime: applied, the app is named.
    let v2 = write_file(dir.path(), "v2.yaml", &policy("container"));
    let said = n.ok(&["apply", "-f", &v2]);
    assert!(
        said.contains("running application acme/sleeper would not be admitted now"),
        "{said}"
    );
    assert!(common::alive(pid), "the process keeps running");
    // An update of the application is refused now; the process stays.
    let update = write_file(dir.path(), "update.yaml", &app("two"));
    let out = n.ctl(&["apply", "-f", &update]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("allowedRuntimeTypes"), "{text}");
    assert_eq!(instance_pids(&t), vec![pid]);

    // Back to version 1: the update goes through, as a new process.
    n.ok(&["rollback", "--policy", "platform", "--to", "1"]);
    let described = n.ok(&["describe", "policy", "platform"]);
    assert!(described.contains("(rollback to 1)"), "{described}");
    assert_eq!(
        n.json(&["describe", "policy", "platform"])["versions"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    n.ok(&["apply", "-f", &update]);
    let new = wait_for("the updated process", Duration::from_secs(30), || {
        instance_pids(&t)
            .into_iter()
            .find(|p| *p != pid && common::environ(*p).iter().any(|e| e == "MARK=two"))
    });
    assert!(common::environ(new).iter().any(|e| e == "MARK=two"));
    n.cleanup("sleeper");
}
