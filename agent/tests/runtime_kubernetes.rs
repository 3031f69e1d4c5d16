//! The runtime executor running a container workload as a Kubernetes pod,
//! against a FAKE API server (`fake_apiserver`: no kube-apiserver or kubelet
//! exists on these machines; the test plays the kubelet). Everything on the
//! node side is real: the executor, the Kubernetes adapter and its watch over
//! real HTTP on loopback, the QoS service, and the pod's cgroup, made by the
//! test under a `daros-test-kubelet-*` kubelet cgroup root in every hierarchy.
//!
//! Checks: the pod is bound to this node's Kubernetes name; once it runs, its
//! cgroup (the kubelet's) is under the instance's class with the knobs
//! written; a new executor (agent restart) adopts the pod without creating it
//! again and deletes a managed pod it has no record of; removing the work
//! deletes the pod and releases the class. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod executor_support;
mod fake_apiserver;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Method;
use common::TestRoot;
use daros_adapters::AnyAdapter;
use daros_adapters::process::default_shim_path;
use daros_agent::cgroup::CgroupBackend;
use daros_agent::control::work::{DesiredInstance, FenceToken, NodeReport, NodeWork, WorkExecutor};
use daros_agent::qos::{KnobStatus, QosService, QosSettings};
use daros_agent::runtime::{
    Executor, InstanceCgroups, KubernetesSettings, LogDefaults, RuntimeSettings, Subject,
    kubernetes,
};
use daros_coordinator::model::runtime::RuntimeType;
use daros_coordinator::{Bytes, MilliCpu, ObservedState, QosClass};
use executor_support::{rt, wait_report};
use fake_apiserver::FakeApiServer;
use serde_json::json;

const NODE: &str = "node-a";
const K8S_NODE: &str = "worker-7";
const INSTANCE: &str = "acme/shop/web/0/v1";

struct Env {
    managed: TestRoot,
    kubelet: TestRoot,
    dir: tempfile::TempDir,
    qos: Arc<QosService>,
}

impl Env {
    fn new() -> Self {
        let managed = TestRoot::new("k8s-managed");
        let kubelet = TestRoot::new("kubelet");
        let dir = tempfile::tempdir().unwrap();
        let s = QosSettings {
            protection: false,
            system_reserved_cpu: MilliCpu(100),
            system_reserved_memory: Bytes::from_mib(256),
            ..QosSettings::default()
        };
        let qos = QosService::open(s, managed.root.clone(), dir.path(), vec![]).unwrap();
        Env {
            managed,
            kubelet,
            dir,
            qos,
        }
    }

    async fn executor(&self, api: &FakeApiServer) -> Arc<Executor> {
        let k = KubernetesSettings {
            node: K8S_NODE.into(),
            cgroup_root: format!("/{}", self.kubelet.name()),
        };
        let settings = RuntimeSettings {
            node: NODE.into(),
            state_dir: self.dir.path().join("runtime"),
            volume_dir: self.dir.path().join("volumes"),
            shim_path: default_shim_path(),
            stop_grace: Duration::from_secs(1),
            logs: LogDefaults {
                max_size: Bytes::from_mib(1),
                max_files: 2,
            },
            kubernetes: Some(k.clone()),
            launcher: Default::default(),
            oom_floor: daros_agent::runtime::executor::oom_floor_here(),
        };
        let adapter = kubernetes::adapter(api.client(), &k);
        let cg = InstanceCgroups::new(Some(self.managed.root.clone()), Some(Arc::clone(&self.qos)));
        Executor::open(settings, cg, vec![AnyAdapter::Kubernetes(adapter)])
            .await
            .unwrap()
    }

    /// Plays the kubelet: the pod's cgroup, cgroupfs driver, Guaranteed.
    fn pod_cgroup(&self, uid: &str) -> Vec<PathBuf> {
        self.kubelet.create_nested("kubepods");
        let cg = self.kubelet.create_nested(&format!("kubepods/pod{uid}"));
        self.kubelet
            .backend()
            .dirs(&cg)
            .into_iter()
            .map(|d| d.path)
            .collect()
    }
}

fn instance() -> DesiredInstance {
    serde_json::from_value(json!({
        "instance": INSTANCE,
        "attempt": 1,
        "launch": {
            "runtime": {"type": "container", "os": "linux"},
            "qos": "Guaranteed",
            "resources": {"cpu": {"request": "500m", "limit": "500m"}, "memory": {"request": "64Mi", "limit": "64Mi"}},
            "reservation": {},
            "runtimeSpec": {
                "namespace": "shop",
                "podTemplate": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}
            },
        }
    }))
    .unwrap()
}

