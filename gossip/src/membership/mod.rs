//! Membership: chitchat gossip sealed with the cluster key, phi-accrual failure detection, and
//! the node summaries every agent publishes.

mod codec;
mod member;
pub(crate) mod seal;
mod service;
mod transport;

pub use member::{
    CoordinatorHint, LocalInfo, Member, MemberStatus, QosSummary, Resources, UsageSummary,
};
pub use seal::{GossipKey, Keyring, SealError, SealStats};
pub use service::{Membership, MembershipConfig, MembershipError};
pub use transport::SealedUdpTransport;
