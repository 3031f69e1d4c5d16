//! `/v1/cluster`: raft status (leader, term, commit index, server health), join
//! tokens, and adding or removing server agents.

use super::access::RouteAccess;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post, put};
use daros_coordinator::access::Permission;
use daros_gossip::NodeId;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::apps::{WriteResult, plane, write};
use super::error::{ApiError, ApiJson};
use super::{ApiRoute, AppState, Param};
use crate::control::ControlError;

/// `GET /v1/cluster`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterView {
    /// Cluster id.
    pub cluster_id: String,
    /// This node.
    pub node_id: String,
    /// This node's role (`server` or `client`).
    pub role: String,
    /// Highest coordinator fence this agent accepted.
    pub fence: daros_gossip::fence::FenceToken,
    /// Raft view (leader, term, commit index, servers and their health).
    pub status: daros_gossip::mesh::ClusterStatus,
}

/// Body of `POST /v1/cluster/servers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddServer {
    /// Node id of a server agent that joined with a server token.
    pub node: String,
    /// Its RPC address (default: from gossip).
    pub rpc_addr: Option<std::net::SocketAddr>,
}

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/cluster",
            access: RouteAccess::Node(Permission::Read),
            summary: "Cluster status: leader, term, commit index, health of the servers",
            params: &[],
            response: |g| g.subschema_for::<Value>(),
            errors: &[503],
            handler: get(status),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/cluster/init",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "The cluster's join tokens (server agents; the cluster is created on first start)",
            params: &[],
            response: |g| g.subschema_for::<Value>(),
            errors: &[409, 503],
            handler: post(init),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/cluster/join",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "Joining is done at start: darosd --join TOKEN --server ADDR on an empty data dir",
            params: &[],
            response: |g| g.subschema_for::<Value>(),
            errors: &[409],
            handler: post(join),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/cluster/servers",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "Add a server agent to the raft voters: {\"node\": ID, \"rpc_addr\": optional}",
            params: &[],
            response: |g| g.subschema_for::<Value>(),
            errors: &[400, 503],
            handler: post(add_server),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/cluster/servers/{node}",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "Remove a server agent from the raft voters",
            params: &[Param {
                name: "node",
                location: "path",
                required: true,
                description: "Node id",
                values: &[],
            }],
            response: |g| g.subschema_for::<Value>(),
            errors: &[400, 503],
            handler: delete(remove_server),
        },
        ApiRoute {
            method: Method::PUT,
            path: "/v1/cluster/retention",
            access: RouteAccess::State,
            summary: "How much history the coordinator keeps: {events, decisions, evaluations, versions} (fields left out take their defaults)",
            params: &[],
            response: |g| g.subschema_for::<Value>(),
            errors: &[400, 503],
            handler: put(retention),
        },
    ]
}

async fn status(State(s): State<AppState>) -> Result<Json<ClusterView>, ApiError> {
    let p = plane(&s)?;
    let m = p.mesh();
    let status = m
        .cluster_status()
        .await
        .map_err(|e| ApiError::from(ControlError::from_mesh_read(e)))?;
    Ok(Json(ClusterView {
        cluster_id: m.cluster_id().to_string(),
        node_id: m.node_id().to_string(),
        role: format!("{:?}", m.role()).to_lowercase(),
        fence: m.fence_highest(),
        status,
    }))
}

async fn retention(
    State(s): State<AppState>,
    ApiJson(retention): ApiJson<daros_coordinator::state::history::Retention>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, daros_coordinator::Command::SetRetention { retention }).await
}

async fn init(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let p = plane(&s)?;
    let dir = crate::control::bootstrap::mesh_dir(p.data_dir());
    let tokens = daros_gossip::join::tokens(&dir).map_err(|e| {
        if p.mesh().role() == daros_gossip::Role::Client {
            ApiError {
                status: StatusCode::FORBIDDEN,
                message: "forbidden: a client agent holds no cluster CA and cannot issue join tokens; run `darosctl cluster init` on a server agent".into(),
            }
        } else {
            ApiError {
                status: StatusCode::CONFLICT,
                message: format!("this agent holds no cluster CA: {e}"),
            }
        }
    })?;
    Ok(Json(json!({
        "cluster_id": tokens.cluster_id,
        "node_id": p.node_name(),
        "rpc_addr": p.mesh().consensus_status().and_then(|c| c.servers.into_iter().find(|s| s.node_id.as_str() == p.node_name()).map(|s| s.rpc_addr)),
        "client_token": tokens.client_token,
        "server_token": tokens.server_token,
        "ca_fingerprint": tokens.ca_fingerprint,
        "note": "the cluster was created when this agent first started; join others with darosd --join TOKEN --server ADDR"
    })))
}

async fn join(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let cluster = s
        .control
        .as_ref()
        .map(|p| p.mesh().cluster_id().to_string())
        .unwrap_or_default();
    Err(ApiError {
        status: StatusCode::CONFLICT,
        message: format!(
            "this agent already belongs to cluster {cluster:?}; a node joins on its first start: darosd --join TOKEN --server ADDR with an empty agent.data_dir"
        ),
    })
}

async fn add_server(
    State(s): State<AppState>,
    ApiJson(b): ApiJson<AddServer>,
) -> Result<Json<Value>, ApiError> {
    let p = plane(&s)?;
    let id =
        NodeId::new(b.node.clone()).map_err(|e| ApiError::bad_request(format!("node: {e}")))?;
    p.mesh()
        .add_server(&id, b.rpc_addr)
        .await
        .map_err(|e| ApiError::from(ControlError::from_mesh(e)))?;
    Ok(Json(json!({ "added": b.node })))
}

async fn remove_server(
    State(s): State<AppState>,
    Path(node): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let p = plane(&s)?;
    let id = NodeId::new(node.clone()).map_err(|e| ApiError::bad_request(format!("node: {e}")))?;
    p.mesh()
        .remove_server(&id)
        .await
        .map_err(|e| ApiError::from(ControlError::from_mesh(e)))?;
    Ok(Json(json!({ "removed": node })))
}
