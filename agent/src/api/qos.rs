//! `/v1/qos`: classes and floors per workload, the node's admission account,
//! the protection loop and its events; `PUT`/`DELETE` a workload's class and
//! `POST /v1/qos/adopt` to put a process under a class.

use super::access::RouteAccess;
use daros_coordinator::access::Permission;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post, put};
use daros_coordinator::{QosClass, ResourceProfile};
use serde::Deserialize;

use super::error::ApiError;
use super::{ApiRoute, AppState, Param};
use crate::cgroup::CgroupPath;
use crate::model::WorkloadKind;
use crate::qos::report::EventList;
use crate::qos::{QosError, QosOverview, QosService, QosSpec, SetTarget, UnsetReport, WorkloadQos};

const ID: Param = Param {
    name: "id",
    location: "path",
    required: true,
    description: "Workload id: managed/<name> (created if missing) or a discovered workload such as systemd/<unit> or k8s/<pod-uid>",
    values: &[],
};

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/qos",
            access: RouteAccess::Node(Permission::Read),
            summary: "Workloads under a QoS class with every knob (requested, applied, enforced or degraded with the reason), the admission account and the protection loop",
            params: &[],
            response: |g| g.subschema_for::<QosOverview>(),
            errors: &[503],
            handler: get(overview),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/qos/events",
            access: RouteAccess::Node(Permission::Read),
            summary: "Protection loop events (holds, releases, floors restored with the reaction time), oldest first",
            params: &[],
            response: |g| g.subschema_for::<EventList>(),
            errors: &[503],
            handler: get(events),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/qos/adopt",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "Create managed/<name>, put it under a class and move processes into it. Body: {\"name\", \"pids\": [..], \"class\", \"profile\"}",
            params: &[],
            response: |g| g.subschema_for::<WorkloadQos>(),
            errors: &[400, 409, 503],
            handler: post(adopt),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/qos/workloads/{*id}",
            access: RouteAccess::Node(Permission::Read),
            summary: "One workload's class, profile and knobs",
            params: &[ID],
            response: |g| g.subschema_for::<WorkloadQos>(),
            errors: &[404, 503],
            handler: get(one),
        },
        ApiRoute {
            method: Method::PUT,
            path: "/v1/qos/workloads/{*id}",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "Put a workload under a class. Body: {\"class\": \"GuaranteedPro\", \"profile\": {\"cpu\": {\"reservation\": \"1\"}, ...}}; a refused floor is a 409 with the numbers",
            params: &[ID],
            response: |g| g.subschema_for::<WorkloadQos>(),
            errors: &[400, 404, 409, 503],
            handler: put(set),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/qos/workloads/{*id}",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "Remove the class: a discovered cgroup gets its original values back and is observed only again; a managed one gets the defaults",
            params: &[ID],
            response: |g| g.subschema_for::<UnsetReport>(),
            errors: &[404, 503],
            handler: delete(unset),
        },
    ]
}

fn service(s: &AppState) -> Result<Arc<QosService>, ApiError> {
    s.qos.clone().ok_or_else(|| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "QoS enforcement is disabled on this agent ([qos] enabled = false)".into(),
    })
}

impl From<QosError> for ApiError {
    fn from(e: QosError) -> Self {
        let status = match &e {
            QosError::Invalid(_) => StatusCode::BAD_REQUEST,
            QosError::NotFound(_) => StatusCode::NOT_FOUND,
            QosError::Refused(_) | QosError::Conflict(_) => StatusCode::CONFLICT,
            QosError::Cgroup(_) | QosError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            message: e.to_string(),
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, QosError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("QoS operation failed: {e}"),
        })?
        .map_err(ApiError::from)
}

async fn overview(State(s): State<AppState>) -> Result<Json<QosOverview>, ApiError> {
    let svc = service(&s)?;
    blocking(move || Ok(svc.overview())).await.map(Json)
}

async fn events(State(s): State<AppState>) -> Result<Json<EventList>, ApiError> {
    let svc = service(&s)?;
    Ok(Json(EventList {
        events: svc.shared().events(),
    }))
}

fn clean_id(id: &str) -> String {
    id.trim_start_matches('/').to_string()
}

async fn one(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<WorkloadQos>, ApiError> {
    let svc = service(&s)?;
    let id = clean_id(&id);
    svc.get(&id).map(Json).ok_or_else(|| {
        ApiError::not_found(format!(
            "{id} is not under a QoS class; list them with GET /v1/qos"
        ))
    })
}

/// Body of `PUT /v1/qos/workloads/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetBody {
    class: QosClass,
    #[serde(default)]
    profile: ResourceProfile,
}

/// Body of `POST /v1/qos/adopt`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdoptBody {
    name: String,
    pids: Vec<u32>,
    class: QosClass,
    #[serde(default)]
    profile: ResourceProfile,
}

/// Parses a JSON body; errors name the field (`profile.cpu.request: invalid cpu quantity ...`).
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("a JSON body is required"));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.inner().to_string();
        if path == "." || path.is_empty() {
            ApiError::bad_request(format!("invalid body: {msg}"))
        } else {
            ApiError::bad_request(format!("{path}: {msg}"))
        }
    })
}

fn spec(class: QosClass, profile: ResourceProfile) -> Result<QosSpec, ApiError> {
    QosSpec::new(class, profile, "profile").map_err(|e| ApiError::from(QosError::Invalid(e)))
}

/// Resolves a workload id to where the class applies.
fn target(s: &AppState, id: &str) -> Result<SetTarget, ApiError> {
    if let Some(name) = id.strip_prefix("managed/") {
        if name.is_empty() || name.contains('/') {
            return Err(ApiError::bad_request(format!(
                "workload id {id:?}: managed/<name> takes one path component"
            )));
        }
        return Ok(SetTarget::Managed(name.to_string()));
    }
    if !id.contains('/') {
        return Err(ApiError::bad_request(format!(
            "workload id {id:?}: expected managed/<name> or a discovered id such as systemd/<unit> (see GET /v1/workloads)"
        )));
    }
    let snap = s.latest.get();
    let w = snap.workload(id).ok_or_else(|| {
        ApiError::not_found(format!(
            "workload {id:?} not found; list them with GET /v1/workloads"
        ))
    })?;
    if w.kind == WorkloadKind::Managed {
        return Err(ApiError::bad_request(format!(
            "{id}: managed workloads are addressed as managed/<name>"
        )));
    }
    let cg = CgroupPath::new(&w.cgroup).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(SetTarget::Discovered(cg))
}

async fn set(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<WorkloadQos>, ApiError> {
    let svc = service(&s)?;
    let id = clean_id(&id);
    let b: SetBody = parse(&body)?;
    let spec = spec(b.class, b.profile)?;
    let t = target(&s, &id)?;
    blocking(move || svc.set(&id, t, spec)).await.map(Json)
}

async fn unset(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<UnsetReport>, ApiError> {
    let svc = service(&s)?;
    let id = clean_id(&id);
    blocking(move || svc.unset(&id)).await.map(Json)
}

async fn adopt(State(s): State<AppState>, body: Bytes) -> Result<Json<WorkloadQos>, ApiError> {
    let svc = service(&s)?;
    let b: AdoptBody = parse(&body)?;
    let spec = spec(b.class, b.profile)?;
    blocking(move || svc.adopt(&b.name, &b.pids, spec))
        .await
        .map(Json)
}
