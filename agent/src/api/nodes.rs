//! The cluster's nodes through the replicated coordinator: list them (as
//! their agents measured them and operators declared them), cordon,
//! uncordon and drain them, and delete one that is gone.

use super::access::RouteAccess;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::routing::get;
use daros_coordinator::{Command, NodeCondition};
use serde_json::Value;

use super::apps::{WriteResult, any, plane, write};
use super::error::ApiError;
use super::{ApiRoute, AppState, Param};
use crate::control::state::ControlQuery;

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/nodes",
            access: RouteAccess::State,
            summary: "Nodes of the cluster: what placement sees, what each agent measured, whether it registered (capacity, runtimes, labels, schedulable)",
            params: &[],
            response: any,
            errors: &[503],
            handler: get(list),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/nodes/{name}",
            access: RouteAccess::State,
            summary: "Delete a node that is gone: declared and never registered, or Down with nothing placed on it (409 otherwise)",
            params: NODE,
            response: any,
            errors: &[404, 409, 503],
            handler: axum::routing::delete(remove),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/nodes/{name}/cordon",
            access: RouteAccess::State,
            summary: "Cordon a node: it takes no new work; what runs there stays (kept across its agent's restarts)",
            params: NODE,
            response: any,
            errors: &[404, 503],
            handler: axum::routing::post(cordon),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/nodes/{name}/drain",
            access: RouteAccess::State,
            summary: "Drain a node: cordon it and move its instances elsewhere, each workload within its rollout budget (maxUnavailable / maxSurge); bound ones (disconnect.replace false) stay. Progress in GET /v1/nodes (drain); uncordon ends it",
            params: NODE,
            response: any,
            errors: &[404, 503],
            handler: axum::routing::post(drain),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/nodes/{name}/whatif",
            access: RouteAccess::State,
            summary: "Predict a node's loss (silent past every lostAfter) or its drain: what would move where, what would not and why; changes nothing",
            params: WHATIF,
            response: any,
            errors: &[400, 404, 503],
            handler: get(what_if),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/nodes/{name}/uncordon",
            access: RouteAccess::State,
            summary: "Uncordon a node: it takes new work again (ends a drain)",
            params: NODE,
            response: any,
            errors: &[404, 503],
            handler: axum::routing::post(uncordon),
        },
    ]
}

const NODE: &[Param] = &[Param {
    name: "name",
    location: "path",
    required: true,
    description: "Node name",
    values: &[],
}];

async fn condition(
    s: &AppState,
    node: String,
    condition: NodeCondition,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(s)?;
    write(&p, Command::SetNodeCondition { node, condition }).await
}

async fn cordon(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    condition(&s, name, NodeCondition::Cordoned).await
}

async fn uncordon(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    condition(&s, name, NodeCondition::Uncordoned).await
}

async fn drain(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::DrainNode { name }).await
}

const WHATIF: &[Param] = &[
    Param {
        name: "name",
        location: "path",
        required: true,
        description: "Node name",
        values: &[],
    },
    Param {
        name: "event",
        location: "query",
        required: true,
        description: "What to predict",
        values: &["loss", "drain"],
    },
];

/// Query of the node what-if route.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WhatIfQuery {
    /// `loss` or `drain`.
    event: daros_coordinator::NodeEvent,
}

async fn what_if(
    State(s): State<AppState>,
    Path(name): Path<String>,
    q: Result<Query<WhatIfQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = q?;
    let now = crate::control::plane::now();
    Ok(Json(
        plane(&s)?
            .query(ControlQuery::WhatIfNode {
                node: name,
                event: q.event,
                now,
            })
            .await?,
    ))
}

async fn list(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(plane(&s)?.query(ControlQuery::Nodes).await?))
}

async fn remove(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::DeleteNode { name }).await
}
