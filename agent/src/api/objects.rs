//! A tenant's Configs and Secrets: list them (Secrets by key only: no API
//! response carries a secret value) and delete them (refused while a
//! workload reads them: 409). They are written with `POST /v1/apply`.

use super::access::RouteAccess;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::Method;
use axum::routing::{delete, get};
use daros_coordinator::Command;
use serde_json::Value;

use super::apps::{WriteResult, any, plane, write};
use super::error::ApiError;
use super::{ApiRoute, AppState, Param};
use crate::control::state::ControlQuery;

const TENANT: Param = Param {
    name: "tenant",
    location: "path",
    required: true,
    description: "Tenant",
    values: &[],
};
const TENANT_ONLY: &[Param] = &[TENANT];
const TENANT_NAME: &[Param] = &[
    TENANT,
    Param {
        name: "name",
        location: "path",
        required: true,
        description: "Config or Secret name",
        values: &[],
    },
];

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/tenants/{tenant}/configs",
            access: RouteAccess::State,
            summary: "The tenant's Configs with their values",
            params: TENANT_ONLY,
            response: any,
            errors: &[403, 503],
            handler: get(configs),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/tenants/{tenant}/secrets",
            access: RouteAccess::State,
            summary: "The tenant's Secrets: names and keys, never values",
            params: TENANT_ONLY,
            response: any,
            errors: &[403, 503],
            handler: get(secrets),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/tenants/{tenant}/configs/{name}",
            access: RouteAccess::State,
            summary: "Delete a Config (409 while a workload reads it)",
            params: TENANT_NAME,
            response: any,
            errors: &[403, 404, 409, 503],
            handler: delete(delete_config),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/tenants/{tenant}/secrets/{name}",
            access: RouteAccess::State,
            summary: "Delete a Secret (409 while a workload reads it)",
            params: TENANT_NAME,
            response: any,
            errors: &[403, 404, 409, 503],
            handler: delete(delete_secret),
        },
    ]
}

async fn configs(
    State(s): State<AppState>,
    Path(tenant): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        plane(&s)?.query(ControlQuery::Configs { tenant }).await?,
    ))
}

async fn secrets(
    State(s): State<AppState>,
    Path(tenant): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        plane(&s)?.query(ControlQuery::Secrets { tenant }).await?,
    ))
}

async fn delete_config(
    State(s): State<AppState>,
    Path((tenant, name)): Path<(String, String)>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::DeleteConfig { tenant, name }).await
}

async fn delete_secret(
    State(s): State<AppState>,
    Path((tenant, name)): Path<(String, String)>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::DeleteSecret { tenant, name }).await
}
