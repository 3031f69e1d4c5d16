//! QoS enforcement (seed 001): QoS classes and MinimalReservation mapped to
//! cgroup knobs (v2, with a v1/hybrid fallback), node admission of floors, the
//! protection loop, and the per-knob report (enforced, or degraded with the
//! reason). The mapping table is documented in `docs/qos.md`.
//!
//! Flow: [`spec`] (class + profile, validated) → [`admission`] (inside the
//! [`store`] transaction) → [`facts`] + [`mapping`] (pure plans) → [`apply`]
//! (write, read back) → [`report`]; [`protect`] watches the floors;
//! [`service::QosService`] ties it together.

pub mod admission;
pub mod apply;
pub mod facts;
pub mod knob;
pub mod mapping;
pub mod metrics;
pub mod pod_enforcer;
pub mod protect;
pub mod report;
pub mod service;
pub mod spec;
pub mod store;

pub use knob::{Knob, KnobReport, KnobStatus, Resource};
pub use report::{ClassState, QosOverview, UnsetReport, WorkloadQos};
pub use service::{QosError, QosService, QosSettings, SetTarget};
pub use spec::QosSpec;
