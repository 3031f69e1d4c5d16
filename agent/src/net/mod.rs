//! The agent side of the eBPF datapath (`daros-ebpf`, `docs/ebpf.md`).
//!
//! At start darosd opens the pinned datapath (mounting bpffs when needed,
//! reopening the pins of an earlier run with their counters and caps, or
//! loading fresh) — [`service::NetService::open`]. Then:
//!
//! - [`reconcile`]: attachments and caps follow the workloads: every managed
//!   workload and every discovered cgroup an operator put under a QoS class is
//!   attached (its cgroup2 directory; on hybrid hosts the one under
//!   `/sys/fs/cgroup/unified`), registered with the network limits of its
//!   class, its sub-cgroups counted with it; removed ones are unregistered and
//!   detached. Other discovered cgroups are only observed.
//! - [`floor`]: the floor loop (10 ms), fed the class and floors of every
//!   counted workload, caps BestEffort then Burstable traffic while floors need
//!   the bandwidth.
//! - [`events`]: throttle and drop events from the ring buffer, per workload.
//! - [`source`]: each sampling tick, per-workload network and run-queue
//!   figures into the workload samples (API, metrics, `darosctl top`).
//! - [`metrics`]: the datapath's own metrics.
//!
//! A host without eBPF keeps working: every part says why it is unavailable
//! (capabilities, `/v1/net`, each workload's `unavailable`, logs).

pub mod events;
pub mod floor;
pub mod link;
pub mod metrics;
pub mod reconcile;
pub mod service;
pub mod source;
pub mod targets;

pub use service::{NetService, NetSettings};
