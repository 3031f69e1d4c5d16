//! Health checks of the coordinator's [`HealthCheck`] type, run by the
//! adapter against a running instance: exec (exit 0), http (GET answered
//! 2xx/3xx) and tcp (connection accepted), with initial delay, period,
//! timeout and failure threshold; an http or tcp check counts only when the
//! instance's own processes listen on the port. Only transitions are reported.
//!
//! [`HealthCheck`]: daros_coordinator::model::health::HealthCheck

pub mod monitor;
pub mod owner;
pub mod probe;
pub mod tracker;

pub use monitor::{HealthEvent, HealthMonitor};
pub use probe::{ExecContext, ProbeOutcome, run_probe};
pub use tracker::{CheckState, Tracker};
