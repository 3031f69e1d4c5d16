//! The one check: resolve who is asking (a token to its principal), then
//! find a binding that grants what the request needs.

use super::actor::{Actor, Source};
use super::binding::RoleBinding;
use super::need::{Need, Scope};
use super::role::{Permission, Role};
use super::token::ApiToken;
use crate::model::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Why a request was refused: who, what, and what is missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("forbidden: {principal} ({source_text}) may not {verb}: needs {need}; {missing}")]
pub struct Denied {
    /// Who asked (after a token resolved).
    pub principal: String,
    /// How it came.
    pub source_text: String,
    /// What it asked (`Operate shop-team/shop`).
    pub verb: String,
    /// What that needs.
    pub need: String,
    /// Which binding is missing.
    pub missing: String,
}

/// Bindings and tokens (replicated).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessState {
    /// Role bindings by name.
    pub bindings: BTreeMap<String, RoleBinding>,
    /// Tokens by id.
    pub tokens: BTreeMap<String, ApiToken>,
}

impl AccessState {
    /// The principal `actor` acts as at `now`: a token's own principal once
    /// its secret, expiry and revocation check out.
    pub fn resolve(&self, actor: &Actor, now: Timestamp) -> Result<String, String> {
        let Source::Token { id, sha256, .. } = &actor.source else {
            return Ok(actor.principal.clone());
        };
        let t = self
            .tokens
            .get(id)
            .filter(|t| t.sha256 == *sha256)
            .ok_or_else(|| format!("token {id} is not valid"))?;
        if let Some(r) = t.revoked {
            return Err(format!("token {id} was revoked at {}", r.0));
        }
        if t.expires.is_some_and(|e| e <= now) {
            return Err(format!("token {id} expired"));
        }
        Ok(t.principal.clone())
    }

    /// The roles `principal` holds: (role, tenant or everywhere). `root` is
    /// a Platform Admin by default (the node's root owns the node anyway).
    pub fn roles_of(&self, principal: &str) -> Vec<(Role, Option<String>)> {
        let mut r: Vec<(Role, Option<String>)> = self
            .bindings
            .values()
            .filter(|b| b.principal == principal)
            .map(|b| (b.role, b.tenant.clone()))
            .collect();
        if principal == "root" {
            r.push((Role::PlatformAdmin, None));
        }
        r
    }

    /// True when `principal` may do what `need` says.
    pub fn allows(&self, principal: &str, need: &Need) -> bool {
        let roles = self.roles_of(principal);
        match need {
            Need::OwnNode(n) => {
                principal == format!("node:{n}")
                    || roles
                        .iter()
                        .any(|(r, t)| t.is_none() && r.grants(Permission::PlatformAdmin))
            }
            Need::Permission { permission, scope } => roles.iter().any(|(r, t)| {
                r.grants(*permission)
                    && match (scope, t) {
                        (_, None) => true,
                        (Scope::Tenant(want), Some(have)) => want == have,
                        (Scope::Global, Some(_)) => false,
                    }
            }),
        }
    }

    /// The tenants `principal` may read: `None` for every one.
    pub fn readable_tenants(&self, principal: &str) -> Option<BTreeSet<String>> {
        let roles = self.roles_of(principal);
        if roles.iter().any(|(_, t)| t.is_none()) {
            return None;
        }
        Some(roles.into_iter().filter_map(|(_, t)| t).collect())
    }

