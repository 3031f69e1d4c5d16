//! Sealing of gossip datagrams with the cluster key (XChaCha20-Poly1305, random nonce per
//! datagram). Chitchat has no authentication upstream; an outsider without the key can neither
//! read nor inject gossip. Anything that does not open is dropped and counted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};

/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
const MAGIC: u8 = 0x44; // 'D'
const VERSION: u8 = 1;
const AAD_LEN: usize = 20;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Bytes a sealed datagram adds to its plaintext.
pub const OVERHEAD: usize = AAD_LEN + NONCE_LEN + TAG_LEN;
const MAX_FRAGMENTS: u8 = 4;
/// Datagrams stamped further than this from our clock are refused (limits replay).
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(120);
const REASSEMBLY_TTL: Duration = Duration::from_secs(5);
const REASSEMBLY_SLOTS: usize = 64;

/// Errors of the gossip key and of opening datagrams.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// The gossip key file or field is not 64 hex characters.
    #[error("gossip key: expected 64 hex characters (256 bits), got {0} characters")]
    KeyLength(usize),
    /// The gossip key contains a non-hex character.
    #[error("gossip key: not hexadecimal")]
    KeyHex,
    /// Datagram shorter than the header, wrong magic or version.
    #[error("malformed datagram: {0}")]
    Malformed(&'static str),
    /// Sealed with a key epoch this node does not hold.
    #[error("unknown key epoch {0}")]
    UnknownEpoch(u32),
    /// Authentication tag did not verify: wrong key or tampered datagram.
    #[error("datagram does not authenticate")]
    Auth,
    /// Timestamp too far from our clock.
    #[error("datagram timestamp {skew_ms} ms away from local clock")]
    Stale {
        /// Distance from our clock.
        skew_ms: u64,
    },
    /// Plaintext too large even for the fragment limit.
    #[error("message of {0} bytes exceeds the gossip size limit")]
    TooLarge(usize),
}

/// A 256-bit cluster gossip key with its epoch (key id), for rotation.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GossipKey {
    /// Key id carried in every datagram header.
    pub epoch: u32,
    /// Hex of the 32 key bytes.
    #[serde(with = "hex32")]
    pub key: [u8; 32],
}

impl std::fmt::Debug for GossipKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GossipKey(epoch {}, <secret>)", self.epoch)
    }
}

impl GossipKey {
    /// A fresh random key.
    pub fn generate(epoch: u32) -> Self {
        let k = XChaCha20Poly1305::generate_key(&mut OsRng);
        let mut key = [0u8; 32];
        key.copy_from_slice(&k);
        Self { epoch, key }
    }
}

pub(crate) mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(k: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::pki::hex::encode(k))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let s = String::deserialize(d)?;
        crate::pki::hex::decode32(&s).map_err(serde::de::Error::custom)
    }
}

/// Counters of a sealing transport (also the source of bandwidth figures).
#[derive(Debug, Default)]
pub struct SealStats {
    /// Datagrams sent.
    pub datagrams_sent: AtomicU64,
    /// Bytes sent on the wire (sealed).
    pub bytes_sent: AtomicU64,
    /// Datagrams received (before opening).
    pub datagrams_received: AtomicU64,
    /// Bytes received on the wire.
    pub bytes_received: AtomicU64,
    /// Datagrams that opened.
    pub opened: AtomicU64,
    /// Refused: did not authenticate (wrong key, tampering, outsider).
    pub rejected_auth: AtomicU64,
    /// Refused: unknown key epoch.
    pub rejected_epoch: AtomicU64,
    /// Refused: timestamp outside the allowed skew.
    pub rejected_stale: AtomicU64,
    /// Refused: malformed header.
    pub rejected_malformed: AtomicU64,
    /// Opened but the message did not decode (another cluster, or another darosd version).
    pub rejected_decode: AtomicU64,
}

