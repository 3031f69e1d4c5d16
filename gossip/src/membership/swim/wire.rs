//! What members send each other inside the sealed datagram: one postcard-encoded [`Envelope`].

use serde::{Deserialize, Serialize};

use super::description::{Delta, Description};
use super::id::SwimId;

/// One message, tagged with the cluster it belongs to.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// First four bytes of the SHA-256 of the cluster id: members of another cluster that
    /// share the key (a copied config) are refused, as chitchat's cluster id did.
    pub cluster: [u8; 4],
    /// The message.
    pub message: Message,
}

/// The kinds of message.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// A SWIM packet (probes, acks, membership updates and notices piggybacked), foca's encoding.
    Swim(Vec<u8>),
    /// "Send me your description; I hold this version of it" (None: none).
    Ask(Option<(u64, u64)>),
    /// A whole description (the answer to an ask, or to a sync).
    Tell(Description),
    /// The keys changed since the version an ask said it holds.
    Delta(Delta),
    /// The 30 s pull: SHA-256 of every (member, generation, version) the sender holds, and of
    /// every member it sees up (node, generation, renewal).
    SyncDigest {
        /// Of the descriptions' versions.
        descriptions: [u8; 32],
        /// Of the members up.
        members: [u8; 32],
    },
    /// Part of the sender's SWIM membership (memberlist's push-pull, only where the member
    /// digests differ); `answer`: send yours back.
    Roster {
        /// Members with their incarnation and state.
        members: Vec<foca::Member<SwimId>>,
        /// Whether the receiver should answer with its own.
        answer: bool,
    },
    /// "Our views differ: send me your versions" (the answer to a differing digest).
    SyncPlease,
    /// Every (member, generation, version) the sender holds; the answer is a tell of each newer.
    Sync(Vec<(String, u64, u64)>),
}

/// The cluster tag of `cluster_id`.
pub fn cluster_tag(cluster_id: &str) -> [u8; 4] {
    let d = ring::digest::digest(&ring::digest::SHA256, cluster_id.as_bytes());
    let mut tag = [0u8; 4];
    tag.copy_from_slice(&d.as_ref()[..4]);
    tag
}

/// Errors decoding a message.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Not a message of this protocol (another version of darosd, or garbage).
    #[error("not a membership message: {0}")]
    Decode(#[from] postcard::Error),
    /// A member of another cluster.
    #[error("message of another cluster")]
    OtherCluster,
}

/// Encodes `message` for the cluster tagged `cluster`.
pub fn encode(cluster: [u8; 4], message: Message) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(&Envelope { cluster, message })
}

/// Decodes a message of the cluster tagged `cluster`.
pub fn decode(cluster: [u8; 4], bytes: &[u8]) -> Result<Message, WireError> {
    let e: Envelope = postcard::from_bytes(bytes)?;
    if e.cluster != cluster {
        return Err(WireError::OtherCluster);
    }
    Ok(e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_other_clusters_are_refused() {
        let tag = cluster_tag("prod");
        let m = Message::Ask(Some((3, 7)));
        let bytes = encode(tag, m).unwrap();
        assert!(bytes.len() < 16, "an ask is small: {} bytes", bytes.len());
        assert_eq!(decode(tag, &bytes).unwrap(), Message::Ask(Some((3, 7))));
        assert!(matches!(
            decode(cluster_tag("staging"), &bytes),
            Err(WireError::OtherCluster)
        ));
        assert!(matches!(decode(tag, &[0xff; 3]), Err(WireError::Decode(_))));
    }
}
