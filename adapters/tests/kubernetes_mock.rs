//! The Kubernetes adapter against kube's MOCK API server (a tower-test mock
//! service standing in for kube-apiserver, which cannot be had on these
//! machines). Every test named `mock_apiserver_*` talks to this mock only:
//! it asserts the exact requests the adapter makes (method, path, labels
//! and fields of the body) and feeds back API server answers, checking how
//! they map to statuses and events. Real-cluster tests are in
//! `kubernetes_cluster.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use daros_adapters::adapter::{DestroyOptions, LogQuery, RuntimeAdapter};
use daros_adapters::event::{EventStream, RuntimeEventKind as K};
use daros_adapters::instance::{InstanceKey, WorkloadInstanceSpec};
use daros_adapters::kubernetes::pod::build_pod;
use daros_adapters::kubernetes::spec::KubernetesSpec;
use daros_adapters::kubernetes::{KubernetesAdapter, KubernetesAdapterConfig};
use daros_adapters::placement::Placement;
use daros_adapters::status::{InstanceState, RuntimeDetail};
use daros_adapters::{AdapterError, RuntimeId};
use daros_coordinator::QosClass;
use daros_coordinator::model::failure::{Failure, RuntimeFailure};
use daros_coordinator::model::health::{CheckKind, HealthCheck, HttpProbe};
use daros_coordinator::model::lifecycle_policy::{LifecyclePolicy, OnExhausted, RestartPolicy};
use daros_coordinator::model::names::AppKey;
use daros_coordinator::model::runtime::{OsType, RuntimeRequirement, RuntimeSpec, RuntimeType};
use daros_coordinator::model::time::DurationMs;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc;

type MockBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// The server's side of the mock: each request the client sends, with where
/// its response goes. (kube's own mock pattern, without tower-test: its
/// tokio-test turned on tokio's `test-util` in the workspace's test build
/// only, so every `cargo test -p` rebuilt tokio and all that stands on it.)
struct Handle(mpsc::UnboundedReceiver<(Request<kube::client::Body>, Reply)>);

impl Handle {
    async fn next_request(&mut self) -> Option<(Request<kube::client::Body>, Reply)> {
        self.0.recv().await
    }
}

/// Where one request's response goes.
struct Reply(tokio::sync::oneshot::Sender<Response<MockBody>>);

impl Reply {
    fn send_response(self, r: Response<MockBody>) {
        // The client may have given up on the request; nothing waits then.
        let _ = self.0.send(r);
    }
}

/// A client's service whose requests arrive at the returned [`Handle`].
fn mock_pair() -> (
    impl tower::Service<
        Request<kube::client::Body>,
        Response = Response<MockBody>,
        Error = std::io::Error,
        Future = impl Send,
    > + Send
    + Clone
    + 'static,
    Handle,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
        let tx = tx.clone();
        async move {
            let (to, from) = tokio::sync::oneshot::channel();
            tx.send((req, Reply(to)))
                .map_err(|_| std::io::Error::other("the mock API server is gone"))?;
            from.await
                .map_err(|_| std::io::Error::other("the mock API server dropped the request"))
        }
    });
    (svc, Handle(rx))
}

const T: Duration = Duration::from_secs(10);

/// The mock API server: hands over each request the adapter makes.
struct MockApiServer {
    handle: Handle,
}

struct Seen {
    method: Method,
    path: String,
    query: String,
    body: Value,
}

impl MockApiServer {
    async fn next(&mut self) -> (Seen, Reply) {
        let (req, reply) = tokio::time::timeout(T, self.handle.next_request())
            .await
            .expect("the adapter made no request")
            .expect("client gone");
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (
            Seen {
                method,
                path,
                query,
                body,
            },
            reply,
        )
    }

    /// The next request must be `method path`.
    async fn expect(&mut self, method: Method, path: &str) -> (Seen, Reply) {
        let (seen, reply) = self.next().await;
        assert_eq!(
            (&seen.method, seen.path.as_str()),
            (&method, path),
            "query: {}",
            seen.query
        );
        (seen, reply)
    }
}

fn mock_cluster() -> (KubernetesAdapter, MockApiServer, EventStream) {
    let (svc, handle) = mock_pair();
    let client = kube::Client::new(svc, "default");
    let cfg = KubernetesAdapterConfig {
        poll_interval: Duration::from_millis(10),
        delete_timeout: Duration::from_secs(5),
        ..KubernetesAdapterConfig::default()
    };
    let a = KubernetesAdapter::new(client, cfg);
    let ev = a.events();
    (a, MockApiServer { handle }, ev)
}

