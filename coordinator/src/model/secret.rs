//! Secret (seed 002): named, tenant-scoped credentials. The replicated state
//! holds only sealed values: the server agent that takes a Secret document
//! seals every value (XChaCha20-Poly1305 under a key only server agents
//! hold) before the command reaches raft, and the coordinator refuses a
//! value that is not sealed. Reads show keys, never values.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Text that must not be printed: `Debug` and `Display` show `<secret>`.
/// Serializes as the text itself (it crosses mutual TLS to the node that
/// runs the workload, and nowhere else).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretText(String);

impl SecretText {
    /// Wraps `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The text, for the one place that needs it (the runtime).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

impl fmt::Display for SecretText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

/// A sealed value: `v1:` and the hex of nonce, ciphertext and tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// The sealed bytes in text form.
    pub sealed: String,
}

/// One value of a Secret: plain as written in a document, sealed once a
/// server agent took it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SecretValue {
    /// Sealed by a server agent: the only form the coordinator keeps.
    Sealed(Sealed),
    /// As written by the operator; never replicated.
    Plain(SecretText),
}

/// A tenant's named secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Secret {
    /// Name, unique within the tenant.
    pub name: String,
    /// Owning tenant.
    pub tenant: String,
    /// Values by key (keys are environment variable names).
    pub data: BTreeMap<String, SecretValue>,
}

impl Secret {
    /// The additional data a value is sealed with: a sealed value opens only
    /// as the value of the same key of the same secret of the same tenant.
    pub fn aad(tenant: &str, name: &str, key: &str) -> String {
        format!("daros secret {tenant}/{name}/{key}")
    }

    /// Keys whose values are still plain.
    pub fn plain_keys(&self) -> Vec<&str> {
        self.data
            .iter()
            .filter(|(_, v)| matches!(v, SecretValue::Plain(_)))
            .map(|(k, _)| k.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_values_never_print_and_sealed_ones_read_back() {
        let s: Secret = serde_json::from_str(
            r#"{"name":"db","tenant":"acme","data":{"PASSWORD":"hunter2","TOKEN":{"sealed":"v1:00"}}}"#,
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("hunter2"));
        assert_eq!(s.plain_keys(), ["PASSWORD"]);
        assert!(matches!(s.data["TOKEN"], SecretValue::Sealed(_)));
    }
}
