//! Membership: SWIM gossip sealed with the cluster key ([`swim`]), and the node summaries
//! every agent publishes. The chitchat transport stays for `daros-mesh-probe`, whose
//! intruders speak chitchat.

mod codec;
mod member;
pub(crate) mod seal;
mod service;
pub mod swim;
mod transport;

pub use member::{
    CoordinatorHint, LocalInfo, Member, MemberStatus, QosSummary, Resources, UsageSummary,
};
pub use seal::{GossipKey, Keyring, SealError, SealStats};
pub use service::{Census, Membership, MembershipConfig, MembershipError};
pub use transport::SealedUdpTransport;