fn body(b: impl Into<Bytes>) -> MockBody {
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed()
}

fn json_response(code: u16, v: &Value) -> Response<MockBody> {
    Response::builder()
        .status(code)
        .body(body(serde_json::to_vec(v).unwrap()))
        .unwrap()
}

fn status(code: u16, reason: &str, message: &str) -> Response<MockBody> {
    json_response(
        code,
        &json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}),
    )
}

/// A streaming response whose chunks the test sends (a watch).
fn streaming() -> (mpsc::Sender<Bytes>, Response<MockBody>) {
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    let stream =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))));
    (tx, Response::new(StreamBody::new(stream).boxed()))
}

fn watch_event(kind: &str, pod: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": pod})).unwrap();
    line.push(b'\n');
    Bytes::from(line)
}

fn spec() -> WorkloadInstanceSpec {
    let mut health = HealthCheck {
        name: "healthz".into(),
        kind: CheckKind::Readiness,
        exec: None,
        http: Some(HttpProbe {
            port: 8080,
            path: "/healthz".into(),
        }),
        tcp: None,
        period: DurationMs(2000),
        timeout: DurationMs(1500),
        failure_threshold: 3,
        initial_delay: DurationMs(0),
    };
    health.timeout = DurationMs(1500);
    WorkloadInstanceSpec {
        key: InstanceKey::replica(AppKey::new("acme", "shop"), "web", 0),
        runtime: RuntimeRequirement { runtime_type: RuntimeType::Container, os: OsType::Linux },
        image: Some("nginx:1.27".into()),
        qos: QosClass::Burstable,
        resources: serde_json::from_value(json!({
            "cpu": {"request": "250m", "limit": "1"}, "memory": {"request": "64Mi", "limit": "128Mi"}
        }))
        .unwrap(),
        lifecycle: LifecyclePolicy {
            restart: RestartPolicy::OnFailure,
            max_retries: Some(1),
            on_exhausted: OnExhausted::WaitForOperator,
            ..LifecyclePolicy::default()
        },
        health_checks: vec![health],
        deadline: None,
        runtime_spec: RuntimeSpec::new(json!({
            "namespace": "shop",
            "podTemplate": {
                "metadata": {"labels": {"tier": "front"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        })),
        placement: Placement { node: Some("node-1".into()), ..Placement::default() },
        security: Default::default(),
        namespace: None,
        volumes: Vec::new(),
        sidecars: Vec::new(),
    }
}

fn desired_pod(s: &WorkloadInstanceSpec) -> Value {
    let ks = KubernetesSpec::parse(&s.runtime_spec.0, "runtimeSpec").unwrap();
    serde_json::to_value(build_pod(s, &ks, "shop").unwrap()).unwrap()
}

/// `pod` as the API server would return it, with a uid and a status.
fn live(pod: &Value, status: Value) -> Value {
    let mut p = pod.clone();
    p["metadata"]["uid"] = json!("8d0b6f5e-2c1a-4a7e-9c55-7f1e0a3b2d10");
    p["metadata"]["resourceVersion"] = json!("7");
    p["status"] = status;
    p
}

fn running(restarts: u32, ready: bool, last: Option<Value>, waiting: Option<&str>) -> Value {
    let state = match waiting {
        Some(r) => {
            json!({"waiting": {"reason": r, "message": "back-off restarting failed container"}})
        }
        None => json!({"running": {"startedAt": "2024-01-01T00:00:00Z"}}),
    };
    let mut cs = json!({"name": "web", "image": "nginx:1.27", "imageID": "", "ready": ready,
                        "restartCount": restarts, "state": state});
    if let Some(l) = last {
        cs["lastState"] = l;
    }
    json!({
        "phase": "Running", "qosClass": "Burstable",
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        "containerStatuses": [cs]
    })
}

async fn next_kinds(ev: &mut EventStream, id: &RuntimeId, n: usize) -> Vec<K> {
    let mut out = Vec::new();
    while out.len() < n {
        let e = tokio::time::timeout(T, ev.next())
            .await
            .expect("event")
            .expect("stream");
        if &e.id == id {
            out.push(e.kind);
        }
    }
    out
}

/// Create, then start against an empty namespace: GET 404, POST 201.
async fn create_and_start(
    a: &KubernetesAdapter,
    api: &mut MockApiServer,
    s: &WorkloadInstanceSpec,
) -> (RuntimeId, Value) {
    let id = a.create(s).await.unwrap();
    let a2 = a.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { a2.start(&id2).await });
    let name = id.name.split_once('/').unwrap().1.to_string();
    let (_, r) = api
        .expect(Method::GET, &format!("/api/v1/namespaces/shop/pods/{name}"))
        .await;
    r.send_response(status(
        404,
        "NotFound",
        &format!("pods \"{name}\" not found"),
    ));
    let (seen, r) = api
        .expect(Method::POST, "/api/v1/namespaces/shop/pods")
        .await;
    let created = live(
        &seen.body,
        json!({"phase": "Pending", "qosClass": "Burstable"}),
    );
    r.send_response(json_response(201, &created));
    task.await.unwrap().unwrap();
    (id, seen.body)
}

#[tokio::test]
async fn mock_apiserver_create_then_start_posts_one_labelled_pod() {
    let (a, mut api, mut ev) = mock_cluster();
    let s = spec();
    let (id, pod) = create_and_start(&a, &mut api, &s).await;
    assert!(id.name.starts_with("shop/shop-web-0-"), "{id}");
    let md = &pod["metadata"];
    assert_eq!(md["namespace"], "shop");
    assert_eq!(md["name"], id.name.split_once('/').unwrap().1);
    for (k, v) in [
        ("daros.io/tenant", "acme"),
        ("daros.io/app", "shop"),
        ("daros.io/workload", "web"),
        ("daros.io/replica", "0"),
        ("app.kubernetes.io/managed-by", "daros"),
        ("tier", "front"),
    ] {
        assert_eq!(md["labels"][k], v, "label {k}");
    }
    assert_eq!(md["annotations"]["daros.io/qos-class"], "Burstable");
    assert_eq!(
        md["annotations"]["daros.io/spec-hash"]
            .as_str()
            .unwrap()
            .len(),
        16
    );
    let sp = &pod["spec"];
    assert_eq!(sp["restartPolicy"], "OnFailure");
    assert_eq!(
        sp["nodeName"], "node-1",
        "bound to the placed node, bypassing the scheduler"
    );
    let c = &sp["containers"][0];
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": 8080})
    );
    assert_eq!(c["readinessProbe"]["periodSeconds"], 2);
    assert_eq!(
        c["readinessProbe"]["timeoutSeconds"], 2,
        "1.5s rounds up to whole seconds"
    );
    assert_eq!(
        c["resources"]["requests"],
        json!({"cpu": "250m", "memory": "67108864"})
    );
    assert_eq!(
        c["resources"]["limits"],
        json!({"cpu": "1000m", "memory": "134217728"})
    );

    // Inspect reads the pod: Running and Ready map to Running + ready.
    let a2 = a.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { a2.inspect(&id2).await });
    let (_, r) = api
        .expect(
            Method::GET,
            &format!("/api/v1/namespaces/{}", id.name.replacen('/', "/pods/", 1)),
        )
        .await;
    r.send_response(json_response(
        200,
        &live(&pod, running(0, true, None, None)),
    ));
    let st = task.await.unwrap().unwrap();
    assert_eq!(st.state, InstanceState::Running);
    assert!(st.ready);
    let RuntimeDetail::Kubernetes {
        uid,
        qos_class,
        node,
        phase,
        ..
    } = st.detail
    else {
        panic!()
    };
    assert_eq!(uid.as_deref(), Some("8d0b6f5e-2c1a-4a7e-9c55-7f1e0a3b2d10"));
    assert_eq!(qos_class.as_deref(), Some("Burstable"));
    assert_eq!(node.as_deref(), Some("node-1"));
    assert_eq!(phase.as_deref(), Some("Running"));
    assert_eq!(
        next_kinds(&mut ev, &id, 3).await,
        [
            K::Created,
            K::Started {
                pid: None,
                generation: 1
            },
            K::Ready
        ]
    );
}

