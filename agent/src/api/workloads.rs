//! `/v1/workloads` and `/v1/workloads/{id}`.

use super::access::RouteAccess;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::Method;
use axum::routing::get;
use daros_coordinator::access::Permission;
use serde::Deserialize;

use super::error::ApiError;
use super::{ApiRoute, AppState, Param};
use crate::model::{Workload, WorkloadKind, WorkloadList};

/// Query of the list route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only workloads of this kind.
    pub kind: Option<WorkloadKind>,
}

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/workloads",
            access: RouteAccess::Node(Permission::Read),
            summary: "All sampled workloads, sorted by id",
            params: &[Param {
                name: "kind",
                location: "query",
                required: false,
                description: "Only workloads of this kind",
                values: &["managed", "kubernetes_pod", "systemd_unit"],
            }],
            response: |g| g.subschema_for::<WorkloadList>(),
            errors: &[400],
            handler: get(list),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/workloads/{*id}",
            access: RouteAccess::Node(Permission::Read),
            summary: "One workload by id (ids contain '/', e.g. managed/web)",
            params: &[Param {
                name: "id",
                location: "path",
                required: true,
                description: "Workload id such as managed/web, k8s/<pod-uid>, systemd/<unit>",
                values: &[],
            }],
            response: |g| g.subschema_for::<Workload>(),
            errors: &[404],
            handler: get(one_or_logs),
        },
    ]
}

async fn list(
    State(s): State<AppState>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<WorkloadList>, ApiError> {
    let Query(q) = q?;
    let snap = s.latest.get();
    let workloads = snap
        .workloads
        .iter()
        .filter(|w| q.kind.is_none_or(|k| w.kind == k))
        .cloned()
        .collect();
    Ok(Json(WorkloadList {
        sampled_at_unix_ms: snap.node.sampled_at_unix_ms,
        workloads,
    }))
}

// `/v1/workloads/{id}/logs`: the id contains `/`, so the catch-all route
// dispatches the logs suffix (see `api::logs`).
async fn one_or_logs(
    State(s): State<AppState>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match id.trim_start_matches('/').strip_suffix("/logs") {
        Some(sel) => super::logs::serve(&s, sel, q.as_deref()).await,
        None => one(State(s), Path(id)).await.into_response(),
    }
}

async fn one(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Workload>, ApiError> {
    let id = id.trim_start_matches('/');
    let snap = s.latest.get();
    snap.workload(id).cloned().map(Json).ok_or_else(|| {
        ApiError::not_found(format!(
            "workload {id:?} not found; list them with GET /v1/workloads"
        ))
    })
}
