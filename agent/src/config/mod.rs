//! Agent configuration: a TOML file (`/etc/daros/agent.toml` or `--config`),
//! `DAROS_<SECTION>_<KEY>` environment variables and flags, in increasing
//! precedence over built-in defaults. Unknown keys and bad values are refused
//! with the key path and the reason.

pub mod duration;
pub mod load;
pub mod mesh;
pub mod net;
pub mod qos;
pub mod runtime;
pub mod sections;
pub mod validate;

pub use duration::HumanDuration;
pub use load::{DEFAULT_CONFIG_FILE, Overrides, load};
pub use mesh::{MeshRole, MeshSection};
pub use net::NetSection;
pub use qos::QosSection;
pub use runtime::RuntimeSection;
pub use sections::{
    AgentSection, ApiSection, CgroupSection, Config, DiscoverySection, GpuSection, LogFormat,
    MetricsSection, SensingSection,
};

/// A configuration error, naming the key and the reason.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// The explicitly requested file cannot be read.
    #[error("config file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why it cannot be read.
        reason: String,
    },
    /// The file is not valid TOML.
    #[error("config file {path}: invalid TOML: {reason}")]
    Syntax {
        /// The file.
        path: String,
        /// Parser message with line and column.
        reason: String,
    },
    /// A key is unknown or its value is refused.
    #[error("{key}: {reason}{origin}")]
    Invalid {
        /// Dotted key path (`sensing.interval`).
        key: String,
        /// What is wrong.
        reason: String,
        /// Where the value came from (` (from env DAROS_SENSING_INTERVAL)`), or empty.
        origin: String,
    },
}

impl ConfigError {
    /// An invalid value at `key`.
    pub fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            reason: reason.into(),
            origin: String::new(),
        }
    }

    /// The key path, for `Invalid` errors.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}
