//! D-AROS node agent library: everything `darosd` and `darosctl` do lives here;
//! the binaries only parse arguments, call [`daemon::run`] / [`cli::run`] and map
//! errors to exit codes.
#![warn(missing_docs)]

/// Local API: axum router over a unix socket, one module per resource, OpenAPI document.
pub mod api;
/// Host capability probe (cgroup mode and controllers, PSI, eBPF/BTF, bpffs, GPU, kernel).
pub mod caps;
/// cgroup layer: mode detection, v1/v2 backends, per-controller files, managed root.
pub mod cgroup;
/// `darosctl` subcommands and output formatting.
pub mod cli;
/// HTTP client for the agent socket (used by `darosctl` and tests).
pub mod client;
/// Configuration: TOML file, `DAROS_*` environment, flags, validation.
pub mod config;
/// The control plane: mesh, raft-replicated coordinator, leader dispatch, apps API.
pub mod control;
/// `darosd` main loop: startup, sampler thread, API and metrics servers, systemd notify.
pub mod daemon;
/// GPU sensing through NVML behind a trait, with process-to-workload attribution.
pub mod gpu;
/// Prometheus metrics encoded from the latest snapshot.
pub mod metrics;
/// API data types (node, workloads, capabilities, GPU, pressure).
pub mod model;
/// The eBPF datapath in darosd: attachments, caps and floors following the
/// workloads and classes; network and run-queue figures per workload.
pub mod net;
/// QoS enforcement: classes and floors → cgroup knobs, admission, protection loop.
pub mod qos;
/// The node executor: desired work → runtime adapters, per-instance QoS cgroups, logs.
pub mod runtime;
/// Sensing: node and workload counters, rates, discovery, the sampler thread.
pub mod sensing;
