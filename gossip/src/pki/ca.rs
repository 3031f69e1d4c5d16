//! The cluster certificate authority. Its key lives only on server agents (mode 0600 in their
//! data dir); it signs node certificates for nodes that present a valid join token.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

use super::cert::{self, CA_CERT_DAYS};
use super::files::{check_private, read_file, write_file};
use super::token::secrets_equal;
use super::{JoinToken, NodeCredentials, PkiError, hex};
use crate::identity::{NodeId, Role};
use crate::membership::GossipKey;

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const CLUSTER_SECRETS: &str = "cluster.json";

/// Secrets shared by the server agents besides the CA key.
#[derive(Clone, Serialize, Deserialize)]
struct ClusterSecrets {
    cluster_id: String,
    gossip_key: GossipKey,
    #[serde(with = "crate::membership::seal::hex32")]
    client_secret: [u8; 32],
    #[serde(with = "crate::membership::seal::hex32")]
    server_secret: [u8; 32],
}

/// What a server agent hands a new server agent at join time (inside mutual TLS): the CA key and
/// the cluster secrets, so that any server can admit nodes.
#[derive(Clone, Serialize, Deserialize)]
pub struct CaBundle {
    ca_key_pem: String,
    secrets: ClusterSecrets,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaBundle(<secret>)")
    }
}

/// The cluster CA together with the gossip key and the join secrets.
pub struct ClusterCa {
    ca_cert_pem: String,
    ca_key: KeyPair,
    secrets: ClusterSecrets,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterCa({})", self.secrets.cluster_id)
    }
}

