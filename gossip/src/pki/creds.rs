//! A node's own credentials: CA certificate, node certificate and key, gossip keys.

use std::path::Path;

use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

use super::files::{check_private, read_file, write_file};
use super::{PkiError, identity_from_cert};
use crate::identity::{NodeId, Role};
use crate::membership::GossipKey;

const CA_CERT: &str = "ca.crt";
const NODE_CERT: &str = "node.crt";
const NODE_KEY: &str = "node.key";
const NODE_META: &str = "node.json";

#[derive(Serialize, Deserialize)]
struct NodeMeta {
    cluster_id: String,
    node_id: NodeId,
    role: Role,
    gossip_keys: Vec<GossipKey>,
}

/// Everything a node needs to take part in the mesh.
#[derive(Clone)]
pub struct NodeCredentials {
    /// Cluster id (also in the certificate URI SAN).
    pub cluster_id: String,
    /// This node's id.
    pub node_id: NodeId,
    /// This node's role.
    pub role: Role,
    /// Cluster CA certificate (PEM).
    pub ca_cert_pem: String,
    /// Node certificate (PEM).
    pub cert_pem: String,
    /// Node private key (PEM).
    pub key_pem: String,
    /// Gossip keys, primary first.
    pub gossip_keys: Vec<GossipKey>,
}

impl std::fmt::Debug for NodeCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NodeCredentials({}/{} {})",
            self.cluster_id, self.node_id, self.role
        )
    }
}

impl NodeCredentials {
    /// A fresh key pair and a CSR for it (the key never leaves the node).
    pub fn new_key_and_csr(node: &NodeId) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate()?;
        let csr = CertificateParams::new(vec![node.as_str().to_string()])?
            .serialize_request(&key)?
            .pem()?;
        Ok((key.serialize_pem(), csr))
    }

    /// CA certificate as DER.
    pub fn ca_der(&self) -> Result<CertificateDer<'static>, PkiError> {
        CertificateDer::from_pem_slice(self.ca_cert_pem.as_bytes())
            .map_err(|e| PkiError::Identity(format!("CA certificate PEM: {e}")))
    }

    /// Node certificate as DER.
    pub fn cert_der(&self) -> Result<CertificateDer<'static>, PkiError> {
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes())
            .map_err(|e| PkiError::Identity(format!("node certificate PEM: {e}")))
    }

    /// Node key as DER.
    pub fn key_der(&self) -> Result<PrivateKeyDer<'static>, PkiError> {
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| PkiError::Identity(format!("node key PEM: {e}")))
    }

    /// Checks that the certificate chains to the CA and names this node and role.
    pub fn validate(&self) -> Result<(), PkiError> {
        let leaf = self.cert_der()?;
        crate::tls::verify_chain(&leaf, &self.ca_der()?)
            .map_err(|e| PkiError::Identity(format!("node certificate: {e}")))?;
        let id = identity_from_cert(&leaf, &self.cluster_id)?;
        if id.node_id != self.node_id || id.role != self.role {
            return Err(PkiError::Identity(format!(
                "certificate is for {id}, credentials are for {}({})",
                self.node_id, self.role
            )));
        }
        if self.gossip_keys.is_empty() {
            return Err(PkiError::Identity("no gossip key".into()));
        }
        Ok(())
    }

    /// Writes the credentials into `dir` (keys 0600).
    pub fn save(&self, dir: &Path) -> Result<(), PkiError> {
        write_file(&dir.join(CA_CERT), self.ca_cert_pem.as_bytes(), 0o644)?;
        write_file(&dir.join(NODE_CERT), self.cert_pem.as_bytes(), 0o644)?;
        write_file(&dir.join(NODE_KEY), self.key_pem.as_bytes(), 0o600)?;
        let meta = NodeMeta {
            cluster_id: self.cluster_id.clone(),
            node_id: self.node_id.clone(),
            role: self.role,
            gossip_keys: self.gossip_keys.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&meta).map_err(|e| PkiError::BadFile {
            path: dir.join(NODE_META),
            reason: e.to_string(),
        })?;
        write_file(&dir.join(NODE_META), &bytes, 0o600)
    }

    /// True when `dir` holds node credentials.
    pub fn exist(dir: &Path) -> bool {
        dir.join(NODE_META).exists()
    }

    /// Loads and validates credentials from `dir`.
    pub fn load(dir: &Path) -> Result<Self, PkiError> {
        let key_path = dir.join(NODE_KEY);
        let meta_path = dir.join(NODE_META);
        check_private(&key_path)?;
        check_private(&meta_path)?;
        let meta: NodeMeta =
            serde_json::from_str(&read_file(&meta_path)?).map_err(|e| PkiError::BadFile {
                path: meta_path.clone(),
                reason: e.to_string(),
            })?;
        let creds = Self {
            cluster_id: meta.cluster_id,
            node_id: meta.node_id,
            role: meta.role,
            ca_cert_pem: read_file(&dir.join(CA_CERT))?,
            cert_pem: read_file(&dir.join(NODE_CERT))?,
            key_pem: read_file(&key_path)?,
            gossip_keys: meta.gossip_keys,
        };
        creds.validate().map_err(|e| PkiError::BadFile {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(creds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::ClusterCa;

    #[test]
    fn issue_save_load_validate() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::init("c1").unwrap();
        let node = NodeId::new("s1").unwrap();
        let creds = ca.issue_local(&node, Role::Server).unwrap();
        creds.validate().unwrap();
        creds.save(dir.path()).unwrap();
        let back = NodeCredentials::load(dir.path()).unwrap();
        assert_eq!(back.node_id, node);
        assert_eq!(back.role, Role::Server);

        // Credentials claiming another role than the certificate are refused.
        let mut lie = creds.clone();
        lie.role = Role::Client;
        assert!(lie.validate().is_err());
        // A certificate from another CA is refused.
        let mut foreign = creds.clone();
        foreign.ca_cert_pem = ClusterCa::init("c1").unwrap().ca_cert_pem().to_string();
        assert!(foreign.validate().is_err());
    }
}