#[tokio::test]
async fn mock_apiserver_start_adopts_an_unchanged_pod_and_replaces_a_changed_one() {
    let (a, mut api, mut ev) = mock_cluster();
    let s = spec();
    let id = a.create(&s).await.unwrap();
    let path = format!("/api/v1/namespaces/{}", id.name.replacen('/', "/pods/", 1));
    // The pod exists with the same spec hash (an agent restart): adopted, no POST.
    let a2 = a.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { a2.start(&id2).await });
    let (_, r) = api.expect(Method::GET, &path).await;
    r.send_response(json_response(
        200,
        &live(&desired_pod(&s), running(2, true, None, None)),
    ));
    task.await.unwrap().unwrap();
    assert_eq!(
        next_kinds(&mut ev, &id, 2).await,
        [
            K::Created,
            K::Adopted {
                pid: None,
                generation: 3
            }
        ]
    );

    // On another node agent the same instance finds a pod of an older spec:
    // pods are immutable, so it is deleted (with a grace period), awaited,
    // and created anew.
    let (b, mut api, _ev) = mock_cluster();
    let id = b.create(&s).await.unwrap();
    let mut old = live(&desired_pod(&s), running(0, true, None, None));
    old["metadata"]["annotations"]["daros.io/spec-hash"] = json!("0000000000000000");
    let b2 = b.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { b2.start(&id2).await });
    let (_, r) = api.expect(Method::GET, &path).await;
    r.send_response(json_response(200, &old));
    let (del, r) = api.expect(Method::DELETE, &path).await;
    assert_eq!(del.body["gracePeriodSeconds"], 30);
    let mut terminating = old.clone();
    terminating["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    r.send_response(json_response(200, &terminating));
    let (_, r) = api.expect(Method::GET, &path).await;
    r.send_response(json_response(200, &terminating));
    let (_, r) = api.expect(Method::GET, &path).await;
    r.send_response(status(404, "NotFound", "gone"));
    let (post, r) = api
        .expect(Method::POST, "/api/v1/namespaces/shop/pods")
        .await;
    assert_eq!(
        post.body["metadata"]["annotations"]["daros.io/spec-hash"],
        desired_pod(&s)["metadata"]["annotations"]["daros.io/spec-hash"]
    );
    r.send_response(json_response(
        201,
        &live(&post.body, json!({"phase": "Pending"})),
    ));
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn mock_apiserver_watch_maps_oom_crash_loop_and_enforces_max_retries() {
    let (a, mut api, mut ev) = mock_cluster();
    let s = spec();
    let (id, pod) = create_and_start(&a, &mut api, &s).await;
    let name = id.name.split_once('/').unwrap().1.to_string();
    let watch = tokio::spawn(a.clone().watch());

    // The watcher lists the managed pods, then watches from that version.
    let (list, r) = api.expect(Method::GET, "/api/v1/pods").await;
    assert!(
        list.query
            .contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Ddaros"),
        "{}",
        list.query
    );
    assert!(!list.query.contains("watch=true"));
    r.send_response(json_response(
        200,
        &json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "10"},
            "items": [live(&pod, running(0, true, None, None))]
        }),
    ));
    let (w, r) = api.expect(Method::GET, "/api/v1/pods").await;
    assert!(
        w.query.contains("watch=true") && w.query.contains("resourceVersion=10"),
        "{}",
        w.query
    );
    let (tx, resp) = streaming();
    r.send_response(resp);
    assert_eq!(
        next_kinds(&mut ev, &id, 3).await,
        [
            K::Created,
            K::Started {
                pid: None,
                generation: 1
            },
            K::Ready
        ]
    );

    // OOMKilled, back-off: an out-of-memory failure (named as such, not a crash).
    let oom = json!({"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2024-01-01T00:01:00Z"}});
    tx.send(watch_event(
        "MODIFIED",
        &live(
            &pod,
            running(1, false, Some(oom.clone()), Some("CrashLoopBackOff")),
        ),
    ))
    .await
    .unwrap();
    let got = next_kinds(&mut ev, &id, 3).await;
    assert_eq!(
        got[0],
        K::Exited {
            exit: daros_adapters::ExitStatus {
                code: Some(137),
                signal: None
            },
            requested: false
        }
    );
    assert_eq!(
        got[1],
        K::Failed {
            failure: Failure::Runtime(RuntimeFailure::OutOfMemory { limit: None })
        }
    );
    assert!(
        matches!(&got[2], K::Unready { reason, .. } if reason.contains("CrashLoopBackOff")),
        "{got:?}"
    );
    assert_eq!(a.list().await.unwrap()[0].state, InstanceState::BackOff);

    // A second restart passes maxRetries 1: the adapter deletes the pod and gives up.
    tx.send(watch_event(
        "MODIFIED",
        &live(&pod, running(2, false, Some(oom), Some("CrashLoopBackOff"))),
    ))
    .await
    .unwrap();
    let (_, r) = api
        .expect(
            Method::DELETE,
            &format!("/api/v1/namespaces/shop/pods/{name}"),
        )
        .await;
    r.send_response(json_response(
        200,
        &live(&pod, running(2, false, None, None)),
    ));
    let got = next_kinds(&mut ev, &id, 3).await;
    assert_eq!(
        got[2],
        K::GaveUp {
            restarts: 2,
            on_exhausted: OnExhausted::WaitForOperator
        },
        "{got:?}"
    );
    let st = a.inspect(&id).await.unwrap();
    assert_eq!(st.state, InstanceState::Failed);
    assert_eq!(st.restarts, 2);
    assert!(st.message.unwrap().contains("maxRetries 1"));
    // The deletion arrives through the watch: no further failure is reported.
    tx.send(watch_event(
        "DELETED",
        &live(&pod, running(2, false, None, None)),
    ))
    .await
    .unwrap();
    drop(tx);
    watch.abort();
}

