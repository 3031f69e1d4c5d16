//! The applications by key, with an index of the nodes their runs are on
//! (instances, the old copies a rolling update replaces, init jobs). A
//! node's inventory (every few seconds from every node) asks which instances
//! the coordinator believes are on it, and the leader's dispatch asks for the
//! work of the nodes a commit changed; walking every instance of every
//! application for the first was 30 % of the leader's CPU at 1,000 nodes.
//!
//! The index stays exact without hooks at each place a run moves: mutable
//! access goes only through [`Apps::get_mut`], [`Apps::insert`] and
//! [`Apps::remove`] (there is no `DerefMut`), each of which marks the
//! application dirty; a lookup takes the indexed applications and the dirty
//! ones (callers filter on the runs themselves), and [`Apps::settle`] (after
//! every command) re-indexes only the dirty ones.
//!
//! Each indexed node also carries a signature of what the application adds
//! to that node's desired work (the fields `desired_work` reads), so that a
//! settle names only the nodes whose work it changed: an application of 50
//! instances spread over 50 nodes changes one node's work when one of its
//! instances reports, not fifty.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::entry::AppEntry;
use crate::model::names::AppKey;

/// The applications, by key.
#[derive(Debug, Clone, Default)]
pub(super) struct Apps {
    map: BTreeMap<AppKey, AppEntry>,
    /// Applications with a run on each node as of the last settle (a
    /// superset for dirty applications).
    by_node: FxHashMap<String, BTreeSet<AppKey>>,
    /// The nodes each application was indexed under at the last settle,
    /// with the signature of what it added to each node's desired work.
    nodes_of: FxHashMap<AppKey, BTreeMap<String, Signature>>,
    /// Applications handed out mutably since the last settle.
    dirty: BTreeSet<AppKey>,
}

impl std::ops::Deref for Apps {
    type Target = BTreeMap<AppKey, AppEntry>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Apps {
    /// The application `key`, to change (its instances may move).
    pub(super) fn get_mut(&mut self, key: &AppKey) -> Option<&mut AppEntry> {
        let e = self.map.get_mut(key)?;
        if !self.dirty.contains(key) {
            self.dirty.insert(key.clone());
        }
        Some(e)
    }

    /// Every application, to change its history alone (events, decisions,
    /// versions no run uses): not marked dirty, so that trimming the history
    /// does not re-index every application. Debug builds check the index
    /// after every command.
    pub(super) fn values_mut_history(&mut self) -> impl Iterator<Item = &mut AppEntry> {
        self.map.values_mut()
    }

    /// Application `key`, to change its history alone (see
    /// [`Apps::values_mut_history`]).
    pub(super) fn get_mut_history(&mut self, key: &AppKey) -> Option<&mut AppEntry> {
        self.map.get_mut(key)
    }

    /// Adds or replaces application `key`.
    pub(super) fn insert(&mut self, key: AppKey, entry: AppEntry) -> Option<AppEntry> {
        self.dirty.insert(key.clone());
        self.map.insert(key, entry)
    }

    /// Removes application `key`.
    pub(super) fn remove(&mut self, key: &AppKey) -> Option<AppEntry> {
        let e = self.map.remove(key)?;
        self.dirty.insert(key.clone());
        Some(e)
    }

    /// Applications that may have a run on `node`, in key order: those
    /// indexed there and those changed since the last settle.
    pub(super) fn touching<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a AppEntry> + 'a {
        let indexed = self.by_node.get(node).into_iter().flatten();
        let candidates: BTreeSet<&AppKey> = indexed.chain(&self.dirty).collect();
        candidates.into_iter().filter_map(|k| self.map.get(k))
    }

    /// Re-indexes the applications changed since the last settle; `changed`
    /// is called with every node whose desired work one of them changed.
    pub(super) fn settle(&mut self, mut changed: impl FnMut(&str)) {
        for key in std::mem::take(&mut self.dirty) {
            for node in self.reindex(key) {
                changed(&node);
            }
        }
    }

