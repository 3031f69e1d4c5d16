//! Kubernetes mode (issue 13): a real `darosd` with
//! `runtime.kubernetes_policies` against a FAKE API server (`fake_apiserver`:
//! no kube-apiserver or kubelet exists on these machines; the test plays the
//! kubelet and makes the pods' cgroups under a `daros-test-kubelet-*` cgroup
//! root, in every hierarchy, for both cgroup drivers).
//!
//! Checked against the cgroup files: the pods a MinimalReservationPolicy
//! selects on this node carry their class's knobs (cgroupfs and systemd
//! layouts); pods it does not select (another namespace, another node, one
//! it refuses) keep every file as the kubelet left it; the policy's status
//! has this node's counts with the reasons, and the refused pod an Event;
//! a watch expired by compaction (410) lists again, a restarted API server
//! and a restarted agent change no knob (no flapping: the files are sampled
//! throughout); deleting the policy restores the kubelet's values. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod fake_apiserver;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{RestartableDarosd, TestRoot, require_root};
use daros_agent::cgroup::{CgroupBackend, CgroupMode, CgroupPath};
use fake_apiserver::{EVENTS, FakeApiServer, NAMESPACES, PODS, POLICIES, PROFILES};
use serde_json::{Value, json};

const NODE: &str = "worker-7";
// kube-runtime's watch backoff (0.8 s doubling to 30 s, jittered, reset
// after 120 s quiet) can wait ~30 s to reconnect after the errors of the
// expiry and restart steps; the agent's knobs hold meanwhile.
const WAIT: Duration = Duration::from_secs(90);

/// The knob files this test watches, for the host's cgroup mode.
fn files(mode: CgroupMode) -> &'static [&'static str] {
    match mode {
        CgroupMode::V2 => &[
            "cpu.weight",
            "cpu.max",
            "memory.min",
            "memory.low",
            "pids.max",
        ],
        _ => &[
            "cpu.shares",
            "cpu.cfs_quota_us",
            "memory.soft_limit_in_bytes",
            "pids.max",
        ],
    }
}

struct Kubelet {
    root: TestRoot,
    mode: CgroupMode,
}

impl Kubelet {
    /// Plays the kubelet: makes the pod's cgroup at `rel` (below the kubelet
    /// root) with its process limit (`--pod-max-pids=1024`).
    fn pod(&self, rel: &str) -> CgroupPath {
        let mut parts = Vec::new();
        for p in rel.split('/') {
            parts.push(p);
            let cg = self.root.create_nested(&parts.join("/"));
            if self.mode == CgroupMode::V2 && parts.len() < rel.split('/').count() {
                // As the kubelet does on v2: controllers for the level below,
                // and (its MemoryQoS) memory protection on the QoS levels, without
                // which no pod's memory.min can take effect.
                for d in self.root.backend().dirs(&cg) {
                    for c in ["+cpu", "+memory", "+io", "+pids"] {
                        let _ = std::fs::write(d.path.join("cgroup.subtree_control"), c);
                    }
                    for f in ["memory.min", "memory.low"] {
                        std::fs::write(d.path.join(f), "1073741824").unwrap();
                    }
                }
            }
        }
        let mut cg = self.root.root.path().clone();
        for p in rel.split('/') {
            cg = cg.join(p).unwrap();
        }
        std::fs::write(self.file(&cg, "pids.max"), "1024").unwrap();
        cg
    }

    fn file(&self, cg: &CgroupPath, name: &str) -> PathBuf {
        self.root
            .backend()
            .dirs(cg)
            .into_iter()
            .map(|d| d.path.join(name))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no {name} for {cg}"))
    }

    /// Every watched knob of `cg`, as the kernel shows it.
    fn knobs(&self, cg: &CgroupPath) -> BTreeMap<String, String> {
        files(self.mode)
            .iter()
            .map(|f| {
                let v = std::fs::read_to_string(self.file(cg, f)).unwrap();
                (f.to_string(), v.trim().to_string())
            })
            .collect()
    }
}

fn pod(name: &str, node: &str, labels: Value, cpu: &str, mem: &str, limits: bool) -> Value {
    let res = if limits {
        json!({"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}})
    } else {
        json!({"requests": {"cpu": cpu, "memory": mem}})
    };
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx", "resources": res}]},
    })
}

