//! The node side of the application runtime: the executor that converges this
//! node on the leader's desired work ([`crate::control::work`]) through the
//! runtime adapters, each instance in its own managed cgroup under its QoS
//! class; re-adoption after an agent restart; workload logs.
//!
//! Restarts have one owner, the coordinator: the adapters run every instance
//! with `restart: Never` and the executor starts a new run only for a higher
//! attempt.

pub mod adapter_metrics;
pub mod cgroups;
pub mod executor;
pub mod kubernetes;
pub mod logs;
pub mod observe;
pub mod store;
pub mod target;
pub mod volumes;

pub use cgroups::InstanceCgroups;
pub use executor::{Executor, RuntimeSettings};
pub use kubernetes::KubernetesSettings;
pub use logs::{InstanceLogLine, LogsError};
pub use target::{LogDefaults, Subject, Target};
