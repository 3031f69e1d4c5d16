//! Multi-host test harness (feature `testing`): real node processes in real network namespaces.

mod cluster;
pub mod netns;

pub use cluster::{
    GOSSIP_PORT, NodeProgram, NodeSpec, RPC_PORT, TestCluster, wait_for, wait_for_every,
};
pub use netns::TestNet;

/// A harness failure (setup, process, timeout), with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("test harness: {0}")]
pub struct HarnessError(pub String);
