//! RPC errors: what crosses the wire, and what a local call can fail with.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Machine-readable class of an RPC error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request does not decode or has bad fields.
    BadRequest,
    /// The method needs a client certificate and none was presented.
    Unauthenticated,
    /// The caller's role may not call this method.
    Forbidden,
    /// No handler for the method.
    UnknownMethod,
    /// A fenced command carries an older term than one already accepted.
    StaleTerm,
    /// A fenced method was called without a fence token.
    FenceRequired,
    /// This node is not the raft leader; `detail` may name the leader.
    NotLeader,
    /// The service cannot answer now (no leader, shutting down, no quorum).
    Unavailable,
    /// A frame exceeds the size limit.
    TooLarge,
    /// The peer speaks another wire version.
    UnsupportedVersion,
    /// The call did not complete in time.
    Timeout,
    /// The peer could not be reached; the request was not delivered.
    Unreachable,
    /// Connection or stream failure after the request may have been delivered.
    Transport,
    /// A bug or storage failure on the serving side.
    Internal,
    /// An error returned by an application handler.
    Application,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: [ErrorCode; 15] = [
        ErrorCode::BadRequest,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::UnknownMethod,
        ErrorCode::StaleTerm,
        ErrorCode::FenceRequired,
        ErrorCode::NotLeader,
        ErrorCode::Unavailable,
        ErrorCode::TooLarge,
        ErrorCode::UnsupportedVersion,
        ErrorCode::Timeout,
        ErrorCode::Unreachable,
        ErrorCode::Transport,
        ErrorCode::Internal,
        ErrorCode::Application,
    ];

    /// Its position in [`ErrorCode::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        f.write_str(&s)
    }
}

/// An RPC error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RpcError {
    /// Class.
    pub code: ErrorCode,
    /// Human-readable message.
    pub message: String,
    /// Structured detail (e.g. the leader for `not_leader`, the terms for `stale_term`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

impl RpcError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            detail: None,
        }
    }

    /// Adds structured detail.
    pub fn with_detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = Some(detail);
        self
    }

    /// `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    /// `internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// `transport`.
    pub fn transport(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Transport, message)
    }

    /// True for failures of the path rather than of the request.
    pub fn is_transport(&self) -> bool {
        matches!(
            self.code,
            ErrorCode::Transport | ErrorCode::Timeout | ErrorCode::Unreachable
        )
    }
}