#[tokio::test]
async fn mock_apiserver_pod_deleted_behind_our_back_is_a_failure() {
    let (a, mut api, mut ev) = mock_cluster();
    let s = spec();
    let (id, pod) = create_and_start(&a, &mut api, &s).await;
    let watch = tokio::spawn(a.clone().watch());
    let (_, r) = api.expect(Method::GET, "/api/v1/pods").await;
    r.send_response(json_response(
        200,
        &json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "3"}, "items": []}),
    ));
    let (_, r) = api.expect(Method::GET, "/api/v1/pods").await;
    let (tx, resp) = streaming();
    r.send_response(resp);
    tx.send(watch_event(
        "DELETED",
        &live(&pod, running(0, true, None, None)),
    ))
    .await
    .unwrap();
    let got = next_kinds(&mut ev, &id, 2).await;
    assert_eq!(
        got[1],
        K::Failed {
            failure: Failure::Runtime(RuntimeFailure::ContainerCrash { exit_code: None })
        }
    );
    let st = a.list().await.unwrap().remove(0);
    assert_eq!(st.state, InstanceState::Failed);
    assert!(st.message.unwrap().contains("deleted outside D-AROS"));
    watch.abort();
}

#[tokio::test]
async fn mock_apiserver_a_pod_missing_from_a_relist_is_a_failure() {
    let (a, mut api, mut ev) = mock_cluster();
    let s = spec();
    let (id, pod) = create_and_start(&a, &mut api, &s).await;
    let watch = tokio::spawn(a.clone().watch());
    let (_, r) = api.expect(Method::GET, "/api/v1/pods").await;
    r.send_response(json_response(
        200,
        &json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "3"}, "items": [live(&pod, running(0, true, None, None))]}),
    ));
    let (w, r) = api.expect(Method::GET, "/api/v1/pods").await;
    assert!(w.query.contains("watch=true"), "{}", w.query);
    let (tx, resp) = streaming();
    r.send_response(resp);
    assert_eq!(
        next_kinds(&mut ev, &id, 3).await,
        [
            K::Created,
            K::Started {
                pid: None,
                generation: 1
            },
            K::Ready
        ]
    );
    // The watch expires (as after an API server outage): the API server
    // ends it with a 410 ERROR event, no failure by itself ...
    let gone = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 410,
                      "reason": "Expired", "message": "too old resource version"});
    tx.send(watch_event("ERROR", &gone)).await.unwrap();
    // ... and the re-list no longer has the pod: it was deleted meanwhile.
    let (relist, r) = api.expect(Method::GET, "/api/v1/pods").await;
    assert!(!relist.query.contains("watch=true"), "{}", relist.query);
    r.send_response(json_response(
        200,
        &json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "9"}, "items": []}),
    ));
    let got = next_kinds(&mut ev, &id, 1).await;
    assert_eq!(
        got[0],
        K::Failed {
            failure: Failure::Runtime(RuntimeFailure::ContainerCrash { exit_code: None })
        }
    );
    assert!(
        a.list().await.unwrap()[0]
            .message
            .as_deref()
            .unwrap()
            .contains("deleted outside D-AROS")
    );
    watch.abort();
}

