//! D-AROS coordinator: the application runtime's decision logic.
//!
//! Pure and deterministic: no I/O, no clock reads (time is passed in), no
//! randomness, `BTreeMap` iteration wherever order reaches a decision.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod field;
pub mod lifecycle;
pub mod model;
pub mod placement;
pub mod policy;
pub mod reconcile;

pub use field::FieldError;
pub use model::qos::{MinimalReservation, QosClass};
pub use model::resources::{
    Bytes, BytesPerSec, DedicatedCpus, GpuCount, IoProfile, MilliCpu, NetworkProfile, Quantity,
    QuantityError, ResourceBounds, ResourceProfile,
};
pub mod spec;
