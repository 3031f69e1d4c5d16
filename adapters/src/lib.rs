//! D-AROS runtime adapters (seed 000 §4.5): the bridge between the
//! coordinator's runtime-neutral workloads and the things that really run
//! them.
//!
//! - [`adapter`]: the [`RuntimeAdapter`] trait (create, start, stop,
//!   destroy, inspect, capabilities, logs, events);
//! - [`instance`], [`placement`], [`status`], [`event`], [`error`]: the
//!   values that cross it;
//! - [`process`]: bare-metal processes, each watched by a detached
//!   `daros-shim` so that workloads survive a restart of the agent;
//! - [`kubernetes`]: one Pod per workload instance through kube-rs, and the
//!   kubelet cgroup layouts the node agent needs to find a pod's cgroup;
//! - [`logs`], [`health`], [`restart`]: log files, health checks and the
//!   restart decision shared by the runtimes;
//! - [`any`]: the closed set of adapters, routed by runtime type or id.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod adapter;
pub mod any;
pub mod error;
pub mod event;
pub mod health;
pub mod instance;
pub mod kubernetes;
pub mod logs;
pub mod placement;
pub mod process;
pub mod restart;
pub mod stats;
pub mod status;
mod sys;
pub mod time;

pub use adapter::{DestroyOptions, LogQuery, RuntimeAdapter, RuntimeCapabilities};
pub use any::{AdapterSet, AnyAdapter};
pub use error::AdapterError;
pub use event::{EventStream, RuntimeEvent, RuntimeEventKind};
pub use instance::{AdapterKind, InstanceKey, RuntimeId, VolumeMount, WorkloadInstanceSpec};
pub use placement::{CgroupPlacement, Placement};
pub use status::{ExitStatus, InstanceHealth, InstanceState, RuntimeDetail, WorkloadStatus};