#[tokio::test]
async fn mock_apiserver_stop_deletes_with_grace_and_waits_until_gone() {
    let (a, mut api, mut ev) = mock_cluster();
    let s = spec();
    let (id, pod) = create_and_start(&a, &mut api, &s).await;
    let path = format!("/api/v1/namespaces/{}", id.name.replacen('/', "/pods/", 1));
    let a2 = a.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { a2.stop(&id2, Duration::from_secs(5)).await });
    let (del, r) = api.expect(Method::DELETE, &path).await;
    assert_eq!(del.body["gracePeriodSeconds"], 5);
    let mut terminating = live(&pod, running(0, false, None, None));
    terminating["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    r.send_response(json_response(200, &terminating));
    // Still terminating, then gone: stop returns only then.
    let (_, r) = api.expect(Method::GET, &path).await;
    r.send_response(json_response(200, &terminating));
    assert!(!task.is_finished());
    let (_, r) = api.expect(Method::GET, &path).await;
    r.send_response(status(404, "NotFound", "gone"));
    task.await.unwrap().unwrap();
    assert_eq!(next_kinds(&mut ev, &id, 2).await, [K::Created, K::Stopped]);
    assert_eq!(a.list().await.unwrap()[0].state, InstanceState::Stopped);

    // Destroy of a stopped instance: DELETE answers 404, the instance is forgotten.
    let a2 = a.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { a2.destroy(&id2, DestroyOptions::default()).await });
    let (_, r) = api.expect(Method::DELETE, &path).await;
    r.send_response(status(404, "NotFound", "gone"));
    task.await.unwrap().unwrap();
    assert_eq!(next_kinds(&mut ev, &id, 1).await, [K::Destroyed]);
    assert!(matches!(
        a.inspect(&id).await,
        Err(AdapterError::NotFound(_))
    ));
}

