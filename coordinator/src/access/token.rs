//! Bearer tokens for automation (seed 000 §10.3): issued by a Platform
//! Admin for a principal, kept only as a SHA-256 hash, with an expiry and
//! revocation.

use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};

/// A token as the replicated state keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiToken {
    /// Public id (the part before the secret).
    pub id: String,
    /// What it acts as (`user:ci`).
    pub principal: String,
    /// SHA-256 (hex) of the secret.
    pub sha256: String,
    /// When it was issued.
    pub issued: Timestamp,
    /// When it stops working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Timestamp>,
    /// When it was revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<Timestamp>,
}

/// A token as the API lists it (no hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    /// Id.
    pub id: String,
    /// Principal.
    pub principal: String,
    /// Issued.
    pub issued: Timestamp,
    /// Expiry.
    pub expires: Option<Timestamp>,
    /// Revocation.
    pub revoked: Option<Timestamp>,
}

impl From<&ApiToken> for TokenView {
    fn from(t: &ApiToken) -> Self {
        Self {
            id: t.id.clone(),
            principal: t.principal.clone(),
            issued: t.issued,
            expires: t.expires,
            revoked: t.revoked,
        }
    }
}
