//! Tenant (seed 000 §7.2): the first boundary of arbitration and quota.

use super::policy::PolicyRules;
use super::resources::{Bytes, GpuCount, MilliCpu};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A tenant's share of one resource pool (§4.4.1): what its admitted
/// applications of that pool may request together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolQuota {
    /// Total cpu requests in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<MilliCpu>,
    /// Total memory requests in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    /// Total GPUs in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuCount>,
}

/// Hard limits of a tenant (§7.3.1): an application that would exceed them
/// is not admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantQuota {
    /// Total cpu requests of admitted applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<MilliCpu>,
    /// Total memory requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    /// Total GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuCount>,
    /// Most applications admitted at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_applications: Option<u32>,
    /// Most workload instances (replicas) placed at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_workloads: Option<u32>,
    /// Highest application priority allowed (default 900: priorities above
    /// are the platform's to grant, so a tenant cannot put itself above every
    /// other by default).
    #[serde(default = "default_ceiling")]
    pub priority_ceiling: u32,
    /// Limits per resource pool, beside the tenant-wide ones
    /// (`pools: {gpu: {gpu: 4}}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, PoolQuota>,
}

/// The default [`TenantQuota::priority_ceiling`].
pub const DEFAULT_PRIORITY_CEILING: u32 = 900;

fn default_ceiling() -> u32 {
    DEFAULT_PRIORITY_CEILING
}

impl Default for TenantQuota {
    fn default() -> Self {
        Self {
            cpu: None,
            memory: None,
            gpu: None,
            max_applications: None,
            max_concurrent_workloads: None,
            priority_ceiling: default_ceiling(),
            pools: BTreeMap::new(),
        }
    }
}

/// A tenant: quota, accessible pools and tenant-scope policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Tenant {
    /// Tenant name.
    pub name: String,
    /// Hard limits.
    #[serde(default)]
    pub quota: TenantQuota,
    /// Pools its applications may use; empty means only `default`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// Tenant-scope policy rules.
    #[serde(default)]
    pub policy: PolicyRules,
    /// Kubernetes namespaces it owns (default: one named like the tenant);
    /// its pods run only there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

impl Tenant {
    /// The Kubernetes namespaces it owns: its own list, or its name.
    pub fn owned_namespaces(&self) -> Vec<String> {
        if self.namespaces.is_empty() {
            vec![self.name.clone()]
        } else {
            self.namespaces.clone()
        }
    }

    /// A tenant with no limits beyond the defaults.
    pub fn unlimited(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            quota: TenantQuota::default(),
            pools: Vec::new(),
            policy: PolicyRules::default(),
            namespaces: Vec::new(),
        }
    }

    /// True when the tenant may use `pool`.
    pub fn may_use_pool(&self, pool: &str) -> bool {
        if self.pools.is_empty() {
            pool == super::pool::DEFAULT_POOL
        } else {
            self.pools.iter().any(|p| p == pool)
        }
    }
}
