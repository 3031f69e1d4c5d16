//! Counters of the RPC layer (issue 16, "RPC errors by kind"): calls served
//! and made, and the errors of each side by [`ErrorCode`], plus QUIC
//! handshakes that failed (a peer without a certificate of this cluster),
//! connections dialed, and calls made over a connection the peer dialed.

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::ErrorCode;

/// Which side of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// This node answered.
    Served,
    /// This node called.
    Made,
}

impl Side {
    /// `served` or `made`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Served => "served",
            Side::Made => "made",
        }
    }
}

#[derive(Debug, Default)]
struct SideStats {
    calls: AtomicU64,
    errors: [AtomicU64; ErrorCode::ALL.len()],
}

/// RPC counters of one node.
#[derive(Debug, Default)]
pub struct RpcStats {
    served: SideStats,
    made: SideStats,
    handshakes_failed: AtomicU64,
    dialed: AtomicU64,
    on_peer_connections: AtomicU64,
}

impl RpcStats {
    fn side(&self, s: Side) -> &SideStats {
        match s {
            Side::Served => &self.served,
            Side::Made => &self.made,
        }
    }

    /// Counts one call's outcome on side `s`.
    pub fn count(&self, s: Side, error: Option<ErrorCode>) {
        let side = self.side(s);
        side.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = error {
            side.errors[c.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts an incoming connection whose handshake failed.
    pub fn count_handshake_failure(&self) {
        self.handshakes_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection this node dialed (its handshake done).
    pub fn count_dialed(&self) {
        self.dialed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a call made over a connection the peer had dialed.
    pub fn count_on_peer_connection(&self) {
        self.on_peer_connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections this node dialed.
    pub fn dialed(&self) -> u64 {
        self.dialed.load(Ordering::Relaxed)
    }

    /// Calls made over a connection the peer had dialed.
    pub fn on_peer_connections(&self) -> u64 {
        self.on_peer_connections.load(Ordering::Relaxed)
    }

    /// Calls on side `s`.
    pub fn calls(&self, s: Side) -> u64 {
        self.side(s).calls.load(Ordering::Relaxed)
    }

    /// Errors on side `s`, by code (every code, zeros included).
    pub fn errors(&self, s: Side) -> Vec<(ErrorCode, u64)> {
        let side = self.side(s);
        ErrorCode::ALL
            .iter()
            .map(|c| (*c, side.errors[c.index()].load(Ordering::Relaxed)))
            .collect()
    }

    /// Incoming connections whose handshake failed.
    pub fn handshakes_failed(&self) -> u64 {
        self.handshakes_failed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_code_and_side() {
        let s = RpcStats::default();
        s.count(Side::Served, None);
        s.count(Side::Served, Some(ErrorCode::Forbidden));
        s.count(Side::Made, Some(ErrorCode::Timeout));
        assert_eq!(s.calls(Side::Served), 2);
        let served: Vec<_> = s
            .errors(Side::Served)
            .into_iter()
            .filter(|e| e.1 > 0)
            .collect();
        assert_eq!(served, vec![(ErrorCode::Forbidden, 1)]);
        let made: Vec<_> = s
            .errors(Side::Made)
            .into_iter()
            .filter(|e| e.1 > 0)
            .collect();
        assert_eq!(made, vec![(ErrorCode::Timeout, 1)]);
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::ALL[c.index()], c);
        }
    }
}
