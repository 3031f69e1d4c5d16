//! Applications through the replicated coordinator: apply, list, describe,
//! explain, what-if, delete, operations, rollback. Writes go through raft
//! (forwarded to the leader); reads are linearizable.

use super::access::RouteAccess;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post};
use daros_coordinator::spec::{self, Format};
use daros_coordinator::{AppKey, Command, OperationRequest, Outcome};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ApiError, ApiJson};
use super::{ApiRoute, AppState, Param};
use crate::control::state::ControlQuery;
use crate::control::{ControlError, ControlPlane, FailureKind};

/// Answer of a write: where it sits in the raft log and what it did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriteResult {
    /// Raft term of the entry.
    pub term: u64,
    /// Raft index of the entry.
    pub index: u64,
    /// Events, decisions, actions, refusals and notes.
    pub outcome: Outcome,
}

/// Query of `POST /v1/apps`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyQuery {
    /// Start admitted applications (default true).
    pub start: Option<bool>,
    /// Apply only if the (one) application in the body is at this version (0:
    /// it does not exist yet); a conflict is a 409.
    #[serde(rename = "expectVersion")]
    pub expect_version: Option<u32>,
}

/// Query of the routes that change one application.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectQuery {
    /// Change it only if it is at this version; a conflict is a 409.
    #[serde(rename = "expectVersion")]
    pub expect_version: Option<u32>,
}

/// `command`, conditional on `app` being at `version` when one is given.
fn expecting(app: &AppKey, version: Option<u32>, command: Command) -> Command {
    match version {
        Some(version) => Command::Expect {
            app: app.clone(),
            version,
            then: Box::new(command),
        },
        None => command,
    }
}

/// Query of the explain route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainQuery {
    /// Decision number (default: the application's latest).
    pub decision: Option<u64>,
}

/// Body of the rollback route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    /// Version to return to.
    pub version: u32,
}

const APP_PARAMS: &[Param] = &[
    Param {
        name: "tenant",
        location: "path",
        required: true,
        description: "Tenant of the application",
        values: &[],
    },
    Param {
        name: "name",
        location: "path",
        required: true,
        description: "Application name",
        values: &[],
    },
];

const EXPECT_VERSION: Param = Param {
    name: "expectVersion",
    location: "query",
    required: false,
    description: "Change it only if it is at this version (its latest version number; 0: it does not exist); else 409",
    values: &[],
};

const APP_CHANGE_PARAMS: &[Param] = &[APP_PARAMS[0], APP_PARAMS[1], EXPECT_VERSION];

pub(super) fn any(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    g.subschema_for::<Value>()
}

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::POST,
            path: "/v1/apps",
            access: RouteAccess::State,
            summary: "Apply documents (YAML or JSON body: Tenant, Policy, ResourcePool, Node, Application)",
            params: &[
                Param {
                    name: "start",
                    location: "query",
                    required: false,
                    description: "Start admitted applications (default true)",
                    values: &["true", "false"],
                },
                EXPECT_VERSION,
            ],
            response: any,
            errors: &[400, 409, 503],
            handler: post(apply),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/apps",
            access: RouteAccess::State,
            summary: "Every application with its phase, version and ready instances",
            params: &[],
            response: any,
            errors: &[503],
            handler: get(list),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/apps/{tenant}/{name}",
            access: RouteAccess::State,
            summary: "Describe an application: phase, events, versions, instances with node and state",
            params: APP_PARAMS,
            response: any,
            errors: &[404, 503],
            handler: get(describe),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/apps/{tenant}/{name}",
            access: RouteAccess::State,
            summary: "Delete an application (its instances are stopped)",
            params: APP_CHANGE_PARAMS,
            response: any,
            errors: &[404, 409, 503],
            handler: delete(remove),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/apps/{tenant}/{name}/explain",
            access: RouteAccess::State,
            summary: "Explain the latest decision of an application (or ?decision=N)",
            params: APP_PARAMS,
            response: any,
            errors: &[404, 503],
            handler: get(explain),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/apps/{tenant}/{name}/operations",
            access: RouteAccess::State,
            summary: "An operation: {\"op\":\"stop\"|\"start\"|\"restore\"|\"retry\"|\"abort\"|\"promote\"|\"approve\"|\"suspend\"|\"resume\"|\"scale\",...}",
            params: APP_CHANGE_PARAMS,
            response: any,
            errors: &[400, 404, 409, 503],
            handler: post(operate),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/apps/{tenant}/{name}/rollback",
            access: RouteAccess::State,
            summary: "Apply an earlier version's spec as a new version: {\"version\": N}",
            params: APP_CHANGE_PARAMS,
            response: any,
            errors: &[400, 404, 409, 503],
            handler: post(rollback),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/whatif",
            access: RouteAccess::State,
            summary: "Predict applying documents (YAML or JSON body); changes nothing",
            params: &[],
            response: any,
            errors: &[400, 503],
            handler: post(what_if),
        },
    ]
}

