//! A FAKE Kubernetes API server: no kube-apiserver (and no kubelet) can be had
//! on these machines, so this stands in for both at the HTTP boundary. It is
//! a real HTTP server on loopback that keeps pods in memory and serves what
//! the Kubernetes adapter uses: create, get, delete, list and watch of pods
//! (watch as a chunked stream of JSON events, resumable by resourceVersion).
//! The test plays the kubelet: it creates the pod's cgroup and marks the pod
//! running with [`FakeApiServer::run_pod`].
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::broadcast;

#[derive(Default)]
struct Inner {
    pods: BTreeMap<String, Value>,
    // Every change as (resourceVersion, type, object), for watches resuming.
    log: Vec<(u64, String, Value)>,
    rv: u64,
    uids: u64,
    requests: Vec<(Method, String)>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<(u64, String, Value)>,
}

/// The fake API server (see the module docs).
pub struct FakeApiServer {
    shared: Shared,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

impl Shared {
    fn change(&self, inner: &mut Inner, kind: &str, pod: &mut Value) -> u64 {
        inner.rv += 1;
        let rv = inner.rv;
        pod["metadata"]["resourceVersion"] = json!(rv.to_string());
        inner.log.push((rv, kind.to_string(), pod.clone()));
        let _ = self.events.send((rv, kind.to_string(), pod.clone()));
        rv
    }
}

async fn record(
    State(s): State<Shared>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Ok(mut i) = s.inner.lock() {
        i.requests
            .push((req.method().clone(), req.uri().path().to_string()));
    }
    next.run(req).await
}

async fn list_or_watch(
    State(s): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if q.get("watch").map(String::as_str) != Some("true") {
        let Ok(i) = s.inner.lock() else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let items: Vec<Value> = i.pods.values().cloned().collect();
        let body = json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": i.rv.to_string()},
            "items": items,
        });
        return axum::Json(body).into_response();
    }
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // Subscribe before reading the log: nothing falls between the two.
    let rx = s.events.subscribe();
    let backlog: Vec<(u64, String, Value)> = s
        .inner
        .lock()
        .map(|i| i.log.iter().filter(|e| e.0 > since).cloned().collect())
        .unwrap_or_default();
    let last = backlog.last().map_or(since, |e| e.0);
    let head: Vec<Result<Bytes, Infallible>> =
        backlog.iter().map(|(_, k, o)| Ok(line(k, o))).collect();
    let live = futures::stream::unfold((rx, last), |(mut rx, last)| async move {
        loop {
            match rx.recv().await {
                Ok((rv, kind, obj)) if rv > last => {
                    return Some((Ok(line(&kind, &obj)), (rx, rv)));
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let stream = futures::StreamExt::chain(futures::stream::iter(head), live);
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

// One watch event as a line of the chunked body.
fn line(kind: &str, obj: &Value) -> Bytes {
    let mut b = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

async fn create(
    State(s): State<Shared>,
    Path(ns): Path<String>,
    axum::Json(mut pod): axum::Json<Value>,
) -> Response {
    let Ok(mut i) = s.inner.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let Some(name) = pod["metadata"]["name"].as_str().map(str::to_string) else {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Required value".into(),
        );
    };
    let key = format!("{ns}/{name}");
    if i.pods.contains_key(&key) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("pods \"{name}\" already exists"),
        );
    }
    i.uids += 1;
    pod["metadata"]["namespace"] = json!(ns);
    pod["metadata"]["uid"] = json!(format!("0e0d0c0b-0000-4000-8000-{:012x}", i.uids));
    pod["metadata"]["creationTimestamp"] = json!("2026-11-21T00:00:00Z");
    pod["status"] = json!({"phase": "Pending"});
    s.change(&mut i, "ADDED", &mut pod);
    i.pods.insert(key, pod.clone());
    (StatusCode::CREATED, axum::Json(pod)).into_response()
}

async fn get_pod(State(s): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let Ok(i) = s.inner.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    match i.pods.get(&format!("{ns}/{name}")) {
        Some(p) => axum::Json(p.clone()).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("pods \"{name}\" not found"),
        ),
    }
}

async fn delete_pod(State(s): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let Ok(mut i) = s.inner.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    match i.pods.remove(&format!("{ns}/{name}")) {
        Some(mut p) => {
            s.change(&mut i, "DELETED", &mut p);
            axum::Json(p).into_response()
        }
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("pods \"{name}\" not found"),
        ),
    }
}

async fn fallback(method: Method, uri: Uri) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("the fake API server does not serve {method} {uri}"),
    )
}

impl FakeApiServer {
    /// Starts it on a free loopback port.
    pub async fn start() -> Self {
        let (events, _) = broadcast::channel(1024);
        let shared = Shared {
            inner: Arc::new(Mutex::new(Inner::default())),
            events,
        };
        let app = Router::new()
            .route("/api/v1/pods", get(list_or_watch))
            .route("/api/v1/namespaces/{ns}/pods", axum::routing::post(create))
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(get_pod).delete(delete_pod),
            )
            .fallback(fallback)
            .layer(axum::middleware::from_fn_with_state(shared.clone(), record))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { shared, url, task }
    }

    /// A kube client for it.
    pub fn client(&self) -> kube::Client {
        let cfg = kube::Config::new(self.url.parse().unwrap());
        kube::Client::try_from(cfg).unwrap()
    }

    /// The pods it holds, by `ns/name`.
    pub fn pods(&self) -> BTreeMap<String, Value> {
        self.shared.inner.lock().unwrap().pods.clone()
    }

    /// Every request so far as (method, path).
    pub fn requests(&self) -> Vec<(Method, String)> {
        self.shared.inner.lock().unwrap().requests.clone()
    }

    /// Plays the kubelet: pod `key` (`ns/name`) runs, ready, as `qos_class`.
    pub fn run_pod(&self, key: &str, qos_class: &str) -> Value {
        let mut i = self.shared.inner.lock().unwrap();
        let mut pod = i
            .pods
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("no pod {key}"));
        let containers: Vec<Value> = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                json!({
                    "name": c["name"], "image": c["image"], "imageID": "", "ready": true,
                    "restartCount": 0, "started": true,
                    "state": {"running": {"startedAt": "2026-11-21T00:00:01Z"}},
                })
            })
            .collect();
        pod["status"] = json!({
            "phase": "Running", "qosClass": qos_class, "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": containers,
        });
        let shared = self.shared.clone();
        shared.change(&mut i, "MODIFIED", &mut pod);
        i.pods.insert(key.to_string(), pod.clone());
        pod
    }

    /// Adds a pod as another agent (or an earlier life of this one) left it.
    pub fn insert_pod(&self, ns: &str, mut pod: Value) {
        let mut i = self.shared.inner.lock().unwrap();
        i.uids += 1;
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        pod["metadata"]["namespace"] = json!(ns);
        pod["metadata"]["uid"] = json!(format!("0e0d0c0b-0000-4000-8000-{:012x}", i.uids));
        let shared = self.shared.clone();
        shared.change(&mut i, "ADDED", &mut pod);
        i.pods.insert(format!("{ns}/{name}"), pod);
    }
}
