//! `/v1/net`: the eBPF datapath and what it does for each workload.

use super::access::RouteAccess;
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::get;
use daros_coordinator::access::Permission;

use super::error::ApiError;
use super::{ApiRoute, AppState};
use crate::model::net::NetStatus;

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![ApiRoute {
        method: Method::GET,
        path: "/v1/net",
        access: RouteAccess::Node(Permission::Read),
        summary: "eBPF datapath: parts available (or why not), counted workloads with caps and floors, floor loop, events",
        params: &[],
        response: |g| g.subschema_for::<NetStatus>(),
        errors: &[503],
        handler: get(net),
    }]
}

async fn net(State(s): State<AppState>) -> Result<Json<NetStatus>, ApiError> {
    let Some(svc) = s.net else {
        return Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "this agent runs no eBPF datapath".into(),
        });
    };
    Ok(Json(
        tokio::task::spawn_blocking(move || svc.status())
            .await
            .map_err(|e| ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: format!("reading the datapath status: {e}"),
            })?,
    ))
}
