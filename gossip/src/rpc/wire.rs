//! Messages of the RPC protocol (inside frames).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::RpcError;
use crate::fence::FenceToken;

/// One call: a method name, an optional fence token, a JSON body. The caller's identity is never
/// a field: it comes from its certificate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    /// Method, e.g. `raft.append` or `agent.apply`.
    pub method: String,
    /// Coordinator position, required by fenced methods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<FenceToken>,
    /// Arguments.
    #[serde(default)]
    pub body: Value,
}

impl Request {
    /// A request without fence.
    pub fn new(method: impl Into<String>, body: Value) -> Self {
        Self {
            method: method.into(),
            fence: None,
            body,
        }
    }
}

/// What the server writes back: one `Ok`/`Err` for a unary call; `Item`s then `End` or `Err`
/// for a subscription.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Unary success.
    Ok {
        /// Result.
        body: Value,
    },
    /// Failure (unary or stream).
    Err {
        /// The error.
        error: RpcError,
    },
    /// One pushed item of a subscription.
    Item {
        /// Item.
        body: Value,
    },
    /// Normal end of a subscription.
    End,
}
