//! `/v1/volumes`: the `storage` trait's volumes on this node, and deleting
//! one (its data goes; refused while a process of its instance runs).

use super::access::RouteAccess;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get};
use daros_coordinator::access::Permission;

use super::error::ApiError;
use super::{ApiRoute, AppState, Param};
use crate::runtime::volumes::{VolumeError, VolumeInfo};

const ID: &[Param] = &[Param {
    name: "id",
    location: "path",
    required: true,
    description: "Volume id (tenant.app.workload.replica.name)",
    values: &[],
}];

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/volumes",
            access: RouteAccess::Node(Permission::Read),
            summary: "Volumes of the storage trait on this node: size, space taken, where mounted",
            params: &[],
            response: |g| g.subschema_for::<Vec<VolumeInfo>>(),
            errors: &[503],
            handler: get(list),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/volumes/{id}",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "Delete a volume and its data (409 while a process of its instance runs)",
            params: ID,
            response: |g| g.subschema_for::<Vec<VolumeInfo>>(),
            errors: &[400, 404, 409, 500, 503],
            handler: delete(remove),
        },
    ]
}

async fn list(State(s): State<AppState>) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    let v = super::logs::executor(&s)?.volumes().clone();
    Ok(Json(
        tokio::task::spawn_blocking(move || v.list())
            .await
            .unwrap_or_default(),
    ))
}

async fn remove(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    let v = super::logs::executor(&s)?.volumes().clone();
    let out = tokio::task::spawn_blocking(move || v.delete(&id).map(|()| v.list()))
        .await
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: e.to_string(),
        })?;
    out.map(Json).map_err(|e| ApiError {
        status: match &e {
            VolumeError::NotFound(_) => StatusCode::NOT_FOUND,
            VolumeError::BadId(_) => StatusCode::BAD_REQUEST,
            VolumeError::Busy(_) | VolumeError::SizeChanged { .. } => StatusCode::CONFLICT,
            VolumeError::Os { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        },
        message: e.to_string(),
    })
}
