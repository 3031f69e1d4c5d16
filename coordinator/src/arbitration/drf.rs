//! Tenant-level arbitration (seed 000 §7.3.2): weighted dominant resource
//! fairness over each pool. The tenant with the lowest weighted dominant
//! share is served next.

use crate::placement::ResVec;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Weighted dominant share of `alloc` in `pool_cap`, in parts per billion.
pub fn weighted_share_ppb(alloc: ResVec, pool_cap: ResVec, weight: u32) -> u64 {
    alloc.dominant_share_ppb(pool_cap) / u64::from(weight.max(1))
}

/// Tenants waiting to be served, lowest weighted share first; ties go to
/// the tenant name (deterministic).
#[derive(Debug, Default, Clone)]
pub struct DrfQueue {
    heap: BinaryHeap<Reverse<(u64, String)>>,
}

impl DrfQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `tenant` at weighted share `share_ppb`.
    pub fn push(&mut self, tenant: String, share_ppb: u64) {
        self.heap.push(Reverse((share_ppb, tenant)));
    }

    /// The tenant to serve next and its share.
    pub fn pop(&mut self) -> Option<(String, u64)> {
        self.heap.pop().map(|Reverse((s, t))| (t, s))
    }

    /// True when no tenant waits.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_scale_shares() {
        let cap = ResVec {
            cpu: 100_000,
            memory: 100,
            gpu: 0,
        };
        let a = ResVec {
            cpu: 20_000,
            memory: 10,
            gpu: 0,
        };
        assert_eq!(weighted_share_ppb(a, cap, 1), 200_000_000);
        assert_eq!(weighted_share_ppb(a, cap, 2), 100_000_000);
        let mut q = DrfQueue::new();
        q.push("b".into(), 5);
        q.push("a".into(), 5);
        q.push("c".into(), 1);
        assert_eq!(q.pop().unwrap().0, "c");
        assert_eq!(q.pop().unwrap().0, "a");
        assert_eq!(q.pop().unwrap().0, "b");
        assert!(q.is_empty());
    }
}