    /// Re-indexes `key`; returns the nodes where what it adds to the desired
    /// work changed.
    fn reindex(&mut self, key: AppKey) -> Vec<String> {
        let before = self.nodes_of.remove(&key).unwrap_or_default();
        for node in before.keys() {
            if let Some(apps) = self.by_node.get_mut(node) {
                apps.remove(&key);
                if apps.is_empty() {
                    self.by_node.remove(node);
                }
            }
        }
        let now = self.map.get(&key).map(signatures).unwrap_or_default();
        for node in now.keys() {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(key.clone());
        }
        let mut changed: Vec<String> = now
            .iter()
            .filter(|&(n, sig)| before.get(n).copied().flatten() != *sig)
            .map(|(n, _)| n.clone())
            .collect();
        changed.extend(
            before
                .into_iter()
                .filter(|(n, sig)| sig.is_some() && !now.contains_key(n))
                .map(|(n, _)| n),
        );
        if !now.is_empty() {
            self.nodes_of.insert(key, now);
        }
        changed
    }

    /// True when the index is what indexing every application afresh
    /// gives (checked after every command in debug builds).
    #[cfg(debug_assertions)]
    pub(super) fn index_matches_instances(&self) -> bool {
        let fresh = Apps::from(self.map.clone());
        fresh.by_node == self.by_node && fresh.nodes_of == self.nodes_of
    }
}

/// What an application adds to one node's desired work, hashed (`None`:
/// nothing, though a run of it is there).
type Signature = Option<u64>;

/// Every node one of `e`'s runs is on (instances, old copies a rolling update
/// replaces, init jobs), with the signature of what `e` adds to that node's
/// desired work: a hash of exactly the fields
/// [`super::Coordinator::desired_work`] reads (the launch follows from the
/// version's spec and the effective policy, which changes only with a new
/// policy evaluation).
fn signatures(e: &AppEntry) -> BTreeMap<String, Signature> {
    let mut out: BTreeMap<String, Signature> = BTreeMap::new();
    let desired = e.phase.holds_placements();
    // Items come in key order: each node's signature is a running hash.
    let mut add = |node: &String, item: Option<u64>| {
        let sig = match out.get_mut(node) {
            Some(sig) => sig,
            None => out.entry(node.clone()).or_default(),
        };
        if let Some(item) = item.filter(|_| desired) {
            *sig = Some(hash_of((*sig, item, e.evaluation)));
        }
    };
    for (k, i) in &e.runtime.instances {
        if let Some(old) = &i.replacing
            && let Some(node) = &old.node
        {
            let live = !old.stop_requested && !old.stopped;
            add(
                node,
                live.then(|| hash_of((0u8, k, old.version, old.placement))),
            );
        }
        if let Some(node) = &i.node {
            let item = match i.requested {
                Some((crate::reconcile::Requested::Start(attempt), _)) => {
                    let backoff =
                        (attempt > 1 && i.restarts > 0).then_some((i.since.0, i.restarts));
                    Some(hash_of((1u8, k, i.version, i.placement, attempt, backoff)))
                }
                _ => None,
            };
            add(node, item);
        }
    }
    for (jk, j) in &e.runtime.jobs {
        if let Some(node) = &j.node {
            let asked = j.requested_at.is_some() && j.attempts > 0;
            add(
                node,
                asked.then(|| hash_of((2u8, jk, j.version, j.run, j.attempts))),
            );
        }
    }
    out
}

/// A fast hash (not replicated, and nobody chooses its input).
fn hash_of(x: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    x.hash(&mut h);
    h.finish()
}

impl From<BTreeMap<AppKey, AppEntry>> for Apps {
    fn from(map: BTreeMap<AppKey, AppEntry>) -> Self {
        let dirty = map.keys().cloned().collect();
        let mut apps = Apps {
            map,
            dirty,
            ..Apps::default()
        };
        apps.settle(|_| {});
        apps
    }
}

