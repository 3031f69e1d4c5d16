//! A role bound to a principal, everywhere or within one tenant.

use super::role::Role;
use crate::field::FieldError;
use serde::{Deserialize, Serialize};

/// `principal` holds `role` in `tenant` (every tenant when `None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RoleBinding {
    /// Unique name.
    pub name: String,
    /// `user:alice`, `uid:1001`, `node:n2`, `token:<id>` or `root`.
    pub principal: String,
    /// The role.
    pub role: Role,
    /// The tenant it holds in; everywhere when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// True for `root`, `user:<name>`, `uid:<n>`, `node:<name>`, `token:<id>`.
pub fn principal_ok(p: &str) -> bool {
    let kinds = ["user:", "uid:", "node:", "token:"];
    p == "root"
        || kinds.iter().any(|k| {
            p.strip_prefix(k)
                .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace))
        })
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

impl RoleBinding {
    /// Field errors (`name`, `principal`, `tenant`, `role`).
    pub fn validate(&self) -> Vec<FieldError> {
        let mut e = Vec::new();
        if !name_ok(&self.name) {
            e.push(FieldError::new(
                "name",
                format!(
                    "{:?}: lowercase letters, digits and '-', 1 to 63 characters",
                    self.name
                ),
            ));
        }
        let p = &self.principal;
        if !principal_ok(p) {
            e.push(FieldError::new(
                "principal",
                format!("{p:?}: expected root, user:<name>, uid:<n>, node:<name> or token:<id>"),
            ));
        }
        if let Some(t) = &self.tenant {
            if !name_ok(t) {
                e.push(FieldError::new(
                    "tenant",
                    format!("{t:?}: not a tenant name"),
                ));
            }
            if self.role == Role::PlatformAdmin {
                e.push(FieldError::new(
                    "role",
                    "PlatformAdmin holds everywhere: bind it without a tenant",
                ));
            }
        } else if self.role == Role::TenantAdmin {
            e.push(FieldError::new(
                "tenant",
                "TenantAdmin holds within one tenant: name it",
            ));
        }
        e
    }
}