impl SealStats {
    /// Every refused datagram, whatever the reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected_auth.load(Ordering::Relaxed)
            + self.rejected_epoch.load(Ordering::Relaxed)
            + self.rejected_stale.load(Ordering::Relaxed)
            + self.rejected_malformed.load(Ordering::Relaxed)
            + self.rejected_decode.load(Ordering::Relaxed)
    }

    pub(crate) fn count_reject(&self, e: &SealError) {
        let c = match e {
            SealError::Auth => &self.rejected_auth,
            SealError::UnknownEpoch(_) => &self.rejected_epoch,
            SealError::Stale { .. } => &self.rejected_stale,
            _ => &self.rejected_malformed,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The keys a node holds: one primary used to seal, all of them accepted to open (rotation).
#[derive(Clone)]
pub struct Keyring {
    primary: u32,
    ciphers: Arc<Vec<(u32, XChaCha20Poly1305)>>,
}

impl Keyring {
    /// A keyring that seals with `primary` and also opens with `older`.
    pub fn new(primary: &GossipKey, older: &[GossipKey]) -> Self {
        let mut ciphers = vec![(primary.epoch, XChaCha20Poly1305::new(&primary.key.into()))];
        for k in older {
            if k.epoch != primary.epoch {
                ciphers.push((k.epoch, XChaCha20Poly1305::new(&k.key.into())));
            }
        }
        Self {
            primary: primary.epoch,
            ciphers: Arc::new(ciphers),
        }
    }

    fn cipher(&self, epoch: u32) -> Option<&XChaCha20Poly1305> {
        self.ciphers
            .iter()
            .find(|(e, _)| *e == epoch)
            .map(|(_, c)| c)
    }

    /// Seals one message into one or more datagrams (fragments only above the UDP limit).
    pub fn seal(&self, plaintext: &[u8]) -> Result<Vec<Vec<u8>>, SealError> {
        let chunk = MAX_DATAGRAM - OVERHEAD;
        let count = plaintext.len().div_ceil(chunk).max(1);
        if count > usize::from(MAX_FRAGMENTS) {
            return Err(SealError::TooLarge(plaintext.len()));
        }
        let cipher = self
            .cipher(self.primary)
            .ok_or(SealError::UnknownEpoch(self.primary))?;
        let msg_id: u32 = rand::random();
        let sent_at = unix_ms();
        let mut out = Vec::with_capacity(count);
        for (idx, part) in plaintext
            .chunks(chunk)
            .chain(
                // an empty message still yields one datagram
                std::iter::once(&[][..]).take(usize::from(plaintext.is_empty())),
            )
            .enumerate()
        {
            let mut dg = Vec::with_capacity(part.len() + OVERHEAD);
            dg.push(MAGIC);
            dg.push(VERSION);
            dg.extend_from_slice(&self.primary.to_be_bytes());
            dg.extend_from_slice(&sent_at.to_be_bytes());
            dg.extend_from_slice(&msg_id.to_be_bytes());
            dg.push(idx as u8);
            dg.push(count as u8);
            let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
            let ct = cipher
                .encrypt(
                    &nonce,
                    Payload {
                        msg: part,
                        aad: &dg[..AAD_LEN],
                    },
                )
                .map_err(|_| SealError::Auth)?;
            dg.extend_from_slice(&nonce);
            dg.extend_from_slice(&ct);
            out.push(dg);
        }
        Ok(out)
    }

    /// Opens one datagram: returns its fragment header and plaintext.
    pub fn open(&self, datagram: &[u8]) -> Result<Fragment, SealError> {
        if datagram.len() < OVERHEAD {
            return Err(SealError::Malformed("shorter than the sealed header"));
        }
        if datagram[0] != MAGIC {
            return Err(SealError::Malformed("bad magic"));
        }
        if datagram[1] != VERSION {
            return Err(SealError::Malformed("unsupported seal version"));
        }
        let be32 = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&datagram[r]);
            u32::from_be_bytes(b)
        };
        let epoch = be32(2..6);
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&datagram[6..14]);
        let sent_at = u64::from_be_bytes(ts);
        let msg_id = be32(14..18);
        let index = datagram[18];
        let count = datagram[19];
        if count == 0 || count > MAX_FRAGMENTS || index >= count {
            return Err(SealError::Malformed("bad fragment header"));
        }
        let cipher = self.cipher(epoch).ok_or(SealError::UnknownEpoch(epoch))?;
        let nonce = XNonce::from_slice(&datagram[AAD_LEN..AAD_LEN + NONCE_LEN]);
        let plaintext = cipher
            .decrypt(
                nonce,
                Payload {
                    msg: &datagram[AAD_LEN + NONCE_LEN..],
                    aad: &datagram[..AAD_LEN],
                },
            )
            .map_err(|_| SealError::Auth)?;
        // Only an authenticated timestamp is worth checking.
        let skew_ms = unix_ms().abs_diff(sent_at);
        if skew_ms > MAX_CLOCK_SKEW.as_millis() as u64 {
            return Err(SealError::Stale { skew_ms });
        }
        Ok(Fragment {
            msg_id,
            index,
            count,
            plaintext,
        })
    }
}

/// One opened datagram.
#[derive(Debug)]
pub struct Fragment {
    /// Message the fragment belongs to.
    pub msg_id: u32,
    /// Position in the message.
    pub index: u8,
    /// Number of fragments of the message.
    pub count: u8,
    /// Authenticated plaintext.
    pub plaintext: Vec<u8>,
}

