//! `/healthz`: is the agent sampling?

use super::access::RouteAccess;
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::get;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ApiRoute, AppState};

/// Health of the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `ok`, or `stale` when sampling stopped (served with 503).
    pub status: String,
    /// Age of the latest sample.
    pub last_sample_age_ms: u64,
    /// Ticks since start.
    pub samples_total: u64,
}

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![ApiRoute {
        method: Method::GET,
        path: "/healthz",
        access: RouteAccess::Open,
        summary: "Liveness: 200 while sampling runs, 503 when the last sample is older than three intervals",
        params: &[],
        response: |g| g.subschema_for::<Health>(),
        errors: &[503],
        handler: get(health),
    }]
}

async fn health(State(s): State<AppState>) -> (StatusCode, Json<Health>) {
    let age = s.latest.age();
    let stale = age > s.interval * 3 + std::time::Duration::from_secs(1);
    let h = Health {
        status: if stale { "stale" } else { "ok" }.into(),
        last_sample_age_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
        samples_total: s.latest.get().node.agent.samples_total,
    };
    (
        if stale {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        },
        Json(h),
    )
}
