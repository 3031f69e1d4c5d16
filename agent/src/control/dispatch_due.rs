//! Which nodes a dispatch round serves, and how. Work a commit changed goes out
//! in the next round, whatever else is due; the rest — nodes a new leader has not
//! heard from yet and the periodic check that each node still holds its work —
//! is served a bounded slice at a time, oldest first. At 500 nodes the check of
//! every node in one round took 2.3 s every 5 s, and a commit landing meanwhile
//! waited for it (issue 18: a single application Running in 2.6–3.1 s at worst
//! on an idle cluster, against a median of 240–395 ms).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::work_digest::WorkDigest;

/// How a due node is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serve {
    /// Its work changed since it last took some: send it whole.
    Whole,
    /// Ask whether it holds this work (digest); send it whole if it does not.
    Confirm(Option<WorkDigest>),
}

/// What this leader knows of each node's work (`W`: a node's desired work).
#[derive(Debug)]
pub struct NodeBook<W> {
    /// Work each node took (or confirmed) in this term, with its digest.
    pub acked: BTreeMap<String, (W, Option<WorkDigest>)>,
    /// When this leader last served each node, whatever the outcome.
    pub served: BTreeMap<String, Instant>,
}

impl<W> Default for NodeBook<W> {
    fn default() -> Self {
        Self {
            acked: BTreeMap::new(),
            served: BTreeMap::new(),
        }
    }
}

impl<W> NodeBook<W> {
    /// Forgets nodes that no longer have desired work.
    pub fn retain(&mut self, desired: &BTreeMap<String, W>) {
        self.acked.retain(|n, _| desired.contains_key(n));
        self.served.retain(|n, _| desired.contains_key(n));
    }
}

/// Nodes a round serves now. `changed`: the nodes whose work the commit(s)
/// this round is the first to see changed (none on this leader's first
/// look). A node whose work differs from what it acknowledged, or
/// that a new commit changed, is always served, except a node gossip calls gone,
/// which is served only once `period` has passed since its last try (a dead node
/// must not hold every commit's work up for a send timeout). Of the rest, nodes
/// never served in this term and nodes last served `period` ago or more are
/// checked, at most `slice` of them, the longest unserved first.
pub fn due<'a, W: PartialEq>(
    desired: &'a BTreeMap<String, W>,
    changed: &BTreeSet<String>,
    book: &NodeBook<W>,
    gone: &BTreeSet<String>,
    now: Instant,
    period: Duration,
    slice: usize,
) -> Vec<(&'a str, &'a W, Serve)> {
    let mut urgent = Vec::new();
    let mut checks: Vec<(Option<Instant>, &str, &W, Option<WorkDigest>)> = Vec::new();
    for (node, work) in desired {
        let served = book.served.get(node).copied();
        let stale = served.is_none_or(|t| now.saturating_duration_since(t) >= period);
        let new = changed.contains(node);
        match book.acked.get(node) {
            Some((held, digest)) if held == work && stale => {
                checks.push((served, node.as_str(), work, digest.clone()));
            }
            Some((held, _)) if held == work => {}
            Some(_) if !gone.contains(node) || stale => {
                urgent.push((node.as_str(), work, Serve::Whole));
            }
            Some(_) => {}
            None if new && (!gone.contains(node) || stale) => {
                urgent.push((node.as_str(), work, Serve::Confirm(None)));
            }
            None if stale => checks.push((served, node.as_str(), work, None)),
            None => {}
        }
    }
    // Never served (None) first, then the oldest.
    checks.sort_by_key(|(served, node, _, _)| (*served, *node));
    urgent.extend(
        checks
            .into_iter()
            .take(slice)
            .map(|(_, n, w, d)| (n, w, Serve::Confirm(d))),
    );
    urgent
}

