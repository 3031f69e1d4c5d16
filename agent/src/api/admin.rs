//! The platform's own objects through the replicated coordinator: list
//! tenants (with what they hold), policies (with their versions, and roll
//! one back) and resource pools (with their nodes), and delete them
//! (refused while in use: 409).

use super::access::RouteAccess;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::Method;
use axum::routing::{delete, get};
use daros_coordinator::Command;
use serde_json::Value;

use super::apps::{RollbackBody, WriteResult, any, plane, write};
use super::error::{ApiError, ApiJson};
use super::{ApiRoute, AppState, Param};
use crate::control::state::ControlQuery;

const NAME: &[Param] = &[Param {
    name: "name",
    location: "path",
    required: true,
    description: "Object name",
    values: &[],
}];

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/tenants",
            access: RouteAccess::State,
            summary: "Tenants with their quota and what their applications hold",
            params: &[],
            response: any,
            errors: &[503],
            handler: get(tenants),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/tenants/{name}",
            access: RouteAccess::State,
            summary: "Delete a tenant (409 while it has applications)",
            params: NAME,
            response: any,
            errors: &[404, 409, 503],
            handler: delete(delete_tenant),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/policies",
            access: RouteAccess::State,
            summary: "Policies (global, pool and tenant scope)",
            params: &[],
            response: any,
            errors: &[503],
            handler: get(policies),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/policies/{name}",
            access: RouteAccess::State,
            summary: "One policy: what is in force and its versions (deletion included)",
            params: NAME,
            response: any,
            errors: &[404, 503],
            handler: get(policy),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/policies/{name}/rollback",
            access: RouteAccess::State,
            summary: "Write an earlier version of a policy again, as its next version: {\"version\": N} (checked like any write)",
            params: NAME,
            response: any,
            errors: &[400, 404, 503],
            handler: axum::routing::post(rollback_policy),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/policies/{name}",
            access: RouteAccess::State,
            summary: "Delete a policy",
            params: NAME,
            response: any,
            errors: &[404, 409, 503],
            handler: delete(delete_policy),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/pools",
            access: RouteAccess::State,
            summary: "Resource pools with their nodes and the capacity of those taking work",
            params: &[],
            response: any,
            errors: &[503],
            handler: get(pools),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/pools/{name}",
            access: RouteAccess::State,
            summary: "Delete a resource pool (409 while in use)",
            params: NAME,
            response: any,
            errors: &[404, 409, 503],
            handler: delete(delete_pool),
        },
    ]
}

async fn tenants(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(plane(&s)?.query(ControlQuery::Tenants).await?))
}

async fn policies(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(plane(&s)?.query(ControlQuery::Policies).await?))
}

async fn policy(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(plane(&s)?.query(ControlQuery::Policy { name }).await?))
}

async fn rollback_policy(
    State(s): State<AppState>,
    Path(name): Path<String>,
    ApiJson(b): ApiJson<RollbackBody>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(
        &p,
        Command::RollbackPolicy {
            name,
            version: b.version,
        },
    )
    .await
}

async fn pools(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(plane(&s)?.query(ControlQuery::Pools).await?))
}

async fn delete_tenant(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::DeleteTenant { name }).await
}

async fn delete_policy(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::DeletePolicy { name }).await
}

async fn delete_pool(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::DeletePool { name }).await
}
