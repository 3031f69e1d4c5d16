//! A FAKE Kubernetes API server: no kube-apiserver (and no kubelet) can be had
//! on these machines, so this stands in for both at the HTTP boundary. It is
//! a real HTTP server on loopback that keeps objects in memory and serves
//! what D-AROS uses, for pods, namespaces, Events (core and events.k8s.io)
//! and the daros.io custom resources: create, get, delete, merge patch (and
//! of the status subresource), list and watch. Watches behave as the real
//! server's do where D-AROS depends on it: resumable by resourceVersion,
//! field selectors on `spec.nodeName`, equality label selectors, bookmarks
//! when asked, and `410 Gone` (an ERROR event in the stream) for a
//! resourceVersion older than the last [`FakeApiServer::compact`]. It can be
//! restarted on the same port ([`FakeApiServer::restart`]), cutting every
//! connection. The test plays the kubelet: it creates the pod's cgroup and
//! marks the pod running with [`FakeApiServer::run_pod`].
#![allow(dead_code, clippy::result_large_err)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

/// Core pods.
pub const PODS: &str = "v1/pods";
/// Core namespaces.
pub const NAMESPACES: &str = "v1/namespaces";
/// Core Events.
pub const CORE_EVENTS: &str = "v1/events";
/// events.k8s.io Events (what kube's Recorder writes).
pub const EVENTS: &str = "events.k8s.io/v1/events";
/// QoSProfiles.
pub const PROFILES: &str = "daros.io/v1alpha1/qosprofiles";
/// MinimalReservationPolicies.
pub const POLICIES: &str = "daros.io/v1alpha1/minimalreservationpolicies";

// (resource, apiVersion, kind, namespaced)
const KINDS: [(&str, &str, &str, bool); 6] = [
    (PODS, "v1", "Pod", true),
    (NAMESPACES, "v1", "Namespace", false),
    (CORE_EVENTS, "v1", "Event", true),
    (EVENTS, "events.k8s.io/v1", "Event", true),
    (PROFILES, "daros.io/v1alpha1", "QoSProfile", false),
    (
        POLICIES,
        "daros.io/v1alpha1",
        "MinimalReservationPolicy",
        false,
    ),
];

fn kind_of(resource: &str) -> Option<(&'static str, &'static str, bool)> {
    KINDS
        .iter()
        .find(|k| k.0 == resource)
        .map(|k| (k.1, k.2, k.3))
}

#[derive(Clone)]
struct Change {
    rv: u64,
    resource: String,
    kind: String,
    obj: Value,
}

#[derive(Default)]
struct Inner {
    // (resource, namespace or "", name) -> object
    objects: BTreeMap<(String, String, String), Value>,
    log: Vec<Change>,
    rv: u64,
    // Watches from a resourceVersion below this get 410 Gone.
    compacted: u64,
    uids: u64,
    requests: Vec<(Method, String)>,
    uris: Vec<String>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<Change>,
    // Bumped to end every open watch (compaction, restart).
    epoch: watch::Sender<u64>,
}

/// The fake API server (see the module docs).
pub struct FakeApiServer {
    shared: Shared,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    addr: SocketAddr,
    server: Mutex<
        Option<(
            tokio::task::JoinHandle<()>,
            tokio::sync::oneshot::Sender<()>,
        )>,
    >,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Ok(mut s) = self.server.lock()
            && let Some((task, _)) = s.take()
        {
            task.abort();
        }
    }
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    (
        code,
        axum::Json(status_body(code.as_u16(), reason, message)),
    )
        .into_response()
}

fn status_body(code: u16, reason: &str, message: String) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

impl Shared {
    fn change(&self, inner: &mut Inner, resource: &str, kind: &str, obj: &mut Value) -> u64 {
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let c = Change {
            rv,
            resource: resource.to_string(),
            kind: kind.to_string(),
            obj: obj.clone(),
        };
        inner.log.push(c.clone());
        let _ = self.events.send(c);
        rv
    }

