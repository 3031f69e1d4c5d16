//! Cluster PKI: the cluster CA, join tokens, node credentials and certificate identities.

mod ca;
mod cert;
mod creds;
mod files;
pub(crate) mod hex;
mod sealer;
mod token;

pub use ca::{CaBundle, ClusterCa};
pub use cert::{fingerprint, identity_from_cert};
pub use creds::NodeCredentials;
pub use sealer::{SecretSealer, UnsealError};
pub use token::{JoinToken, TokenError};

use std::path::PathBuf;

/// Errors of the cluster PKI.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Key or certificate generation or signing failed.
    #[error("certificate operation failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file has invalid content.
    #[error("{path}: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A certificate lacks the D-AROS identity or has an inconsistent one.
    #[error("certificate identity: {0}")]
    Identity(String),
    /// The join token is for another cluster CA.
    #[error("join token is for CA {token} but this cluster's CA is {ours}")]
    WrongCa {
        /// Fingerprint in the token.
        token: String,
        /// Fingerprint of our CA.
        ours: String,
    },
    /// The join token secret does not match.
    #[error("join token secret is not valid for role {0}")]
    BadSecret(crate::identity::Role),
    /// The CSR is malformed, badly signed, or names another node.
    #[error("certificate signing request: {0}")]
    Csr(String),
    /// This node does not hold the CA key (only server agents do).
    #[error("this node does not hold the cluster CA key (only server agents do)")]
    NoCaKey,
}
