//! Every request is bounded before any handler runs: its head in size
//! (hyper checks the size only while a head is incomplete, so one that
//! arrived whole in a single read is measured here), its body in size and
//! time. A client that drips its body or sends more than the largest spec
//! gets a JSON 408 or 413 at once, and nothing of an oversized body is kept
//! in memory beyond the limit.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ApiError;

/// The largest request head (line and headers) accepted, in bytes.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The 431 message.
pub fn head_too_large() -> String {
    format!(
        "the request line and headers are larger than {MAX_HEAD_BYTES} bytes or number more than 100 headers"
    )
}

/// The size of a request's line and headers as sent.
fn head_bytes(req: &Request) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 11;
    req.headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + line
}

/// The largest body accepted: the largest spec the coordinator parses.
pub const MAX_BODY_BYTES: usize = daros_coordinator::spec::bounds::MAX_SPEC_BYTES;

/// Middleware refusing heads over [`MAX_HEAD_BYTES`] and reading the body
/// within `timeout` (`api.body_timeout`) and [`MAX_BODY_BYTES`].
pub async fn bounded(State(timeout): State<Duration>, req: Request, next: Next) -> Response {
    if head_bytes(&req) > MAX_HEAD_BYTES {
        return ApiError {
            status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            message: head_too_large(),
        }
        .into_response();
    }
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(timeout, Limited::new(body, MAX_BODY_BYTES).collect());
    match read.await {
        Ok(Ok(collected)) => {
            next.run(Request::from_parts(parts, Body::from(collected.to_bytes())))
                .await
        }
        Ok(Err(e)) if e.is::<LengthLimitError>() => ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "the request body is larger than {MAX_BODY_BYTES} bytes, the API's limit: split the spec into several applies"
            ),
        }
        .into_response(),
        Ok(Err(e)) => ApiError::bad_request(format!("reading the request body: {e}")).into_response(),
        Err(_) => ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body was not received within {} (api.body_timeout)",
                crate::config::duration::format(timeout)
            ),
        }
        .into_response(),
    }
}
