//! The roles of seed 000 §7.4 plus a read-only Viewer, and the permission
//! classes every request falls into.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a request does, from the least to the most powerful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Permission {
    /// Read status (applications, events, explain, what-if).
    Read,
    /// Run what exists: start, stop, scale, restore, retry, abort; logs.
    Operate,
    /// Create, update, roll back and delete applications.
    Develop,
    /// A tenant's own policies and members (its role bindings).
    TenantAdmin,
    /// Tenants, global policies, pools, nodes, tokens, the cluster itself.
    PlatformAdmin,
}

impl Permission {
    /// Every permission, in order.
    pub const ALL: [Permission; 5] = [
        Permission::Read,
        Permission::Operate,
        Permission::Develop,
        Permission::TenantAdmin,
        Permission::PlatformAdmin,
    ];

    /// The name used in messages and the API (`tenant-admin`).
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Operate => "operate",
            Permission::Develop => "develop",
            Permission::TenantAdmin => "tenant-admin",
            Permission::PlatformAdmin => "platform-admin",
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role a principal is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    /// Tenants, global policies, resource pools, nodes, tokens (everything,
    /// everywhere).
    PlatformAdmin,
    /// Within its tenant: quota is the platform's, but the tenant's policies,
    /// members and everything below.
    TenantAdmin,
    /// Creates, updates and deletes applications; reads status.
    Developer,
    /// Starts, stops and scales applications; reads status and logs.
    Operator,
    /// Reads status.
    Viewer,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 5] = [
        Role::PlatformAdmin,
        Role::TenantAdmin,
        Role::Developer,
        Role::Operator,
        Role::Viewer,
    ];

    /// True when the role grants `p` (the table in docs/security.md).
    pub fn grants(self, p: Permission) -> bool {
        use Permission as P;
        match self {
            Role::PlatformAdmin => true,
            Role::TenantAdmin => p != P::PlatformAdmin,
            Role::Developer => matches!(p, P::Read | P::Develop),
            Role::Operator => matches!(p, P::Read | P::Operate),
            Role::Viewer => p == P::Read,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
