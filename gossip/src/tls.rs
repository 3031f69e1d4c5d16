//! TLS for the QUIC RPC: mutual TLS between members (both sides present a certificate signed by
//! the cluster CA), and a server-authenticated-only mode for joining nodes that pin the CA by
//! fingerprint from their join token.

use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::identity::{PeerIdentity, Role};
use crate::pki::{NodeCredentials, PkiError, fingerprint, identity_from_cert};

/// ALPN of the mesh RPC protocol.
pub const ALPN: &[u8] = b"daros-mesh/1";
/// Server name used when a joining node connects (the join verifier ignores it).
pub const JOIN_SERVER_NAME: &str = "join.daros.invalid";

/// Errors building TLS configurations.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Credentials could not be decoded.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built.
    #[error("TLS client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// QUIC refused the TLS configuration.
    #[error("QUIC TLS configuration: {0}")]
    Quic(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn transport(idle: Duration) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(idle / 3));
    // Idle timeout bounds how long a call to a dead peer can hang on an open connection.
    if let Ok(v) = quinn::IdleTimeout::try_from(idle) {
        t.max_idle_timeout(Some(v));
    }
    Arc::new(t)
}

/// How long a QUIC connection to a silent peer survives (keep-alives every third of it). This
/// bounds how long a call on a cached connection to a dead node can hang.
pub const IDLE_TIMEOUT: Duration = Duration::from_millis(1500);

/// Checks that `leaf` is signed by `ca` (chain, validity, key usage).
pub fn verify_chain(leaf: &CertificateDer<'_>, ca: &CertificateDer<'static>) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).map_err(|e| e.to_string())?;
    let parsed = ParsedCertificate::try_from(leaf).map_err(|e| e.to_string())?;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        &roots,
        &[],
        UnixTime::now(),
        provider().signature_verification_algorithms.all,
    )
    .map_err(|e| e.to_string())
}

fn roots(creds: &NodeCredentials) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    roots.add(creds.ca_der()?)?;
    Ok(Arc::new(roots))
}

/// Server side of the RPC endpoint. Client certificates are verified against the cluster CA
/// when presented; a connection without one is accepted but can only call anonymous methods
/// (the join). A certificate from another CA fails the handshake.
pub fn server_config(creds: &NodeCredentials) -> Result<quinn::ServerConfig, TlsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(creds)?, provider())
        .allow_unauthenticated()
        .build()?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        // The CA certificate rides along so a joining node can pin it by fingerprint.
        .with_single_cert(vec![creds.cert_der()?, creds.ca_der()?], creds.key_der()?)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicServerConfig::try_from(tls).map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(quic));
    cfg.transport_config(transport(IDLE_TIMEOUT));
    Ok(cfg)
}

/// Client side for members: presents the node certificate, trusts only the cluster CA, and
/// checks the server's certificate names the node id it dials.
pub fn client_config(creds: &NodeCredentials) -> Result<quinn::ClientConfig, TlsError> {
    client_config_parts(
        creds.ca_der()?,
        Some((vec![creds.cert_der()?], creds.key_der()?)),
    )
}

/// Client configuration from parts (tests use it to present foreign or no certificates).
pub fn client_config_parts(
    trusted_ca: CertificateDer<'static>,
    identity: Option<(
        Vec<CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    )>,
) -> Result<quinn::ClientConfig, TlsError> {
    let mut r = RootCertStore::empty();
    r.add(trusted_ca)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(Arc::new(r));
    let mut tls = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key)?,
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    finish_client(tls)
}

fn finish_client(tls: rustls::ClientConfig) -> Result<quinn::ClientConfig, TlsError> {
    let quic = QuicClientConfig::try_from(tls).map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(quic));
    cfg.transport_config(transport(IDLE_TIMEOUT));
    Ok(cfg)
}

/// Client side for a joining node: no client certificate; the server must present a chain whose
/// CA has the pinned fingerprint and whose leaf is a server agent of cluster `cluster_id`... the
/// joining node does not know the cluster id yet, so any cluster id signed by that CA is accepted.
pub fn join_client_config(ca_fingerprint: [u8; 32]) -> Result<quinn::ClientConfig, TlsError> {
    let verifier = Arc::new(PinnedCaVerifier {
        ca_fingerprint,
        algs: provider().signature_verification_algorithms,
    });
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    finish_client(tls)
}

/// Verifies a server against a CA known only by fingerprint (the CA certificate is the last
/// certificate the server sends).
#[derive(Debug)]
struct PinnedCaVerifier {
    ca_fingerprint: [u8; 32],
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .find(|c| fingerprint(c) == self.ca_fingerprint)
            .ok_or_else(|| {
                rustls::Error::General(
                    "server did not present the CA pinned by the join token".into(),
                )
            })?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let parsed = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &roots,
            &[],
            now,
            self.algs.all,
        )?;
        // Only a server agent may admit nodes. The cluster id is whatever the CA signed.
        let (_, cert) = x509_parser::parse_x509_certificate(end_entity)
            .map_err(|_| rustls::Error::General("unparsable server certificate".into()))?;
        let cluster = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .and_then(|san| {
                san.value.general_names.iter().find_map(|n| match n {
                    x509_parser::extensions::GeneralName::URI(u) => u
                        .strip_prefix("daros://")
                        .and_then(|r| r.split('/').next())
                        .map(str::to_string),
                    _ => None,
                })
            })
            .ok_or_else(|| {
                rustls::Error::General("server certificate has no daros identity".into())
            })?;
        let id = identity_from_cert(end_entity, &cluster)
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        if id.role != Role::Server {
            return Err(rustls::Error::General(format!(
                "{id} is not a server agent and cannot admit nodes"
            )));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The verified identity of the peer of a QUIC connection, if it presented a certificate.
pub fn peer_identity(conn: &quinn::Connection, cluster_id: &str) -> Option<PeerIdentity> {
    let any = conn.peer_identity()?;
    let certs = any.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    let leaf = certs.first()?;
    match identity_from_cert(leaf, cluster_id) {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(peer = %conn.remote_address(), error = %e, "peer certificate has no usable identity");
            None
        }
    }
}