    fn create(&self, resource: &str, ns: &str, mut obj: Value) -> Result<Value, Response> {
        let Some((api_version, kind, _)) = kind_of(resource) else {
            return Err(status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("the fake does not serve {resource}"),
            ));
        };
        let mut i = self
            .inner
            .lock()
            .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())?;
        let Some(name) = obj["metadata"]["name"].as_str().map(str::to_string) else {
            return Err(status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "metadata.name: Required value".into(),
            ));
        };
        let key = (resource.to_string(), ns.to_string(), name.clone());
        if i.objects.contains_key(&key) {
            return Err(status(
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{resource} \"{name}\" already exists"),
            ));
        }
        i.uids += 1;
        obj["apiVersion"] = json!(api_version);
        obj["kind"] = json!(kind);
        if !ns.is_empty() {
            obj["metadata"]["namespace"] = json!(ns);
        }
        obj["metadata"]["uid"] = json!(format!("0e0d0c0b-0000-4000-8000-{:012x}", i.uids));
        obj["metadata"]["creationTimestamp"] = json!("2026-11-21T00:00:00Z");
        obj["metadata"]["generation"] = json!(1);
        if resource == PODS && obj.get("status").is_none() {
            obj["status"] = json!({"phase": "Pending"});
        }
        self.change(&mut i, resource, "ADDED", &mut obj);
        i.objects.insert(key, obj.clone());
        Ok(obj)
    }

    fn patch(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        patch: &Value,
        status_only: bool,
    ) -> Result<Value, Response> {
        let mut i = self
            .inner
            .lock()
            .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())?;
        let key = (resource.to_string(), ns.to_string(), name.to_string());
        let Some(mut obj) = i.objects.get(&key).cloned() else {
            return Err(status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{resource} \"{name}\" not found"),
            ));
        };
        if status_only {
            // The status subresource takes only `status`.
            merge(&mut obj["status"], &patch["status"]);
        } else {
            let before = obj["spec"].clone();
            let mut p = patch.clone();
            if let Some(m) = p.as_object_mut() {
                m.remove("status");
            }
            merge(&mut obj, &p);
            if obj["spec"] != before {
                let g = obj["metadata"]["generation"].as_i64().unwrap_or(1);
                obj["metadata"]["generation"] = json!(g + 1);
            }
        }
        self.change(&mut i, resource, "MODIFIED", &mut obj);
        i.objects.insert(key, obj.clone());
        Ok(obj)
    }

    fn delete(&self, resource: &str, ns: &str, name: &str) -> Result<Value, Response> {
        let mut i = self
            .inner
            .lock()
            .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())?;
        match i
            .objects
            .remove(&(resource.to_string(), ns.to_string(), name.to_string()))
        {
            Some(mut o) => {
                self.change(&mut i, resource, "DELETED", &mut o);
                Ok(o)
            }
            None => Err(status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{resource} \"{name}\" not found"),
            )),
        }
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
        i.uris.push(format!("{} {}", req.method(), req.uri()));
    }
    next.run(req).await
}

// A list or watch filter: namespace, `spec.nodeName=x`-style field
// selectors and equality label selectors.
struct Filter {
    ns: Option<String>,
    fields: Vec<(String, String)>,
    labels: Vec<(String, Option<String>, bool)>,
}

