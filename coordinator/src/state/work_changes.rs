//! Which nodes' desired work each command may have changed, so that the
//! leader's dispatch reads again only those nodes' work after a commit. At
//! 1,000 nodes and 100,000 instances, building every node's work after every
//! commit and comparing it with the last was a quarter of the leader's CPU.
//!
//! A node's work depends on the applications with a run there (their changes
//! are tracked through the application index), on tenants (namespaces), their
//! Configs and Secrets (environment) and on which nodes are registered. The
//! commands that a fleet sends all the time (reports, inventories, ticks,
//! operations, application documents) change only applications; any other
//! command counts as a change of every node's work.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::desired::DesiredWork;
use crate::command::Command;
use crate::spec::Document;

/// Where a reader of the desired work left off: a position in one
/// coordinator's history of commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkCursor {
    lineage: u64,
    seq: u64,
}

/// The desired work a reader lacks since its cursor.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkUpdate {
    /// Every node's work: a first read, a read of a coordinator restored
    /// since, or a change that may touch every node.
    All(BTreeMap<String, DesiredWork>),
    /// The work of each node that may have changed (`None`: it has none
    /// and is not registered any more); other nodes' work is as it was.
    Nodes(BTreeMap<String, Option<DesiredWork>>),
}

/// A new lineage for every coordinator built, loaded or copied, so that a
/// cursor never reads another coordinator's sequence numbers.
fn new_lineage() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The record of changes (not replicated: rebuilt empty on load, when every
/// reader reads everything again).
#[derive(Debug)]
pub(super) struct WorkChanges {
    lineage: u64,
    /// Commands applied in this lineage.
    seq: u64,
    /// The last command that may have changed every node's work.
    all: u64,
    /// The last command that may have changed each node's work.
    nodes: HashMap<String, u64>,
}

impl Default for WorkChanges {
    fn default() -> Self {
        Self {
            lineage: new_lineage(),
            seq: 0,
            all: 0,
            nodes: HashMap::new(),
        }
    }
}

impl Clone for WorkChanges {
    /// A copy starts a lineage of its own: it may be changed apart.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl WorkChanges {
    /// A command was applied.
    pub(super) fn next(&mut self, every_node: bool) {
        self.seq += 1;
        if every_node {
            self.all = self.seq;
        }
    }

    /// The command being recorded may have changed `node`'s work.
    pub(super) fn touched(&mut self, node: &str) {
        match self.nodes.get_mut(node) {
            Some(s) => *s = self.seq,
            None => {
                self.nodes.insert(node.to_string(), self.seq);
            }
        }
    }

    /// The cursor of a reader up to date now.
    pub(super) fn cursor(&self) -> WorkCursor {
        WorkCursor {
            lineage: self.lineage,
            seq: self.seq,
        }
    }

    /// The nodes whose work may have changed since `cursor`; `None` when
    /// every node's work must be read again.
    pub(super) fn since(&self, cursor: Option<WorkCursor>) -> Option<Vec<&str>> {
        let c = cursor.filter(|c| c.lineage == self.lineage && c.seq <= self.seq)?;
        if self.all > c.seq {
            return None;
        }
        Some(
            self.nodes
                .iter()
                .filter(|&(_, &s)| s > c.seq)
                .map(|(n, _)| n.as_str())
                .collect(),
        )
    }
}

/// True when `cmd` can change only applications (and so only the work of
/// the nodes their runs are on).
pub(super) fn changes_only_applications(cmd: &Command) -> bool {
    match cmd {
        Command::ReportWorkload { .. }
        | Command::ReportWorkloads { .. }
        | Command::ReportInitJob { .. }
        | Command::NodeInventory { .. }
        | Command::Tick
        | Command::Operate { .. }
        | Command::Rollback { .. }
        | Command::Record { .. } => true,
        Command::Apply { documents, .. } => documents
            .iter()
            .all(|d| matches!(d, Document::Application(_))),
        Command::Expect { then, .. } => changes_only_applications(then),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_the_nodes_changed_since_its_cursor() {
        let mut w = WorkChanges::default();
        assert_eq!(w.since(None), None, "a first read reads everything");
        w.next(false);
        w.touched("n1");
        let c1 = w.cursor();
        assert_eq!(w.since(Some(c1)), Some(vec![]));
        w.next(false);
        w.touched("n2");
        assert_eq!(w.since(Some(c1)), Some(vec!["n2"]));
        w.next(true);
        assert_eq!(w.since(Some(c1)), None, "a change of every node's work");
        let c3 = w.cursor();
        assert_eq!(w.since(Some(c3)), Some(vec![]));
        assert_eq!(w.clone().since(Some(c3)), None, "a copy's own lineage");
    }
}
