//! Bounded history: the coordinator's logs (lifecycle events, decisions,
//! policy evaluations) and each application's versions keep their numbering
//! forever but hold only the newest entries; what was dropped is counted, per
//! application and per log, so that nothing disappears silently (`describe`
//! says how many earlier entries were compacted).
//!
//! The limits are part of the replicated state (every replica trims alike),
//! set by `Command::SetRetention`.

use crate::field::FieldError;
use serde::{Deserialize, Serialize};

/// How much history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Retention {
    /// Lifecycle events kept, all applications together (default 10,000).
    #[serde(default = "default_events")]
    pub events: usize,
    /// Decision records kept (default 2,000: each holds its candidates,
    /// placements and checks).
    #[serde(default = "default_records")]
    pub decisions: usize,
    /// Policy evaluations kept (default 2,000).
    #[serde(default = "default_records")]
    pub evaluations: usize,
    /// Versions kept per application (default 50); the versions in use (in
    /// force, a rollout's start, what instances run) are always kept.
    #[serde(default = "default_versions")]
    pub versions: usize,
    /// Audit records kept (default 100,000); older ones are compacted with
    /// a record saying how many and up to which sequence number.
    #[serde(default = "default_audit")]
    pub audit: usize,
}

fn default_audit() -> usize {
    100_000
}

fn default_events() -> usize {
    10_000
}

fn default_records() -> usize {
    2_000
}

fn default_versions() -> usize {
    50
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            events: default_events(),
            decisions: default_records(),
            evaluations: default_records(),
            versions: default_versions(),
            audit: default_audit(),
        }
    }
}

impl Retention {
    /// Checks the values.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (name, v, min) in [
            ("events", self.events, 100),
            ("decisions", self.decisions, 100),
            ("evaluations", self.evaluations, 100),
            ("versions", self.versions, 2),
            ("audit", self.audit, 1_000),
        ] {
            if v < min {
                errs.push(FieldError::new(
                    format!("retention.{name}"),
                    format!("{v} is below the minimum {min}"),
                ));
            }
        }
        errs
    }
}

/// An append-only log whose entries keep their position (0-based, never
/// reused) while the oldest are dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Log<T> {
    /// Entries dropped from the front so far.
    dropped: u64,
    /// The entries kept, oldest first.
    items: Vec<T>,
}

impl<T> Default for Log<T> {
    fn default() -> Self {
        Self {
            dropped: 0,
            items: Vec::new(),
        }
    }
}

impl<T> Log<T> {
    /// Position the next entry gets.
    pub fn next_pos(&self) -> u64 {
        self.dropped + self.items.len() as u64
    }

    /// Appends; returns its position.
    pub fn push(&mut self, item: T) -> u64 {
        let pos = self.next_pos();
        self.items.push(item);
        pos
    }

    /// The entry at `pos`, unless dropped or not written yet.
    pub fn get(&self, pos: u64) -> Option<&T> {
        pos.checked_sub(self.dropped)
            .and_then(|i| self.items.get(usize::try_from(i).ok()?))
    }

    /// The entries kept, oldest first.
    pub fn as_slice(&self) -> &[T] {
        &self.items
    }

    /// Entries dropped so far (the position of the oldest kept).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Drops the oldest entries beyond `keep`, in batches (a quarter of `keep`
    /// at a time, so that the cost is spread over many appends); returns how
    /// many were dropped.
    pub fn trim(&mut self, keep: usize) -> usize {
        if self.items.len() <= keep.saturating_add(keep / 4) {
            return 0;
        }
        let n = self.items.len() - keep;
        self.items.drain(..n);
        self.dropped += n as u64;
        n
    }
}

/// What was compacted of one application's history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Compacted {
    /// Lifecycle events.
    pub events: u64,
    /// Decisions.
    pub decisions: u64,
    /// Versions.
    pub versions: u64,
}

impl Compacted {
    /// True when nothing was compacted.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl super::Coordinator {
    /// Trims the logs, and the versions of the applications `out` recorded
    /// events for (a new version is always an event), to the retention
    /// limits, counting what each application lost. Cheap per command: the
    /// applications are walked only when a log was trimmed (in batches).
    pub(super) fn compact(&mut self, out: &crate::command::Outcome) {
        let r = self.retention;
        let events = self.events.trim(r.events) > 0;
        let decisions = self.decisions.trim(r.decisions) > 0;
        self.evaluations.trim(r.evaluations);
        let (first_event, first_decision) = (self.events.dropped(), self.decisions.dropped());
        let trim = Trim {
            events: events.then_some(first_event),
            decisions: decisions.then_some(first_decision),
            versions: r.versions,
        };
        if events || decisions {
            for e in self.apps.values_mut_history() {
                trim.entry(e);
            }
            return;
        }
        // Only the applications with new events can have a new version.
        let touched: std::collections::BTreeSet<&crate::model::names::AppKey> =
            out.events.iter().map(|e| &e.app).collect();
        for key in touched {
            if let Some(e) = self.apps.get_mut_history(key) {
                trim.entry(e);
            }
        }
    }
}

/// What one command's compaction trims of each application.
struct Trim {
    /// The first event kept, when the event log was trimmed.
    events: Option<u64>,
    /// The first decision kept, when the decision log was trimmed.
    decisions: Option<u64>,
    /// Versions kept per application.
    versions: usize,
}

impl Trim {
    fn entry(&self, e: &mut super::entry::AppEntry) {
        if let Some(first_event) = self.events {
            let before = e.events.len();
            e.events.retain(|&i| i as u64 >= first_event);
            e.compacted.events += (before - e.events.len()) as u64;
        }
        if let Some(first_decision) = self.decisions {
            let before = e.decisions.len();
            e.decisions.retain(|d| d.0 > first_decision);
            e.compacted.decisions += (before - e.decisions.len()) as u64;
        }
        // Versions: the oldest go first, but never one still in use (the
        // version in force, a rollout's start, one an instance, the old
        // copy it replaces or an init job runs).
        let excess = e.versions.len().saturating_sub(self.versions);
        if excess > 0 {
            let rt = &e.runtime;
            let in_use = |v: u32| {
                v == e.current
                    || e.rollout.as_ref().is_some_and(|ro| ro.from == v)
                    || rt.instances.values().any(|i| {
                        i.version == v || i.replacing.as_ref().is_some_and(|o| o.version == v)
                    })
                    || rt.jobs.values().any(|j| j.version == v)
            };
            let drop: Vec<u32> = e
                .versions
                .iter()
                .map(|v| v.version)
                .filter(|&v| !in_use(v))
                .take(excess)
                .collect();
            e.versions.retain(|v| !drop.contains(&v.version));
            e.compacted.versions += drop.len() as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_survive_trimming() {
        let mut l = Log::default();
        for i in 0..20u32 {
            assert_eq!(l.push(i), u64::from(i));
        }
        assert_eq!(l.trim(16), 0, "within the batch slack");
        assert_eq!(l.trim(10), 10);
        assert_eq!(l.dropped(), 10);
        assert_eq!(l.get(9), None);
        assert_eq!(l.get(10), Some(&10));
        assert_eq!(l.get(19), Some(&19));
        assert_eq!(l.get(20), None);
        assert_eq!(l.push(20), 20);
        assert_eq!(l.as_slice().len(), 11);
        assert!(Retention::default().validate().is_empty());
        let bad = Retention {
            versions: 1,
            ..Retention::default()
        };
        let e = &bad.validate()[0];
        assert_eq!(
            (e.path.as_str(), e.reason.as_str()),
            ("retention.versions", "1 is below the minimum 2")
        );
    }
}