/// Serialized as the map alone: the index is rebuilt on load, so snapshots
/// keep their format.
impl Serialize for Apps {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Apps {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(d).map(Apps::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::model::time::Timestamp;
    use crate::spec::{Document, Format};

    /// An application `a` with one instance placed on `n1`, from a real
    /// coordinator.
    fn entry() -> AppEntry {
        let yaml = "apiVersion: daros.io/v1\nkind: Node\nmetadata: {name: n1}\n\
                    spec: {capacity: {cpu: '4', memory: 8Gi}, runtimes: [process]}\n---\n\
                    apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: t}\nspec: {}\n---\n\
                    apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: a, tenant: t}\n\
                    spec:\n  workloads:\n    - {name: w, runtime: {type: process}, \
                    resources: {cpu: {request: 500m}, memory: {request: 64Mi}}}\n";
        let mut c = super::super::Coordinator::new();
        let (nodes, rest): (Vec<Document>, Vec<Document>) = crate::spec::parse(yaml, Format::Yaml)
            .unwrap()
            .into_iter()
            .partition(|d| matches!(d, Document::Node(_)));
        for d in nodes {
            if let Document::Node(node) = d {
                c.apply(Command::RegisterNode { node }, Timestamp(0))
                    .unwrap();
            }
        }
        let start = Command::Apply {
            documents: rest,
            start: true,
        };
        c.apply(start, Timestamp(1)).unwrap();
        let e = c.apps.values().next().unwrap().clone();
        assert_eq!(e.runtime.instances.len(), 1);
        e
    }

    fn named(e: &AppEntry, name: &str, node: Option<&str>) -> AppEntry {
        let mut e = e.clone();
        e.key = AppKey::new("t", name);
        for i in e.runtime.instances.values_mut() {
            i.node = node.map(str::to_string);
        }
        e
    }

    fn move_to(apps: &mut Apps, key: &AppKey, node: Option<&str>) {
        for i in apps.get_mut(key).unwrap().runtime.instances.values_mut() {
            i.node = node.map(str::to_string);
        }
    }

    /// Applications with an instance on `node`.
    fn names<'a>(apps: &'a Apps, node: &'a str) -> Vec<&'a str> {
        apps.touching(node)
            .filter(|e| {
                e.runtime
                    .instances
                    .values()
                    .any(|i| i.node.as_deref() == Some(node))
            })
            .map(|e| e.key.name.as_str())
            .collect()
    }

    fn settle(apps: &mut Apps) -> Vec<String> {
        let mut changed = Vec::new();
        apps.settle(|n| changed.push(n.to_string()));
        changed.sort();
        changed.dedup();
        changed
    }

    #[test]
    fn a_move_is_seen_before_and_after_the_settle() {
        let base = entry();
        let (a, b) = (AppKey::new("t", "a"), AppKey::new("t", "b"));
        let mut apps = Apps::default();
        apps.insert(a.clone(), named(&base, "a", Some("n1")));
        apps.insert(b.clone(), named(&base, "b", Some("n2")));
        assert_eq!(settle(&mut apps), ["n1", "n2"]);
        assert_eq!(names(&apps, "n1"), ["a"]);
        assert_eq!(names(&apps, "n2"), ["b"]);

        // b moves to n1: seen at once (dirty) and after the settle (indexed).
        move_to(&mut apps, &b, Some("n1"));
        assert_eq!(names(&apps, "n1"), ["a", "b"]);
        assert!(names(&apps, "n2").is_empty());
        assert_eq!(settle(&mut apps), ["n1", "n2"], "where b was and is");
        assert_eq!(names(&apps, "n1"), ["a", "b"]);
        assert!(names(&apps, "n2").is_empty());
        assert!(apps.index_matches_instances());

        // An instance that loses its node, and a removed application.
        move_to(&mut apps, &a, None);
        apps.remove(&b);
        assert!(names(&apps, "n1").is_empty());
        assert_eq!(settle(&mut apps), ["n1"]);
        assert!(names(&apps, "n1").is_empty());
        assert!(apps.by_node.is_empty() && apps.nodes_of.is_empty());
    }

    #[test]
    fn a_loaded_map_is_indexed() {
        let e = named(&entry(), "a", Some("n3"));
        let apps = Apps::from(BTreeMap::from([(e.key.clone(), e)]));
        assert!(apps.dirty.is_empty());
        assert_eq!(names(&apps, "n3"), ["a"]);
        assert!(names(&apps, "n1").is_empty());
        assert!(apps.index_matches_instances());
    }
}
