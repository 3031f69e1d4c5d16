//! Nodes of one class in cost order with a max-tree over their free cpu, so
//! that "the cheapest node with enough free cpu" is found in O(log n)
//! instead of walking every full cheap node.

use super::cluster::NodeIdx;
use serde::{Deserialize, Serialize};

/// Cost-ordered nodes with a max segment tree over their free cpu.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CostTree {
    order: Vec<NodeIdx>,
    pos: Vec<u32>,
    tree: Vec<i64>,
    size: usize,
    dirty: bool,
}

impl CostTree {
    /// Marks the tree for a rebuild (membership changed).
    pub fn invalidate(&mut self) {
        self.dirty = true;
    }

    /// True when it must be rebuilt before use.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Rebuilds from `order` (cheapest first) and each node's free cpu.
    pub fn rebuild(&mut self, order: impl Iterator<Item = NodeIdx>, free: impl Fn(NodeIdx) -> i64) {
        self.order = order.collect();
        let max_idx = self
            .order
            .iter()
            .copied()
            .max()
            .map_or(0, |m| m as usize + 1);
        self.pos = vec![u32::MAX; max_idx];
        self.size = self.order.len().next_power_of_two().max(1);
        self.tree = vec![i64::MIN; 2 * self.size];
        for (p, &n) in self.order.iter().enumerate() {
            self.pos[n as usize] = p as u32;
            self.tree[self.size + p] = free(n);
        }
        for i in (1..self.size).rev() {
            self.tree[i] = self.tree[2 * i].max(self.tree[2 * i + 1]);
        }
        self.dirty = false;
    }

    /// Sets the free cpu of node `n` (ignored while dirty or absent).
    pub fn update(&mut self, n: NodeIdx, free: i64) {
        if self.dirty {
            return;
        }
        let Some(&p) = self.pos.get(n as usize) else {
            return;
        };
        if p == u32::MAX {
            return;
        }
        let mut i = self.size + p as usize;
        self.tree[i] = free;
        while i > 1 {
            i /= 2;
            self.tree[i] = self.tree[2 * i].max(self.tree[2 * i + 1]);
        }
    }

    /// The first position at or after `from` whose node has at least
    /// `lower` free cpu, and that node.
    pub fn first_at_least(&self, from: usize, lower: i64) -> Option<(usize, NodeIdx)> {
        if from >= self.order.len() || self.tree.get(1).is_none_or(|&m| m < lower) {
            return None;
        }
        let p = self.descend(1, 0, self.size, from, lower)?;
        self.order.get(p).map(|&n| (p, n))
    }

    fn descend(&self, node: usize, lo: usize, hi: usize, from: usize, lower: i64) -> Option<usize> {
        if hi <= from || self.tree[node] < lower {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = (lo + hi) / 2;
        self.descend(2 * node, lo, mid, from, lower)
            .or_else(|| self.descend(2 * node + 1, mid, hi, from, lower))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cheapest_with_room() {
        let free = [5i64, -3, 10, 0, 7];
        let mut t = CostTree::default();
        // Cost order: 3, 1, 4, 0, 2.
        t.rebuild([3u32, 1, 4, 0, 2].into_iter(), |n| free[n as usize]);
        assert_eq!(t.first_at_least(0, 6), Some((2, 4)));
        assert_eq!(t.first_at_least(3, 6), Some((4, 2)));
        assert_eq!(t.first_at_least(0, 11), None);
        assert_eq!(t.first_at_least(0, -5), Some((0, 3)));
        t.update(4, 1);
        assert_eq!(t.first_at_least(0, 6), Some((4, 2)));
        t.invalidate();
        assert!(t.is_dirty());
    }
}
