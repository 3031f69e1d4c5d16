//! What a request needs: a permission in a scope, or (for what node agents
//! send) to be that node.

use super::role::Permission;
use crate::spec::Document;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a permission must hold.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    /// Everywhere (a binding without a tenant).
    Global,
    /// In one tenant (a binding for it, or a global one).
    Tenant(String),
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Global => f.write_str("cluster-wide"),
            Scope::Tenant(t) => write!(f, "in tenant {t}"),
        }
    }
}

/// One requirement of a request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Need {
    /// `permission` in `scope`.
    Permission {
        /// What.
        permission: Permission,
        /// Where.
        scope: Scope,
    },
    /// To be node `0`'s agent (reports, registration, pressure), or a
    /// Platform Admin.
    OwnNode(String),
}

impl Need {
    /// `p` cluster-wide.
    pub fn global(p: Permission) -> Self {
        Need::Permission {
            permission: p,
            scope: Scope::Global,
        }
    }

    /// `p` in `tenant`.
    pub fn tenant(p: Permission, tenant: &str) -> Self {
        Need::Permission {
            permission: p,
            scope: Scope::Tenant(tenant.to_string()),
        }
    }

    /// What applying `doc` needs: an application is a developer's, a
    /// tenant-scoped policy its tenant admin's; tenants, global policies,
    /// pools and nodes are the platform's.
    pub fn for_document(doc: &Document) -> Self {
        use crate::model::policy::PolicyScope;
        match doc {
            Document::Application(a) => Need::tenant(Permission::Develop, &a.key().tenant),
            Document::Config(c) => Need::tenant(Permission::Develop, &c.tenant),
            Document::Secret(s) => Need::tenant(Permission::Develop, &s.tenant),
            Document::Policy(p) => match &p.scope {
                PolicyScope::Global => Need::global(Permission::PlatformAdmin),
                PolicyScope::Tenant { tenant } | PolicyScope::Application { tenant, .. } => {
                    Need::tenant(Permission::TenantAdmin, tenant)
                }
            },
            Document::Tenant(_) | Document::ResourcePool(_) | Document::Node(_) => {
                Need::global(Permission::PlatformAdmin)
            }
        }
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Permission { permission, scope } => write!(f, "{permission} {scope}"),
            Need::OwnNode(n) => write!(f, "to be node {n}'s agent"),
        }
    }
}
