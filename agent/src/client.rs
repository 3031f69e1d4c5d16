//! A small HTTP/1 client for the agent's unix socket, used by `darosctl` and tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

use crate::api::error::ErrorBody;
use crate::api::health::Health;
use crate::model::{Capabilities, NodeSample, Workload, WorkloadKind, WorkloadList};

/// What the caller can do about a failed connect.
fn connect_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "the socket is root's (mode 0660): run darosctl as root, or as a member of the socket's group"
        }
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            "is darosd running? start it (systemctl start darosd), or point --socket / DAROS_API_SOCKET at its socket"
        }
        _ => "use --socket or DAROS_API_SOCKET to name darosd's socket",
    }
}

/// Errors talking to the agent.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket cannot be reached.
    #[error("cannot connect to darosd at {socket}: {source} ({})", connect_hint(.source))]
    Connect {
        /// Socket path.
        socket: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("request {path} failed: {reason}")]
    Http {
        /// Request path.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The agent answered with an error.
    #[error("darosd: {message} (HTTP {status})")]
    Api {
        /// Status code.
        status: u16,
        /// Error message from the body.
        message: String,
    },
    /// The body was not what was expected.
    #[error("unexpected response to {path}: {reason}")]
    Decode {
        /// Request path.
        path: String,
        /// Decoder message.
        reason: String,
    },
    /// No answer in time.
    #[error("no answer from darosd at {0} within the timeout")]
    Timeout(PathBuf),
}

/// A client bound to one socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
    token: Option<String>,
}

/// Percent-encodes a workload id for a path (keeps `/` and unreserved bytes).
pub fn encode_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes a 2xx JSON body; other statuses become [`ClientError::Api`].
fn decode<T: DeserializeOwned>(
    path: &str,
    status: StatusCode,
    body: &[u8],
) -> Result<T, ClientError> {
    if !status.is_success() {
        let message = serde_json::from_slice::<ErrorBody>(body)
            .map(|e| e.error)
            .unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned());
        return Err(ClientError::Api {
            status: status.as_u16(),
            message,
        });
    }
    serde_json::from_slice(body).map_err(|e| ClientError::Decode {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

impl Client {
    /// A client for `socket` with a 10 s timeout.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Client {
            socket: socket.into(),
            timeout: Duration::from_secs(10),
            token: None,
        }
    }

    /// Waits up to `timeout` for each answer (a calibration takes seconds).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Presents `token` (`daros-tk.<id>.<secret>`) with every request.
    #[must_use]
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// The `Authorization` header value, when a token is set.
    pub fn authorization(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends a request and returns status and body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        tokio::time::timeout(self.timeout, self.request_inner(method, path))
            .await
            .map_err(|_| ClientError::Timeout(self.socket.clone()))?
    }

    /// Sends a request with a JSON body (`None`: no body) and returns status and body.
    pub async fn request_json(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let bytes = match body {
            Some(v) => Some(Bytes::from(serde_json::to_vec(v).map_err(|e| {
                ClientError::Http {
                    path: path.to_string(),
                    reason: e.to_string(),
                }
            })?)),
            None => None,
        };
        tokio::time::timeout(self.timeout, self.request_inner_body(method, path, bytes))
            .await
            .map_err(|_| ClientError::Timeout(self.socket.clone()))?
    }

    /// Sends a request with an optional JSON body and decodes a 2xx JSON answer;
    /// other statuses become [`ClientError::Api`].
    pub async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<T, ClientError> {
        let (status, body) = self.request_json(method, path, body).await?;
        decode(path, status, &body)
    }

    /// Sends a request with a text body (YAML or JSON documents) and decodes a
    /// 2xx JSON answer; other statuses become [`ClientError::Api`].
    pub async fn send_text<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        text: String,
    ) -> Result<T, ClientError> {
        let (status, body) = tokio::time::timeout(
            self.timeout,
            self.request_inner_body(method, path, Some(Bytes::from(text))),
        )
        .await
        .map_err(|_| ClientError::Timeout(self.socket.clone()))??;
        decode(path, status, &body)
    }

    async fn request_inner(
        &self,
        method: Method,
        path: &str,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        self.request_inner_body(method, path, None).await
    }

    async fn request_inner_body(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let http = |reason: String| ClientError::Http {
            path: path.to_string(),
            reason,
        };
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|source| ClientError::Connect {
                socket: self.socket.clone(),
                source,
            })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http(e.to_string()))?;
        let conn = tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "darosd");
        if let Some(a) = self.authorization() {
            req = req.header(hyper::header::AUTHORIZATION, a);
        }
        if body.is_some() {
            req = req.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| http(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| http(e.to_string()))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| http(e.to_string()))?
            .to_bytes();
        drop(sender);
        let _ = conn.await;
        Ok((status, body))
    }

    /// GETs `path` and decodes a 2xx JSON body; other statuses become [`ClientError::Api`].
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let (status, body) = self.request(Method::GET, path).await?;
        decode(path, status, &body)
    }

    /// `GET /v1/node`.
    pub async fn node(&self) -> Result<NodeSample, ClientError> {
        self.get("/v1/node").await
    }

    /// `GET /v1/workloads[?kind=]`.
    pub async fn workloads(&self, kind: Option<WorkloadKind>) -> Result<WorkloadList, ClientError> {
        match kind {
            None => self.get("/v1/workloads").await,
            Some(k) => {
                let k = serde_json::to_value(k)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                self.get(&format!("/v1/workloads?kind={k}")).await
            }
        }
    }

    /// `GET /v1/workloads/{id}`.
    pub async fn workload(&self, id: &str) -> Result<Workload, ClientError> {
        self.get(&format!("/v1/workloads/{}", encode_id(id))).await
    }

    /// `GET /v1/capabilities`.
    pub async fn capabilities(&self) -> Result<Capabilities, ClientError> {
        self.get("/v1/capabilities").await
    }

    /// `POST /v1/iocost/calibrate`: the data directory's disk measured again.
    pub async fn calibrate_io(&self) -> Result<crate::model::caps::IoCostCaps, ClientError> {
        self.send(Method::POST, "/v1/iocost/calibrate", None).await
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.get("/healthz").await
    }

    /// `GET /v1/openapi.json`.
    pub async fn openapi(&self) -> Result<serde_json::Value, ClientError> {
        self.get("/v1/openapi.json").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_encoded() {
        assert_eq!(encode_id("managed/web"), "managed/web");
        assert_eq!(encode_id("managed/a b?"), "managed/a%20b%3F");
    }
}