impl Filter {
    fn new(ns: Option<String>, q: &BTreeMap<String, String>) -> Self {
        let fields = q
            .get("fieldSelector")
            .map(|s| {
                s.split(',')
                    .filter_map(|t| t.split_once('='))
                    .map(|(k, v)| (k.trim_end_matches('=').to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let labels = q
            .get("labelSelector")
            .map(|s| {
                s.split(',')
                    .filter(|t| !t.is_empty())
                    .map(|t| {
                        if let Some((k, v)) = t.split_once("!=") {
                            (k.to_string(), Some(v.to_string()), false)
                        } else if let Some((k, v)) = t.split_once('=') {
                            (
                                k.to_string(),
                                Some(v.trim_start_matches('=').to_string()),
                                true,
                            )
                        } else if let Some(k) = t.strip_prefix('!') {
                            (k.to_string(), None, false)
                        } else {
                            (t.to_string(), None, true)
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Filter { ns, fields, labels }
    }

    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.ns
            && obj["metadata"]["namespace"].as_str() != Some(ns)
        {
            return false;
        }
        let fields_ok = self.fields.iter().all(|(path, want)| {
            let mut v = obj;
            for part in path.split('.') {
                v = &v[part];
            }
            v.as_str() == Some(want.as_str())
        });
        let labels = &obj["metadata"]["labels"];
        let labels_ok = self.labels.iter().all(|(k, v, eq)| {
            let got = labels[k].as_str();
            match (v, eq) {
                (Some(v), true) => got == Some(v.as_str()),
                (Some(v), false) => got != Some(v.as_str()),
                (None, true) => got.is_some(),
                (None, false) => got.is_none(),
            }
        });
        fields_ok && labels_ok
    }
}

async fn list_or_watch(
    s: Shared,
    resource: String,
    f: Filter,
    q: BTreeMap<String, String>,
) -> Response {
    let Some((api_version, kind, _)) = kind_of(&resource) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the fake does not serve {resource}"),
        );
    };
    if q.get("watch").map(String::as_str) != Some("true") {
        let Ok(i) = s.inner.lock() else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let items: Vec<Value> = i
            .objects
            .iter()
            .filter(|((r, _, _), o)| *r == resource && f.matches(o))
            .map(|(_, o)| o.clone())
            .collect();
        let body = json!({
            "apiVersion": api_version, "kind": format!("{kind}List"),
            "metadata": {"resourceVersion": i.rv.to_string()},
            "items": items,
        });
        return axum::Json(body).into_response();
    }
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    // Subscribe before reading the log: nothing falls between the two.
    let rx = s.events.subscribe();
    let mut epoch = s.epoch.subscribe();
    epoch.mark_unchanged();
    let (backlog, now, gone) = match s.inner.lock() {
        Ok(i) => (
            i.log
                .iter()
                .filter(|c| c.rv > since && c.resource == resource && f.matches(&c.obj))
                .cloned()
                .collect::<Vec<_>>(),
            i.rv,
            since > 0 && since < i.compacted,
        ),
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let respond = |stream: Body| {
        Response::builder()
            .header("content-type", "application/json")
            .body(stream)
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    };
    if gone {
        // As the real server does: 200, then an ERROR event carrying 410.
        let body = status_body(410, "Expired", format!("too old resource version: {since}"));
        return respond(Body::from(line("ERROR", &body)));
    }
    let mut head: Vec<Result<Bytes, Infallible>> =
        backlog.iter().map(|c| Ok(line(&c.kind, &c.obj))).collect();
    let bookmark = |rv: u64| json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": rv.to_string()}});
    if bookmarks {
        head.push(Ok(line("BOOKMARK", &bookmark(now))));
    }
    let last = backlog.last().map_or(since, |c| c.rv);
    let live = futures::stream::unfold(
        (rx, epoch, last, resource, f),
        move |(mut rx, mut epoch, last, resource, f)| async move {
            loop {
                // Biased: a watch ended (compaction, restart) delivers nothing after.
                tokio::select! {
                    biased;
                    _ = epoch.changed() => return None,
                    m = rx.recv() => match m {
                        Ok(c) if c.rv > last && c.resource == resource && f.matches(&c.obj) => {
                            let rv = c.rv;
                            return Some((Ok(line(&c.kind, &c.obj)), (rx, epoch, rv, resource, f)));
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                }
            }
        },
    );
    let stream = futures::StreamExt::chain(futures::stream::iter(head), live);
    respond(Body::from_stream(stream))
}

// One watch event as a line of the chunked body.
fn line(kind: &str, obj: &Value) -> Bytes {
    let mut b = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

fn reply(r: Result<Value, Response>, code: StatusCode) -> Response {
    match r {
        Ok(v) => (code, axum::Json(v)).into_response(),
        Err(e) => e,
    }
}

fn parse(body: &Bytes) -> Result<Value, Response> {
    serde_json::from_slice(body).map_err(|e| {
        status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("body is not JSON: {e}"),
        )
    })
}

fn get_one(s: &Shared, resource: &str, ns: &str, name: &str) -> Response {
    let Ok(i) = s.inner.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    match i
        .objects
        .get(&(resource.to_string(), ns.to_string(), name.to_string()))
    {
        Some(o) => axum::Json(o.clone()).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{resource} \"{name}\" not found"),
        ),
    }
}

// `/api/v1/{res}` and `/apis/{g}/{v}/{res}`: list or watch everywhere, or
// create a cluster-scoped object.
async fn collection(
    State(s): State<Shared>,
    method: Method,
    Path(p): Path<Vec<(String, String)>>,
    Query(q): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let r = resource_of(&p);
    let ns = param(&p, "ns");
    if method == Method::POST {
        return match parse(&body) {
            Ok(v) => reply(
                s.create(&r, ns.as_deref().unwrap_or(""), v),
                StatusCode::CREATED,
            ),
            Err(e) => e,
        };
    }
    let f = Filter::new(ns, &q);
    list_or_watch(s, r, f, q).await
}

// One object: get, delete, merge patch (also of `/status`).
async fn object(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    Path(p): Path<Vec<(String, String)>>,
    body: Bytes,
) -> Response {
    let r = resource_of(&p);
    let ns = param(&p, "ns").unwrap_or_default();
    let name = param(&p, "name").unwrap_or_default();
    let status_only = uri.path().ends_with("/status");
    match method {
        Method::GET => get_one(&s, &r, &ns, &name),
        Method::DELETE => reply(s.delete(&r, &ns, &name), StatusCode::OK),
        Method::PATCH => match parse(&body) {
            Ok(v) => reply(s.patch(&r, &ns, &name, &v, status_only), StatusCode::OK),
            Err(e) => e,
        },
        m => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("the fake does not serve {m} {uri}"),
        ),
    }
}

fn param(p: &[(String, String)], k: &str) -> Option<String> {
    p.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

fn resource_of(p: &[(String, String)]) -> String {
    let res = param(p, "res").unwrap_or_default();
    match (param(p, "g"), param(p, "v")) {
        (Some(g), Some(v)) => format!("{g}/{v}/{res}"),
        _ => format!("v1/{res}"),
    }
}

async fn fallback(method: Method, uri: Uri) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("the fake API server does not serve {method} {uri}"),
    )
}

fn router(shared: Shared) -> Router {
    let any = || get(collection).post(collection);
    let one = || get(object).delete(object).patch(object);
    Router::new()
        .route("/api/v1/{res}", any())
        .route("/api/v1/namespaces/{ns}/{res}", any())
        .route("/api/v1/namespaces/{ns}/{res}/{name}", one())
        .route("/apis/{g}/{v}/{res}", any())
        .route("/apis/{g}/{v}/{res}/{name}", one())
        .route("/apis/{g}/{v}/{res}/{name}/status", one())
        .route("/apis/{g}/{v}/namespaces/{ns}/{res}", any())
        .route("/apis/{g}/{v}/namespaces/{ns}/{res}/{name}", one())
        .fallback(fallback)
        .layer(axum::middleware::from_fn_with_state(shared.clone(), record))
        .with_state(shared)
}

async fn serve(
    shared: Shared,
    listener: tokio::net::TcpListener,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = router(shared);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await;
    });
    (task, tx)
}

impl FakeApiServer {
    /// Starts it on a free loopback port.
    pub async fn start() -> Self {
        let (events, _) = broadcast::channel(4096);
        let shared = Shared {
            inner: Arc::new(Mutex::new(Inner::default())),
            events,
            epoch: watch::channel(0).0,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = serve(shared.clone(), listener).await;
        Self {
            shared,
            url: format!("http://{addr}"),
            addr,
            server: Mutex::new(Some(server)),
        }
    }

    /// Stops serving (every connection cut, watches included), stays down
    /// for `down`, and serves again on the same port with the same objects.
    pub async fn restart(&self, down: Duration) {
        let old = self.server.lock().unwrap().take();
        self.shared.epoch.send_modify(|e| *e += 1);
        if let Some((task, stop)) = old {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        tokio::time::sleep(down).await;
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        let s = serve(self.shared.clone(), listener).await;
        *self.server.lock().unwrap() = Some(s);
    }

    /// What etcd compaction does to watchers: every open watch ends, and a
    /// watch from any resourceVersion before now gets 410 Gone (so clients
    /// must list again).
    pub fn compact(&self) {
        {
            let mut i = self.shared.inner.lock().unwrap();
            i.rv += 1;
            i.compacted = i.rv;
            i.log.clear();
        }
        self.shared.epoch.send_modify(|e| *e += 1);
    }

    /// A kube client for it.
    pub fn client(&self) -> kube::Client {
        let cfg = kube::Config::new(self.url.parse().unwrap());
        kube::Client::try_from(cfg).unwrap()
    }

    /// A kubeconfig file content pointing at it.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{}\"}}\n\
             contexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\ncurrent-context: fake\n\
             users:\n- name: fake\n  user: {{}}\n",
            self.url
        )
    }

    /// Objects of `resource` by `ns/name` (`name` when cluster-scoped).
    pub fn objects(&self, resource: &str) -> BTreeMap<String, Value> {
        self.shared
            .inner
            .lock()
            .unwrap()
            .objects
            .iter()
            .filter(|((r, _, _), _)| r == resource)
            .map(|((_, ns, n), o)| {
                let key = if ns.is_empty() {
                    n.clone()
                } else {
                    format!("{ns}/{n}")
                };
                (key, o.clone())
            })
            .collect()
    }

    /// Creates an object as a user would (`ns` empty when cluster-scoped).
    pub fn create(&self, resource: &str, ns: &str, obj: Value) -> Value {
        self.shared
            .create(resource, ns, obj)
            .unwrap_or_else(|_| panic!("cannot create in {resource}"))
    }

    /// Merge-patches an object as a user would.
    pub fn patch(&self, resource: &str, ns: &str, name: &str, patch: Value) -> Value {
        self.shared
            .patch(resource, ns, name, &patch, false)
            .unwrap_or_else(|_| panic!("no {resource} {ns}/{name}"))
    }

    /// Deletes an object as a user would.
    pub fn delete(&self, resource: &str, ns: &str, name: &str) {
        let _ = self.shared.delete(resource, ns, name);
    }

    /// The pods it holds, by `ns/name`.
    pub fn pods(&self) -> BTreeMap<String, Value> {
        self.objects(PODS)
    }

    /// Every request so far as (method, path).
    pub fn requests(&self) -> Vec<(Method, String)> {
        self.shared.inner.lock().unwrap().requests.clone()
    }

    /// Every request so far as `METHOD /path?query`.
    pub fn uris(&self) -> Vec<String> {
        self.shared.inner.lock().unwrap().uris.clone()
    }

    /// Plays the kubelet: pod `key` (`ns/name`) runs, ready, as `qos_class`.
    pub fn run_pod(&self, key: &str, qos_class: &str) -> Value {
        let (ns, name) = key.split_once('/').unwrap();
        let pod = self
            .objects(PODS)
            .remove(key)
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
        let status = json!({"status": {
            "phase": "Running", "qosClass": qos_class, "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": containers,
        }});
        self.shared
            .patch(PODS, ns, name, &status, true)
            .unwrap_or_else(|_| panic!("no pod {key}"))
    }

    /// Adds a pod as another agent (or an earlier life of this one) left it.
    pub fn insert_pod(&self, ns: &str, pod: Value) {
        self.create(PODS, ns, pod);
    }
}