#[tokio::test]
async fn mock_apiserver_errors_map_to_refusals_and_communication_failures() {
    let (a, mut api, mut ev) = mock_cluster();
    let s = spec();
    let id = a.create(&s).await.unwrap();
    let path = format!("/api/v1/namespaces/{}", id.name.replacen('/', "/pods/", 1));
    // The API server is failing: start fails and reports an adapter
    // communication error (§4.7).
    let a2 = a.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { a2.start(&id2).await });
    let (_, r) = api.expect(Method::GET, &path).await;
    r.send_response(status(
        500,
        "InternalError",
        "etcdserver: request timed out",
    ));
    let e = task.await.unwrap().unwrap_err();
    assert!(matches!(e, AdapterError::Kube { .. }), "{e}");
    assert!(e.to_string().contains("etcdserver"), "{e}");
    let got = next_kinds(&mut ev, &id, 2).await;
    assert!(
        matches!(&got[1], K::Failed { failure: Failure::Runtime(RuntimeFailure::AdapterCommunicationError { detail }) } if detail.contains("etcdserver")),
        "{got:?}"
    );

    // The API server refuses the pod (admission, validation): a spec error
    // naming the template, not a failure.
    let a2 = a.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { a2.start(&id2).await });
    let (_, r) = api.expect(Method::GET, &path).await;
    r.send_response(status(404, "NotFound", "none"));
    let (_, r) = api
        .expect(Method::POST, "/api/v1/namespaces/shop/pods")
        .await;
    r.send_response(status(
        422,
        "Invalid",
        "Pod \"x\" is invalid: spec.containers[0].image: Required value",
    ));
    let e = task.await.unwrap().unwrap_err();
    let AdapterError::InvalidSpec(errs) = e else {
        panic!("{e}")
    };
    assert_eq!(errs[0].path, "runtimeSpec.podTemplate");
    assert!(errs[0].reason.contains("Required value"));

    // The watch cannot list: every running instance gets one communication failure.
    let watch = tokio::spawn(a.clone().watch());
    let (_, r) = api.expect(Method::GET, "/api/v1/pods").await;
    r.send_response(status(
        503,
        "ServiceUnavailable",
        "apiserver is shutting down",
    ));
    let got = next_kinds(&mut ev, &id, 1).await;
    assert!(
        matches!(&got[0], K::Failed { failure: Failure::Runtime(RuntimeFailure::AdapterCommunicationError { detail }) } if detail.contains("watching pods")),
        "{got:?}"
    );
    assert_eq!(a.list().await.unwrap()[0].state, InstanceState::Unknown);
    watch.abort();
}

