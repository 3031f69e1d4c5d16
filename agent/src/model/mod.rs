//! The agent's observed-state types as served by the local API (JSON) and read
//! back by `darosctl`. Field names carry their unit; counters end in `_total`.

pub mod caps;
pub mod gpu;
pub mod net;
pub mod node;
pub mod pressure;
pub mod workload;

pub use caps::Capabilities;
pub use gpu::GpuReport;
pub use node::NodeSample;
pub use pressure::{PressureLine, PressureSample, PsiSample};
pub use workload::{Workload, WorkloadKind, WorkloadList, WorkloadSample};