/// The control plane, or 503 when this agent runs without one.
pub fn plane(s: &AppState) -> Result<Arc<ControlPlane>, ApiError> {
    s.control.clone().ok_or_else(|| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "the control plane is not running on this agent (see the darosd log)".into(),
    })
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        let status = match &e {
            ControlError::Refused(f) => match f.kind {
                FailureKind::Invalid => StatusCode::BAD_REQUEST,
                FailureKind::NotFound => StatusCode::NOT_FOUND,
                FailureKind::Conflict => StatusCode::CONFLICT,
                FailureKind::Forbidden => StatusCode::FORBIDDEN,
            },
            ControlError::Forbidden(_) => StatusCode::FORBIDDEN,
            ControlError::OutcomeUnknown(_) => StatusCode::GATEWAY_TIMEOUT,
            ControlError::Unavailable(_)
            | ControlError::NotApplied(_)
            | ControlError::Startup(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError {
            status,
            message: e.to_string(),
        }
    }
}

/// How long checking a request's documents may take: past it, a registered
/// job type's handler did not answer and the documents are refused before
/// they reach the coordinator (which calls the same handlers).
const CHECK_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// Parses a request's documents off the async runtime's threads (bounded in
/// size and depth before any parsing: `spec::bounds`).
async fn documents(body: String) -> Result<Vec<spec::Document>, ApiError> {
    documents_within(body, CHECK_BUDGET).await
}

async fn documents_within(
    body: String,
    budget: std::time::Duration,
) -> Result<Vec<spec::Document>, ApiError> {
    if body.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty body: send YAML or JSON documents",
        ));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::task::spawn_blocking(move || {
        let _ = tx.send(std::thread::current().id());
        spec::parse(&body, Format::Auto)
    });
    match tokio::time::timeout(budget, task).await {
        Ok(r) => r
            .map_err(|e| ApiError::bad_request(format!("the spec could not be parsed: {e}")))?
            .map_err(|e| ApiError::bad_request(e.to_string())),
        Err(_) => {
            // The stuck handler keeps its thread; nothing else waits on it.
            let who = rx
                .await
                .ok()
                .and_then(daros_coordinator::jobs::in_handler)
                .unwrap_or_else(|| "checking the documents".into());
            tracing::warn!(handler = %who, "a job type's handler did not answer in time");
            Err(ApiError::bad_request(format!(
                "{who}: did not answer within {}s; nothing was applied",
                budget.as_secs_f64()
            )))
        }
    }
}

pub(super) async fn write(p: &ControlPlane, cmd: Command) -> Result<Json<WriteResult>, ApiError> {
    let (outcome, at) = p.write(cmd).await?;
    Ok(Json(WriteResult {
        term: at.term,
        index: at.index,
        outcome,
    }))
}

async fn apply(
    State(s): State<AppState>,
    q: Result<Query<ApplyQuery>, QueryRejection>,
    body: String,
) -> Result<Json<WriteResult>, ApiError> {
    let Query(q) = q?;
    let p = plane(&s)?;
    let mut documents = documents(body).await?;
    p.seal_documents(&mut documents)
        .map_err(ApiError::bad_request)?;
    let apps: Vec<AppKey> = documents
        .iter()
        .filter_map(|d| match d {
            spec::Document::Application(a) => Some(a.key()),
            _ => None,
        })
        .collect();
    let command = Command::Apply {
        documents,
        start: q.start.unwrap_or(true),
    };
    let command = match (q.expect_version, apps.as_slice()) {
        (None, _) => command,
        (Some(v), [one]) => expecting(one, Some(v), command),
        (Some(_), _) => {
            return Err(ApiError::bad_request(format!(
                "expectVersion: applies to exactly one Application document; this body has {}",
                apps.len()
            )));
        }
    };
    write(&p, command).await
}

