//! Who a member is to SWIM: small, since it travels in every probe.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// A member's SWIM identity: node id, generation (grows across restarts), gossip address, and
/// a bump that grows each time the member renews itself after being declared down wrongly.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SwimId {
    /// Node id.
    pub node: String,
    /// Generation of the agent's run.
    pub generation: u64,
    /// Gossip address.
    pub addr: SocketAddr,
    /// Renewals within one run.
    pub bump: u16,
}

impl SwimId {
    /// Whether `self` is a later identity than `other` (a restart, or a renewal).
    pub fn later_than(&self, other: &Self) -> bool {
        (self.generation, self.bump) > (other.generation, other.bump)
    }
}

impl foca::Identity for SwimId {
    type Addr = SocketAddr;

    /// A member declared down (say, paused under load) comes back with the next bump.
    fn renew(&self) -> Option<Self> {
        Some(Self {
            bump: self.bump.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, other: &Self) -> bool {
        self.later_than(other)
    }
}
