//! `/v1/capabilities`: what the host offers.

use super::access::RouteAccess;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use daros_coordinator::access::Permission;

use super::{ApiRoute, AppState};
use crate::model::Capabilities;

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![ApiRoute {
        method: Method::GET,
        path: "/v1/capabilities",
        access: RouteAccess::Node(Permission::Read),
        summary: "Host capabilities: cgroup mode and controllers, PSI, eBPF/BTF, bpffs, GPU, kernel",
        params: &[],
        response: |g| g.subschema_for::<Capabilities>(),
        errors: &[],
        handler: get(caps),
    }]
}

async fn caps(State(s): State<AppState>) -> Json<Capabilities> {
    Json((*s.caps).clone())
}
