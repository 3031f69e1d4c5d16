//! D-AROS eBPF datapath: per-workload network accounting, bandwidth caps and floors, and
//! run-queue latency, from C eBPF programs (`src/bpf/*.bpf.c`, compiled by `build.rs`) loaded
//! with aya and pinned under `/sys/fs/bpf/daros` so they keep working while the agent restarts.
//!
//! The agent embeds it in a few lines:
//!
//! ```no_run
//! use daros_ebpf::{Datapath, DatapathOptions, CgroupId, NetLimits, Cap};
//! # fn main() -> Result<(), daros_ebpf::Error> {
//! let mut dp = Datapath::open(&DatapathOptions::default())?; // mounts bpffs, reopens pins
//! let root = daros_ebpf::CgroupRoot::detect()?;
//! dp.net.attach(&root.path().join("daros.slice"))?;
//! let id = CgroupId::of_path(&root.path().join("daros.slice/web"))?;
//! dp.net.set_workload(id, &NetLimits { egress: Some(Cap::rate(50_000_000)), ..NetLimits::default() })?;
//! let counters = dp.net.reader().counters(id)?;
//! let cpu = dp.sched.reader().get(id)?;
//! # let _ = (counters, cpu); Ok(()) }
//! ```
//!
//! Modules:
//! - [`abi`]: `#[repr(C)]` mirrors of the maps' keys, values and events (layout-tested).
//! - [`bpffs`]: mounting bpffs, the pin directory, its owner lock and its removal.
//! - [`bucket`]: caps and the token bucket parameters encoding them.
//! - [`cgroup`]: cgroup ids and the v2 mount (hybrid or pure v2), detected at run time.
//! - [`events`]: throttle/drop events from the ring buffer into logs, counters and a channel.
//! - [`floor`]: `NetFloorController`, the pure decision of which caps protect network floors.
//! - [`floor_runner`]: ticks the controller against the live counters and caps.
//! - [`net`]: the cgroup_skb datapath (accounting, caps, test runs).
//! - [`objects`]: the embedded eBPF objects.
//! - [`rate`]: turning counter readings into rates.
//! - [`sched`]: on-CPU time and run-queue wait per cgroup.

#![warn(missing_docs)]
// bpf(2) and mmap-backed ring buffers need unsafe in three places: sys.rs (raw bpf
// commands), abi.rs (Pod impls) and events.rs (polling the ring buffer fd).
#![deny(unsafe_code)]

pub mod abi;
pub mod bpffs;
pub mod bucket;
pub mod cgroup;
mod datapath;
pub mod error;
pub mod events;
pub mod floor;
pub mod floor_runner;
pub mod net;
pub mod objects;
mod pins;
pub mod rate;
pub mod sched;
mod sys;

pub use bpffs::PinDir;
pub use bucket::Cap;
pub use cgroup::{CgroupId, CgroupRoot};
pub use datapath::{Datapath, DatapathOptions, cleanup};
pub use error::{Error, Result};
pub use events::{EventStats, NetEvent, NetEventKind, NetEvents};
pub use floor::{FloorConfig, FloorWorkload, NetClass, NetFloorController};
pub use floor_runner::FloorRunner;
pub use net::{Direction, NetCounters, NetDatapath, NetLimits, NetOptions, NetReader};
pub use pins::OpenOutcome;
pub use sched::{SchedDatapath, SchedOptions, SchedReader, SchedStats};
