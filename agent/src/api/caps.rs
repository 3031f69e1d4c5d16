//! `/v1/capabilities`: what the host offers.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;

use super::{ApiRoute, AppState};
use crate::model::Capabilities;

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![ApiRoute {
        method: Method::GET,
        path: "/v1/capabilities",
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
