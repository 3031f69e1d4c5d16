//! The on-disk shape of each kind: `apiVersion`, `kind`, `metadata`, `spec`,
//! and its conversion to the model.

use crate::model::application::{Application, ApplicationSpec};
use crate::model::config::Config;
use crate::model::node::{ExecutionNode, NodeCapacity};
use crate::model::policy::{Policy, PolicyRules, PolicyScope};
use crate::model::pool::{LabelSelector, ResourcePool};
use crate::model::ratio::Ratio;
use crate::model::runtime::{OsType, RuntimeType};
use crate::model::secret::{Secret, SecretValue};
use crate::model::tenant::{Tenant, TenantQuota};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The only API version understood.
pub const API_VERSION: &str = "daros.io/v1";

/// A document of any kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Envelope<M, S> {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Document kind.
    pub kind: String,
    /// Name and labels.
    pub metadata: M,
    /// Kind-specific content.
    pub spec: S,
}

/// Metadata of an Application.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppMetadata {
    /// Application name.
    pub name: String,
    /// Owning tenant.
    pub tenant: String,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// Metadata of the other kinds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// Object name.
    pub name: String,
    /// Labels (for nodes: what pools select on).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// `spec` of a Tenant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantSpec {
    /// Hard limits.
    #[serde(default)]
    pub quota: TenantQuota,
    /// Pools it may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// Tenant-scope policy rules.
    #[serde(default)]
    pub policy: PolicyRules,
    /// Kubernetes namespaces it owns (default: its name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

/// Scope level named in a Policy document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScopeLevel {
    /// Everything.
    Global,
    /// One tenant (`tenant` required).
    Tenant,
    /// One application (`tenant` and `application` required).
    Application,
}

/// `spec` of a Policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicySpec {
    /// Scope level.
    pub scope: ScopeLevel,
    /// Tenant for Tenant and Application scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Application for Application scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    /// The rules.
    pub rules: PolicyRules,
}

/// `spec` of a ResourcePool.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// Which nodes belong to the pool.
    #[serde(default)]
    pub selector: LabelSelector,
}

/// `spec` of a Node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSpec {
    /// Allocatable capacity.
    pub capacity: NodeCapacity,
    /// Operating system.
    #[serde(default)]
    pub os: OsType,
    /// Runtime types.
    pub runtimes: BTreeSet<RuntimeType>,
    /// Failure domains by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_domains: BTreeMap<String, String>,
    /// Cost per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<Ratio>,
    /// Takes new workloads (default true).
    #[serde(default = "default_true")]
    pub schedulable: bool,
}

fn default_true() -> bool {
    true
}

/// `spec` of a Config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    /// Values by key.
    pub data: BTreeMap<String, String>,
}

/// `spec` of a Secret: plain values as the operator writes them (a server
/// agent seals them before they are replicated), or `{sealed: ...}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    /// Values by key.
    pub data: BTreeMap<String, SecretValue>,
}

/// Config document (metadata names the tenant, as an Application's).
pub type ConfigDoc = Envelope<AppMetadata, ConfigSpec>;
/// Secret document.
pub type SecretDoc = Envelope<AppMetadata, SecretSpec>;

impl ConfigDoc {
    /// The model object.
    pub fn into_model(self) -> Config {
        Config {
            name: self.metadata.name,
            tenant: self.metadata.tenant,
            data: self.spec.data,
        }
    }
}

impl SecretDoc {
    /// The model object.
    pub fn into_model(self) -> Secret {
        Secret {
            name: self.metadata.name,
            tenant: self.metadata.tenant,
            data: self.spec.data,
        }
    }
}

/// Application document.
pub type ApplicationDoc = Envelope<AppMetadata, ApplicationSpec>;
/// Tenant document.
pub type TenantDoc = Envelope<Metadata, TenantSpec>;
/// Policy document.
pub type PolicyDoc = Envelope<Metadata, PolicySpec>;
/// ResourcePool document.
pub type PoolDoc = Envelope<Metadata, PoolSpec>;
/// Node document.
pub type NodeDoc = Envelope<Metadata, NodeSpec>;

impl ApplicationDoc {
    /// The model object.
    pub fn into_model(self) -> Application {
        Application {
            name: self.metadata.name,
            tenant: self.metadata.tenant,
            labels: self.metadata.labels,
            spec: self.spec,
        }
    }

    /// The document of an application.
    pub fn from_model(a: &Application) -> Self {
        Envelope {
            api_version: API_VERSION.into(),
            kind: "Application".into(),
            metadata: AppMetadata {
                name: a.name.clone(),
                tenant: a.tenant.clone(),
                labels: a.labels.clone(),
            },
            spec: a.spec.clone(),
        }
    }
}

impl TenantDoc {
    /// The model object.
    pub fn into_model(self) -> Tenant {
        Tenant {
            name: self.metadata.name,
            quota: self.spec.quota,
            pools: self.spec.pools,
            policy: self.spec.policy,
            namespaces: self.spec.namespaces,
        }
    }
}

impl PolicyDoc {
    /// The model object (call after validation: missing targets become empty
    /// names).
    pub fn into_model(self) -> Policy {
        let tenant = self.spec.tenant.unwrap_or_default();
        let scope = match self.spec.scope {
            ScopeLevel::Global => PolicyScope::Global,
            ScopeLevel::Tenant => PolicyScope::Tenant { tenant },
            ScopeLevel::Application => PolicyScope::Application {
                tenant,
                application: self.spec.application.unwrap_or_default(),
            },
        };
        Policy {
            name: self.metadata.name,
            scope,
            rules: self.spec.rules,
        }
    }
}

impl PoolDoc {
    /// The model object.
    pub fn into_model(self) -> ResourcePool {
        ResourcePool {
            name: self.metadata.name,
            selector: self.spec.selector,
        }
    }
}

impl NodeDoc {
    /// The model object.
    pub fn into_model(self) -> ExecutionNode {
        ExecutionNode {
            name: self.metadata.name,
            capacity: self.spec.capacity,
            os: self.spec.os,
            runtimes: self.spec.runtimes,
            labels: self.metadata.labels,
            failure_domains: self.spec.failure_domains,
            cost_per_hour: self.spec.cost_per_hour,
            schedulable: self.spec.schedulable,
        }
    }
}
