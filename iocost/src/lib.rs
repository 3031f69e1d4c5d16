//! blk-iocost for D-AROS: the kernel's proportional IO controller makes
//! `io.weight` work per device. This crate measures a disk's linear cost model
//! (`calibrate`), caches it per disk (`cache`), reads and writes
//! `io.cost.model` / `io.cost.qos` lines (`model`), and turns iocost on for a
//! node's disks keeping what was there to restore (`node`).

pub mod cache;
pub mod calibrate;
pub mod device;
mod error;
pub mod model;
pub mod node;

pub use calibrate::{CalibrationPlan, IdleLatency, Measured};
pub use device::Device;
pub use error::IoCostError;
pub use model::{LATENCY_FACTOR, LinearModel, ModelLine, QosLine, QosTargets};
pub use node::{DiskCost, ModelSource, NodeIoCost, Setup};
