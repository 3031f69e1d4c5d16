//! Work a node already holds is confirmed, not sent again: the leader sends a
//! node its whole work with a digest of it; its periodic round (and a new
//! leader's first) then asks only whether the node holds work of that digest,
//! and sends the whole work to a node that does not (restarted, missed a send,
//! older agent). At 500 nodes × 100 instances the periodic whole re-send was
//! 50,000 instances every 5 s, and a new leader's first rounds could not get
//! through it (issue 18's fleet bench: 13 s rounds, most sends timing out).

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::work::FenceToken;

/// RPC method asking a node whether it holds the work of a digest (fenced like
/// the work itself: a node that answers yes has taken the caller's term).
pub const SAME_WORK_METHOD: &str = "control.work.same";

/// Field of a work send's body carrying the leader's [`WorkDigest`] of it.
pub const DIGEST_FIELD: &str = "digest";

/// SHA-256 of a node's desired work as the leader serialized it (hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkDigest(String);

impl WorkDigest {
    /// The digest of `work`'s JSON form (maps in it are ordered, so every
    /// leader of the same version computes the same one); `None` if it does
    /// not serialize.
    pub fn of<T: Serialize>(work: &T) -> Option<Self> {
        let bytes = serde_json::to_vec(work).ok()?;
        let d = ring::digest::digest(&ring::digest::SHA256, &bytes);
        Some(Self(
            d.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
        ))
    }
}

/// The question of [`SAME_WORK_METHOD`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SameWork {
    /// The node asked.
    pub node: String,
    /// The digest of the work the leader wants it to hold.
    pub digest: WorkDigest,
}

/// The answer of [`SAME_WORK_METHOD`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SameWorkAnswer {
    /// The node holds work of that digest (and took the fence).
    pub same: bool,
}

/// What a node remembers of the newest work it accepted: its fence and the
/// leader's digest. In memory only: a restarted agent holds nothing and is
/// sent its work whole.
#[derive(Debug, Default)]
pub struct HeldWork(Mutex<Option<(FenceToken, Option<WorkDigest>)>>);

impl HeldWork {
    /// The executor accepted work at `fence` with `digest` (none from a leader
    /// that sends none). Work older than the newest remembered does not
    /// replace it: two sends finishing out of order leave the newer one.
    pub fn accepted(&self, fence: FenceToken, digest: Option<WorkDigest>) {
        if let Ok(mut g) = self.0.lock()
            && g.as_ref().is_none_or(|(f, _)| *f <= fence)
        {
            *g = Some((fence, digest));
        }
    }

    /// Whether the newest accepted work has `digest`; if so, `fence` (newer)
    /// becomes its fence.
    pub fn holds(&self, digest: &WorkDigest, fence: FenceToken) -> bool {
        let Ok(mut g) = self.0.lock() else {
            return false;
        };
        match g.as_mut() {
            Some((f, Some(d))) if d == digest => {
                *f = (*f).max(fence);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fence(term: u64, index: u64) -> FenceToken {
        FenceToken { term, index }
    }

    #[test]
    fn equal_work_has_equal_digests_and_any_change_another() {
        let a = WorkDigest::of(&serde_json::json!({"instances": [{"attempt": 1}]})).unwrap();
        let b = WorkDigest::of(&serde_json::json!({"instances": [{"attempt": 1}]})).unwrap();
        let c = WorkDigest::of(&serde_json::json!({"instances": [{"attempt": 2}]})).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.0.len(), 64);
    }

    #[test]
    fn a_node_holds_only_the_newest_work_it_accepted() {
        let held = HeldWork::default();
        let (a, b) = (WorkDigest::of(&"a").unwrap(), WorkDigest::of(&"b").unwrap());
        assert!(!held.holds(&a, fence(1, 1)), "a fresh agent holds nothing");
        held.accepted(fence(1, 10), Some(a.clone()));
        assert!(held.holds(&a, fence(1, 11)));
        assert!(!held.holds(&b, fence(1, 11)));
        // The newer work finished first; the older one's late record is ignored.
        held.accepted(fence(1, 20), Some(b.clone()));
        held.accepted(fence(1, 15), Some(a.clone()));
        assert!(held.holds(&b, fence(2, 1)), "a new leader's term confirms");
        assert!(!held.holds(&a, fence(2, 1)));
        // Work from a leader that sends no digest: nothing can be confirmed.
        held.accepted(fence(2, 5), None);
        assert!(!held.holds(&b, fence(2, 6)));
    }
}
