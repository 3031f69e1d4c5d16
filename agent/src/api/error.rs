//! JSON errors for every failure the API can return, including unknown routes,
//! wrong methods and malformed requests.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, Request};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub error: String,
    /// The HTTP status code, repeated for clients that only see the body.
    pub status: u16,
}

/// An error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Message.
    pub message: String,
}

impl ApiError {
    /// 404 with `message`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: daros_coordinator::spec::plain::plain_types(&self.message),
            status: self.status.as_u16(),
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError {
            status: r.status(),
            message: r.body_text(),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        ApiError {
            status: r.status(),
            message: r.body_text(),
        }
    }
}

/// `Json<T>` whose rejection is a JSON [`ErrorBody`] naming the problem
/// (for request bodies of later routes).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Json::<T>::from_request(req, state)
            .await
            .map(|Json(v)| ApiJson(v))
            .map_err(ApiError::from)
    }
}

/// Middleware giving every error response the JSON [`ErrorBody`] shape:
/// those a handler built already have it; the rest (axum's extractor
/// rejections, which are plain text) keep their status and say their text as
/// the error.
pub async fn json_errors(resp: Response) -> Response {
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if resp.status().as_u16() < 400 || is_json {
        return resp;
    }
    let status = resp.status();
    let text = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    ApiError { status, message }.into_response()
}

/// Fallback for paths no route serves.
pub async fn unknown_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no route for {method} {}; see /v1/openapi.json",
        uri.path()
    ))
}

/// Fallback for known paths with an unsupported method.
pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!("method {method} not allowed on {}", uri.path()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    #[derive(Debug, Deserialize)]
    struct Thing {
        #[allow(dead_code)]
        size: u32,
    }

    async fn body_of(r: Response) -> ErrorBody {
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn bad_bodies_are_json_errors() {
        let app = Router::new().route("/t", post(|ApiJson(_t): ApiJson<Thing>| async { "ok" }));
        let send = |body: &'static str, ct: &'static str| {
            let app = app.clone();
            async move {
                app.oneshot(
                    Request::post("/t")
                        .header("content-type", ct)
                        .body(Body::from(body))
                        .unwrap(),
                )
                .await
                .unwrap()
            }
        };
        let r = send("{\"size\": \"big\"}", "application/json").await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let b = body_of(r).await;
        assert!(b.error.contains("size"), "{}", b.error);
        let r = send("{not json", "application/json").await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let r = send("{}", "text/plain").await;
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(body_of(r).await.status, 415);
        let r = send("{\"size\": 3}", "application/json").await;
        assert_eq!(r.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn plain_text_errors_become_json_without_rust_type_names() {
        let app = Router::new()
            .route("/t", post(|ApiJson(_t): ApiJson<Thing>| async { "ok" }))
            .route(
                "/text",
                post(|| async { (StatusCode::PAYLOAD_TOO_LARGE, "length limit exceeded") }),
            )
            .layer(axum::middleware::map_response(json_errors));
        let r = app
            .clone()
            .oneshot(Request::post("/text").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            body_of(r).await,
            ErrorBody {
                error: "length limit exceeded".into(),
                status: 413
            }
        );
        let r = app
            .oneshot(
                Request::post("/t")
                    .header("content-type", "application/json")
                    .body(Body::from("{\"size\": -1}"))
                    .unwrap(),
            )
            .await
            .unwrap();
        let b = body_of(r).await;
        assert!(!b.error.contains("u32"), "{}", b.error);
        assert!(b.error.contains("a whole number from 0"), "{}", b.error);
    }
}