impl ClusterCa {
    /// Creates a new cluster: CA key pair and certificate, a 256-bit gossip key, and one join
    /// secret per role.
    pub fn init(cluster_id: &str) -> Result<Self, PkiError> {
        NodeId::new(cluster_id).map_err(|_| {
            PkiError::Identity(format!(
                "cluster id {cluster_id:?} must be 1 to 63 characters of a-z, 0-9 and '-'"
            ))
        })?;
        let ca_key = KeyPair::generate()?;
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("daros cluster CA {cluster_id}"));
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        cert::validity(&mut p, CA_CERT_DAYS)?;
        let ca_cert = p.self_signed(&ca_key)?;
        Ok(Self {
            ca_cert_pem: ca_cert.pem(),
            ca_key,
            secrets: ClusterSecrets {
                cluster_id: cluster_id.to_string(),
                gossip_key: GossipKey::generate(1),
                client_secret: rand::random(),
                server_secret: rand::random(),
            },
        })
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.secrets.cluster_id
    }

    /// The CA certificate (PEM).
    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The current gossip key.
    pub fn gossip_key(&self) -> &GossipKey {
        &self.secrets.gossip_key
    }

    /// The key Secret values are sealed with in the replicated state: derived
    /// (HKDF-SHA256) from the server join secret, which only server agents
    /// hold, so every server of the cluster derives the same key and no
    /// client node can.
    pub fn secret_objects_key(&self) -> [u8; 32] {
        use ring::hkdf::{HKDF_SHA256, KeyType, Salt};
        struct Len32;
        impl KeyType for Len32 {
            fn len(&self) -> usize {
                32
            }
        }
        let salt = Salt::new(HKDF_SHA256, self.secrets.cluster_id.as_bytes());
        let prk = salt.extract(&self.secrets.server_secret);
        let mut out = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's 8160-byte limit: expand cannot fail.
        if let Ok(okm) = prk.expand(&[b"daros secret objects v1"], Len32) {
            let _ = okm.fill(&mut out);
        }
        out
    }

    /// SHA-256 of the CA certificate.
    pub fn fingerprint(&self) -> Result<[u8; 32], PkiError> {
        let der = CertificateDer::from_pem_slice(self.ca_cert_pem.as_bytes())
            .map_err(|e| PkiError::Identity(format!("CA certificate PEM: {e}")))?;
        Ok(cert::fingerprint(&der))
    }

    /// The join token admitting nodes in `role`.
    pub fn join_token(&self, role: Role) -> Result<JoinToken, PkiError> {
        Ok(JoinToken {
            role,
            secret: match role {
                Role::Server => self.secrets.server_secret,
                Role::Client => self.secrets.client_secret,
            },
            ca_fingerprint: self.fingerprint()?,
        })
    }

    /// Checks a presented token: right CA and right secret for its role.
    pub fn verify_token(&self, token: &JoinToken) -> Result<(), PkiError> {
        let ours = self.fingerprint()?;
        if token.ca_fingerprint != ours {
            return Err(PkiError::WrongCa {
                token: hex::encode(&token.ca_fingerprint),
                ours: hex::encode(&ours),
            });
        }
        let expected = match token.role {
            Role::Server => &self.secrets.server_secret,
            Role::Client => &self.secrets.client_secret,
        };
        if !secrets_equal(expected, &token.secret) {
            return Err(PkiError::BadSecret(token.role));
        }
        Ok(())
    }

    /// Signs a node certificate for the key in `csr_pem`. The identity written into the
    /// certificate is `node`/`role` as authorized by the token, whatever the CSR asks for.
    pub fn sign_csr(&self, csr_pem: &str, node: &NodeId, role: Role) -> Result<String, PkiError> {
        let csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| PkiError::Csr(e.to_string()))?;
        let params = cert::node_params(&self.secrets.cluster_id, node, role)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca_cert_pem, &self.ca_key)?;
        Ok(params.signed_by(&csr.public_key, &issuer)?.pem())
    }

    /// Issues credentials for a node whose key is generated right here (the server that runs
    /// `cluster init`).
    pub fn issue_local(&self, node: &NodeId, role: Role) -> Result<NodeCredentials, PkiError> {
        let key = KeyPair::generate()?;
        let params = cert::node_params(&self.secrets.cluster_id, node, role)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca_cert_pem, &self.ca_key)?;
        let cert = params.signed_by(&key, &issuer)?;
        Ok(NodeCredentials {
            cluster_id: self.secrets.cluster_id.clone(),
            node_id: node.clone(),
            role,
            ca_cert_pem: self.ca_cert_pem.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            gossip_keys: vec![self.secrets.gossip_key.clone()],
        })
    }

    /// The material a new server agent needs to act as a CA too.
    pub fn bundle(&self) -> CaBundle {
        CaBundle {
            ca_key_pem: self.ca_key.serialize_pem(),
            secrets: self.secrets.clone(),
        }
    }

    /// Rebuilds the CA from a bundle received at join time.
    pub fn from_bundle(ca_cert_pem: &str, bundle: CaBundle) -> Result<Self, PkiError> {
        let ca_key = KeyPair::from_pem(&bundle.ca_key_pem)?;
        let ca = Self {
            ca_cert_pem: ca_cert_pem.to_string(),
            ca_key,
            secrets: bundle.secrets,
        };
        ca.check_key_matches()?;
        Ok(ca)
    }

    fn check_key_matches(&self) -> Result<(), PkiError> {
        // Sign a throwaway certificate and verify it chains: proves key and cert belong together.
        let probe = NodeId::new("key-check").map_err(|e| PkiError::Identity(e.to_string()))?;
        let creds = self.issue_local(&probe, Role::Client)?;
        let leaf = CertificateDer::from_pem_slice(creds.cert_pem.as_bytes())
            .map_err(|e| PkiError::Identity(e.to_string()))?;
        let ca = CertificateDer::from_pem_slice(self.ca_cert_pem.as_bytes())
            .map_err(|e| PkiError::Identity(e.to_string()))?;
        crate::tls::verify_chain(&leaf, &ca)
            .map_err(|e| PkiError::Identity(format!("CA key does not match CA certificate: {e}")))
    }

    /// Writes the CA into `dir` (`ca.crt` 0644, `ca.key` and `cluster.json` 0600).
    pub fn save(&self, dir: &Path) -> Result<(), PkiError> {
        write_file(&dir.join(CA_CERT), self.ca_cert_pem.as_bytes(), 0o644)?;
        write_file(
            &dir.join(CA_KEY),
            self.ca_key.serialize_pem().as_bytes(),
            0o600,
        )?;
        let secrets = serde_json::to_vec_pretty(&self.secrets).map_err(|e| PkiError::BadFile {
            path: dir.join(CLUSTER_SECRETS),
            reason: e.to_string(),
        })?;
        write_file(&dir.join(CLUSTER_SECRETS), &secrets, 0o600)
    }

    /// True when `dir` holds a CA key (this node is a server agent).
    pub fn exists(dir: &Path) -> bool {
        dir.join(CA_KEY).exists()
    }

    /// Loads the CA from `dir`; refuses key files readable by others.
    pub fn load(dir: &Path) -> Result<Self, PkiError> {
        let key_path = dir.join(CA_KEY);
        if !key_path.exists() {
            return Err(PkiError::NoCaKey);
        }
        check_private(&key_path)?;
        let secrets_path = dir.join(CLUSTER_SECRETS);
        check_private(&secrets_path)?;
        let ca_cert_pem = read_file(&dir.join(CA_CERT))?;
        let ca_key = KeyPair::from_pem(&read_file(&key_path)?).map_err(|e| PkiError::BadFile {
            path: key_path.clone(),
            reason: e.to_string(),
        })?;
        let secrets: ClusterSecrets =
            serde_json::from_str(&read_file(&secrets_path)?).map_err(|e| PkiError::BadFile {
                path: secrets_path,
                reason: e.to_string(),
            })?;
        Ok(Self {
            ca_cert_pem,
            ca_key,
            secrets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::identity_from_cert;

    #[test]
    fn tokens_verify_only_for_their_role_and_ca() {
        let ca = ClusterCa::init("c1").unwrap();
        let other = ClusterCa::init("c1").unwrap();
        let client = ca.join_token(Role::Client).unwrap();
        let server = ca.join_token(Role::Server).unwrap();
        ca.verify_token(&client).unwrap();
        ca.verify_token(&server).unwrap();
        let mut forged = client.clone();
        forged.role = Role::Server;
        assert!(matches!(
            ca.verify_token(&forged),
            Err(PkiError::BadSecret(Role::Server))
        ));
        assert!(matches!(
            other.verify_token(&client),
            Err(PkiError::WrongCa { .. })
        ));
    }

    #[test]
    fn csr_is_signed_with_the_authorized_identity() {
        let ca = ClusterCa::init("c1").unwrap();
        let key = KeyPair::generate().unwrap();
        // The CSR asks for another name; the certificate carries the authorized one.
        let csr = CertificateParams::new(vec!["evil".to_string()])
            .unwrap()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        let node = NodeId::new("n7").unwrap();
        let pem = ca.sign_csr(&csr, &node, Role::Client).unwrap();
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let id = identity_from_cert(&der, "c1").unwrap();
        assert_eq!(id.node_id, node);
        assert_eq!(id.role, Role::Client);
        assert!(identity_from_cert(&der, "other-cluster").is_err());
        assert!(ca.sign_csr("garbage", &node, Role::Client).is_err());
    }

    #[test]
    fn save_load_and_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::init("c1").unwrap();
        ca.save(dir.path()).unwrap();
        let loaded = ClusterCa::load(dir.path()).unwrap();
        assert_eq!(loaded.fingerprint().unwrap(), ca.fingerprint().unwrap());
        let t = ca.join_token(Role::Client).unwrap();
        loaded.verify_token(&t).unwrap();
        let copy = ClusterCa::from_bundle(ca.ca_cert_pem(), ca.bundle()).unwrap();
        copy.verify_token(&t).unwrap();
        // A bundle whose key does not match the certificate is refused.
        let other = ClusterCa::init("c1").unwrap();
        assert!(ClusterCa::from_bundle(ca.ca_cert_pem(), other.bundle()).is_err());
        // A world-readable key is refused.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join(CA_KEY),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(matches!(
            ClusterCa::load(dir.path()),
            Err(PkiError::BadFile { .. })
        ));
    }
}
