//! A member's description (its published key-values) at a version, the changes between two
//! versions, the notice that announces a new one, and the descriptions a member holds.
//!
//! SWIM itself only says who is up. What each member publishes travels beside it: a [`Notice`]
//! of the new version is the broadcast, carrying the change from the version before when it is
//! small; a member holding that version applies it, and whoever holds another asks the owner,
//! who answers with a [`Delta`] from the version the asker holds (or the whole
//! [`Description`]). A sha-256 of every (member, generation, version) held lets two members
//! compare their views in 32 bytes.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::identity::Role;
use crate::membership::member::keys::ROLE;

/// (generation, version): later restarts win, then later versions of one run.
pub type At = (u64, u64);

/// What one member publishes, at one version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Description {
    /// The member's node id.
    pub node: String,
    /// The member's generation (grows across its restarts).
    pub generation: u64,
    /// Grows with every change the member makes during one generation.
    pub version: u64,
    /// Key-values, each key once.
    pub kv: Vec<(String, String)>,
}

impl Description {
    /// Where this description stands.
    pub fn at(&self) -> At {
        (self.generation, self.version)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.kv
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key`; true if that changed anything.
    pub fn set(&mut self, key: &str, value: &str) -> bool {
        match self.kv.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) if v == value => false,
            Some((_, v)) => {
                *v = value.to_string();
                true
            }
            None => {
                self.kv.push((key.to_string(), value.to_string()));
                true
            }
        }
    }
}

/// The answer to an ask from a member holding version `from`: the keys changed since.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// Whose description.
    pub node: String,
    /// Its generation.
    pub generation: u64,
    /// The version this applies to.
    pub from: u64,
    /// The version it makes.
    pub to: u64,
    /// Keys set (new or changed).
    pub set: Vec<(String, String)>,
    /// Keys removed.
    pub removed: Vec<String>,
}

impl Delta {
    /// The changes from `old` to `new` (two versions of one member's description).
    pub fn between(old: &Description, new: &Description) -> Self {
        let set = new
            .kv
            .iter()
            .filter(|kv| !old.kv.contains(kv))
            .cloned()
            .collect();
        let removed = old
            .kv
            .iter()
            .filter(|(k, _)| !new.kv.iter().any(|(n, _)| n == k))
            .map(|(k, _)| k.clone())
            .collect();
        Self {
            node: new.node.clone(),
            generation: new.generation,
            from: old.version,
            to: new.version,
            set,
            removed,
        }
    }
}

/// The broadcast: a member's description changed to this version; ask `addr` for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Whose description.
    pub node: String,
    /// Its generation.
    pub generation: u64,
    /// Its new version.
    pub version: u64,
    /// Where to ask (the owner's gossip address).
    pub addr: SocketAddr,
    /// The change from the version before, when small ([`INLINE_CHANGE_MAX`]): a member
    /// holding that version applies it and asks nothing. The ask and its answer were two
    /// datagrams of ~95 bytes of headers each per change and member, two-thirds of what
    /// republishing cost (1.7× Serf's bytes, docs/benchmarks.md). Absent from older members'
    /// notices (see [`Notice::decode`]).
    pub change: Option<Change>,
}

/// The keys a new version set and removed, from version `from` (the one before).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The version this applies to.
    pub from: u64,
    /// Keys set (new or changed).
    pub set: Vec<(String, String)>,
    /// Keys removed.
    pub removed: Vec<String>,
}

/// The largest change carried in a notice (bytes of its encoding): a notice is re-sent by
/// every member several times, piggybacked on SWIM's packets, so a large one would crowd
/// them; larger changes are fetched by an ask.
pub const INLINE_CHANGE_MAX: usize = 160;

/// A notice as members before inline changes encoded it.
#[derive(Deserialize)]
struct NoticeV1 {
    node: String,
    generation: u64,
    version: u64,
    addr: SocketAddr,
}

impl Notice {
    /// Where the noticed description stands.
    pub fn at(&self) -> At {
        (self.generation, self.version)
    }

    /// The notice of `new`, carrying the change from `old` (the version before) when small.
    pub fn of(old: &Description, new: &Description, addr: SocketAddr) -> Self {
        let delta = Delta::between(old, new);
        let change = Change {
            from: delta.from,
            set: delta.set,
            removed: delta.removed,
        };
        let small = old.generation == new.generation
            && postcard::to_allocvec(&change).is_ok_and(|b| b.len() <= INLINE_CHANGE_MAX);
        Notice {
            node: new.node.clone(),
            generation: new.generation,
            version: new.version,
            addr,
            change: small.then_some(change),
        }
    }

    /// Decodes a notice, an older member's (without a change) too. Older members decode ours:
    /// postcard leaves the bytes after the fields they know unread.
    pub fn decode(data: &[u8]) -> Result<Self, postcard::Error> {
        postcard::from_bytes::<Notice>(data).or_else(|e| {
            let v1: NoticeV1 = postcard::from_bytes(data).map_err(|_| e)?;
            Ok(Notice {
                node: v1.node,
                generation: v1.generation,
                version: v1.version,
                addr: v1.addr,
                change: None,
            })
        })
    }

    /// The change as a delta to apply, if the notice carries one.
    pub fn delta(&self) -> Option<Delta> {
        self.change.as_ref().map(|c| Delta {
            node: self.node.clone(),
            generation: self.generation,
            from: c.from,
            to: self.version,
            set: c.set.clone(),
            removed: c.removed.clone(),
        })
    }
}

/// A description held, and when it last changed here (to forget members long gone).
#[derive(Clone, Debug)]
struct Held {
    description: Description,
    changed: Instant,
}

/// The descriptions one member holds: its own and every other member's newest.
#[derive(Debug, Default)]
pub struct Descriptions {
    held: HashMap<String, Held>,
    /// The nodes whose description says they are servers: a client agent looks
    /// for the leader among them every 50 ms while a write is in flight, and a
    /// scan of every description for that was a tenth of the CPU of 1,000
    /// simulated agents (issue 18's fleet bench).
    servers: BTreeSet<String>,
}

impl Descriptions {
    /// The description of `node`, if held.
    pub fn get(&self, node: &str) -> Option<&Description> {
        self.held.get(node).map(|h| &h.description)
    }

    /// Where the description of `node` stands, if held.
    pub fn at(&self, node: &str) -> Option<At> {
        self.get(node).map(Description::at)
    }

    /// How many are held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Every description held.
    pub fn iter(&self) -> impl Iterator<Item = &Description> {
        self.held.values().map(|h| &h.description)
    }

    /// The nodes whose description says they are servers, in node order.
    pub fn servers(&self) -> impl Iterator<Item = &String> {
        self.servers.iter()
    }

    /// Keeps the server index true to the description of `node`.
    fn index(&mut self, node: &str) {
        let server = self
            .get(node)
            .is_some_and(|d| d.get(ROLE) == Some(Role::Server.as_str()));
        if server {
            if !self.servers.contains(node) {
                self.servers.insert(node.to_string());
            }
        } else {
            self.servers.remove(node);
        }
    }

    /// Keeps `d` if it is newer than the one held; true if kept.
    pub fn take(&mut self, d: Description, now: Instant) -> bool {
        if self.at(&d.node).is_some_and(|held| held >= d.at()) {
            return false;
        }
        let node = d.node.clone();
        self.held.insert(
            node.clone(),
            Held {
                description: d,
                changed: now,
            },
        );
        self.index(&node);
        true
    }

    /// Applies `delta` if the description held is the version it starts from; true if applied.
    pub fn apply(&mut self, delta: Delta, now: Instant) -> bool {
        let Some(h) = self.held.get_mut(&delta.node) else {
            return false;
        };
        if h.description.at() != (delta.generation, delta.from) || delta.to <= delta.from {
            return false;
        }
        let d = &mut h.description;
        d.kv.retain(|(k, _)| !delta.removed.contains(k));
        for (k, v) in &delta.set {
            d.set(k, v);
        }
        d.version = delta.to;
        h.changed = now;
        self.index(&delta.node);
        true
    }

    /// Forgets the description of `node`.
    pub fn remove(&mut self, node: &str) {
        self.held.remove(node);
        self.servers.remove(node);
    }

    /// Nodes whose description last changed before `before`.
    pub fn unchanged_since(&self, before: Instant) -> Vec<String> {
        self.held
            .iter()
            .filter(|(_, h)| h.changed < before)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// (node, generation, version) of every description held, in node order.
    pub fn versions(&self) -> Vec<(String, u64, u64)> {
        let mut v: Vec<(String, u64, u64)> = self
            .iter()
            .map(|d| (d.node.clone(), d.generation, d.version))
            .collect();
        v.sort();
        v
    }

    /// SHA-256 of [`Self::versions`]: two members holding the same versions have the same digest.
    pub fn digest(&self) -> [u8; 32] {
        digest_of(
            self.versions()
                .iter()
                .map(|(node, generation, version)| (node.as_str(), *generation, *version)),
        )
    }

    /// The descriptions held newer than what `theirs` lists (node, generation, version).
    pub fn newer_than(&self, theirs: &[(String, u64, u64)]) -> Vec<Description> {
        let theirs: HashMap<&str, At> = theirs
            .iter()
            .map(|(n, g, v)| (n.as_str(), (*g, *v)))
            .collect();
        self.iter()
            .filter(|d| theirs.get(d.node.as_str()).is_none_or(|at| *at < d.at()))
            .cloned()
            .collect()
    }
}

/// SHA-256 of (node, two numbers) triples, in the order given: how two members compare what
/// they hold in 32 bytes.
pub fn digest_of<'a>(items: impl IntoIterator<Item = (&'a str, u64, u64)>) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for (node, a, b) in items {
        ctx.update(node.as_bytes());
        ctx.update(&[0]);
        ctx.update(&a.to_le_bytes());
        ctx.update(&b.to_le_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(node: &str, generation: u64, version: u64, kv: &[(&str, &str)]) -> Description {
        Description {
            node: node.into(),
            generation,
            version,
            kv: kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn newer_descriptions_replace_older_ones_never_the_reverse() {
        let now = Instant::now();
        let mut d = Descriptions::default();
        assert!(d.take(desc("a", 1, 2, &[("k", "v2")]), now));
        assert!(!d.take(desc("a", 1, 1, &[("k", "v1")]), now));
        assert_eq!(d.get("a").unwrap().get("k"), Some("v2"));
        // A restart (higher generation) wins whatever its version.
        assert!(d.take(desc("a", 2, 1, &[("k", "new")]), now));
        assert_eq!(d.at("a"), Some((2, 1)));
    }

    #[test]
    fn the_servers_are_the_members_whose_description_says_so() {
        let now = Instant::now();
        let mut d = Descriptions::default();
        d.take(desc("s2", 1, 1, &[("role", "server")]), now);
        d.take(desc("a1", 1, 1, &[("role", "client")]), now);
        d.take(desc("s1", 1, 1, &[("role", "server")]), now);
        let servers = |d: &Descriptions| d.servers().cloned().collect::<Vec<_>>();
        assert_eq!(servers(&d), ["s1", "s2"]);
        // A newer description, a delta and a removal each move a node in or out.
        d.take(desc("a1", 1, 2, &[("role", "server")]), now);
        assert_eq!(servers(&d), ["a1", "s1", "s2"]);
        let to_client = Delta::between(
            &desc("s2", 1, 1, &[("role", "server")]),
            &desc("s2", 1, 2, &[("role", "client")]),
        );
        assert!(d.apply(to_client, now));
        assert_eq!(servers(&d), ["a1", "s1"]);
        d.remove("s1");
        assert_eq!(servers(&d), ["a1"]);
    }

    #[test]
    fn a_delta_carries_only_the_changed_keys_and_rebuilds_the_new_version() {
        let now = Instant::now();
        let old = desc(
            "a",
            1,
            3,
            &[("role", "client"), ("usage", "1"), ("gone", "x")],
        );
        let new = desc(
            "a",
            1,
            5,
            &[("role", "client"), ("usage", "2"), ("added", "y")],
        );
        let delta = Delta::between(&old, &new);
        assert_eq!(
            delta.set,
            vec![("usage".into(), "2".into()), ("added".into(), "y".into())]
        );
        assert_eq!(delta.removed, vec!["gone".to_string()]);
        let mut d = Descriptions::default();
        d.take(old, now);
        assert!(d.apply(delta.clone(), now));
        let got = d.get("a").unwrap();
        assert_eq!(got.version, 5);
        for k in ["role", "usage", "added"] {
            assert_eq!(got.get(k), new.get(k), "{k}");
        }
        assert_eq!(got.get("gone"), None);
        // Applied again (or to any other version) it changes nothing.
        assert!(!d.apply(delta, now));
    }

    #[test]
    fn a_small_change_rides_in_the_notice_and_applies_to_the_version_before() {
        let now = Instant::now();
        let addr: SocketAddr = "127.0.0.1:7946".parse().unwrap();
        let v1 = desc("a", 1, 1, &[("role", "client"), ("usage", "1")]);
        let v2 = desc("a", 1, 2, &[("role", "client"), ("usage", "2")]);
        let n = Notice::of(&v1, &v2, addr);
        let bytes = postcard::to_allocvec(&n).unwrap();
        let back = Notice::decode(&bytes).unwrap();
        assert_eq!(back, n);
        let mut held = Descriptions::default();
        held.take(v1.clone(), now);
        assert!(held.apply(back.delta().expect("carried"), now));
        assert_eq!(held.get("a"), Some(&v2));
        // A member holding another version cannot use it (it asks instead).
        let mut other = Descriptions::default();
        other.take(desc("a", 1, 0, &[]), now);
        assert!(!other.apply(n.delta().unwrap(), now));
        // A large change is not carried; nor one across a restart.
        let big = desc("a", 1, 3, &[("usage", &"x".repeat(INLINE_CHANGE_MAX))]);
        assert_eq!(Notice::of(&v2, &big, addr).change, None);
        let restarted = desc("a", 2, 1, &[("usage", "3")]);
        assert_eq!(Notice::of(&v2, &restarted, addr).change, None);
    }

    #[test]
    fn notices_of_older_and_newer_members_read_both_ways() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Old {
            node: String,
            generation: u64,
            version: u64,
            addr: SocketAddr,
        }
        let addr: SocketAddr = "10.0.0.1:7946".parse().unwrap();
        let old = Old {
            node: "a".into(),
            generation: 1,
            version: 4,
            addr,
        };
        let n = Notice::decode(&postcard::to_allocvec(&old).unwrap()).unwrap();
        assert_eq!((n.at(), n.addr, n.change), ((1, 4), addr, None));
        // An older member reads ours, change and all, as the notice it knows.
        let ours = Notice::of(
            &desc("a", 1, 4, &[("k", "1")]),
            &desc("a", 1, 5, &[("k", "2")]),
            addr,
        );
        let read: Old = postcard::from_bytes(&postcard::to_allocvec(&ours).unwrap()).unwrap();
        assert_eq!((read.version, read.addr), (5, addr));
    }

    #[test]
    fn the_digest_differs_exactly_when_the_versions_differ() {
        let now = Instant::now();
        let mut a = Descriptions::default();
        let mut b = Descriptions::default();
        a.take(desc("x", 1, 1, &[]), now);
        a.take(desc("y", 1, 4, &[("k", "v")]), now);
        b.take(desc("y", 1, 4, &[("k", "other bytes, same version")]), now);
        b.take(desc("x", 1, 1, &[]), now);
        assert_eq!(a.digest(), b.digest());
        b.take(desc("y", 1, 5, &[]), now);
        assert_ne!(a.digest(), b.digest());
        // What b holds newer than a: y alone.
        let newer = b.newer_than(&a.versions());
        assert_eq!(newer.len(), 1);
        assert_eq!(newer[0].at(), (1, 5));
        assert!(a.newer_than(&b.versions()).is_empty());
    }
}
