//! Join tokens: a secret that admits a node in one role, plus the CA fingerprint so the joining
//! node can verify it talks to the real cluster (as kubeadm's discovery hash does).

use std::fmt;
use std::str::FromStr;

use super::hex;
use crate::identity::Role;

const PREFIX: &str = "daros1";

/// Why a join token text was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Not four dot-separated fields.
    #[error(
        "join token: expected \"daros1.<role>.<secret>.<ca-sha256>\" (4 fields separated by '.'), got {0} fields"
    )]
    Fields(usize),
    /// First field is not the version prefix.
    #[error("join token: field 1 (version) must be \"daros1\", got {0:?}")]
    Version(String),
    /// Second field is not a role.
    #[error("join token: field 2 (role) must be \"server\" or \"client\", got {0:?}")]
    Role(String),
    /// Third field is not 64 hex characters.
    #[error("join token: field 3 (secret) must be 64 hex characters")]
    Secret,
    /// Fourth field is not 64 hex characters.
    #[error("join token: field 4 (CA fingerprint) must be 64 hex characters")]
    Fingerprint,
}

/// A join token (`daros1.<role>.<secret>.<ca-sha256>`).
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// Role the token admits.
    pub role: Role,
    /// Shared secret checked by the server agents.
    pub secret: [u8; 32],
    /// SHA-256 of the cluster CA certificate (DER).
    pub ca_fingerprint: [u8; 32],
}

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "JoinToken({}, <secret>, ca {})",
            self.role,
            hex::encode(&self.ca_fingerprint)
        )
    }
}

impl fmt::Display for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}.{}.{}.{}",
            self.role,
            hex::encode(&self.secret),
            hex::encode(&self.ca_fingerprint)
        )
    }
}

impl FromStr for JoinToken {
    type Err = TokenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.trim().split('.').collect();
        if parts.len() != 4 {
            return Err(TokenError::Fields(parts.len()));
        }
        if parts[0] != PREFIX {
            return Err(TokenError::Version(parts[0].to_string()));
        }
        let role = parts[1]
            .parse::<Role>()
            .map_err(|_| TokenError::Role(parts[1].to_string()))?;
        let secret = hex::decode32(parts[2]).map_err(|_| TokenError::Secret)?;
        let ca_fingerprint = hex::decode32(parts[3]).map_err(|_| TokenError::Fingerprint)?;
        Ok(Self {
            role,
            secret,
            ca_fingerprint,
        })
    }
}

/// Compares secrets in constant time.
pub(crate) fn secrets_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_field_errors() {
        let t = JoinToken {
            role: Role::Client,
            secret: [7; 32],
            ca_fingerprint: [9; 32],
        };
        let text = t.to_string();
        assert_eq!(text.parse::<JoinToken>().unwrap(), t);
        assert!(!format!("{t:?}").contains(&hex::encode(&[7; 32])));
        assert_eq!("a.b".parse::<JoinToken>(), Err(TokenError::Fields(2)));
        assert_eq!(
            text.replacen("daros1", "daros2", 1).parse::<JoinToken>(),
            Err(TokenError::Version("daros2".into()))
        );
        assert_eq!(
            text.replacen("client", "admin", 1).parse::<JoinToken>(),
            Err(TokenError::Role("admin".into()))
        );
        let mut p: Vec<String> = text.split('.').map(String::from).collect();
        p[2] = "xyz".into();
        assert_eq!(p.join(".").parse::<JoinToken>(), Err(TokenError::Secret));
        p[2] = hex::encode(&[1; 32]);
        p[3] = "00".into();
        assert_eq!(
            p.join(".").parse::<JoinToken>(),
            Err(TokenError::Fingerprint)
        );
    }

    #[test]
    fn constant_time_compare() {
        assert!(secrets_equal(&[1; 32], &[1; 32]));
        let mut b = [1; 32];
        b[31] = 2;
        assert!(!secrets_equal(&[1; 32], &b));
    }
}
