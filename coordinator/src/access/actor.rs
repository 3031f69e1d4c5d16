//! Who is asking, as the agent that received the request saw it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How the caller reached the control plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Source {
    /// The local API socket of `node`; the kernel told the uid (`SO_PEERCRED`).
    Socket {
        /// The agent's node.
        node: String,
        /// The caller's uid.
        uid: u32,
    },
    /// A bearer token presented on `node`'s socket.
    Token {
        /// The agent's node.
        node: String,
        /// Token id.
        id: String,
        /// SHA-256 (hex) of the secret presented; compared with the
        /// replicated hash, never stored.
        sha256: String,
    },
    /// A node agent over the mesh (its certificate's identity).
    Node {
        /// The node.
        node: String,
    },
}

/// A caller: who it says it is, and how it came.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// The principal (`root`, `user:alice`, `node:n2`; for a token, what
    /// the token resolves to is used instead).
    pub principal: String,
    /// How it came.
    pub source: Source,
}

impl Actor {
    /// A local socket caller: `root` for uid 0, else `user:<name>`.
    pub fn socket(node: &str, uid: u32, user: Option<&str>) -> Self {
        let principal = match (uid, user) {
            (0, _) => "root".to_string(),
            (_, Some(u)) => format!("user:{u}"),
            (_, None) => format!("uid:{uid}"),
        };
        Self {
            principal,
            source: Source::Socket {
                node: node.into(),
                uid,
            },
        }
    }

    /// A node agent over the mesh.
    pub fn node(node: &str) -> Self {
        Self {
            principal: format!("node:{node}"),
            source: Source::Node { node: node.into() },
        }
    }

    /// A short description of the source (`socket uid 1001 on n1`).
    pub fn source_text(&self) -> String {
        match &self.source {
            Source::Socket { node, uid } => format!("socket uid {uid} on {node}"),
            Source::Token { node, id, .. } => format!("token {id} on {node}"),
            Source::Node { node } => format!("node {node} over the mesh"),
        }
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.principal, self.source_text())
    }
}