/// Checks per round: enough to check every node once a `period` with rounds
/// every `step` (twice over, for rounds that take longer), and never fewer than
/// `least`.
pub fn slice(nodes: usize, step: Duration, period: Duration, least: usize) -> usize {
    let per_round = nodes as u128 * step.as_millis().max(1) * 2 / period.as_millis().max(1);
    (per_round as usize).max(least)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired(n: usize) -> BTreeMap<String, u32> {
        (0..n).map(|i| (format!("n{i:03}"), 0)).collect()
    }

    fn book_of(d: &BTreeMap<String, u32>, at: Instant) -> NodeBook<u32> {
        let mut book = NodeBook::default();
        for (n, w) in d {
            book.acked.insert(n.clone(), (*w, None));
            book.served.insert(n.clone(), at);
        }
        book
    }

    const P: Duration = Duration::from_secs(5);

    #[test]
    fn a_new_leader_checks_a_slice_at_a_time_then_every_node_once_a_period() {
        let d = desired(10);
        let none = BTreeSet::new();
        let mut book = NodeBook::default();
        let t0 = Instant::now();
        let first = due(&d, &none, &book, &none, t0, P, 4);
        assert_eq!(first.len(), 4, "one slice, not every node");
        assert!(first.iter().all(|(_, _, s)| *s == Serve::Confirm(None)));
        for (n, w, _) in &first {
            book.acked.insert(n.to_string(), (**w, None));
            book.served.insert(n.to_string(), t0);
        }
        let second = due(&d, &none, &book, &none, t0, P, 4);
        assert_eq!(second.len(), 4);
        assert!(second.iter().all(|(n, _, _)| !book.served.contains_key(*n)));

        let book = book_of(&d, t0);
        assert!(due(&d, &none, &book, &none, t0 + P / 2, P, 4).is_empty());
        let later = due(&d, &none, &book, &none, t0 + P, P, 4);
        assert_eq!(later.len(), 4, "the periodic check is sliced too");
    }

    #[test]
    fn the_longest_unserved_are_checked_first() {
        let d = desired(6);
        let t0 = Instant::now();
        let mut book = book_of(&d, t0);
        book.served.insert("n004".into(), t0 - P);
        book.served.insert("n001".into(), t0 - P * 2);
        book.acked.remove("n005");
        book.served.remove("n005");
        let got: Vec<_> = due(
            &d,
            &BTreeSet::new(),
            &book,
            &BTreeSet::new(),
            t0 + P / 2,
            P,
            2,
        )
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
        assert_eq!(got, ["n005", "n001"]);
    }

    #[test]
    fn changed_work_goes_out_whatever_the_slice() {
        let before = desired(10);
        let t0 = Instant::now();
        let mut book = book_of(&before, t0);
        // n003 never answered this leader (its send failed just now).
        book.acked.remove("n003");
        let mut d = before.clone();
        for n in ["n001", "n002", "n003"] {
            d.insert(n.into(), 1);
        }
        let changed: BTreeSet<String> = ["n001", "n002", "n003"].map(String::from).into();
        let got = due(&d, &changed, &book, &BTreeSet::new(), t0, P, 0);
        assert_eq!(
            got,
            [
                ("n001", &1, Serve::Whole),
                ("n002", &1, Serve::Whole),
                ("n003", &1, Serve::Confirm(None)),
            ]
        );
        // The next round, with no new commit, leaves the failed node to its period.
        let next = due(&d, &BTreeSet::new(), &book, &BTreeSet::new(), t0, P, 0);
        assert!(next.iter().all(|(n, _, _)| *n != "n003"), "{next:?}");
    }

    #[test]
    fn a_gone_node_is_tried_once_a_period_even_when_its_work_changed() {
        let before = desired(3);
        let t0 = Instant::now();
        let mut book = book_of(&before, t0);
        book.acked.remove("n002");
        let mut d = before.clone();
        d.insert("n001".into(), 1);
        d.insert("n002".into(), 1);
        let gone: BTreeSet<String> = ["n001".to_string(), "n002".to_string()].into();
        let changed = gone.clone();
        assert!(due(&d, &changed, &book, &gone, t0 + P / 2, P, 8).is_empty());
        let got: Vec<_> = due(&d, &changed, &book, &gone, t0 + P, P, 8)
            .into_iter()
            .map(|(n, _, s)| (n, s))
            .collect();
        assert!(got.contains(&("n001", Serve::Whole)), "{got:?}");
        assert!(got.contains(&("n002", Serve::Confirm(None))), "{got:?}");
    }

    #[test]
    fn a_slice_keeps_up_with_the_period() {
        let step = Duration::from_millis(250);
        assert_eq!(slice(500, step, P, 128), 128);
        assert_eq!(slice(5_000, step, P, 128), 500);
        assert_eq!(slice(0, step, P, 128), 128);
    }
}
