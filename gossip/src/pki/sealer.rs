//! Sealing of Secret values for the replicated state: XChaCha20-Poly1305
//! under [`super::ClusterCa::secret_objects_key`], a random 192-bit nonce per
//! value, and additional data that binds a value to its tenant, secret and
//! key (a sealed value copied elsewhere does not open). Text form:
//! `v1:` + hex(nonce ‖ ciphertext ‖ tag).

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::hex;

const PREFIX: &str = "v1:";
const NONCE_LEN: usize = 24;

/// Why a sealed value did not open.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnsealError {
    /// Not `v1:` followed by hex of at least a nonce and a tag.
    #[error("not a sealed value (expected v1: and hex)")]
    Malformed,
    /// Wrong key, wrong tenant/secret/key, or altered.
    #[error("does not open with this cluster's key for this secret and key")]
    Auth,
}

/// Seals and opens Secret values; held by server agents only.
pub struct SecretSealer {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for SecretSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretSealer(<key>)")
    }
}

impl SecretSealer {
    /// A sealer with `key`.
    pub fn new(key: &[u8; 32]) -> Self {
        Self {
            cipher: XChaCha20Poly1305::new(key.into()),
        }
    }

    /// Seals `plaintext` bound to `aad`.
    pub fn seal(&self, aad: &str, plaintext: &str) -> String {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        // Encryption with a valid key and nonce only fails past 256 GiB.
        let ct = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: aad.as_bytes(),
                },
            )
            .unwrap_or_default();
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&ct);
        format!("{PREFIX}{}", hex::encode(&bytes))
    }

    /// Opens a value sealed for `aad`.
    pub fn open(&self, aad: &str, sealed: &str) -> Result<String, UnsealError> {
        let body = sealed.strip_prefix(PREFIX).ok_or(UnsealError::Malformed)?;
        let bytes = hex::decode(body).ok_or(UnsealError::Malformed)?;
        if bytes.len() < NONCE_LEN + 16 {
            return Err(UnsealError::Malformed);
        }
        let (nonce, ct) = bytes.split_at(NONCE_LEN);
        let pt = self
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| UnsealError::Auth)?;
        String::from_utf8(pt).map_err(|_| UnsealError::Auth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_open_only_with_the_key_and_for_the_same_place() {
        let s = SecretSealer::new(&[7; 32]);
        let a = s.seal("acme/db/password", "hunter2");
        let b = s.seal("acme/db/password", "hunter2");
        assert_ne!(a, b, "a fresh nonce per value");
        assert!(!a.contains("hunter2"));
        assert_eq!(s.open("acme/db/password", &a).unwrap(), "hunter2");
        assert_eq!(s.open("acme/db/user", &a), Err(UnsealError::Auth));
        assert_eq!(
            SecretSealer::new(&[8; 32]).open("acme/db/password", &a),
            Err(UnsealError::Auth)
        );
        assert_eq!(
            s.open("acme/db/password", "v1:zz"),
            Err(UnsealError::Malformed)
        );
        assert_eq!(
            s.open("acme/db/password", "hunter2"),
            Err(UnsealError::Malformed)
        );
        let mut t = a.clone().into_bytes();
        let last = t.len() - 1;
        t[last] = if t[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            s.open("acme/db/password", &String::from_utf8(t).unwrap()),
            Err(UnsealError::Auth)
        );
    }
}