#[tokio::test]
async fn mock_apiserver_logs_read_the_kubelet_log_with_timestamps() {
    let (a, mut api, _ev) = mock_cluster();
    let s = spec();
    let id = a.create(&s).await.unwrap();
    let a2 = a.clone();
    let id2 = id.clone();
    let task = tokio::spawn(async move { a2.logs(&id2, LogQuery { tail: Some(2) }).await });
    let (seen, r) = api
        .expect(
            Method::GET,
            &format!(
                "/api/v1/namespaces/{}/log",
                id.name.replacen('/', "/pods/", 1)
            ),
        )
        .await;
    assert!(
        seen.query.contains("tailLines=2") && seen.query.contains("timestamps=true"),
        "{}",
        seen.query
    );
    r.send_response(Response::new(body(
        "2024-01-01T00:00:00.000000001Z hello world\n2024-01-01T00:00:01Z bye\n",
    )));
    let lines = task.await.unwrap().unwrap();
    let texts: Vec<_> = lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(texts, ["hello world", "bye"]);
    assert_eq!(lines[1].time, 1_704_067_201_000_000_000);
}

#[tokio::test]
async fn specs_are_checked_before_any_request() {
    // No API server is involved: these are refused locally.
    let (a, _api, _ev) = mock_cluster();
    let mut s = spec();
    s.runtime.runtime_type = RuntimeType::Process;
    assert!(matches!(
        a.create(&s).await,
        Err(AdapterError::Unsupported { .. })
    ));
    let mut s = spec();
    s.runtime_spec.value_mut()["podTemplate"]["spec"]["restartPolicy"] = json!("Always");
    s.runtime_spec.value_mut()["podTemplate"]["spec"]["containers"][0]["image"] =
        json!("nginx:latest");
    s.runtime_spec.value_mut()["podTemplate"]["metadata"]["labels"]["daros.io/app"] =
        json!("other");
    let Err(AdapterError::InvalidSpec(errs)) = a.create(&s).await else {
        panic!()
    };
    let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "runtimeSpec.podTemplate.metadata.labels.daros.io/app",
            "runtimeSpec.podTemplate.spec.restartPolicy",
            "runtimeSpec.podTemplate.spec.containers[0].image",
        ]
    );
    let mut s = spec();
    s.runtime_spec.value_mut()["replicas"] = json!(3);
    assert!(
        a.create(&s)
            .await
            .unwrap_err()
            .to_string()
            .contains("replicas")
    );
}

#[tokio::test]
async fn mock_apiserver_managed_pods_lists_owned_pods_for_cleanup() {
    let (a, mut api, _ev) = mock_cluster();
    let s = spec();
    let a2 = a.clone();
    let task = tokio::spawn(async move { a2.managed_pods().await });
    let (seen, r) = api.expect(Method::GET, "/api/v1/pods").await;
    assert!(
        seen.query
            .contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Ddaros"),
        "{}",
        seen.query
    );
    let mut job = desired_pod(&s);
    job["metadata"]["name"] = json!("shop-web-init-migrate-abcdef");
    job["metadata"]["labels"]["daros.io/init-job"] = json!("migrate");
    r.send_response(json_response(200, &json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "1"}, "items": [live(&desired_pod(&s), json!({})), live(&job, json!({}))]})));
    let pods = task.await.unwrap().unwrap();
    assert_eq!(pods.len(), 2);
    assert_eq!(pods[0].1, s.key);
    assert_eq!(
        pods[1].1,
        InstanceKey::init_job(AppKey::new("acme", "shop"), "web", "migrate")
    );
    assert_eq!(
        pods[1].0.to_string(),
        "kubernetes:shop/shop-web-init-migrate-abcdef"
    );
    // An orphan is deleted by id.
    let a2 = a.clone();
    let orphan = pods[1].0.clone();
    let task = tokio::spawn(async move { a2.delete_orphan(&orphan, Duration::from_secs(3)).await });
    let (del, r) = api
        .expect(
            Method::DELETE,
            "/api/v1/namespaces/shop/pods/shop-web-init-migrate-abcdef",
        )
        .await;
    assert_eq!(del.body["gracePeriodSeconds"], 3);
    r.send_response(status(404, "NotFound", "already gone"));
    task.await.unwrap().unwrap();
}