fn work(index: u64, instances: Vec<DesiredInstance>) -> NodeWork {
    NodeWork {
        node: NODE.into(),
        fence: FenceToken { term: 1, index },
        instances,
        jobs: vec![],
    }
}

async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn posts(api: &FakeApiServer) -> usize {
    api.requests()
        .iter()
        .filter(|(m, p)| *m == Method::POST && p.ends_with("/pods"))
        .count()
}

#[test]
fn fake_apiserver_pod_is_classed_readopted_and_removed() {
    let env = Env::new();
    // The fake API server outlives both agent lives (its own runtime).
    let server_rt = rt();
    let api = server_rt.block_on(FakeApiServer::start());
    let subject = Subject::Instance(INSTANCE.parse().unwrap());
    let qos_id = subject.pod_qos_id();

    // First agent life: the pod is created, runs, and is classed.
    let (key, pod, uid) = {
        let agent_rt = rt();
        let r = agent_rt.block_on(async {
            let ex = env.executor(&api).await;
            // The container runtime is offered (darosd registers what its adapters run).
            assert!(
                ex.adapters()
                    .all_capabilities()
                    .iter()
                    .any(|c| c.runtime_types.contains(&RuntimeType::Container))
            );
            let mut rx = ex.subscribe();
            ex.execute(work(1, vec![instance()])).await.unwrap();

            // Created on the API server, bound to this node's Kubernetes name.
            let (key, pod) = until("the pod on the API server", || {
                api.pods().into_iter().next()
            })
            .await;
            assert!(key.starts_with("shop/"), "{key}");
            assert_eq!(pod["spec"]["nodeName"], K8S_NODE);
            assert_eq!(pod["metadata"]["labels"]["daros.io/app"], "shop");
            let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
            // No managed cgroup for a pod: the kubelet owns its cgroup.
            assert_eq!(env.managed.root.workloads().unwrap(), Vec::<String>::new());

            // The kubelet makes the pod's cgroup and runs it.
            let dirs = env.pod_cgroup(&uid);
            api.run_pod(&key, "Guaranteed");
            wait_report(&mut rx, INSTANCE, 1, "Ready", |s| {
                *s == ObservedState::Ready
            })
            .await;

            // The pod's cgroup is under the instance's class, knobs written there.
            let q = env.qos.get(&qos_id).expect("the pod under its class");
            assert_eq!(
                q.cgroup,
                format!("/{}/kubepods/pod{uid}", env.kubelet.name())
            );
            assert_eq!(q.class, QosClass::Guaranteed);
            let cpu = q
                .knobs
                .iter()
                .find(|k| k.knob == "cpu.max" || k.knob == "cpu.cfs_quota_us")
                .unwrap_or_else(|| panic!("no CPU limit knob: {:#?}", q.knobs));
            assert_eq!(cpu.status, KnobStatus::Enforced, "{cpu:#?}");
            let written: Vec<String> = dirs
                .iter()
                .filter_map(|d| std::fs::read_to_string(d.join(&cpu.knob)).ok())
                .collect();
            assert!(
                written.iter().any(|v| v.starts_with("50000")),
                "{} in the pod's cgroup: {written:?}",
                cpu.knob
            );
            (key, pod, uid)
        });
        agent_rt.shutdown_timeout(Duration::from_secs(5));
        r
    };

    // Meanwhile a managed pod this agent has no record of appears on the node.
    let mut orphan = pod.clone();
    orphan["metadata"]["name"] = json!("orphan-pod");
    orphan["metadata"]["labels"]["daros.io/workload"] = json!("gone");
    api.insert_pod("shop", orphan);
    let before = posts(&api);

    // Second life (agent restart): the pod is adopted, not created again; the
    // orphan is deleted; removing the work deletes the pod and the class.
    let agent_rt = rt();
    agent_rt.block_on(async {
        let ex = env.executor(&api).await;
        assert!(!api.pods().contains_key("shop/orphan-pod"), "orphan pod left");
        assert_eq!(posts(&api), before, "the pod was created again after a restart");
        assert_eq!(api.pods()[&key]["metadata"]["uid"], uid.as_str());
        let reports = ex.current().await;
        assert!(
            matches!(&reports[..], [NodeReport::Instance { attempt: 1, state, .. }] if state.is_live()),
            "{reports:#?}"
        );
        assert!(env.qos.get(&qos_id).is_some(), "class lost across the restart");

        let mut rx = ex.subscribe();
        ex.execute(work(2, vec![])).await.unwrap();
        wait_report(&mut rx, INSTANCE, 1, "Stopped", |s| *s == ObservedState::Stopped).await;
        assert!(api.pods().is_empty(), "{:?}", api.pods().keys());
        assert!(env.qos.get(&qos_id).is_none());
    });
}