/// Reassembles fragmented messages; bounded in entries and age.
#[derive(Default)]
pub struct Reassembly {
    partial: HashMap<(SocketAddr, u32), Partial>,
}

type Partial = (Instant, Vec<Option<Vec<u8>>>);

impl Reassembly {
    /// Adds a fragment; returns the whole message once complete.
    pub fn push(&mut self, from: SocketAddr, f: Fragment) -> Option<Vec<u8>> {
        if f.count == 1 {
            return Some(f.plaintext);
        }
        let now = Instant::now();
        self.partial
            .retain(|_, (t, _)| now.duration_since(*t) < REASSEMBLY_TTL);
        if self.partial.len() >= REASSEMBLY_SLOTS {
            let oldest = self
                .partial
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.partial.remove(&k);
            }
        }
        let key = (from, f.msg_id);
        let entry = self
            .partial
            .entry(key)
            .or_insert_with(|| (now, vec![None; usize::from(f.count)]));
        if entry.1.len() != usize::from(f.count) {
            self.partial.remove(&key);
            return None;
        }
        entry.1[usize::from(f.index)] = Some(f.plaintext);
        if entry.1.iter().all(Option::is_some) {
            let (_, parts) = self.partial.remove(&key)?;
            Some(parts.into_iter().flatten().flatten().collect())
        } else {
            None
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "10.0.0.1:7000".parse().unwrap()
    }

    #[test]
    fn seal_open_round_trip() {
        let ring = Keyring::new(&GossipKey::generate(1), &[]);
        let dgs = ring.seal(b"hello gossip").unwrap();
        assert_eq!(dgs.len(), 1);
        assert_eq!(dgs[0].len(), 12 + OVERHEAD);
        let f = ring.open(&dgs[0]).unwrap();
        assert_eq!(f.plaintext, b"hello gossip");
    }

    #[test]
    fn wrong_key_is_refused() {
        let a = Keyring::new(&GossipKey::generate(1), &[]);
        let b = Keyring::new(&GossipKey::generate(1), &[]);
        let dg = a.seal(b"secret").unwrap().remove(0);
        assert_eq!(b.open(&dg).unwrap_err(), SealError::Auth);
    }

    #[test]
    fn tampering_is_refused_in_header_and_body() {
        let ring = Keyring::new(&GossipKey::generate(7), &[]);
        let dg = ring.seal(b"payload").unwrap().remove(0);
        for pos in [10, 18, AAD_LEN + 3, dg.len() - 1] {
            let mut bad = dg.clone();
            bad[pos] ^= 1;
            assert!(ring.open(&bad).is_err(), "flip at {pos} accepted");
        }
        let mut bad = dg.clone();
        bad[5] ^= 1; // epoch
        assert!(matches!(ring.open(&bad), Err(SealError::UnknownEpoch(_))));
    }

    #[test]
    fn plaintext_chitchat_is_refused() {
        let ring = Keyring::new(&GossipKey::generate(1), &[]);
        assert!(
            ring.open(b"\x00\x00junk that is long enough to pass the length check..........")
                .is_err()
        );
    }

    #[test]
    fn rotation_accepts_old_epoch() {
        let old = GossipKey::generate(1);
        let new = GossipKey::generate(2);
        let sender = Keyring::new(&old, &[]);
        let receiver = Keyring::new(&new, std::slice::from_ref(&old));
        let dg = sender.seal(b"x").unwrap().remove(0);
        assert_eq!(receiver.open(&dg).unwrap().plaintext, b"x");
    }

    #[test]
    fn large_messages_fragment_and_reassemble() {
        let ring = Keyring::new(&GossipKey::generate(1), &[]);
        let msg: Vec<u8> = (0..MAX_DATAGRAM + 1000).map(|i| i as u8).collect();
        let dgs = ring.seal(&msg).unwrap();
        assert_eq!(dgs.len(), 2);
        assert!(dgs.iter().all(|d| d.len() <= MAX_DATAGRAM));
        let mut r = Reassembly::default();
        assert!(r.push(addr(), ring.open(&dgs[1]).unwrap()).is_none());
        assert_eq!(r.push(addr(), ring.open(&dgs[0]).unwrap()).unwrap(), msg);
        assert!(ring.seal(&vec![0u8; MAX_DATAGRAM * 5]).is_err());
    }

    #[test]
    fn key_serializes_as_hex_and_debug_hides_it() {
        let k = GossipKey::generate(3);
        let j = serde_json::to_string(&k).unwrap();
        let back: GossipKey = serde_json::from_str(&j).unwrap();
        assert_eq!(back, k);
        assert!(!format!("{k:?}").contains(&crate::pki::hex::encode(&k.key)));
    }
}
