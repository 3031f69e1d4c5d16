//! `/v1/members`: the mesh members as gossip sees them.

use super::access::RouteAccess;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use daros_coordinator::access::Permission;
use serde_json::Value;

use super::apps::plane;
use super::error::ApiError;
use super::{ApiRoute, AppState};

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![ApiRoute {
        method: Method::GET,
        path: "/v1/members",
        access: RouteAccess::Node(Permission::Read),
        summary: "Mesh members: node id, role, addresses, liveness, capacity, version",
        params: &[],
        response: |g| g.subschema_for::<Value>(),
        errors: &[503],
        handler: get(members),
    }]
}

async fn members(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let p = plane(&s)?;
    let mut m = p.mesh().members().await;
    m.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    serde_json::to_value(m)
        .map(Json)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}
