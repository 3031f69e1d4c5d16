//! Workload logs: `GET /v1/workloads/{id}/logs?tail=N&follow=true` (also
//! `/v1/logs/{id}`). `id` is an instance id (`tenant/app/workload/replica/vN`),
//! an init-job id (`tenant/app/workload/init/job/vN`) or a workload
//! (`tenant/app/workload[/replica]`) for all its replicas on this node. Without
//! `follow` the answer is a JSON array; with it, newline-delimited JSON streamed
//! (chunked) until the client goes away or the instances are removed.

use super::access::RouteAccess;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::{ApiRoute, AppState, Param};
use crate::runtime::{Executor, LogsError};

/// One log line (schema of the answer).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogLineDoc {
    /// Instance or job id.
    pub instance: String,
    /// RFC 3339 time with nanoseconds.
    pub time: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// True for a line cut at the writer's buffer (joined when possible).
    pub partial: bool,
    /// The text.
    pub text: String,
}

/// Query of the logs routes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Last N lines (all without `follow`, 10 with it).
    pub tail: Option<usize>,
    /// Stream new lines.
    #[serde(default)]
    pub follow: bool,
}

const PARAMS: &[Param] = &[
    Param {
        name: "id",
        location: "path",
        required: true,
        description: "tenant/app/workload[/replica], tenant/app/workload/replica/vN or tenant/app/workload/init/job/vN",
        values: &[],
    },
    Param {
        name: "tail",
        location: "query",
        required: false,
        description: "Last N lines (default: all; 10 with follow)",
        values: &[],
    },
    Param {
        name: "follow",
        location: "query",
        required: false,
        description: "Stream new lines as newline-delimited JSON",
        values: &["true", "false"],
    },
];

/// Routes of this module (`/v1/workloads/{id}/logs` is dispatched by the
/// workloads route, whose id may contain `/`).
pub fn routes() -> Vec<ApiRoute> {
    vec![ApiRoute {
        method: Method::GET,
        path: "/v1/logs/{*id}",
        access: RouteAccess::Logs,
        summary: "Logs of an instance, init job or workload's replicas (also GET /v1/workloads/{id}/logs); follow=true streams NDJSON",
        params: PARAMS,
        response: |g| g.subschema_for::<Vec<LogLineDoc>>(),
        errors: &[400, 404, 503],
        handler: get(route),
    }]
}

async fn route(
    State(s): State<AppState>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    serve(&s, id.trim_start_matches('/'), q.as_deref()).await
}

fn error(e: LogsError) -> ApiError {
    let status = match &e {
        LogsError::Invalid { .. } => StatusCode::BAD_REQUEST,
        LogsError::NotFound(_) => StatusCode::NOT_FOUND,
        LogsError::Adapter(daros_adapters::AdapterError::NotFound(_)) => StatusCode::NOT_FOUND,
        LogsError::Adapter(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError {
        status,
        message: e.to_string(),
    }
}

pub(super) fn executor(s: &AppState) -> Result<&std::sync::Arc<Executor>, ApiError> {
    s.runtime.as_ref().ok_or_else(|| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "this darosd runs no runtime executor ([runtime] enabled = false or it failed to start; see its log)".into(),
    })
}

fn parse_query(q: Option<&str>) -> Result<LogsQuery, ApiError> {
    let q = q.unwrap_or("");
    serde_urlencoded_like(q).map_err(ApiError::bad_request)
}

// The query has two keys; parsed by hand so that errors name the key.
fn serde_urlencoded_like(q: &str) -> Result<LogsQuery, String> {
    let mut out = LogsQuery::default();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
        match k {
            "tail" => {
                out.tail =
                    Some(v.parse().map_err(|_| {
                        format!("query tail: expected a number of lines, got {v:?}")
                    })?);
            }
            "follow" => {
                out.follow = match v {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(format!("query follow: expected true or false, got {v:?}")),
                };
            }
            other => return Err(format!("query {other:?}: unknown parameter (tail, follow)")),
        }
    }
    Ok(out)
}

/// Answers a logs request for `selector` with raw query `q`.
pub async fn serve(s: &AppState, selector: &str, q: Option<&str>) -> Response {
    match serve_inner(s, selector, q).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve_inner(s: &AppState, selector: &str, q: Option<&str>) -> Result<Response, ApiError> {
    let q = parse_query(q)?;
    let ex = executor(s)?;
    if !q.follow {
        let lines = ex.logs(selector, q.tail).await.map_err(error)?;
        return Ok(axum::Json(lines).into_response());
    }
    let stream = ex
        .follow_logs(selector, q.tail.unwrap_or(10))
        .await
        .map_err(error)?;
    let body = stream.map(|r| match r {
        Ok(line) => {
            let mut v = serde_json::to_vec(&line).unwrap_or_default();
            v.push(b'\n');
            Ok::<_, std::io::Error>(bytes::Bytes::from(v))
        }
        Err(e) => Err(std::io::Error::other(e.to_string())),
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_errors_name_the_key() {
        let q = serde_urlencoded_like("tail=5&follow=true").unwrap();
        assert_eq!(q.tail, Some(5));
        assert!(q.follow);
        assert!(serde_urlencoded_like("follow").unwrap().follow);
        assert!(
            serde_urlencoded_like("tail=x")
                .unwrap_err()
                .contains("tail")
        );
        assert!(
            serde_urlencoded_like("follow=maybe")
                .unwrap_err()
                .contains("follow")
        );
        assert!(
            serde_urlencoded_like("since=1")
                .unwrap_err()
                .contains("since")
        );
    }
}