async fn list(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        plane(&s)?
            .query(ControlQuery::Apps {
                now: crate::control::plane::now(),
            })
            .await?,
    ))
}

async fn describe(
    State(s): State<AppState>,
    Path((tenant, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let app = AppKey::new(tenant, name);
    let now = crate::control::plane::now();
    Ok(Json(
        plane(&s)?
            .query(ControlQuery::Describe { app, now })
            .await?,
    ))
}

async fn explain(
    State(s): State<AppState>,
    Path((tenant, name)): Path<(String, String)>,
    q: Result<Query<ExplainQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = q?;
    let app = AppKey::new(tenant, name);
    Ok(Json(
        plane(&s)?
            .query(ControlQuery::Explain {
                app,
                decision: q.decision,
            })
            .await?,
    ))
}

async fn what_if(State(s): State<AppState>, body: String) -> Result<Json<Value>, ApiError> {
    let p = plane(&s)?;
    let mut documents = documents(body).await?;
    p.seal_documents(&mut documents)
        .map_err(ApiError::bad_request)?;
    let now = crate::control::plane::now();
    Ok(Json(
        p.query(ControlQuery::WhatIf { documents, now }).await?,
    ))
}

async fn remove(
    State(s): State<AppState>,
    Path((tenant, name)): Path<(String, String)>,
    q: Result<Query<ExpectQuery>, QueryRejection>,
) -> Result<Json<WriteResult>, ApiError> {
    let Query(q) = q?;
    let p = plane(&s)?;
    let app = AppKey::new(tenant, name);
    let command = Command::Operate {
        app: app.clone(),
        operation: OperationRequest::Delete,
    };
    write(&p, expecting(&app, q.expect_version, command)).await
}

async fn operate(
    State(s): State<AppState>,
    Path((tenant, name)): Path<(String, String)>,
    q: Result<Query<ExpectQuery>, QueryRejection>,
    ApiJson(operation): ApiJson<OperationRequest>,
) -> Result<Json<WriteResult>, ApiError> {
    let Query(q) = q?;
    let p = plane(&s)?;
    let app = AppKey::new(tenant, name);
    let command = Command::Operate {
        app: app.clone(),
        operation,
    };
    write(&p, expecting(&app, q.expect_version, command)).await
}

async fn rollback(
    State(s): State<AppState>,
    Path((tenant, name)): Path<(String, String)>,
    q: Result<Query<ExpectQuery>, QueryRejection>,
    ApiJson(b): ApiJson<RollbackBody>,
) -> Result<Json<WriteResult>, ApiError> {
    let Query(q) = q?;
    let p = plane(&s)?;
    let app = AppKey::new(tenant, name);
    let command = Command::Rollback {
        app: app.clone(),
        version: b.version,
    };
    write(&p, expecting(&app, q.expect_version, command)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::field::FieldError;
    use daros_coordinator::jobs::{self, JobRun, JobType};
    use std::time::{Duration, Instant};

    /// A job type whose check takes 3 s.
    struct Sleepy;

    impl JobType for Sleepy {
        fn name(&self) -> &'static str {
            "sleepy"
        }
        fn summary(&self) -> &'static str {
            "slow to check"
        }
        fn validate(&self, _: &serde_json::Value, _: &str) -> Vec<FieldError> {
            std::thread::sleep(Duration::from_secs(3));
            Vec::new()
        }
        fn run(&self, _: &serde_json::Value) -> Result<JobRun, String> {
            Err("never".into())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_job_type_handler_is_refused_at_the_edge_naming_the_step() {
        jobs::register(std::sync::Arc::new(Sleepy)).unwrap();
        let body = "apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: a, tenant: t}\nspec:\n  \
                    workloads: [{name: w, runtime: {type: process}}]\n  \
                    workflow: {steps: [{name: s, type: sleepy}, {name: d, type: deploy, properties: {workloads: [w]}}]}\n";
        let t0 = Instant::now();
        let e = documents_within(body.into(), Duration::from_millis(500))
            .await
            .unwrap_err();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(2), "waited {took:?}");
        let text = format!("{e:?}");
        assert!(
            text.contains("spec.workflow.steps[0]: job type \\\"sleepy\\\": did not answer within 0.5s; nothing was applied"),
            "{text}"
        );
    }
}
