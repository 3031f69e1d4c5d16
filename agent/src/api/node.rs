//! `/v1/node`: the node sample.

use super::access::RouteAccess;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use daros_coordinator::access::Permission;

use super::{ApiRoute, AppState};
use crate::model::NodeSample;

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![ApiRoute {
        method: Method::GET,
        path: "/v1/node",
        access: RouteAccess::Node(Permission::Read),
        summary: "Latest node sample: CPU, memory, disks, network, PSI, GPUs and the agent itself",
        params: &[],
        response: |g| g.subschema_for::<NodeSample>(),
        errors: &[],
        handler: get(node),
    }]
}

async fn node(State(s): State<AppState>) -> Json<NodeSample> {
    Json(s.latest.get().node.clone())
}
