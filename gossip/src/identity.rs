//! Who a node is: its id, its role, and the identity proven by its certificate.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Errors about node ids and roles.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// A node id must be 1..=63 characters of `[a-z0-9-]`, not starting or ending with `-`.
    #[error(
        "invalid node id {0:?}: use 1 to 63 characters of a-z, 0-9 and '-', not starting or ending with '-'"
    )]
    InvalidNodeId(String),
    /// A role is `server` or `client`.
    #[error("invalid role {0:?}: expected \"server\" or \"client\"")]
    InvalidRole(String),
}

/// A node id: a DNS label, so it can be the TLS server name and a SAN entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeId(String);

impl NodeId {
    /// Validates and wraps a node id.
    pub fn new(id: impl Into<String>) -> Result<Self, IdentityError> {
        let id = id.into();
        let ok = !id.is_empty()
            && id.len() <= 63
            && !id.starts_with('-')
            && !id.ends_with('-')
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(Self(id))
        } else {
            Err(IdentityError::InvalidNodeId(id))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The numeric id used inside raft: FNV-1a 64 of the name, so every node derives the same
    /// number without coordination. Collisions are refused when a server is added.
    pub fn raft_id(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.0.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for NodeId {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for NodeId {
    type Error = IdentityError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<NodeId> for String {
    fn from(id: NodeId) -> Self {
        id.0
    }
}

/// What a node may do in the mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Holds the CA key, votes in raft, may become coordinator and command agents.
    Server,
    /// A plain agent: gossips, serves RPC, obeys fenced commands.
    Client,
}

impl Role {
    /// The role as the lower-case word used in certificates and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "server" => Ok(Role::Server),
            "client" => Ok(Role::Client),
            other => Err(IdentityError::InvalidRole(other.to_string())),
        }
    }
}

/// The identity of an RPC peer, taken from its verified certificate (never from message fields).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PeerIdentity {
    /// Node id from the certificate SAN.
    pub node_id: NodeId,
    /// Role from the certificate SAN.
    pub role: Role,
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.node_id, self.role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_dns_labels() {
        assert!(NodeId::new("s1").is_ok());
        assert!(NodeId::new("node-42").is_ok());
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"x".repeat(64)] {
            assert_eq!(
                NodeId::new(bad),
                Err(IdentityError::InvalidNodeId(bad.to_string()))
            );
        }
    }

    #[test]
    fn raft_ids_are_stable_and_distinct() {
        let a = NodeId::new("s1").unwrap();
        let b = NodeId::new("s2").unwrap();
        assert_eq!(a.raft_id(), NodeId::new("s1").unwrap().raft_id());
        assert_ne!(a.raft_id(), b.raft_id());
    }

    #[test]
    fn roles_parse() {
        assert_eq!("server".parse::<Role>(), Ok(Role::Server));
        assert!("admin".parse::<Role>().is_err());
    }
}
