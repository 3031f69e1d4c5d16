//! The local API: HTTP/JSON over a unix socket. One module per resource; each
//! contributes [`ApiRoute`]s, from which both the router and the OpenAPI
//! document are built, so the document cannot drift from the routes.

pub mod access;
pub mod admin;
pub mod apps;
pub mod audit;
pub mod caps;
pub mod cluster;
pub mod error;
pub mod events;
pub mod health;
pub mod limits;
pub mod logs;
pub mod members;
pub mod net;
pub mod node;
pub mod nodes;
pub mod objects;
pub mod openapi;
pub mod parse_errors;
pub mod qos;
pub mod serve;
pub mod socket;
pub mod volumes;
pub mod workloads;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::Method;
use axum::routing::MethodRouter;
use schemars::{Schema, SchemaGenerator};

use crate::model::Capabilities;
use crate::sensing::Latest;

/// What handlers read.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Latest snapshot.
    pub latest: Arc<Latest>,
    /// Host capabilities (probed once at start).
    pub caps: Arc<Capabilities>,
    /// Sampling interval (for staleness checks).
    pub interval: Duration,
    /// QoS enforcement (`None` when `[qos] enabled = false`).
    pub qos: Option<Arc<crate::qos::QosService>>,
    /// The eBPF datapath.
    pub net: Option<Arc<crate::net::NetService>>,
    /// The control plane (`None` when it could not start; its routes answer 503).
    pub control: Option<Arc<crate::control::ControlPlane>>,
    /// The runtime executor (`None` when it is off or could not start; logs answer 503).
    pub runtime: Option<Arc<crate::runtime::Executor>>,
    /// iocost as darosd set it up (`None` in tests that serve no agent).
    pub io_cost: Option<Arc<caps::IoCostState>>,
}

/// A path parameter or query parameter of a route, for the OpenAPI document.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// Name.
    pub name: &'static str,
    /// `path` or `query`.
    pub location: &'static str,
    /// Required?
    pub required: bool,
    /// Description.
    pub description: &'static str,
    /// Allowed values, if an enumeration.
    pub values: &'static [&'static str],
}

/// One route: its handler and its documentation.
pub struct ApiRoute {
    /// HTTP method (documentation; the handler's method router must match).
    pub method: Method,
    /// Path in axum syntax (`/v1/workloads/{*id}`).
    pub path: &'static str,
    /// Who may call it.
    pub access: access::RouteAccess,
    /// One-line summary.
    pub summary: &'static str,
    /// Parameters.
    pub params: &'static [Param],
    /// Schema of the 200 response body.
    pub response: fn(&mut SchemaGenerator) -> Schema,
    /// Error statuses the route returns besides the generic ones.
    pub errors: &'static [u16],
    /// Handler.
    pub handler: MethodRouter<AppState>,
}

/// Every route of the API.
pub fn routes() -> Vec<ApiRoute> {
    let mut r = Vec::new();
    r.extend(health::routes());
    r.extend(node::routes());
    r.extend(workloads::routes());
    r.extend(logs::routes());
    r.extend(caps::routes());
    r.extend(audit::routes());
    r.extend(qos::routes());
    r.extend(net::routes());
    r.extend(apps::routes());
    r.extend(nodes::routes());
    r.extend(events::routes());
    r.extend(admin::routes());
    r.extend(objects::routes());
    r.extend(volumes::routes());
    r.extend(members::routes());
    r.extend(cluster::routes());
    r.push(openapi::route());
    r
}

/// Builds the router with JSON fallbacks for unknown routes and methods,
/// every error in the JSON shape and every body bounded in size and time.
pub fn router(state: AppState, body_timeout: Duration) -> Router {
    let routes = routes();
    let doc = Arc::new(openapi::document(&routes));
    let mut app: Router<AppState> = Router::new();
    for route in routes {
        // Every route goes through the access check of its class.
        let guard =
            axum::middleware::from_fn_with_state((state.clone(), route.access), access::guard);
        app = app.route(route.path, route.handler.route_layer(guard));
    }
    app.fallback(error::unknown_route)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::Extension(doc))
        .layer(axum::middleware::map_response(error::json_errors))
        .layer(axum::middleware::from_fn_with_state(
            body_timeout,
            limits::bounded,
        ))
        .with_state(state)
}
