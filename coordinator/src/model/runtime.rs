//! What a workload needs from its execution environment (seed 000 §4.2.3) and
//! the opaque RuntimeSpec (§4.2.4) that only a runtime adapter reads.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Execution technology a workload runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeType {
    /// An OCI container.
    Container,
    /// A virtual machine.
    #[serde(alias = "virtual-machine")]
    Vm,
    /// A plain host process.
    Process,
}

impl RuntimeType {
    /// Every runtime type, in a fixed order.
    pub const ALL: [RuntimeType; 3] = [
        RuntimeType::Container,
        RuntimeType::Vm,
        RuntimeType::Process,
    ];

    /// Dense index (0..3) for per-runtime tables.
    pub const fn index(self) -> usize {
        match self {
            RuntimeType::Container => 0,
            RuntimeType::Vm => 1,
            RuntimeType::Process => 2,
        }
    }
}

impl fmt::Display for RuntimeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuntimeType::Container => "container",
            RuntimeType::Vm => "vm",
            RuntimeType::Process => "process",
        })
    }
}

/// Operating system a workload needs (and a node runs).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum OsType {
    /// Linux.
    #[default]
    Linux,
    /// Windows.
    Windows,
}

impl OsType {
    /// Dense index (0..2) for per-OS tables.
    pub const fn index(self) -> usize {
        match self {
            OsType::Linux => 0,
            OsType::Windows => 1,
        }
    }
}

impl fmt::Display for OsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OsType::Linux => "linux",
            OsType::Windows => "windows",
        })
    }
}

/// Runtime type and OS a workload requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeRequirement {
    /// Runtime type (`container`, `vm`, `process`).
    #[serde(rename = "type")]
    pub runtime_type: RuntimeType,
    /// Operating system (default `linux`).
    #[serde(default)]
    pub os: OsType,
}

impl fmt::Display for RuntimeRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.runtime_type, self.os)
    }
}

/// Runtime-specific description (a pod template, VM image, command line...)
/// carried verbatim to the runtime adapter. The coordinator never reads it.
/// Shared, because every start action carries a copy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RuntimeSpec(pub std::sync::Arc<serde_json::Value>);

impl RuntimeSpec {
    /// Wraps a JSON value.
    pub fn new(v: serde_json::Value) -> Self {
        Self(std::sync::Arc::new(v))
    }

    /// The JSON value.
    pub fn value(&self) -> &serde_json::Value {
        &self.0
    }

    /// The JSON value, for editing (copied first when shared).
    pub fn value_mut(&mut self) -> &mut serde_json::Value {
        std::sync::Arc::make_mut(&mut self.0)
    }

    /// True when no spec was given.
    pub fn is_null(&self) -> bool {
        self.0.is_null()
    }
}
