//! The Kubernetes adapter against a REAL cluster. They run when KUBECONFIG
//! is set when the tests are built (see build.rs); otherwise they are
//! ignored, and counted as such, because no kube-apiserver can be had on
//! these machines. Pods go to `$DAROS_TEST_NAMESPACE` (default `default`)
//! under `daros-test` names, and are deleted even when a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use daros_adapters::RuntimeId;
use daros_adapters::adapter::{DestroyOptions, LogQuery, RuntimeAdapter};
use daros_adapters::event::{EventStream, RuntimeEventKind as K};
use daros_adapters::instance::{InstanceKey, WorkloadInstanceSpec};
use daros_adapters::kubernetes::{KubernetesAdapter, KubernetesAdapterConfig};
use daros_adapters::placement::Placement;
use daros_coordinator::QosClass;
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::model::health::{CheckKind, ExecProbe, HealthCheck};
use daros_coordinator::model::lifecycle_policy::{LifecyclePolicy, RestartPolicy};
use daros_coordinator::model::names::AppKey;
use daros_coordinator::model::runtime::{OsType, RuntimeRequirement, RuntimeSpec, RuntimeType};
use daros_coordinator::model::time::DurationMs;
use serde_json::json;
use std::time::Duration;

async fn adapter() -> (KubernetesAdapter, EventStream, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube::Client::try_default()
        .await
        .expect("KUBECONFIG is set but unusable");
    let ns = std::env::var("DAROS_TEST_NAMESPACE").unwrap_or_else(|_| "default".into());
    let a = KubernetesAdapter::new(
        client,
        KubernetesAdapterConfig {
            default_namespace: ns.clone(),
            ..KubernetesAdapterConfig::default()
        },
    );
    tokio::spawn(a.clone().watch());
    let ev = a.events();
    (a, ev, ns)
}

fn spec(name: &str, script: &str, policy: LifecyclePolicy) -> WorkloadInstanceSpec {
    WorkloadInstanceSpec {
        key: InstanceKey::replica(
            AppKey::new("daros-test", "cluster"),
            name,
            std::process::id() % 10_000,
        ),
        runtime: RuntimeRequirement {
            runtime_type: RuntimeType::Container,
            os: OsType::Linux,
        },
        image: Some("busybox:1.36".into()),
        qos: QosClass::BestEffort,
        resources: Default::default(),
        lifecycle: policy,
        health_checks: Vec::new(),
        deadline: None,
        runtime_spec: RuntimeSpec::new(json!({"podTemplate": {"spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}]
        }}})),
        placement: Placement::default(),
        security: Default::default(),
        namespace: None,
        volumes: Vec::new(),
        sidecars: Vec::new(),
    }
}

async fn wait(ev: &mut EventStream, id: &RuntimeId, pred: impl Fn(&K) -> bool) -> K {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(180), ev.next())
            .await
            .expect("event in time")
            .unwrap();
        if &e.id == id && pred(&e.kind) {
            return e.kind;
        }
    }
}

/// Deletes the pod even when the test fails.
struct Cleanup(KubernetesAdapter, RuntimeId);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let (a, id) = (self.0.clone(), self.1.clone());
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let _ = a
                    .destroy(
                        &id,
                        DestroyOptions {
                            grace: Duration::from_secs(1),
                            remove_logs: true,
                        },
                    )
                    .await;
            })
        })
        .join();
    }
}

#[tokio::test]
#[cfg_attr(
    not(daros_kube_cluster),
    ignore = "needs a real Kubernetes cluster: build and run with KUBECONFIG set"
)]
async fn cluster_pod_becomes_ready_logs_and_is_deleted() {
    let (a, mut ev, _ns) = adapter().await;
    let mut s = spec(
        "ready",
        "echo hello from daros; touch /tmp/ok; sleep 3600",
        LifecyclePolicy::default(),
    );
    s.health_checks = vec![HealthCheck {
        name: "ok".into(),
        kind: CheckKind::Readiness,
        exec: Some(ExecProbe {
            command: vec!["test".into(), "-f".into(), "/tmp/ok".into()],
        }),
        http: None,
        tcp: None,
        period: DurationMs(1000),
        timeout: DurationMs(1000),
        failure_threshold: 3,
        initial_delay: DurationMs(0),
    }];
    let id = a.create(&s).await.unwrap();
    let _guard = Cleanup(a.clone(), id.clone());
    a.start(&id).await.unwrap();
    wait(&mut ev, &id, |k| *k == K::Ready).await;
    let st = a.inspect(&id).await.unwrap();
    assert!(st.ready);
    let logs = a.logs(&id, LogQuery { tail: Some(10) }).await.unwrap();
    assert!(
        logs.iter().any(|l| l.text == "hello from daros"),
        "{logs:?}"
    );
    a.stop(&id, Duration::from_secs(1)).await.unwrap();
    wait(&mut ev, &id, |k| *k == K::Stopped).await;
}

#[tokio::test]
#[cfg_attr(
    not(daros_kube_cluster),
    ignore = "needs a real Kubernetes cluster: build and run with KUBECONFIG set"
)]
async fn cluster_crash_loop_is_a_container_crash_and_gives_up() {
    let (a, mut ev, _ns) = adapter().await;
    let policy = LifecyclePolicy {
        restart: RestartPolicy::OnFailure,
        max_retries: Some(1),
        ..LifecyclePolicy::default()
    };
    let s = spec("crash", "exit 3", policy);
    let id = a.create(&s).await.unwrap();
    let _guard = Cleanup(a.clone(), id.clone());
    a.start(&id).await.unwrap();
    let f = wait(&mut ev, &id, |k| matches!(k, K::Failed { .. })).await;
    assert_eq!(
        f,
        K::Failed {
            failure: Failure::Runtime(RuntimeFailure::ContainerCrash { exit_code: Some(3) })
        }
    );
    wait(&mut ev, &id, |k| matches!(k, K::GaveUp { .. })).await;
}
