//! Config (seed 002 "配置"): named, tenant-scoped key-values that workloads
//! take as environment through the `env` trait. Plain text: for credentials
//! use a [`super::secret::Secret`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A tenant's named configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Name, unique within the tenant.
    pub name: String,
    /// Owning tenant.
    pub tenant: String,
    /// Values by key (keys are environment variable names).
    pub data: BTreeMap<String, String>,
}