    /// Checks `actor` against every need of a request described as `verb`.
    pub fn check(
        &self,
        actor: &Actor,
        verb: &str,
        needs: &[Need],
        now: Timestamp,
    ) -> Result<String, Denied> {
        let denied = |principal: String, need: String, missing: String| Denied {
            principal,
            source_text: actor.source_text(),
            verb: verb.to_string(),
            need,
            missing,
        };
        let principal = self
            .resolve(actor, now)
            .map_err(|why| denied(actor.principal.clone(), "a valid identity".into(), why))?;
        for n in needs {
            if !self.allows(&principal, n) {
                let have = self.roles_of(&principal);
                let missing = match n {
                    Need::OwnNode(_) => {
                        "only that node's agent or a Platform Admin may".to_string()
                    }
                    Need::Permission { permission, scope } => {
                        let roles: Vec<String> = Role::ALL
                            .iter()
                            .filter(|r| r.grants(*permission))
                            .map(ToString::to_string)
                            .collect();
                        let held = if have.is_empty() {
                            "it holds no role".to_string()
                        } else {
                            format!(
                                "it holds {}",
                                have.iter()
                                    .map(|(r, t)| match t {
                                        Some(t) => format!("{r} in {t}"),
                                        None => format!("{r} everywhere"),
                                    })
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        };
                        format!(
                            "no binding gives it {} {scope} ({held}; a binding of {} would)",
                            permission,
                            roles.join(" or ")
                        )
                    }
                };
                return Err(denied(principal, n.to_string(), missing));
            }
        }
        Ok(principal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(name: &str, principal: &str, role: Role, tenant: Option<&str>) -> RoleBinding {
        RoleBinding {
            name: name.into(),
            principal: principal.into(),
            role,
            tenant: tenant.map(Into::into),
        }
    }

    #[test]
    fn roles_grant_their_column_in_their_tenant() {
        let mut s = AccessState::default();
        for b in [
            bind("a", "user:ta", Role::TenantAdmin, Some("a")),
            bind("b", "user:dev", Role::Developer, Some("a")),
            bind("c", "user:op", Role::Operator, Some("a")),
            bind("d", "user:view", Role::Viewer, None),
        ] {
            s.bindings.insert(b.name.clone(), b);
        }
        let ok = |p: &str, perm: Permission, t: &str| s.allows(p, &Need::tenant(perm, t));
        assert!(ok("user:ta", Permission::TenantAdmin, "a"));
        assert!(
            !ok("user:ta", Permission::Read, "b"),
            "tenant A's admin reads nothing of B"
        );
        assert!(ok("user:dev", Permission::Develop, "a"));
        assert!(!ok("user:dev", Permission::Operate, "a"));
        assert!(!ok("user:dev", Permission::TenantAdmin, "a"));
        assert!(ok("user:op", Permission::Operate, "a"));
        assert!(!ok("user:op", Permission::Develop, "a"));
        assert!(ok("user:view", Permission::Read, "b"));
        assert!(!ok("user:view", Permission::Operate, "b"));
        assert!(s.allows("root", &Need::global(Permission::PlatformAdmin)));
        assert!(!s.allows("user:ta", &Need::global(Permission::PlatformAdmin)));
        assert!(s.allows("node:n1", &Need::OwnNode("n1".into())));
        assert!(!s.allows("node:n1", &Need::OwnNode("n2".into())));
        assert_eq!(
            s.readable_tenants("user:ta"),
            Some(BTreeSet::from(["a".to_string()]))
        );
        assert_eq!(s.readable_tenants("user:view"), None);
        let e = s
            .check(
                &Actor::socket("n1", 1001, Some("dev")),
                "Operate a/web",
                &[Need::tenant(Permission::Operate, "a")],
                Timestamp(0),
            )
            .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("user:dev") && m.contains("operate in tenant a"),
            "{m}"
        );
        assert!(m.contains("Developer in a"), "{m}");
    }

    #[test]
    fn tokens_resolve_until_expired_or_revoked() {
        let mut s = AccessState::default();
        s.tokens.insert(
            "t1".into(),
            ApiToken {
                id: "t1".into(),
                principal: "user:ci".into(),
                sha256: "ab".into(),
                issued: Timestamp(0),
                expires: Some(Timestamp(100)),
                revoked: None,
            },
        );
        let a = |h: &str| Actor {
            principal: "token".into(),
            source: Source::Token {
                node: "n1".into(),
                id: "t1".into(),
                sha256: h.into(),
            },
        };
        assert_eq!(s.resolve(&a("ab"), Timestamp(50)).unwrap(), "user:ci");
        assert!(s.resolve(&a("cd"), Timestamp(50)).is_err(), "wrong secret");
        assert!(
            s.resolve(&a("ab"), Timestamp(100))
                .unwrap_err()
                .contains("expired")
        );
        s.tokens.get_mut("t1").unwrap().revoked = Some(Timestamp(10));
        assert!(
            s.resolve(&a("ab"), Timestamp(50))
                .unwrap_err()
                .contains("revoked")
        );
    }
}
