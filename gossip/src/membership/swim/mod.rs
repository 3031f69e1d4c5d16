//! SWIM membership with member descriptions beside it (see [`engine`]).
//!
//! Who is up: SWIM (memberlist's LAN design through the `foca` crate) — one probe per period to
//! one member, indirect probes through three others, suspicion the member can refute, and
//! changes piggybacked on probes. Its idle traffic does not grow with the cluster: Serf's level
//! (docs/benchmarks.md, "Gossip: D-AROS beside Serf").
//!
//! What each member publishes: a [`Description`]; a notice of each new version is the
//! broadcast, with the keys changed when they are few; otherwise (or for a member that missed
//! the version before) the description, or the keys changed since the version held, is
//! fetched from its owner.

mod description;
mod engine;
mod id;
mod wire;

pub use description::{At, Delta, Description, Descriptions, Notice};
pub use engine::{Command, Engine, EngineConfig, Peer, Shared, Timing, lock};
pub use id::SwimId;
pub use wire::{Envelope, Message, WireError, cluster_tag};
