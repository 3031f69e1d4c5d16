//! D-AROS mesh: every agent joins it; the server agents elect the coordinator.
//!
//! - [`pki`]: cluster CA, join tokens, node credentials (node id and role in the certificate).
//! - [`membership`]: SWIM gossip sealed with the cluster key; member descriptions fetched on notice.
//! - [`tls`]: mutual TLS for QUIC; pinned-CA mode for joining nodes.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod identity;
pub mod membership;
pub mod pki;
pub mod tls;

pub use identity::{NodeId, PeerIdentity, Role};
pub mod config;
pub mod control;
pub mod fence;
pub mod join;
pub mod kv;
pub mod mesh;
pub mod raft;
pub mod rpc;
#[cfg(feature = "testing")]
pub mod testing;