fn until<T>(what: &str, agent: &RestartableDarosd, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            eprintln!("{what}: after {:?}", t0.elapsed());
            return v;
        }
        if Instant::now() > deadline {
            let log = agent.log();
            let lines: Vec<&str> = log.lines().collect();
            panic!(
                "timed out waiting for {what}\nlog tail:\n{}",
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap().to_string()
}

fn node_status(api: &FakeApiServer, policy: &str) -> Option<Value> {
    let p = api.objects(POLICIES).remove(policy)?;
    let s = p["status"]["nodes"][NODE].clone();
    (!s.is_null()).then_some(s)
}

fn pod_lists(api: &FakeApiServer) -> usize {
    api.uris()
        .iter()
        .filter(|u| u.starts_with("GET /api/v1/pods?") && !u.contains("watch=true"))
        .count()
}

/// Samples the knobs of `cgs` every 10 ms until stopped; returns every
/// distinct value seen per cgroup.
fn sampler(
    kubelet: Arc<Kubelet>,
    cgs: Vec<CgroupPath>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Vec<BTreeMap<String, String>>>> {
    std::thread::spawn(move || {
        let mut seen: Vec<Vec<BTreeMap<String, String>>> = vec![Vec::new(); cgs.len()];
        while !stop.load(Ordering::SeqCst) {
            for (i, cg) in cgs.iter().enumerate() {
                let k = kubelet.knobs(cg);
                if !seen[i].contains(&k) {
                    seen[i].push(k);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        seen
    })
}

#[test]
fn policies_are_enforced_on_this_nodes_pods_and_survive_expiry_and_restarts() {
    require_root();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let api = rt.block_on(FakeApiServer::start());
    let kubelet = Arc::new(Kubelet {
        root: TestRoot::new("kubelet"),
        mode: daros_agent::cgroup::AnyBackend::detect().unwrap().mode(),
    });
    if kubelet.mode == CgroupMode::V2 {
        // The kubelet root is the QoS levels' ancestor: protection there too.
        for d in kubelet.root.backend().dirs(kubelet.root.root.path()) {
            for f in ["memory.min", "memory.low"] {
                std::fs::write(d.path.join(f), "1073741824").unwrap();
            }
        }
    }
    let managed = TestRoot::new("k8s-mode");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();

    // The cluster: namespaces, a profile, two policies, pods on this node and one elsewhere.
    api.create(
        NAMESPACES,
        "",
        json!({"metadata": {"name": "shop", "labels": {"team": "web"}}}),
    );
    api.create(NAMESPACES, "", json!({"metadata": {"name": "batch"}}));
    api.create(
        PROFILES,
        "",
        json!({"metadata": {"name": "protected"},
               "spec": {"class": "GuaranteedPro", "floors": {"cpu": "250m"}}}),
    );
    api.create(
        POLICIES,
        "",
        json!({"metadata": {"name": "web-floors"},
               "spec": {"namespaceSelector": {"matchLabels": {"team": "web"}},
                        "podSelector": {"matchLabels": {"tier": "web"}},
                        "profile": "protected", "priority": 10}}),
    );
    api.create(
        POLICIES,
        "",
        json!({"metadata": {"name": "cache-memory"},
               "spec": {"namespaces": ["shop"], "podSelector": {"matchLabels": {"tier": "cache"}},
                        "floors": {"memory": "32Mi"}}}),
    );
    let web = json!({"tier": "web"});
    let a = api.create(
        PODS,
        "shop",
        pod("web-a", NODE, web.clone(), "500m", "128Mi", true),
    );
    let b = api.create(
        PODS,
        "shop",
        pod("web-b", NODE, web.clone(), "500m", "128Mi", true),
    );
    let c = api.create(
        PODS,
        "shop",
        pod(
            "cache-c",
            NODE,
            json!({"tier": "cache"}),
            "200m",
            "64Mi",
            true,
        ),
    );
    // Burstable (requests only): the policy selects it but cannot keep floors.
    let d = api.create(
        PODS,
        "shop",
        pod("web-d", NODE, web.clone(), "100m", "32Mi", false),
    );
    let e = api.create(
        PODS,
        "batch",
        pod("job-e", NODE, web.clone(), "500m", "128Mi", true),
    );
    let f = api.create(
        PODS,
        "shop",
        pod("web-f", "worker-8", web.clone(), "500m", "128Mi", true),
    );
    for (key, q) in [
        ("shop/web-a", "Guaranteed"),
        ("shop/web-b", "Guaranteed"),
        ("shop/cache-c", "Guaranteed"),
        ("shop/web-d", "Burstable"),
        ("batch/job-e", "Guaranteed"),
        ("shop/web-f", "Guaranteed"),
    ] {
        api.run_pod(key, q);
    }
    let sd = |u: &str| u.replace('-', "_");
    let cg_a = kubelet.pod(&format!("kubepods/pod{}", uid(&a)));
    let cg_b = kubelet.pod(&format!(
        "kubepods.slice/kubepods-pod{}.slice",
        sd(&uid(&b))
    ));
    let cg_c = kubelet.pod(&format!("kubepods/pod{}", uid(&c)));
    let cg_d = kubelet.pod(&format!("kubepods/burstable/pod{}", uid(&d)));
    let cg_e = kubelet.pod(&format!("kubepods/pod{}", uid(&e)));
    let cg_f = kubelet.pod(&format!("kubepods/pod{}", uid(&f)));
    let original: BTreeMap<&str, BTreeMap<String, String>> = [
        ("a", kubelet.knobs(&cg_a)),
        ("b", kubelet.knobs(&cg_b)),
        ("c", kubelet.knobs(&cg_c)),
        ("d", kubelet.knobs(&cg_d)),
        ("e", kubelet.knobs(&cg_e)),
        ("f", kubelet.knobs(&cg_f)),
    ]
    .into();

    let kubelet_root = format!("/{}", kubelet.root.name());
    let kubeconfig_s = kubeconfig.display().to_string();
    let mut agent = RestartableDarosd::new(
        dir.path(),
        managed.name(),
        "k8s-mode",
        &[],
        &[
            ("DAROS_RUNTIME_ENABLED", "false"),
            ("DAROS_RUNTIME_KUBERNETES_POLICIES", "true"),
            ("DAROS_RUNTIME_KUBECONFIG", &kubeconfig_s),
            ("DAROS_RUNTIME_KUBERNETES_NODE", NODE),
            ("DAROS_RUNTIME_KUBERNETES_CGROUP_ROOT", &kubelet_root),
        ],
    );
    agent.spawn_serving();

    // The selected pods carry the class's knobs, in both layouts.
    let want_quota = |mode: CgroupMode| match mode {
        CgroupMode::V2 => ("cpu.max", "50000 100000"),
        _ => ("cpu.cfs_quota_us", "50000"),
    };
    let (qfile, qval) = want_quota(kubelet.mode);
    for (name, cg) in [("a (cgroupfs)", &cg_a), ("b (systemd)", &cg_b)] {
        until(&format!("pod {name} under its class"), &agent, || {
            (kubelet.knobs(cg)[qfile] == qval).then_some(())
        });
    }
    let enforced_a = kubelet.knobs(&cg_a);
    assert_ne!(enforced_a, original["a"], "pod a's knobs unchanged");
    assert_eq!(
        enforced_a["pids.max"], "1024",
        "the kubelet's pod pids limit was replaced"
    );
    let soft = match kubelet.mode {
        CgroupMode::V2 => ("memory.low", "0"),
        _ => ("memory.soft_limit_in_bytes", "134217728"),
    };
    if kubelet.mode != CgroupMode::V2 {
        assert_eq!(enforced_a[soft.0], soft.1, "pod a's memory request");
    }
    // The policy's status: two pods hold, one (the Burstable) refused with the reason.
    let st = until("web-floors status", &agent, || {
        node_status(&api, "web-floors").filter(|s| s["enforced"] == 2 && s["degraded"] == 1)
    });
    let reasons = st["reasons"].to_string();
    assert!(
        reasons.contains("shop/web-d") && reasons.contains("cannot be GuaranteedPro"),
        "{st}"
    );
    // The cache pod's memory floor: enforced on v2, degraded (with why) on v1.
    let cache = until("cache-memory status", &agent, || {
        node_status(&api, "cache-memory")
            .filter(|s| s["enforced"].as_u64().unwrap() + s["degraded"].as_u64().unwrap() == 1)
    });
    if kubelet.mode == CgroupMode::V2 {
        assert_eq!(cache["enforced"], 1, "{cache}");
        assert_eq!(kubelet.knobs(&cg_c)["memory.min"], "33554432");
    } else {
        assert_eq!(cache["degraded"], 1, "{cache}");
        assert!(cache["reasons"].to_string().contains("memory"), "{cache}");
    }
    // Events: a Warning on the refused pod, naming the reason.
    until("an Event on web-d", &agent, || {
        api.objects(EVENTS).into_values().find(|ev| {
            ev["regarding"]["name"] == "web-d"
                && ev["type"] == "Warning"
                && ev["reason"] == "QoSFloorsDegraded"
                && ev["note"]
                    .as_str()
                    .unwrap_or("")
                    .contains("cannot be GuaranteedPro")
        })
    });
    // Not selected (another namespace), another node's, refused: untouched files.
    for (k, cg) in [("d", &cg_d), ("e", &cg_e), ("f", &cg_f)] {
        assert_eq!(
            kubelet.knobs(cg),
            original[k],
            "pod {k}'s cgroup was written"
        );
    }
    let qos = agent.json(&["qos", "get", &format!("k8s-policy/{}", uid(&a))]);
    let set_at = qos["set_at_unix_ms"].clone();
    assert_eq!(qos["class"], "GuaranteedPro", "{qos}");

    // From here on, sample the enforced pods' knobs: they must never change.
    let stop = Arc::new(AtomicBool::new(false));
    let samples = sampler(
        kubelet.clone(),
        vec![cg_a.clone(), cg_b.clone()],
        stop.clone(),
    );

    // Compaction: the watches expire (410) and the agent lists again; a pod
    // created meanwhile is found.
    let lists = pod_lists(&api);
    api.compact();
    let g = api.create(
        PODS,
        "shop",
        pod("web-g", NODE, web.clone(), "300m", "64Mi", true),
    );
    api.run_pod("shop/web-g", "Guaranteed");
    let cg_g = kubelet.pod(&format!("kubepods/pod{}", uid(&g)));
    until("pods listed again after 410", &agent, || {
        (pod_lists(&api) > lists).then_some(())
    });
    until("pod g under its class", &agent, || {
        (kubelet.knobs(&cg_g)[qfile] == want_quota_for(kubelet.mode, 300)).then_some(())
    });

    // The API server restarts; a pod created while it is down is found after.
    rt.block_on(async {
        let restart = api.restart(Duration::from_secs(2));
        tokio::pin!(restart);
        // Created while the server is down (the sleep inside restart).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let h = api.create(
            PODS,
            "shop",
            pod("web-h", NODE, web.clone(), "400m", "64Mi", true),
        );
        api.run_pod("shop/web-h", "Guaranteed");
        restart.await;
        h
    });
    let h = api.pods()["shop/web-h"].clone();
    let cg_h = kubelet.pod(&format!("kubepods/pod{}", uid(&h)));
    until(
        "pod h under its class after the API server restart",
        &agent,
        || (kubelet.knobs(&cg_h)[qfile] == want_quota_for(kubelet.mode, 400)).then_some(()),
    );
    until("web-floors counts the new pods", &agent, || {
        node_status(&api, "web-floors").filter(|s| s["enforced"] == 4)
    });

    // The agent restarts (SIGKILL): nothing is re-set, nothing flaps.
    agent.kill9();
    agent.spawn_serving();
    until("the restarted agent listed the pods", &agent, || {
        agent.log().contains("listed").then_some(())
    });
    // A change after the restart proves it is watching again.
    api.patch(
        PODS,
        "shop",
        "web-b",
        json!({"metadata": {"labels": {"tier": "other"}}}),
    );
    until("pod b released after its label changed", &agent, || {
        (kubelet.knobs(&cg_b) == original["b"]).then_some(())
    });
    let qos = agent.json(&["qos", "get", &format!("k8s-policy/{}", uid(&a))]);
    assert_eq!(qos["set_at_unix_ms"], set_at, "pod a was set again: {qos}");
    stop.store(true, Ordering::SeqCst);
    let seen = samples.join().unwrap();
    assert_eq!(seen[0], vec![enforced_a.clone()], "pod a's knobs flapped");
    // Released once: every file goes from its value under the class to the
    // kubelet's, once (the restore writes the files one by one, so a sample can
    // fall between two writes).
    assert!(
        seen[1].len() >= 2
            && seen[1].last() == Some(&original["b"])
            && seen[1].first().is_some_and(|first| {
                first.iter().all(|(f, v)| {
                    let mut values: Vec<&String> =
                        seen[1].iter().filter_map(|s| s.get(f)).collect();
                    values.dedup();
                    values == [v] || values == [v, &original["b"][f]]
                })
            }),
        "pod b: {:?}",
        seen[1]
    );

    // Deleting the policy restores what the kubelet wrote.
    api.delete(POLICIES, "", "web-floors");
    for (k, cg) in [("a", &cg_a), ("d", &cg_d)] {
        until(&format!("pod {k} restored"), &agent, || {
            (kubelet.knobs(cg) == original[k]).then_some(())
        });
    }
    let left = agent.json(&["qos", "get"]);
    let ids: Vec<String> = left["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["workload"].as_str().map(str::to_string))
        .filter(|w| w.starts_with("k8s-policy/"))
        .collect();
    assert_eq!(ids, [format!("k8s-policy/{}", uid(&c))], "{left}");
    agent.kill9();
}

fn want_quota_for(mode: CgroupMode, millis: u64) -> String {
    match mode {
        CgroupMode::V2 => format!("{} 100000", millis * 100),
        _ => (millis * 100).to_string(),
    }
}
